//! Why a store operation failed: [`StoreError`], which the API maps to a
//! status code and the engine to a retry or a reload.

use std::sync::Arc;

/// Why a store operation failed. The first group is the caller's doing and
/// changes nothing; the rest are faults of the store itself.
#[derive(Clone, Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    Conflict(String),
    #[error("{0}")]
    Unauthorized(String),
    #[error("invalid database url {0:?}: expected postgres://... or a SQLite file path")]
    BadUrl(String),
    #[error("cannot connect to the database: {0}")]
    Connect(String),
    #[error("cannot migrate the database: {0}")]
    Migration(String),
    #[error("database error")]
    Database(#[source] Arc<diesel::result::Error>),
    #[error("stored data is inconsistent: {0}")]
    Invariant(String),
    #[error("the store's writer has stopped")]
    WriterGone,
}

impl From<diesel::result::Error> for StoreError {
    fn from(e: diesel::result::Error) -> StoreError {
        StoreError::Database(Arc::new(e))
    }
}

impl From<r2d2::Error> for StoreError {
    fn from(e: r2d2::Error) -> StoreError {
        StoreError::Connect(e.to_string())
    }
}
