//! The engine's settings (`[provisioner]` in berth's configuration), each
//! with a working default.

use std::num::NonZeroU32;
use std::time::Duration;

use serde::Deserialize;

use crate::domain::instance_types::HourlyPrice;
use crate::domain::machine::{Backoff, Policy};

/// Which instances the provisioner may stop on its own: Juju's
/// `harvest-mode`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HarvestMode {
    /// Instances of dead machines and strays.
    #[default]
    All,
    /// Only instances of machines berth removed.
    Destroyed,
    /// Only strays: instances with this controller's tags that no machine
    /// claims.
    Unknown,
    /// Nothing: stopping is left to the operator.
    None,
}

impl HarvestMode {
    pub fn harvests_strays(self) -> bool {
        matches!(self, HarvestMode::All | HarvestMode::Unknown)
    }

    pub fn harvests_destroyed(self) -> bool {
        matches!(self, HarvestMode::All | HarvestMode::Destroyed)
    }
}

/// `[provisioner]`.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ProvisionerConfig {
    /// Provider calls in flight at once.
    pub workers: usize,
    /// Zone-independent launch failures before a machine is in error.
    pub attempts: u32,
    /// The first retry's delay; it doubles, with jitter, up to the max.
    pub backoff_initial_ms: u64,
    pub backoff_max_ms: u64,
    /// How long a new instance's agent has to check in.
    pub bootstrap_timeout_s: u64,
    /// Launches whose agent never checked in before the machine is in error.
    pub bootstrap_attempts: u32,
    pub harvest_mode: HarvestMode,
    /// A provider call taking longer than this is abandoned as a transient
    /// failure.
    pub call_timeout_s: u64,
    /// How often the provider's instance list is reconciled with the store
    /// (webhooks can be lost).
    pub reconcile_interval_s: u64,
    /// A started machine whose agent has not been heard from for this long
    /// is shown `down`; 0 turns the check off. Agents (and the simulated
    /// cloud's) report every 30 seconds.
    pub agent_down_after_s: u64,
    /// The most machine actors alive at once; further machines wait their
    /// turn as ids, so memory stays bounded however many are deployed.
    pub max_machine_actors: usize,
    /// How long a controller's lease on a machine (and on a cluster-wide
    /// job) lasts without renewal. Leases are renewed every third of it;
    /// a controller that stops renewing loses its machines to the others
    /// this long after its last renewal. At least 3.
    pub lease_ttl_s: u64,
    /// The most an instance may cost, in the catalogue's currency (US
    /// dollars) per hour: a machine whose chosen type costs more (`mem=max`
    /// on a large catalogue, say) ends in a provisioning error and launches
    /// nothing. Containers are not priced.
    pub max_hourly_price: f64,
}

impl Default for ProvisionerConfig {
    fn default() -> Self {
        ProvisionerConfig {
            workers: 16,
            attempts: 10,
            backoff_initial_ms: 500,
            backoff_max_ms: 30_000,
            bootstrap_timeout_s: 600,
            bootstrap_attempts: 3,
            harvest_mode: HarvestMode::All,
            call_timeout_s: 60,
            reconcile_interval_s: 60,
            agent_down_after_s: 120,
            max_machine_actors: 8192,
            lease_ttl_s: 15,
            max_hourly_price: 10.0,
        }
    }
}

impl ProvisionerConfig {
    /// # Errors
    ///
    /// A sentence naming the setting that cannot work.
    pub fn validate(&self) -> Result<(), String> {
        if self.workers == 0 {
            return Err("provisioner.workers must be at least 1".into());
        }
        if self.attempts == 0 {
            return Err("provisioner.attempts must be at least 1".into());
        }
        if self.bootstrap_attempts == 0 {
            return Err("provisioner.bootstrap_attempts must be at least 1".into());
        }
        if self.backoff_initial_ms > self.backoff_max_ms {
            return Err(
                "provisioner.backoff_initial_ms must not exceed provisioner.backoff_max_ms".into(),
            );
        }
        if self.bootstrap_timeout_s == 0 {
            return Err(
                "provisioner.bootstrap_timeout_s must be at least 1: every machine would time out \
                 before its agent could check in"
                    .into(),
            );
        }
        if self.call_timeout_s == 0 {
            return Err("provisioner.call_timeout_s must be at least 1".into());
        }
        if self.max_machine_actors == 0 {
            return Err("provisioner.max_machine_actors must be at least 1".into());
        }
        if self.lease_ttl_s < 3 {
            return Err("provisioner.lease_ttl_s must be at least 3".into());
        }
        if !(self.max_hourly_price.is_finite() && self.max_hourly_price > 0.0) {
            return Err(format!(
                "provisioner.max_hourly_price must be a price above 0 (US dollars per hour), \
                 not {}",
                self.max_hourly_price
            ));
        }
        if self.max_hourly_price > MOST_HOURLY_PRICE {
            return Err(format!(
                "provisioner.max_hourly_price must be at most {MOST_HOURLY_PRICE}, not {}",
                self.max_hourly_price
            ));
        }
        Ok(())
    }

    /// The lifecycle policy these settings describe.
    pub fn policy(&self) -> Policy {
        Policy {
            backoff: Backoff {
                initial: Duration::from_millis(self.backoff_initial_ms),
                max: Duration::from_millis(self.backoff_max_ms),
                attempts: NonZeroU32::new(self.attempts).unwrap_or(NonZeroU32::MIN),
            },
            bootstrap_timeout: Duration::from_secs(self.bootstrap_timeout_s),
            bootstrap_attempts: NonZeroU32::new(self.bootstrap_attempts).unwrap_or(NonZeroU32::MIN),
        }
    }

    pub fn call_timeout(&self) -> Duration {
        Duration::from_secs(self.call_timeout_s)
    }

    pub fn lease_ttl(&self) -> Duration {
        Duration::from_secs(self.lease_ttl_s)
    }

    /// `max_hourly_price` to the micro-dollar.
    pub fn price_ceiling(&self) -> HourlyPrice {
        // Validated: finite, positive and at most MOST_HOURLY_PRICE, so the
        // product fits.
        HourlyPrice::from_micro_usd((self.max_hourly_price * 1e6).round() as u64)
    }
}

/// The largest `max_hourly_price` taken: far above any instance's price.
const MOST_HOURLY_PRICE: f64 = 1e6;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_are_valid_and_match_the_documented_policy() {
        let config = ProvisionerConfig::default();
        assert_eq!(config.validate(), Ok(()));
        let policy = config.policy();
        assert_eq!(policy.backoff.initial, Duration::from_millis(500));
        assert_eq!(policy.backoff.max, Duration::from_secs(30));
        assert_eq!(policy.backoff.attempts.get(), 10);
        assert_eq!(policy.bootstrap_timeout, Duration::from_secs(600));
    }

    #[test]
    fn settings_that_cannot_work_are_refused() {
        let zero_workers = ProvisionerConfig {
            workers: 0,
            ..ProvisionerConfig::default()
        };
        assert_eq!(
            zero_workers.validate(),
            Err("provisioner.workers must be at least 1".into())
        );
        let inverted = ProvisionerConfig {
            backoff_initial_ms: 10,
            backoff_max_ms: 1,
            ..ProvisionerConfig::default()
        };
        assert!(inverted.validate().is_err());
        let no_actors = ProvisionerConfig {
            max_machine_actors: 0,
            ..ProvisionerConfig::default()
        };
        assert_eq!(
            no_actors.validate(),
            Err("provisioner.max_machine_actors must be at least 1".into())
        );
        for price in [0.0, -1.0, f64::NAN, f64::INFINITY, 2e6] {
            let bad = ProvisionerConfig {
                max_hourly_price: price,
                ..ProvisionerConfig::default()
            };
            let refused = bad.validate().unwrap_err();
            assert!(
                refused.starts_with("provisioner.max_hourly_price must be"),
                "{refused}"
            );
        }
        let ceiling = ProvisionerConfig {
            max_hourly_price: 0.0416,
            ..ProvisionerConfig::default()
        };
        assert_eq!(ceiling.validate(), Ok(()));
        assert_eq!(ceiling.price_ceiling().micro_usd(), 41_600);
        assert_eq!(
            ProvisionerConfig::default().price_ceiling().to_string(),
            "10"
        );
        let short_lease = ProvisionerConfig {
            lease_ttl_s: 2,
            ..ProvisionerConfig::default()
        };
        assert_eq!(
            short_lease.validate(),
            Err("provisioner.lease_ttl_s must be at least 3".into())
        );
    }

    #[test]
    fn harvest_modes_decide_what_may_be_stopped() {
        assert!(HarvestMode::All.harvests_strays() && HarvestMode::All.harvests_destroyed());
        assert!(
            !HarvestMode::Destroyed.harvests_strays()
                && HarvestMode::Destroyed.harvests_destroyed()
        );
        assert!(
            HarvestMode::Unknown.harvests_strays() && !HarvestMode::Unknown.harvests_destroyed()
        );
        assert!(!HarvestMode::None.harvests_strays() && !HarvestMode::None.harvests_destroyed());
    }
}
