//! The user data a new instance boots with: a cloud-init `#cloud-config`
//! that makes the machine agent check in.
//!
//! # What it expects of the image
//!
//! - cloud-init (every Ubuntu cloud image has it) and systemd;
//! - the `berth` binary at `/usr/local/bin/berth`, or, when
//!   `agent_binary_url` is configured, `curl` to download it from there
//!   (only if it is not already present);
//! - a route to the controller URL.
//!
//! # What it does
//!
//! 1. writes `/etc/berth/agent.env` (mode 0600, root) with the controller
//!    URL, the machine id and the one-time password, and, for a controller
//!    with its own CA, `/etc/berth/ca.crt`, which the agent verifies the
//!    controller with (`BERTH_CA_CERT`);
//! 2. writes the `berth-agent.service` systemd unit, which runs
//!    `berth agent --url <controller url> --machine <id> --credential-file
//!    /var/lib/berth/agent.credential` with those values and restarts it
//!    if it fails. The agent reads the password from its environment
//!    (`BERTH_AGENT_PASSWORD`, from the environment file), not from its
//!    command line, which any user of the instance can read. After its
//!    first check-in the agent keeps the machine's credential in that file
//!    (mode 0600, in a directory only root can enter), so an agent
//!    restarted after a crash or a reboot checks in with the credential;
//!    the spent password is not used again;
//! 3. installs berth if needed, then enables and starts the service.
//!
//! # Caveats
//!
//! The one-time password is readable on the instance from the instance
//! metadata service (as all user data is) and from the environment file.
//! It is worth nothing once the agent has checked in: the controller
//! accepts it once, in exchange for the machine's credential.

use crate::domain::names::MachineId;

/// Where the agent's settings are written on the instance.
pub const AGENT_ENV_FILE: &str = "/etc/berth/agent.env";
/// Where the image (or the download) must put the `berth` binary.
pub const AGENT_BINARY: &str = "/usr/local/bin/berth";
/// Where the agent keeps the machine's credential after its first
/// check-in (systemd makes its directory, `StateDirectory=berth`).
pub const AGENT_CREDENTIAL_FILE: &str = "/var/lib/berth/agent.credential";
/// Where the controller's CA certificate is written on the instance.
pub const AGENT_CA_FILE: &str = "/etc/berth/ca.crt";
/// The variable of [`AGENT_ENV_FILE`] that holds the one-time password.
pub const PASSWORD_VARIABLE: &str = "BERTH_AGENT_PASSWORD";

/// A value that cannot go into the user data as it is.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the {what} {value:?} cannot be written into an instance's user data: expected no spaces, quotes, backslashes or control characters")]
pub struct UnsafeValue {
    pub what: &'static str,
    pub value: String,
}

fn checked<'a>(what: &'static str, value: &'a str) -> Result<&'a str, UnsafeValue> {
    let unsafe_char =
        |c: char| c.is_whitespace() || c.is_control() || matches!(c, '"' | '\'' | '\\' | '$' | '`');
    if value.is_empty() || value.chars().any(unsafe_char) {
        return Err(UnsafeValue {
            what,
            value: if what == "one-time password" {
                "***".to_string()
            } else {
                value.to_string()
            },
        });
    }
    Ok(value)
}

/// The cloud-config for the agent of `machine`, which reaches the
/// controller at `controller_url` and checks in with `password`.
///
/// # Errors
///
/// [`UnsafeValue`] when a value has characters that would need quoting in
/// YAML, a systemd unit or a shell (berth's own values never do).
pub fn cloud_config(
    controller_url: &str,
    machine: MachineId,
    password: &str,
    agent_binary_url: Option<&str>,
    ca_cert: Option<&str>,
) -> Result<String, UnsafeValue> {
    let url = checked("controller URL", controller_url)?;
    let (ca_file, ca_setting) = match ca_cert {
        Some(pem) => {
            let pem = checked_pem(pem)?;
            let indented: String = pem.lines().map(|line| format!("      {line}\n")).collect();
            (
                format!(
                    "  - path: {AGENT_CA_FILE}\n    owner: root:root\n    permissions: '0644'\n    content: |\n{indented}"
                ),
                format!("      BERTH_CA_CERT={AGENT_CA_FILE}\n"),
            )
        }
        None => (String::new(), String::new()),
    };
    let machine = machine.to_string();
    let machine = checked("machine id", &machine)?;
    let password = checked("one-time password", password)?;
    let install = match agent_binary_url {
        Some(from) => {
            let from = checked("agent binary URL", from)?;
            format!(
                "  - [sh, -c, 'test -x {AGENT_BINARY} || (curl -fsSL --retry 5 -o {AGENT_BINARY} {from} && chmod 0755 {AGENT_BINARY})']\n"
            )
        }
        None => String::new(),
    };
    Ok(format!(
        "#cloud-config
write_files:
  - path: {AGENT_ENV_FILE}
    owner: root:root
    permissions: '0600'
    content: |
      BERTH_CONTROLLER_URL={url}
      BERTH_MACHINE={machine}
      {PASSWORD_VARIABLE}={password}
{ca_setting}{ca_file}  - path: /etc/systemd/system/berth-agent.service
    owner: root:root
    permissions: '0644'
    content: |
      [Unit]
      Description=berth machine agent
      Wants=network-online.target
      After=network-online.target

      [Service]
      EnvironmentFile={AGENT_ENV_FILE}
      StateDirectory=berth
      StateDirectoryMode=0700
      ExecStart={AGENT_BINARY} agent --url ${{BERTH_CONTROLLER_URL}} --machine ${{BERTH_MACHINE}} --credential-file {AGENT_CREDENTIAL_FILE}
      Restart=on-failure
      RestartSec=5

      [Install]
      WantedBy=multi-user.target
runcmd:
{install}  - [systemctl, daemon-reload]
  - [systemctl, enable, --now, berth-agent.service]
"
    ))
}

/// A PEM certificate, checked to hold only PEM's own lines (so that it
/// cannot break out of the YAML block it is written in).
fn checked_pem(pem: &str) -> Result<&str, UnsafeValue> {
    let pem = pem.trim();
    let pem_line = |line: &str| {
        (line.starts_with("-----")
            && line.ends_with("-----")
            && line.len() < 80
            && line
                .chars()
                .all(|c| c.is_ascii_uppercase() || c == '-' || c == ' '))
            || line
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '/' | '='))
    };
    if pem.starts_with("-----BEGIN CERTIFICATE-----") && pem.lines().all(pem_line) {
        Ok(pem)
    } else {
        Err(UnsafeValue {
            what: "CA certificate",
            value: pem.chars().take(40).collect(),
        })
    }
}

/// The one-time password in user data made by [`cloud_config`], for tests
/// and diagnostics.
pub fn password_in(user_data: &str) -> Option<&str> {
    let prefix = format!("{PASSWORD_VARIABLE}=");
    user_data
        .lines()
        .find_map(|line| line.trim().strip_prefix(prefix.as_str()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn machine(id: &str) -> MachineId {
        id.parse().unwrap()
    }

    #[test]
    fn a_controller_ca_is_written_for_the_agent_and_named_in_its_settings() {
        let ca = "-----BEGIN CERTIFICATE-----\nMIIBazCCARGgAwIBAgIUQ2E=\nAbC+/9==\n-----END CERTIFICATE-----\n";
        let text = cloud_config(
            "https://controller.invalid:17070",
            machine("4"),
            "pw",
            None,
            Some(ca),
        )
        .unwrap();
        let doc: serde_yaml_ng::Value = serde_yaml_ng::from_str(&text).unwrap();
        let files = doc["write_files"].as_sequence().unwrap();
        let ca_file = files
            .iter()
            .find(|f| f["path"].as_str() == Some(AGENT_CA_FILE))
            .expect("the CA file");
        assert_eq!(ca_file["content"].as_str(), Some(ca));
        let env = files
            .iter()
            .find(|f| f["path"].as_str() == Some(AGENT_ENV_FILE))
            .unwrap();
        assert!(env["content"]
            .as_str()
            .unwrap()
            .contains("BERTH_CA_CERT=/etc/berth/ca.crt\n"));
        // Without a CA there is no file and no setting.
        let plain = cloud_config(
            "http://controller.invalid:1",
            machine("4"),
            "pw",
            None,
            None,
        )
        .unwrap();
        assert!(!plain.contains("BERTH_CA_CERT") && !plain.contains(AGENT_CA_FILE));
        // Anything but PEM lines could break out of the YAML block.
        for bad in [
            "not a certificate",
            "-----BEGIN CERTIFICATE-----\nruncmd: [rm, -rf, /]\n-----END CERTIFICATE-----",
            "-----BEGIN CERTIFICATE-----\n  - path: /etc/x\n",
        ] {
            let e = cloud_config("https://c.invalid:1", machine("4"), "pw", None, Some(bad))
                .unwrap_err();
            assert_eq!(e.what, "CA certificate", "{bad:?}");
        }
    }

    #[test]
    fn the_cloud_config_starts_the_agent_with_the_machines_password() {
        let text = cloud_config(
            "http://controller.invalid:17070",
            machine("7"),
            "abc123",
            None,
            None,
        )
        .unwrap();
        assert!(text.starts_with("#cloud-config\n"));
        assert!(text.contains("      BERTH_CONTROLLER_URL=http://controller.invalid:17070\n"));
        assert!(text.contains("      BERTH_MACHINE=7\n"));
        assert!(text.contains("      BERTH_AGENT_PASSWORD=abc123\n"));
        assert!(text.contains(
            "ExecStart=/usr/local/bin/berth agent --url ${BERTH_CONTROLLER_URL} --machine ${BERTH_MACHINE} --credential-file /var/lib/berth/agent.credential\n"
        ));
        assert!(text.contains("  - [systemctl, enable, --now, berth-agent.service]\n"));
        assert!(!text.contains("curl"));
        assert_eq!(password_in(&text), Some("abc123"));
    }

    #[test]
    fn the_agent_keeps_its_credential_in_a_directory_only_root_can_enter() {
        let text = cloud_config("http://c:1", machine("2"), "p", None, None).unwrap();
        assert!(text.contains("      StateDirectory=berth\n      StateDirectoryMode=0700\n"));
        assert!(text.contains(&format!("--credential-file {AGENT_CREDENTIAL_FILE}\n")));
        assert!(AGENT_CREDENTIAL_FILE.starts_with("/var/lib/berth/"));
    }

    #[test]
    fn with_a_download_url_berth_is_installed_when_missing() {
        let text = cloud_config(
            "http://c:1",
            machine("0"),
            "p",
            Some("https://example.com/berth"),
            None,
        )
        .unwrap();
        assert!(text.contains(
            "  - [sh, -c, 'test -x /usr/local/bin/berth || (curl -fsSL --retry 5 -o /usr/local/bin/berth https://example.com/berth && chmod 0755 /usr/local/bin/berth)']\n  - [systemctl, daemon-reload]\n"
        ));
    }

    #[test]
    fn values_that_would_need_quoting_are_refused_and_a_password_is_not_shown() {
        assert_eq!(
            cloud_config("http://c:1 x", machine("0"), "p", None, None),
            Err(UnsafeValue {
                what: "controller URL",
                value: "http://c:1 x".into()
            })
        );
        assert_eq!(
            cloud_config("http://c:1", machine("0"), "p'w", None, None),
            Err(UnsafeValue {
                what: "one-time password",
                value: "***".into()
            })
        );
        assert!(cloud_config(
            "http://c:1",
            machine("0"),
            "p",
            Some("https://x/$(id)"),
            None
        )
        .is_err());
    }

    #[test]
    fn the_yaml_parses_and_carries_both_files() {
        let text =
            cloud_config("http://c:1", machine("3"), "pw", Some("https://x/b"), None).unwrap();
        let doc: serde_yaml_ng::Value = serde_yaml_ng::from_str(&text).unwrap();
        let files = doc["write_files"].as_sequence().unwrap();
        assert_eq!(files.len(), 2);
        assert_eq!(files[0]["path"].as_str(), Some(AGENT_ENV_FILE));
        assert_eq!(files[0]["permissions"].as_str(), Some("0600"));
        assert_eq!(
            files[0]["content"].as_str(),
            Some("BERTH_CONTROLLER_URL=http://c:1\nBERTH_MACHINE=3\nBERTH_AGENT_PASSWORD=pw\n")
        );
        assert_eq!(doc["runcmd"].as_sequence().unwrap().len(), 3);
    }
}
