//! The pure core of berth: the rules of constraints, bases, placement, names,
//! charms, instance-type choice, zone choice, explanations of both, the
//! machine lifecycle and reconciliation planning.
//!
//! Nothing in here performs I/O or knows about actix, diesel, AWS or HTTP.
//! Strings are parsed into these types once, at the edge (API, CLI, store),
//! and everything inside works on the parsed values.

pub mod base;
pub mod charm;
pub mod constraints;
pub mod explain;
pub mod hardware;
pub mod instance;
pub mod instance_types;
pub mod machine;
pub mod names;
pub mod placement;
pub mod reconcile;
pub mod texts;
pub mod words;
pub mod zones;
