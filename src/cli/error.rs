//! How a command fails, and the exit code each failure gives.
//!
//! Every failure is printed as one line, `ERROR <message>`, on standard
//! error. Input the command line could check itself (constraints,
//! placement, names) is refused before anything is sent, with the domain's
//! own message and exit code 2, as Juju refuses what its `Init` cannot
//! parse; everything else exits with 1.

use std::path::PathBuf;

/// The exit code of a command that worked.
pub const EXIT_OK: u8 = 0;

/// The exit code of a command that failed.
pub const EXIT_FAILED: u8 = 1;

/// The exit code of a command given arguments it cannot use (clap's own
/// usage errors exit with this too).
pub const EXIT_USAGE: u8 = 2;

/// Why a command failed.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// Bad input, refused before anything was sent.
    #[error("{0}")]
    Usage(String),
    /// The controller answered with an error: its message, as it is.
    #[error("{message}")]
    Api { status: u16, message: String },
    /// Nothing listens at the controller's address.
    #[error("cannot reach the berth controller at {url}: is 'berth serve' running?")]
    Unreachable { url: String },
    /// The controller's host name does not resolve: nothing was sent.
    #[error("cannot find the berth controller at {url}: {reason}")]
    Unresolved { url: String, reason: String },
    /// The connection failed in another way (reset, timeout).
    #[error("cannot talk to the berth controller at {url}: {reason}")]
    Transport { url: String, reason: String },
    /// The controller's certificate could not be verified with the CA the
    /// command line trusts.
    #[error(
        "cannot verify the berth controller at {url}: {reason}; give the controller's CA \
         certificate (its data directory's ca.crt) with --ca-cert or BERTH_CA_CERT, or save it \
         with `berth login URL --ca-cert FILE`"
    )]
    Untrusted { url: String, reason: String },
    /// The controller answered something that is not what the API says.
    #[error("unexpected answer from {url}: {reason}")]
    Protocol { url: String, reason: String },
    /// No admin token was given and none could be read from the data
    /// directory.
    #[error(
        "no admin token: none was given with --token or BERTH_TOKEN, and {} cannot be read ({reason}); \
         run this on the controller's machine, or pass --token",
        .path.display()
    )]
    NoToken { path: PathBuf, reason: String },
    /// A wait ran out of time.
    #[error("{0}")]
    Timeout(String),
    /// A local file (the agent's credential file) could not be used.
    #[error("{0}")]
    File(String),
    /// Standard output or error could not be written.
    #[error("cannot write output: {0}")]
    Output(#[from] std::io::Error),
}

impl CliError {
    /// The process exit code for this failure.
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::Usage(_) => EXIT_USAGE,
            _ => EXIT_FAILED,
        }
    }

    /// A usage error from any displayable parse error (the domain's).
    pub fn usage(error: impl std::fmt::Display) -> CliError {
        CliError::Usage(error.to_string())
    }

    /// Whether trying again later may work: the controller could not be
    /// reached, timed out, or said it is overloaded or broken (5xx).
    pub fn is_transient(&self) -> bool {
        match self {
            CliError::Unreachable { .. }
            | CliError::Unresolved { .. }
            | CliError::Transport { .. } => true,
            CliError::Api { status, .. } => *status >= 500,
            _ => false,
        }
    }

    /// Whether the controller answered 409: the request conflicts with the
    /// state as it is now (for an agent's check-in: its machine's launch is
    /// not recorded yet, so trying again shortly works).
    pub fn is_conflict(&self) -> bool {
        matches!(self, CliError::Api { status: 409, .. })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_input_exits_with_2_and_everything_else_with_1() {
        assert_eq!(CliError::Usage("x".into()).exit_code(), 2);
        assert_eq!(
            CliError::Api {
                status: 409,
                message: "x".into()
            }
            .exit_code(),
            1
        );
        assert_eq!(CliError::Unreachable { url: "u".into() }.exit_code(), 1);
        assert_eq!(CliError::Timeout("t".into()).exit_code(), 1);
    }

    #[test]
    fn an_api_error_is_the_servers_message_as_it_is() {
        let e = CliError::Api {
            status: 409,
            message: "machine 1 is not in provisioning error".into(),
        };
        assert_eq!(e.to_string(), "machine 1 is not in provisioning error");
    }

    #[test]
    fn an_unreachable_controller_asks_whether_serve_is_running() {
        let e = CliError::Unreachable {
            url: "http://127.0.0.1:17070".into(),
        };
        assert_eq!(
            e.to_string(),
            "cannot reach the berth controller at http://127.0.0.1:17070: is 'berth serve' running?"
        );
    }

    #[test]
    fn only_unreachable_controllers_and_server_faults_are_transient() {
        assert!(CliError::Unreachable { url: "u".into() }.is_transient());
        assert!(CliError::Transport {
            url: "u".into(),
            reason: "r".into()
        }
        .is_transient());
        for (status, transient) in [(503, true), (500, true), (401, false), (404, false)] {
            let e = CliError::Api {
                status,
                message: String::new(),
            };
            assert_eq!(e.is_transient(), transient, "{status}");
        }
        assert!(!CliError::Usage("x".into()).is_transient());
    }

    #[test]
    fn only_a_409_answer_is_a_conflict() {
        let api = |status| CliError::Api {
            status,
            message: String::new(),
        };
        assert!(api(409).is_conflict());
        assert!(!api(400).is_conflict() && !api(503).is_conflict());
        assert!(!CliError::Usage("x".into()).is_conflict());
    }
}
