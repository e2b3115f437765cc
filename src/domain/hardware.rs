//! What an instance actually has, as `status` shows it:
//! `arch=amd64 cores=2 mem=8192M root-disk=8192M availability-zone=sim-a`.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::domain::constraints::Arch;
use crate::domain::instance_types::InstanceType;

/// The hardware of one instance. Sizes in MiB.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Hardware {
    pub arch: Option<Arch>,
    pub cores: Option<u64>,
    pub cpu_power: Option<u64>,
    pub mem_mib: Option<u64>,
    pub root_disk_mib: Option<u64>,
    pub zone: Option<String>,
}

impl Hardware {
    /// The hardware of an instance of `instance_type` in `zone`, with its
    /// root disk.
    pub fn of(instance_type: &InstanceType, zone: &str, root_disk_mib: Option<u64>) -> Hardware {
        Hardware {
            arch: Some(instance_type.arch),
            cores: Some(instance_type.vcpus),
            cpu_power: Some(instance_type.cpu_power),
            mem_mib: Some(instance_type.mem_mib),
            root_disk_mib,
            zone: Some(zone.to_string()),
        }
    }
}

impl fmt::Display for Hardware {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        if let Some(arch) = self.arch {
            parts.push(format!("arch={arch}"));
        }
        if let Some(cores) = self.cores {
            parts.push(format!("cores={cores}"));
        }
        if let Some(power) = self.cpu_power {
            parts.push(format!("cpu-power={power}"));
        }
        if let Some(mem) = self.mem_mib {
            parts.push(format!("mem={mem}M"));
        }
        if let Some(disk) = self.root_disk_mib {
            parts.push(format!("root-disk={disk}M"));
        }
        if let Some(zone) = &self.zone {
            parts.push(format!("availability-zone={zone}"));
        }
        f.write_str(&parts.join(" "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hardware_prints_like_juju_status() {
        let hw = Hardware {
            arch: Some(Arch::Amd64),
            cores: Some(2),
            cpu_power: None,
            mem_mib: Some(8192),
            root_disk_mib: None,
            zone: Some("sim-a".into()),
        };
        assert_eq!(
            hw.to_string(),
            "arch=amd64 cores=2 mem=8192M availability-zone=sim-a"
        );
    }

    #[test]
    fn hardware_of_an_instance_type_takes_its_sizes() {
        let catalogue = crate::domain::instance_types::Catalogue::embedded().unwrap();
        let t3 = catalogue.get("t3.large").unwrap();
        assert_eq!(
            Hardware::of(t3, "a", Some(16384)).to_string(),
            "arch=amd64 cores=2 cpu-power=200 mem=8192M root-disk=16384M availability-zone=a"
        );
    }
}
