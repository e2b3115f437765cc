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
    /// The database answers but cannot write: its disk is full or its file
    /// is read-only. Nothing was written; reads still work.
    #[error(
        "the store cannot write ({0}): nothing was changed; free space on the database's disk \
         or make it writable, then try again"
    )]
    CannotWrite(String),
    /// Another connection or process holds the database's lock for longer
    /// than the store waits (SQLite's busy timeout), or PostgreSQL gave up
    /// on a lock or a serialization: nothing was written, and the same
    /// operation may succeed shortly.
    #[error("the database is busy ({0}): nothing was changed; try again shortly")]
    Busy(String),
}

impl StoreError {
    /// Whether the store could not be reached (rather than refused the
    /// operation): the API answers 503 and callers may try again.
    pub fn is_unavailable(&self) -> bool {
        matches!(self, StoreError::Connect(_) | StoreError::WriterGone)
    }
}

/// Whether the database's `message` holds any of `words`.
fn says_any(message: &str, words: &[&str]) -> bool {
    words.iter().any(|words| message.contains(words))
}

/// Whether a database error means the database cannot write at all (a
/// full disk, a read-only file or file system), rather than anything about
/// the statement; SQLite's and PostgreSQL's words.
fn cannot_write(e: &diesel::result::Error) -> Option<String> {
    let diesel::result::Error::DatabaseError(_, info) = e else {
        return None;
    };
    let message = info.message();
    let cannot = says_any(
        message,
        &[
            // SQLite: SQLITE_FULL, SQLITE_READONLY, SQLITE_IOERR, SQLITE_CANTOPEN.
            "database or disk is full",
            "attempt to write a readonly database",
            "disk I/O error",
            "unable to open database file",
            // PostgreSQL: disk_full (53100) and a read-only server.
            "No space left on device",
            "could not extend file",
            "in a read-only transaction",
        ],
    );
    cannot.then(|| message.trim().to_string())
}

/// Whether a database error means the database is held by someone else
/// for now (a lock it could not take in time), rather than anything about
/// the statement; SQLite's and PostgreSQL's words.
fn busy(e: &diesel::result::Error) -> Option<String> {
    use diesel::result::{DatabaseErrorKind, Error};
    let Error::DatabaseError(kind, info) = e else {
        return None;
    };
    let message = info.message();
    let held = matches!(kind, DatabaseErrorKind::SerializationFailure)
        || says_any(
            message,
            &[
                // SQLite: SQLITE_BUSY and SQLITE_LOCKED.
                "database is locked",
                "database table is locked",
                // PostgreSQL: lock_not_available (55P03) and a lock timeout.
                "could not obtain lock",
                "canceling statement due to lock timeout",
            ],
        );
    held.then(|| message.trim().to_string())
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
            let lost = says_any(
                message,
                &[
                    "terminating connection",
                    "server closed the connection",
                    "no connection to the server",
                    "connection to server",
                    "the database system is shutting down",
                    "the database system is starting up",
                    "could not receive data from server",
                ],
            );
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
        if let Some(why) = connection_lost(&e) {
            return StoreError::Connect(format!(
                "the database connection was lost ({}); try again shortly",
                why.trim()
            ));
        }
        if let Some(why) = busy(&e) {
            return StoreError::Busy(why);
        }
        match cannot_write(&e) {
            Some(why) => StoreError::CannotWrite(why),
            None => StoreError::Database(Arc::new(e)),
        }
    }
}

impl From<r2d2::Error> for StoreError {
    fn from(e: r2d2::Error) -> StoreError {
        StoreError::Connect(e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use diesel::result::{DatabaseErrorKind, Error};

    use super::*;

    fn database_error(message: &str) -> StoreError {
        Error::DatabaseError(DatabaseErrorKind::Unknown, Box::new(message.to_string())).into()
    }

    #[test]
    fn a_full_or_read_only_database_cannot_write_and_says_what_to_do() {
        for message in [
            "database or disk is full",
            "attempt to write a readonly database",
            "could not extend file \"base/16384/16385\": No space left on device",
            "cannot execute INSERT in a read-only transaction",
        ] {
            let error = database_error(message);
            assert!(
                matches!(error, StoreError::CannotWrite(_)),
                "{message}: {error:?}"
            );
            let text = error.to_string();
            assert!(text.contains(message), "{text}");
            assert!(text.contains("nothing was changed"), "{text}");
            assert!(!error.is_unavailable(), "the connection itself is fine");
        }
    }

    #[test]
    fn a_database_held_by_another_is_busy_and_says_to_try_again() {
        for message in [
            "database is locked",
            "database table is locked",
            "could not obtain lock on row in relation \"machines\"",
            "canceling statement due to lock timeout",
        ] {
            let error = database_error(message);
            assert!(matches!(error, StoreError::Busy(_)), "{message}: {error:?}");
            let text = error.to_string();
            assert!(
                text.contains(message) && text.contains("try again shortly"),
                "{text}"
            );
        }
        let conflict: StoreError = Error::DatabaseError(
            DatabaseErrorKind::SerializationFailure,
            Box::new("could not serialize access due to concurrent update".to_string()),
        )
        .into();
        assert!(matches!(conflict, StoreError::Busy(_)), "{conflict:?}");
    }

    #[test]
    fn other_database_errors_stay_database_errors() {
        let error = database_error("UNIQUE constraint failed: machines.id");
        assert!(matches!(error, StoreError::Database(_)), "{error:?}");
        let error = database_error("terminating connection due to administrator command");
        assert!(error.is_unavailable(), "{error:?}");
    }
}
