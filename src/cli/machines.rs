//! Machine commands: `add-machine`, `remove-machine` (alias
//! `destroy-machine`) and `retry-provisioning` (alias `resolved`, the
//! seeds' name: `resolved 14 --constraints "mem=2G cpu-power=400"`).

use clap::Args;

use crate::api::machines::{AddMachinesRequest, AddMachinesResponse, RetryRequest, RetryResponse};
use crate::cli::applications::canonical_constraints;
use crate::cli::error::CliError;
use crate::cli::plans::PlanArgs;
use crate::cli::{count, Io, Session};
use crate::domain::base::Base;
use crate::domain::names::MachineId;
use crate::domain::placement::Placement;

/// `berth add-machine [PLACEMENT]`.
#[derive(Clone, Debug, PartialEq, Eq, Args)]
pub struct AddMachineArgs {
    // The doc comment is the command line's help, where the brackets mark
    // optional parts, not links.
    #[allow(rustdoc::broken_intra_doc_links)]
    /// lxd (a container on a new machine), lxd:3 (a container on machine
    /// 3), zone=us-east-1a, ssh:[user@]host[:port] (an existing host,
    /// enlisted over SSH); a new machine by default.
    #[arg(value_name = "PLACEMENT")]
    pub placement: Option<String>,
    /// How many machines to add.
    #[arg(short = 'n', value_name = "N", default_value_t = 1)]
    pub count: u32,
    /// The machines' constraints (the model's fill the keys left unset).
    #[arg(long, value_name = "CONSTRAINTS")]
    pub constraints: Option<String>,
    /// The base, such as ubuntu@22.04.
    #[arg(long, value_name = "BASE")]
    pub base: Option<String>,
    #[command(flatten)]
    pub plan: PlanArgs,
}

/// `berth remove-machine ID...`.
#[derive(Clone, Debug, PartialEq, Eq, Args)]
pub struct RemoveMachineArgs {
    /// Machine ids: 3, 0/lxd/1. They are removed in this order, and the
    /// command stops at the first the controller refuses; those before it
    /// stay removed.
    #[arg(value_name = "ID", required = true)]
    pub machines: Vec<String>,
    /// Remove the machines with their units and containers.
    #[arg(long)]
    pub force: bool,
    #[command(flatten)]
    pub plan: PlanArgs,
}

/// `berth retry-provisioning ID...` or `--all`.
#[derive(Clone, Debug, PartialEq, Eq, Args)]
pub struct RetryArgs {
    /// Machines whose provisioning failed.
    #[arg(value_name = "ID", conflicts_with = "all")]
    pub machines: Vec<String>,
    /// Every machine whose provisioning failed.
    #[arg(long)]
    pub all: bool,
    /// Replace the machines' constraints, such as "mem=2G cpu-power=400".
    #[arg(long, value_name = "CONSTRAINTS")]
    pub constraints: Option<String>,
    #[command(flatten)]
    pub plan: PlanArgs,
}

/// Machine ids, parsed.
///
/// # Errors
///
/// [`CliError::Usage`] naming the first id that is not one.
pub fn machine_ids(ids: &[String]) -> Result<Vec<MachineId>, CliError> {
    ids.iter()
        .map(|id| id.parse().map_err(CliError::usage))
        .collect()
}

impl AddMachineArgs {
    /// The request these arguments make.
    ///
    /// # Errors
    ///
    /// [`CliError::Usage`] for anything that does not parse.
    pub fn request(&self) -> Result<AddMachinesRequest, CliError> {
        let placement = self
            .placement
            .as_deref()
            .map(|p| p.parse::<Placement>().map_err(CliError::usage))
            .transpose()?
            .map(|p| p.to_string());
        Ok(AddMachinesRequest {
            count: Some(count("-n", self.count, 1)?),
            base: self
                .base
                .as_deref()
                .map(|b| b.parse::<Base>().map_err(CliError::usage))
                .transpose()?
                .map(|b| b.to_string()),
            constraints: self
                .constraints
                .as_deref()
                .map(|c| canonical_constraints(&[c]))
                .transpose()?,
            placement,
            dry_run: self.plan.dry_run,
            if_revision: self.plan.if_revision,
        })
    }
}

impl RetryArgs {
    /// The request these arguments make.
    ///
    /// # Errors
    ///
    /// [`CliError::Usage`] when no machine is named (and not `--all`), or
    /// for a bad id or constraint.
    pub fn request(&self) -> Result<RetryRequest, CliError> {
        if self.machines.is_empty() && !self.all {
            return Err(CliError::Usage(
                "no machine specified: name the machines to retry, or give --all".into(),
            ));
        }
        Ok(RetryRequest {
            machines: machine_ids(&self.machines)?
                .iter()
                .map(ToString::to_string)
                .collect(),
            all: self.all,
            constraints: self
                .constraints
                .as_deref()
                .map(|c| canonical_constraints(&[c]))
                .transpose()?,
            dry_run: self.plan.dry_run,
            if_revision: self.plan.if_revision,
        })
    }
}

/// `berth add-machine`: prints `created machine 3` or `created container
/// 3/lxd/0` for each, as Juju does.
///
/// # Errors
///
/// Bad input before anything is sent; the controller's refusal.
pub fn add_machine(
    args: &AddMachineArgs,
    session: &mut Session,
    io: &mut Io<'_>,
) -> Result<(), CliError> {
    args.plan.check()?;
    let request = args.request()?;
    if args
        .plan
        .dry_run(io, || session.client()?.post("/v1/machines", &request))?
    {
        return Ok(());
    }
    let added: AddMachinesResponse = session.client()?.post("/v1/machines", &request)?;
    io.warnings(&added.warnings)?;
    for id in &added.machines {
        let kind = if id.contains('/') {
            "container"
        } else {
            "machine"
        };
        writeln!(io.out, "created {kind} {id}")?;
    }
    Ok(())
}

/// `berth remove-machine`: removes the machines one after the other,
/// printing `removing machine 3` for each, and stops at the first the
/// controller refuses.
///
/// # Errors
///
/// A bad id before anything is sent; the controller's refusal.
pub fn remove_machine(
    args: &RemoveMachineArgs,
    session: &mut Session,
    io: &mut Io<'_>,
) -> Result<(), CliError> {
    args.plan.check()?;
    let ids = machine_ids(&args.machines)?;
    if ids.len() > 1 && (args.plan.dry_run || args.plan.if_revision.is_some()) {
        return Err(CliError::Usage(
            "--dry-run and --if-revision take one machine at a time: each removal moves the \
             revision"
                .into(),
        ));
    }
    let client = session.client()?;
    for id in ids {
        let force = if args.force { "?force=true" } else { "" };
        let plan = args.plan.query(if args.force { '&' } else { '?' });
        let path = format!("/v1/machines/{id}{force}{plan}");
        if args.plan.dry_run(io, || client.delete_as(&path))? {
            return Ok(());
        }
        client.delete(&path)?;
        writeln!(io.out, "removing machine {id}")?;
    }
    Ok(())
}

/// `berth retry-provisioning`: prints `retrying machine 3` for each
/// machine made eligible again.
///
/// # Errors
///
/// Bad input before anything is sent; the controller's refusal (then no
/// machine was retried).
pub fn retry(args: &RetryArgs, session: &mut Session, io: &mut Io<'_>) -> Result<(), CliError> {
    args.plan.check()?;
    let request = args.request()?;
    if args.plan.dry_run(io, || {
        session.client()?.post("/v1/machines/retry", &request)
    })? {
        return Ok(());
    }
    let retried: RetryResponse = session.client()?.post("/v1/machines/retry", &request)?;
    io.warnings(&retried.warnings)?;
    for id in &retried.machines {
        writeln!(io.out, "retrying machine {id}")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::cli::tests::{command, parse, run_offline};
    use crate::cli::Command;

    fn add_machine(args: &[&str]) -> Result<serde_json::Value, CliError> {
        let mut full = vec!["add-machine"];
        full.extend_from_slice(args);
        let Command::AddMachine(args) = command(&full) else {
            panic!()
        };
        args.request().map(|r| serde_json::to_value(r).unwrap())
    }

    #[test]
    fn add_machine_takes_placement_count_constraints_and_base() {
        assert_eq!(add_machine(&[]).unwrap(), json!({"count": 1}));
        assert_eq!(
            add_machine(&[
                "lxd:3",
                "-n",
                "2",
                "--constraints",
                "mem=4G",
                "--base",
                "ubuntu@24.04"
            ])
            .unwrap(),
            json!({"count": 2, "base": "ubuntu@24.04", "constraints": "mem=4096M", "placement": "lxd:3"})
        );
        assert_eq!(
            add_machine(&["zone=sim-b"]).unwrap()["placement"],
            "zone=sim-b"
        );
    }

    #[test]
    fn add_machine_refuses_bad_input_with_the_domains_message() {
        assert_eq!(
            add_machine(&["kvm:1"]).unwrap_err().to_string(),
            "invalid placement scope \"kvm\": containers other than lxd are not supported"
        );
        assert_eq!(
            add_machine(&["-n", "0"]).unwrap_err().to_string(),
            "-n must be between 1 and 1000, got 0"
        );
        assert_eq!(
            add_machine(&["--constraints", "arch=z80"])
                .unwrap_err()
                .to_string(),
            "bad \"arch\" constraint: \"z80\" not recognized"
        );
        assert!(add_machine(&["--base", "ubuntu@x"]).is_err());
    }

    #[test]
    fn remove_machine_and_its_alias_take_ids_and_force() {
        for name in ["remove-machine", "destroy-machine"] {
            let Command::RemoveMachine(args) = command(&[name, "1", "0/lxd/2", "--force"]) else {
                panic!("{name}")
            };
            assert!(args.force);
            let ids: Vec<String> = machine_ids(&args.machines)
                .unwrap()
                .iter()
                .map(ToString::to_string)
                .collect();
            assert_eq!(ids, ["1", "0/lxd/2"]);
        }
        assert_eq!(parse(&["remove-machine"]).unwrap_err().exit_code(), 2);
    }

    #[test]
    fn remove_machine_refuses_a_bad_id_before_sending() {
        let (code, out, err) = run_offline(&["remove-machine", "1", "0/kvm/1"]);
        assert_eq!((code, out.as_str()), (2, ""));
        assert_eq!(
            err,
            "ERROR \"0/kvm/1\" is not a valid machine id: container type \"kvm\" is not supported, expected lxd\n"
        );
    }

    fn retry(args: &[&str]) -> Result<serde_json::Value, CliError> {
        let Command::RetryProvisioning(args) = command(args) else {
            panic!()
        };
        args.request().map(|r| serde_json::to_value(r).unwrap())
    }

    #[test]
    fn retry_provisioning_and_resolved_take_ids_and_new_constraints() {
        for name in ["retry-provisioning", "resolved"] {
            assert_eq!(
                retry(&[name, "14", "--constraints", "mem=2G cpu-power=400"]).unwrap(),
                json!({"machines": ["14"], "constraints": "mem=2048M cpu-power=400"}),
                "{name}"
            );
        }
        assert_eq!(
            retry(&["retry-provisioning", "--all"]).unwrap(),
            json!({"all": true})
        );
    }

    #[test]
    fn retry_needs_machines_or_all_but_not_both() {
        let e = retry(&["retry-provisioning"]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "no machine specified: name the machines to retry, or give --all"
        );
        assert_eq!(e.exit_code(), 2);
        assert_eq!(
            parse(&["retry-provisioning", "1", "--all"])
                .unwrap_err()
                .exit_code(),
            2
        );
    }

    #[test]
    fn retry_refuses_bad_ids_and_constraints() {
        assert_eq!(
            retry(&["resolved", "x"]).unwrap_err().to_string(),
            "\"x\" is not a valid machine id"
        );
        assert_eq!(
            retry(&["resolved", "1", "--constraints", "mem="])
                .map(|v| v["constraints"].clone())
                .unwrap(),
            "mem="
        );
        assert!(retry(&["resolved", "1", "--constraints", "mem=x"]).is_err());
    }
}
