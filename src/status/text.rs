//! The status as text: Juju's tables (`berth status`), the API's JSON on
//! one line (`--format json`) and the same data as YAML (`--format yaml`).
//! All three render one [`Status`], the view `GET /v1/status` serves.
//!
//! The tables have Juju's sections:
//!
//! ```text
//! Model    Controller  Cloud/Region  Version  Timestamp
//! default  0f3c9a2e    sim           0.1.0    06:21:51Z
//!
//! App        Version  Status   Scale  Charm      Base          Rev  Message
//! wordpress           waiting      2  wordpress  ubuntu@22.04    0
//!
//! Unit         Workload  Agent       Machine  Message
//! wordpress/0  waiting   allocating  0
//! wordpress/1  waiting   allocating  1
//!
//! Machine  State    DNS         Inst id  Base          AZ     Constraints  Message
//! 0        started  192.0.2.7   i-0      ubuntu@22.04  sim-a  mem=2048M    running
//! 1        pending              pending  ubuntu@22.04         mem=8192M    allocating
//! ```
//!
//! A machine's `DNS` is its preferred address (the JSON's `dns-name`).
//! berth's units have no ports, so Juju's `Public address` and `Ports`
//! columns are left out.
//! Subordinate units are indented under their principal; containers follow
//! their host. [`Table`] lays out other listings (`berth zones`) the same
//! way.

use std::collections::BTreeMap;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::domain::names::{MachineId, UnitName};
use crate::status::view::{BaseView, MachineView, Status, UnitView};

/// Text laid out in columns two spaces apart, as Juju's tab writer does;
/// the last column is not padded and no line ends in spaces.
#[derive(Clone, Debug, Default)]
pub struct Table {
    rows: Vec<Vec<String>>,
    /// Columns whose cells are aligned right (numbers).
    right: Vec<usize>,
}

impl Table {
    /// A table with a header row.
    pub fn new(headers: &[&str]) -> Table {
        Table {
            rows: vec![headers.iter().map(|h| h.to_string()).collect()],
            right: Vec::new(),
        }
    }

    /// Aligns column `index` (from 0) to the right.
    pub fn align_right(&mut self, index: usize) {
        self.right.push(index);
    }

    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// The table, one line per row.
    pub fn render(&self) -> String {
        let columns = self.rows.iter().map(Vec::len).max().unwrap_or(0);
        let mut widths = vec![0; columns];
        for row in &self.rows {
            for (i, cell) in row.iter().enumerate() {
                widths[i] = widths[i].max(cell.chars().count());
            }
        }
        let mut text = String::new();
        for row in &self.rows {
            let mut line = String::new();
            for (i, cell) in row.iter().enumerate() {
                let pad = widths[i] - cell.chars().count();
                let last = i + 1 == row.len();
                if self.right.contains(&i) {
                    line.push_str(&" ".repeat(pad));
                    line.push_str(cell);
                } else {
                    line.push_str(cell);
                    if !last {
                        line.push_str(&" ".repeat(pad));
                    }
                }
                if !last {
                    line.push_str("  ");
                }
            }
            text.push_str(line.trim_end());
            text.push('\n');
        }
        text
    }
}

/// `ubuntu@22.04`.
fn base_text(base: &BaseView) -> String {
    if base.channel.is_empty() {
        base.name.clone()
    } else {
        format!("{}@{}", base.name, base.channel)
    }
}

/// The availability zone out of a hardware description
/// (`arch=amd64 ... availability-zone=sim-a`).
pub fn availability_zone(hardware: Option<&str>) -> &str {
    hardware
        .unwrap_or_default()
        .split_whitespace()
        .find_map(|word| word.strip_prefix("availability-zone="))
        .unwrap_or_default()
}

/// How many units of each application there are, subordinates included.
fn scales(status: &Status) -> BTreeMap<String, usize> {
    fn walk(units: &BTreeMap<UnitName, UnitView>, counts: &mut BTreeMap<String, usize>) {
        for (name, unit) in units {
            *counts
                .entry(name.application().as_str().to_string())
                .or_default() += 1;
            walk(&unit.subordinates, counts);
        }
    }
    let mut counts = BTreeMap::new();
    for app in status.applications.values() {
        walk(&app.units, &mut counts);
    }
    counts
}

fn unit_rows(table: &mut Table, name: &UnitName, unit: &UnitView, level: usize) {
    // As Juju: without a workload message, an agent that is allocating
    // or lost says why in the Message column.
    let mut message = unit.workload_status.message.clone().unwrap_or_default();
    if message.is_empty() && matches!(unit.juju_status.current.as_str(), "allocating" | "lost") {
        message = unit.juju_status.message.clone().unwrap_or_default();
    }
    table.row(vec![
        format!("{}{name}", "  ".repeat(level)),
        unit.workload_status.current.clone(),
        unit.juju_status.current.clone(),
        unit.machine.map(|m| m.to_string()).unwrap_or_default(),
        message,
    ]);
    for (sub_name, sub) in &unit.subordinates {
        unit_rows(table, sub_name, sub, level + 1);
    }
}

fn machine_row(table: &mut Table, id: &MachineId, machine: &MachineView) {
    let message = machine
        .machine_status
        .message
        .clone()
        .unwrap_or_else(|| machine.machine_status.current.clone());
    table.row(vec![
        id.to_string(),
        machine.juju_status.current.clone(),
        machine.dns_name.clone().unwrap_or_default(),
        machine.instance_id.clone(),
        base_text(&machine.base),
        availability_zone(machine.hardware.as_deref()).to_string(),
        machine
            .hourly_price
            .map(|p| format!("${p}"))
            .unwrap_or_default(),
        machine.constraints.clone(),
        message,
    ]);
    for (container_id, container) in &machine.containers {
        machine_row(table, container_id, container);
    }
}

/// What part of the model a status holds: all of it, or what a filter
/// (`berth status wordpress`, `--machines 1-100`) picked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shown {
    Whole,
    Filtered,
}

/// The status as Juju's tables: the model, then applications, units and
/// machines (each section only when it has rows). `version` and
/// `timestamp` fill the model section's columns of those names. A status
/// with nothing in it says the model is empty, or, when `shown` is
/// [`Shown::Filtered`], that nothing matches the filter.
pub fn tabular(status: &Status, shown: Shown, version: &str, timestamp: &str) -> String {
    let model = &status.model;
    let mut head = Table::new(&[
        "Model",
        "Controller",
        "Cloud/Region",
        "Version",
        "Timestamp",
        "$/h",
    ]);
    head.align_right(5);
    head.row(vec![
        model.name.clone(),
        model.controller.clone(),
        model.cloud.clone(),
        version.to_string(),
        timestamp.to_string(),
        format!("${}", model.hourly_cost),
    ]);
    let mut text = head.render();
    if status.applications.is_empty() && status.machines.is_empty() {
        match shown {
            Shown::Whole => text.push_str(&format!("\nModel {:?} is empty.\n", model.name)),
            Shown::Filtered => text.push_str("\nNothing matches the filter.\n"),
        }
        return text;
    }

    if !status.applications.is_empty() {
        let scales = scales(status);
        let mut apps = Table::new(&[
            "App", "Version", "Status", "Scale", "Charm", "Base", "Rev", "$/h", "Message",
        ]);
        apps.align_right(3);
        apps.align_right(6);
        apps.align_right(7);
        for (name, app) in &status.applications {
            let mut message = app.application_status.message.clone().unwrap_or_default();
            if let Some(leader) = &app.scale_with {
                if !message.is_empty() {
                    message.push_str("; ");
                }
                message.push_str(&format!("scales with {leader}"));
            }
            apps.row(vec![
                name.to_string(),
                String::new(),
                app.application_status.current.clone(),
                scales
                    .get(name.as_str())
                    .copied()
                    .unwrap_or_default()
                    .to_string(),
                app.charm_name.clone(),
                base_text(&app.base),
                app.charm_rev.to_string(),
                format!("${}", app.hourly_cost),
                message,
            ]);
        }
        text.push('\n');
        text.push_str(&apps.render());

        let mut principals: Vec<(&UnitName, &UnitView)> = status
            .applications
            .values()
            .flat_map(|app| app.units.iter())
            .collect();
        principals.sort_by(|a, b| a.0.cmp(b.0));
        if !principals.is_empty() {
            let mut units = Table::new(&["Unit", "Workload", "Agent", "Machine", "Message"]);
            for (name, unit) in principals {
                unit_rows(&mut units, name, unit, 0);
            }
            text.push('\n');
            text.push_str(&units.render());
        }
    }

    if !status.machines.is_empty() {
        let mut machines = Table::new(&[
            "Machine",
            "State",
            "DNS",
            "Inst id",
            "Base",
            "AZ",
            "$/h",
            "Constraints",
            "Message",
        ]);
        machines.align_right(6);
        for (id, machine) in &status.machines {
            machine_row(&mut machines, id, machine);
        }
        text.push('\n');
        text.push_str(&machines.render());
    }
    text
}

/// The time of day in UTC as Juju's status shows it, `06:21:51Z`.
pub fn utc_clock(now: SystemTime) -> String {
    let secs = now
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default()
        % 86_400;
    format!(
        "{:02}:{:02}:{:02}Z",
        secs / 3600,
        (secs % 3600) / 60,
        secs % 60
    )
}

/// The status as the API's JSON, on one line, ending in a newline.
///
/// # Errors
///
/// When the status cannot be encoded (it always can: it holds only
/// strings, numbers and maps with string keys).
pub fn json(status: &Status) -> Result<String, serde_json::Error> {
    serde_json::to_string(status).map(|s| s + "\n")
}

/// The status as YAML, ending in a newline.
///
/// # Errors
///
/// As [`json`].
pub fn yaml(status: &Status) -> Result<String, serde_yaml_ng::Error> {
    serde_yaml_ng::to_string(status)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::status::view::{ApplicationView, ModelView, StatusInfo};

    fn info(current: &str, message: Option<&str>) -> StatusInfo {
        StatusInfo {
            current: current.into(),
            message: message.map(str::to_string),
            since: None,
        }
    }

    fn base() -> BaseView {
        BaseView {
            name: "ubuntu".into(),
            channel: "22.04".into(),
        }
    }

    fn machine(agent: &str, instance: &str, message: Option<&str>) -> MachineView {
        MachineView {
            hourly_price: None,
            juju_status: info(agent, None),
            machine_status: info(instance, message),
            dns_name: None,
            ip_addresses: Vec::new(),
            instance_id: "pending".into(),
            instance_type: None,
            base: base(),
            constraints: String::new(),
            hardware: None,
            life: None,
            containers: BTreeMap::new(),
        }
    }

    fn unit(machine: Option<&str>, workload: &str) -> UnitView {
        UnitView {
            machine: machine.map(|m| m.parse().unwrap()),
            juju_status: info("allocating", None),
            workload_status: info(workload, None),
            subordinates: BTreeMap::new(),
        }
    }

    fn app(charm: &str, rev: u32, status: &str) -> ApplicationView {
        ApplicationView {
            hourly_cost: Default::default(),
            charm: charm.into(),
            charm_origin: "charmhub".into(),
            charm_name: charm.into(),
            charm_rev: rev,
            base: base(),
            application_status: info(status, None),
            subordinate_to: Vec::new(),
            relations: BTreeMap::new(),
            life: None,
            scale_with: None,
            units: BTreeMap::new(),
        }
    }

    fn model() -> ModelView {
        ModelView {
            hourly_cost: Default::default(),
            name: "default".into(),
            uuid: "model-uuid".into(),
            model_type: "iaas".into(),
            controller: "0f3c9a2e".into(),
            cloud: "sim".into(),
            constraints: String::new(),
            revision: 42,
        }
    }

    /// mysql with two units (one with an ntp subordinate), ntp, and four
    /// machines: started, a pending container, one in error, machine 10.
    fn status() -> Status {
        let mut started = machine("started", "running", None);
        started.instance_id = "i-0abc".into();
        started.dns_name = Some("192.0.2.10".into());
        started.constraints = "mem=8192M".into();
        started.hardware = Some("arch=amd64 cores=2 mem=8192M availability-zone=sim-a".into());
        started.hourly_price = Some("0.096".parse().unwrap());
        started.containers.insert(
            "0/lxd/1".parse().unwrap(),
            machine("pending", "pending", None),
        );
        let mut mysql = app("mysql", 0, "blocked");
        mysql.hourly_cost = "0.096".parse().unwrap();
        let mut first = unit(Some("0"), "waiting");
        first
            .subordinates
            .insert("ntp/0".parse().unwrap(), unit(None, "waiting"));
        mysql.units.insert("mysql/0".parse().unwrap(), first);
        let mut second = unit(Some("0/lxd/1"), "blocked");
        second.workload_status.message = Some("needs a database".into());
        mysql.units.insert("mysql/1".parse().unwrap(), second);
        let mut ntp = app("ntp", 3, "waiting");
        ntp.subordinate_to = vec!["mysql".into()];
        Status {
            model: ModelView {
                hourly_cost: "0.096".parse().unwrap(),
                ..model()
            },
            machines: BTreeMap::from([
                ("0".parse().unwrap(), started),
                (
                    "2".parse().unwrap(),
                    machine("error", "provisioning error", Some("no capacity in sim-b")),
                ),
                (
                    "10".parse().unwrap(),
                    machine("pending", "allocating", None),
                ),
            ]),
            applications: BTreeMap::from([
                ("mysql".parse().unwrap(), mysql),
                ("ntp".parse().unwrap(), ntp),
            ]),
        }
    }

    #[test]
    fn tabular_status_has_juju_sections_with_subordinates_and_containers_under_their_hosts() {
        assert_eq!(
            tabular(&status(), Shown::Whole, "0.1.0", "06:21:51Z"),
            "\
Model    Controller  Cloud/Region  Version  Timestamp     $/h
default  0f3c9a2e    sim           0.1.0    06:21:51Z  $0.096

App    Version  Status   Scale  Charm  Base          Rev     $/h  Message
mysql           blocked      2  mysql  ubuntu@22.04    0  $0.096
ntp             waiting      1  ntp    ubuntu@22.04    3      $0

Unit     Workload  Agent       Machine  Message
mysql/0  waiting   allocating  0
  ntp/0  waiting   allocating
mysql/1  blocked   allocating  0/lxd/1  needs a database

Machine  State    DNS         Inst id  Base          AZ        $/h  Constraints  Message
0        started  192.0.2.10  i-0abc   ubuntu@22.04  sim-a  $0.096  mem=8192M    running
0/lxd/1  pending              pending  ubuntu@22.04                              pending
2        error                pending  ubuntu@22.04                              no capacity in sim-b
10       pending              pending  ubuntu@22.04                              allocating
"
        );
    }

    #[test]
    fn an_empty_model_says_so() {
        let empty = Status {
            model: model(),
            machines: BTreeMap::new(),
            applications: BTreeMap::new(),
        };
        assert_eq!(
            tabular(&empty, Shown::Whole, "0.1.0", "00:00:00Z"),
            "\
Model    Controller  Cloud/Region  Version  Timestamp  $/h
default  0f3c9a2e    sim           0.1.0    00:00:00Z   $0

Model \"default\" is empty.
"
        );
        // The same, picked by a filter: the model may hold much else.
        assert!(tabular(&empty, Shown::Filtered, "0.1.0", "00:00:00Z")
            .ends_with("\n\nNothing matches the filter.\n"));
    }

    #[test]
    fn machines_without_applications_show_only_the_machine_section() {
        let mut only = status();
        only.applications.clear();
        let text = tabular(&only, Shown::Whole, "0.1.0", "00:00:00Z");
        assert!(!text.contains("App "), "{text}");
        assert!(!text.contains("Unit "), "{text}");
        assert!(text.contains("\nMachine  State"), "{text}");
    }

    #[test]
    fn an_allocating_unit_without_a_workload_message_shows_its_agent_message() {
        let mut s = status();
        let mysql = s.applications.get_mut(&"mysql".parse().unwrap()).unwrap();
        let unit = mysql.units.values_mut().next().unwrap();
        unit.juju_status.message = Some("waiting for machine".into());
        let text = tabular(&s, Shown::Whole, "v", "t");
        assert!(
            text.contains("mysql/0  waiting   allocating  0        waiting for machine\n"),
            "{text}"
        );
    }

    #[test]
    fn a_lost_unit_without_a_workload_message_shows_its_agent_message() {
        let mut s = status();
        let mysql = s.applications.get_mut(&"mysql".parse().unwrap()).unwrap();
        let unit = mysql.units.values_mut().next().unwrap();
        unit.juju_status = info("lost", Some("agent lost, see the machine's status"));
        unit.workload_status = info("unknown", None);
        let text = tabular(&s, Shown::Whole, "v", "t");
        assert!(
            text.contains(
                "mysql/0  unknown   lost        0        agent lost, see the machine's status\n"
            ),
            "{text}"
        );
    }

    #[test]
    fn the_availability_zone_comes_from_the_hardware() {
        assert_eq!(
            availability_zone(Some("arch=amd64 availability-zone=us-east-1a")),
            "us-east-1a"
        );
        assert_eq!(availability_zone(Some("arch=amd64")), "");
        assert_eq!(availability_zone(None), "");
    }

    #[test]
    fn a_table_aligns_numbers_right_and_ends_no_line_in_spaces() {
        let mut table = Table::new(&["Name", "Count", "Note"]);
        table.align_right(1);
        table.row(vec!["a".into(), "7".into(), String::new()]);
        table.row(vec!["long-name".into(), "12345".into(), "x".into()]);
        assert_eq!(
            table.render(),
            "Name       Count  Note\na              7\nlong-name  12345  x\n"
        );
    }

    #[test]
    fn the_clock_is_utc_time_of_day() {
        let t = UNIX_EPOCH + Duration::from_secs(86_400 * 3 + 6 * 3600 + 21 * 60 + 51);
        assert_eq!(utc_clock(t), "06:21:51Z");
    }

    #[test]
    fn json_is_the_apis_shape_on_one_line() {
        let text = json(&status()).unwrap();
        assert!(text.ends_with("}\n"));
        assert_eq!(text.lines().count(), 1);
        let value: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(value["model"]["revision"], 42);
        assert_eq!(
            value["machines"]["2"]["machine-status"]["message"],
            "no capacity in sim-b"
        );
        assert_eq!(
            value["applications"]["mysql"]["units"]["mysql/0"]["subordinates"]["ntp/0"]
                ["workload-status"]["current"],
            "waiting"
        );
        let back: Status = serde_json::from_str(&text).unwrap();
        assert_eq!(back, status());
    }

    #[test]
    fn yaml_is_the_same_data() {
        let text = yaml(&status()).unwrap();
        assert!(text.starts_with("model:\n  name: default\n"), "{text}");
        let back: Status = serde_yaml_ng::from_str(&text).unwrap();
        assert_eq!(back, status());
    }
}
