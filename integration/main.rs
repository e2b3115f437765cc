//! berth's integration tests, built as one binary.
//!
//! Every test that runs berth starts it with one harness,
//! [`support::app::spawn_app_with`]: a random loopback port, a data
//! directory and a database of its own, with options for the store
//! (SQLite, or a real PostgreSQL server the harness starts itself, see
//! [`support::postgres`]), the cloud (the simulated cloud, or a provider the
//! test builds, such as EC2 against moto's server, see [`support::moto`]),
//! the engine on or off, and how berth runs (wired in this process,
//! through `berth serve`'s own start-up, or as a `berth serve` process).
//! Tests wait for conditions with [`support::eventually`], never for a
//! fixed time.
//!
//! The store tests and the engine tests run on both backends; the API
//! tests (see [`api`]) and the command line tests (see [`cli`]) run the
//! HTTP server over SQLite without an engine. The dashboard's tests (see
//! [`dashboard`]) use it in a headless Chromium driven over WebDriver
//! ([`support::webdriver`]).

mod api;
mod applications;
mod auth;
mod charm_upload;
mod cli;
#[cfg(feature = "ec2")]
mod cluster;
mod crash;
mod dashboard;
#[cfg(feature = "ec2")]
mod ec2;
mod engine;
mod hostile_input;
mod load;
mod manual;
mod plans;
mod process;
mod serve;
mod sim_faults;
mod sim_shared;
mod store;
mod store_faults;
#[cfg(feature = "test-hooks")]
mod supervision;
mod support;
mod tls;
