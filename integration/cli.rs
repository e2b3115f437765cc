//! The command line against a real API: the requests each command makes,
//! what it prints, and how it fails.
//!
//! Each test starts an app ([`start_controller`], the harness's
//! [`crate::support::app::spawn_app`] on a runtime of its own) without an engine,
//! so machines stay pending unless the test moves them, and runs the
//! command line in-process with [`berth::cli::run_args`], capturing what it
//! writes to standard output and error.

use std::io::Write;
use std::ops::ControlFlow;
use std::path::PathBuf;
use std::sync::mpsc;
use std::time::Duration;

use berth::cli::agent::{self, AgentArgs, Clock};
use berth::cli::error::CliError;
use berth::cli::follow::Backoff;
use berth::cli::status::{watch, Format, PATH};
use berth::cli::{client::Client, dispatch, run_args, Command, Io, Session};
use berth::contracts::provider::ProviderZone;
use berth::status::text::Shown;
use berth::status::view::Status;
use clap::Parser;
use serde_json::{json, Value};

use crate::support::app::free_port;
use crate::support::charm_dir;
use crate::support::controller::{start_controller, TestController};

/// What one run of the command line did.
#[derive(Debug)]
struct Output {
    code: u8,
    out: String,
    err: String,
}

/// Runs `berth <args>` with `--url` and `--token` given first.
fn berth(controller: &TestController, args: &[&str]) -> Output {
    let mut full = vec![
        "berth",
        "--url",
        controller.address.as_str(),
        "--token",
        controller.token.as_str(),
    ];
    full.extend_from_slice(args);
    run(&full)
}

/// Runs a whole command line (the program name first).
fn run(args: &[&str]) -> Output {
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let code = run_args(
        args.iter().copied(),
        &mut Io {
            out: &mut out,
            err: &mut err,
            tty: false,
        },
    );
    Output {
        code,
        out: String::from_utf8(out).expect("utf-8 output"),
        err: String::from_utf8(err).expect("utf-8 errors"),
    }
}

/// Runs a command that must succeed silently on standard error, and
/// returns its standard output.
fn ok(controller: &TestController, args: &[&str]) -> String {
    let output = berth(controller, args);
    assert_eq!((output.code, output.err.as_str()), (0, ""), "{args:?}");
    output.out
}

fn status_json(controller: &TestController) -> Value {
    serde_json::from_str(&ok(controller, &["status", "--format", "json"])).expect("status json")
}

const MYSQL: &str = "name: mysql\nprovides:\n  db:\n    interface: mysql\nseries: [jammy]\n";
const WORDPRESS: &str =
    "name: wordpress\nrequires:\n  db:\n    interface: mysql\nseries: [jammy]\n";

#[test]
fn the_seeds_constraints_scenario_gives_one_2g_machine_and_two_3g_machines() {
    let controller = start_controller();
    assert_eq!(
        ok(
            &controller,
            &[
                "deploy",
                "--constraints",
                "mem=2G",
                "wordpress",
                "--base",
                "ubuntu@22.04"
            ]
        ),
        "Deployed \"wordpress\" from charm \"ch:wordpress-0\" on ubuntu@22.04\n\
         added unit wordpress/0 to machine 0\n"
    );
    assert_eq!(
        ok(
            &controller,
            &["set-constraints", "--service", "wordpress", "mem=3G"]
        ),
        ""
    );
    assert_eq!(
        ok(&controller, &["constraints", "wordpress"]),
        "mem=3072M\n"
    );
    assert_eq!(
        ok(&controller, &["add-unit", "wordpress", "-n", "2"]),
        "added unit wordpress/1 to machine 1\nadded unit wordpress/2 to machine 2\n"
    );
    let status = status_json(&controller);
    let mems: Vec<&str> = ["0", "1", "2"]
        .iter()
        .map(|m| status["machines"][m]["constraints"].as_str().unwrap())
        .collect();
    assert_eq!(mems, ["mem=2048M", "mem=3072M", "mem=3072M"]);
}

#[test]
fn add_unit_constraints_apply_to_the_new_units_only() {
    let controller = start_controller();
    ok(
        &controller,
        &["deploy", "--constraints", "mem=2G", "wordpress"],
    );
    assert_eq!(
        ok(
            &controller,
            &["add-unit", "wordpress", "--constraints", "mem=8G"]
        ),
        "added unit wordpress/1 to machine 1\n"
    );
    let status = status_json(&controller);
    assert_eq!(status["machines"]["0"]["constraints"], "mem=2048M");
    assert_eq!(status["machines"]["1"]["constraints"], "mem=8192M");
    assert_eq!(
        ok(&controller, &["constraints", "wordpress"]),
        "mem=2048M\n"
    );
    // Bad constraints are refused before anything is sent.
    let refused = berth(
        &controller,
        &["add-unit", "wordpress", "--constraints", "mem=lots"],
    );
    assert_eq!(refused.code, 2, "{refused:?}");
    assert!(
        refused.err.contains(r#"bad "mem" constraint"#),
        "{refused:?}"
    );
    assert_eq!(
        status_json(&controller)["machines"]
            .as_object()
            .unwrap()
            .len(),
        2
    );
}

#[test]
fn set_constraints_takes_the_application_first_and_get_constraints_reads_it() {
    let controller = start_controller();
    ok(&controller, &["deploy", "wordpress"]);
    ok(
        &controller,
        &["set-constraints", "wordpress", "mem=3G", "cores=2"],
    );
    assert_eq!(
        ok(&controller, &["get-constraints", "wordpress"]),
        "mem=3072M cores=2\n"
    );
    ok(&controller, &["set-constraints", "wordpress"]);
    assert_eq!(ok(&controller, &["constraints", "wordpress"]), "\n");
}

#[test]
fn model_constraints_round_trip_in_canonical_form() {
    let controller = start_controller();
    assert_eq!(ok(&controller, &["model-constraints"]), "\n");
    ok(&controller, &["set-model-constraints", "cores=2", "mem=4G"]);
    assert_eq!(
        ok(&controller, &["model-constraints"]),
        "mem=4096M cores=2\n"
    );
    assert_eq!(
        status_json(&controller)["model"]["constraints"],
        "mem=4096M cores=2"
    );
}

#[test]
fn constraint_warnings_go_to_standard_error() {
    let controller = start_controller();
    let output = berth(
        &controller,
        &[
            "deploy",
            "wordpress",
            "--constraints",
            "mem=2G virt-type=kvm",
        ],
    );
    assert_eq!(output.code, 0);
    assert!(
        output.out.starts_with("Deployed \"wordpress\""),
        "{output:?}"
    );
    assert_eq!(
        output.err,
        "WARNING constraint \"virt-type\" is not supported by provider \"sim\" and is ignored\n"
    );
    let output = berth(
        &controller,
        &["set-constraints", "wordpress", "virt-type=kvm"],
    );
    assert_eq!((output.code, output.out.as_str()), (0, ""));
    assert_eq!(
        output.err,
        "WARNING constraint \"virt-type\" is not supported by provider \"sim\" and is ignored\n"
    );
}

#[test]
fn bad_input_is_refused_with_exit_code_2_and_changes_nothing() {
    let controller = start_controller();
    let before = controller.store().revision();
    let cases: [(&[&str], &str); 5] = [
        (
            &["deploy", "/no/such/charm/dir"],
            "ERROR cannot read the charm /no/such/charm/dir: No such file or directory (os error 2); expected a charm directory or a .charm (zip) archive\n",
        ),
        (
            &["deploy", "wordpress", "--to", "4,5,,"],
            "ERROR invalid --to parameter \"4,5,,\"\n",
        ),
        (
            &["deploy", "wordpress", "--constraints", "mem=lots"],
            "ERROR bad \"mem\" constraint: must be a non-negative float with optional M/G/T/P suffix\n",
        ),
        (
            &["add-machine", "kvm:0"],
            "ERROR invalid placement scope \"kvm\": containers other than lxd are not supported\n",
        ),
        (
            &["remove-unit", "wordpress"],
            "ERROR \"wordpress\" is not a valid unit name\n",
        ),
    ];
    for (args, err) in cases {
        let output = berth(&controller, args);
        assert_eq!(output.code, 2, "{args:?}");
        assert_eq!(output.out, "", "{args:?}");
        assert_eq!(output.err, err, "{args:?}");
    }
    assert_eq!(controller.store().revision(), before);
}

#[test]
fn the_controllers_refusals_are_its_message_on_standard_error_with_exit_code_1() {
    let controller = start_controller();
    ok(&controller, &["deploy", "wordpress"]);
    let cases: [(&[&str], &str); 5] = [
        (
            &["deploy", "wordpress"],
            "ERROR application \"wordpress\" already exists\n",
        ),
        (
            &["add-unit", "ghost"],
            "ERROR application \"ghost\" not found\n",
        ),
        (&["remove-machine", "7"], "ERROR machine 7 not found\n"),
        (
            &["add-machine", "no-such-host.example"],
            "ERROR cannot honour placement \"no-such-host.example\": provider \"sim\" cannot place on a named host (expected a machine id, lxd[:<machine>] or zone=<zone>)\n",
        ),
        (
            &["deploy", "x", "--to", "foo=bar"],
            "ERROR cannot honour placement \"foo=bar\": provider \"sim\" does not know the directive \"foo\" (the provider's only directive is zone=<zone>)\n",
        ),
    ];
    for (args, err) in cases {
        let output = berth(&controller, args);
        assert_eq!(output.code, 1, "{args:?}");
        assert_eq!(output.out, "", "{args:?}");
        assert_eq!(output.err, err, "{args:?}");
    }
    // Nothing was added by the refused placements.
    assert_eq!(controller.store().machines().unwrap().len(), 1);
    assert!(controller
        .store()
        .application(&"x".parse().unwrap())
        .is_err());
}

#[test]
fn a_wrong_token_is_refused_by_the_controller() {
    let controller = start_controller();
    let output = run(&[
        "berth",
        "--url",
        &controller.address,
        "--token",
        "guess",
        "status",
    ]);
    assert_eq!(output.code, 1);
    assert_eq!(output.err, "ERROR invalid token\n");
}

#[test]
fn without_a_token_the_data_directorys_admin_token_is_used() {
    let controller = start_controller();
    let data_dir = tempfile::tempdir().unwrap();
    let run_zones = |data_dir: PathBuf| {
        let cli = berth::cli::Cli::try_parse_from(["berth", "--url", &controller.address, "zones"])
            .unwrap();
        let mut session = Session::new(cli.url.as_deref().unwrap(), None, data_dir);
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let result = dispatch(
            &cli.command,
            &mut session,
            &mut Io {
                out: &mut out,
                err: &mut err,
                tty: false,
            },
        );
        (result, String::from_utf8(out).unwrap())
    };
    let (result, _) = run_zones(data_dir.path().to_path_buf());
    let e = result.unwrap_err();
    assert!(
        e.to_string().starts_with(&format!(
            "no admin token: none was given with --token or BERTH_TOKEN, and {} cannot be read",
            data_dir.path().join("admin.token").display()
        )),
        "{e}"
    );
    std::fs::write(
        data_dir.path().join(berth::cli::ADMIN_TOKEN_FILE),
        format!("{}\n", controller.token),
    )
    .unwrap();
    let (result, out) = run_zones(data_dir.path().to_path_buf());
    assert!(result.is_ok(), "{result:?}");
    assert_eq!(out, "No availability zones are known yet.\n");
}

#[test]
fn status_json_has_the_shape_of_juju_status_json() {
    let controller = start_controller();
    ok(
        &controller,
        &["deploy", "wordpress", "-n", "2", "--base", "ubuntu@22.04"],
    );
    let text = ok(&controller, &["status", "--format", "json"]);
    assert!(text.starts_with("{\"model\":{"), "{text}");
    assert!(text.ends_with("}\n"), "{text}");
    assert_eq!(text.lines().count(), 1);
    let status: Value = serde_json::from_str(&text).unwrap();
    let mut keys: Vec<&String> = status.as_object().unwrap().keys().collect();
    keys.sort();
    assert_eq!(keys, ["applications", "machines", "model"]);
    assert_eq!(status["model"]["cloud"], "sim");
    assert_eq!(status["model"]["type"], "iaas");
    assert_eq!(status["machines"]["1"]["juju-status"]["current"], "pending");
    // Every status object says since when, in RFC 3339.
    for info in [
        &status["machines"]["1"]["juju-status"],
        &status["machines"]["1"]["machine-status"],
        &status["applications"]["wordpress"]["application-status"],
        &status["applications"]["wordpress"]["units"]["wordpress/1"]["workload-status"],
        &status["applications"]["wordpress"]["units"]["wordpress/1"]["juju-status"],
    ] {
        let since = info["since"].as_str().unwrap_or_default();
        assert!(
            berth::api::webhooks::parse_rfc3339_ms(since).is_some(),
            "{info}"
        );
    }
    assert_eq!(
        status["machines"]["1"]["base"],
        json!({"name": "ubuntu", "channel": "22.04"})
    );
    assert_eq!(
        status["applications"]["wordpress"]["units"]["wordpress/1"]["machine"],
        "1"
    );
    let typed: Status = serde_json::from_value(status).unwrap();
    assert_eq!(typed.machines.len(), 2);
}

#[test]
fn status_yaml_is_the_same_data_as_json() {
    let controller = start_controller();
    ok(&controller, &["deploy", "wordpress"]);
    let yaml = ok(&controller, &["status", "--format", "yaml"]);
    assert!(yaml.starts_with("model:\n"), "{yaml}");
    let from_yaml: Value = serde_yaml_ng::from_str(&yaml).unwrap();
    assert_eq!(from_yaml, status_json(&controller));
}

#[test]
fn tabular_status_shows_the_model_applications_units_and_machines() {
    let controller = start_controller();
    ok(
        &controller,
        &[
            "deploy",
            "wordpress",
            "-n",
            "2",
            "--base",
            "ubuntu@22.04",
            "--constraints",
            "mem=4G",
        ],
    );
    ok(&controller, &["add-machine", "lxd:0"]);
    controller.fail_provisioning("1", "no capacity in sim-b");
    controller.launch("0");
    let text = ok(&controller, &["status"]);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[0],
        "Model    Controller                            Cloud/Region  Version  Timestamp  $/h"
    );
    assert!(lines[1].starts_with("default  "), "{text}");
    assert!(lines[1].contains(&format!("  sim           {}  ", env!("CARGO_PKG_VERSION"))));
    assert_eq!(
        lines[2..].join("\n"),
        "
App        Version  Status   Scale  Charm      Base          Rev  $/h  Message
wordpress           waiting      2  wordpress  ubuntu@22.04    0   $0  waiting for machine

Unit         Workload  Agent       Machine  Message
wordpress/0  waiting   allocating  0        waiting for machine
wordpress/1  waiting   allocating  1        waiting for machine

Machine  State    DNS  Inst id  Base          AZ     $/h  Constraints  Message
0        pending       i-0      ubuntu@22.04  sim-a       mem=4096M    running
0/lxd/0  pending       pending  ubuntu@24.04                           pending
1        error         pending  ubuntu@22.04              mem=4096M    no capacity in sim-b"
    );
}

#[test]
fn an_empty_model_says_so() {
    let controller = start_controller();
    let text = ok(&controller, &["status"]);
    assert!(
        text.ends_with("\n\nModel \"default\" is empty.\n"),
        "{text}"
    );
}

#[test]
fn machines_are_added_as_machines_or_containers_and_removed() {
    let controller = start_controller();
    assert_eq!(
        ok(&controller, &["add-machine", "-n", "2"]),
        "created machine 0\ncreated machine 1\n"
    );
    assert_eq!(
        ok(&controller, &["add-machine", "lxd:0"]),
        "created container 0/lxd/0\n"
    );
    assert_eq!(
        ok(
            &controller,
            &[
                "add-machine",
                "--constraints",
                "mem=4G",
                "--base",
                "ubuntu@24.04"
            ]
        ),
        "created machine 2\n"
    );
    assert_eq!(
        status_json(&controller)["machines"]["2"]["constraints"],
        "mem=4096M"
    );
    assert_eq!(
        ok(&controller, &["remove-machine", "0/lxd/0", "1"]),
        "removing machine 0/lxd/0\nremoving machine 1\n"
    );
    assert_eq!(
        ok(&controller, &["destroy-machine", "2", "--force"]),
        "removing machine 2\n"
    );
    let status = status_json(&controller);
    let ids: Vec<&String> = status["machines"].as_object().unwrap().keys().collect();
    assert_eq!(ids, ["0"]);
    assert!(status["machines"]["0"].get("containers").is_none());
}

#[test]
fn removing_a_machine_with_units_needs_force() {
    let controller = start_controller();
    ok(&controller, &["deploy", "wordpress"]);
    let output = berth(&controller, &["remove-machine", "0"]);
    assert_eq!(output.code, 1);
    assert!(output.err.starts_with("ERROR machine 0 "), "{output:?}");
    assert_eq!(
        ok(&controller, &["remove-machine", "0", "--force"]),
        "removing machine 0\n"
    );
}

#[test]
fn units_and_applications_are_removed() {
    let controller = start_controller();
    ok(&controller, &["deploy", "wordpress", "-n", "3"]);
    assert_eq!(
        ok(&controller, &["remove-unit", "wordpress/0", "wordpress/2"]),
        "removed unit wordpress/0\nremoved unit wordpress/2\n"
    );
    assert_eq!(
        ok(&controller, &["destroy-unit", "wordpress/1"]),
        "removed unit wordpress/1\n"
    );
    let output = berth(&controller, &["remove-unit", "wordpress/1"]);
    assert_eq!(output.code, 1);
    assert!(output.err.starts_with("ERROR "), "{output:?}");
    assert_eq!(
        ok(&controller, &["remove-application", "wordpress"]),
        "removed application wordpress\n"
    );
    assert_eq!(status_json(&controller)["applications"], json!({}));
}

#[test]
fn retrying_a_pending_machine_gives_the_controllers_conflict_and_a_failed_one_is_retried() {
    let controller = start_controller();
    ok(&controller, &["add-machine", "-n", "2"]);
    let output = berth(&controller, &["retry-provisioning", "0"]);
    assert_eq!(output.code, 1);
    assert_eq!(output.out, "");
    assert_eq!(
        output.err,
        "ERROR machine 0 is not in provisioning error (it is pending): only machines in error can be retried\n"
    );

    controller.fail_provisioning("0", "no capacity in sim-a");
    controller.fail_provisioning("1", "no capacity in sim-a");
    assert_eq!(
        ok(&controller, &["resolved", "0", "--constraints", "mem=8G"]),
        "retrying machine 0\n"
    );
    let status = status_json(&controller);
    assert_eq!(status["machines"]["0"]["juju-status"]["current"], "pending");
    assert_eq!(status["machines"]["0"]["constraints"], "mem=8192M");
    assert_eq!(
        ok(&controller, &["retry-provisioning", "--all"]),
        "retrying machine 1\n"
    );
}

#[test]
fn applications_are_integrated_and_the_relation_removed() {
    let controller = start_controller();
    let (mysql, wordpress) = (charm_dir(MYSQL, None), charm_dir(WORDPRESS, None));
    ok(&controller, &["deploy", mysql.path().to_str().unwrap()]);
    let deployed = ok(&controller, &["deploy", wordpress.path().to_str().unwrap()]);
    assert!(
        deployed.starts_with("Deployed \"wordpress\" from charm \"local:wordpress-"),
        "{deployed}"
    );
    assert_eq!(
        ok(&controller, &["relate", "wordpress", "mysql"]),
        "integrated wordpress:db with mysql:db (interface mysql, scope global)\n"
    );
    let status = status_json(&controller);
    assert_eq!(
        status["applications"]["wordpress"]["relations"]["db"][0]["related-application"],
        "mysql"
    );
    let output = berth(&controller, &["integrate", "wordpress", "mysql"]);
    assert_eq!(output.code, 1);
    assert!(output.err.starts_with("ERROR "), "{output:?}");
    assert_eq!(
        ok(&controller, &["remove-relation", "mysql", "wordpress:db"]),
        "removed the relation between mysql and wordpress:db\n"
    );
}

#[test]
fn a_dry_run_of_a_local_charm_stores_the_charm_once_and_says_so() {
    let controller = start_controller();
    let mysql = charm_dir(MYSQL, None);
    let path = mysql.path().to_str().unwrap();
    let first = berth(&controller, &["deploy", path, "--dry-run"]);
    assert_eq!(first.code, 0, "{first:?}");
    assert_eq!(
        first.err,
        "Stored charm \"local:mysql-0\" on the controller for the plan to read\n"
    );
    let revision = status_json(&controller)["model"]["revision"].clone();
    // The same contents again: nothing stored, nothing said, and a plan's
    // revision holds for the deploy that follows.
    let second = berth(&controller, &["deploy", path, "--dry-run"]);
    assert_eq!((second.code, second.err.as_str()), (0, ""));
    assert_eq!(status_json(&controller)["model"]["revision"], revision);
    assert!(status_json(&controller)["applications"]
        .as_object()
        .unwrap()
        .is_empty());
    let deployed = ok(
        &controller,
        &["deploy", path, "--if-revision", &revision.to_string()],
    );
    assert!(
        deployed.starts_with("Deployed \"mysql\" from charm \"local:mysql-0\""),
        "{deployed}"
    );
}

#[test]
fn zones_are_listed_disabled_and_enabled() {
    let controller = start_controller();
    controller
        .runtime
        .block_on(controller.store().set_provider_zones(vec![
            ProviderZone {
                name: "sim-a".into(),
                available: true,
                reason: String::new(),
            },
            ProviderZone {
                name: "sim-b".into(),
                available: false,
                reason: "impaired".into(),
            },
        ]))
        .unwrap();
    assert_eq!(
        ok(&controller, &["zones"]),
        "Zone   State        Message\nsim-a  available\nsim-b  unavailable  impaired\n"
    );
    assert_eq!(
        ok(&controller, &["disable-zone", "sim-a"]),
        "zone sim-a: disabled (disabled by an administrator)\n"
    );
    assert_eq!(
        ok(&controller, &["enable-zone", "sim-a"]),
        "zone sim-a: available\n"
    );
    let output = berth(&controller, &["enable-zone", "sim-z"]);
    assert_eq!(output.code, 1);
    assert_eq!(
        output.err,
        "ERROR zone \"sim-z\" not found; zones: sim-a, sim-b\n"
    );
}

#[test]
fn sim_faults_are_shown_set_and_cleared() {
    let controller = start_controller();
    assert_eq!(ok(&controller, &["sim-faults"]), "No faults are set.\n");
    let table = "Fault          Setting\n\
                 zones down     sim-b\n\
                 zone capacity  sim-a=3\n\
                 failure rate   0.3\n\
                 hang           provider calls do not answer\n\
                 throttle       5/2 (a burst of 5, 2 a second)\n\
                 silent agents  0.1\n";
    assert_eq!(
        ok(
            &controller,
            &[
                "sim-faults",
                "set",
                "--zones-down",
                "sim-b",
                "--failure-rate",
                "0.3",
                "--hang",
                "--throttle",
                "5/2",
                "--silent-agents",
                "0.1",
                "--zone-capacity",
                "sim-a=3",
            ],
        ),
        table
    );
    assert_eq!(ok(&controller, &["sim-faults"]), table);
    let faults: Value = controller
        .runtime
        .block_on(async { controller.faults().await.json().await.unwrap() });
    assert_eq!(
        faults,
        json!({
            "zones_down": ["sim-b"],
            "zone_capacity": {"sim-a": 3},
            "failure_rate": 0.3,
            "hang": true,
            "throttle": {"burst": 5, "per_second": 2.0},
            "silent_agents": 0.1,
        })
    );

    // The controller's refusal changes nothing.
    let output = berth(&controller, &["sim-faults", "set", "--zones-down", "sim-z"]);
    assert_eq!(output.code, 1);
    assert_eq!(
        output.err,
        "ERROR zones_down names zone \"sim-z\", which the simulated cloud does not have; \
         expected one of sim-a, sim-b, sim-c\n"
    );
    // So does a value the command line refuses itself.
    let output = berth(&controller, &["sim-faults", "set", "--failure-rate", "1.5"]);
    assert_eq!(output.code, 2);
    assert!(
        output.err.contains("expected a number between 0 and 1"),
        "{}",
        output.err
    );
    assert_eq!(ok(&controller, &["sim-faults"]), table);

    // A set replaces the whole set.
    assert_eq!(
        ok(&controller, &["sim-faults", "set", "--failure-rate", "0.5"]),
        "Fault         Setting\nfailure rate  0.5\n"
    );
    assert_eq!(
        ok(&controller, &["sim-faults", "clear"]),
        "No faults are set.\n"
    );
    assert_eq!(ok(&controller, &["sim-faults"]), "No faults are set.\n");
}

#[test]
fn wait_times_out_with_exit_code_1_when_machines_stay_pending() {
    let controller = start_controller();
    ok(&controller, &["add-machine"]);
    let output = berth(&controller, &["wait", "--timeout", "1"]);
    assert_eq!(output.code, 1);
    assert_eq!(output.out, "0/1 machine started, 1 waiting\n");
    assert_eq!(
        output.err,
        "ERROR timed out after 1s waiting for machines to start: 1 not started yet: 0 (pending)\n"
    );
}

#[test]
fn wait_returns_at_once_when_every_machine_is_started_or_in_error() {
    let controller = start_controller();
    assert_eq!(ok(&controller, &["wait"]), "0/0 machines started\n");
    ok(&controller, &["add-machine", "-n", "2"]);
    controller.fail_provisioning("0", "no capacity in sim-a");
    let otp = controller.launch("1");
    let (checked_in, _, _) = run_agent(
        &controller,
        &["--machine", "1", "--password", otp.expose()],
        1,
    );
    assert!(checked_in.is_ok(), "{checked_in:?}");
    let output = berth(&controller, &["wait", "--timeout", "5"]);
    assert_eq!(output.code, 0, "{output:?}");
    assert_eq!(output.out, "1/2 machines started, 1 in error\n");
    assert_eq!(
        output.err,
        "WARNING machine 0 failed to provision: no capacity in sim-a\n"
    );
}

/// Sends what a command writes to the test, a chunk at a time.
struct Chunks(mpsc::Sender<String>);

impl Write for Chunks {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let _ = self.0.send(String::from_utf8_lossy(buf).into_owned());
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Receives chunks until the text received holds `needle`; a bound, not a
/// timing assertion.
fn receive_until(chunks: &mpsc::Receiver<String>, needle: &str) -> String {
    let mut text = String::new();
    while !text.contains(needle) {
        match chunks.recv_timeout(Duration::from_secs(30)) {
            Ok(chunk) => text.push_str(&chunk),
            Err(e) => panic!("{needle:?} never came ({e}); got {text:?}"),
        }
    }
    text
}

#[test]
fn wait_wakes_on_the_change_that_settles_the_last_machine() {
    let controller = start_controller();
    ok(&controller, &["add-machine"]);
    let (sender, chunks) = mpsc::channel();
    let (url, token) = (controller.address.clone(), controller.token.clone());
    let waiter = std::thread::spawn(move || {
        let (mut out, mut err) = (Chunks(sender), Vec::new());
        let code = run_args(
            [
                "berth",
                "--url",
                &url,
                "--token",
                &token,
                "wait",
                "--timeout",
                "60",
            ],
            &mut Io {
                out: &mut out,
                err: &mut err,
                tty: false,
            },
        );
        (code, String::from_utf8(err).unwrap())
    });
    receive_until(&chunks, "0/1 machine started, 1 waiting\n");
    controller.fail_provisioning("0", "no capacity");
    let (code, err) = waiter.join().unwrap();
    assert_eq!(code, 0);
    assert_eq!(err, "WARNING machine 0 failed to provision: no capacity\n");
    receive_until(&chunks, "0/1 machine started, 1 in error\n");
}

/// `berth status --watch --format json` for `frames` frames, printed to
/// `out` (piped).
fn watch_json(client: &Client, out: &mut dyn Write, frames: usize) -> Result<(), CliError> {
    watch(
        client,
        PATH,
        Shown::Whole,
        Format::Json,
        &mut Io {
            out,
            err: &mut Vec::new(),
            tty: false,
        },
        Some(frames),
    )
}

#[test]
fn status_watch_prints_again_after_a_change() {
    let controller = start_controller();
    let (sender, chunks) = mpsc::channel();
    let client = Client::new(&controller.address, Some(controller.token.clone())).unwrap();
    let watcher = std::thread::spawn(move || watch_json(&client, &mut Chunks(sender), 2));
    let first = receive_until(&chunks, "}\n");
    assert!(first.contains("\"applications\":{}"), "{first}");
    ok(&controller, &["deploy", "wordpress"]);
    watcher.join().unwrap().unwrap();
    let second = receive_until(&chunks, "\"wordpress/0\"");
    assert!(second.starts_with('\n'), "frames are a blank line apart");
}

/// An empty model's status, as the controller answers it.
const EMPTY_STATUS: &str = r#"{"model":{"name":"default","uuid":"u","type":"iaas","controller":"c","cloud":"sim","revision":1},"machines":{},"applications":{}}"#;

/// A stand-in for a controller on loopback that answers each connection
/// in turn with the next of `answers` (a status code and a JSON body),
/// then stops listening; its address, and the requests' first lines.
fn scripted_controller(
    answers: Vec<(u16, &'static str)>,
) -> (String, std::thread::JoinHandle<Vec<String>>) {
    use std::io::{BufRead, BufReader};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let served = std::thread::spawn(move || {
        let mut requests = Vec::new();
        for (code, body) in answers {
            let (stream, _) = listener.accept().unwrap();
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut line = String::new();
            reader.read_line(&mut line).unwrap();
            requests.push(line.trim().to_string());
            line.clear();
            while reader.read_line(&mut line).unwrap() > 2 {
                line.clear();
            }
            write!(
                &stream,
                "HTTP/1.1 {code} Scripted\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
                 Connection: close\r\n\r\n{body}",
                body.len()
            )
            .unwrap();
        }
        requests
    });
    (url, served)
}

/// `berth wait --timeout SECS` against the controller at `url`, with a
/// token it does not check.
fn wait_at(url: &str, timeout: &str) -> Output {
    run(&[
        "berth",
        "--url",
        url,
        "--token",
        "t",
        "wait",
        "--timeout",
        timeout,
    ])
}

/// The controller's answer while it starts or sheds load.
const UNAVAILABLE: (u16, &str) = (
    503,
    r#"{"error":{"code":"unavailable","message":"the controller is starting"}}"#,
);

#[test]
fn wait_reads_the_status_again_when_the_controller_sheds_load() {
    let (url, served) = scripted_controller(vec![UNAVAILABLE, (200, EMPTY_STATUS)]);
    let output = wait_at(&url, "60");
    assert_eq!((output.code, output.err.as_str()), (0, ""), "{output:?}");
    assert_eq!(output.out, "0/0 machines started\n");
    assert_eq!(
        served.join().unwrap(),
        ["GET /v1/status HTTP/1.1", "GET /v1/status HTTP/1.1"]
    );
}

#[test]
fn status_watch_reads_the_status_again_when_the_controller_sheds_load() {
    let (url, served) = scripted_controller(vec![UNAVAILABLE, (200, EMPTY_STATUS)]);
    let client = Client::new(&url, Some("t".into())).unwrap();
    let mut out = Vec::new();
    watch_json(&client, &mut out, 1).unwrap();
    let printed: Status = serde_json::from_slice(&out).unwrap();
    assert_eq!(printed.model.revision, 1);
    assert_eq!(served.join().unwrap().len(), 2);
}

#[test]
fn wait_ends_at_once_when_the_controller_refuses_the_token() {
    let (url, served) = scripted_controller(vec![(
        401,
        r#"{"error":{"code":"unauthorized","message":"invalid admin token"}}"#,
    )]);
    let output = wait_at(&url, "60");
    assert_eq!(
        (output.code, output.err.as_str()),
        (1, "ERROR invalid admin token\n")
    );
    assert_eq!(served.join().unwrap().len(), 1);
}

#[test]
fn wait_for_a_controller_that_never_answers_times_out_naming_the_failure() {
    // A port nothing listens on.
    let url = format!("http://127.0.0.1:{}", free_port());
    let output = wait_at(&url, "1");
    assert_eq!(output.code, 1);
    assert_eq!(output.out, "");
    assert_eq!(
        output.err,
        format!(
            "ERROR timed out after 1s waiting for machines to start: the status could not be \
             read: cannot reach the berth controller at {url}: is 'berth serve' running?\n"
        )
    );
}

/// A clock that records the agent's waits and stops it after `limit`.
struct CountingClock {
    waits: Vec<Duration>,
    limit: usize,
}

impl Clock for CountingClock {
    fn sleep(&mut self, duration: Duration) -> ControlFlow<()> {
        self.waits.push(duration);
        if self.waits.len() >= self.limit {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    }
}

fn agent_args(args: &[&str]) -> AgentArgs {
    let mut full = vec!["berth", "agent"];
    full.extend_from_slice(args);
    match berth::cli::Cli::try_parse_from(full).unwrap().command {
        Command::Agent(args) => args,
        other => panic!("{other:?}"),
    }
}

fn run_agent(
    controller: &TestController,
    args: &[&str],
    limit: usize,
) -> (
    Result<(), berth::cli::error::CliError>,
    String,
    Vec<Duration>,
) {
    let args = agent_args(args);
    let mut session = Session::new(&controller.address, None, PathBuf::from("/nonexistent"));
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let mut clock = CountingClock {
        waits: Vec::new(),
        limit,
    };
    let result = agent::run_with(
        &args,
        &mut session,
        &mut Io {
            out: &mut out,
            err: &mut err,
            tty: false,
        },
        &mut clock,
        Backoff::exact(),
    );
    (result, String::from_utf8(out).unwrap(), clock.waits)
}

#[test]
fn the_agent_checks_in_once_then_heartbeats_every_interval_and_keeps_its_credential() {
    let controller = start_controller();
    ok(&controller, &["add-machine"]);
    let otp = controller.launch("0");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("credential");
    let file_arg = file.to_str().unwrap();

    let (result, out, waits) = run_agent(
        &controller,
        &[
            "--machine",
            "0",
            "--password",
            otp.expose(),
            "--credential-file",
            file_arg,
            "--interval",
            "7",
        ],
        3,
    );
    assert!(result.is_ok(), "{result:?}");
    assert_eq!(
        out,
        "machine 0: checked in\nmachine 0: heartbeat accepted, started\n"
    );
    assert_eq!(waits, [Duration::from_secs(7); 3]);
    assert_eq!(
        status_json(&controller)["machines"]["0"]["juju-status"]["current"],
        "started"
    );

    // Restarted, the agent carries on with the stored credential.
    let (result, out, _) = run_agent(
        &controller,
        &["--machine", "0", "--credential-file", file_arg],
        1,
    );
    assert!(result.is_ok(), "{result:?}");
    assert_eq!(
        out,
        format!(
            "machine 0: using the credential in {file_arg}\nmachine 0: heartbeat accepted, started\n"
        )
    );

    // The one-time password worked once.
    let output = run(&[
        "berth",
        "--url",
        &controller.address,
        "agent",
        "--machine",
        "0",
        "--password",
        otp.expose(),
    ]);
    assert_eq!(output.code, 1);
    assert_eq!(
        output.err,
        "ERROR the controller refused machine 0's one-time password: \
         machine 0: the one-time password is wrong or was already used\n"
    );
}

#[test]
fn an_agent_writes_its_credential_down_before_it_spends_the_password() {
    let controller = start_controller();
    ok(&controller, &["add-machine"]);
    let otp = controller.launch("0");
    // A credential file that cannot be written: refused before the
    // password is spent.
    let (result, _, _) = run_agent(
        &controller,
        &[
            "--machine",
            "0",
            "--password",
            otp.expose(),
            "--credential-file",
            "/nonexistent/berth/credential",
        ],
        1,
    );
    let e = result.unwrap_err();
    assert!(
        e.to_string()
            .starts_with("cannot write the credential file /nonexistent/berth/credential: "),
        "{e}"
    );
    assert_eq!(
        status_json(&controller)["machines"]["0"]["juju-status"]["current"],
        "pending"
    );

    // An agent stopped after writing its credential down, before its
    // check-in reached the controller: started again, it checks in with
    // the password and that credential.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("credential");
    let file_arg = file.to_str().unwrap();
    let chosen = "0123456789abcdef".repeat(4);
    std::fs::write(&file, format!("{chosen}\n")).unwrap();
    let args = [
        "--machine",
        "0",
        "--password",
        otp.expose(),
        "--credential-file",
        file_arg,
    ];
    let (result, out, _) = run_agent(&controller, &args, 1);
    assert!(result.is_ok(), "{result:?}");
    assert_eq!(
        out,
        format!(
            "machine 0: using the credential in {file_arg}\nmachine 0: checked in\n\
             machine 0: heartbeat accepted, started\n"
        )
    );
    assert_eq!(
        status_json(&controller)["machines"]["0"]["juju-status"]["current"],
        "started"
    );
    // Stopped again, before or after its answer came: it carries on with
    // the same credential.
    let (result, out, _) = run_agent(&controller, &args, 1);
    assert!(result.is_ok(), "{result:?}");
    assert_eq!(
        out,
        format!(
            "machine 0: using the credential in {file_arg}\nmachine 0: heartbeat accepted, started\n"
        )
    );
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        format!("{chosen}\n")
    );
}

#[test]
fn an_agent_whose_credential_is_refused_exits_with_a_clear_message() {
    let controller = start_controller();
    ok(&controller, &["add-machine"]);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("credential");
    std::fs::write(&file, "not-the-credential\n").unwrap();
    let (result, _, _) = run_agent(
        &controller,
        &[
            "--machine",
            "0",
            "--credential-file",
            file.to_str().unwrap(),
        ],
        5,
    );
    let e = result.unwrap_err();
    assert_eq!(e.exit_code(), 1);
    assert_eq!(
        e.to_string(),
        format!(
            "the controller refused machine 0's credential: machine 0: wrong agent credential \
             (the credential came from {}; delete it to check in again with a new one-time password)",
            file.display()
        )
    );
}

#[test]
fn a_ca_certificate_for_a_plain_http_controller_is_refused_before_anything_is_sent() {
    // Nothing listens on port 9: had the command been sent, it would say
    // the controller cannot be reached.
    let expected = "ERROR the CA certificate /nonexistent/ca.crt (--ca-cert or BERTH_CA_CERT) \
                    verifies https:// controllers, and http://127.0.0.1:9 is plain HTTP: give the \
                    controller's https:// URL, or leave the CA out\n";
    let status = run(&[
        "berth",
        "--url",
        "http://127.0.0.1:9",
        "--token",
        "t",
        "--ca-cert",
        "/nonexistent/ca.crt",
        "status",
    ]);
    assert_eq!((status.code, status.err.as_str()), (2, expected));
    let login = run(&[
        "berth",
        "--token",
        "t",
        "--ca-cert",
        "/nonexistent/ca.crt",
        "login",
        "http://127.0.0.1:9",
    ]);
    assert_eq!((login.code, login.err.as_str()), (2, expected));
    // Beside an https:// address in a list, it verifies that one.
    let listed = run(&[
        "berth",
        "--url",
        "http://127.0.0.1:9,https://127.0.0.1:9",
        "--token",
        "t",
        "--ca-cert",
        "/nonexistent/ca.crt",
        "status",
    ]);
    assert!(listed.err.contains("/nonexistent/ca.crt"), "{}", listed.err);
    assert!(!listed.err.contains("plain HTTP"), "{}", listed.err);
}

#[test]
fn an_agent_of_an_unknown_machine_exits() {
    let controller = start_controller();
    let output = run(&[
        "berth",
        "--url",
        &controller.address,
        "agent",
        "--machine",
        "9",
        "--password",
        "whatever",
    ]);
    assert_eq!(output.code, 1);
    assert_eq!(output.err, "ERROR machine 9 not found\n");
    // The admin token is not an agent's: given to it, it is refused.
    let output = berth(
        &controller,
        &["agent", "--machine", "9", "--password", "whatever"],
    );
    assert_eq!(output.code, 2);
}

#[test]
fn the_bash_completion_script_is_valid_shell_and_knows_every_command() {
    let output = run(&["berth", "completion", "bash"]);
    assert_eq!((output.code, output.err.as_str()), (0, ""));
    for command in [
        "deploy",
        "add-machine",
        "retry-provisioning",
        "completion",
        "man",
    ] {
        assert!(output.out.contains(command), "{command} is not completed");
    }
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("berth.bash");
    std::fs::write(&script, &output.out).unwrap();
    let checked = std::process::Command::new("bash")
        .arg("-n")
        .arg(&script)
        .output()
        .expect("bash runs");
    assert!(
        checked.status.success(),
        "bash -n refused the script: {}",
        String::from_utf8_lossy(&checked.stderr)
    );
}

#[test]
fn zsh_and_fish_completion_scripts_are_printed() {
    for (shell, marker) in [("zsh", "#compdef berth"), ("fish", "complete -c berth")] {
        let output = run(&["berth", "completion", shell]);
        assert_eq!((output.code, output.err.as_str()), (0, ""), "{shell}");
        assert!(output.out.contains(marker), "{shell}: {}", output.out);
    }
}

#[test]
fn completion_for_an_unknown_shell_is_a_usage_error() {
    let output = run(&["berth", "completion", "tcsh"]);
    assert_eq!(output.code, 2);
    assert_eq!(output.out, "");
    assert!(
        output.err.contains("invalid value 'tcsh'"),
        "{}",
        output.err
    );
}

#[test]
fn man_pages_are_written_for_berth_and_each_command() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("man1");
    let output = run(&["berth", "man", target.to_str().unwrap()]);
    assert_eq!((output.code, output.err.as_str()), (0, ""));
    for page in [
        "berth.1",
        "berth-deploy.1",
        "berth-add-machine.1",
        "berth-man.1",
    ] {
        let path = target.join(page);
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{page}: {e}"));
        assert!(text.contains(".TH"), "{page} is not a man page");
        assert!(
            output.out.lines().any(|l| l == path.to_str().unwrap()),
            "{page} is not listed: {}",
            output.out
        );
    }
}

#[test]
fn man_lists_exactly_the_pages_it_writes_nested_commands_included() {
    let dir = tempfile::tempdir().unwrap();
    let output = run(&["berth", "man", dir.path().to_str().unwrap()]);
    assert_eq!((output.code, output.err.as_str()), (0, ""));
    let mut listed: Vec<PathBuf> = output.out.lines().map(PathBuf::from).collect();
    listed.sort();
    let mut written: Vec<PathBuf> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .collect();
    written.sort();
    assert_eq!(listed, written);
    assert!(
        written.contains(&dir.path().join("berth-sim-faults-set.1")),
        "{written:?}"
    );
}

#[test]
fn man_pages_into_a_place_that_is_not_a_directory_are_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a-file");
    std::fs::write(&file, "not a directory").unwrap();
    let target = file.join("man1");
    let output = run(&["berth", "man", target.to_str().unwrap()]);
    assert_eq!(output.code, 1);
    assert!(
        output.err.starts_with(&format!(
            "ERROR cannot write man pages to {}: ",
            target.display()
        )),
        "{}",
        output.err
    );
}

/// Three available zones, as the provider would report them.
fn three_zones(controller: &TestController) {
    controller
        .runtime
        .block_on(
            controller.store().set_provider_zones(
                ["sim-a", "sim-b", "sim-c"]
                    .map(|name| ProviderZone {
                        name: name.into(),
                        available: true,
                        reason: String::new(),
                    })
                    .to_vec(),
            ),
        )
        .unwrap();
}

#[test]
fn a_dry_run_deploy_prints_the_plan_as_json_and_changes_nothing() {
    let controller = start_controller();
    three_zones(&controller);
    let before = controller.store().revision();
    let big = |more: &[&str]| -> Vec<String> {
        ["deploy", "big", "-n", "3", "--constraints", "mem=16G"]
            .iter()
            .chain(more)
            .map(|a| a.to_string())
            .collect()
    };
    let ok_big = |more: &[&str]| {
        let args = big(more);
        ok(
            &controller,
            &args.iter().map(String::as_str).collect::<Vec<_>>(),
        )
    };
    let out = ok_big(&["--dry-run", "--format", "json"]);
    let plan: Value = serde_json::from_str(&out).expect("plan json");
    assert_eq!(controller.store().revision(), before, "nothing changed");
    assert_eq!(plan["revision"], before);
    let machines = plan["machines"].as_array().unwrap();
    assert_eq!(machines.len(), 3);
    let zones: std::collections::BTreeSet<&str> = machines
        .iter()
        .map(|m| m["zone"].as_str().unwrap())
        .collect();
    assert_eq!(zones.len(), 3, "spread over the zones: {plan}");
    for machine in machines {
        assert_eq!(machine["action"], "add");
        assert!(machine["instance_type"].is_string(), "{machine}");
        assert!(machine["hourly_price"].is_string(), "{machine}");
        assert!(machine["constraints"]
            .as_str()
            .unwrap()
            .contains("mem=16384M"));
    }
    assert!(status_json(&controller)["applications"]
        .as_object()
        .unwrap()
        .is_empty());

    // The table, then the plan applied at its revision.
    let table = ok_big(&["--dry-run"]);
    assert!(table.starts_with("Action  Machine  Apps  Type"), "{table}");
    assert!(
        table.contains("Model cost: $0/h ($0/month) now, $"),
        "{table}"
    );
    assert!(
        table.contains(&format!("apply it with --if-revision {before}")),
        "{table}"
    );
    let revision = before.to_string();
    ok_big(&["--if-revision", &revision]);
    // The same revision again is stale now.
    let stale = berth(
        &controller,
        &["add-unit", "big", "--if-revision", &revision],
    );
    assert_eq!(stale.code, 1);
    assert!(
        stale
            .err
            .contains("the model has changed since the plan was made"),
        "{}",
        stale.err
    );
    // Options that cannot be carried out are refused before anything is
    // sent.
    for args in [
        &["add-unit", "big", "--format", "json"][..],
        &["add-unit", "big", "--if-revision", "-3"],
        &["remove-machine", "0", "1", "--dry-run"],
        &["add-unit", "big", "--dry-run", "--format", "xml"],
    ] {
        let refused = berth(&controller, args);
        assert_eq!(refused.code, 2, "{args:?}: {}", refused.err);
    }
}

#[test]
fn remove_commands_take_a_dry_run_too() {
    let controller = start_controller();
    three_zones(&controller);
    ok(&controller, &["deploy", "wordpress", "-n", "2"]);
    let before = controller.store().revision();
    let plan: Value = serde_json::from_str(&ok(
        &controller,
        &[
            "remove-machine",
            "0",
            "--force",
            "--dry-run",
            "--format",
            "json",
        ],
    ))
    .unwrap();
    assert_eq!(plan["machines"][0]["action"], "remove");
    assert_eq!(plan["machines"][0]["machine"], "0");
    let out = ok(
        &controller,
        &["remove-application", "wordpress", "--dry-run"],
    );
    assert!(
        out.contains("No machine would be started or removed."),
        "{out}"
    );
    let out = ok(&controller, &["remove-unit", "wordpress/0", "--dry-run"]);
    assert!(
        out.contains("No machine would be started or removed."),
        "{out}"
    );
    assert_eq!(controller.store().revision(), before, "nothing changed");
}

#[test]
fn budgets_are_set_shown_cleared_and_refuse_a_command_over_them() {
    let controller = start_controller();
    three_zones(&controller);
    assert_eq!(
        ok(&controller, &["budgets"]),
        "Scope  Budget $/h\nmodel        none\n"
    );
    assert_eq!(
        ok(&controller, &["set-budget", "0.01"]),
        "Scope  Budget $/h\nmodel       $0.01\n"
    );
    let plan = ok(
        &controller,
        &["deploy", "wordpress", "-n", "3", "--dry-run"],
    );
    assert!(
        plan.contains("Budget of the model: $0.01/h;")
            && plan.contains("(exceeded: the command would be refused)"),
        "{plan}"
    );
    let refused = berth(&controller, &["deploy", "wordpress", "-n", "3"]);
    assert_eq!(refused.code, 1);
    assert!(
        refused.err.contains("over its budget of $0.01"),
        "{}",
        refused.err
    );
    ok(&controller, &["set-budget", "none"]);
    ok(&controller, &["deploy", "wordpress", "-n", "1"]);
    assert_eq!(
        ok(&controller, &["set-budget", "wordpress", "$2.50"]),
        "Scope      Budget $/h\nmodel            none\nwordpress        $2.5\n"
    );
    for bad in [
        &["set-budget", "ten"][..],
        &["set-budget", "-1"],
        &["set-budget", "Bad_Name", "1"],
        &["set-budget", "a", "b", "c"],
    ] {
        assert_eq!(berth(&controller, bad).code, 2, "{bad:?}");
    }
    let unknown = berth(&controller, &["set-budget", "nope", "1"]);
    assert_eq!(unknown.code, 1);
    assert_eq!(unknown.err, "ERROR application \"nope\" not found\n");
}

#[test]
fn explain_names_what_ruled_a_machine_out() {
    let controller = start_controller();
    three_zones(&controller);
    ok(
        &controller,
        &["add-machine", "--constraints", "arch=arm64 mem=100000G"],
    );
    controller.fail_provisioning("0", "no instance type satisfies constraints");
    let out = ok(&controller, &["explain", "0"]);
    assert!(
        out.starts_with("Machine 0 is provisioning-error: no instance type satisfies constraints\nno instance type fits: mem=100000G ruled out the last"),
        "{out}"
    );
    assert!(
        out.contains("Nearest fits, one constraint relaxed:"),
        "{out}"
    );
    let json: Value =
        serde_json::from_str(&ok(&controller, &["explain", "0", "--format", "json"])).unwrap();
    assert_eq!(json["explanation"]["steps"][1]["constraint"], "mem=100000G");
    assert_eq!(berth(&controller, &["explain", "x"]).code, 2);
    let unknown = berth(&controller, &["explain", "9"]);
    assert_eq!(unknown.code, 1);
    assert!(unknown.err.contains("not found"), "{}", unknown.err);
}

#[test]
fn a_deploy_and_an_add_unit_larger_than_one_request_are_one_command() {
    let controller = start_controller();
    let out = ok(&controller, &["deploy", "load", "-n", "2500"]);
    assert_eq!(
        out.lines().filter(|l| l.starts_with("added unit")).count(),
        2500
    );
    assert!(
        out.contains("added unit load/2499 to machine 2499\n"),
        "{out}"
    );
    let out = ok(
        &controller,
        &["add-unit", "load", "-n", "1200", "--constraints", "mem=8G"],
    );
    assert_eq!(out.lines().count(), 1200);
    let status = controller.store().status().unwrap();
    assert_eq!(status.units.len(), 3700);
    assert_eq!(status.machines.len(), 3700);
    // Every unit added by the second command has its constraints, in both
    // of its requests.
    let with_8g = status
        .machines
        .iter()
        .filter(|m| m.constraints.to_string().contains("mem=8192M"))
        .count();
    assert_eq!(with_8g, 1200);
}

#[test]
fn status_shows_only_what_its_filters_select() {
    let controller = start_controller();
    ok(&controller, &["deploy", "wordpress", "-n", "3"]);
    ok(&controller, &["deploy", "mysql"]);
    let keys = |value: &Value| -> Vec<String> {
        value
            .as_object()
            .map(|o| o.keys().cloned().collect())
            .unwrap_or_default()
    };
    let filtered = |args: &[&str]| -> Value {
        let mut full = vec!["status", "--format", "json"];
        full.extend_from_slice(args);
        serde_json::from_str(&ok(&controller, &full)).expect("status json")
    };
    let whole = status_json(&controller);

    let mysql = filtered(&["mysql"]);
    assert_eq!(keys(&mysql["applications"]), ["mysql"]);
    assert_eq!(keys(&mysql["machines"]), ["3"]);
    assert_eq!(
        mysql["applications"]["mysql"],
        whole["applications"]["mysql"]
    );
    assert_eq!(mysql["machines"]["3"], whole["machines"]["3"]);
    assert_eq!(mysql["model"], whole["model"]);

    let first_two = filtered(&["--machines", "0-1"]);
    assert_eq!(keys(&first_two["machines"]), ["0", "1"]);
    assert_eq!(keys(&first_two["applications"]), ["wordpress"]);
    assert_eq!(
        keys(&first_two["applications"]["wordpress"]["units"]),
        ["wordpress/0", "wordpress/1"]
    );
    // The application's status and cost are its own, not the part's.
    let header = |v: &Value| {
        let mut v = v["applications"]["wordpress"].clone();
        v.as_object_mut().unwrap().remove("units");
        v
    };
    assert_eq!(header(&first_two), header(&whole));

    let unit = filtered(&["wordpress/2", "--machines", "0-2"]);
    assert_eq!(keys(&unit["machines"]), ["2"]);
    assert_eq!(
        keys(&unit["applications"]["wordpress"]["units"]),
        ["wordpress/2"]
    );

    let table = ok(&controller, &["status", "mysql"]);
    assert!(table.contains("mysql/0"), "{table}");
    assert!(!table.contains("wordpress/0"), "{table}");
    // A filter that matches nothing says so, not that the model is empty.
    let none = ok(&controller, &["status", "--machines", "99"]);
    assert!(
        none.ends_with("\n\nNothing matches the filter.\n"),
        "{none}"
    );

    let revision = whole["model"]["revision"].clone();
    let missing = berth(&controller, &["status", "nosuch"]);
    assert_eq!(missing.code, 1);
    assert!(
        missing
            .err
            .contains(r#"no application named "nosuch" in the model"#),
        "{}",
        missing.err
    );
    let bad = berth(&controller, &["status", "--machines", "2-1"]);
    assert_eq!(bad.code, 2);
    assert!(bad.err.contains("runs backwards"), "{}", bad.err);
    assert_eq!(status_json(&controller)["model"]["revision"], revision);
}
