//! Running commands on an existing host with the OpenSSH client.
//!
//! berth runs `ssh` itself rather than speaking the protocol: the client is
//! on every machine that would enlist a host, honours the operator's SSH
//! agent and configuration, and verifies host keys the way the operator's
//! own sessions do. Every session is non-interactive (`BatchMode`), checks
//! the host key strictly against the configured `known_hosts` (an unknown
//! or changed key is refused, never added) and gives up on a host that does
//! not answer within the connect timeout.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::process::Command;

use crate::contracts::provider::{FailureClass, ProviderError};
use crate::domain::placement::SshTarget;

/// How berth reaches hosts: which key, which known hosts, how long to wait.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SshClient {
    /// The `ssh` program.
    pub program: PathBuf,
    /// `None`: SSH's own keys (`~/.ssh/id_*`) and agent.
    pub identity_file: Option<PathBuf>,
    /// The host keys berth trusts (`~/.ssh/known_hosts` by default).
    pub known_hosts: PathBuf,
    pub connect_timeout: Duration,
    /// The longest a whole session may take (copying the binary included).
    pub session_timeout: Duration,
}

/// What a finished remote command left.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Output {
    pub status: i32,
    pub stdout: String,
    pub stderr: String,
}

/// Quotes `s` for a POSIX shell: one single-quoted word.
pub fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

impl SshClient {
    /// The `ssh` arguments that reach `target` and run `command` there.
    pub fn args(&self, target: &SshTarget, command: &str) -> Vec<String> {
        let mut args: Vec<String> = [
            "-T",
            "-o",
            "BatchMode=yes",
            "-o",
            "StrictHostKeyChecking=yes",
            "-o",
            "LogLevel=ERROR",
            "-o",
            "ServerAliveInterval=10",
            "-o",
            "ServerAliveCountMax=3",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        args.push("-o".into());
        args.push(format!(
            "ConnectTimeout={}",
            self.connect_timeout.as_secs().max(1)
        ));
        args.push("-o".into());
        args.push(format!("UserKnownHostsFile={}", self.known_hosts.display()));
        if let Some(identity) = &self.identity_file {
            args.extend([
                "-o".into(),
                "IdentitiesOnly=yes".into(),
                "-i".into(),
                identity.display().to_string(),
            ]);
        }
        if let Some(port) = target.port() {
            args.extend(["-p".into(), port.to_string()]);
        }
        if let Some(user) = target.user() {
            args.extend(["-l".into(), user.to_string()]);
        }
        args.push(target.host().to_string());
        args.push("--".into());
        args.push(command.to_string());
        args
    }

    /// Runs the POSIX shell `script` on `target`, feeding it `stdin`.
    ///
    /// # Errors
    ///
    /// A [`ProviderError`] saying why the host could not be reached or
    /// used (see [`connection_error`]); a script that ran and failed is an
    /// `Ok` [`Output`] with its status.
    pub async fn run(
        &self,
        target: &SshTarget,
        script: &str,
        stdin: &[u8],
    ) -> Result<Output, ProviderError> {
        let command = format!("sh -c {}", shell_quote(script));
        let mut child = Command::new(&self.program)
            .args(self.args(target, &command))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| {
                ProviderError::new(
                    FailureClass::Permanent,
                    format!("cannot run the SSH client {}: {e}", self.program.display()),
                )
            })?;
        let mut input = child.stdin.take();
        let stdin = stdin.to_vec();
        let feed = async move {
            if let Some(input) = input.as_mut() {
                // A script that exits before reading all of it closes the
                // pipe; its status says what went wrong.
                let _ = input.write_all(&stdin).await;
                let _ = input.shutdown().await;
            }
            drop(input);
        };
        let session = async {
            let (_, output) = tokio::join!(feed, child.wait_with_output());
            output
        };
        let output = tokio::time::timeout(self.session_timeout, session)
            .await
            .map_err(|_| {
                ProviderError::new(
                    FailureClass::Transient,
                    format!(
                        "the SSH session with {} took longer than {} s",
                        target.host(),
                        self.session_timeout.as_secs()
                    ),
                )
            })?
            .map_err(|e| {
                ProviderError::new(FailureClass::Transient, format!("SSH session failed: {e}"))
            })?;
        let output = Output {
            status: output.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        };
        // 255 is the client's own failure: the command never ran.
        if output.status == 255 {
            return Err(connection_error(target, &self.known_hosts, &output.stderr));
        }
        Ok(output)
    }
}

/// The port in OpenSSH's `connect to host H port P: Connection refused`:
/// the one it tried, which its configuration may have chosen.
fn refused_port(stderr: &str) -> Option<u16> {
    let (before, _) = stderr.split_once(": Connection refused")?;
    before.rsplit_once(" port ")?.1.trim().parse().ok()
}

/// Why the SSH client could not run a command on `target`, from what it
/// printed: each cause named, so the operator knows what to fix before
/// `retry-provisioning`.
pub fn connection_error(
    target: &SshTarget,
    known_hosts: &std::path::Path,
    stderr: &str,
) -> ProviderError {
    let host = target.host();
    let has = |needle: &str| stderr.contains(needle);
    let (class, message) = if has("REMOTE HOST IDENTIFICATION HAS CHANGED")
        || has("Host key verification failed")
        || has("No ED25519 host key is known")
        || has("host key is known")
    {
        (
            FailureClass::Permanent,
            format!(
                "refusing {host}: its host key is not in {} or does not match it; check the key and add it there, then retry",
                known_hosts.display()
            ),
        )
    } else if has("Permission denied") {
        (
            FailureClass::Permanent,
            format!(
                "{host} refused berth's SSH key for user {}",
                target.user().unwrap_or("(the default user)")
            ),
        )
    } else if has("Could not resolve hostname") {
        (
            FailureClass::Permanent,
            format!("cannot resolve the host name {host}"),
        )
    } else if has("Connection refused") {
        (
            FailureClass::Permanent,
            format!(
                "{host} is unreachable: nothing accepts SSH connections on port {}",
                refused_port(stderr).unwrap_or(target.port().unwrap_or(22))
            ),
        )
    } else if has("timed out") || has("No route to host") || has("Network is unreachable") {
        (
            FailureClass::Permanent,
            format!("{host} is unreachable: {}", last_line(stderr)),
        )
    } else {
        (
            FailureClass::Transient,
            format!("SSH to {host} failed: {}", last_line(stderr)),
        )
    };
    ProviderError::new(class, message)
}

/// The last line of `text` that says something.
pub fn last_line(text: &str) -> &str {
    text.lines()
        .map(str::trim)
        .rfind(|line| !line.is_empty())
        .unwrap_or("(no message)")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(s: &str) -> SshTarget {
        s.parse().unwrap()
    }

    fn client() -> SshClient {
        SshClient {
            program: "ssh".into(),
            identity_file: Some("/keys/id_ed25519".into()),
            known_hosts: "/keys/known_hosts".into(),
            connect_timeout: Duration::from_secs(7),
            session_timeout: Duration::from_secs(60),
        }
    }

    #[test]
    fn sessions_are_batch_mode_with_strict_host_keys_and_the_given_key() {
        let args = client().args(&target("root@127.0.0.1:2222"), "true");
        let joined = args.join(" ");
        for expected in [
            "BatchMode=yes",
            "StrictHostKeyChecking=yes",
            "UserKnownHostsFile=/keys/known_hosts",
            "ConnectTimeout=7",
            "IdentitiesOnly=yes -i /keys/id_ed25519",
            "-p 2222",
            "-l root",
        ] {
            assert!(
                joined.contains(expected),
                "{expected} missing from {joined}"
            );
        }
        assert_eq!(&args[args.len() - 3..], ["127.0.0.1", "--", "true"]);
        let plain = client().args(&target("host.invalid"), "true").join(" ");
        assert!(!plain.contains("-p ") && !plain.contains("-l "), "{plain}");
    }

    #[test]
    fn shell_quoting_survives_single_quotes() {
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert_eq!(shell_quote(""), "''");
    }

    #[test]
    fn a_refused_connection_names_the_port_ssh_tried() {
        let kh = std::path::Path::new("/k/known_hosts");
        // No port in the target: the SSH configuration chose 2222.
        let error = connection_error(
            &target("root@host.invalid"),
            kh,
            "ssh: connect to host host.invalid port 2222: Connection refused",
        );
        assert_eq!(
            error.message,
            "host.invalid is unreachable: nothing accepts SSH connections on port 2222"
        );
        let error = connection_error(&target("root@host.invalid"), kh, "Connection refused");
        assert_eq!(
            error.message,
            "host.invalid is unreachable: nothing accepts SSH connections on port 22"
        );
    }

    #[test]
    fn each_connection_failure_is_named() {
        let kh = std::path::Path::new("/k/known_hosts");
        let t = target("root@host.invalid:2222");
        let cases = [
            ("No ED25519 host key is known for [127.0.0.1]:2222 and you have requested strict checking.\r\nHost key verification failed.", "its host key is not in /k/known_hosts", FailureClass::Permanent),
            ("@@@ WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED! @@@", "does not match", FailureClass::Permanent),
            ("root@127.0.0.1: Permission denied (publickey).", "refused berth's SSH key for user root", FailureClass::Permanent),
            ("ssh: Could not resolve hostname host.invalid: Name or service not known", "cannot resolve the host name host.invalid", FailureClass::Permanent),
            ("ssh: connect to host 127.0.0.1 port 2222: Connection refused", "nothing accepts SSH connections on port 2222", FailureClass::Permanent),
            ("ssh: connect to host 10.0.0.1 port 22: Connection timed out", "is unreachable", FailureClass::Permanent),
            ("kex_exchange_identification: read: Connection reset by peer", "SSH to host.invalid failed: kex_exchange_identification", FailureClass::Transient),
        ];
        for (stderr, expected, class) in cases {
            let error = connection_error(&t, kh, stderr);
            assert!(
                error.message.contains(expected),
                "{stderr}: {}",
                error.message
            );
            assert_eq!(error.class, class, "{stderr}");
        }
    }

    #[test]
    fn the_last_line_skips_blank_ones() {
        assert_eq!(last_line("a\nb\n\n  \n"), "b");
        assert_eq!(last_line(""), "(no message)");
    }
}
