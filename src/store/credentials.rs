//! The controller's own credentials: the admin token's hash, and the
//! model's secrets. (Machine agents' credentials live with their machines;
//! see [`crate::store::lifecycle`].)
//!
//! The model's secrets (the admin token, the webhook secret) are kept in
//! the store itself (`model_secrets`), so that every controller sharing the
//! database uses the same ones: the first controller makes them, the others
//! read them, and none replaces them. A controller writes the admin token
//! into its own data directory for the local command line.

use diesel::prelude::*;

use crate::contracts::secrets::{hash_secret, new_secret, secret_matches, Secret};
use crate::store::db::per_backend;
use crate::store::schema::{credentials, model_secrets};
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

/// The admin token's name among the model's secrets.
pub const ADMIN_TOKEN_SECRET: &str = "admin-token";
/// The webhook secret's name among the model's secrets.
pub const WEBHOOK_SECRET: &str = "webhook-secret";

/// The model's secret `name`, if it has been made.
fn read_secret(tx: &mut Tx<'_>, name: &str) -> Result<Option<Secret>, StoreError> {
    let value: Option<String> = model_secrets::table
        .find(name)
        .select(model_secrets::value)
        .get_result(tx.conn)
        .optional()?;
    Ok(value.map(Secret::new))
}

/// Stores `secret` as the model's `name` unless another controller stored
/// one first, and returns the one that stands.
fn insert_secret(tx: &mut Tx<'_>, name: &str, secret: Secret) -> Result<Secret, StoreError> {
    let insert = diesel::insert_into(model_secrets::table)
        .values((
            model_secrets::name.eq(name),
            model_secrets::value.eq(secret.expose()),
            model_secrets::created_at_ms.eq(tx.now_ms),
        ))
        .on_conflict_do_nothing();
    per_backend!(tx.conn, c => insert.execute(c)?);
    read_secret(tx, name)?
        .ok_or_else(|| StoreError::Invariant(format!("the model's {name} was not stored")))
}

impl Store {
    /// The model's admin token: made (with its hash) by the first
    /// controller, read by every later one. A store from before the token
    /// was kept whole has only its hash: then `on_disk`, the token from a
    /// data directory, is taken if it matches, and otherwise a new token
    /// replaces the old one (which nobody can produce any more).
    ///
    /// # Errors
    ///
    /// [`StoreError::Database`] only.
    pub async fn model_admin_token(&self, on_disk: Option<Secret>) -> Result<Secret, StoreError> {
        self.write(move |tx| {
            if let Some(token) = read_secret(tx, ADMIN_TOKEN_SECRET)? {
                return Ok(token);
            }
            let hash: Option<String> = credentials::table
                .find(ADMIN_TOKEN)
                .select(credentials::hash)
                .get_result(tx.conn)
                .optional()?;
            let known = on_disk.filter(|token| {
                hash.as_deref()
                    .is_some_and(|hash| secret_matches(token.expose(), hash))
            });
            let token = match known {
                Some(token) => token,
                None => {
                    diesel::delete(credentials::table.find(ADMIN_TOKEN)).execute(tx.conn)?;
                    insert_admin_token(tx)?
                }
            };
            insert_secret(tx, ADMIN_TOKEN_SECRET, token)
        })
        .await
    }

    /// The model's secret `name`: made from `fresh` by the first controller
    /// that asks, read by every later one.
    ///
    /// # Errors
    ///
    /// [`StoreError::Database`] only.
    pub async fn model_secret(
        &self,
        name: &'static str,
        fresh: Secret,
    ) -> Result<Secret, StoreError> {
        self.write(move |tx| match read_secret(tx, name)? {
            Some(secret) => Ok(secret),
            None => insert_secret(tx, name, fresh),
        })
        .await
    }

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
