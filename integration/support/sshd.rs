//! A real OpenSSH server on a loopback port, for the manual provider's
//! tests: its own generated host key, a generated user key that may log
//! in as the user the tests run as, and a `known_hosts` file that trusts
//! the host key. Agents the tests install live under its directory, and
//! every process started from there is killed when the server is dropped.
//!
//! The server is `sshd` from `BERTH_SSHD`, or `/usr/sbin/sshd` (Debian's
//! `openssh-server`, which `integration/run.sh` installs).

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use berth::providers::manual::ManualConfig;

pub struct Sshd {
    dir: tempfile::TempDir,
    port: u16,
    child: Child,
}

fn sshd_program() -> PathBuf {
    std::env::var_os("BERTH_SSHD")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/sbin/sshd"))
}

fn run(program: &str, args: &[&str]) {
    let out = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("run {program}: {e}"));
    assert!(
        out.status.success(),
        "{program} {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// berth's binary without its debug information (a test build's is most
/// of a gigabyte), made once per test process: what the tests install on
/// hosts.
pub fn agent_binary() -> &'static Path {
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    BINARY.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("berth-agent-binary-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("agent binary directory");
        let stripped = dir.join("berth");
        run(
            "objcopy",
            &[
                "--strip-debug",
                env!("CARGO_BIN_EXE_berth"),
                stripped.to_str().expect("utf-8 path"),
            ],
        );
        stripped
    })
}

impl Sshd {
    /// Starts a server on a free loopback port.
    ///
    /// # Panics
    ///
    /// If `sshd` is not installed (install openssh-server, or run
    /// `integration/run.sh`, which does) or does not start.
    pub fn start() -> Sshd {
        let program = sshd_program();
        assert!(
            program.exists(),
            "the manual provider's tests need OpenSSH's server at {}: install openssh-server (integration/run.sh does) or set BERTH_SSHD",
            program.display()
        );
        // Debian's sshd insists on its privilege separation directory.
        let _ = std::fs::create_dir_all("/run/sshd");
        let dir = tempfile::tempdir().expect("sshd directory");
        let path = |name: &str| dir.path().join(name).to_str().unwrap().to_string();
        run(
            "ssh-keygen",
            &["-q", "-t", "ed25519", "-N", "", "-f", &path("host_key")],
        );
        run(
            "ssh-keygen",
            &["-q", "-t", "ed25519", "-N", "", "-f", &path("user_key")],
        );
        std::fs::copy(path("user_key.pub"), path("authorized_keys")).unwrap();
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let config = format!(
            "Port {port}
ListenAddress 127.0.0.1
HostKey {host_key}
PidFile {pid}
AuthorizedKeysFile {authorized}
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
StrictModes no
UsePAM no
",
            host_key = path("host_key"),
            pid = path("sshd.pid"),
            authorized = path("authorized_keys"),
        );
        std::fs::write(path("sshd_config"), config).unwrap();
        let host_key = std::fs::read_to_string(path("host_key.pub")).unwrap();
        let mut fields = host_key.split_whitespace();
        let (kind, key) = (fields.next().unwrap(), fields.next().unwrap());
        std::fs::write(
            path("known_hosts"),
            format!("[127.0.0.1]:{port} {kind} {key}\n"),
        )
        .unwrap();
        std::fs::write(path("empty_known_hosts"), "").unwrap();
        std::fs::create_dir_all(path("agents")).unwrap();
        let child = Command::new(&program)
            .args(["-D", "-e", "-f", &path("sshd_config")])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", program.display()));
        let mut sshd = Sshd { dir, port, child };
        let deadline = Instant::now() + Duration::from_secs(30);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Ok(Some(status)) = sshd.child.try_wait() {
                panic!("sshd exited ({status}) before it listened");
            }
            assert!(Instant::now() < deadline, "sshd did not listen on {port}");
            std::thread::sleep(Duration::from_millis(20));
        }
        sshd
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `root@127.0.0.1:<port>` (or whichever user the tests run as).
    pub fn target(&self) -> String {
        let user = std::env::var("USER").unwrap_or_else(|_| "root".into());
        format!("{user}@127.0.0.1:{}", self.port)
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Where the tests' agents are installed.
    pub fn agent_dir(&self) -> PathBuf {
        self.path("agents")
    }

    /// The manual provider's settings for this server: its user key, the
    /// `known_hosts` that trusts it, and the agents under its directory.
    pub fn manual_config(&self) -> ManualConfig {
        ManualConfig {
            identity_file: Some(self.path("user_key")),
            known_hosts: Some(self.path("known_hosts")),
            agent_binary: Some(agent_binary().to_path_buf()),
            agent_dir: self.agent_dir().to_str().unwrap().to_string(),
            ..ManualConfig::default()
        }
    }

    /// The processes running a binary from under this server's directory
    /// (the agents and their supervisors), by pid.
    pub fn processes(&self, with: &str) -> Vec<(u32, String)> {
        let root = self.dir.path().to_str().unwrap().to_string();
        let mut found = Vec::new();
        for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            let Ok(raw) = std::fs::read(entry.path().join("cmdline")) else {
                continue;
            };
            let cmdline = String::from_utf8_lossy(&raw).replace('\0', " ");
            if cmdline.contains(&root) && cmdline.contains(with) {
                found.push((pid, cmdline.trim().to_string()));
            }
        }
        found
    }
}

impl Drop for Sshd {
    fn drop(&mut self) {
        // Supervisors first, so that no agent is started again.
        for what in ["supervise.sh", "berth"] {
            for (pid, _) in self.processes(what) {
                let _ = Command::new("kill")
                    .args(["-KILL", &pid.to_string()])
                    .status();
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
