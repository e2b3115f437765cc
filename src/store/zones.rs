//! Availability zones: what the provider reports, and an administrator's
//! enable/disable, which outlives the provider's reports.

use diesel::prelude::*;
use serde::Serialize;

use crate::contracts::provider::ProviderZone;
use crate::domain::zones::Zone;
use crate::store::schema::zones;
use crate::store::{ChangeKind, Entity, Store, StoreError};

/// A zone as stored.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Queryable, Selectable)]
#[diesel(table_name = zones)]
pub struct ZoneRecord {
    pub name: String,
    /// What the provider last said.
    pub provider_available: bool,
    /// An administrator's `disable-zone`.
    pub disabled: bool,
    /// Why the provider says the zone is unavailable.
    pub reason: String,
}

impl ZoneRecord {
    /// Whether new machines may go here.
    pub fn available(&self) -> bool {
        self.provider_available && !self.disabled
    }

    /// The zone as zone choice sees it: available, or unavailable and why.
    pub fn zone(&self) -> Zone {
        match self.unavailable_reason() {
            None => Zone::available(&self.name),
            Some(reason) => Zone::unavailable(&self.name, reason),
        }
    }

    /// Why not, when not.
    pub fn unavailable_reason(&self) -> Option<String> {
        match (self.disabled, self.provider_available) {
            (true, _) => Some("disabled by an administrator".to_string()),
            (false, false) if self.reason.is_empty() => Some("unavailable".to_string()),
            (false, false) => Some(self.reason.clone()),
            (false, true) => None,
        }
    }
}

impl Store {
    /// Records the provider's view of its zones, keeping administrators'
    /// disables. Zones the provider no longer lists are removed.
    ///
    /// # Errors
    ///
    /// [`StoreError::Database`] only.
    pub async fn set_provider_zones(&self, reported: Vec<ProviderZone>) -> Result<(), StoreError> {
        self.write(move |tx| {
            let known: Vec<ZoneRecord> =
                zones::table.select(ZoneRecord::as_select()).load(tx.conn)?;
            for zone in &known {
                if !reported.iter().any(|r| r.name == zone.name) {
                    diesel::delete(zones::table.find(&zone.name)).execute(tx.conn)?;
                    tx.record(Entity::Zone, zone.name.clone(), ChangeKind::Removed, "");
                }
            }
            for zone in reported {
                match known.iter().find(|k| k.name == zone.name) {
                    Some(k)
                        if k.provider_available == zone.available && k.reason == zone.reason => {}
                    Some(_) => {
                        diesel::update(zones::table.find(&zone.name))
                            .set((
                                zones::provider_available.eq(zone.available),
                                zones::reason.eq(&zone.reason),
                            ))
                            .execute(tx.conn)?;
                        tx.record(
                            Entity::Zone,
                            zone.name,
                            ChangeKind::Updated,
                            format!("available={}", zone.available),
                        );
                    }
                    None => {
                        diesel::insert_into(zones::table)
                            .values((
                                zones::name.eq(&zone.name),
                                zones::provider_available.eq(zone.available),
                                zones::reason.eq(&zone.reason),
                            ))
                            .execute(tx.conn)?;
                        tx.record(
                            Entity::Zone,
                            zone.name,
                            ChangeKind::Created,
                            format!("available={}", zone.available),
                        );
                    }
                }
            }
            Ok(())
        })
        .await
    }

    /// `enable-zone` / `disable-zone`.
    ///
    /// # Errors
    ///
    /// [`StoreError::NotFound`] for a zone the provider has not reported.
    pub async fn set_zone_enabled(
        &self,
        name: String,
        enabled: bool,
    ) -> Result<ZoneRecord, StoreError> {
        self.write(move |tx| {
            let found = diesel::update(zones::table.find(&name))
                .set(zones::disabled.eq(!enabled))
                .execute(tx.conn)?;
            if found == 0 {
                let names: Vec<String> = zones::table
                    .select(zones::name)
                    .order(zones::name)
                    .load(tx.conn)?;
                return Err(StoreError::NotFound(format!(
                    "zone {name:?} not found; zones: {}",
                    if names.is_empty() {
                        "none".to_string()
                    } else {
                        names.join(", ")
                    }
                )));
            }
            tx.record(
                Entity::Zone,
                name.clone(),
                ChangeKind::Updated,
                format!("enabled={enabled}"),
            );
            Ok(zones::table
                .find(&name)
                .select(ZoneRecord::as_select())
                .get_result(tx.conn)?)
        })
        .await
    }

    /// Every zone, by name.
    ///
    /// # Errors
    ///
    /// [`StoreError::Database`] only.
    pub fn zones(&self) -> Result<Vec<ZoneRecord>, StoreError> {
        self.read(|conn| {
            Ok(zones::table
                .select(ZoneRecord::as_select())
                .order(zones::name)
                .load(conn)?)
        })
    }
}
