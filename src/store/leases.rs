//! The provisioning lock, for several controllers on one database.
//!
//! A controller works on a machine only while it holds the machine's lease:
//! `machines.lease_holder` (its [`Store::holder`]) and
//! `machines.lease_expires_ms`. Leases are claimed, renewed and released
//! in the writer's transactions; a claim takes a machine only if nobody
//! holds it or its holder's lease has run out, so two controllers never
//! hold one machine at once. A controller renews all its leases in one
//! statement; one that stops renewing (killed, paused, cut off) loses them
//! when they expire and the others take its machines over. The engine's
//! saves of a machine are fenced by the lease ([`crate::store::lifecycle`]):
//! a controller that lost a machine's lease cannot write it.
//!
//! Cluster-wide jobs (reconciliation with the cloud, the stray sweep, the
//! heartbeat watch) run under one lease each, in the `leases` table.
//!
//! Expiry is compared with each controller's clock: controllers sharing a
//! database must keep their clocks within a small part of the lease's
//! length of each other (NTP does).

use std::collections::HashSet;
use std::time::Duration;

use diesel::prelude::*;

use crate::domain::machine::{is_settled, MachineState};
use crate::domain::names::MachineId;
use crate::store::db::per_backend;
use crate::store::records::{stored, MachineLease};
use crate::store::schema::{leases, machines};
use crate::store::{millis, now_ms, Store, StoreError, IDS_PER_STATEMENT};

/// The prefix of each controller's own lease, which says it is alive.
pub const CONTROLLER_LEASE_PREFIX: &str = "controller:";

/// The job lease of reconciliation with the cloud: the stray sweep,
/// instances gone behind berth's back, new addresses, and agents' heartbeats.
pub const RECONCILE_JOB: &str = "reconcile";

/// What a renewal kept.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Renewed {
    /// The machines this controller still holds.
    pub machines: HashSet<MachineId>,
    /// The jobs whose lease this controller still holds.
    pub jobs: Vec<String>,
}

/// A job's lease as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobLease {
    pub holder: String,
    pub expires_ms: i64,
}

diesel::define_sql_function! {
    /// SQL's `coalesce` of a nullable text and a text.
    fn coalesce(value: diesel::sql_types::Nullable<diesel::sql_types::Text>, otherwise: diesel::sql_types::Text) -> diesel::sql_types::Text;
}

fn ids_of(rows: Vec<String>) -> Result<Vec<MachineId>, StoreError> {
    rows.iter().map(|id| stored("machine id", id)).collect()
}

impl Store {
    /// Claims the machines of `ids` that nobody else holds a live lease
    /// on, for `ttl`, and returns those this controller now holds (those
    /// it already held included, their leases renewed).
    ///
    /// # Errors
    ///
    /// [`StoreError::Database`] and the writer's errors.
    pub async fn claim_machines(
        &self,
        ids: Vec<MachineId>,
        ttl: Duration,
    ) -> Result<Vec<MachineId>, StoreError> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let holder = self.holder().to_string();
        self.write(move |tx| {
            let now = tx.now_ms;
            let until = now.saturating_add(millis(ttl));
            let keys: Vec<String> = ids.iter().map(ToString::to_string).collect();
            let mut claimed = Vec::with_capacity(keys.len());
            for chunk in keys.chunks(IDS_PER_STATEMENT) {
                let claim = diesel::update(
                    machines::table.filter(machines::id.eq_any(chunk)).filter(
                        machines::lease_holder
                            .is_null()
                            .or(machines::lease_holder.eq(&holder))
                            .or(machines::lease_expires_ms.lt(now)),
                    ),
                )
                .set((
                    machines::lease_holder.eq(&holder),
                    machines::lease_expires_ms.eq(until),
                ))
                .returning(machines::id);
                let rows: Vec<String> = per_backend!(tx.conn, c => claim.get_results(c)?);
                claimed.extend(ids_of(rows)?);
            }
            Ok(claimed)
        })
        .await
    }

    /// Renews every lease this controller still holds, machines' and
    /// jobs', for `ttl`, and says which it holds. A lease that ran out is
    /// not renewed: another controller may have taken it already.
    ///
    /// # Errors
    ///
    /// [`StoreError::Database`] and the writer's errors.
    pub async fn renew_leases(&self, ttl: Duration) -> Result<Renewed, StoreError> {
        let holder = self.holder().to_string();
        self.write(move |tx| {
            let now = tx.now_ms;
            let until = now.saturating_add(millis(ttl));
            let renew = diesel::update(
                machines::table
                    .filter(machines::lease_holder.eq(&holder))
                    .filter(machines::lease_expires_ms.ge(now)),
            )
            .set(machines::lease_expires_ms.eq(until))
            .returning(machines::id);
            let rows: Vec<String> = per_backend!(tx.conn, c => renew.get_results(c)?);
            let jobs = diesel::update(
                leases::table
                    .filter(leases::holder.eq(&holder))
                    .filter(leases::expires_ms.ge(now)),
            )
            .set(leases::expires_ms.eq(until))
            .returning(leases::name);
            let jobs: Vec<String> = per_backend!(tx.conn, c => jobs.get_results(c)?);
            Ok(Renewed {
                machines: ids_of(rows)?.into_iter().collect(),
                jobs,
            })
        })
        .await
    }

    /// Lets go of this controller's leases on `ids` (machines it no longer
    /// works on); leases held by others are left alone.
    ///
    /// # Errors
    ///
    /// [`StoreError::Database`] and the writer's errors.
    pub async fn release_machines(&self, ids: Vec<MachineId>) -> Result<(), StoreError> {
        if ids.is_empty() {
            return Ok(());
        }
        let holder = self.holder().to_string();
        self.write(move |tx| {
            let keys: Vec<String> = ids.iter().map(ToString::to_string).collect();
            for chunk in keys.chunks(IDS_PER_STATEMENT) {
                // The holder is compared through `coalesce`, which no
                // index serves: on the bare column SQLite took the index on
                // `lease_holder` and walked every machine this controller
                // holds, thousands, for each chunk, instead of looking up
                // the chunk's ids.
                diesel::update(
                    machines::table
                        .filter(machines::id.eq_any(chunk))
                        .filter(coalesce(machines::lease_holder, "").eq(&holder)),
                )
                .set((
                    machines::lease_holder.eq(None::<String>),
                    machines::lease_expires_ms.eq(None::<i64>),
                ))
                .execute(tx.conn)?;
            }
            Ok(())
        })
        .await
    }

    /// Machines that need a controller's work (not settled) and that no
    /// controller holds a live lease on at `now_ms`: new ones nobody has
    /// claimed yet, and those of a controller that stopped renewing.
    ///
    /// # Errors
    ///
    /// [`StoreError::Database`].
    pub fn unheld_machines(
        &self,
        now_ms: i64,
    ) -> Result<Vec<(MachineId, MachineState)>, StoreError> {
        let unsettled: Vec<&str> = MachineState::ALL
            .iter()
            .filter(|s| !is_settled(**s))
            .map(|s| s.as_str())
            .collect();
        self.read(|conn| {
            let rows: Vec<(String, String)> = machines::table
                .filter(machines::state.eq_any(&unsettled))
                .filter(
                    machines::lease_holder
                        .is_null()
                        .or(machines::lease_expires_ms.lt(now_ms)),
                )
                .select((machines::id, machines::state))
                .load(conn)?;
            rows.iter()
                .map(|(id, state)| Ok((stored("machine id", id)?, stored("machine state", state)?)))
                .collect()
        })
    }

    /// Takes or keeps the lease of the cluster-wide job `job` for `ttl`:
    /// true if this controller holds it now.
    ///
    /// # Errors
    ///
    /// [`StoreError::Database`] and the writer's errors.
    pub async fn hold_job(
        &self,
        job: impl Into<String>,
        ttl: Duration,
    ) -> Result<bool, StoreError> {
        let holder = self.holder().to_string();
        let job: String = job.into();
        self.write(move |tx| {
            let job = job.as_str();
            let now = tx.now_ms;
            let until = now.saturating_add(millis(ttl));
            // Taken if free or run out, kept if ours; the row lock orders
            // two controllers trying at once.
            let taken = diesel::update(
                leases::table
                    .find(job)
                    .filter(leases::holder.eq(&holder).or(leases::expires_ms.lt(now))),
            )
            .set((leases::holder.eq(&holder), leases::expires_ms.eq(until)))
            .execute(tx.conn)?;
            if taken > 0 {
                return Ok(true);
            }
            // Held by another, or never held: then the first insert holds
            // it, and a second controller's at the same moment conflicts
            // and holds nothing.
            let insert = diesel::insert_into(leases::table)
                .values((
                    leases::name.eq(job),
                    leases::holder.eq(&holder),
                    leases::expires_ms.eq(until),
                ))
                .on_conflict_do_nothing();
            let inserted = per_backend!(tx.conn, c => insert.execute(c)?);
            Ok(inserted > 0)
        })
        .await
    }

    /// Says this controller is alive, for `ttl`: a lease of its own
    /// (`controller:<holder>`) that the other controllers count to share
    /// the work ([`Store::live_controllers`]).
    ///
    /// # Errors
    ///
    /// As [`Store::hold_job`].
    pub async fn announce(&self, ttl: Duration) -> Result<(), StoreError> {
        let name = format!("{CONTROLLER_LEASE_PREFIX}{}", self.holder());
        self.hold_job(name, ttl).await.map(drop)
    }

    /// The controllers alive at `now_ms` (those whose own lease has not
    /// run out), by holder, sorted.
    ///
    /// # Errors
    ///
    /// [`StoreError::Database`].
    pub fn live_controllers(&self, now_ms: i64) -> Result<Vec<String>, StoreError> {
        self.read(|conn| {
            let mut names: Vec<String> = leases::table
                .filter(leases::name.like(format!("{CONTROLLER_LEASE_PREFIX}%")))
                .filter(leases::expires_ms.ge(now_ms))
                .select(leases::holder)
                .load(conn)?;
            names.sort();
            Ok(names)
        })
    }

    /// Who holds the lease of job `job`, if anyone ever has.
    ///
    /// # Errors
    ///
    /// [`StoreError::Database`].
    pub fn job_lease(&self, job: &str) -> Result<Option<JobLease>, StoreError> {
        self.read(|conn| {
            let row: Option<(String, i64)> = leases::table
                .find(job)
                .select((leases::holder, leases::expires_ms))
                .get_result(conn)
                .optional()?;
            Ok(row.map(|(holder, expires_ms)| JobLease { holder, expires_ms }))
        })
    }

    /// Whether this controller holds a live lease on machine `id` now.
    ///
    /// # Errors
    ///
    /// [`StoreError::Database`].
    pub fn holds_machine(&self, id: &MachineId) -> Result<bool, StoreError> {
        let now = now_ms();
        self.read(|conn| {
            let lease: Option<(Option<String>, Option<i64>)> = machines::table
                .find(id.to_string())
                .select((machines::lease_holder, machines::lease_expires_ms))
                .get_result(conn)
                .optional()?;
            Ok(lease
                .and_then(|(holder, until)| MachineLease::of(holder, until))
                .is_some_and(|lease| lease.is_held_by(self.holder(), now)))
        })
    }
}
