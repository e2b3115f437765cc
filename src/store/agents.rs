//! Machine agents and the controller's own credentials: the one-time
//! password exchange, heartbeats, and the admin token's hash.
//!
//! Only SHA-256 hashes of secrets are stored. The secrets are 256-bit
//! random values, so a fast hash is enough (nothing to brute-force), and
//! comparisons are made in constant time.

use diesel::prelude::*;
use rand::RngCore;
use sha2::{Digest, Sha256};

use crate::domain::machine::{transition, Event, Jitter, MachineState, Policy};
use crate::domain::names::MachineId;
use crate::providers::Secret;
use crate::store::machines::{load_machine, save_machine_tx, MachineUpdate};
use crate::store::records::{MachineRecord, MachineRow};
use crate::store::schema::{credentials, machines};
use crate::store::writer::Tx;
use crate::store::{Origin, Store, StoreError};

/// The name of the admin token's hash in the credentials table.
const ADMIN_TOKEN: &str = "admin-token";

/// A fresh random secret: 32 bytes, hex.
pub fn new_secret() -> Secret {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    Secret::new(to_hex(&bytes))
}

fn to_hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut hex = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        hex.push(char::from(DIGITS[usize::from(b >> 4)]));
        hex.push(char::from(DIGITS[usize::from(b & 0x0f)]));
    }
    hex
}

/// The stored form of a secret.
pub fn hash_secret(secret: &str) -> String {
    to_hex(&Sha256::digest(secret.as_bytes()))
}

/// Whether `secret` hashes to `stored_hash`, in time independent of where
/// they differ.
pub fn secret_matches(secret: &str, stored_hash: &str) -> bool {
    let given = hash_secret(secret);
    given.len() == stored_hash.len()
        && given
            .bytes()
            .zip(stored_hash.bytes())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
}

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
    /// A machine agent exchanges its one-time password for the machine's
    /// permanent credential. The password works once; the machine becomes
    /// started.
    ///
    /// # Errors
    ///
    /// [`StoreError::NotFound`]; [`StoreError::Unauthorized`] for a wrong
    /// or already used password; [`StoreError::Conflict`] (nothing changed,
    /// the password still works) while the machine is `starting`, i.e. its
    /// agent came before the engine recorded its instance.
    pub async fn agent_connect(
        &self,
        id: MachineId,
        one_time_password: Secret,
    ) -> Result<Secret, StoreError> {
        self.write(move |tx| {
            tx.set_origin(Origin::Agent);
            let row: Option<MachineRow> = machines::table
                .find(id.to_string())
                .select(MachineRow::as_select())
                .get_result(tx.conn)
                .optional()?;
            let row = row.ok_or_else(|| StoreError::NotFound(format!("machine {id} not found")))?;
            let valid = row
                .otp_hash
                .as_deref()
                .is_some_and(|hash| secret_matches(one_time_password.expose(), hash));
            if !valid {
                return Err(StoreError::Unauthorized(format!(
                    "machine {id}: the one-time password is wrong or was already used"
                )));
            }
            let record = MachineRecord::try_from(row)?;
            if record.state() == MachineState::Starting {
                // The instance runs but the engine has not recorded it yet:
                // taking the password now would leave the machine starting
                // with no agent to come. Nothing is changed; the agent
                // tries again.
                return Err(StoreError::Conflict(format!(
                    "machine {id} is still starting: its instance is not recorded yet; try again"
                )));
            }
            let credential = new_secret();
            let credential_hash = hash_secret(credential.expose());
            match transition(
                &record.machine,
                &Event::AgentConnected,
                &Policy::default(),
                Jitter::NONE,
            ) {
                // The exchange and the transition in one statement.
                Ok(step) => save_machine_tx(
                    tx,
                    &id,
                    &step.next,
                    &MachineUpdate {
                        credential_hash: Some(credential_hash),
                        heartbeat_ms: Some(tx.now_ms),
                        ..MachineUpdate::default()
                    },
                )?,
                Err(_) => {
                    diesel::update(machines::table.find(id.to_string()))
                        .set((
                            machines::otp_hash.eq(None::<String>),
                            machines::credential_hash.eq(credential_hash),
                            machines::last_heartbeat_ms.eq(tx.now_ms),
                        ))
                        .execute(tx.conn)?;
                }
            }
            Ok(credential)
        })
        .await
    }

    /// A machine agent says it is alive; a machine shown `down` is started
    /// again.
    ///
    /// # Errors
    ///
    /// [`StoreError::NotFound`]; [`StoreError::Unauthorized`] for a wrong
    /// credential.
    pub async fn agent_heartbeat(
        &self,
        id: MachineId,
        credential: Secret,
    ) -> Result<MachineState, StoreError> {
        self.write(move |tx| {
            tx.set_origin(Origin::Agent);
            let record = load_machine(tx, &id)?;
            let stored: Option<String> = machines::table
                .find(id.to_string())
                .select(machines::credential_hash)
                .get_result(tx.conn)?;
            if !stored.is_some_and(|hash| secret_matches(credential.expose(), &hash)) {
                return Err(StoreError::Unauthorized(format!(
                    "machine {id}: wrong agent credential"
                )));
            }
            diesel::update(machines::table.find(id.to_string()))
                .set(machines::last_heartbeat_ms.eq(tx.now_ms))
                .execute(tx.conn)?;
            if record.state() == MachineState::Down {
                let step = transition(
                    &record.machine,
                    &Event::AgentConnected,
                    &Policy::default(),
                    Jitter::NONE,
                )
                .map_err(|e| StoreError::Invariant(e.to_string()))?;
                save_machine_tx(tx, &id, &step.next, &MachineUpdate::default())?;
                return Ok(step.next.state);
            }
            Ok(record.state())
        })
        .await
    }

    /// Agents the provider vouches for (the simulated cloud's) are alive:
    /// their heartbeat time is now, and those shown `down` are started
    /// again. One statement per thousand machines.
    ///
    /// # Errors
    ///
    /// [`StoreError::Database`] only; unknown machines are ignored.
    pub async fn agents_alive(&self, ids: Vec<MachineId>) -> Result<(), StoreError> {
        self.write(move |tx| {
            tx.set_origin(Origin::Agent);
            let keys: Vec<String> = ids.iter().map(ToString::to_string).collect();
            for chunk in keys.chunks(1000) {
                diesel::update(machines::table.filter(machines::id.eq_any(chunk)))
                    .set(machines::last_heartbeat_ms.eq(tx.now_ms))
                    .execute(tx.conn)?;
                let down: Vec<String> = machines::table
                    .filter(machines::id.eq_any(chunk))
                    .filter(machines::state.eq(MachineState::Down.as_str()))
                    .select(machines::id)
                    .load(tx.conn)?;
                for id in down {
                    let id: MachineId = crate::store::records::stored("machine id", &id)?;
                    let record = load_machine(tx, &id)?;
                    if let Ok(step) = transition(
                        &record.machine,
                        &Event::AgentConnected,
                        &Policy::default(),
                        Jitter::NONE,
                    ) {
                        save_machine_tx(tx, &id, &step.next, &MachineUpdate::default())?;
                    }
                }
            }
            Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_matches_only_its_own_hash() {
        let secret = new_secret();
        let hash = hash_secret(secret.expose());
        assert!(secret_matches(secret.expose(), &hash));
        assert!(!secret_matches("not it", &hash));
        assert!(!secret_matches(secret.expose(), "short"));
    }

    #[test]
    fn fresh_secrets_are_64_hex_digits_and_differ() {
        let (a, b) = (new_secret(), new_secret());
        assert_eq!(a.expose().len(), 64);
        assert!(a.expose().bytes().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }

    #[test]
    fn secrets_never_print() {
        assert_eq!(format!("{:?}", new_secret()), "Secret(***)");
    }
}
