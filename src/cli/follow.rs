//! Waiting for the model to change: the change log followed as
//! Server-Sent Events, with polling as the fallback when a stream cannot be
//! had; the backoff policy the command line retries with; and reads retried
//! through a controller's restart ([`retry_transient`]).

use std::time::{Duration, Instant};

use crate::api::observe::ChangeEvent;
use crate::cli::client::{Client, EventStream};
use crate::cli::error::CliError;

/// The first delay before trying again.
pub const BACKOFF_INITIAL: Duration = Duration::from_millis(800);

/// The longest delay before trying again.
pub const BACKOFF_MAX: Duration = Duration::from_secs(30);

/// The retry policy: 800 ms, doubling up to 30 s. With jitter, each delay
/// is shortened by up to a fifth at random, so that many agents cut off
/// together (a controller restart) do not all come back at the same
/// instant.
#[derive(Clone, Debug)]
pub struct Backoff {
    next: Duration,
    max: Duration,
    jitter: bool,
}

impl Backoff {
    /// The policy above, with jitter.
    pub fn new() -> Backoff {
        Backoff {
            next: BACKOFF_INITIAL,
            max: BACKOFF_MAX,
            jitter: true,
        }
    }

    /// The policy without jitter, so tests know every delay.
    pub fn exact() -> Backoff {
        Backoff {
            jitter: false,
            ..Backoff::new()
        }
    }

    /// Caps every delay at `max` (the agent never waits longer than its
    /// heartbeat interval).
    pub fn capped(mut self, max: Duration) -> Backoff {
        self.max = max.max(Duration::from_millis(1));
        self.next = self.next.min(self.max);
        self
    }

    /// The delay before the next try; each call doubles the one after.
    pub fn next_delay(&mut self) -> Duration {
        let delay = self.next;
        self.next = (self.next * 2).min(self.max);
        if self.jitter {
            let keep = 0.8 + 0.2 * rand::random::<f64>();
            delay.mul_f64(keep)
        } else {
            delay
        }
    }

    /// Back to the first delay, after a success.
    pub fn reset(&mut self) {
        self.next = BACKOFF_INITIAL.min(self.max);
    }
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff::new()
    }
}

/// Calls `read` until it answers, fails for good, or `deadline` passes,
/// waiting a delay of `backoff` after each transient failure (the
/// controller restarting, unreachable for a moment, or shedding load).
/// `read` is given the time left before the deadline, to bound its
/// request by.
///
/// # Guarantees
///
/// `read` is called at least once, even when the deadline has passed;
/// no wait goes past the deadline. An answer resets `backoff`.
///
/// # Errors
///
/// The first failure that is not transient (a wrong token, a bad
/// request), at once; the last transient one when the deadline passes
/// before an answer.
pub fn retry_transient<T>(
    backoff: &mut Backoff,
    deadline: Option<Instant>,
    read: impl FnMut(Option<Duration>) -> Result<T, CliError>,
) -> Result<T, CliError> {
    retry_with(backoff, deadline, Instant::now, std::thread::sleep, read)
}

/// [`retry_transient`] on the clock `now` and `sleep` tell.
fn retry_with<T>(
    backoff: &mut Backoff,
    deadline: Option<Instant>,
    now: impl Fn() -> Instant,
    mut sleep: impl FnMut(Duration),
    mut read: impl FnMut(Option<Duration>) -> Result<T, CliError>,
) -> Result<T, CliError> {
    let time_left = |now: Instant| deadline.map(|d| d.saturating_duration_since(now));
    loop {
        let error = match read(time_left(now())) {
            Ok(answer) => {
                backoff.reset();
                return Ok(answer);
            }
            Err(e) if e.is_transient() => e,
            Err(e) => return Err(e),
        };
        match time_left(now()) {
            Some(left) if left.is_zero() => return Err(error),
            left => {
                let delay = backoff.next_delay();
                sleep(left.map_or(delay, |left| delay.min(left)));
            }
        }
    }
}

/// Why [`Follower::next_change`] returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Woke {
    /// A change came, or the stream was lost and the state should be read
    /// again to be sure nothing was missed.
    Changed,
    /// The deadline passed first.
    Deadline,
}

/// Follows the change log across calls, keeping one event stream open.
pub struct Follower<'c> {
    client: &'c Client,
    /// The open stream, if any; reopened after the last revision seen when
    /// it breaks.
    stream: Option<EventStream>,
    backoff: Backoff,
}

impl<'c> Follower<'c> {
    pub fn new(client: &'c Client) -> Follower<'c> {
        Follower {
            client,
            stream: None,
            backoff: Backoff::new(),
        }
    }

    /// Blocks until a change after revision `after` that `relevant`
    /// accepts, or `deadline`.
    ///
    /// When no stream can be opened (the controller has too many, or is
    /// briefly unreachable) or an open one breaks, it waits a backoff
    /// delay and returns [`Woke::Changed`], so the caller reads the state
    /// again: polling, until a stream can be had.
    ///
    /// # Errors
    ///
    /// The controller's refusal of the stream for a reason other than
    /// overload (a wrong token).
    pub fn next_change(
        &mut self,
        after: i64,
        deadline: Option<Instant>,
        relevant: impl Fn(&ChangeEvent) -> bool,
    ) -> Result<Woke, CliError> {
        loop {
            let remaining = match deadline {
                Some(deadline) => match deadline.checked_duration_since(Instant::now()) {
                    Some(left) if !left.is_zero() => Some(left),
                    _ => return Ok(Woke::Deadline),
                },
                None => None,
            };
            if self.stream.is_none() {
                match self.client.events(after, remaining) {
                    Ok(stream) => self.stream = Some(stream),
                    Err(e) if e.is_transient() => return Ok(self.pause(remaining)),
                    Err(e) => return Err(e),
                }
            }
            let Some(stream) = self.stream.as_mut() else {
                continue;
            };
            match stream.next_event() {
                Ok(Some(event)) => {
                    self.backoff.reset();
                    if event.revision > after && relevant(&event) {
                        return Ok(Woke::Changed);
                    }
                }
                Ok(None) | Err(_) => {
                    self.stream = None;
                    if deadline.is_some_and(|d| Instant::now() >= d) {
                        return Ok(Woke::Deadline);
                    }
                    return Ok(self.pause(remaining));
                }
            }
        }
    }

    /// Sleeps a backoff delay (never past the deadline).
    fn pause(&mut self, remaining: Option<Duration>) -> Woke {
        let delay = self.backoff.next_delay();
        std::thread::sleep(remaining.map_or(delay, |left| delay.min(left)));
        Woke::Changed
    }
}

#[cfg(test)]
mod tests {
    use std::cell::{Cell, RefCell};

    use super::*;

    fn unavailable() -> CliError {
        CliError::Api {
            status: 503,
            message: "the controller is starting".into(),
        }
    }

    /// Runs [`retry_with`] on a clock that moves only when it sleeps,
    /// with `answers` given in turn; returns the outcome, the time each
    /// read was given and the sleeps.
    fn retried(
        deadline: Option<Duration>,
        answers: Vec<Result<u8, CliError>>,
    ) -> (Result<u8, CliError>, Vec<Option<Duration>>, Vec<Duration>) {
        let start = Instant::now();
        let clock = Cell::new(start);
        let sleeps = RefCell::new(Vec::new());
        let mut given = Vec::new();
        let mut answers = answers.into_iter();
        let outcome = retry_with(
            &mut Backoff::exact(),
            deadline.map(|d| start + d),
            || clock.get(),
            |d| {
                sleeps.borrow_mut().push(d);
                clock.set(clock.get() + d);
            },
            |left| {
                given.push(left);
                answers.next().expect("no more answers")
            },
        );
        (outcome, given, sleeps.into_inner())
    }

    #[test]
    fn a_transient_failure_is_read_again_after_a_backoff_delay() {
        let (outcome, given, sleeps) =
            retried(None, vec![Err(unavailable()), Err(unavailable()), Ok(7)]);
        assert_eq!(outcome.unwrap(), 7);
        assert_eq!(given, [None, None, None]);
        assert_eq!(
            sleeps,
            [Duration::from_millis(800), Duration::from_millis(1600)]
        );
    }

    #[test]
    fn a_failure_that_is_not_transient_ends_the_retries_at_once() {
        let refused = CliError::Api {
            status: 401,
            message: "invalid token".into(),
        };
        let (outcome, given, sleeps) = retried(None, vec![Err(unavailable()), Err(refused)]);
        assert!(
            matches!(outcome, Err(CliError::Api { status: 401, .. })),
            "{outcome:?}"
        );
        assert_eq!(given.len(), 2);
        assert_eq!(sleeps, [Duration::from_millis(800)]);
    }

    #[test]
    fn retries_stop_at_the_deadline_with_the_last_transient_failure() {
        let unreachable = || CliError::Unreachable { url: "u".into() };
        let (outcome, given, sleeps) = retried(
            Some(Duration::from_secs(2)),
            vec![Err(unavailable()), Err(unavailable()), Err(unreachable())],
        );
        assert!(
            matches!(outcome, Err(CliError::Unreachable { .. })),
            "{outcome:?}"
        );
        // Each read is given the time left; no sleep passes the deadline.
        let ms = Duration::from_millis;
        assert_eq!(given, [Some(ms(2000)), Some(ms(1200)), Some(ms(0))]);
        assert_eq!(sleeps, [ms(800), ms(1200)]);
    }

    #[test]
    fn backoff_doubles_from_800_ms_to_30_s_and_resets() {
        let mut backoff = Backoff::exact();
        let delays: Vec<u128> = (0..8).map(|_| backoff.next_delay().as_millis()).collect();
        assert_eq!(delays, [800, 1600, 3200, 6400, 12800, 25600, 30000, 30000]);
        backoff.reset();
        assert_eq!(backoff.next_delay(), Duration::from_millis(800));
    }

    #[test]
    fn a_capped_backoff_never_waits_longer_than_its_cap() {
        let mut backoff = Backoff::exact().capped(Duration::from_secs(2));
        let delays: Vec<u128> = (0..4).map(|_| backoff.next_delay().as_millis()).collect();
        assert_eq!(delays, [800, 1600, 2000, 2000]);
        let mut tiny = Backoff::exact().capped(Duration::from_millis(100));
        assert_eq!(tiny.next_delay(), Duration::from_millis(100));
    }

    #[test]
    fn jitter_only_ever_shortens_a_delay_by_up_to_a_fifth() {
        let mut backoff = Backoff::new();
        for expected in [800u64, 1600, 3200] {
            let delay = backoff.next_delay();
            assert!(delay <= Duration::from_millis(expected), "{delay:?}");
            assert!(
                delay >= Duration::from_millis(expected * 4 / 5),
                "{delay:?}"
            );
        }
    }
}
