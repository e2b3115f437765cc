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
    #[error("database error: {0}")]
    Database(#[source] Arc<diesel::result::Error>),
    #[error("stored data is inconsistent: {0}")]
    Invariant(String),
    #[error("the store's writer has stopped")]
    WriterGone,
}

impl StoreError {
    /// Whether the store could not be reached (rather than refused the
    /// operation): the API answers 503 and callers may try again.
    pub fn is_unavailable(&self) -> bool {
        matches!(self, StoreError::Connect(_) | StoreError::WriterGone)
    }
}

/// Whether a database error means the connection or the server went away,
/// rather than anything about the statement.
fn connection_lost(e: &diesel::result::Error) -> Option<String> {
    use diesel::result::{DatabaseErrorKind, Error};
    match e {
        Error::DatabaseError(
            DatabaseErrorKind::ClosedConnection | DatabaseErrorKind::UnableToSendCommand,
            info,
        ) => Some(info.message().to_string()),
        Error::DatabaseError(_, info) => {
            let message = info.message();
            // PostgreSQL's words when it shuts down or drops a session.
            let lost = [
                "terminating connection",
                "server closed the connection",
                "no connection to the server",
                "connection to server",
                "the database system is shutting down",
                "the database system is starting up",
                "could not receive data from server",
            ]
            .iter()
            .any(|words| message.contains(words));
            lost.then(|| message.to_string())
        }
        Error::BrokenTransactionManager => {
            Some("the connection's transaction state is broken".into())
        }
        _ => None,
    }
}

impl From<diesel::result::Error> for StoreError {
    fn from(e: diesel::result::Error) -> StoreError {
        match connection_lost(&e) {
            Some(why) => StoreError::Connect(format!(
                "the database connection was lost ({}); try again shortly",
                why.trim()
            )),
            None => StoreError::Database(Arc::new(e)),
        }
    }
}

impl From<r2d2::Error> for StoreError {
    fn from(e: r2d2::Error) -> StoreError {
        StoreError::Connect(e.to_string())
    }
}
