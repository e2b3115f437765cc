//! `[provider.sim]`: the simulated cloud's settings and their validation.
//!
//! ```toml
//! [provider.sim]
//! zones = ["sim-a", "sim-b", "sim-c"]
//! catalogue = "types.csv"   # default: the embedded EC2 catalogue
//! start_delay_ms = 0        # pending -> running
//! agent_delay_ms = 0        # running -> the machine agent checks in
//! failure_rate = 0.0        # share of launches that fail transiently
//! seed = 1                  # the same seed gives the same ids and failures
//! outages = ["sim-c"]       # zones that are out
//! launch_batch = 500        # the most launches one call carries (5 is EC2's)
//!
//! [provider.sim.capacity]   # most live instances per zone; absent: unlimited
//! "sim-a" = 3
//! ```

use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

/// The simulated cloud's settings. Every field has a default, so an empty
/// section (or none) gives three healthy zones, the embedded catalogue, no
/// delays and no failures.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SimConfig {
    /// The availability zones, in the order `zones()` lists them.
    pub zones: Vec<String>,
    /// A catalogue CSV in the format of the embedded EC2 one; `None`: the
    /// embedded catalogue.
    pub catalogue: Option<PathBuf>,
    /// How long a launched instance stays `pending` before it runs.
    pub start_delay_ms: u64,
    /// How long after it runs the instance's machine agent checks in.
    pub agent_delay_ms: u64,
    /// The share of launches that fail transiently, drawn from the seeded
    /// generator: 0 never, 1 always.
    pub failure_rate: f64,
    /// Seeds the generator behind instance ids and failures, so that a run
    /// can be repeated exactly.
    pub seed: u64,
    /// The most live instances (containers excluded) each listed zone
    /// holds; a zone not listed is unlimited.
    pub capacity: BTreeMap<String, usize>,
    /// Zones that are out: launches there fail and `zones()` reports them
    /// unavailable.
    pub outages: Vec<String>,
    /// How often the simulated agents that checked in report that they are
    /// alive, as real agents' heartbeats do. A heartbeat stored less than
    /// a quarter of `agent_down_after_s` before is not written again, so
    /// this must stay under three quarters of it for live agents never to
    /// look silent.
    pub heartbeat_interval_ms: u64,
    /// The most launches one call carries, 1 to [`super::MAX_LAUNCH_BATCH`]:
    /// 5 makes the broker call the cloud as often as it calls EC2.
    pub launch_batch: usize,
}

impl Default for SimConfig {
    fn default() -> SimConfig {
        SimConfig {
            zones: vec!["sim-a".into(), "sim-b".into(), "sim-c".into()],
            catalogue: None,
            start_delay_ms: 0,
            agent_delay_ms: 0,
            failure_rate: 0.0,
            seed: 1,
            capacity: BTreeMap::new(),
            outages: Vec::new(),
            heartbeat_interval_ms: 30_000,
            launch_batch: super::MAX_LAUNCH_BATCH,
        }
    }
}

impl SimConfig {
    /// Checks what the types alone cannot.
    ///
    /// # Errors
    ///
    /// A message naming the setting, what it holds and what was expected:
    /// a `failure_rate` outside 0..=1, no zones, an empty or repeated zone
    /// name, a `capacity` or `outages` entry naming a zone not in `zones`,
    /// or a `capacity` above [`super::faults::MAX_COUNT`], the most the
    /// faults' API takes.
    pub fn validate(&self) -> Result<(), String> {
        check_failure_rate(self.failure_rate)?;
        if self.heartbeat_interval_ms == 0 {
            return Err("heartbeat_interval_ms must be at least 1".to_string());
        }
        if !(1..=super::MAX_LAUNCH_BATCH).contains(&self.launch_batch) {
            return Err(format!(
                "launch_batch is {}: expected 1 to {}",
                self.launch_batch,
                super::MAX_LAUNCH_BATCH
            ));
        }
        if self.zones.is_empty() {
            return Err("zones is empty: expected at least one zone name".to_string());
        }
        let mut seen = HashSet::new();
        for zone in &self.zones {
            if zone.trim().is_empty() {
                return Err(format!(
                    "zones contains an empty name {zone:?}: expected zone names"
                ));
            }
            if !seen.insert(zone.as_str()) {
                return Err(format!(
                    "zone {zone:?} is listed twice in zones: expected unique zone names"
                ));
            }
        }
        for (zone, capacity) in &self.capacity {
            self.check_listed("capacity", zone)?;
            if *capacity > super::faults::MAX_COUNT as usize {
                return Err(format!(
                    "capacity of {zone:?} is {capacity}: expected at most {}",
                    super::faults::MAX_COUNT
                ));
            }
        }
        for zone in &self.outages {
            self.check_listed("outages", zone)?;
        }
        Ok(())
    }

    pub fn start_delay(&self) -> Duration {
        Duration::from_millis(self.start_delay_ms)
    }

    pub fn agent_delay(&self) -> Duration {
        Duration::from_millis(self.agent_delay_ms)
    }

    fn check_listed(&self, setting: &str, zone: &str) -> Result<(), String> {
        if self.zones.iter().any(|z| z == zone) {
            Ok(())
        } else {
            Err(format!(
                "{setting} names zone {zone:?}, which is not in zones; expected one of {}",
                self.zones.join(", ")
            ))
        }
    }
}

/// # Errors
///
/// A message when `rate` is not a number between 0 and 1.
pub(super) fn check_failure_rate(rate: f64) -> Result<(), String> {
    if (0.0..=1.0).contains(&rate) {
        Ok(())
    } else {
        Err(format!(
            "failure_rate is {rate}: expected a number between 0 and 1"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(json: serde_json::Value) -> Result<SimConfig, String> {
        serde_json::from_value::<SimConfig>(json).map_err(|e| e.to_string())
    }

    #[test]
    fn the_defaults_are_three_healthy_zones_without_delays_or_failures() {
        let c = SimConfig::default();
        assert_eq!(c.zones, ["sim-a", "sim-b", "sim-c"]);
        assert_eq!(c.catalogue, None);
        assert_eq!((c.start_delay_ms, c.agent_delay_ms), (0, 0));
        assert_eq!(c.failure_rate, 0.0);
        assert_eq!(c.seed, 1);
        assert!(c.capacity.is_empty());
        assert!(c.outages.is_empty());
        assert_eq!(c.validate(), Ok(()));
    }

    #[test]
    fn an_empty_section_takes_the_defaults() {
        assert_eq!(config(serde_json::json!({})), Ok(SimConfig::default()));
    }

    #[test]
    fn every_setting_is_read() {
        let c = config(serde_json::json!({
            "zones": ["a", "b"],
            "catalogue": "types.csv",
            "start_delay_ms": 5,
            "agent_delay_ms": 7,
            "failure_rate": 0.25,
            "seed": 9,
            "capacity": {"a": 3},
            "outages": ["b"],
        }))
        .unwrap();
        assert_eq!(c.zones, ["a", "b"]);
        assert_eq!(c.catalogue, Some(PathBuf::from("types.csv")));
        assert_eq!(c.start_delay(), Duration::from_millis(5));
        assert_eq!(c.agent_delay(), Duration::from_millis(7));
        assert_eq!(c.failure_rate, 0.25);
        assert_eq!(c.seed, 9);
        assert_eq!(c.capacity, BTreeMap::from([("a".to_string(), 3)]));
        assert_eq!(c.outages, ["b"]);
        assert_eq!(c.validate(), Ok(()));
    }

    #[test]
    fn an_unknown_setting_is_refused() {
        let err = config(serde_json::json!({"zone": ["a"]})).unwrap_err();
        assert!(err.starts_with("unknown field `zone`"), "{err}");
    }

    #[test]
    fn a_failure_rate_outside_zero_to_one_is_refused() {
        for rate in [-0.1, 1.5, f64::NAN] {
            let c = SimConfig {
                failure_rate: rate,
                ..SimConfig::default()
            };
            assert_eq!(
                c.validate(),
                Err(format!(
                    "failure_rate is {rate}: expected a number between 0 and 1"
                ))
            );
        }
        for rate in [0.0, 1.0] {
            let c = SimConfig {
                failure_rate: rate,
                ..SimConfig::default()
            };
            assert_eq!(c.validate(), Ok(()));
        }
    }

    #[test]
    fn a_cloud_needs_a_zone() {
        let c = SimConfig {
            zones: vec![],
            ..SimConfig::default()
        };
        assert_eq!(
            c.validate(),
            Err("zones is empty: expected at least one zone name".to_string())
        );
    }

    #[test]
    fn zone_names_are_unique_and_not_empty() {
        let c = SimConfig {
            zones: vec!["a".into(), "b".into(), "a".into()],
            ..SimConfig::default()
        };
        assert_eq!(
            c.validate(),
            Err("zone \"a\" is listed twice in zones: expected unique zone names".to_string())
        );
        let c = SimConfig {
            zones: vec!["a".into(), " ".into()],
            ..SimConfig::default()
        };
        assert_eq!(
            c.validate(),
            Err("zones contains an empty name \" \": expected zone names".to_string())
        );
    }

    #[test]
    fn capacity_and_outages_name_listed_zones() {
        let c = SimConfig {
            capacity: BTreeMap::from([("sim-z".to_string(), 1)]),
            ..SimConfig::default()
        };
        assert_eq!(
            c.validate(),
            Err("capacity names zone \"sim-z\", which is not in zones; \
                 expected one of sim-a, sim-b, sim-c"
                .to_string())
        );
        let c = SimConfig {
            outages: vec!["sim-y".into()],
            ..SimConfig::default()
        };
        assert_eq!(
            c.validate(),
            Err("outages names zone \"sim-y\", which is not in zones; \
                 expected one of sim-a, sim-b, sim-c"
                .to_string())
        );
    }

    #[test]
    fn a_capacity_above_what_the_faults_api_takes_is_refused() {
        let c = SimConfig {
            capacity: BTreeMap::from([("sim-b".to_string(), 2_147_483_648)]),
            ..SimConfig::default()
        };
        assert_eq!(
            c.validate(),
            Err("capacity of \"sim-b\" is 2147483648: expected at most 2147483647".to_string())
        );
        let c = SimConfig {
            capacity: BTreeMap::from([("sim-b".to_string(), 2_147_483_647)]),
            ..SimConfig::default()
        };
        assert_eq!(c.validate(), Ok(()));
    }
}
