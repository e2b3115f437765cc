//! The zone census, kept in the store so that every controller sharing the
//! database spreads machines as one.
//!
//! `zone_census` counts, for each kind of machine (its role and the
//! applications of its units, [`Occupant::key`]) and each zone, the
//! machines that hold that zone; a counted machine remembers its kind in
//! `machines.spread_kind`. A zone is chosen ([`Store::choose_zone`]) in
//! one writer operation that reads the census, orders the zones by the
//! domain's rule ([`order_zones`]), writes the machine's transition and
//! counts it. On PostgreSQL a batch's choices are made together: in turn
//! from one read of the census, then saved in one statement and counted in
//! one more (`crate::store::together`). Whenever a save clears a
//! machine's zone, or the machine is removed, its count is let go in the
//! same transaction (`release`).
//!
//! Every change of the census is a writer operation, and on PostgreSQL
//! every writer batch holds the writers' advisory lock from its first
//! statement to its commit (see [`crate::store::writer`]), so two
//! controllers never choose from the same census: the second reads the
//! first's choice. (SQLite has one writer.) For the same reason a batch
//! reads the census once and keeps its copy up with its own counts
//! (`Tx::census`); a release, a rebuild or an undone operation drops the
//! copy, and the next choice reads the table again. A unit joining or
//! leaving a machine that holds a zone moves the machine to its new kind's
//! count in the same transaction (`recount`). A store written before that
//! rule is counted afresh once, when a controller starts
//! ([`Store::count_zone_census_unless_current`]).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use diesel::prelude::*;

use crate::domain::constraints::Setting;
use crate::domain::machine::{Event, Machine, MachineState, Policy};
use crate::domain::names::MachineId;
use crate::domain::zones::{order_zones, Occupant, Zone, ZoneCensus, ZoneRequest};
use crate::store::db::per_backend;
use crate::store::lifecycle::{apply_to, Applied, MachineEvent, MachineUpdate};
use crate::store::records::stored_role;
use crate::store::schema::{machines, model, units, zone_census};
use crate::store::together::ZoneChoiceRequest;
use crate::store::writer::Tx;
use crate::store::{Origin, Store, StoreError, IDS_PER_STATEMENT};

/// The census as stored (or as this batch last read or counted it).
pub(crate) fn read(tx: &mut Tx<'_>) -> Result<ZoneCensus, StoreError> {
    if let Some(census) = tx.census() {
        return Ok(census.clone());
    }
    let rows: Vec<(String, String, i64)> = zone_census::table
        .select((zone_census::kind, zone_census::zone, zone_census::machines))
        .load(tx.conn)?;
    let mut census = ZoneCensus::new();
    for (kind, zone, count) in rows {
        let occupant = Occupant::from_key(&kind)
            .ok_or_else(|| StoreError::Invariant(format!("zone census kind {kind:?}")))?;
        census.add_many(&zone, &occupant, usize::try_from(count).unwrap_or(0));
    }
    *tx.census() = Some(census.clone());
    Ok(census)
}

/// Counts one more machine of kind `kind` in `zone` (the machine itself
/// remembers its kind through its save, [`MachineUpdate::spread_kind`]).
fn count(tx: &mut Tx<'_>, occupant: &Occupant, kind: &str, zone: &str) -> Result<(), StoreError> {
    per_backend!(tx.conn, c => CountInZone { kind, zone }.execute(c)?);
    if let Some(census) = tx.census() {
        census.add_many(zone, occupant, 1);
    }
    Ok(())
}

/// The census's count of one more machine, as one statement of one shape,
/// so the connection prepares it once and keeps it (diesel does not keep
/// its own `UPDATE`s or upserts prepared).
struct CountInZone<'a> {
    kind: &'a str,
    zone: &'a str,
}

impl diesel::query_builder::QueryId for CountInZone<'_> {
    type QueryId = CountInZone<'static>;
    const HAS_STATIC_QUERY_ID: bool = true;
}

impl<DB> diesel::query_builder::QueryFragment<DB> for CountInZone<'_>
where
    DB: diesel::backend::Backend + diesel::sql_types::HasSqlType<diesel::sql_types::Text>,
    str: diesel::serialize::ToSql<diesel::sql_types::Text, DB>,
{
    fn walk_ast<'b>(
        &'b self,
        mut out: diesel::query_builder::AstPass<'_, 'b, DB>,
    ) -> QueryResult<()> {
        use diesel::sql_types::Text;
        out.push_sql("INSERT INTO zone_census (kind, zone, machines) VALUES (");
        out.push_bind_param::<Text, _>(self.kind)?;
        out.push_sql(", ");
        out.push_bind_param::<Text, _>(self.zone)?;
        out.push_sql(
            ", 1) ON CONFLICT (kind, zone) DO UPDATE SET machines = zone_census.machines + 1",
        );
        Ok(())
    }
}

impl<Conn> RunQueryDsl<Conn> for CountInZone<'_> {}

/// Lets go of machine `id`'s count, if it is counted: called before a save
/// that clears its zone and before its removal, in their transaction.
pub(crate) fn release(tx: &mut Tx<'_>, id: &str) -> Result<(), StoreError> {
    let counted: Option<(Option<String>, Option<String>)> = machines::table
        .find(id)
        .select((machines::spread_kind, machines::zone))
        .get_result(tx.conn)
        .optional()?;
    let Some((Some(kind), zone)) = counted else {
        return Ok(());
    };
    *tx.census() = None;
    if let Some(zone) = zone {
        uncount(tx, &kind, &zone)?;
    }
    diesel::update(machines::table.find(id))
        .set(machines::spread_kind.eq(None::<String>))
        .execute(tx.conn)?;
    Ok(())
}

/// Counts one machine fewer of kind `kind` in `zone`, and forgets the
/// count when none is left. The caller drops the batch's copy.
fn uncount(tx: &mut Tx<'_>, kind: &str, zone: &str) -> Result<(), StoreError> {
    diesel::update(zone_census::table.find((kind, zone)))
        .set(zone_census::machines.eq(zone_census::machines - 1))
        .execute(tx.conn)?;
    diesel::delete(
        zone_census::table
            .filter(zone_census::kind.eq(kind))
            .filter(zone_census::zone.eq(zone))
            .filter(zone_census::machines.le(0)),
    )
    .execute(tx.conn)?;
    Ok(())
}

/// Counts machine `id` again under the kind its units make now, after a
/// unit joined or left it: a machine that holds a zone moves from its old
/// kind's count to its new one's. A machine without a zone, or whose kind
/// is unchanged, is left alone.
pub(crate) fn recount(tx: &mut Tx<'_>, id: &str) -> Result<(), StoreError> {
    let counted: Option<(String, Option<String>, Option<String>)> = machines::table
        .find(id)
        .select((machines::role, machines::spread_kind, machines::zone))
        .get_result(tx.conn)
        .optional()?;
    let Some((role, counted_as, Some(zone))) = counted else {
        return Ok(());
    };
    let applications: Vec<String> = units::table
        .filter(units::machine_id.eq(id))
        .select(units::application)
        .load(tx.conn)?;
    let occupant = Occupant::new(stored_role(&role)?, applications);
    let kind = occupant.key();
    if counted_as.as_deref() == Some(kind.as_str()) {
        return Ok(());
    }
    if let Some(counted_as) = &counted_as {
        *tx.census() = None;
        uncount(tx, counted_as, &zone)?;
    }
    count(tx, &occupant, &kind, &zone)?;
    diesel::update(machines::table.find(id))
        .set(machines::spread_kind.eq(&kind))
        .execute(tx.conn)?;
    Ok(())
}

/// What a machine needs of the census to choose its zone.
#[derive(Clone, Debug)]
pub struct ZoneChoice {
    pub id: MachineId,
    pub occupant: Occupant,
    /// The zones and their health, as this controller knows them.
    pub zones: Vec<Zone>,
    /// Zones that refused this machine in this round.
    pub failed: BTreeSet<String>,
    pub zones_constraint: Setting<Vec<String>>,
    pub placement_zone: Option<String>,
    /// Whether the machine has a retry time stored, to clear.
    pub clear_retry_at: bool,
}

/// What came of a choice.
#[derive(Debug)]
pub enum ZoneChosen {
    /// The machine now has its zone, written and counted.
    Chosen(Applied),
    /// No zone can take it (and why); nothing was written. `permanent`
    /// when waiting cannot help: the placement or the `zones` constraint
    /// names no zone the cloud has.
    NoZone { reason: String, permanent: bool },
}

/// Why no zone can take a machine (see [`ZoneChosen::NoZone`]).
pub(crate) struct NoZone {
    reason: String,
    permanent: bool,
}

impl From<NoZone> for ZoneChosen {
    fn from(NoZone { reason, permanent }: NoZone) -> ZoneChosen {
        ZoneChosen::NoZone { reason, permanent }
    }
}

/// The zone `choice` is to take with `census` as it is, or why none can
/// take it.
pub(crate) fn pick_zone(census: &ZoneCensus, choice: &ZoneChoice) -> Result<String, NoZone> {
    let order = order_zones(&ZoneRequest {
        zones: &choice.zones,
        census,
        group: &choice.occupant.group(),
        failed: &choice.failed,
        zones_constraint: &choice.zones_constraint,
        placement: choice.placement_zone.as_deref(),
    });
    match order.map(|o| o.into_iter().next()) {
        Ok(Some(zone)) => Ok(zone),
        Ok(None) => Err(NoZone {
            reason: "no availability zone is left to try".into(),
            permanent: false,
        }),
        Err(e) => Err(NoZone {
            permanent: !choice.zones.is_empty() && e.is_permanent(),
            reason: e.to_string(),
        }),
    }
}

/// The event that gives `choice`'s machine `zone`, counting it as its kind.
pub(crate) fn zone_event(choice: &ZoneChoice, zone: &str) -> MachineEvent {
    MachineEvent {
        update: MachineUpdate {
            clear_retry_at: choice.clear_retry_at,
            spread_kind: Some(choice.occupant.key()),
            ..MachineUpdate::default()
        },
        ..MachineEvent::new(
            choice.id,
            Event::ZoneChosen {
                zone: zone.to_string(),
            },
        )
    }
}

/// Chooses and writes one machine's zone on its own (see
/// [`Store::choose_zone`]).
///
/// # Errors
///
/// As [`Store::choose_zone`].
pub(crate) fn choose_zone_tx(
    tx: &mut Tx<'_>,
    current: &Machine,
    stored: MachineState,
    choice: &ZoneChoice,
    policy: &Policy,
    holder: &str,
) -> Result<ZoneChosen, StoreError> {
    tx.set_origin(Origin::Engine);
    let census = read(tx)?;
    let zone = match pick_zone(&census, choice) {
        Ok(zone) => zone,
        Err(no_zone) => return Ok(no_zone.into()),
    };
    let request = zone_event(choice, &zone);
    let applied = apply_to(tx, current, Some(stored), request, policy, Some(holder))?;
    count(tx, &choice.occupant, &choice.occupant.key(), &zone)?;
    Ok(ZoneChosen::Chosen(applied))
}

/// Counts machines of several kinds in several zones (`(kind, zone)` →
/// how many more) in one PostgreSQL statement, and in the batch's copy of
/// the census when it has one.
///
/// # Errors
///
/// The database's; on SQLite, which binds no arrays, an invariant error.
pub(crate) fn count_many(
    tx: &mut Tx<'_>,
    counts: &BTreeMap<(String, String), i64>,
) -> Result<(), StoreError> {
    if counts.is_empty() {
        return Ok(());
    }
    let conn = tx.conn.postgres("zone counts are written together")?;
    CountsInZones {
        kinds: counts.keys().map(|(kind, _)| kind.as_str()).collect(),
        zones: counts.keys().map(|(_, zone)| zone.as_str()).collect(),
        counts: counts.values().copied().collect(),
    }
    .execute(conn)?;
    Ok(())
}

/// Several counts of [`CountInZone`] in one statement of one shape: the
/// kinds, zones and counts as three arrays.
struct CountsInZones<'a> {
    kinds: Vec<&'a str>,
    zones: Vec<&'a str>,
    counts: Vec<i64>,
}

impl diesel::query_builder::QueryId for CountsInZones<'_> {
    type QueryId = CountsInZones<'static>;
    const HAS_STATIC_QUERY_ID: bool = true;
}

impl diesel::query_builder::QueryFragment<diesel::pg::Pg> for CountsInZones<'_> {
    fn walk_ast<'b>(
        &'b self,
        mut out: diesel::query_builder::AstPass<'_, 'b, diesel::pg::Pg>,
    ) -> QueryResult<()> {
        use diesel::sql_types::{Array, BigInt, Text};
        out.push_sql("INSERT INTO zone_census (kind, zone, machines) SELECT * FROM unnest(");
        out.push_bind_param::<Array<Text>, _>(&self.kinds)?;
        out.push_sql(", ");
        out.push_bind_param::<Array<Text>, _>(&self.zones)?;
        out.push_sql(", ");
        out.push_bind_param::<Array<BigInt>, _>(&self.counts)?;
        out.push_sql(
            ") ON CONFLICT (kind, zone) DO UPDATE \
             SET machines = zone_census.machines + EXCLUDED.machines",
        );
        Ok(())
    }
}

impl<Conn> RunQueryDsl<Conn> for CountsInZones<'_> {}

/// Counts every machine that holds a zone afresh, by its role and the
/// applications of its units now, and marks the census current. Only the
/// machines whose kind is not the one they are counted as are written; the
/// census itself is small and written whole.
fn rebuild(tx: &mut Tx<'_>) -> Result<(), StoreError> {
    let started = std::time::Instant::now();
    *tx.census() = None;
    // Most machines hold one unit: a list of each machine's applications,
    // once each, with room for one name, not a set whose first node has
    // room for eleven.
    let mut applications: HashMap<String, Vec<String>> = HashMap::new();
    for (machine, application) in units::table
        .filter(units::machine_id.is_not_null())
        .select((units::machine_id.assume_not_null(), units::application))
        .load::<(String, String)>(tx.conn)?
    {
        let names = applications
            .entry(machine)
            .or_insert_with(|| Vec::with_capacity(1));
        if !names.contains(&application) {
            names.push(application);
        }
    }
    let counted: Vec<(String, String, Option<String>, Option<String>)> = machines::table
        .filter(
            machines::zone
                .is_not_null()
                .or(machines::spread_kind.is_not_null()),
        )
        .select((
            machines::id,
            machines::role,
            machines::zone,
            machines::spread_kind,
        ))
        .load(tx.conn)?;
    let mut rekinded: BTreeMap<Option<String>, Vec<String>> = BTreeMap::new();
    let mut counts: BTreeMap<(String, String), i64> = BTreeMap::new();
    for (id, role, zone, counted_as) in counted {
        let kind = match zone {
            Some(zone) => {
                let role = stored_role(&role)?;
                let apps = applications.remove(&id).unwrap_or_default();
                let kind = Occupant::new(role, apps).key();
                *counts.entry((kind.clone(), zone)).or_default() += 1;
                Some(kind)
            }
            None => None,
        };
        if kind != counted_as {
            rekinded.entry(kind).or_default().push(id);
        }
    }
    let mut rewritten = 0;
    for (kind, ids) in rekinded {
        rewritten += ids.len();
        for chunk in ids.chunks(IDS_PER_STATEMENT) {
            diesel::update(machines::table.filter(machines::id.eq_any(chunk)))
                .set(machines::spread_kind.eq(&kind))
                .execute(tx.conn)?;
        }
    }
    diesel::delete(zone_census::table).execute(tx.conn)?;
    for ((kind, zone), machines) in counts {
        diesel::insert_into(zone_census::table)
            .values((
                zone_census::kind.eq(kind),
                zone_census::zone.eq(zone),
                zone_census::machines.eq(machines),
            ))
            .execute(tx.conn)?;
    }
    diesel::update(model::table.find(1))
        .set(model::zone_census_current.eq(true))
        .execute(tx.conn)?;
    log::debug!(
        "zone census counted afresh in {:.1} ms; {rewritten} machines counted as another kind",
        started.elapsed().as_secs_f64() * 1e3
    );
    Ok(())
}

impl Store {
    /// Chooses machine `choice.id`'s zone from the census and writes the
    /// choice ([`Event::ZoneChosen`]) to the machine as `current` left it,
    /// fenced by this controller's lease, in one transaction.
    ///
    /// # Errors
    ///
    /// As [`Store::commit`]: [`StoreError::Conflict`] if the machine moved
    /// meanwhile or its lease is not this controller's,
    /// [`StoreError::NotFound`] if it has gone.
    pub async fn choose_zone(
        &self,
        current: Machine,
        choice: ZoneChoice,
    ) -> Result<ZoneChosen, StoreError> {
        let stored = current.state;
        self.choose_zone_from(current, stored, choice).await
    }

    /// [`Store::choose_zone`] for a machine the engine holds as `current`
    /// and the store as `stored`: a pending machine the engine took to
    /// `allocating` without writing it goes from `pending` to `starting`
    /// in one save.
    ///
    /// # Errors
    ///
    /// As [`Store::choose_zone`]; [`StoreError::Conflict`] also if the
    /// store no longer holds the machine in `stored`.
    pub async fn choose_zone_from(
        &self,
        current: Machine,
        stored: MachineState,
        choice: ZoneChoice,
    ) -> Result<ZoneChosen, StoreError> {
        let policy = self.policy();
        let holder = self.holder().to_string();
        let request = ZoneChoiceRequest::new(current, stored, choice, policy, holder);
        if self.guard.is_some() {
            self.write(move |tx| request.run(tx)).await
        } else {
            self.writer.choose_zone(request).await
        }
    }

    /// Counts every machine that holds a zone afresh, by its role and the
    /// applications of its units now (`rebuild`).
    ///
    /// # Errors
    ///
    /// [`StoreError::Database`] and the writer's errors.
    pub async fn rebuild_zone_census(&self) -> Result<(), StoreError> {
        self.write(rebuild).await
    }

    /// Counts the census afresh if the store does not say it is current: a
    /// store written before units joining and leaving machines were
    /// counted as they happen (`recount`). Whether it was counted.
    ///
    /// # Errors
    ///
    /// [`StoreError::Database`] and the writer's errors.
    pub async fn count_zone_census_unless_current(&self) -> Result<bool, StoreError> {
        self.write(|tx| {
            let current: bool = model::table
                .find(1)
                .select(model::zone_census_current)
                .get_result(tx.conn)?;
            if !current {
                rebuild(tx)?;
            }
            Ok(!current)
        })
        .await
    }

    /// The census: machines per zone for each kind (`workload:mysql`), as
    /// stored.
    ///
    /// # Errors
    ///
    /// [`StoreError::Database`].
    pub fn zone_census(&self) -> Result<BTreeMap<(String, String), i64>, StoreError> {
        self.read(|conn| {
            let rows: Vec<(String, String, i64)> = zone_census::table
                .select((zone_census::kind, zone_census::zone, zone_census::machines))
                .load(conn)?;
            Ok(rows
                .into_iter()
                .map(|(kind, zone, n)| ((kind, zone), n))
                .collect())
        })
    }
}
