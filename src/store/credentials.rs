//! The controller's own credentials: the admin token's hash. (Machine
//! agents' credentials live with their machines; see
//! [`crate::store::lifecycle`].)

use diesel::prelude::*;

use crate::contracts::secrets::{hash_secret, new_secret, Secret};
use crate::store::schema::credentials;
use crate::store::writer::Tx;
use crate::store::{Store, StoreError};

/// The name of the admin token's hash in the credentials table.
const ADMIN_TOKEN: &str = "admin-token";

/// Makes a new admin token and stores its hash.
fn insert_admin_token(tx: &mut Tx<'_>) -> Result<Secret, StoreError> {
    let token = new_secret();
    diesel::insert_into(credentials::table)
        .values((
            credentials::name.eq(ADMIN_TOKEN),
            credentials::hash.eq(hash_secret(token.expose())),
            credentials::created_at_ms.eq(tx.now_ms),
        ))
        .execute(tx.conn)?;
    Ok(token)
}

impl Store {
    /// Creates the admin token on first start and returns it; later starts
    /// return `None` (only its hash is kept).
    ///
    /// # Errors
    ///
    /// [`StoreError::Database`] only.
    pub async fn ensure_admin_token(&self) -> Result<Option<Secret>, StoreError> {
        self.write(|tx| {
            let exists: i64 = credentials::table
                .filter(credentials::name.eq(ADMIN_TOKEN))
                .count()
                .get_result(tx.conn)?;
            if exists > 0 {
                return Ok(None);
            }
            insert_admin_token(tx).map(Some)
        })
        .await
    }

    /// Replaces the admin token (when its file was lost) and returns the new
    /// one.
    ///
    /// # Errors
    ///
    /// [`StoreError::Database`] only.
    pub async fn rotate_admin_token(&self) -> Result<Secret, StoreError> {
        self.write(|tx| {
            diesel::delete(credentials::table.find(ADMIN_TOKEN)).execute(tx.conn)?;
            insert_admin_token(tx)
        })
        .await
    }

    /// The admin token's hash, for the API's authentication.
    ///
    /// # Errors
    ///
    /// [`StoreError::NotFound`] before [`Store::ensure_admin_token`].
    pub fn admin_token_hash(&self) -> Result<String, StoreError> {
        self.read(|conn| {
            credentials::table
                .find(ADMIN_TOKEN)
                .select(credentials::hash)
                .get_result(conn)
                .optional()?
                .ok_or_else(|| StoreError::NotFound("no admin token has been created".into()))
        })
    }
}
