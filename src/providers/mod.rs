//! Providers: the clouds berth starts instances on, each an implementation
//! of [`crate::contracts::provider::Provider`].
//!
//! - [`sim`]: the simulated cloud, berth's embedded default.
//! - [`manual`]: existing hosts enlisted over SSH (`ssh:` placement),
//!   beside whichever cloud the model uses.
//! - `ec2`: Amazon EC2, through the AWS SDK (cargo feature `ec2`, on by
//!   default).

#[cfg(feature = "ec2")]
pub mod ec2;
pub mod manual;
pub mod sim;
