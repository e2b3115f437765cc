//! The status view: a [`StatusSnapshot`] in the shape of
//! `juju status --format=json`, as `GET /v1/status` serves it.
//!
//! These are plain types and functions, so that the command line can read
//! the same JSON back into the same types and print it as a table or YAML
//! ([`crate::status::text`]). The pieces the status document is kept in
//! ([`crate::status::document`]) are rendered by the same functions
//! ([`machine_view`], [`unit_view`], [`application_headers`]).
//! Keys are kebab-case, as Juju's are. Maps are keyed by berth's own name
//! types, so machines come out in numeric order (`2` before `10`) and
//! containers follow their host.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::domain::charm::{CharmUrl, Namespace};
use crate::domain::instance_types::HourlyPrice;
use crate::domain::machine::{life, machine_status, Life, MachineState};
use crate::domain::names::{ApplicationName, MachineId, UnitName};
use crate::status::snapshot::{MachineShown, StatusSnapshot, UnitShown};
use crate::store::records::{
    ApplicationRecord, MachineRecord, ModelRecord, RelationRecord, UnitRecord,
};

/// What Juju shows as a machine's instance id before it has one.
pub const NO_INSTANCE: &str = "pending";

/// The whole status.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub struct Status {
    pub model: ModelView,
    /// Top-level machines by id; containers are under their host.
    #[schema(value_type = BTreeMap<String, MachineView>)]
    pub machines: BTreeMap<MachineId, MachineView>,
    #[schema(value_type = BTreeMap<String, ApplicationView>)]
    pub applications: BTreeMap<ApplicationName, ApplicationView>,
}

/// The model and where the status was taken.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub struct ModelView {
    pub name: String,
    pub uuid: String,
    /// Always `iaas`: berth starts machines.
    #[serde(rename = "type")]
    pub model_type: String,
    /// The controller's uuid.
    pub controller: String,
    /// The active provider (`sim`, `ec2`).
    pub cloud: String,
    /// The model constraints, canonical; absent when unset.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub constraints: String,
    /// The change-log revision this status reflects: follow
    /// `/v1/events?since=<revision>` to miss nothing after it.
    pub revision: i64,
    /// What every machine's instance costs an hour together, in US
    /// dollars (`"0.4992"`).
    #[serde(default)]
    #[schema(value_type = String, example = "0.4992")]
    pub hourly_cost: HourlyPrice,
}

/// A status word and the message beside it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct StatusInfo {
    pub current: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// When it entered this status (RFC 3339, UTC).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(format = DateTime)]
    pub since: Option<String>,
}

impl StatusInfo {
    fn new(current: &str, message: Option<String>) -> StatusInfo {
        StatusInfo {
            current: current.to_string(),
            message,
            since: None,
        }
    }

    /// The status, entered at `ms` (milliseconds since the epoch).
    fn since_ms(mut self, ms: i64) -> StatusInfo {
        self.since = Some(rfc3339(ms));
        self
    }
}

/// `ms` (milliseconds since the epoch) as RFC 3339 in UTC, to the second:
/// `2026-11-25T12:34:56Z`.
///
/// Years 0 to 9999 (every time berth takes from its clock) are written
/// digit by digit into a buffer of the text's fixed width: a million
/// machines' status formats millions of these as it is read whole. Others
/// go through [`format!`], which writes any width and sign.
pub fn rfc3339(ms: i64) -> String {
    let (year, month, day, of_day) = civil_time(ms);
    if !(0..=9999).contains(&year) {
        return rfc3339_formatted(ms);
    }
    let mut text = *b"0000-00-00T00:00:00Z";
    for (at, width, value) in [
        (0, 4, year),
        (5, 2, month),
        (8, 2, day),
        (11, 2, of_day / 3600),
        (14, 2, of_day % 3600 / 60),
        (17, 2, of_day % 60),
    ] {
        let mut rest = value;
        for place in text[at..at + width].iter_mut().rev() {
            *place = b'0' + (rest % 10) as u8;
            rest /= 10;
        }
    }
    String::from_utf8_lossy(&text).into_owned()
}

/// [`rfc3339`] through [`format!`], for any year.
fn rfc3339_formatted(ms: i64) -> String {
    let (year, month, day, of_day) = civil_time(ms);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        of_day / 3600,
        of_day % 3600 / 60,
        of_day % 60
    )
}

/// The UTC year, month, day and second of the day of `ms` (milliseconds
/// since the epoch).
fn civil_time(ms: i64) -> (i64, i64, i64, i64) {
    let secs = ms.div_euclid(1000);
    let (days, of_day) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Howard Hinnant's `civil_from_days`.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day, of_day)
}

/// What a unit's status is made from of its machine: the machine's state
/// and when it entered it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MachineSeen {
    pub state: MachineState,
    pub since_ms: i64,
}

/// A base as Juju prints it: `{"name": "ubuntu", "channel": "22.04"}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct BaseView {
    pub name: String,
    /// The release, and its risk when that is not `stable`.
    pub channel: String,
}

impl BaseView {
    /// The view of a base written as `ubuntu@22.04`.
    pub fn of(text: &str) -> BaseView {
        let (name, channel) = text.split_once('@').unwrap_or((text, ""));
        BaseView {
            name: name.to_string(),
            channel: channel.to_string(),
        }
    }
}

/// A machine (or container).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub struct MachineView {
    /// The agent: `pending`, `started`, `down`, `error` or `stopped`.
    pub juju_status: StatusInfo,
    /// The instance: `pending`, `allocating`, `running`, `provisioning
    /// error`, `stopping` or `stopped`; the message is the provider's last
    /// error.
    pub machine_status: StatusInfo,
    /// The preferred address (public, else private), as Juju's `dns-name`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dns_name: Option<String>,
    /// Every address the provider reports, the preferred first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ip_addresses: Vec<String>,
    /// The cloud's id, or `pending` while there is none.
    pub instance_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_type: Option<String>,
    /// What its instance costs an hour in US dollars, as the cloud priced
    /// it at launch (`"0.0416"`); absent without an instance of its own (a
    /// container's host pays).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>, example = "0.0416")]
    pub hourly_price: Option<HourlyPrice>,
    pub base: BaseView,
    /// The machine's constraints, canonical; absent when none are set.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub constraints: String,
    /// What the instance has: `arch=amd64 cores=2 mem=8192M
    /// availability-zone=sim-a`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hardware: Option<String>,
    /// `dying` or `dead` once removal was asked for; absent while alive.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub life: Option<String>,
    /// The lxd containers on this machine, by id.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schema(value_type = BTreeMap<String, MachineView>, no_recursion)]
    pub containers: BTreeMap<MachineId, MachineView>,
}

/// An application.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub struct ApplicationView {
    /// The charm's name.
    pub charm: String,
    /// `charmhub` (a charm named on deploy) or `local` (a directory).
    pub charm_origin: String,
    pub charm_name: String,
    pub charm_rev: u32,
    pub base: BaseView,
    /// The most severe workload status of its units.
    pub application_status: StatusInfo,
    /// For a subordinate: the principal applications it is joined to.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subordinate_to: Vec<String>,
    /// The application's endpoints and what each is related to.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub relations: BTreeMap<String, Vec<RelatedView>>,
    /// `dying` while being removed; absent while alive.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub life: Option<String>,
    /// The application it scales with (deployed `--to scale-with=db`): it
    /// has a unit beside every unit of that one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale_with: Option<String>,
    /// What the machines its principal units are on cost an hour together,
    /// in US dollars (a machine shared with another application counts for
    /// both).
    #[serde(default)]
    #[schema(value_type = String, example = "0.0832")]
    pub hourly_cost: HourlyPrice,
    /// Principal units by name (a subordinate application's units are
    /// shown under their principals).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schema(value_type = BTreeMap<String, UnitView>)]
    pub units: BTreeMap<UnitName, UnitView>,
}

/// One side of a relation, seen from the other.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub struct RelatedView {
    pub related_application: String,
    pub interface: String,
    /// `global` or `container`.
    pub scope: String,
}

/// A unit.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub struct UnitView {
    /// The machine it is assigned to; absent for a subordinate (it is on
    /// its principal's) or a unit not yet assigned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub machine: Option<MachineId>,
    pub juju_status: StatusInfo,
    pub workload_status: StatusInfo,
    /// The subordinate units beside this one, by name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schema(value_type = BTreeMap<String, UnitView>, no_recursion)]
    pub subordinates: BTreeMap<UnitName, UnitView>,
}

/// The status of a snapshot, on the cloud `cloud`.
///
/// # Guarantees
///
/// Every machine of the snapshot appears once: a container under its host
/// (or at the top level if its host is missing, which the store does not
/// allow); every principal unit under its application, every subordinate
/// unit under its principal (or, if that is missing, under its own
/// application).
pub fn status_view(snapshot: &StatusSnapshot, cloud: &str) -> Status {
    Status {
        model: model_view(
            &snapshot.model,
            cloud,
            snapshot.revision,
            snapshot
                .machines
                .iter()
                .filter_map(|m| m.hourly_price)
                .sum(),
        ),
        machines: machines_view(&snapshot.machines),
        applications: applications_view(
            &snapshot.applications,
            &snapshot.units,
            &snapshot.relations,
            &snapshot
                .machines
                .iter()
                .map(|m| {
                    (
                        m.id,
                        MachineSeen {
                            state: m.state(),
                            since_ms: m.status_since_ms,
                        },
                    )
                })
                .collect(),
            &snapshot
                .machines
                .iter()
                .map(|m| (m.id, m.hourly_price))
                .collect(),
        ),
    }
}

/// The model section.
pub fn model_view(
    model: &ModelRecord,
    cloud: &str,
    revision: i64,
    hourly_cost: HourlyPrice,
) -> ModelView {
    ModelView {
        name: model.name.clone(),
        uuid: model.uuid.clone(),
        model_type: "iaas".to_string(),
        controller: model.controller_uuid.clone(),
        cloud: cloud.to_string(),
        constraints: model.constraints.to_string(),
        revision,
        hourly_cost,
    }
}

/// One machine, without its containers.
pub fn machine_view(machine: &MachineShown) -> MachineView {
    let state = machine.state;
    let words = machine_status(state);
    let message = Some(machine.message.clone()).filter(|m| !m.is_empty());
    MachineView {
        juju_status: StatusInfo::new(
            words.juju_status,
            (words.juju_status == "error")
                .then(|| message.clone())
                .flatten(),
        )
        .since_ms(machine.since_ms),
        machine_status: StatusInfo::new(words.machine_status, message).since_ms(machine.since_ms),
        dns_name: machine.addresses.first().cloned(),
        ip_addresses: machine.addresses.clone(),
        instance_id: machine
            .instance_id
            .as_deref()
            .unwrap_or(NO_INSTANCE)
            .to_string(),
        instance_type: machine.instance_type.clone(),
        hourly_price: machine.hourly_price,
        base: BaseView::of(&machine.base),
        constraints: machine.constraints.clone(),
        hardware: machine.hardware.clone().filter(|h| !h.is_empty()),
        life: match life(state) {
            Life::Alive => None,
            other => Some(other.as_str().to_string()),
        },
        containers: BTreeMap::new(),
    }
}

fn machines_view(machines: &[MachineRecord]) -> BTreeMap<MachineId, MachineView> {
    let mut hosts: BTreeMap<MachineId, MachineView> = machines
        .iter()
        .filter(|m| !m.id.is_container())
        .map(|m| (m.id, machine_view(&MachineShown::of(m))))
        .collect();
    for container in machines.iter().filter(|m| m.id.is_container()) {
        let view = machine_view(&MachineShown::of(container));
        match container.id.parent().and_then(|p| hosts.get_mut(&p)) {
            Some(host) => {
                host.containers.insert(container.id, view);
            }
            None => {
                hosts.insert(container.id, view);
            }
        }
    }
    hosts
}

/// Juju's order of workload statuses, least to most severe: the
/// application shows its most severe unit's.
const WORKLOAD_SEVERITY: [&str; 7] = [
    "unknown",
    "active",
    "waiting",
    "maintenance",
    "blocked",
    "terminated",
    "error",
];

/// How many ranks [`severity`] has.
pub(crate) const SEVERITIES: usize = WORKLOAD_SEVERITY.len();

/// Where a workload status ranks among [`WORKLOAD_SEVERITY`]: an
/// application shows the most severe of its units'.
pub(crate) fn severity(status: &str) -> usize {
    WORKLOAD_SEVERITY
        .iter()
        .position(|s| *s == status)
        .unwrap_or(0)
}

/// A unit's agent and workload status, as Juju shows them. berth runs no
/// charm hooks, so a unit's stored statuses stay as they were made
/// (`allocating`, `waiting`) and what a user needs is its machine's
/// progress: `waiting for machine` until the machine is up, then the agent
/// is `idle` (or `lost` while the machine is down) and the workload
/// `unknown`, as Juju shows a charm that set no status.
/// Each status carries `since`: the later of the unit's creation and its
/// machine's entering its state, as the status follows the machine.
pub fn unit_statuses(unit: &UnitShown, machine: Option<MachineSeen>) -> (StatusInfo, StatusInfo) {
    let unset = unit.agent_status == "allocating" && unit.workload_status == "waiting";
    let since = machine.map_or(unit.created_at_ms, |m| m.since_ms.max(unit.created_at_ms));
    if !unset {
        return (
            StatusInfo::new(&unit.agent_status, None).since_ms(unit.created_at_ms),
            StatusInfo::new(&unit.workload_status, None).since_ms(unit.created_at_ms),
        );
    }
    let (agent, workload) = unit_statuses_from(machine.map(|m| m.state));
    (agent.since_ms(since), workload.since_ms(since))
}

fn unit_statuses_from(machine: Option<MachineState>) -> (StatusInfo, StatusInfo) {
    match machine {
        Some(MachineState::Started) => (
            StatusInfo::new("idle", None),
            StatusInfo::new("unknown", None),
        ),
        Some(MachineState::Down) => (
            StatusInfo::new(
                "lost",
                Some("agent lost, see the machine's status".to_string()),
            ),
            StatusInfo::new("unknown", None),
        ),
        _ => (
            StatusInfo::new("allocating", None),
            StatusInfo::new("waiting", Some("waiting for machine".to_string())),
        ),
    }
}

/// A unit's view, without its subordinates, given its machine's state
/// (`None` when it has no machine or the machine is gone).
pub fn unit_view(unit: &UnitShown, machine: Option<MachineSeen>) -> UnitView {
    let (agent, workload) = unit_statuses(unit, machine);
    UnitView {
        machine: if unit.principal.is_some() {
            None
        } else {
            unit.machine
        },
        juju_status: agent,
        workload_status: workload,
        subordinates: BTreeMap::new(),
    }
}

fn charm_fields(charm_url: &str) -> (String, String, u32) {
    match charm_url.parse::<CharmUrl>() {
        Ok(url) => (
            url.name().to_string(),
            match url.namespace() {
                Namespace::Local => "local",
                Namespace::Charmhub => "charmhub",
            }
            .to_string(),
            url.revision(),
        ),
        // The store only keeps URLs it made; show what it has regardless.
        Err(_) => (charm_url.to_string(), "unknown".to_string(), 0),
    }
}

fn application_view(app: &ApplicationRecord) -> ApplicationView {
    let (charm, origin, revision) = charm_fields(&app.charm_url);
    ApplicationView {
        charm: charm.clone(),
        charm_origin: origin,
        charm_name: charm,
        charm_rev: revision,
        base: BaseView::of(&app.base.to_string()),
        application_status: StatusInfo::new("unknown", None),
        subordinate_to: Vec::new(),
        relations: BTreeMap::new(),
        life: (app.life != "alive").then(|| app.life.clone()),
        scale_with: app.scale_with.as_ref().map(ToString::to_string),
        hourly_cost: HourlyPrice::default(),
        units: BTreeMap::new(),
    }
}

/// The applications with their relations and status words, but no units.
pub fn application_headers(
    applications: &[&ApplicationRecord],
    relations: &[&RelationRecord],
) -> BTreeMap<ApplicationName, ApplicationView> {
    let mut views: BTreeMap<ApplicationName, ApplicationView> = applications
        .iter()
        .map(|a| (a.name.clone(), application_view(a)))
        .collect();
    let subordinate_apps: Vec<&ApplicationName> = applications
        .iter()
        .filter(|a| a.subordinate)
        .map(|a| &a.name)
        .collect();

    for relation in relations {
        let sides = [
            (&relation.app1, &relation.endpoint1, &relation.app2),
            (&relation.app2, &relation.endpoint2, &relation.app1),
        ];
        for (app, endpoint, other) in sides {
            let Some(view) = views.iter_mut().find(|(n, _)| n.as_str() == app.as_str()) else {
                continue;
            };
            view.1
                .relations
                .entry(endpoint.clone())
                .or_default()
                .push(RelatedView {
                    related_application: other.clone(),
                    interface: relation.interface.clone(),
                    scope: relation.scope.clone(),
                });
            let is_subordinate = subordinate_apps.iter().any(|s| s.as_str() == app.as_str());
            let other_is_subordinate = subordinate_apps
                .iter()
                .any(|s| s.as_str() == other.as_str());
            if relation.scope == "container"
                && is_subordinate
                && !other_is_subordinate
                && !view.1.subordinate_to.contains(other)
            {
                view.1.subordinate_to.push(other.clone());
            }
        }
    }
    for view in views.values_mut() {
        view.subordinate_to.sort();
        for related in view.relations.values_mut() {
            related.sort_by(|a, b| a.related_application.cmp(&b.related_application));
        }
    }
    views
}

/// Folds the units' workload statuses, in unit order, into their
/// applications' status: the most severe wins, the later of equals.
pub fn fold_application_status<'a>(
    views: &mut BTreeMap<ApplicationName, ApplicationView>,
    workloads: impl IntoIterator<Item = (&'a ApplicationName, &'a StatusInfo)>,
) {
    // Few applications, many units: a tree of names compares a short
    // string where a hash map would hash it for every unit.
    let mut worst: BTreeMap<&ApplicationName, MostSevere<&StatusInfo>> = BTreeMap::new();
    for (application, workload) in workloads {
        worst.entry(application).or_default().see(workload);
    }
    for (name, worst) in worst {
        if let (Some(view), Some(workload)) = (views.get_mut(name), worst.most()) {
            view.application_status = workload.clone();
        }
    }
}

/// The most severe of the workload statuses seen, in unit order, the
/// later of equals: the application's status. What is seen is a status or
/// anything a status can be made from again, ranked by `severity`.
pub struct MostSevere<T>(Option<(usize, T)>);

impl<T> Default for MostSevere<T> {
    fn default() -> Self {
        MostSevere(None)
    }
}

impl<T: Copy> MostSevere<T> {
    /// Sees `item`, whose workload status ranks `rank`.
    pub fn see_ranked(&mut self, rank: usize, item: T) {
        if self.0.is_none_or(|(most, _)| rank >= most) {
            self.0 = Some((rank, item));
        }
    }

    /// `None` when nothing was seen.
    pub fn most(&self) -> Option<T> {
        self.0.map(|(_, item)| item)
    }
}

impl<'a> MostSevere<&'a StatusInfo> {
    pub fn see(&mut self, workload: &'a StatusInfo) {
        self.see_ranked(severity(&workload.current), workload);
    }
}

/// Adds to each application the price of every distinct machine its
/// principal units are on: `placed` is (application, machine, the
/// machine's price) for each principal unit with a machine.
pub fn fold_application_cost<'a>(
    views: &mut BTreeMap<ApplicationName, ApplicationView>,
    placed: impl IntoIterator<Item = (&'a ApplicationName, MachineId, Option<HourlyPrice>)>,
) {
    let mut counted: BTreeSet<(&ApplicationName, MachineId)> = BTreeSet::new();
    for (application, machine, price) in placed {
        let Some(price) = price else { continue };
        if counted.insert((application, machine)) {
            if let Some(view) = views.get_mut(application) {
                view.hourly_cost = view.hourly_cost + price;
            }
        }
    }
}

fn applications_view(
    applications: &[ApplicationRecord],
    units: &[UnitRecord],
    relations: &[RelationRecord],
    machine_states: &HashMap<MachineId, MachineSeen>,
    prices: &HashMap<MachineId, Option<HourlyPrice>>,
) -> BTreeMap<ApplicationName, ApplicationView> {
    let unit_view = |unit: &UnitRecord| {
        unit_view(
            &UnitShown::of(unit),
            unit.machine.and_then(|m| machine_states.get(&m).copied()),
        )
    };
    let mut views = application_headers(
        &applications.iter().collect::<Vec<_>>(),
        &relations.iter().collect::<Vec<_>>(),
    );

    for unit in units.iter().filter(|u| u.principal.is_none()) {
        if let Some(app) = views.get_mut(&unit.application) {
            app.units.insert(unit.name.clone(), unit_view(unit));
        }
    }
    for unit in units.iter().filter(|u| u.principal.is_some()) {
        let principal = unit.principal.as_ref();
        let host = principal.and_then(|p| {
            views
                .get_mut(p.application())
                .and_then(|app| app.units.get_mut(p))
        });
        match host {
            Some(principal_view) => {
                principal_view
                    .subordinates
                    .insert(unit.name.clone(), unit_view(unit));
            }
            None => {
                if let Some(app) = views.get_mut(&unit.application) {
                    app.units.insert(unit.name.clone(), unit_view(unit));
                }
            }
        }
    }

    let workloads: Vec<(&ApplicationName, StatusInfo)> = units
        .iter()
        .map(|u| {
            let state = u.machine.and_then(|m| machine_states.get(&m).copied());
            (&u.application, unit_statuses(&UnitShown::of(u), state).1)
        })
        .collect();
    fold_application_status(&mut views, workloads.iter().map(|(a, w)| (*a, w)));
    fold_application_cost(
        &mut views,
        units
            .iter()
            .filter(|u| u.principal.is_none())
            .filter_map(|u| {
                let machine = u.machine?;
                Some((
                    &u.application,
                    machine,
                    prices.get(&machine).copied().flatten(),
                ))
            }),
    );
    views
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;
    use crate::domain::base::Base;
    use crate::domain::constraints::Constraints;
    use crate::domain::machine::{Lifecycle, Machine, MachineRole, MachineState};
    use crate::store::records::ModelRecord;

    fn machine(id: &str, state: MachineState) -> MachineRecord {
        MachineRecord {
            id: id.parse().unwrap(),
            base: "ubuntu@22.04".parse().unwrap(),
            constraints: Constraints::default(),
            placement: None,
            role: MachineRole::Workload,
            machine: Machine {
                state,
                lifecycle: Lifecycle::default(),
            },
            instance_type: None,
            hourly_price: None,
            hardware: None,
            awaiting_check_in: false,
            retry_at_ms: None,
            last_heartbeat_ms: None,
            created_at_ms: 0,
            updated_at_ms: 0,
            addresses: Vec::new(),
            status_since_ms: SINCE_MS,
            lease: None,
        }
    }

    /// 2025-11-25T12:00:00Z: when the test machines entered their states.
    const SINCE_MS: i64 = 1_764_072_000_000;
    const SINCE: &str = "2025-11-25T12:00:00Z";

    fn application(name: &str, charm_url: &str, subordinate: bool) -> ApplicationRecord {
        ApplicationRecord {
            name: name.parse().unwrap(),
            charm_url: charm_url.to_string(),
            base: "ubuntu@22.04".parse().unwrap(),
            constraints: Constraints::default(),
            subordinate,
            settings: json!({}),
            life: "alive".to_string(),
            scale_with: None,
        }
    }

    fn unit(name: &str, machine: &str, principal: Option<&str>, workload: &str) -> UnitRecord {
        let name: UnitName = name.parse().unwrap();
        UnitRecord {
            application: name.application().clone(),
            name,
            base: "ubuntu@22.04".parse().unwrap(),
            constraints: Constraints::default(),
            machine: Some(machine.parse().unwrap()),
            principal: principal.map(|p| p.parse().unwrap()),
            agent_status: "allocating".to_string(),
            workload_status: workload.to_string(),
            created_at_ms: SINCE_MS - 3_600_000,
        }
    }

    fn snapshot() -> StatusSnapshot {
        let mut started = machine("0", MachineState::Started);
        started.machine.lifecycle.instance_id = Some("i-0".into());
        started.instance_type = Some("m5.large".into());
        started.hardware = Some("arch=amd64 cores=2 mem=8192M availability-zone=sim-a".into());
        started.constraints = Constraints::parse("mem=2G").unwrap();
        started.addresses = vec!["192.0.2.10".into(), "2001:db8::a".into()];
        let mut failed = machine("10", MachineState::ProvisioningError);
        failed.machine.lifecycle.last_error = Some("no capacity".into());
        StatusSnapshot {
            revision: 42,
            model: ModelRecord {
                name: "default".into(),
                uuid: "model-uuid".into(),
                controller_uuid: "controller-uuid".into(),
                constraints: Constraints::parse("cores=2").unwrap(),
            },
            machines: vec![
                started,
                machine("0/lxd/1", MachineState::Pending),
                machine("2", MachineState::Down),
                failed,
            ],
            applications: vec![
                application("mysql", "ch:mysql-0", false),
                application("ntp", "local:ntp-3", true),
            ],
            units: vec![
                unit("mysql/0", "0", None, "waiting"),
                unit("mysql/1", "0/lxd/1", None, "blocked"),
                unit("ntp/0", "0", Some("mysql/0"), "waiting"),
            ],
            relations: vec![RelationRecord {
                key: "mysql:juju-info ntp:juju-info".into(),
                app1: "ntp".into(),
                endpoint1: "juju-info".into(),
                app2: "mysql".into(),
                endpoint2: "juju-info".into(),
                interface: "juju-info".into(),
                scope: "container".into(),
            }],
            zones: Vec::new(),
        }
    }

    fn view() -> serde_json::Value {
        serde_json::to_value(status_view(&snapshot(), "sim")).unwrap()
    }

    #[test]
    fn the_model_section_names_the_model_controller_cloud_and_revision() {
        assert_eq!(
            view()["model"],
            json!({
                "name": "default",
                "uuid": "model-uuid",
                "type": "iaas",
                "controller": "controller-uuid",
                "cloud": "sim",
                "constraints": "cores=2",
                "revision": 42,
                "hourly-cost": "0",
            })
        );
    }

    #[test]
    fn a_started_machine_shows_its_instance_hardware_and_constraints() {
        let machine = &view()["machines"]["0"];
        assert_eq!(
            machine["juju-status"],
            json!({"current": "started", "since": SINCE})
        );
        assert_eq!(
            machine["machine-status"],
            json!({"current": "running", "since": SINCE})
        );
        assert_eq!(machine["dns-name"], "192.0.2.10");
        assert_eq!(
            machine["ip-addresses"],
            json!(["192.0.2.10", "2001:db8::a"])
        );
        assert_eq!(machine["instance-id"], "i-0");
        assert_eq!(machine["instance-type"], "m5.large");
        assert_eq!(
            machine["hardware"],
            "arch=amd64 cores=2 mem=8192M availability-zone=sim-a"
        );
        assert_eq!(machine["constraints"], "mem=2048M");
        assert_eq!(
            machine["base"],
            json!({"name": "ubuntu", "channel": "22.04"})
        );
    }

    #[test]
    fn containers_are_nested_under_their_host() {
        let view = view();
        assert!(view["machines"].get("0/lxd/1").is_none());
        let container = &view["machines"]["0"]["containers"]["0/lxd/1"];
        assert_eq!(container["juju-status"]["current"], "pending");
        assert_eq!(container["instance-id"], "pending");
    }

    #[test]
    fn machines_come_in_numeric_order() {
        let status = status_view(&snapshot(), "sim");
        let ids: Vec<String> = status.machines.keys().map(ToString::to_string).collect();
        assert_eq!(ids, ["0", "2", "10"]);
        let text = serde_json::to_string(&status).unwrap();
        assert!(text.find("\"2\":").unwrap() < text.find("\"10\":").unwrap());
    }

    #[test]
    fn a_machine_whose_heartbeats_stopped_shows_down() {
        let machine = &view()["machines"]["2"];
        assert_eq!(
            machine["juju-status"],
            json!({"current": "down", "since": SINCE})
        );
        assert_eq!(
            machine["machine-status"],
            json!({"current": "running", "since": SINCE})
        );
        // No instance address reported: no DNS name.
        assert!(machine.get("dns-name").is_none() && machine.get("ip-addresses").is_none());
    }

    #[test]
    fn a_provisioning_error_shows_the_providers_message_on_both_statuses() {
        let machine = &view()["machines"]["10"];
        assert_eq!(
            machine["juju-status"],
            json!({"current": "error", "message": "no capacity", "since": SINCE})
        );
        assert_eq!(
            machine["machine-status"],
            json!({"current": "provisioning error", "message": "no capacity", "since": SINCE})
        );
        assert_eq!(machine["instance-id"], "pending");
    }

    #[test]
    fn a_dying_machine_shows_its_life() {
        let mut snapshot = snapshot();
        snapshot.machines[0].machine.state = MachineState::Stopping;
        let view = serde_json::to_value(status_view(&snapshot, "sim")).unwrap();
        assert_eq!(view["machines"]["0"]["life"], "dying");
        assert!(view["machines"]["2"].get("life").is_none());
    }

    /// Unit app/0 on machine 0, its statuses as made, added at
    /// `created_at_ms`.
    fn unit_on_machine_0(created_at_ms: i64) -> UnitShown {
        UnitShown::of(&UnitRecord {
            name: "app/0".parse().unwrap(),
            application: "app".parse().unwrap(),
            base: Base::DEFAULT,
            constraints: Default::default(),
            machine: Some(MachineId::new(0)),
            principal: None,
            agent_status: "allocating".into(),
            workload_status: "waiting".into(),
            created_at_ms,
        })
    }

    fn unit_on(state: Option<MachineState>) -> (StatusInfo, StatusInfo) {
        unit_statuses(
            &unit_on_machine_0(0),
            state.map(|state| MachineSeen { state, since_ms: 0 }),
        )
    }

    #[test]
    fn a_unit_waits_for_its_machine_until_the_machine_is_started() {
        for state in [
            None,
            Some(MachineState::Pending),
            Some(MachineState::Starting),
            Some(MachineState::ProvisioningError),
        ] {
            let (agent, workload) = unit_on(state);
            assert_eq!(agent.current, "allocating");
            assert_eq!(
                (workload.current.as_str(), workload.message.as_deref()),
                ("waiting", Some("waiting for machine"))
            );
        }
    }

    #[test]
    fn a_unit_on_a_started_machine_is_idle_with_an_unknown_workload() {
        let (agent, workload) = unit_on(Some(MachineState::Started));
        assert_eq!(
            (agent.current.as_str(), workload.current.as_str()),
            ("idle", "unknown")
        );
    }

    #[test]
    fn times_are_rfc3339_in_utc_and_read_back_to_the_second() {
        for (ms, text) in [
            (0, "1970-01-01T00:00:00Z"),
            (SINCE_MS + 999, SINCE),
            (951_782_400_000, "2000-02-29T00:00:00Z"),
            (4_102_444_799_000, "2099-12-31T23:59:59Z"),
        ] {
            assert_eq!(rfc3339(ms), text);
            assert_eq!(
                crate::api::webhooks::parse_rfc3339_ms(text),
                Some(ms - ms % 1000)
            );
        }
    }

    proptest! {
        /// The digit-by-digit form writes what `format!` writes, for
        /// any time a store holds and for times far outside it.
        #[test]
        fn times_are_written_as_format_writes_them(
            ms in prop_oneof![
                -62_167_219_200_000i64..253_402_300_800_000,
                any::<i64>(),
            ]
        ) {
            prop_assert_eq!(rfc3339(ms), rfc3339_formatted(ms));
        }
    }

    #[test]
    fn a_unit_shows_the_later_of_its_creation_and_its_machine_entering_its_state() {
        let mut unit = unit_on_machine_0(SINCE_MS);
        let seen = |since_ms| {
            Some(MachineSeen {
                state: MachineState::Started,
                since_ms,
            })
        };
        let (agent, workload) = unit_statuses(&unit, seen(SINCE_MS + 60_000));
        assert_eq!(agent.since.as_deref(), Some("2025-11-25T12:01:00Z"));
        assert_eq!(workload.since, agent.since);
        let (agent, _) = unit_statuses(&unit, seen(SINCE_MS - 60_000));
        assert_eq!(agent.since.as_deref(), Some(SINCE));
        let (agent, _) = unit_statuses(&unit, None);
        assert_eq!(agent.since.as_deref(), Some(SINCE));
        unit.agent_status = "executing".into();
        let (agent, _) = unit_statuses(&unit, seen(SINCE_MS + 60_000));
        assert_eq!(agent.since.as_deref(), Some(SINCE));
    }

    #[test]
    fn a_unit_on_a_down_machine_shows_its_agent_lost() {
        let (agent, _) = unit_on(Some(MachineState::Down));
        assert_eq!(agent.current, "lost");
    }

    #[test]
    fn subordinate_units_are_under_their_principal() {
        let view = view();
        let mysql = &view["applications"]["mysql"];
        assert_eq!(mysql["units"]["mysql/0"]["machine"], "0");
        // Machine 0 is started: no charm has set a status, so "unknown".
        assert_eq!(
            mysql["units"]["mysql/0"]["subordinates"]["ntp/0"]["workload-status"],
            json!({"current": "unknown", "since": SINCE})
        );
        assert!(mysql["units"]["mysql/0"]["subordinates"]["ntp/0"]
            .get("machine")
            .is_none());
        assert!(view["applications"]["ntp"].get("units").is_none());
    }

    #[test]
    fn an_application_shows_its_charm_base_and_worst_unit_status() {
        let view = view();
        let mysql = &view["applications"]["mysql"];
        assert_eq!(mysql["charm"], "mysql");
        assert_eq!(mysql["charm-origin"], "charmhub");
        assert_eq!(mysql["charm-rev"], 0);
        // The status of its most severe unit, since that unit's.
        assert_eq!(
            mysql["application-status"],
            json!({"current": "blocked", "since": "2025-11-25T11:00:00Z"})
        );
        let ntp = &view["applications"]["ntp"];
        assert_eq!(ntp["charm-origin"], "local");
        assert_eq!(ntp["charm-rev"], 3);
    }

    #[test]
    fn relations_are_listed_from_both_sides_and_subordinates_name_their_principals() {
        let view = view();
        assert_eq!(
            view["applications"]["mysql"]["relations"],
            json!({"juju-info": [{"related-application": "ntp", "interface": "juju-info", "scope": "container"}]})
        );
        assert_eq!(
            view["applications"]["ntp"]["subordinate-to"],
            json!(["mysql"])
        );
        assert!(view["applications"]["mysql"]
            .get("subordinate-to")
            .is_none());
    }

    #[test]
    fn the_view_reads_back_into_the_same_types() {
        let status = status_view(&snapshot(), "sim");
        let text = serde_json::to_string(&status).unwrap();
        let back: Status = serde_json::from_str(&text).unwrap();
        assert_eq!(back, status);
    }

    #[test]
    fn a_base_with_a_risk_keeps_it_in_the_channel() {
        let base: Base = "ubuntu@24.04/edge".parse().unwrap();
        assert_eq!(
            BaseView::of(&base.to_string()),
            BaseView {
                name: "ubuntu".into(),
                channel: "24.04/edge".into()
            }
        );
    }
}
