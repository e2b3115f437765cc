//! The status response, kept per change-log revision.
//!
//! Reading and rendering the whole state costs tens of milliseconds with
//! thousands of machines, while the state changes far less often than
//! people and tools read it. So the rendered JSON is kept with the
//! revision it reflects:
//!
//! - a request whose revision (the store's head when it arrives) is already
//!   rendered gets those bytes at once;
//! - otherwise one request renders the state and the others that arrive
//!   meanwhile wait for that one rendering instead of doing their own.
//!
//! # Guarantees
//!
//! A response is never older than the store's head when the request
//! arrived, so a client sees its own acknowledged writes (the head moves
//! before a write is acknowledged).

use std::sync::Mutex;

use actix_web::web::Bytes;

use crate::api::errors::blocking;
use crate::api::status::status_view;
use crate::store::{Store, StoreError};

#[derive(Default)]
pub struct StatusCache {
    /// The newest rendering and the revision it reflects.
    latest: Mutex<Option<(i64, Bytes)>>,
    /// Held by the one request that is rendering.
    rendering: tokio::sync::Mutex<()>,
}

impl StatusCache {
    fn at_least(&self, revision: i64) -> Option<Bytes> {
        let latest = self
            .latest
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        latest
            .as_ref()
            .filter(|(rendered, _)| *rendered >= revision)
            .map(|(_, body)| body.clone())
    }

    /// The status JSON as of the store's head (or later).
    ///
    /// # Errors
    ///
    /// The store's error if the state cannot be read.
    pub async fn get(&self, store: &Store, cloud: &str) -> Result<Bytes, StoreError> {
        let wanted = store.revision();
        if let Some(body) = self.at_least(wanted) {
            return Ok(body);
        }
        let _rendering = self.rendering.lock().await;
        // Someone may have rendered what we need while we waited.
        if let Some(body) = self.at_least(wanted) {
            return Ok(body);
        }
        let reader = store.clone();
        let cloud = cloud.to_string();
        let (revision, body) = blocking(move || {
            let snapshot = reader.status()?;
            let body = serde_json::to_vec(&status_view(&snapshot, &cloud))
                .map_err(|e| StoreError::Invariant(format!("cannot render status: {e}")))?;
            Ok((snapshot.revision, Bytes::from(body)))
        })
        .await?;
        let mut latest = self
            .latest
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if latest.as_ref().is_none_or(|(kept, _)| *kept < revision) {
            *latest = Some((revision, body.clone()));
        }
        Ok(body)
    }
}
