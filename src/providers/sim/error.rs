//! Why the simulated cloud could not open, or refused a call: [`SimError`].

use std::path::PathBuf;

use crate::domain::instance_types::CatalogueError;

/// Why the simulated cloud could not open, or refused an administrative
/// call.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error("invalid [provider.sim] settings: {0}")]
    Config(String),
    #[error("cannot read the catalogue {}: {source}", .path.display())]
    CatalogueRead {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("invalid catalogue {}: {source}", .path.display())]
    Catalogue {
        path: PathBuf,
        #[source]
        source: CatalogueError,
    },
    #[error("the embedded catalogue is broken: {0}")]
    EmbeddedCatalogue(#[source] CatalogueError),
    #[error("cannot open the simulated cloud's ledger {}: {reason}", .path.display())]
    Ledger { path: PathBuf, reason: String },
    #[error("cannot read the simulated cloud's ledger {}: {reason}", .path.display())]
    LedgerRead { path: PathBuf, reason: String },
    #[error(
        "the ledger {} is in use by another simulated cloud: expected one cloud per ledger file",
        .path.display()
    )]
    LedgerInUse { path: PathBuf },
    #[error("cannot use the simulated cloud's shared ledger: {0}")]
    SharedLedger(String),
    #[error("the ledger could not record the change: {0}")]
    LedgerWrite(String),
    #[error("no instance {0:?} in the simulated cloud")]
    UnknownInstance(String),
    #[error("no zone {zone:?} in the simulated cloud: expected one of {known}")]
    UnknownZone { zone: String, known: String },
    #[error("no instance type {0:?} in the simulated cloud's catalogue")]
    UnknownInstanceType(String),
    #[error("{0}")]
    FailureRate(String),
    #[error("{0}")]
    Faults(String),
}
