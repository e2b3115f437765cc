//! The faults an administrator sets on the simulated cloud while it runs
//! ([`FaultSet`], `PUT /v1/sim/faults`), their validation, and the token
//! bucket behind `throttle` ([`RequestBucket`]).
//!
//! A fault set replaces the one before it as a whole; the configuration's
//! `outages`, `capacity` and `failure_rate` are the set a cloud opens
//! with.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Deserializer, Serialize};
use tokio::time::Instant;
use utoipa::ToSchema;

use crate::providers::sim::config::SimConfig;

/// The faults in force. Every field is optional; an empty set (`{}`) is a
/// healthy cloud.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(default, deny_unknown_fields)]
pub struct FaultSet {
    /// Zones that are down: launches there fail as zone-specific failures,
    /// the zones are reported unavailable, and instances running there
    /// stop. Each a zone of the cloud, listed once.
    #[serde(deserialize_with = "unique_zones")]
    #[schema(example = json!(["sim-b"]))]
    pub zones_down: BTreeSet<String>,
    /// Zone to the most live instances it holds (containers excluded);
    /// a zone not listed is unlimited. Each a zone of the cloud, each
    /// capacity at most 2147483647.
    #[schema(example = json!({"sim-a": 3}))]
    pub zone_capacity: BTreeMap<String, u32>,
    /// The share of launches that fail transiently.
    #[schema(minimum = 0.0, maximum = 1.0, example = 0.3)]
    pub failure_rate: f64,
    /// Provider calls never answer until this is cleared.
    pub hang: bool,
    /// Limits provider calls as AWS limits API requests; a call over the
    /// limit is refused with `RequestLimitExceeded`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub throttle: Option<Throttle>,
    /// The share of new instances whose agent never checks in.
    #[schema(minimum = 0.0, maximum = 1.0, example = 0.1)]
    pub silent_agents: f64,
}

/// The largest capacity or burst a fault set takes: the bound of the
/// 32-bit integers the API document gives them.
pub const MAX_COUNT: u32 = i32::MAX.unsigned_abs();

/// A token bucket over every provider call: `burst` calls at once, refilled
/// at `per_second`. Each call takes a token; a call that finds none is
/// refused.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Throttle {
    /// The bucket's size: at least 1, at most 2147483647.
    #[schema(minimum = 1, maximum = 2147483647, example = 5)]
    pub burst: u32,
    /// Tokens added per second: more than 0.
    #[schema(exclusive_minimum = 0.0, example = 2.0)]
    pub per_second: f64,
}

/// Reads `zones_down`, refusing a zone listed twice.
fn unique_zones<'de, D: Deserializer<'de>>(deserializer: D) -> Result<BTreeSet<String>, D::Error> {
    let zones = Vec::<String>::deserialize(deserializer)?;
    let mut set = BTreeSet::new();
    for zone in zones {
        if set.contains(&zone) {
            return Err(serde::de::Error::custom(format!(
                "zone {zone:?} is listed twice in zones_down: expected each zone once"
            )));
        }
        set.insert(zone);
    }
    Ok(set)
}

/// `value` must be a share: a number between 0 and 1.
fn check_share(setting: &str, value: f64) -> Result<(), String> {
    if (0.0..=1.0).contains(&value) {
        Ok(())
    } else {
        Err(format!(
            "{setting} is {value}: expected a number between 0 and 1"
        ))
    }
}

impl FaultSet {
    /// The faults a cloud opens with: its configuration's outages,
    /// capacity and failure rate.
    pub fn from_config(config: &SimConfig) -> FaultSet {
        FaultSet {
            zones_down: config.outages.iter().cloned().collect(),
            zone_capacity: config
                .capacity
                .iter()
                .map(|(zone, n)| (zone.clone(), u32::try_from(*n).unwrap_or(u32::MAX)))
                .collect(),
            failure_rate: config.failure_rate,
            ..FaultSet::default()
        }
    }

    /// Whether no fault is set.
    pub fn is_healthy(&self) -> bool {
        *self == FaultSet::default()
    }

    /// Checks what the types alone cannot, against the cloud's `zones`.
    ///
    /// # Errors
    ///
    /// A message naming the setting, what it holds and what was expected:
    /// a share outside 0..=1, a zone the cloud does not have, a capacity
    /// or burst above [`MAX_COUNT`], a throttle with a burst of 0 or a rate
    /// that is not above 0.
    pub fn validate(&self, zones: &[String]) -> Result<(), String> {
        check_share("failure_rate", self.failure_rate)?;
        check_share("silent_agents", self.silent_agents)?;
        let known = |setting: &str, zone: &String| {
            if zones.contains(zone) {
                Ok(())
            } else {
                Err(format!(
                    "{setting} names zone {zone:?}, which the simulated cloud does not have; \
                     expected one of {}",
                    zones.join(", ")
                ))
            }
        };
        for zone in &self.zones_down {
            known("zones_down", zone)?;
        }
        for (zone, capacity) in &self.zone_capacity {
            known("zone_capacity", zone)?;
            if *capacity > MAX_COUNT {
                return Err(format!(
                    "zone_capacity of {zone:?} is {capacity}: expected at most {MAX_COUNT}"
                ));
            }
        }
        if let Some(throttle) = &self.throttle {
            if throttle.burst == 0 {
                return Err("throttle.burst is 0: expected at least 1".to_string());
            }
            if throttle.burst > MAX_COUNT {
                return Err(format!(
                    "throttle.burst is {}: expected at most {MAX_COUNT}",
                    throttle.burst
                ));
            }
            if !(throttle.per_second.is_finite() && throttle.per_second > 0.0) {
                return Err(format!(
                    "throttle.per_second is {}: expected a number above 0",
                    throttle.per_second
                ));
            }
        }
        Ok(())
    }
}

/// The token bucket of a [`Throttle`]: starts full, refills continuously,
/// and refuses a call that finds less than one token.
#[derive(Clone, Debug)]
pub struct RequestBucket {
    limit: Throttle,
    tokens: f64,
    at: Instant,
}

impl RequestBucket {
    pub fn new(limit: Throttle, now: Instant) -> RequestBucket {
        RequestBucket {
            limit,
            tokens: f64::from(limit.burst),
            at: now,
        }
    }

    pub fn limit(&self) -> Throttle {
        self.limit
    }

    /// Takes a token if there is one at `now`.
    pub fn try_take(&mut self, now: Instant) -> bool {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens =
            (self.tokens + elapsed * self.limit.per_second).min(f64::from(self.limit.burst));
        self.at = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// How many provider calls the cloud answered and how many it refused for
/// want of a throttle token, since it opened.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CallCounts {
    pub admitted: u64,
    pub refused: u64,
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn zones() -> Vec<String> {
        vec!["sim-a".into(), "sim-b".into(), "sim-c".into()]
    }

    fn parse(json: serde_json::Value) -> Result<FaultSet, String> {
        serde_json::from_value::<FaultSet>(json).map_err(|e| e.to_string())
    }

    #[test]
    fn an_empty_set_is_a_healthy_cloud() {
        let set = parse(serde_json::json!({})).unwrap();
        assert!(set.is_healthy());
        assert_eq!(set.validate(&zones()), Ok(()));
    }

    #[test]
    fn every_fault_is_read() {
        let set = parse(serde_json::json!({
            "zones_down": ["sim-b"],
            "zone_capacity": {"sim-a": 3},
            "failure_rate": 0.3,
            "hang": true,
            "throttle": {"burst": 5, "per_second": 2.0},
            "silent_agents": 0.1,
        }))
        .unwrap();
        assert_eq!(set.zones_down, BTreeSet::from(["sim-b".to_string()]));
        assert_eq!(
            set.zone_capacity,
            BTreeMap::from([("sim-a".to_string(), 3)])
        );
        assert_eq!(set.failure_rate, 0.3);
        assert!(set.hang);
        assert_eq!(
            set.throttle,
            Some(Throttle {
                burst: 5,
                per_second: 2.0
            })
        );
        assert_eq!(set.silent_agents, 0.1);
        assert_eq!(set.validate(&zones()), Ok(()));
    }

    #[test]
    fn unknown_fields_negative_counts_and_repeated_zones_do_not_parse() {
        let err = parse(serde_json::json!({"zone_down": ["sim-b"]})).unwrap_err();
        assert!(err.starts_with("unknown field `zone_down`"), "{err}");
        let err = parse(serde_json::json!({"zone_capacity": {"sim-a": -1}})).unwrap_err();
        assert!(err.contains("invalid value: integer `-1`"), "{err}");
        let err = parse(serde_json::json!({"throttle": {"burst": 1}})).unwrap_err();
        assert!(err.contains("missing field `per_second`"), "{err}");
        let err = parse(serde_json::json!({"zones_down": ["sim-b", "sim-b"]})).unwrap_err();
        assert!(
            err.starts_with("zone \"sim-b\" is listed twice in zones_down"),
            "{err}"
        );
    }

    #[test]
    fn shares_outside_zero_to_one_are_refused() {
        for rate in [-0.1, 1.5, f64::NAN] {
            let set = FaultSet {
                failure_rate: rate,
                ..FaultSet::default()
            };
            assert_eq!(
                set.validate(&zones()),
                Err(format!(
                    "failure_rate is {rate}: expected a number between 0 and 1"
                ))
            );
            let set = FaultSet {
                silent_agents: rate,
                ..FaultSet::default()
            };
            assert_eq!(
                set.validate(&zones()),
                Err(format!(
                    "silent_agents is {rate}: expected a number between 0 and 1"
                ))
            );
        }
        for rate in [0.0, 1.0] {
            let set = FaultSet {
                failure_rate: rate,
                silent_agents: rate,
                ..FaultSet::default()
            };
            assert_eq!(set.validate(&zones()), Ok(()));
        }
    }

    #[test]
    fn zones_must_be_the_clouds() {
        let set = FaultSet {
            zones_down: BTreeSet::from(["sim-z".to_string()]),
            ..FaultSet::default()
        };
        assert_eq!(
            set.validate(&zones()),
            Err(
                "zones_down names zone \"sim-z\", which the simulated cloud does not have; \
                 expected one of sim-a, sim-b, sim-c"
                    .to_string()
            )
        );
        let set = FaultSet {
            zone_capacity: BTreeMap::from([("sim-y".to_string(), 1)]),
            ..FaultSet::default()
        };
        assert!(set
            .validate(&zones())
            .unwrap_err()
            .starts_with("zone_capacity names zone \"sim-y\""));
    }

    #[test]
    fn counts_above_32_bit_integers_are_refused() {
        let zones = ["sim-a".to_string()];
        let too_big = FaultSet {
            zone_capacity: BTreeMap::from([("sim-a".to_string(), MAX_COUNT + 1)]),
            ..FaultSet::default()
        };
        assert_eq!(
            too_big.validate(&zones),
            Err(
                "zone_capacity of \"sim-a\" is 2147483648: expected at most 2147483647".to_string()
            )
        );
        let burst = |burst| FaultSet {
            throttle: Some(Throttle {
                burst,
                per_second: 1.0,
            }),
            ..FaultSet::default()
        };
        assert_eq!(burst(MAX_COUNT).validate(&zones), Ok(()));
        assert_eq!(
            burst(u32::MAX).validate(&zones),
            Err("throttle.burst is 4294967295: expected at most 2147483647".to_string())
        );
    }

    #[test]
    fn a_throttle_needs_a_burst_and_a_rate() {
        let throttle = |burst, per_second| FaultSet {
            throttle: Some(Throttle { burst, per_second }),
            ..FaultSet::default()
        };
        assert_eq!(
            throttle(0, 1.0).validate(&zones()),
            Err("throttle.burst is 0: expected at least 1".to_string())
        );
        for rate in [0.0, -1.0, f64::INFINITY] {
            assert_eq!(
                throttle(1, rate).validate(&zones()),
                Err(format!(
                    "throttle.per_second is {rate}: expected a number above 0"
                ))
            );
        }
        assert_eq!(throttle(1, 0.5).validate(&zones()), Ok(()));
    }

    #[test]
    fn the_configuration_gives_the_opening_set() {
        let config = SimConfig {
            outages: vec!["sim-c".into()],
            capacity: BTreeMap::from([("sim-a".to_string(), 3)]),
            failure_rate: 0.2,
            ..SimConfig::default()
        };
        let set = FaultSet::from_config(&config);
        assert_eq!(set.zones_down, BTreeSet::from(["sim-c".to_string()]));
        assert_eq!(
            set.zone_capacity,
            BTreeMap::from([("sim-a".to_string(), 3)])
        );
        assert_eq!(set.failure_rate, 0.2);
        assert!(!set.hang && set.throttle.is_none() && set.silent_agents == 0.0);
        assert!(FaultSet::from_config(&SimConfig::default()).is_healthy());
    }

    #[test]
    fn the_bucket_lets_its_burst_through_then_one_call_per_refill() {
        let start = Instant::now();
        let mut bucket = RequestBucket::new(
            Throttle {
                burst: 3,
                per_second: 2.0,
            },
            start,
        );
        assert!((0..3).all(|_| bucket.try_take(start)));
        assert!(!bucket.try_take(start));
        // Half a second refills one token.
        assert!(!bucket.try_take(start + Duration::from_millis(400)));
        assert!(bucket.try_take(start + Duration::from_millis(500)));
        assert!(!bucket.try_take(start + Duration::from_millis(500)));
    }

    #[test]
    fn the_bucket_refills_no_further_than_its_burst() {
        let start = Instant::now();
        let mut bucket = RequestBucket::new(
            Throttle {
                burst: 2,
                per_second: 10.0,
            },
            start,
        );
        let later = start + Duration::from_secs(60);
        assert!(bucket.try_take(later) && bucket.try_take(later));
        assert!(!bucket.try_take(later));
    }

    #[test]
    fn a_refused_call_takes_nothing() {
        let start = Instant::now();
        let mut bucket = RequestBucket::new(
            Throttle {
                burst: 1,
                per_second: 1.0,
            },
            start,
        );
        assert!(bucket.try_take(start));
        for ms in [100, 200, 300] {
            assert!(!bucket.try_take(start + Duration::from_millis(ms)));
        }
        assert!(bucket.try_take(start + Duration::from_millis(1000)));
    }
}
