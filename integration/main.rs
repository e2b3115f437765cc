//! berth's integration tests, built as one binary.
//!
//! The store tests run every rule on both backends: SQLite in a temporary
//! directory, and a real PostgreSQL server the harness starts itself (see
//! [`support::postgres`]). The API tests run the HTTP server over SQLite
//! (see [`api`]); the command line tests run `berth`'s commands against
//! it (see [`cli`]). The EC2 tests run the engine against moto's EC2
//! server, which the harness also starts itself (see [`support::moto`]).

mod api;
mod applications;
mod cli;
#[cfg(feature = "ec2")]
mod ec2;
mod engine;
mod process;
mod serve;
mod store;
mod support;
