//! The shell scripts that install, start and remove a machine agent on an
//! enlisted host. Each runs as root (directly, or through `sudo -n`) and
//! touches only the agent's own directory, its systemd unit and its
//! processes: never the host's other services, and never the host itself.

use super::ssh::shell_quote;

/// Where one machine's agent lives on its host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AgentPaths {
    /// `<agent_dir>/agent-<model>-<machine>`: binary, settings, credential,
    /// log and supervisor pid, all in one directory only root can enter.
    pub dir: String,
    /// `berth-agent-<model>-<machine>.service`.
    pub unit: String,
}

impl AgentPaths {
    /// The agent of machine `machine` of the model whose uuid starts with
    /// `model`, under `agent_dir`.
    pub fn new(agent_dir: &str, model: &str, machine: &str) -> AgentPaths {
        let model: String = model
            .chars()
            .filter(|c| c.is_ascii_alphanumeric())
            .take(8)
            .collect();
        let slug = format!("{model}-{machine}");
        AgentPaths {
            dir: format!("{}/agent-{slug}", agent_dir.trim_end_matches('/')),
            unit: format!("berth-agent-{slug}.service"),
        }
    }

    pub fn binary(&self) -> String {
        format!("{}/berth", self.dir)
    }
    pub fn credential(&self) -> String {
        format!("{}/agent.credential", self.dir)
    }
    pub fn settings(&self) -> String {
        format!("{}/agent.env", self.dir)
    }
    /// The controller's CA certificate, which the agent verifies an
    /// `https://` controller with.
    pub fn ca_cert(&self) -> String {
        format!("{}/ca.crt", self.dir)
    }
    pub fn supervisor(&self) -> String {
        format!("{}/supervise.sh", self.dir)
    }
    pub fn supervisor_pid(&self) -> String {
        format!("{}/supervisor.pid", self.dir)
    }
    pub fn log(&self) -> String {
        format!("{}/agent.log", self.dir)
    }
    pub fn systemd_unit_file(&self) -> String {
        format!("/etc/systemd/system/{}", self.unit)
    }
}

/// Runs `script` as root: directly when logged in as root, otherwise
/// through `sudo -n` (which fails rather than ask for a password).
pub fn as_root(script: &str) -> String {
    format!(
        "if [ \"$(id -u)\" -eq 0 ]; then exec sh -c {q}; else exec sudo -n sh -c {q}; fi",
        q = shell_quote(script)
    )
}

/// Stops whatever agent of these paths runs: its systemd service, or its
/// supervisor and the agent under it (one process group), and any agent
/// still running its binary without them.
///
/// The supervisor's process group is signalled only while its leader runs
/// this directory's `supervise.sh`: a pid file that outlived its
/// supervisor (the host rebooted, the supervisor was killed) may name
/// another process group by now.
fn stop_agent(paths: &AgentPaths) -> String {
    format!(
        r#"if command -v systemctl >/dev/null 2>&1 && [ -f {unit_file} ]; then
  systemctl disable --now {unit} >/dev/null 2>&1 || true
  rm -f {unit_file}
  systemctl daemon-reload || true
fi
if [ -f {pid} ]; then
  pgid=$(cat {pid})
  case "$pgid" in
    ''|*[!0-9]*) ;;
    *) if {{ tr '\0' '\n' < "/proc/$pgid/cmdline"; }} 2>/dev/null | grep -qxF -- {script}; then
         kill -TERM "-$pgid" 2>/dev/null || true
       fi ;;
  esac
  rm -f {pid}
fi
for proc in /proc/[0-9]*; do
  case "$(readlink "$proc/exe" 2>/dev/null)" in
    {bin}|{bin}' (deleted)') kill -TERM "${{proc#/proc/}}" 2>/dev/null || true ;;
  esac
done
"#,
        unit_file = shell_quote(&paths.systemd_unit_file()),
        unit = shell_quote(&paths.unit),
        pid = shell_quote(&paths.supervisor_pid()),
        script = shell_quote(&paths.supervisor()),
        bin = shell_quote(&paths.binary()),
    )
}

/// Copies the agent binary from standard input into place (through a
/// temporary name, so a half-copied binary never runs).
pub fn install(paths: &AgentPaths) -> String {
    format!(
        r#"set -eu
umask 077
mkdir -p {dir}
chmod 0700 {dir}
cat > {tmp}
chmod 0755 {tmp}
mv -f {tmp} {bin}
{bin} --version >/dev/null
"#,
        dir = shell_quote(&paths.dir),
        tmp = shell_quote(&format!("{}.new", paths.binary())),
        bin = shell_quote(&paths.binary()),
    )
}

/// The supervising loop for hosts without systemd: starts the agent, and
/// starts it again two seconds after it exits, for as long as it runs.
pub fn supervisor(paths: &AgentPaths) -> String {
    format!(
        r#"#!/bin/sh
# berth machine agent supervisor: keeps the agent running.
set -a
. {settings}
set +a
while :; do
  {bin} agent --url "$BERTH_CONTROLLER_URL" --machine "$BERTH_MACHINE" --credential-file {credential} >>{log} 2>&1
  sleep 2
done
"#,
        settings = shell_quote(&paths.settings()),
        bin = shell_quote(&paths.binary()),
        credential = shell_quote(&paths.credential()),
        log = shell_quote(&paths.log()),
    )
}

/// The systemd unit for hosts that run systemd: restarted whenever it
/// exits, started at boot.
pub fn systemd_unit(paths: &AgentPaths) -> String {
    format!(
        "[Unit]
Description=berth machine agent
Wants=network-online.target
After=network-online.target

[Service]
EnvironmentFile={settings}
ExecStart={bin} agent --url ${{BERTH_CONTROLLER_URL}} --machine ${{BERTH_MACHINE}} --credential-file {credential}
Restart=always
RestartSec=2

[Install]
WantedBy=multi-user.target
",
        settings = paths.settings(),
        bin = paths.binary(),
        credential = paths.credential(),
    )
}

/// Writes the agent's settings (read from standard input: controller URL,
/// machine and one-time password, mode 0600), stops any earlier agent of
/// this machine, forgets its credential, and starts the agent: as a
/// systemd service when `systemd`, otherwise under [`supervisor`].
pub fn start(paths: &AgentPaths, systemd: bool) -> String {
    let launch = if systemd {
        format!(
            r#"cat > {unit_file} <<'UNIT'
{unit_text}UNIT
systemctl daemon-reload
systemctl enable --now {unit}
"#,
            unit_file = shell_quote(&paths.systemd_unit_file()),
            unit_text = systemd_unit(paths),
            unit = shell_quote(&paths.unit),
        )
    } else {
        format!(
            r#"cat > {script} <<'SUPERVISE'
{supervise}SUPERVISE
chmod 0700 {script}
setsid {script} </dev/null >/dev/null 2>&1 &
echo $! > {pid}
"#,
            script = shell_quote(&paths.supervisor()),
            supervise = supervisor(paths),
            pid = shell_quote(&paths.supervisor_pid()),
        )
    };
    format!(
        r#"set -eu
umask 077
{stop}rm -f {credential}
cat > {settings}
chmod 0600 {settings}
{launch}"#,
        stop = stop_agent(paths),
        credential = shell_quote(&paths.credential()),
        settings = shell_quote(&paths.settings()),
    )
}

/// Writes the controller's CA certificate from standard input into the
/// agent's directory (through a temporary name).
pub fn install_ca(paths: &AgentPaths) -> String {
    format!(
        r#"set -eu
umask 077
cat > {tmp}
mv -f {tmp} {ca}
"#,
        tmp = shell_quote(&format!("{}.new", paths.ca_cert())),
        ca = shell_quote(&paths.ca_cert()),
    )
}

/// Stops the agent and removes its unit and directory; nothing else on the
/// host is touched. Removing an agent that is not there succeeds.
pub fn remove(paths: &AgentPaths) -> String {
    format!(
        "set -u\n{stop}rm -rf {dir}\n",
        stop = stop_agent(paths),
        dir = shell_quote(&paths.dir)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths() -> AgentPaths {
        AgentPaths::new(
            "/var/lib/berth/",
            "3f2a9c1e-77aa-4bd0-9f0e-000000000000",
            "4",
        )
    }

    fn sh_accepts(script: &str) {
        let out = std::process::Command::new("sh")
            .args(["-n", "-c", script])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "sh -n refused:\n{script}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    #[test]
    fn each_machine_has_its_own_directory_and_unit() {
        let p = paths();
        assert_eq!(p.dir, "/var/lib/berth/agent-3f2a9c1e-4");
        assert_eq!(p.unit, "berth-agent-3f2a9c1e-4.service");
        assert_eq!(
            p.credential(),
            "/var/lib/berth/agent-3f2a9c1e-4/agent.credential"
        );
    }

    #[test]
    fn every_script_is_valid_shell() {
        let p = paths();
        for script in [
            install(&p),
            install_ca(&p),
            start(&p, true),
            start(&p, false),
            remove(&p),
            supervisor(&p),
            as_root(&remove(&p)),
        ] {
            sh_accepts(&script);
        }
    }

    #[test]
    fn the_agent_always_keeps_its_credential_in_a_file() {
        let p = paths();
        for text in [systemd_unit(&p), supervisor(&p)] {
            assert!(
                text.contains("--credential-file /var/lib/berth/agent-3f2a9c1e-4/agent.credential")
                    || text.contains(
                        "--credential-file '/var/lib/berth/agent-3f2a9c1e-4/agent.credential'"
                    ),
                "{text}"
            );
            assert!(
                !text.contains("--password"),
                "the password stays in the settings file"
            );
        }
        assert!(systemd_unit(&p).contains("Restart=always"));
    }

    /// A directory for one machine's agent under a fresh `agent_dir`.
    fn local_paths(agent_dir: &std::path::Path) -> AgentPaths {
        let paths = AgentPaths::new(agent_dir.to_str().unwrap(), "model", "0");
        std::fs::create_dir_all(&paths.dir).unwrap();
        paths
    }

    fn run(script: &str) {
        let out = std::process::Command::new("sh")
            .args(["-c", script])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{script}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// A process of its own process group: `program` sleeping.
    fn sleeper(program: &str) -> std::process::Child {
        use std::os::unix::process::CommandExt;
        std::process::Command::new(program)
            .arg("30")
            .process_group(0)
            .spawn()
            .unwrap()
    }

    #[test]
    fn a_supervisor_pid_left_behind_stops_no_other_process_group() {
        let dir = tempfile::tempdir().unwrap();
        let paths = local_paths(dir.path());
        // The supervisor is gone and its pid now leads another group.
        let mut other = sleeper("sleep");
        std::fs::write(paths.supervisor_pid(), other.id().to_string()).unwrap();
        run(&remove(&paths));
        let survived = other.try_wait().unwrap().is_none();
        let _ = other.kill();
        let _ = other.wait();
        assert!(survived, "the other process group was signalled");
        assert!(!std::path::Path::new(&paths.dir).exists());
    }

    #[test]
    fn an_agent_left_without_its_supervisor_is_stopped() {
        let dir = tempfile::tempdir().unwrap();
        let paths = local_paths(dir.path());
        // The agent's binary, running on after its supervisor died.
        let sleep = std::process::Command::new("sh")
            .args(["-c", "command -v sleep"])
            .output()
            .unwrap();
        let sleep = String::from_utf8(sleep.stdout).unwrap();
        std::fs::copy(sleep.trim(), paths.binary()).unwrap();
        let mut agent = sleeper(&paths.binary());
        // And one that is not this agent's: left running.
        let mut other = sleeper("sleep");
        run(&remove(&paths));
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let stopped = loop {
            match agent.try_wait().unwrap() {
                Some(status) => break Some(status),
                None if std::time::Instant::now() > deadline => break None,
                None => std::thread::sleep(std::time::Duration::from_millis(20)),
            }
        };
        let other_survived = other.try_wait().unwrap().is_none();
        let _ = other.kill();
        let _ = other.wait();
        let _ = agent.kill();
        let _ = agent.wait();
        assert!(stopped.is_some(), "the agent still runs");
        assert!(other_survived, "another sleep was stopped");
    }

    #[test]
    fn removing_touches_only_the_agents_own_files() {
        let script = remove(&paths());
        assert!(script.contains("rm -rf '/var/lib/berth/agent-3f2a9c1e-4'"));
        for forbidden in [
            "shutdown",
            "poweroff",
            "reboot",
            "halt",
            "rm -rf /\n",
            "rm -rf '/'",
        ] {
            assert!(!script.contains(forbidden), "{forbidden} in {script}");
        }
    }
}
