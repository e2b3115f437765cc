//! `berth agent`: the machine agent.
//!
//! An instance is launched with its machine id, the controller's URL and a
//! one-time password. The agent exchanges the password for the machine's
//! credential (`POST /v1/agents/{machine}/connect`), which makes the
//! machine `started`, then proves it is alive with a heartbeat every
//! `--interval` seconds (`POST /v1/agents/{machine}/heartbeat`); when the
//! heartbeats stop, the controller shows the machine `down`.
//!
//! The credential is kept in memory and, with `--credential-file`, in a
//! file readable only by its owner, so that a restarted agent carries on
//! with it (the password works once). A controller that cannot be reached
//! or is overloaded is retried with backoff; a refused password or
//! credential (401) ends the agent with exit code 1.

use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Args;

use crate::api::agents::{ConnectRequest, ConnectResponse, HeartbeatResponse};
use crate::cli::client::{Auth, Client};
use crate::cli::error::CliError;
use crate::cli::follow::Backoff;
use crate::cli::{Io, Session};
use crate::contracts::secrets::new_secret;
use crate::domain::names::MachineId;

/// How often the agent sends a heartbeat unless told otherwise.
pub const DEFAULT_INTERVAL_SECS: u64 = 30;

/// `berth agent --url URL --machine ID --password OTP`.
#[derive(Clone, PartialEq, Eq, Args)]
pub struct AgentArgs {
    /// The machine this agent runs on: 3, 0/lxd/1.
    #[arg(long, value_name = "ID")]
    pub machine: String,
    /// The one-time password the instance was launched with.
    #[arg(
        long,
        env = "BERTH_AGENT_PASSWORD",
        hide_env_values = true,
        value_name = "OTP"
    )]
    pub password: Option<String>,
    /// Keep the credential in this file, and use the credential found
    /// there instead of the password when the agent starts again.
    #[arg(long, value_name = "FILE")]
    pub credential_file: Option<PathBuf>,
    /// Seconds between heartbeats.
    #[arg(
        long,
        value_name = "SECS",
        default_value_t = DEFAULT_INTERVAL_SECS,
        value_parser = clap::value_parser!(u64).range(1..)
    )]
    pub interval: u64,
}

impl std::fmt::Debug for AgentArgs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The password is a secret: never printed.
        f.debug_struct("AgentArgs")
            .field("machine", &self.machine)
            .field("password", &self.password.as_ref().map(|_| "<hidden>"))
            .field("credential_file", &self.credential_file)
            .field("interval", &self.interval)
            .finish()
    }
}

/// How the agent waits. Tests give a clock that records the waits and
/// stops the agent; [`RealClock`] sleeps.
pub trait Clock {
    /// Waits `duration`; [`ControlFlow::Break`] stops the agent.
    fn sleep(&mut self, duration: Duration) -> ControlFlow<()>;
}

/// The clock of a running agent: sleeps, and never stops it.
pub struct RealClock;

impl Clock for RealClock {
    fn sleep(&mut self, duration: Duration) -> ControlFlow<()> {
        std::thread::sleep(duration);
        ControlFlow::Continue(())
    }
}

/// The credential in `file`, if the file exists and is not empty.
///
/// # Errors
///
/// [`CliError::File`] when the file exists but cannot be read.
pub fn stored_credential(file: &Path) -> Result<Option<String>, CliError> {
    match std::fs::read_to_string(file) {
        Ok(text) => Ok(Some(text.trim().to_string()).filter(|c| !c.is_empty())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(CliError::File(format!(
            "cannot read the credential file {}: {e}",
            file.display()
        ))),
    }
}

/// Writes the credential to `file`, readable by its owner only.
///
/// # Errors
///
/// [`CliError::File`] when the file cannot be written.
pub fn store_credential(file: &Path, credential: &str) -> Result<(), CliError> {
    use std::io::Write as _;
    let fail = |e: std::io::Error| {
        CliError::File(format!(
            "cannot write the credential file {}: {e}",
            file.display()
        ))
    };
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        options.mode(0o600);
    }
    // Written beside it and renamed over it, so that a crash leaves the
    // old credential or the new, never part of one.
    let mut partial = file.as_os_str().to_owned();
    partial.push(".partial");
    let partial = std::path::PathBuf::from(partial);
    let mut handle = options.open(&partial).map_err(fail)?;
    writeln!(handle, "{credential}")
        .and_then(|()| handle.sync_all())
        .and_then(|()| std::fs::rename(&partial, file))
        .map_err(|e| {
            let _ = std::fs::remove_file(&partial);
            fail(e)
        })
}

/// Syncs the directory of `file`, where its rename is recorded, so that a
/// power cut after the check-in does not bring back a directory without
/// the credential while the controller has spent the password.
///
/// # Errors
///
/// The file system's, naming the directory: some cannot sync one, and the
/// file is written all the same.
pub fn sync_directory_of(file: &Path) -> Result<(), String> {
    let directory = match file.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    std::fs::File::open(directory)
        .and_then(|directory| directory.sync_all())
        .map_err(|e| format!("cannot sync {}: {e}", directory.display()))
}

/// Where the agent's credential came from, for messages.
enum Source<'a> {
    Password,
    File(&'a Path),
}

/// `berth agent`: runs until the clock stops it or the controller refuses
/// it.
///
/// # Errors
///
/// [`CliError::Usage`] for a bad machine id or no password (and no stored
/// credential); [`CliError::Api`] with status 401 when the password or the
/// credential is refused, 404 when the machine is unknown;
/// [`CliError::File`] when the credential file cannot be used.
pub fn run(
    args: &AgentArgs,
    session: &mut Session,
    io: &mut Io<'_>,
    clock: &mut dyn Clock,
) -> Result<(), CliError> {
    run_with(args, session, io, clock, Backoff::new())
}

/// [`run`], retrying with `backoff` (capped at the heartbeat interval).
///
/// # Errors
///
/// As [`run`].
pub fn run_with(
    args: &AgentArgs,
    session: &mut Session,
    io: &mut Io<'_>,
    clock: &mut dyn Clock,
    backoff: Backoff,
) -> Result<(), CliError> {
    let machine: MachineId = args.machine.parse().map_err(CliError::usage)?;
    let interval = Duration::from_secs(args.interval);
    let client = session.anonymous()?;
    let backoff = backoff.capped(interval);
    let stored = match &args.credential_file {
        Some(file) => stored_credential(file)?.map(|c| (c, file.as_path())),
        None => None,
    };
    let password = args.password.as_deref().filter(|p| !p.trim().is_empty());
    if let Some((credential, file)) = stored {
        writeln!(
            io.out,
            "machine {machine}: using the credential in {}",
            file.display()
        )?;
        let beats = Beats {
            client: &client,
            machine,
            interval,
            backoff: backoff.clone(),
        };
        return match (
            beats.run(&credential, &Source::File(file), io, clock),
            password,
        ) {
            // The credential was written down before its check-in, which
            // may never have reached the controller: make it now.
            (Err(CliError::Api { status: 401, .. }), Some(password)) => {
                writeln!(
                    io.err,
                    "WARNING machine {machine}: the controller does not know the credential in {}; \
                     checking in with the one-time password",
                    file.display()
                )?;
                let Some(credential) =
                    check_in(&client, machine, password, &credential, io, clock, backoff)?
                else {
                    return Ok(());
                };
                beats.run(&credential, &Source::Password, io, clock)
            }
            (beaten, _) => beaten,
        };
    }
    let password = password.ok_or_else(|| {
        CliError::Usage("no one-time password: give --password or set BERTH_AGENT_PASSWORD".into())
    })?;
    // Chosen here and written down before the password is spent, so that
    // neither a lost answer nor a restart loses it.
    let chosen = new_secret();
    if let Some(file) = &args.credential_file {
        store_credential(file, chosen.expose())?;
        if let Err(e) = sync_directory_of(file) {
            writeln!(
                io.err,
                "WARNING machine {machine}: {e}; a power cut now could lose the credential"
            )?;
        }
    }
    let checked_in = check_in(
        &client,
        machine,
        password,
        chosen.expose(),
        io,
        clock,
        backoff.clone(),
    );
    let credential = match checked_in {
        Ok(Some(credential)) => credential,
        Ok(None) => return Ok(()),
        Err(e) => {
            // Refused: the credential written down is no one's.
            if let Some(file) = &args.credential_file {
                let _ = std::fs::remove_file(file);
            }
            return Err(e);
        }
    };
    Beats {
        client: &client,
        machine,
        interval,
        backoff,
    }
    .run(&credential, &Source::Password, io, clock)
}

/// Exchanges the one-time password for the credential, retrying while the
/// controller cannot be reached. `None`: the clock stopped the agent.
/// `chosen` is the credential the agent asks the controller to keep: a
/// retry after an answer that was lost is answered the same.
fn check_in(
    client: &Client,
    machine: MachineId,
    password: &str,
    chosen: &str,
    io: &mut Io<'_>,
    clock: &mut dyn Clock,
    mut backoff: Backoff,
) -> Result<Option<String>, CliError> {
    let path = format!("/v1/agents/{machine}/connect");
    let request = ConnectRequest {
        password: password.to_string(),
        credential: Some(chosen.to_string()),
    };
    loop {
        match client.post_as::<_, ConnectResponse>(&path, &request, Auth::None) {
            Ok(connected) => {
                writeln!(io.out, "machine {machine}: checked in")?;
                return Ok(Some(connected.credential));
            }
            // A conflict: the controller has not recorded this machine's
            // instance yet (the agent came up first). It will shortly.
            Err(e) if e.is_transient() || e.is_conflict() => {
                let delay = backoff.next_delay();
                writeln!(
                    io.err,
                    "WARNING machine {machine}: cannot check in yet: {e}; retrying in {:.1}s",
                    delay.as_secs_f64()
                )?;
                if clock.sleep(delay).is_break() {
                    return Ok(None);
                }
            }
            Err(CliError::Api {
                status: 401,
                message,
            }) => {
                return Err(CliError::Api {
                    status: 401,
                    message: format!(
                        "the controller refused machine {machine}'s one-time password: {message}"
                    ),
                })
            }
            Err(e) => return Err(e),
        }
    }
}

/// What sending heartbeats needs.
struct Beats<'a> {
    client: &'a Client,
    machine: MachineId,
    interval: Duration,
    backoff: Backoff,
}

impl Beats<'_> {
    /// Sends heartbeats with `credential` until the clock stops the agent.
    fn run(
        &self,
        credential: &str,
        source: &Source<'_>,
        io: &mut Io<'_>,
        clock: &mut dyn Clock,
    ) -> Result<(), CliError> {
        let Beats {
            client,
            machine,
            interval,
            ..
        } = *self;
        let mut backoff = self.backoff.clone();
        let path = format!("/v1/agents/{machine}/heartbeat");
        let mut last_status: Option<String> = None;
        loop {
            let delay =
                match client.post_bare_as::<HeartbeatResponse>(&path, Auth::Bearer(credential)) {
                    Ok(beat) => {
                        if last_status.as_deref() != Some(beat.status.as_str()) {
                            writeln!(
                                io.out,
                                "machine {machine}: heartbeat accepted, {}",
                                beat.status
                            )?;
                            last_status = Some(beat.status);
                        }
                        backoff.reset();
                        interval
                    }
                    Err(e) if e.is_transient() => {
                        let delay = backoff.next_delay();
                        writeln!(
                            io.err,
                            "WARNING machine {machine}: heartbeat failed: {e}; retrying in {:.1}s",
                            delay.as_secs_f64()
                        )?;
                        last_status = None;
                        delay
                    }
                    Err(CliError::Api {
                        status: 401,
                        message,
                    }) => {
                        let hint = match source {
                            Source::Password => String::new(),
                            Source::File(file) => format!(
                        " (the credential came from {}; delete it to check in again with a new \
                         one-time password)",
                        file.display()
                    ),
                        };
                        return Err(CliError::Api {
                            status: 401,
                            message: format!(
                        "the controller refused machine {machine}'s credential: {message}{hint}"
                    ),
                        });
                    }
                    Err(e) => return Err(e),
                };
            io.out.flush()?;
            if clock.sleep(delay).is_break() {
                return Ok(());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::tests::{command, parse};
    use crate::cli::Command;

    fn agent_args(args: &[&str]) -> AgentArgs {
        let mut full = vec!["agent"];
        full.extend_from_slice(args);
        match command(&full) {
            Command::Agent(args) => args,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_agent_takes_machine_password_credential_file_and_interval() {
        let args = agent_args(&[
            "--url",
            "http://controller.invalid:17070",
            "--machine",
            "0/lxd/1",
            "--password",
            "otp",
            "--credential-file",
            "/var/lib/berth-agent/credential",
            "--interval",
            "5",
        ]);
        assert_eq!(args.machine, "0/lxd/1");
        assert_eq!(args.password.as_deref(), Some("otp"));
        assert_eq!(
            args.credential_file,
            Some(PathBuf::from("/var/lib/berth-agent/credential"))
        );
        assert_eq!(args.interval, 5);
        let cli = parse(&[
            "agent",
            "--url",
            "http://controller.invalid:17070",
            "--machine",
            "3",
        ])
        .unwrap();
        assert_eq!(cli.url.as_deref(), Some("http://controller.invalid:17070"));
    }

    #[test]
    fn the_interval_defaults_to_30_seconds_and_must_be_positive() {
        assert_eq!(agent_args(&["--machine", "3"]).interval, 30);
        assert_eq!(
            parse(&["agent", "--machine", "3", "--interval", "0"])
                .unwrap_err()
                .exit_code(),
            2
        );
        assert_eq!(parse(&["agent"]).unwrap_err().exit_code(), 2);
    }

    #[test]
    fn the_password_is_not_printed_in_debug_output() {
        let args = agent_args(&["--machine", "3", "--password", "s3cret"]);
        assert!(!format!("{args:?}").contains("s3cret"));
    }

    struct StopAtOnce;

    impl Clock for StopAtOnce {
        fn sleep(&mut self, _: Duration) -> ControlFlow<()> {
            ControlFlow::Break(())
        }
    }

    fn run_offline(args: &[&str]) -> (Result<(), CliError>, String) {
        let args = agent_args(args);
        let mut session = Session::new("http://127.0.0.1:9", None, PathBuf::from("/nonexistent"));
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let result = run_with(
            &args,
            &mut session,
            &mut Io {
                out: &mut out,
                err: &mut err,
                tty: false,
            },
            &mut StopAtOnce,
            Backoff::exact(),
        );
        (result, String::from_utf8(err).unwrap())
    }

    #[test]
    fn a_bad_machine_id_or_a_missing_password_is_a_usage_error() {
        let (result, _) = run_offline(&["--machine", "0/kvm/1", "--password", "p"]);
        let e = result.unwrap_err();
        assert_eq!(e.exit_code(), 2);
        assert!(e.to_string().contains("is not a valid machine id"), "{e}");
        let (result, _) = run_offline(&["--machine", "3", "--password", " "]);
        assert_eq!(
            result.unwrap_err().to_string(),
            "no one-time password: give --password or set BERTH_AGENT_PASSWORD"
        );
    }

    #[test]
    fn an_unreachable_controller_is_retried_with_a_warning() {
        let (result, err) = run_offline(&["--machine", "3", "--password", "p"]);
        assert!(result.is_ok());
        assert_eq!(
            err,
            "WARNING machine 3: cannot check in yet: cannot reach the berth controller at \
             http://127.0.0.1:9: is 'berth serve' running?; retrying in 0.8s\n"
        );
    }

    #[test]
    fn a_credential_file_is_written_for_the_owner_only_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("credential");
        assert_eq!(stored_credential(&file).unwrap(), None);
        store_credential(&file, "c0ffee").unwrap();
        assert_eq!(stored_credential(&file).unwrap().as_deref(), Some("c0ffee"));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = std::fs::metadata(&file).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        std::fs::write(&file, "\n").unwrap();
        assert_eq!(stored_credential(&file).unwrap(), None);
    }

    #[test]
    fn the_credential_files_directory_is_synced_or_the_reason_given() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(sync_directory_of(&dir.path().join("credential")), Ok(()));
        let e = sync_directory_of(Path::new("/nonexistent/dir/credential")).unwrap_err();
        assert!(e.starts_with("cannot sync /nonexistent/dir: "), "{e}");
    }

    #[test]
    fn an_unwritable_credential_file_is_a_clear_error() {
        let e = store_credential(Path::new("/nonexistent/dir/credential"), "c").unwrap_err();
        assert!(
            e.to_string()
                .starts_with("cannot write the credential file /nonexistent/dir/credential:"),
            "{e}"
        );
    }
}
