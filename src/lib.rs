//! berth: a provisioning engine in the model of Juju's provisioner.
//!
//! Users declare applications, units and machines with constraints, bases
//! and placement; berth records that intent and turns it into cloud
//! instances. The modules, innermost first:
//!
//! - [`domain`]: pure types and decisions (constraints, bases, placement,
//!   names, charms, instance-type choice, zone choice, machine lifecycle).
//! - [`charms`]: loading charms from disk (`deploy ./wordpress`) and
//!   resolving a `deploy` argument to a charm.

pub mod charms;
pub mod config;
pub mod domain;
pub mod engine;
pub mod providers;
pub mod store;
