//! `berth wait`: blocks until every machine is started or in error, or
//! the timeout passes (then exits 1).
//!
//! It reads the status, then follows the change log from the status's
//! revision and reads the status again after each machine change, so it
//! wakes as soon as anything happens and misses nothing; when no event
//! stream can be had it polls with backoff. During a burst of changes a
//! read starts no sooner than twice the last read's time after that one
//! started, so that with a large model (where a read takes most of a
//! second) it does not spend its time, and the controller's, reading the
//! whole status. On a terminal it draws a progress bar; elsewhere it
//! prints a plain line each time the counts change. Machines being
//! removed are not waited for. Machines in error end the wait too (exit
//! 0), each with a `WARNING` line saying why it failed. A controller that
//! restarts, cannot be reached for a while or sheds load is read again
//! with backoff until the timeout.

use std::time::{Duration, Instant};

use clap::Args;

use crate::cli::error::CliError;
use crate::cli::follow::{retry_transient, Backoff, Follower, Woke};
use crate::cli::status::PATH;
use crate::cli::{Io, Session};
use crate::domain::names::MachineId;
use crate::status::view::{MachineView, Status};

/// How long `wait` waits by default, as `juju wait-for` does.
pub const DEFAULT_TIMEOUT_SECS: u64 = 600;

/// The longest `--timeout`: a year (a deadline further off than the
/// clock can count to would end the command with a panic).
pub const MAX_TIMEOUT_SECS: u64 = 365 * 24 * 60 * 60;

/// The width of the progress bar, in characters.
const BAR_WIDTH: usize = 30;

/// The least time a status read is given, even at the deadline, so that
/// `--timeout 0` still reads the status once.
const LEAST_READ_TIME: Duration = Duration::from_secs(5);

/// `berth wait`.
#[derive(Clone, Debug, PartialEq, Eq, Args)]
pub struct WaitArgs {
    /// Give up (exit 1) after this many seconds, at most 31536000 (a year).
    #[arg(
        long,
        value_name = "SECS",
        default_value_t = DEFAULT_TIMEOUT_SECS,
        value_parser = clap::value_parser!(u64).range(..=MAX_TIMEOUT_SECS)
    )]
    pub timeout: u64,
}

/// Where the machines are.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    pub started: Vec<MachineId>,
    /// Machines in error, with the provider's message.
    pub failed: Vec<(MachineId, String)>,
    /// The others, with their instance status (`pending`, `allocating`,
    /// `running`), or `down` and why when the machine is down (its agent
    /// lost, or its instance stopped) whatever its instance status says.
    pub waiting: Vec<(MachineId, String)>,
}

impl Tally {
    /// Counts every machine and container that is not being removed.
    pub fn of(status: &Status) -> Tally {
        fn visit(tally: &mut Tally, id: &MachineId, machine: &MachineView) {
            if machine.life.is_none() {
                match machine.juju_status.current.as_str() {
                    "started" => tally.started.push(*id),
                    "error" => tally.failed.push((
                        *id,
                        machine
                            .machine_status
                            .message
                            .clone()
                            .or_else(|| machine.juju_status.message.clone())
                            .unwrap_or_else(|| machine.machine_status.current.clone()),
                    )),
                    "down" => {
                        let why = machine
                            .machine_status
                            .message
                            .as_deref()
                            .or(machine.juju_status.message.as_deref());
                        let state = match why {
                            Some(why) => format!("down: {why}"),
                            None => "down".to_string(),
                        };
                        tally.waiting.push((*id, state));
                    }
                    _ => tally
                        .waiting
                        .push((*id, machine.machine_status.current.clone())),
                }
            }
            for (child, container) in &machine.containers {
                visit(tally, child, container);
            }
        }
        let mut tally = Tally::default();
        for (id, machine) in &status.machines {
            visit(&mut tally, id, machine);
        }
        tally
    }

    pub fn total(&self) -> usize {
        self.started.len() + self.failed.len() + self.waiting.len()
    }

    /// Whether there is nothing left to wait for.
    pub fn done(&self) -> bool {
        self.waiting.is_empty()
    }

    /// `3/5 machines started, 1 in error, 1 waiting`.
    pub fn summary(&self) -> String {
        let mut text = format!(
            "{}/{} machine{} started",
            self.started.len(),
            self.total(),
            if self.total() == 1 { "" } else { "s" }
        );
        if !self.failed.is_empty() {
            text.push_str(&format!(", {} in error", self.failed.len()));
        }
        if !self.waiting.is_empty() {
            text.push_str(&format!(", {} waiting", self.waiting.len()));
        }
        text
    }

    /// The progress bar: `[#########.....] 3/5 machines started, ...`,
    /// a `#` for each machine started or in error.
    pub fn bar(&self) -> String {
        let total = self.total().max(1);
        let settled = self.started.len() + self.failed.len();
        let filled = settled * BAR_WIDTH / total;
        format!(
            "[{}{}] {}",
            "#".repeat(filled),
            ".".repeat(BAR_WIDTH - filled),
            self.summary()
        )
    }

    /// What the timeout error says: the machines still waited for.
    pub fn timeout_message(&self, timeout: Duration) -> String {
        let waiting: Vec<String> = self
            .waiting
            .iter()
            .map(|(id, state)| format!("{id} ({state})"))
            .collect();
        format!(
            "timed out after {}s waiting for machines to start: {} not started yet: {}",
            timeout.as_secs(),
            self.waiting.len(),
            waiting.join(", ")
        )
    }
}

/// What the timeout error says when the status could not be read at the
/// end (`error`, the last read's failure): the machines still waited for
/// at the last read that worked (`last`), if one did.
fn unread_timeout_message(last: Option<&Tally>, timeout: Duration, error: &CliError) -> String {
    match last {
        Some(tally) => format!(
            "{}; the status could not be read since: {error}",
            tally.timeout_message(timeout)
        ),
        None => format!(
            "timed out after {}s waiting for machines to start: the status could not be read: {error}",
            timeout.as_secs()
        ),
    }
}

/// Draws progress: a bar redrawn in place on a terminal, a line per change
/// elsewhere.
struct Progress {
    last: Option<String>,
}

impl Progress {
    fn show(&mut self, tally: &Tally, io: &mut Io<'_>) -> Result<(), CliError> {
        let line = if io.tty { tally.bar() } else { tally.summary() };
        if self.last.as_deref() == Some(line.as_str()) {
            return Ok(());
        }
        if io.tty {
            write!(io.out, "\r\x1b[K{line}")?;
        } else {
            writeln!(io.out, "{line}")?;
        }
        io.out.flush()?;
        self.last = Some(line);
        Ok(())
    }

    fn finish(&mut self, io: &mut Io<'_>) -> Result<(), CliError> {
        if io.tty && self.last.is_some() {
            writeln!(io.out)?;
        }
        Ok(())
    }
}

/// `berth wait`.
///
/// # Errors
///
/// [`CliError::Timeout`] naming the machines not started when time runs
/// out, and the last failure when the controller could not be read at
/// the end; the controller's refusal (an error that is not transient).
pub fn run(args: &WaitArgs, session: &mut Session, io: &mut Io<'_>) -> Result<(), CliError> {
    let timeout = Duration::from_secs(args.timeout);
    let deadline = Instant::now() + timeout;
    let client = session.client()?.clone();
    let mut follower = Follower::new(&client);
    let mut retry = Backoff::new();
    let mut progress = Progress { last: None };
    // The machines at the last read that worked, for the timeout's
    // message when the controller cannot be read at the end.
    let mut last: Option<Tally> = None;
    loop {
        // When the read that worked started (after any retries).
        let mut reading = Instant::now();
        let read = retry_transient(&mut retry, Some(deadline), |left| {
            reading = Instant::now();
            client.get_within::<Status>(PATH, left.map(|left| left.max(LEAST_READ_TIME)))
        });
        let status = match read {
            Ok(status) => status,
            Err(e) if e.is_transient() => {
                progress.finish(io)?;
                return Err(CliError::Timeout(unread_timeout_message(
                    last.as_ref(),
                    timeout,
                    &e,
                )));
            }
            Err(e) => return Err(e),
        };
        let tally = Tally::of(&status);
        let read_took = reading.elapsed();
        progress.show(&tally, io)?;
        if tally.done() {
            progress.finish(io)?;
            for (id, message) in &tally.failed {
                writeln!(
                    io.err,
                    "WARNING machine {id} failed to provision: {message}"
                )?;
            }
            return Ok(());
        }
        let woke = follower.next_change(status.model.revision, Some(deadline), |event| {
            event.entity == "machine"
        })?;
        if woke == Woke::Deadline {
            progress.finish(io)?;
            return Err(CliError::Timeout(tally.timeout_message(timeout)));
        }
        last = Some(tally);
        // Changes come in bursts; a read of the whole model costs this
        // process its parsing and the controller a rendering, so the next
        // read waits until twice the last one's time has passed.
        let pause = pause_before_reading(reading.elapsed(), read_took);
        let left = deadline.saturating_duration_since(Instant::now());
        std::thread::sleep(pause.min(left));
    }
}

/// How long to wait, `since_read` after the start of a status read that
/// took `read_took`, before reading the status again: so that at most
/// about half of the time goes to reading it, however large the model.
/// A small model's read takes milliseconds, and so does the pause.
fn pause_before_reading(since_read: Duration, read_took: Duration) -> Duration {
    (read_took * 2).saturating_sub(since_read)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::cli::tests::{command, parse};
    use crate::cli::Command;
    use crate::status::view::{BaseView, ModelView, StatusInfo};

    fn machine(agent: &str, instance: &str, message: Option<&str>) -> MachineView {
        MachineView {
            hourly_price: None,
            juju_status: StatusInfo {
                current: agent.into(),
                message: None,
                since: None,
            },
            machine_status: StatusInfo {
                current: instance.into(),
                message: message.map(str::to_string),
                since: None,
            },
            dns_name: None,
            ip_addresses: Vec::new(),
            instance_id: "pending".into(),
            instance_type: None,
            base: BaseView {
                name: "ubuntu".into(),
                channel: "22.04".into(),
            },
            constraints: String::new(),
            hardware: None,
            life: None,
            containers: BTreeMap::new(),
        }
    }

    fn status(machines: Vec<(&str, MachineView)>) -> Status {
        Status {
            model: ModelView {
                hourly_cost: Default::default(),
                name: "default".into(),
                uuid: "u".into(),
                model_type: "iaas".into(),
                controller: "c".into(),
                cloud: "sim".into(),
                constraints: String::new(),
                revision: 1,
            },
            machines: machines
                .into_iter()
                .map(|(id, m)| (id.parse().unwrap(), m))
                .collect(),
            applications: BTreeMap::new(),
        }
    }

    fn id(s: &str) -> MachineId {
        s.parse().unwrap()
    }

    #[test]
    fn status_reads_are_paced_to_take_at_most_half_the_time() {
        let ms = Duration::from_millis;
        // A large model's read took 800 ms and a change came at once:
        // the next read starts 1.6 s after the last one started.
        assert_eq!(pause_before_reading(ms(800), ms(800)), ms(800));
        assert_eq!(pause_before_reading(ms(1_000), ms(800)), ms(600));
        // The change came later than that: no pause.
        assert_eq!(pause_before_reading(ms(2_000), ms(800)), Duration::ZERO);
        // A small model's read: a pause of as little.
        assert_eq!(pause_before_reading(ms(3), ms(2)), ms(1));
    }

    #[test]
    fn machines_are_started_failed_or_waited_for_and_containers_count() {
        let mut host = machine("started", "running", None);
        host.containers
            .insert(id("0/lxd/0"), machine("pending", "allocating", None));
        let mut dying = machine("stopped", "stopping", None);
        dying.life = Some("dying".into());
        let tally = Tally::of(&status(vec![
            ("0", host),
            (
                "1",
                machine("error", "provisioning error", Some("no capacity")),
            ),
            ("2", dying),
            ("3", machine("down", "running", None)),
            (
                "4",
                machine("down", "running", Some("was stopped by the provider")),
            ),
        ]));
        assert_eq!(
            tally,
            Tally {
                started: vec![id("0")],
                failed: vec![(id("1"), "no capacity".into())],
                waiting: vec![
                    (id("0/lxd/0"), "allocating".into()),
                    (id("3"), "down".into()),
                    (id("4"), "down: was stopped by the provider".into()),
                ],
            }
        );
        assert!(!tally.done());
        assert_eq!(
            tally.summary(),
            "1/5 machines started, 1 in error, 3 waiting"
        );
    }

    #[test]
    fn no_machines_is_nothing_to_wait_for() {
        let tally = Tally::of(&status(vec![]));
        assert!(tally.done());
        assert_eq!(tally.summary(), "0/0 machines started");
    }

    #[test]
    fn the_bar_fills_with_settled_machines() {
        let tally = Tally::of(&status(vec![
            ("0", machine("started", "running", None)),
            ("1", machine("error", "provisioning error", Some("x"))),
            ("2", machine("pending", "pending", None)),
        ]));
        assert_eq!(
            tally.bar(),
            format!(
                "[{}{}] 1/3 machines started, 1 in error, 1 waiting",
                "#".repeat(20),
                ".".repeat(10)
            )
        );
    }

    #[test]
    fn the_timeout_names_the_machines_not_started() {
        let tally = Tally::of(&status(vec![
            ("0", machine("pending", "pending", None)),
            ("1", machine("pending", "allocating", None)),
        ]));
        assert_eq!(
            tally.timeout_message(Duration::from_secs(1)),
            "timed out after 1s waiting for machines to start: 2 not started yet: 0 (pending), 1 (allocating)"
        );
    }

    #[test]
    fn a_timeout_while_the_controller_cannot_be_read_names_the_last_failure() {
        let error = CliError::Unreachable {
            url: "http://127.0.0.1:9".into(),
        };
        let unreachable =
            "cannot reach the berth controller at http://127.0.0.1:9: is 'berth serve' running?";
        let tally = Tally::of(&status(vec![("0", machine("pending", "pending", None))]));
        assert_eq!(
            unread_timeout_message(Some(&tally), Duration::from_secs(5), &error),
            format!(
                "timed out after 5s waiting for machines to start: 1 not started yet: 0 (pending); \
                 the status could not be read since: {unreachable}"
            )
        );
        assert_eq!(
            unread_timeout_message(None, Duration::from_secs(5), &error),
            format!(
                "timed out after 5s waiting for machines to start: the status could not be read: \
                 {unreachable}"
            )
        );
    }

    #[test]
    fn progress_lines_are_printed_only_when_the_counts_change() {
        let tally = Tally::of(&status(vec![("0", machine("pending", "pending", None))]));
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let mut io = Io {
            out: &mut out,
            err: &mut err,
            tty: false,
        };
        let mut progress = Progress { last: None };
        progress.show(&tally, &mut io).unwrap();
        progress.show(&tally, &mut io).unwrap();
        progress.finish(&mut io).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "0/1 machine started, 1 waiting\n"
        );
    }

    #[test]
    fn on_a_terminal_the_bar_is_redrawn_in_place() {
        let tally = Tally::of(&status(vec![("0", machine("started", "running", None))]));
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let mut io = Io {
            out: &mut out,
            err: &mut err,
            tty: true,
        };
        let mut progress = Progress { last: None };
        progress.show(&tally, &mut io).unwrap();
        progress.finish(&mut io).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            format!("\r\x1b[K[{}] 1/1 machine started\n", "#".repeat(30))
        );
    }

    #[test]
    fn wait_takes_a_timeout_in_seconds() {
        let Command::Wait(args) = command(&["wait"]) else {
            panic!()
        };
        assert_eq!(args.timeout, 600);
        let Command::Wait(args) = command(&["wait", "--timeout", "5"]) else {
            panic!()
        };
        assert_eq!(args.timeout, 5);
        assert_eq!(
            parse(&["wait", "--timeout", "soon"])
                .unwrap_err()
                .exit_code(),
            2
        );
    }

    #[test]
    fn a_timeout_beyond_a_year_is_refused_before_anything_is_read() {
        let Command::Wait(args) = command(&["wait", "--timeout", "31536000"]) else {
            panic!()
        };
        assert_eq!(args.timeout, MAX_TIMEOUT_SECS);
        for beyond in ["31536001", "18446744073709551615"] {
            let refused = parse(&["wait", "--timeout", beyond]).unwrap_err();
            assert_eq!(refused.exit_code(), 2, "{beyond}");
            assert!(
                refused.to_string().contains("is not in 0..=31536000"),
                "{refused}"
            );
        }
    }
}
