//! What the layers share, kept where each of them can import it without an
//! import running back up: the store, the providers, the engine and the API
//! all depend on these, and these depend only on [`crate::domain`].
//!
//! - [`provider`]: the provider trait and its types (launch requests,
//!   failures, zones offered, instance changes) and [`provider::ControllerLink`],
//!   the way a provider reports back to the controller.
//! - [`secrets`]: secrets, how they are made, hashed and checked.
//! - [`addresses`]: the host a URL names, and whether it is loopback.

pub mod addresses;
pub mod provider;
pub mod secrets;
