//! Status: the one view of the whole model that `berth status` prints and
//! `GET /v1/status` serves, from the store's read to the text.
//!
//! - [`snapshot`]: what status reads from the store, at one revision: the
//!   whole state ([`snapshot::StatusSnapshot`]), or only what status shows
//!   that changed after a revision ([`snapshot::StatusDelta`]).
//! - [`view`]: the view itself, `juju status --format=json`'s shape, made
//!   from a snapshot.
//! - [`document`]: the same view kept as rendered pieces and brought
//!   forward by deltas, so that a request costs what changed since the last
//!   one; it renders the same JSON as [`view`].
//! - [`filter`]: a part of the status (applications, units, machine
//!   ranges), rendered from the document's pieces it selects.
//! - [`cache`]: the document kept fresh in the background and its newest
//!   rendering shared by concurrent requests (and the machine counts
//!   `/metrics` shows), and its gzip for clients that accept it.
//! - [`rendering`]: the whole status rendered in segments, which the next
//!   rendering shares where they come out the same, so that a gzip of it
//!   compresses only what changed.
//! - [`gzip`]: a large document compressed on every core into one gzip
//!   member.
//! - [`cores`]: large jobs shared among the machine's cores, their results
//!   in order.
//! - [`text`]: the view as text: Juju's tables, JSON on one line, YAML.
//!
//! Status depends on the store and the domain only. The API's route and
//! the command line call into it; nothing here knows of HTTP routes or
//! command-line arguments.

pub mod cache;
pub mod cores;
pub mod document;
pub mod filter;
pub mod gzip;
pub mod rendering;
pub mod snapshot;
pub mod text;
pub mod view;
