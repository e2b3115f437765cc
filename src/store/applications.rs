//! Application operations: deploy, application constraints, integrate,
//! remove-relation and remove-application.

use std::collections::BTreeMap;

use diesel::prelude::*;
use serde::Serialize;

use crate::domain::base::Base;
use crate::domain::charm::{
    infer_relation, Charm, CharmConfig, CharmMeta, CharmUrl, EndpointSpec, ParsedCharm, Scope,
};
use crate::domain::constraints::Constraints;
use crate::domain::names::ApplicationName;
use crate::domain::placement::{scale_with, Placement};
use crate::store::machines::delete_unit_rows;
use crate::store::records::{stored, ApplicationRecord, ApplicationRow, RelationRecord};
use crate::store::schema::{applications, charms, relations, units};
use crate::store::units::{
    add_units_tx, ensure_subordinate_unit, follow_every_unit, load_application, PlacedUnit,
};
use crate::store::writer::Tx;
use crate::store::{ChangeKind, Entity, Store, StoreError};

/// What `deploy` asks for.
#[derive(Clone, Debug)]
pub struct DeployRequest {
    pub application: ApplicationName,
    pub charm: ParsedCharm,
    /// `None`: the charm's default (see `Charm::choose_base`).
    pub base: Option<Base>,
    pub constraints: Constraints,
    /// How many units to add at once (0 for a subordinate).
    pub units: u32,
    /// `--to`: one directive per unit, at most `units` of them.
    pub placement: Vec<Placement>,
    /// `--config k=v`, checked against the charm's options.
    pub settings: BTreeMap<String, String>,
}

/// What `deploy` did.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Deployed {
    pub application: ApplicationName,
    pub charm: String,
    pub base: Base,
    pub units: Vec<PlacedUnit>,
}

/// Stores the charm, reusing a stored revision with the same contents and
/// otherwise taking the next revision for its name. Returns its URL, and
/// whether it is new.
fn store_charm(tx: &mut Tx<'_>, loaded: &ParsedCharm) -> Result<(String, bool), StoreError> {
    let charm = &loaded.charm;
    let namespace = charm.url().namespace().as_str();
    let name = charm.name().as_str();
    let existing: Vec<(String, i32, String)> = charms::table
        .filter(charms::namespace.eq(namespace))
        .filter(charms::name.eq(name))
        .select((charms::url, charms::revision, charms::sha256))
        .load(tx.conn)?;
    if let Some((url, _, _)) = existing.iter().find(|(_, _, sha)| *sha == loaded.sha256) {
        return Ok((url.clone(), false));
    }
    let revision = match existing.iter().map(|(_, r, _)| *r).max() {
        Some(latest) => u32::try_from(latest).unwrap_or(0) + 1,
        None => charm.url().revision(),
    };
    let charm = charm.clone().with_revision(revision);
    let url = charm.url().to_string();
    let metadata = serde_json::to_string(charm.meta())
        .map_err(|e| StoreError::Invariant(format!("charm metadata: {e}")))?;
    let config = serde_json::to_string(charm.config())
        .map_err(|e| StoreError::Invariant(format!("charm config: {e}")))?;
    diesel::insert_into(charms::table)
        .values((
            charms::url.eq(&url),
            charms::namespace.eq(namespace),
            charms::name.eq(name),
            charms::revision.eq(i32::try_from(revision).unwrap_or(i32::MAX)),
            charms::sha256.eq(&loaded.sha256),
            charms::metadata.eq(metadata),
            charms::config_schema.eq(config),
        ))
        .execute(tx.conn)?;
    tx.record(
        Entity::Charm,
        url.clone(),
        ChangeKind::Created,
        format!("sha256={}", loaded.sha256),
    );
    Ok((url, true))
}

fn deploy_tx(tx: &mut Tx<'_>, request: &DeployRequest) -> Result<Deployed, StoreError> {
    let name = &request.application;
    let exists: i64 = applications::table
        .filter(applications::name.eq(name.as_str()))
        .count()
        .get_result(tx.conn)?;
    if exists > 0 {
        return Err(StoreError::Conflict(format!(
            "application {:?} already exists",
            name.as_str()
        )));
    }
    let charm = &request.charm.charm;
    if charm.is_subordinate() {
        if request.units > 0 {
            return Err(StoreError::Invalid(format!(
                "subordinate application {:?} cannot be deployed with units: its units are created beside the units of the principals it is integrated with (use -n 0)",
                name.as_str()
            )));
        }
        if !request.constraints.is_unset() {
            return Err(StoreError::Invalid(format!(
                "subordinate application {:?} cannot have constraints: it runs on its principals' machines",
                name.as_str()
            )));
        }
        if !request.placement.is_empty() {
            return Err(StoreError::Invalid(format!(
                "subordinate application {:?} cannot be placed: it runs on its principals' machines",
                name.as_str()
            )));
        }
    }
    let base = charm
        .choose_base(request.base)
        .map_err(|e| StoreError::Invalid(e.to_string()))?;
    let settings = charm
        .config()
        .validate(&request.settings)
        .map_err(|e| StoreError::Invalid(e.to_string()))?;
    let settings = serde_json::to_string(&settings)
        .map_err(|e| StoreError::Invariant(format!("settings: {e}")))?;
    let leader = scale_with_leader(tx, request)?;
    if leader.is_none() && request.units == 0 && !request.placement.is_empty() {
        // Nothing would be placed: the directives would be dropped unread.
        return Err(StoreError::Invalid(format!(
            "{} placement directives given for 0 units: give at most one per unit",
            request.placement.len()
        )));
    }
    let (charm_url, _) = store_charm(tx, &request.charm)?;
    diesel::insert_into(applications::table)
        .values((
            applications::name.eq(name.as_str()),
            applications::charm_url.eq(&charm_url),
            applications::base.eq(base.to_string()),
            applications::constraints.eq(request.constraints.to_string()),
            applications::subordinate.eq(charm.is_subordinate()),
            applications::settings.eq(settings),
            applications::life.eq("alive"),
            applications::created_at_ms.eq(tx.now_ms),
            applications::scale_with.eq(leader.as_ref().map(|l| l.as_str().to_string())),
        ))
        .execute(tx.conn)?;
    tx.record(
        Entity::Application,
        name.as_str(),
        ChangeKind::Created,
        format!("charm={charm_url} base={base}"),
    );
    let units = if let Some(leader) = &leader {
        follow_every_unit(tx, name, leader)?
    } else if request.units > 0 {
        add_units_tx(
            tx,
            name,
            request.units,
            &request.placement,
            &Constraints::default(),
        )?
    } else {
        Vec::new()
    };
    Ok(Deployed {
        application: name.clone(),
        charm: charm_url,
        base,
        units,
    })
}

/// The application a deploy's `--to scale-with=<leader>` names, checked:
/// the only directive, a principal application that is alive and not the
/// one being deployed. `None` without the directive.
fn scale_with_leader(
    tx: &mut Tx<'_>,
    request: &DeployRequest,
) -> Result<Option<ApplicationName>, StoreError> {
    let Some(leader) = scale_with(&request.placement).cloned() else {
        return Ok(None);
    };
    if request.placement.len() > 1 {
        return Err(StoreError::Invalid(format!(
            "scale-with={leader} places every unit: give it alone, without other directives"
        )));
    }
    if leader == request.application {
        return Err(StoreError::Invalid(format!(
            "application {:?} cannot scale with itself",
            leader.as_str()
        )));
    }
    let record = load_application(tx, &leader)?;
    if record.subordinate {
        return Err(StoreError::Invalid(format!(
            "cannot scale with subordinate application {:?}: it has no machines of its own",
            leader.as_str()
        )));
    }
    if record.life != "alive" {
        return Err(StoreError::Conflict(format!(
            "application {:?} is being removed",
            leader.as_str()
        )));
    }
    Ok(Some(leader))
}

fn charm_meta(tx: &mut Tx<'_>, app: &ApplicationRecord) -> Result<CharmMeta, StoreError> {
    let metadata: String = charms::table
        .find(&app.charm_url)
        .select(charms::metadata)
        .get_result(tx.conn)?;
    serde_json::from_str(&metadata)
        .map_err(|e| StoreError::Invariant(format!("metadata of {}: {e}", app.charm_url)))
}

fn integrate_tx(
    tx: &mut Tx<'_>,
    a: &EndpointSpec,
    b: &EndpointSpec,
) -> Result<RelationRecord, StoreError> {
    let app_a = load_application(tx, &a.application)?;
    let app_b = load_application(tx, &b.application)?;
    let meta_a = charm_meta(tx, &app_a)?;
    let meta_b = charm_meta(tx, &app_b)?;
    let relation = infer_relation((a, &meta_a), (b, &meta_b))
        .map_err(|e| StoreError::Invalid(e.to_string()))?;
    let key = relation.key();
    let exists: i64 = relations::table
        .filter(relations::key.eq(&key))
        .count()
        .get_result(tx.conn)?;
    if exists > 0 {
        return Err(StoreError::Conflict(format!(
            "relation {key:?} already exists"
        )));
    }
    let scope = relation.scope;
    if scope == Scope::Container && !app_a.base.is_compatible(&app_b.base) {
        return Err(StoreError::Conflict(format!(
            "cannot integrate {:?} ({}) with {:?} ({}): a subordinate relation needs applications of the same base",
            app_a.name.as_str(),
            app_a.base,
            app_b.name.as_str(),
            app_b.base
        )));
    }
    let record = RelationRecord {
        key: key.clone(),
        app1: relation.requirer.application.to_string(),
        endpoint1: relation.requirer.name.to_string(),
        app2: relation.provider.application.to_string(),
        endpoint2: relation.provider.name.to_string(),
        interface: relation.interface().to_string(),
        scope: scope.as_str().to_string(),
    };
    diesel::insert_into(relations::table)
        .values((
            relations::key.eq(&record.key),
            relations::app1.eq(&record.app1),
            relations::endpoint1.eq(&record.endpoint1),
            relations::app2.eq(&record.app2),
            relations::endpoint2.eq(&record.endpoint2),
            relations::interface.eq(&record.interface),
            relations::scope.eq(&record.scope),
        ))
        .execute(tx.conn)?;
    tx.record(
        Entity::Relation,
        key,
        ChangeKind::Created,
        format!("scope={}", record.scope),
    );
    if scope == Scope::Container {
        let (principal, subordinate) = match (app_a.subordinate, app_b.subordinate) {
            (false, true) => (app_a, app_b),
            (true, false) => (app_b, app_a),
            _ => return Err(StoreError::Invalid(
                "a container-scoped relation joins one principal and one subordinate application"
                    .into(),
            )),
        };
        let principal_units: Vec<(String, Option<String>)> = units::table
            .filter(units::application.eq(principal.name.as_str()))
            .filter(units::principal.is_null())
            .select((units::name, units::machine_id))
            .order(units::number.asc())
            .load(tx.conn)?;
        for (unit, machine) in principal_units {
            let Some(machine) = machine else { continue };
            ensure_subordinate_unit(
                tx,
                &subordinate,
                &stored("unit name", &unit)?,
                &stored("machine id", &machine)?,
            )?;
        }
    }
    Ok(record)
}

/// The relations between the applications of `a` and `b` (matching the
/// endpoints where they are named).
fn find_relations(
    tx: &mut Tx<'_>,
    a: &EndpointSpec,
    b: &EndpointSpec,
) -> Result<Vec<RelationRecord>, StoreError> {
    let all: Vec<RelationRecord> = relations::table
        .select(RelationRecord::as_select())
        .load(tx.conn)?;
    let matches = |spec: &EndpointSpec, app: &str, endpoint: &str| {
        spec.application.as_str() == app
            && spec
                .endpoint
                .as_ref()
                .is_none_or(|e| e.as_str() == endpoint)
    };
    Ok(all
        .into_iter()
        .filter(|r| {
            (matches(a, &r.app1, &r.endpoint1) && matches(b, &r.app2, &r.endpoint2))
                || (matches(b, &r.app1, &r.endpoint1) && matches(a, &r.app2, &r.endpoint2))
        })
        .collect())
}

/// Deletes a relation and, for a container-scoped one, the subordinate
/// units it created.
fn delete_relation(tx: &mut Tx<'_>, relation: &RelationRecord) -> Result<(), StoreError> {
    if relation.scope == Scope::Container.as_str() {
        for (app, other) in [
            (&relation.app1, &relation.app2),
            (&relation.app2, &relation.app1),
        ] {
            let subordinate: bool = applications::table
                .find(app)
                .select(applications::subordinate)
                .get_result(tx.conn)?;
            if !subordinate {
                continue;
            }
            let principals: Vec<String> = units::table
                .filter(units::application.eq(other))
                .select(units::name)
                .load(tx.conn)?;
            let doomed: Vec<String> = units::table
                .filter(units::application.eq(app))
                .filter(units::principal.eq_any(&principals))
                .select(units::name)
                .load(tx.conn)?;
            for unit in doomed {
                delete_unit_rows(tx, &unit)?;
            }
        }
    }
    diesel::delete(relations::table.find(&relation.key)).execute(tx.conn)?;
    tx.record(
        Entity::Relation,
        relation.key.clone(),
        ChangeKind::Removed,
        "",
    );
    Ok(())
}

fn remove_relation_tx(
    tx: &mut Tx<'_>,
    a: &EndpointSpec,
    b: &EndpointSpec,
) -> Result<(), StoreError> {
    load_application(tx, &a.application)?;
    load_application(tx, &b.application)?;
    let found = find_relations(tx, a, b)?;
    match found.as_slice() {
        [] => Err(StoreError::NotFound(format!(
            "relation between {a} and {b} not found"
        ))),
        [relation] => delete_relation(tx, relation),
        several => Err(StoreError::Invalid(format!(
            "ambiguous relation: {a} {b} could refer to {}",
            several
                .iter()
                .map(|r| format!("{:?}", r.key))
                .collect::<Vec<_>>()
                .join("; ")
        ))),
    }
}

fn remove_application_tx(tx: &mut Tx<'_>, name: &ApplicationName) -> Result<(), StoreError> {
    load_application(tx, name)?;
    let involved: Vec<RelationRecord> = relations::table
        .filter(
            relations::app1
                .eq(name.as_str())
                .or(relations::app2.eq(name.as_str())),
        )
        .select(RelationRecord::as_select())
        .load(tx.conn)?;
    for relation in &involved {
        delete_relation(tx, relation)?;
    }
    let own: Vec<String> = units::table
        .filter(units::application.eq(name.as_str()))
        .select(units::name)
        .load(tx.conn)?;
    for unit in own {
        delete_unit_rows(tx, &unit)?;
    }
    // Its followers lost their units with its own; they scale with
    // nothing now.
    diesel::update(applications::table.filter(applications::scale_with.eq(name.as_str())))
        .set(applications::scale_with.eq(None::<String>))
        .execute(tx.conn)?;
    diesel::delete(applications::table.find(name.as_str())).execute(tx.conn)?;
    tx.record(Entity::Application, name.as_str(), ChangeKind::Removed, "");
    Ok(())
}

/// A charm kept by [`Store::add_charm`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredCharm {
    /// `local:wordpress-3`.
    pub url: String,
    pub sha256: String,
    /// Whether this upload stored it (`false`: the same contents were
    /// stored before, under `url`).
    pub created: bool,
}

impl Store {
    /// Stores an uploaded charm, reusing the stored revision with the same
    /// contents.
    ///
    /// # Errors
    ///
    /// The store's.
    pub async fn add_charm(&self, charm: ParsedCharm) -> Result<StoredCharm, StoreError> {
        self.write(move |tx| {
            let (url, created) = store_charm(tx, &charm)?;
            Ok(StoredCharm {
                url,
                sha256: charm.sha256.clone(),
                created,
            })
        })
        .await
    }

    /// A stored charm by its URL (`local:wordpress-3`), as deploy takes it.
    ///
    /// # Errors
    ///
    /// [`StoreError::NotFound`] for a charm that is not stored.
    pub fn stored_charm(&self, url: &CharmUrl) -> Result<ParsedCharm, StoreError> {
        let key = url.to_string();
        self.read(|conn| {
            let row: Option<(String, String, String)> = charms::table
                .find(&key)
                .select((charms::metadata, charms::config_schema, charms::sha256))
                .get_result(conn)
                .optional()?;
            let (metadata, config, sha256) = row.ok_or_else(|| {
                StoreError::NotFound(format!(
                    "no charm {key}: upload it first (POST /v1/charms), or deploy it by name or directory"
                ))
            })?;
            let invariant = |what: &str, e: serde_json::Error| {
                StoreError::Invariant(format!("{what} of {key}: {e}"))
            };
            let meta: CharmMeta =
                serde_json::from_str(&metadata).map_err(|e| invariant("metadata", e))?;
            let config: CharmConfig =
                serde_json::from_str(&config).map_err(|e| invariant("config", e))?;
            Ok(ParsedCharm {
                charm: Charm::new(url.namespace(), url.revision(), meta, config),
                sha256,
            })
        })
    }

    /// `deploy`: stores the charm and the application, then adds its units
    /// (each snapshotting the merged model and application constraints).
    ///
    /// # Errors
    ///
    /// [`StoreError::Conflict`] if the application exists;
    /// [`StoreError::Invalid`] for a base the charm does not support, bad
    /// settings, or units, constraints or placement for a subordinate; and
    /// the errors of [`Store::add_units`].
    pub async fn deploy(&self, request: DeployRequest) -> Result<Deployed, StoreError> {
        self.write(move |tx| deploy_tx(tx, &request)).await
    }

    /// An application's constraints.
    ///
    /// # Errors
    ///
    /// [`StoreError::NotFound`].
    pub fn application(&self, name: &ApplicationName) -> Result<ApplicationRecord, StoreError> {
        self.read(|conn| {
            let row: Option<ApplicationRow> = applications::table
                .find(name.as_str())
                .select(ApplicationRow::as_select())
                .get_result(conn)
                .optional()?;
            row.ok_or_else(|| {
                StoreError::NotFound(format!("application {:?} not found", name.as_str()))
            })?
            .try_into()
        })
    }

    /// `set-constraints APP`: replaces the application's constraints. Units
    /// already added keep their snapshot.
    ///
    /// # Errors
    ///
    /// [`StoreError::NotFound`]; [`StoreError::Invalid`] for a subordinate.
    pub async fn set_application_constraints(
        &self,
        name: ApplicationName,
        constraints: Constraints,
    ) -> Result<(), StoreError> {
        self.write(move |tx| {
            let app = load_application(tx, &name)?;
            if app.subordinate {
                return Err(StoreError::Invalid(format!(
                    "cannot set constraints on subordinate application {:?}: it runs on its principals' machines",
                    name.as_str()
                )));
            }
            diesel::update(applications::table.find(name.as_str()))
                .set(applications::constraints.eq(constraints.to_string()))
                .execute(tx.conn)?;
            tx.record(
                Entity::Application,
                name.as_str(),
                ChangeKind::Updated,
                format!("constraints={constraints}"),
            );
            Ok(())
        })
        .await
    }

    /// `integrate A B`: adds the one relation the two charms allow. A
    /// container-scoped relation puts a subordinate unit beside every unit
    /// of the principal (and later units get theirs too).
    ///
    /// # Errors
    ///
    /// [`StoreError::NotFound`] for an unknown application;
    /// [`StoreError::Invalid`] when no relation or several fit;
    /// [`StoreError::Conflict`] for an existing relation, or a subordinate
    /// relation between applications of different bases.
    pub async fn integrate(
        &self,
        a: EndpointSpec,
        b: EndpointSpec,
    ) -> Result<RelationRecord, StoreError> {
        self.write(move |tx| integrate_tx(tx, &a, &b)).await
    }

    /// `remove-relation A B`: the relation goes, and with it the subordinate
    /// units a container-scoped relation created.
    ///
    /// # Errors
    ///
    /// [`StoreError::NotFound`]; [`StoreError::Invalid`] if ambiguous.
    pub async fn remove_relation(
        &self,
        a: EndpointSpec,
        b: EndpointSpec,
    ) -> Result<(), StoreError> {
        self.write(move |tx| remove_relation_tx(tx, &a, &b)).await
    }

    /// `remove-application`: its units, its relations (and the subordinate
    /// units they made) and the application go; machines stay.
    ///
    /// # Errors
    ///
    /// [`StoreError::NotFound`].
    pub async fn remove_application(&self, name: ApplicationName) -> Result<(), StoreError> {
        self.write(move |tx| remove_application_tx(tx, &name)).await
    }
}
