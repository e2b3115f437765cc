//! The manual provider: existing hosts enlisted over SSH, Juju's `ssh:`
//! placement (`berth add-machine ssh:ubuntu@10.0.0.3`,
//! `deploy --to ssh:...`). It works beside whatever cloud the model uses.
//!
//! # Enlisting a host
//!
//! 1. berth connects with the OpenSSH client ([`ssh`]), with the key in
//!    `[manual] identity_file` (default: SSH's own keys and agent),
//!    verifying the host key against `[manual] known_hosts` (default
//!    `~/.ssh/known_hosts`). An unknown or changed host key is refused.
//! 2. A read-only probe ([`probe`]) reads the host's architecture, cores,
//!    memory, root disk, free space, base (`/etc/os-release`), whether berth
//!    may act as root (root, or `sudo` without a password) and whether
//!    systemd runs. A host that does not fit its machine's base or
//!    constraints is refused with every reason named.
//! 3. berth copies its own binary (or `[manual] agent_binary`) into the
//!    agent's directory on the host and starts the machine agent with a
//!    fresh one-time password: a systemd service where systemd runs,
//!    otherwise a supervising loop that starts the agent again whenever it
//!    exits ([`scripts`]). The agent keeps its credential in a file only
//!    root can read, so a restarted agent reconnects with it.
//!
//! The machine's instance is `manual:<host>` and its hardware is what the
//! probe read. Removing the machine stops and removes the agent and its
//! files; the host itself is never stopped or changed otherwise.
//!
//! Before any of that, the URL the agent would be given is checked
//! ([`check_controller_url`]): a controller that agents are told to reach
//! at the unspecified address (`0.0.0.0`, `::`: what it listens on when
//! `controller_url` is not set) is refused without connecting to the host.
//! One told to reach a loopback address is refused after the probe, before
//! anything is copied, when the host is another machine ([`check_reach`]).
//!
//! Every failure is a provisioning error that names its cause (unreachable,
//! host key refused, login refused, no `sudo`, no space, does not fit);
//! `retry-provisioning` tries again once it is fixed. Nothing here ever
//! launches a cloud instance.

pub mod probe;
pub mod scripts;
pub mod ssh;

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use crate::contracts::addresses::{is_loopback, url_host};
use crate::contracts::provider::{AgentBootstrap, FailureClass, ProviderError};
use crate::domain::base::Base;
use crate::domain::constraints::Constraints;
use crate::domain::instance::{Instance, InstanceState, MANUAL_INSTANCE_PREFIX};
use crate::domain::names::MachineId;
use crate::domain::placement::SshTarget;

use probe::{misfits, HostFacts, Init, Privilege, SshEnds};
use scripts::AgentPaths;
use ssh::{last_line, SshClient};

/// Where agents go on a host unless `[manual] agent_dir` says otherwise.
pub const DEFAULT_AGENT_DIR: &str = "/var/lib/berth";
/// Room the agent needs beyond its binary (settings, credential, log).
const SPARE_MIB: u64 = 16;

/// `[manual]`: how berth reaches and sets up hosts enlisted with `ssh:`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ManualConfig {
    /// The private key to log in with; `None`: SSH's own keys and agent.
    pub identity_file: Option<PathBuf>,
    /// The host keys berth trusts; `None`: `~/.ssh/known_hosts`.
    pub known_hosts: Option<PathBuf>,
    /// The `berth` binary to install on hosts; `None`: this one.
    pub agent_binary: Option<PathBuf>,
    /// Where agents are installed on hosts.
    pub agent_dir: String,
    /// The `ssh` program.
    pub ssh_program: PathBuf,
    pub connect_timeout_s: u64,
    /// The longest one SSH session may take, copying the binary included.
    pub session_timeout_s: u64,
}

impl Default for ManualConfig {
    fn default() -> Self {
        ManualConfig {
            identity_file: None,
            known_hosts: None,
            agent_binary: None,
            agent_dir: DEFAULT_AGENT_DIR.to_string(),
            ssh_program: PathBuf::from("ssh"),
            connect_timeout_s: 10,
            session_timeout_s: 300,
        }
    }
}

/// The shortest SSH session berth allows: the agent's binary is copied in
/// one.
pub const LEAST_SESSION_TIMEOUT_S: u64 = 10;

impl ManualConfig {
    /// # Errors
    ///
    /// A sentence naming the setting that cannot work.
    pub fn validate(&self) -> Result<(), String> {
        if self.connect_timeout_s == 0 {
            return Err("manual.connect_timeout_s must be at least 1".into());
        }
        if self.session_timeout_s < LEAST_SESSION_TIMEOUT_S {
            return Err(format!(
                "manual.session_timeout_s is {}: it must be at least {LEAST_SESSION_TIMEOUT_S} \
                 (a session copies the agent's binary)",
                self.session_timeout_s
            ));
        }
        Ok(())
    }
}

/// One host to enlist as one machine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EnlistRequest {
    pub machine: MachineId,
    pub target: SshTarget,
    /// The machine's constraints, which the host must meet.
    pub constraints: Constraints,
    /// The base the machine's units need; `None` when it has none yet (the
    /// machine then takes the host's).
    pub base: Option<Base>,
    pub agent: AgentBootstrap,
}

/// A host enlisted: its instance, and the base it runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Enlisted {
    pub instance: Instance,
    pub base: Base,
}

/// The instance id of an enlisted host.
pub fn instance_id(target: &SshTarget) -> String {
    format!("{MANUAL_INSTANCE_PREFIX}{}", target.host())
}

/// Enlists hosts and removes their agents.
#[derive(Clone, Debug)]
pub struct ManualHosts {
    ssh: SshClient,
    agent_binary: Option<PathBuf>,
    agent_dir: String,
    /// The model's uuid, which names the agents' directories and units.
    model: String,
}

fn permanent(message: String) -> ProviderError {
    ProviderError::new(FailureClass::Permanent, message)
}

/// Checks `url`, where the agent on `host` would be told to reach the
/// controller, by its form alone (the agent connects, not the
/// controller). The unspecified address (`0.0.0.0`, `::`) is what a
/// controller listening on every interface gives when `controller_url` is
/// not set; no agent can check in there. A loopback URL passes: it works
/// for a host that is the controller's own, which berth cannot tell from
/// the host's name alone ([`ManualHosts::enlist`] warns when that name is
/// not a loopback one).
///
/// # Errors
///
/// A permanent [`ProviderError`] naming `url`, why it cannot be reached,
/// and `controller_url` as the setting that fixes it.
pub fn check_controller_url(url: &str, host: &str) -> Result<(), ProviderError> {
    match url_host(url).and_then(|h| h.parse::<IpAddr>().ok()) {
        Some(ip) if ip.is_unspecified() => Err(permanent(format!(
            "agents cannot reach the controller at {url}: {ip} is the unspecified address, \
             which a controller listens on but no host can connect to; set controller_url \
             (BERTH_CONTROLLER_URL) to an address of this controller that {host} can reach"
        ))),
        _ => Ok(()),
    }
}

/// Refuses a host that is another machine when its agent would be told
/// to reach the controller at a loopback `url`: there it would reach its
/// own loopback. Whether it is another machine is read off the SSH
/// connection's ends as the host saw them (`reached`): neither its
/// loopback nor the address berth connected from. Without them the host
/// is not refused.
///
/// # Errors
///
/// A permanent [`ProviderError`] naming both ends, `url`, and
/// `controller_url` as the setting that fixes it.
pub fn check_reach(url: &str, host: &str, reached: Option<&SshEnds>) -> Result<(), ProviderError> {
    match reached {
        Some(ends) if url_host(url).is_some_and(is_loopback) && !ends.is_this_machine() => {
            Err(permanent(format!(
                "{host} is another machine (reached at {} from {}), so its agent cannot reach \
                 the controller at {url}, a loopback address; set controller_url \
                 (BERTH_CONTROLLER_URL) to an address of this controller that {host} can reach",
                ends.host, ends.client
            )))
        }
        _ => Ok(()),
    }
}

impl ManualHosts {
    pub fn new(config: &ManualConfig, model_uuid: &str) -> ManualHosts {
        let known_hosts = config.known_hosts.clone().unwrap_or_else(|| {
            std::env::var_os("HOME")
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from("/root"))
                .join(".ssh/known_hosts")
        });
        ManualHosts {
            ssh: SshClient {
                program: config.ssh_program.clone(),
                identity_file: config.identity_file.clone(),
                known_hosts,
                connect_timeout: Duration::from_secs(config.connect_timeout_s),
                session_timeout: Duration::from_secs(config.session_timeout_s),
            },
            agent_binary: config.agent_binary.clone(),
            agent_dir: config.agent_dir.clone(),
            model: model_uuid.to_string(),
        }
    }

    fn paths(&self, machine: MachineId) -> AgentPaths {
        AgentPaths::new(&self.agent_dir, &self.model, &machine.to_string())
    }

    async fn binary(&self) -> Result<Vec<u8>, ProviderError> {
        let path = match &self.agent_binary {
            Some(path) => path.clone(),
            None => std::env::current_exe()
                .map_err(|e| permanent(format!("cannot find berth's own binary: {e}")))?,
        };
        tokio::fs::read(&path).await.map_err(|e| {
            permanent(format!(
                "cannot read the agent binary {}: {e}",
                path.display()
            ))
        })
    }

    /// Runs `script` as root on the host; a failure names `what` was being
    /// done and the script's last words.
    async fn run_as_root(
        &self,
        target: &SshTarget,
        what: &str,
        script: &str,
        stdin: &[u8],
    ) -> Result<(), ProviderError> {
        let output = self
            .ssh
            .run(target, &scripts::as_root(script), stdin)
            .await?;
        if output.status == 0 {
            return Ok(());
        }
        let said = last_line(&output.stderr);
        let message = if said.contains("No space left on device") {
            format!("no space left on {} while {what}: {said}", target.host())
        } else if said.starts_with("sudo:") {
            format!("{} cannot use sudo while {what}: {said}", target.host())
        } else {
            format!(
                "{what} on {} failed (exit {}): {said}",
                target.host(),
                output.status
            )
        };
        Err(permanent(message))
    }

    /// Reads the host, checks it fits, installs the agent and starts it.
    ///
    /// # Errors
    ///
    /// A [`ProviderError`] naming what failed: the controller URL the
    /// agent would be given (see [`check_controller_url`]; refused before
    /// any session), the connection (see [`ssh::connection_error`]), the
    /// probe, privileges, space, fit, or the install.
    pub async fn enlist(&self, request: &EnlistRequest) -> Result<Enlisted, ProviderError> {
        let target = &request.target;
        let host = target.host();
        // Before any session: an agent that can never check in is not
        // worth installing, and the host is left as it was.
        let controller_url = &request.agent.controller_url;
        check_controller_url(controller_url, host)?;
        let paths = self.paths(request.machine);
        let probe = self
            .ssh
            .run(target, &probe::probe_script(&self.agent_dir), &[])
            .await?;
        if probe.status != 0 {
            return Err(permanent(format!(
                "reading {host} failed (exit {}): {}",
                probe.status,
                last_line(&probe.stderr)
            )));
        }
        let facts = HostFacts::parse(&probe.stdout)
            .map_err(|e| permanent(format!("reading {host} failed: {e}")))?;
        check_reach(controller_url, host, facts.reached.as_ref())?;
        if facts.reached.is_none()
            && url_host(controller_url).is_some_and(is_loopback)
            && !is_loopback(host)
        {
            log::warn!(
                "machine {}: its agent is told to reach the controller at {controller_url}, a \
                 loopback address, and {host} did not say where it was reached (no \
                 SSH_CONNECTION); unless {host} is this controller's own host, the agent \
                 cannot check in: set controller_url to an address {host} can reach",
                request.machine
            );
        }
        match facts.privilege {
            Privilege::Root | Privilege::Sudo => {}
            Privilege::SudoNeedsPassword => {
                return Err(permanent(format!(
                    "user {} on {host} needs a password for sudo; berth needs root or passwordless sudo",
                    facts.user
                )))
            }
            Privilege::NoSudo => {
                return Err(permanent(format!(
                    "user {} on {host} is not root and {host} has no sudo; berth needs root or passwordless sudo",
                    facts.user
                )))
            }
        }
        let why: Vec<String> = misfits(&facts, &request.constraints, request.base)
            .iter()
            .map(ToString::to_string)
            .collect();
        if !why.is_empty() {
            return Err(permanent(format!(
                "{host} does not fit machine {}: {}",
                request.machine,
                why.join("; ")
            )));
        }
        let base = facts.base.clone().map_err(|system| {
            permanent(format!("{host} runs {system}, which berth cannot manage"))
        })?;
        let binary = self.binary().await?;
        let needed_mib = binary.len() as u64 / (1024 * 1024) + SPARE_MIB;
        if facts.free_mib < needed_mib {
            return Err(permanent(format!(
                "no space on {host}: {} MiB free under {}, the agent needs {needed_mib} MiB",
                facts.free_mib, self.agent_dir
            )));
        }
        // From here a failure would leave the agent's directory, binary,
        // settings (with the one-time password) and perhaps a running
        // agent on the host: they are removed again, and the error says
        // whether they were.
        let systemd = facts.init == Init::Systemd;
        let installed = async {
            self.run_as_root(
                target,
                "installing the agent",
                &scripts::install(&paths),
                &binary,
            )
            .await?;
            self.configure_and_start(request, &paths, systemd).await
        };
        if let Err(failed) = installed.await {
            let undone = self
                .run_as_root(
                    target,
                    "removing the agent again",
                    &scripts::remove(&paths),
                    &[],
                )
                .await;
            let note = match undone {
                Ok(()) => format!("; berth removed what it had installed on {host}"),
                Err(e) => format!(
                    "; removing what berth had installed on {host} failed too ({}): its files \
                     may be left in {}",
                    e.message, paths.dir
                ),
            };
            return Err(ProviderError::new(
                failed.class,
                format!("{}{note}", failed.message),
            ));
        }
        log::info!(
            "machine {}: enlisted {host} ({}, agent {})",
            request.machine,
            facts.hardware(),
            if systemd {
                "under systemd"
            } else {
                "supervised"
            }
        );
        Ok(Enlisted {
            instance: Instance {
                id: instance_id(target),
                machine: Some(request.machine),
                zone: String::new(),
                instance_type: String::new(),
                state: InstanceState::Running,
                hardware: facts.hardware(),
                // The address berth reached the host at.
                addresses: vec![target.host().to_string()],
            },
            base,
        })
    }

    /// Writes the installed agent's settings (and the controller's CA) and
    /// starts it, under systemd or its own supervisor.
    async fn configure_and_start(
        &self,
        request: &EnlistRequest,
        paths: &AgentPaths,
        systemd: bool,
    ) -> Result<(), ProviderError> {
        let target = &request.target;
        let mut settings = format!(
            "BERTH_CONTROLLER_URL={}\nBERTH_MACHINE={}\nBERTH_AGENT_PASSWORD={}\n",
            request.agent.controller_url,
            request.machine,
            request.agent.one_time_password.expose()
        );
        if let Some(ca) = &request.agent.ca_cert {
            self.run_as_root(
                target,
                "installing the controller's CA certificate",
                &scripts::install_ca(paths),
                ca.as_bytes(),
            )
            .await?;
            settings.push_str(&format!("BERTH_CA_CERT={}\n", paths.ca_cert()));
        }
        self.run_as_root(
            target,
            "starting the agent",
            &scripts::start(paths, systemd),
            settings.as_bytes(),
        )
        .await
    }

    /// Stops and removes machine `machine`'s agent on `target`, leaving the
    /// host running.
    ///
    /// # Errors
    ///
    /// A [`ProviderError`] when the host cannot be reached or the removal
    /// fails, saying where the agent is, for whoever removes it by hand.
    pub async fn remove(
        &self,
        machine: MachineId,
        target: &SshTarget,
    ) -> Result<(), ProviderError> {
        let paths = self.paths(machine);
        self.run_as_root(target, "removing the agent", &scripts::remove(&paths), &[])
            .await
            .map_err(|e| {
                ProviderError::new(
                    e.class,
                    format!(
                        "{}; the agent is in {}, run by {} under systemd or else by {}",
                        e.message,
                        paths.dir,
                        paths.unit,
                        paths.supervisor()
                    ),
                )
            })?;
        log::info!(
            "machine {machine}: removed its agent from {}",
            target.host()
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contracts::secrets::Secret;

    #[test]
    fn a_controller_url_on_the_unspecified_address_is_refused_naming_controller_url() {
        for (url, ip) in [
            ("https://0.0.0.0:17070", "0.0.0.0"),
            ("http://0.0.0.0", "0.0.0.0"),
            ("https://[::]:17070/", "::"),
            ("http://agent@0.0.0.0:17070/", "0.0.0.0"),
        ] {
            let refused = check_controller_url(url, "host.invalid").unwrap_err();
            assert_eq!(refused.class, FailureClass::Permanent, "{url}");
            assert_eq!(
                refused.message,
                format!(
                    "agents cannot reach the controller at {url}: {ip} is the unspecified \
                     address, which a controller listens on but no host can connect to; set \
                     controller_url (BERTH_CONTROLLER_URL) to an address of this controller \
                     that host.invalid can reach"
                )
            );
        }
    }

    #[test]
    fn loopback_and_other_controller_urls_are_left_to_the_agent() {
        for url in [
            "http://127.0.0.1:17070",
            "https://[::1]:17070",
            "http://localhost:17070",
            "https://controller.example.com:17070",
            "https://192.0.2.10:17070/",
            "https://[2001:db8::1]:17070",
        ] {
            assert_eq!(check_controller_url(url, "127.0.0.1"), Ok(()), "{url}");
        }
    }

    /// Enlists `target` as machine 0 with the SSH client `ssh_program`,
    /// its agent to be told `controller_url`.
    async fn enlist_with(
        ssh_program: PathBuf,
        target: &str,
        controller_url: &str,
    ) -> Result<Enlisted, ProviderError> {
        let hosts = ManualHosts::new(
            &ManualConfig {
                ssh_program,
                ..ManualConfig::default()
            },
            "model",
        );
        hosts
            .enlist(&EnlistRequest {
                machine: MachineId::new(0),
                target: target.parse().unwrap(),
                constraints: Constraints::default(),
                base: None,
                agent: AgentBootstrap {
                    controller_url: controller_url.into(),
                    ca_cert: None,
                    one_time_password: Secret::new("password"),
                },
            })
            .await
    }

    /// Writes the shell `script` to `path` as an executable SSH client.
    fn ssh_client(path: &std::path::Path, script: impl AsRef<str>) {
        std::fs::write(path, script.as_ref()).unwrap();
        std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
    }

    /// An SSH client in `dir` that answers the probe as an Ubuntu host
    /// whose `SSH_CONNECTION` is `ssh_connection`, runs the shell `case`
    /// arms `cases` on any other script, and fails the rest. It writes the
    /// first word of each arm it takes to its log (`$LOG` in `cases`):
    /// `probe`, then what `cases` write, `other` for the rest. Returns the
    /// client and its log.
    fn probed_ssh_client(
        dir: &std::path::Path,
        ssh_connection: &str,
        cases: &str,
    ) -> (PathBuf, PathBuf) {
        let (ssh, log) = (dir.join("ssh"), dir.join("scripts.log"));
        ssh_client(
            &ssh,
            format!(
                "#!/bin/sh\n\
                 LOG={log}\n\
                 while [ $# -gt 0 ] && [ \"$1\" != -- ]; do shift; done\n\
                 cat > /dev/null\n\
                 case \"$2\" in\n\
                 *'uname -m'*) echo probe >> \"$LOG\"; printf '%s\\n' arch=x86_64 cores=2 \
                 mem_kib=4194304 root_kib=41943040 free_kib=20971520 uid=0 user=root \
                 sudo=root init=other os.ID=ubuntu os.VERSION_ID=22.04 \
                 'ssh_connection={ssh_connection}' ;;\n\
                 {cases}\
                 *) echo other >> \"$LOG\"; echo 'not a script this client answers' >&2; \
                 exit 1 ;;\n\
                 esac\n",
                log = super::ssh::shell_quote(&log.display().to_string()),
            ),
        );
        (ssh, log)
    }

    fn ends(value: &str) -> SshEnds {
        SshEnds::parse(value).unwrap()
    }

    #[test]
    fn another_machine_is_refused_a_loopback_controller_url() {
        let other = ends("198.51.100.7 50022 203.0.113.9 22");
        for url in [
            "http://127.0.0.1:17070",
            "https://[::1]:17070",
            "http://localhost:17070",
        ] {
            let refused = check_reach(url, "db1.invalid", Some(&other)).unwrap_err();
            assert_eq!(refused.class, FailureClass::Permanent, "{url}");
            assert_eq!(
                refused.message,
                format!(
                    "db1.invalid is another machine (reached at 203.0.113.9 from 198.51.100.7), \
                     so its agent cannot reach the controller at {url}, a loopback address; set \
                     controller_url (BERTH_CONTROLLER_URL) to an address of this controller \
                     that db1.invalid can reach"
                )
            );
        }
        // This machine, a controller URL it can reach, or ends unknown.
        let url = "http://127.0.0.1:17070";
        let this = ends("127.0.0.1 50022 127.0.0.1 22");
        assert_eq!(check_reach(url, "db1.invalid", Some(&this)), Ok(()));
        let own = ends("203.0.113.9 50022 203.0.113.9 22");
        assert_eq!(check_reach(url, "db1.invalid", Some(&own)), Ok(()));
        assert_eq!(check_reach(url, "db1.invalid", None), Ok(()));
        let reachable = "https://controller.invalid:17070";
        assert_eq!(check_reach(reachable, "db1.invalid", Some(&other)), Ok(()));
    }

    #[tokio::test]
    async fn another_machine_is_refused_a_loopback_controller_url_before_anything_is_copied() {
        // An SSH client that answers the probe as a host reached at a
        // documentation address would, and fails anything else: an
        // install would fail in its own words, not with the refusal.
        let dir = tempfile::tempdir().unwrap();
        let (ssh, _) = probed_ssh_client(dir.path(), "198.51.100.7 50022 203.0.113.9 22", "");
        let refused = enlist_with(ssh, "ubuntu@db1.invalid", "http://127.0.0.1:17070")
            .await
            .unwrap_err();
        assert_eq!(
            refused,
            check_reach(
                "http://127.0.0.1:17070",
                "db1.invalid",
                Some(&ends("198.51.100.7 50022 203.0.113.9 22"))
            )
            .unwrap_err()
        );
    }

    #[tokio::test]
    async fn an_install_that_fails_after_the_copy_removes_what_it_put_on_the_host() {
        // An SSH client that answers the probe as this machine reached over
        // loopback, fails the install as a binary built for another
        // architecture does, and records every script it is given.
        let dir = tempfile::tempdir().unwrap();
        let (ssh, log) = probed_ssh_client(
            dir.path(),
            "127.0.0.1 50022 127.0.0.1 22",
            "*'--version'*) echo install >> \"$LOG\"; \
             echo 'berth: cannot execute binary file: Exec format error' >&2; exit 126 ;;\n\
             *'rm -rf'*) echo remove >> \"$LOG\" ;;\n",
        );
        let failed = enlist_with(ssh, "root@127.0.0.1", "http://127.0.0.1:17070")
            .await
            .unwrap_err();
        assert_eq!(
            std::fs::read_to_string(&log).unwrap(),
            "probe\ninstall\nremove\n"
        );
        assert!(
            failed
                .message
                .starts_with("installing the agent on 127.0.0.1 failed (exit 126): "),
            "{failed}"
        );
        assert!(
            failed
                .message
                .ends_with("; berth removed what it had installed on 127.0.0.1"),
            "{failed}"
        );
    }

    #[tokio::test]
    async fn a_removal_that_fails_says_where_the_agent_is() {
        let dir = tempfile::tempdir().unwrap();
        let ssh = dir.path().join("ssh");
        ssh_client(
            &ssh,
            "#!/bin/sh\necho 'root@127.0.0.1: Permission denied (publickey).' >&2\nexit 255\n",
        );
        let hosts = ManualHosts::new(
            &ManualConfig {
                ssh_program: ssh,
                ..ManualConfig::default()
            },
            "model",
        );
        let failed = hosts
            .remove(MachineId::new(4), &"root@127.0.0.1".parse().unwrap())
            .await
            .unwrap_err();
        assert_eq!(failed.class, FailureClass::Permanent);
        assert!(
            failed.message.ends_with(
                "; the agent is in /var/lib/berth/agent-model-4, run by \
                 berth-agent-model-4.service under systemd or else by \
                 /var/lib/berth/agent-model-4/supervise.sh"
            ),
            "{failed}"
        );
    }

    #[tokio::test]
    async fn a_host_is_not_contacted_when_its_agent_could_not_reach_the_controller() {
        // An SSH client that cannot run: any session would fail in its
        // own words, not with the refusal.
        let refused = enlist_with(
            PathBuf::from("/nonexistent/ssh"),
            "ubuntu@host.invalid",
            "https://0.0.0.0:17070",
        )
        .await
        .unwrap_err();
        assert_eq!(
            refused,
            check_controller_url("https://0.0.0.0:17070", "host.invalid").unwrap_err()
        );
        assert!(
            refused
                .message
                .starts_with("agents cannot reach the controller at https://0.0.0.0:17070: "),
            "{refused}"
        );
    }
}
