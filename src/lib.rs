//! berth: a provisioning engine in the model of Juju's provisioner.
//!
//! Users declare applications, units and machines with constraints, bases
//! and placement; berth records that intent and turns it into cloud
//! instances. The modules, innermost first:
//!
//! - [`domain`]: pure types and decisions (constraints, bases, placement,
//!   names, charms, instance-type choice, zone choice, machine lifecycle,
//!   reconciliation planning), and the macros that declare word enums and
//!   checked names once.
//! - [`contracts`]: what the layers share: the provider trait and its
//!   types, the link from providers back to the controller, secrets.
//! - [`charms`]: loading charms from disk (`deploy ./wordpress`) and
//!   resolving a `deploy` argument to a charm.
//! - [`providers`]: the clouds, behind one trait.
//! - [`store`]: the state, in SQLite or PostgreSQL, and its change log.
//! - [`status`]: the one status view: its read of the store, the document
//!   kept from the change log, the cache the API serves, and the renderers
//!   (JSON, YAML, Juju's tables).
//! - [`engine`]: the provisioning engine's actors (provisioner, machine
//!   actors, zone tracker, provider broker, container provisioner).
//! - [`config`]: the configuration file and `BERTH_*` environment.
//! - [`tls`]: `[tls]`, the controller's own certificate authority, and the
//!   TLS configurations of the API and its clients.
//! - [`app`]: `berth serve`, which starts all of the above.
//! - [`plan`]: what a command would launch and remove, where and at what
//!   price, from the store's rehearsal of it; budgets.
//! - [`metrics`]: the engine's counters, gauges and histograms, rendered
//!   for Prometheus.
//! - [`priority`]: the threads whose work gives way to provisioning.
//! - [`api`]: the actix-web JSON API, provider webhooks, agent check-in,
//!   auth and the OpenAPI document; `GET /v1/status` serves [`status`].
//! - [`cli`]: the `berth` command line (an HTTP client of the API with
//!   Juju's command names; `berth status` prints with [`status`]), the
//!   machine agent, and `berth serve`'s arguments.

pub mod api;
pub mod app;
pub mod charms;
pub mod cli;
pub mod config;
pub mod contracts;
pub mod domain;
pub mod engine;
pub mod metrics;
pub mod plan;
pub mod priority;
pub mod providers;
pub mod status;
pub mod store;
pub mod tls;
