//! `berth sim-faults`: show, replace or clear the simulated cloud's faults
//! (`/v1/sim/faults`).

use std::collections::BTreeMap;

use clap::{Args, Subcommand};

use crate::cli::error::CliError;
use crate::cli::{Io, Session};
use crate::providers::sim::{FaultSet, Throttle};
use crate::status::text::Table;

const PATH: &str = "/v1/sim/faults";

/// `berth sim-faults [set ... | clear]`.
#[derive(Clone, Debug, PartialEq, Args)]
pub struct SimFaultsArgs {
    /// Without one, the faults in force are shown.
    #[command(subcommand)]
    pub action: Option<SimFaultsAction>,
}

/// What to do with the faults.
#[derive(Clone, Debug, PartialEq, Subcommand)]
pub enum SimFaultsAction {
    /// Replace the faults in force with these; any left out are cleared.
    Set(SetFaultsArgs),
    /// Clear every fault (instances that stopped stay stopped).
    Clear,
}

/// `berth sim-faults set`.
#[derive(Clone, Debug, Default, PartialEq, Args)]
pub struct SetFaultsArgs {
    /// Zones that are down: launches there fail and instances there stop
    /// (repeat, or separate with commas).
    #[arg(long, value_delimiter = ',', value_name = "ZONE")]
    pub zones_down: Vec<String>,
    /// The most live instances a zone holds, as ZONE=N (repeat, or
    /// separate with commas).
    #[arg(long, value_delimiter = ',', value_parser = parse_capacity, value_name = "ZONE=N")]
    pub zone_capacity: Vec<(String, u32)>,
    /// The share of launches that fail transiently, from 0 to 1.
    #[arg(long, value_parser = parse_share, value_name = "SHARE")]
    pub failure_rate: Option<f64>,
    /// Provider calls never answer until the faults are replaced or
    /// cleared.
    #[arg(long)]
    pub hang: bool,
    /// Limit provider calls to a token bucket of BURST calls refilled at
    /// PER_SECOND (5/2: AWS's RunInstances limit); calls over it are
    /// refused with RequestLimitExceeded.
    #[arg(long, value_parser = parse_throttle, value_name = "BURST/PER_SECOND")]
    pub throttle: Option<Throttle>,
    /// The share of new instances whose agent never checks in, from 0 to
    /// 1.
    #[arg(long, value_parser = parse_share, value_name = "SHARE")]
    pub silent_agents: Option<f64>,
}

impl SetFaultsArgs {
    /// The fault set these flags describe.
    ///
    /// # Errors
    ///
    /// [`CliError::Usage`] for a zone given two capacities.
    pub fn fault_set(&self) -> Result<FaultSet, CliError> {
        let mut zone_capacity = BTreeMap::new();
        for (zone, n) in &self.zone_capacity {
            if let Some(earlier) = zone_capacity.insert(zone.clone(), *n) {
                return Err(CliError::Usage(format!(
                    "--zone-capacity gives zone {zone:?} twice ({earlier} and {n}): expected \
                     each zone once"
                )));
            }
        }
        Ok(FaultSet {
            zones_down: self.zones_down.iter().cloned().collect(),
            zone_capacity,
            failure_rate: self.failure_rate.unwrap_or(0.0),
            hang: self.hang,
            throttle: self.throttle,
            silent_agents: self.silent_agents.unwrap_or(0.0),
        })
    }
}

fn parse_share(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(share) if (0.0..=1.0).contains(&share) => Ok(share),
        _ => Err(format!("expected a number between 0 and 1, got {text:?}")),
    }
}

fn parse_capacity(text: &str) -> Result<(String, u32), String> {
    let bad = || format!("expected ZONE=N with N a whole number of 0 or more, got {text:?}");
    let (zone, n) = text.split_once('=').ok_or_else(bad)?;
    let zone = zone.trim();
    if zone.is_empty() {
        return Err(bad());
    }
    let n = n.trim().parse::<u32>().map_err(|_| bad())?;
    Ok((zone.to_string(), n))
}

fn parse_throttle(text: &str) -> Result<Throttle, String> {
    let bad = || {
        format!(
            "expected BURST/PER_SECOND, a whole number of 1 or more and a number above 0 \
             (5/2), got {text:?}"
        )
    };
    let (burst, rate) = text.split_once('/').ok_or_else(bad)?;
    let burst = burst.trim().parse::<u32>().map_err(|_| bad())?;
    let per_second = rate.trim().parse::<f64>().map_err(|_| bad())?;
    if burst == 0 || !(per_second.is_finite() && per_second > 0.0) {
        return Err(bad());
    }
    Ok(Throttle { burst, per_second })
}

/// The faults as a two-column table, or a line saying there are none.
pub fn faults_text(faults: &FaultSet) -> String {
    if faults.is_healthy() {
        return "No faults are set.\n".to_string();
    }
    let mut table = Table::new(&["Fault", "Setting"]);
    let mut row = |fault: &str, setting: String| table.row(vec![fault.to_string(), setting]);
    if !faults.zones_down.is_empty() {
        let zones: Vec<&str> = faults.zones_down.iter().map(String::as_str).collect();
        row("zones down", zones.join(", "));
    }
    if !faults.zone_capacity.is_empty() {
        let capacity: Vec<String> = faults
            .zone_capacity
            .iter()
            .map(|(zone, n)| format!("{zone}={n}"))
            .collect();
        row("zone capacity", capacity.join(", "));
    }
    if faults.failure_rate > 0.0 {
        row("failure rate", faults.failure_rate.to_string());
    }
    if faults.hang {
        row("hang", "provider calls do not answer".to_string());
    }
    if let Some(throttle) = &faults.throttle {
        row(
            "throttle",
            format!(
                "{}/{} (a burst of {}, {} a second)",
                throttle.burst, throttle.per_second, throttle.burst, throttle.per_second
            ),
        );
    }
    if faults.silent_agents > 0.0 {
        row("silent agents", faults.silent_agents.to_string());
    }
    table.render()
}

/// `berth sim-faults`: shows the faults in force, after replacing or
/// clearing them if asked to.
///
/// # Errors
///
/// The controller's refusal: 400 for a set it does not take, 404 when its
/// provider is not the simulated cloud.
pub fn run(args: &SimFaultsArgs, session: &mut Session, io: &mut Io<'_>) -> Result<(), CliError> {
    let client = session.client()?;
    let faults: FaultSet = match &args.action {
        None => client.get(PATH)?,
        Some(SimFaultsAction::Set(set)) => client.put(PATH, &set.fault_set()?)?,
        Some(SimFaultsAction::Clear) => client.delete_as(PATH)?,
    };
    write!(io.out, "{}", faults_text(&faults))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::tests::{command, parse};
    use crate::cli::Command;

    fn set_args(args: &[&str]) -> SetFaultsArgs {
        let mut full = vec!["sim-faults", "set"];
        full.extend_from_slice(args);
        match command(&full) {
            Command::SimFaults(SimFaultsArgs {
                action: Some(SimFaultsAction::Set(set)),
            }) => set,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn sim_faults_shows_sets_and_clears() {
        assert!(matches!(
            command(&["sim-faults"]),
            Command::SimFaults(SimFaultsArgs { action: None })
        ));
        assert!(matches!(
            command(&["sim-faults", "clear"]),
            Command::SimFaults(SimFaultsArgs {
                action: Some(SimFaultsAction::Clear)
            })
        ));
        assert_eq!(set_args(&[]).fault_set().unwrap(), FaultSet::default());
    }

    #[test]
    fn every_fault_has_a_flag() {
        let args = set_args(&[
            "--zones-down",
            "sim-b,sim-c",
            "--failure-rate",
            "0.3",
            "--hang",
            "--throttle",
            "5/2",
            "--silent-agents",
            "0.1",
            "--zone-capacity",
            "sim-a=3",
            "--zone-capacity",
            "sim-b=0",
        ]);
        assert_eq!(
            args.fault_set().unwrap(),
            FaultSet {
                zones_down: ["sim-b".to_string(), "sim-c".to_string()].into(),
                zone_capacity: [("sim-a".to_string(), 3), ("sim-b".to_string(), 0)].into(),
                failure_rate: 0.3,
                hang: true,
                throttle: Some(Throttle {
                    burst: 5,
                    per_second: 2.0
                }),
                silent_agents: 0.1,
            }
        );
    }

    #[test]
    fn a_zone_given_two_capacities_is_refused() {
        for args in [
            &["--zone-capacity", "sim-a=3,sim-a=5"][..],
            &["--zone-capacity", "sim-a=3", "--zone-capacity", "sim-a=3"],
        ] {
            let refused = set_args(args).fault_set().unwrap_err();
            assert_eq!(refused.exit_code(), 2, "{args:?}");
        }
        assert_eq!(
            set_args(&["--zone-capacity", "sim-a=3,sim-a=5"])
                .fault_set()
                .unwrap_err()
                .to_string(),
            "--zone-capacity gives zone \"sim-a\" twice (3 and 5): expected each zone once"
        );
    }

    #[test]
    fn bad_values_are_usage_errors() {
        for args in [
            &["--failure-rate", "1.5"][..],
            &["--failure-rate", "-0.1"],
            &["--silent-agents", "lots"],
            &["--throttle", "0/2"],
            &["--throttle", "5/0"],
            &["--throttle", "5"],
            &["--zone-capacity", "sim-a"],
            &["--zone-capacity", "sim-a=-1"],
            &["--zone-capacity", "=3"],
            &["--hang=yes"],
        ] {
            let mut full = vec!["sim-faults", "set"];
            full.extend_from_slice(args);
            let e = parse(&full).unwrap_err();
            assert_eq!(e.exit_code(), 2, "{args:?}");
        }
        let e = parse(&["sim-faults", "set", "--throttle", "0/2"]).unwrap_err();
        assert!(
            e.to_string()
                .contains("expected BURST/PER_SECOND, a whole number of 1 or more"),
            "{e}"
        );
    }

    #[test]
    fn the_faults_are_a_table_of_what_is_set() {
        assert_eq!(faults_text(&FaultSet::default()), "No faults are set.\n");
        let faults = FaultSet {
            zones_down: ["sim-b".to_string()].into(),
            zone_capacity: [("sim-a".to_string(), 3)].into(),
            failure_rate: 0.3,
            hang: true,
            throttle: Some(Throttle {
                burst: 5,
                per_second: 2.0,
            }),
            silent_agents: 0.1,
        };
        assert_eq!(
            faults_text(&faults),
            "Fault          Setting\n\
             zones down     sim-b\n\
             zone capacity  sim-a=3\n\
             failure rate   0.3\n\
             hang           provider calls do not answer\n\
             throttle       5/2 (a burst of 5, 2 a second)\n\
             silent agents  0.1\n"
        );
    }
}
