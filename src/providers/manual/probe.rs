//! What berth reads off a host before it enlists it, and whether the host
//! fits the machine it is to be.
//!
//! The probe is one POSIX shell script that needs nothing but a standard
//! Linux userland (`uname`, `nproc`/`getconf`, `/proc/meminfo`, `df`,
//! `/etc/os-release`) and changes nothing. It prints `key=value` lines,
//! which [`HostFacts::parse`] reads. It also prints the session's
//! `SSH_CONNECTION`, the two ends of the connection as the host saw them.

use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;

use crate::domain::base::Base;
use crate::domain::constraints::{Amount, Arch, Constraints, Setting};
use crate::domain::hardware::Hardware;

/// The probe: `dir` is where the agent will be installed (its free space
/// is measured on the nearest directory that exists).
pub fn probe_script(dir: &str) -> String {
    format!(
        r#"set -u
echo "arch=$(uname -m)"
echo "cores=$(nproc 2>/dev/null || getconf _NPROCESSORS_ONLN)"
echo "mem_kib=$(awk '/^MemTotal:/ {{print $2}}' /proc/meminfo)"
echo "root_kib=$(df -Pk / | awk 'NR==2 {{print $2}}')"
d={dir}
while [ ! -d "$d" ]; do d=$(dirname "$d"); done
echo "free_kib=$(df -Pk "$d" | awk 'NR==2 {{print $4}}')"
echo "uid=$(id -u)"
echo "user=$(id -un)"
if [ "$(id -u)" -eq 0 ]; then echo "sudo=root"
elif command -v sudo >/dev/null 2>&1 && sudo -n true >/dev/null 2>&1; then echo "sudo=yes"
elif command -v sudo >/dev/null 2>&1; then echo "sudo=password"
else echo "sudo=missing"; fi
if [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then echo "init=systemd"; else echo "init=other"; fi
if [ -r /etc/os-release ]; then sed -e 's/^/os./' /etc/os-release; fi
echo "ssh_connection=${{SSH_CONNECTION:-}}"
"#,
        dir = super::ssh::shell_quote(dir)
    )
}

/// How berth may act as root on the host.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Privilege {
    /// Logged in as root.
    Root,
    /// `sudo` without a password.
    Sudo,
    /// `sudo` asks for a password, which berth never has.
    SudoNeedsPassword,
    /// No `sudo` at all.
    NoSudo,
}

/// How the agent is kept running on the host.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Init {
    /// A systemd service, restarted by systemd and started at boot.
    Systemd,
    /// A supervising shell loop that starts the agent again when it exits.
    Supervised,
}

/// What the probe read off a host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostFacts {
    pub arch: Result<Arch, String>,
    pub cores: u64,
    pub mem_mib: u64,
    pub root_disk_mib: u64,
    /// Free space where the agent goes, in MiB.
    pub free_mib: u64,
    pub user: String,
    pub privilege: Privilege,
    pub init: Init,
    /// The host's base, or what its `/etc/os-release` says when berth does
    /// not know it.
    pub base: Result<Base, String>,
    /// The SSH connection's ends as the host saw them; `None` when its
    /// SSH server did not say.
    pub reached: Option<SshEnds>,
}

/// The two ends of an SSH connection, from the host's `SSH_CONNECTION`
/// (`client-address client-port host-address host-port`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SshEnds {
    /// The address berth connected from.
    pub client: IpAddr,
    /// The host's own address that berth connected to.
    pub host: IpAddr,
}

impl SshEnds {
    /// Reads `SSH_CONNECTION`; `None` for anything else (empty, an
    /// address with a zone, a missing field).
    pub fn parse(value: &str) -> Option<SshEnds> {
        let fields: Vec<&str> = value.split_whitespace().collect();
        let [client, _, host, _] = fields.as_slice() else {
            return None;
        };
        Some(SshEnds {
            client: client.parse::<IpAddr>().ok()?.to_canonical(),
            host: host.parse::<IpAddr>().ok()?.to_canonical(),
        })
    }

    /// Whether the host was reached over its loopback, or from its own
    /// address: it is the machine berth runs on.
    pub fn is_this_machine(&self) -> bool {
        self.host.is_loopback() || self.client == self.host
    }
}

/// The probe's output was not what it prints.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("cannot read the host's {what} from the probe (got {got:?})")]
pub struct ProbeError {
    pub what: &'static str,
    pub got: String,
}

/// `uname -m`'s machine names in Juju's architecture words.
fn arch_of(machine: &str) -> Result<Arch, String> {
    match machine {
        "x86_64" | "amd64" => Ok(Arch::Amd64),
        "aarch64" | "arm64" => Ok(Arch::Arm64),
        "ppc64le" | "ppc64el" => Ok(Arch::Ppc64el),
        "s390x" => Ok(Arch::S390x),
        "riscv64" => Ok(Arch::Riscv64),
        other => Err(other.to_string()),
    }
}

/// A value of `/etc/os-release`, without its quotes.
fn unquote(value: &str) -> &str {
    let v = value.trim();
    v.strip_prefix('"')
        .and_then(|v| v.strip_suffix('"'))
        .or_else(|| v.strip_prefix('\'').and_then(|v| v.strip_suffix('\'')))
        .unwrap_or(v)
}

impl HostFacts {
    /// Reads the probe's output.
    ///
    /// # Errors
    ///
    /// [`ProbeError`] naming the first value that is missing or malformed.
    pub fn parse(output: &str) -> Result<HostFacts, ProbeError> {
        let values: BTreeMap<&str, &str> = output
            .lines()
            .filter_map(|line| line.split_once('='))
            .map(|(k, v)| (k.trim(), v.trim()))
            .collect();
        let text = |what: &'static str| -> Result<&str, ProbeError> {
            values.get(what).copied().ok_or(ProbeError {
                what,
                got: String::new(),
            })
        };
        let number = |what: &'static str| -> Result<u64, ProbeError> {
            let got = text(what)?;
            got.parse().map_err(|_| ProbeError {
                what,
                got: got.to_string(),
            })
        };
        let privilege = match text("sudo")? {
            "root" => Privilege::Root,
            "yes" => Privilege::Sudo,
            "password" => Privilege::SudoNeedsPassword,
            "missing" => Privilege::NoSudo,
            got => {
                return Err(ProbeError {
                    what: "sudo",
                    got: got.to_string(),
                })
            }
        };
        let init = match text("init")? {
            "systemd" => Init::Systemd,
            _ => Init::Supervised,
        };
        let os = |key: &str| values.get(key).map(|v| unquote(v));
        let base = match (os("os.ID"), os("os.VERSION_ID")) {
            (Some(id), Some(version)) => Base::from_os_release(id, version).map_err(|_| {
                os("os.PRETTY_NAME")
                    .map(str::to_string)
                    .unwrap_or_else(|| format!("{id} {version}"))
            }),
            _ => Err("a system without /etc/os-release".to_string()),
        };
        Ok(HostFacts {
            arch: arch_of(text("arch")?),
            cores: number("cores")?,
            mem_mib: number("mem_kib")? / 1024,
            root_disk_mib: number("root_kib")? / 1024,
            free_mib: number("free_kib")? / 1024,
            user: text("user")?.to_string(),
            privilege,
            init,
            base,
            reached: values
                .get("ssh_connection")
                .and_then(|value| SshEnds::parse(value)),
        })
    }

    /// The hardware as `status` shows it.
    pub fn hardware(&self) -> Hardware {
        Hardware {
            arch: self.arch.as_ref().ok().copied(),
            cores: Some(self.cores),
            cpu_power: None,
            mem_mib: Some(self.mem_mib),
            root_disk_mib: Some(self.root_disk_mib),
            zone: None,
        }
    }
}

/// One way a host does not fit its machine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Misfit(String);

impl fmt::Display for Misfit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What keeps `host` from being the machine with `constraints` and (when
/// its units ask for one) `base`: every reason, so that one retry can fix
/// them all. Constraints that only a cloud can satisfy (an instance type,
/// an image, zones, spaces) cannot be met by an existing host.
pub fn misfits(host: &HostFacts, constraints: &Constraints, base: Option<Base>) -> Vec<Misfit> {
    let mut out = Vec::new();
    match (&host.base, base) {
        (Ok(has), Some(wanted)) if !has.is_compatible(&wanted) => out.push(Misfit(format!(
            "the host runs {has}, but its units need {wanted}"
        ))),
        (Err(system), _) => out.push(Misfit(format!(
            "the host runs {system}, which berth cannot manage (expected ubuntu or debian)"
        ))),
        _ => {}
    }
    match (&host.arch, constraints.arch.value()) {
        (Err(machine), _) => out.push(Misfit(format!(
            "the host's architecture {machine} is not one berth knows"
        ))),
        (Ok(has), Some(wanted)) if has != wanted => out.push(Misfit(format!(
            "arch={wanted} asked for, the host is {has}"
        ))),
        _ => {}
    }
    let at_least = |setting: &Setting<Amount>, has: u64, key: &str, unit: &str| match setting {
        Setting::Value(Amount::AtLeast(wanted)) if has < *wanted => Some(Misfit(format!(
            "{key}={wanted}{unit} asked for, the host has {has}{unit}"
        ))),
        Setting::Value(Amount::Max) => Some(Misfit(format!(
            "{key}=max cannot apply to an existing host"
        ))),
        _ => None,
    };
    out.extend(at_least(&constraints.cores, host.cores, "cores", ""));
    out.extend(at_least(&constraints.mem, host.mem_mib, "mem", "M"));
    out.extend(at_least(
        &constraints.root_disk,
        host.root_disk_mib,
        "root-disk",
        "M",
    ));
    // The least persistent disk: an existing host's is its root disk.
    out.extend(at_least(
        &constraints.storage,
        host.root_disk_mib,
        "storage",
        "M",
    ));
    let cloud_only = [
        ("container", constraints.container.value().is_some()),
        ("instance-role", constraints.instance_role.value().is_some()),
        ("instance-type", constraints.instance_type.value().is_some()),
        ("image-id", constraints.image_id.value().is_some()),
        ("virt-type", constraints.virt_type.value().is_some()),
        (
            "root-disk-source",
            constraints.root_disk_source.value().is_some(),
        ),
        (
            "zones",
            constraints.zones.value().is_some_and(|z| !z.is_empty()),
        ),
        (
            "spaces",
            constraints.spaces.value().is_some_and(|s| !s.is_empty()),
        ),
        (
            "tags",
            constraints.tags.value().is_some_and(|t| !t.is_empty()),
        ),
        (
            "allocate-public-ip",
            constraints.allocate_public_ip.value().is_some(),
        ),
        ("cpu-power", constraints.cpu_power.value().is_some()),
    ];
    for (key, given) in cloud_only {
        if given {
            out.push(Misfit(format!("{key} cannot apply to an existing host")));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEBIAN_ROOT: &str = "arch=x86_64
cores=2
mem_kib=24641244
root_kib=263174212
free_kib=61234567
uid=0
user=root
sudo=root
init=other
os.PRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"
os.NAME=\"Debian GNU/Linux\"
os.VERSION_ID=\"12\"
os.ID=debian
";

    fn facts(text: &str) -> HostFacts {
        HostFacts::parse(text).unwrap()
    }

    #[test]
    fn the_probe_output_gives_hardware_base_and_privilege() {
        let host = facts(DEBIAN_ROOT);
        assert_eq!(host.arch, Ok(Arch::Amd64));
        assert_eq!(host.cores, 2);
        assert_eq!(host.mem_mib, 24063);
        assert_eq!(host.root_disk_mib, 257006);
        assert_eq!(host.free_mib, 59799);
        assert_eq!(host.privilege, Privilege::Root);
        assert_eq!(host.init, Init::Supervised);
        assert_eq!(host.base, Ok("debian@12".parse().unwrap()));
        assert_eq!(
            host.hardware().to_string(),
            "arch=amd64 cores=2 mem=24063M root-disk=257006M"
        );
    }

    #[test]
    fn the_probe_reads_the_ssh_connections_ends_when_the_server_gives_them() {
        assert_eq!(facts(DEBIAN_ROOT).reached, None);
        let with = |value: &str| facts(&format!("{DEBIAN_ROOT}ssh_connection={value}\n")).reached;
        assert_eq!(with(""), None);
        let ends = with("198.51.100.7 50022 203.0.113.9 22").unwrap();
        assert_eq!(ends.client, "198.51.100.7".parse::<IpAddr>().unwrap());
        assert_eq!(ends.host, "203.0.113.9".parse::<IpAddr>().unwrap());
        assert!(!ends.is_this_machine());
        // Over loopback, or from the host's own address: this machine.
        assert!(with("127.0.0.1 50022 127.0.0.1 22")
            .unwrap()
            .is_this_machine());
        assert!(with("::1 50022 ::1 2222").unwrap().is_this_machine());
        assert!(with("::ffff:127.0.0.1 5 ::ffff:127.0.0.1 22")
            .unwrap()
            .is_this_machine());
        assert!(with("203.0.113.9 50022 203.0.113.9 22")
            .unwrap()
            .is_this_machine());
        // Anything else is not read: the check it serves is left out.
        for bad in [
            "203.0.113.9 50022 203.0.113.10",
            "fe80::1%eth0 50022 fe80::2%eth0 22",
            "host.invalid 1 host.invalid 22",
            "203.0.113.9 50022 203.0.113.10 22 extra",
        ] {
            assert_eq!(with(bad), None, "{bad}");
        }
    }

    #[test]
    fn an_unknown_system_or_architecture_is_kept_in_its_own_words() {
        let text = DEBIAN_ROOT
            .replace("arch=x86_64", "arch=mips64")
            .replace("os.ID=debian", "os.ID=fedora")
            .replace("Debian GNU/Linux 12 (bookworm)", "Fedora Linux 40");
        let host = facts(&text);
        assert_eq!(host.arch, Err("mips64".into()));
        assert_eq!(host.base, Err("Fedora Linux 40".into()));
        let why: Vec<String> = misfits(&host, &Constraints::default(), None)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            why,
            [
                "the host runs Fedora Linux 40, which berth cannot manage (expected ubuntu or debian)",
                "the host's architecture mips64 is not one berth knows",
            ]
        );
    }

    #[test]
    fn a_probe_missing_a_value_or_garbled_is_an_error_naming_it() {
        let missing = DEBIAN_ROOT.replace("cores=2\n", "");
        assert_eq!(
            HostFacts::parse(&missing).unwrap_err().to_string(),
            "cannot read the host's cores from the probe (got \"\")"
        );
        let garbled = DEBIAN_ROOT.replace("mem_kib=24641244", "mem_kib=lots");
        assert_eq!(
            HostFacts::parse(&garbled).unwrap_err().to_string(),
            "cannot read the host's mem_kib from the probe (got \"lots\")"
        );
        let sudo = DEBIAN_ROOT.replace("sudo=root", "sudo=maybe");
        assert!(HostFacts::parse(&sudo).is_err());
    }

    #[test]
    fn sudo_and_init_are_read() {
        let host = facts(
            &DEBIAN_ROOT
                .replace("sudo=root", "sudo=password")
                .replace("init=other", "init=systemd"),
        );
        assert_eq!(host.privilege, Privilege::SudoNeedsPassword);
        assert_eq!(host.init, Init::Systemd);
        let host = facts(&DEBIAN_ROOT.replace("sudo=root", "sudo=missing"));
        assert_eq!(host.privilege, Privilege::NoSudo);
    }

    #[test]
    fn a_host_that_fits_has_no_misfits() {
        let host = facts(DEBIAN_ROOT);
        let constraints: Constraints = "arch=amd64 cores=2 mem=8G root-disk=100G storage=200G"
            .parse()
            .unwrap();
        assert!(misfits(&host, &constraints, Some("debian@12".parse().unwrap())).is_empty());
        assert!(misfits(&host, &Constraints::default(), None).is_empty());
    }

    #[test]
    fn every_misfit_is_named() {
        let host = facts(DEBIAN_ROOT);
        let constraints: Constraints =
            "arch=arm64 cores=4 mem=32G storage=300G instance-type=m5.large zones=a \
             instance-role=agents container=lxd"
                .parse()
                .unwrap();
        let why: Vec<String> = misfits(&host, &constraints, Some("ubuntu@22.04".parse().unwrap()))
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            why,
            [
                "the host runs debian@12, but its units need ubuntu@22.04",
                "arch=arm64 asked for, the host is amd64",
                "cores=4 asked for, the host has 2",
                "mem=32768M asked for, the host has 24063M",
                "storage=307200M asked for, the host has 257006M",
                "container cannot apply to an existing host",
                "instance-role cannot apply to an existing host",
                "instance-type cannot apply to an existing host",
                "zones cannot apply to an existing host",
            ]
        );
    }
}
