//! HTTPS: `berth serve` with its own CA (`[tls] enabled = true` on
//! loopback, and by default on a non-loopback listen address) or an
//! operator's certificate, verified by the command line, the machine agent,
//! `berth login` and curl; a client without the CA is refused, and plain
//! HTTP is never served beyond loopback. Every controller here is a
//! `berth serve` process, and all traffic goes to 127.0.0.1; an enlisted
//! host is a real `sshd` on loopback.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::app::{berth_command, free_port, refused_start};
use crate::support::sshd::Sshd;

/// A `berth serve` process, killed when dropped.
struct Served {
    child: Child,
    port: u16,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `berth serve` on `listen` with `data_dir` and the settings in `env`.
fn serve_command(listen: &str, data_dir: &Path, env: &[(&str, &str)]) -> Command {
    let mut command = berth_command();
    command
        .args(["serve", "--listen", listen])
        .arg("--data-dir")
        .arg(data_dir)
        .env_remove("BERTH_URL")
        .env_remove("BERTH_TOKEN")
        .env_remove("BERTH_CA_CERT")
        .env("RUST_LOG", "warn")
        .envs(env.iter().copied());
    command
}

/// Starts `berth serve` and waits until it answers HTTPS with the data
/// directory's CA (checked with the command line itself).
fn serve_tls(host: &str, port: u16, data_dir: &Path, env: &[(&str, &str)]) -> Served {
    let child = serve_command(&format!("{host}:{port}"), data_dir, env)
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("berth serve starts");
    let mut served = Served { child, port };
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(Some(exit)) = served.child.try_wait() {
            panic!("berth serve exited ({exit}) before it answered");
        }
        let out = cli(&served, data_dir, &["status", "--format", "json"]);
        if out.status.success() {
            return served;
        }
        assert!(
            Instant::now() < deadline,
            "berth serve did not answer over HTTPS: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn https_url(served: &Served) -> String {
    format!("https://127.0.0.1:{}", served.port)
}

/// The command line with `BERTH_URL=https://...` and `data_dir` as its
/// data directory (where it finds the token and `ca.crt`).
fn cli(served: &Served, data_dir: &Path, args: &[&str]) -> Output {
    berth_command()
        .args(args)
        .env("BERTH_URL", https_url(served))
        .env("BERTH_DATA_DIR", data_dir)
        .env_remove("BERTH_TOKEN")
        .env_remove("BERTH_CA_CERT")
        .env("XDG_CONFIG_HOME", data_dir.join("no-saved-controllers"))
        .output()
        .expect("berth runs")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// curl's exit code and the HTTP status it saw (`000` for none).
fn curl(url: &str, ca: Option<&Path>) -> (i32, String) {
    let mut command = Command::new("curl");
    command.args([
        "-sS",
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        "--max-time",
        "10",
    ]);
    if let Some(ca) = ca {
        command.arg("--cacert").arg(ca);
    }
    let out = command.arg(url).output().expect("curl runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

fn token_of(data_dir: &Path) -> String {
    std::fs::read_to_string(data_dir.join("admin.token"))
        .unwrap()
        .trim()
        .to_string()
}

/// A CA of another controller, made the way berth makes its own.
fn another_ca() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    berth::tls::server_identity(
        &berth::tls::TlsConfig::default(),
        dir.path(),
        &["localhost".into()],
    )
    .unwrap();
    let ca = dir.path().join(berth::tls::CA_CERT_FILE);
    (dir, ca)
}

#[test]
fn a_tls_controller_on_loopback_is_verified_with_its_own_ca_and_refused_without_it() {
    let data = tempfile::tempdir().unwrap();
    let dir = data.path();
    let port = free_port();
    let served = serve_tls("127.0.0.1", port, dir, &[("BERTH_TLS__ENABLED", "true")]);
    let ca = dir.join("ca.crt");
    let ca_pem = std::fs::read(&ca).unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir.join("ca.key"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    // The command line verified it with the data directory's ca.crt.
    let status = cli(&served, dir, &["status", "--format", "json"]);
    let status: Value = serde_json::from_slice(&status.stdout).unwrap();
    assert!(status["model"]["controller"].is_string());

    // curl with the CA, by address and by name; without it, the handshake
    // fails (60: the peer's certificate cannot be authenticated).
    assert_eq!(
        curl(&format!("{}/healthz", https_url(&served)), Some(&ca)),
        (0, "200".into())
    );
    assert_eq!(
        curl(&format!("https://localhost:{port}/healthz"), Some(&ca)),
        (0, "200".into())
    );
    let (code, http) = curl(&format!("{}/healthz", https_url(&served)), None);
    assert_eq!((code, http.as_str()), (60, "000"));
    // Plain HTTP gets no answer from the TLS port.
    let (code, http) = curl(&format!("http://127.0.0.1:{port}/healthz"), None);
    assert_ne!(code, 0);
    assert_eq!(http, "000");

    // A command line with no CA (another data directory), or another
    // controller's CA, is refused before anything is sent, and says why.
    let elsewhere = tempfile::tempdir().unwrap();
    let token = token_of(dir);
    let no_ca = berth_command()
        .args(["status", "--token", &token])
        .env("BERTH_URL", https_url(&served))
        .env("BERTH_DATA_DIR", elsewhere.path())
        .env("XDG_CONFIG_HOME", elsewhere.path())
        .env_remove("BERTH_CA_CERT")
        .output()
        .unwrap();
    assert_eq!(no_ca.status.code(), Some(1));
    assert!(
        stderr(&no_ca).starts_with(&format!(
            "ERROR cannot verify the berth controller at {}",
            https_url(&served)
        )),
        "{}",
        stderr(&no_ca)
    );
    assert!(stderr(&no_ca).contains("--ca-cert"), "{}", stderr(&no_ca));
    let (_other_dir, other_ca) = another_ca();
    let wrong_ca = berth_command()
        .args(["status", "--token", &token, "--ca-cert"])
        .arg(&other_ca)
        .env("BERTH_URL", https_url(&served))
        .env("BERTH_DATA_DIR", elsewhere.path())
        .output()
        .unwrap();
    assert_eq!(wrong_ca.status.code(), Some(1));
    assert!(
        stderr(&wrong_ca).contains("cannot verify"),
        "{}",
        stderr(&wrong_ca)
    );
    // A CA file that is not one: a usage error.
    let not_pem = elsewhere.path().join("not.pem");
    std::fs::write(&not_pem, "hello").unwrap();
    let bad_file = berth_command()
        .args(["status", "--token", &token])
        .env("BERTH_CA_CERT", &not_pem)
        .env("BERTH_URL", https_url(&served))
        .env("BERTH_DATA_DIR", elsewhere.path())
        .output()
        .unwrap();
    assert_eq!(bad_file.status.code(), Some(2), "{}", stderr(&bad_file));
    assert!(stderr(&bad_file).contains("holds no PEM certificate"));
    // With the CA given (BERTH_CA_CERT), it works from anywhere.
    let given = berth_command()
        .args(["status", "--token", &token])
        .env("BERTH_CA_CERT", &ca)
        .env("BERTH_URL", https_url(&served))
        .env("BERTH_DATA_DIR", elsewhere.path())
        .output()
        .unwrap();
    assert!(given.status.success(), "{}", stderr(&given));
    // In a list of controllers, the CA is used for the HTTPS one even when
    // a plain HTTP address (here one that nothing answers) comes first.
    let closed = free_port();
    let listed = berth_command()
        .args(["status", "--token", &token, "--ca-cert"])
        .arg(&ca)
        .env(
            "BERTH_URL",
            format!("http://127.0.0.1:{closed},{}", https_url(&served)),
        )
        .env("BERTH_DATA_DIR", elsewhere.path())
        .output()
        .unwrap();
    assert!(listed.status.success(), "{}", stderr(&listed));

    // The machine agent verifies too: with the CA it reaches the API
    // (which does not know machine 9); without it, it does not connect.
    let agent = |ca: Option<&Path>| {
        let mut command = berth_command();
        command
            .args(["agent", "--machine", "9", "--password", "whatever"])
            .env("BERTH_URL", https_url(&served))
            .env("BERTH_DATA_DIR", elsewhere.path())
            .env_remove("BERTH_CA_CERT");
        if let Some(ca) = ca {
            command.arg("--ca-cert").arg(ca);
        }
        command.output().unwrap()
    };
    let verified = agent(Some(&ca));
    assert_eq!(stderr(&verified), "ERROR machine 9 not found\n");
    let unverified = agent(None);
    assert_eq!(unverified.status.code(), Some(1));
    assert!(
        stderr(&unverified).contains("cannot verify"),
        "{}",
        stderr(&unverified)
    );

    // `berth login` checks the controller with the CA and saves it; later
    // commands elsewhere need no flags. Without the CA, nothing is saved.
    let config = tempfile::tempdir().unwrap();
    let login = |extra: &[&str]| {
        berth_command()
            .args([
                "login",
                &https_url(&served),
                "--token",
                &token,
                "--name",
                "tls",
            ])
            .args(extra)
            .current_dir(elsewhere.path())
            .env_remove("BERTH_URL")
            .env_remove("BERTH_CA_CERT")
            .env("BERTH_DATA_DIR", elsewhere.path())
            .env("XDG_CONFIG_HOME", config.path())
            .output()
            .unwrap()
    };
    let refused = login(&[]);
    assert_eq!(refused.status.code(), Some(1));
    assert!(!config.path().join("berth/controllers.toml").exists());
    let ca_arg = ca.to_str().unwrap();
    let logged_in = login(&["--ca-cert", ca_arg]);
    assert!(logged_in.status.success(), "{}", stderr(&logged_in));
    let saved = std::fs::read_to_string(config.path().join("berth/controllers.toml")).unwrap();
    assert!(saved.contains("BEGIN CERTIFICATE"), "{saved}");
    let logged_in_status = || {
        berth_command()
            .args(["status", "--format", "json"])
            .current_dir(elsewhere.path())
            .env_remove("BERTH_URL")
            .env_remove("BERTH_TOKEN")
            .env_remove("BERTH_CA_CERT")
            .env("BERTH_DATA_DIR", elsewhere.path().join("none"))
            .env("XDG_CONFIG_HOME", config.path())
            .output()
            .unwrap()
    };
    let status = logged_in_status();
    assert!(status.status.success(), "{}", stderr(&status));

    // Restarted, the controller keeps its CA: what trusts it still works.
    drop(served);
    let served = serve_tls("127.0.0.1", port, dir, &[("BERTH_TLS__ENABLED", "true")]);
    assert_eq!(std::fs::read(&ca).unwrap(), ca_pem);
    let status = logged_in_status();
    assert!(status.status.success(), "{}", stderr(&status));
    drop(served);
}

#[test]
fn plain_http_is_never_served_beyond_loopback() {
    let data = tempfile::tempdir().unwrap();
    let port = free_port();
    // Turning TLS off for a non-loopback address is refused at start.
    let refused = refused_start(serve_command(
        &format!("0.0.0.0:{port}"),
        data.path(),
        &[("BERTH_TLS__ENABLED", "false")],
    ));
    assert_eq!(refused.status.code(), Some(1), "{}", stderr(&refused));
    assert!(
        stderr(&refused).contains(&format!(
            "tls.enabled is false but listen 0.0.0.0:{port} is not a loopback address"
        )),
        "{}",
        stderr(&refused)
    );
    // A certificate without its key is refused too.
    let half = refused_start(serve_command(
        &format!("127.0.0.1:{port}"),
        data.path(),
        &[("BERTH_TLS__CERT_FILE", "/nonexistent/server.crt")],
    ));
    assert_eq!(half.status.code(), Some(1));
    assert!(stderr(&half).contains("tls.cert_file and tls.key_file go together"));

    // By default, a controller on every address serves HTTPS only.
    let served = serve_tls("0.0.0.0", port, data.path(), &[]);
    let ca = data.path().join("ca.crt");
    assert_eq!(
        curl(&format!("https://127.0.0.1:{port}/healthz"), Some(&ca)),
        (0, "200".into())
    );
    let (code, http) = curl(&format!("http://127.0.0.1:{port}/healthz"), None);
    assert_ne!(code, 0);
    assert_eq!(http, "000");
    drop(served);
}

#[test]
fn an_operators_certificate_and_key_are_served_instead_of_the_controllers_own() {
    let data = tempfile::tempdir().unwrap();
    // The operator's CA and a certificate it issued for 127.0.0.1.
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "operator CA");
    let ca_cert = ca_params.self_signed(&ca_key).unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()])
        .unwrap()
        .signed_by(&key, &ca_cert, &ca_key)
        .unwrap();
    let files = tempfile::tempdir().unwrap();
    let (cert_file, key_file, ca_file) = (
        files.path().join("server.crt"),
        files.path().join("server.key"),
        files.path().join("operator-ca.crt"),
    );
    std::fs::write(&cert_file, cert.pem()).unwrap();
    std::fs::write(&key_file, key.serialize_pem()).unwrap();
    std::fs::write(&ca_file, ca_cert.pem()).unwrap();

    let port = free_port();
    let child = serve_command(
        &format!("127.0.0.1:{port}"),
        data.path(),
        &[
            ("BERTH_TLS__ENABLED", "true"),
            ("BERTH_TLS__CERT_FILE", cert_file.to_str().unwrap()),
            ("BERTH_TLS__KEY_FILE", key_file.to_str().unwrap()),
        ],
    )
    .stdout(Stdio::null())
    .stderr(Stdio::inherit())
    .spawn()
    .unwrap();
    let served = Served { child, port };
    let url = format!("https://127.0.0.1:{port}/healthz");
    let deadline = Instant::now() + Duration::from_secs(60);
    while curl(&url, Some(&ca_file)) != (0, "200".to_string()) {
        assert!(
            Instant::now() < deadline,
            "no HTTPS answer with the operator's CA"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // No CA of the controller's own was made, and the command line
    // verifies the operator's certificate with the operator's CA.
    assert!(!data.path().join("ca.crt").exists());
    let status = berth_command()
        .args(["status", "--ca-cert"])
        .arg(&ca_file)
        .env("BERTH_URL", format!("https://127.0.0.1:{port}"))
        .env("BERTH_DATA_DIR", data.path())
        .env_remove("BERTH_TOKEN")
        .output()
        .unwrap();
    assert!(status.status.success(), "{}", stderr(&status));

    // A key file that holds no key stops the start with its name.
    std::fs::write(&key_file, "not a key").unwrap();
    let other = tempfile::tempdir().unwrap();
    let refused = refused_start(serve_command(
        &format!("127.0.0.1:{}", free_port()),
        other.path(),
        &[
            ("BERTH_TLS__ENABLED", "true"),
            ("BERTH_TLS__CERT_FILE", cert_file.to_str().unwrap()),
            ("BERTH_TLS__KEY_FILE", key_file.to_str().unwrap()),
        ],
    ));
    assert_eq!(refused.status.code(), Some(1));
    assert!(
        stderr(&refused).contains(&format!("{} holds no PEM private key", key_file.display())),
        "{}",
        stderr(&refused)
    );
    drop(served);
}

/// The status JSON the command line reads from an HTTPS controller.
fn status_json(served: &Served, data_dir: &Path) -> Value {
    let out = cli(served, data_dir, &["status", "--format", "json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn an_enlisted_hosts_agent_is_given_the_ca_over_ssh_and_checks_in_over_https() {
    let sshd = Sshd::start();
    let manual = sshd.manual_config();
    let data = tempfile::tempdir().unwrap();
    let dir = data.path();
    let path = |p: &Option<PathBuf>| p.as_ref().unwrap().to_str().unwrap().to_string();
    let (identity, known_hosts, binary) = (
        path(&manual.identity_file),
        path(&manual.known_hosts),
        path(&manual.agent_binary),
    );
    let served = serve_tls(
        "127.0.0.1",
        free_port(),
        dir,
        &[
            ("BERTH_TLS__ENABLED", "true"),
            ("BERTH_MANUAL__IDENTITY_FILE", &identity),
            ("BERTH_MANUAL__KNOWN_HOSTS", &known_hosts),
            ("BERTH_MANUAL__AGENT_BINARY", &binary),
            ("BERTH_MANUAL__AGENT_DIR", &manual.agent_dir),
        ],
    );
    let added = cli(
        &served,
        dir,
        &["add-machine", &format!("ssh:{}", sshd.target())],
    );
    assert!(added.status.success(), "{}", stderr(&added));

    // The agent on the host can only check in by verifying the controller
    // with the CA it was given.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let status = status_json(&served, dir);
        let machine = &status["machines"]["0"];
        if machine["juju-status"]["current"] == "started" {
            assert_eq!(machine["dns-name"], "127.0.0.1");
            break;
        }
        assert!(
            machine["juju-status"]["current"] != "error" && Instant::now() < deadline,
            "machine 0 did not start: {machine}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let agent_dir = std::fs::read_dir(sshd.agent_dir())
        .unwrap()
        .flatten()
        .map(|entry| entry.path())
        .find(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("agent-")
        })
        .expect("the agent's directory");
    assert_eq!(
        std::fs::read(agent_dir.join("ca.crt")).unwrap(),
        std::fs::read(dir.join("ca.crt")).unwrap()
    );
    let settings = std::fs::read_to_string(agent_dir.join("agent.env")).unwrap();
    assert!(
        settings.contains(&format!(
            "BERTH_CA_CERT={}",
            agent_dir.join("ca.crt").display()
        )),
        "{settings}"
    );
    assert!(
        settings.contains(&format!("BERTH_CONTROLLER_URL={}", https_url(&served))),
        "{settings}"
    );

    let removed = cli(&served, dir, &["remove-machine", "0"]);
    assert!(removed.status.success(), "{}", stderr(&removed));
    let deadline = Instant::now() + Duration::from_secs(60);
    while status_json(&served, dir)["machines"].get("0").is_some() {
        assert!(Instant::now() < deadline, "machine 0 was not removed");
        std::thread::sleep(Duration::from_millis(100));
    }
}
