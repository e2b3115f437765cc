//! The `berth` command line: an HTTP client of berth's JSON API with
//! Juju's command names and output (`deploy`, `add-unit`, `status`, ...),
//! plus `berth agent`, the machine agent, and the arguments of
//! `berth serve` (which the application start-up code runs, not this
//! module).
//!
//! Every command first parses what it can locally (constraints, placement,
//! bases, names) and refuses bad input with the domain's message and exit
//! code 2 before anything is sent; then it calls the controller at `--url`
//! (`BERTH_URL`), else the current controller saved by `berth login`, else
//! `http://127.0.0.1:17070`, with the admin token from `--token`
//! (`BERTH_TOKEN`), else the saved controller's, else
//! `<data-dir>/admin.token` (see [`controllers`] and [`token`]). Failures are one line on
//! standard error, `ERROR <message>`, where the message is the
//! controller's own when it answered with an error. Commands that talk to
//! no controller (`serve`, `controllers`, `switch`, `completion`, `man`)
//! look for none, and refuse `--url`, `--token` and `--ca-cert` given on
//! the command line, as `login` refuses `--url` (see [`parse_from`]).
//!
//! One file per command group:
//!
//! - [`applications`]: deploy, add-unit, remove-unit, remove-application,
//!   set-constraints, constraints.
//! - [`model`]: set-model-constraints, model-constraints.
//! - [`machines`]: add-machine, remove-machine, retry-provisioning.
//! - [`plans`]: `--dry-run`, `--if-revision` and `--format` of the
//!   commands that start or remove machines; explain, set-budget, budgets.
//! - [`relations`]: integrate, remove-relation.
//! - [`zones`]: zones, enable-zone, disable-zone.
//! - [`sim`]: sim-faults, the simulated cloud's faults.
//! - [`status`]: status (tabular, JSON, YAML; `--watch`).
//! - [`wait`]: wait until every machine is started or in error.
//! - [`agent`]: the machine agent's check-in and heartbeats.
//! - [`controllers`]: login, controllers, switch: the saved controllers.
//! - [`client`], [`token`], [`error`], [`follow`]: what they share.

pub mod agent;
pub mod applications;
pub mod client;
pub mod controllers;
pub mod docs;
pub mod error;
pub mod follow;
pub mod machines;
pub mod model;
pub mod plans;
pub mod relations;
pub mod sim;
pub mod status;
pub mod token;
pub mod wait;
pub mod zones;

use std::ffi::OsString;
use std::io::{IsTerminal, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::parser::ValueSource;
use clap::{ArgMatches, Args, CommandFactory, FromArgMatches, Parser, Subcommand};

use crate::api::MAX_COUNT_PER_REQUEST;
use crate::cli::client::{Client, TrustedCa};
use crate::cli::error::{CliError, EXIT_OK};

pub use crate::cli::error::{EXIT_FAILED, EXIT_USAGE};
pub use crate::cli::token::ADMIN_TOKEN_FILE;

/// Where the command line looks for the controller unless told otherwise:
/// `berth serve`'s default listen address.
pub const DEFAULT_URL: &str = "http://127.0.0.1:17070";

/// `berth`: the controller (`berth serve`), its command line, and the
/// machine agent.
#[derive(Debug, Parser)]
#[command(
    name = "berth",
    version,
    about = "A provisioning engine in the model of Juju's provisioner",
    long_about = "A provisioning engine in the model of Juju's provisioner.\n\n\
                  `berth serve` runs the controller; the other commands talk to it over HTTP \
                  at --url (BERTH_URL), else the controller saved by `berth login`, else \
                  http://127.0.0.1:17070, with the admin token from --token (BERTH_TOKEN), else \
                  the saved controller's, else <data-dir>/admin.token, which the controller \
                  writes when it starts."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// The controller's address, or several controllers' separated by
    /// commas (a request goes to the next when one cannot be reached); by
    /// default the current controller saved by `berth login`, else
    /// http://127.0.0.1:17070.
    #[arg(
        long,
        global = true,
        env = "BERTH_URL",
        hide_env_values = true,
        value_name = "URL"
    )]
    pub url: Option<String>,
    // The doc comment is the command line's help, where `<data-dir>` is a
    // placeholder, not HTML.
    #[allow(rustdoc::invalid_html_tags)]
    /// The admin token; by default the one saved with the controller by
    /// `berth login`, else read from <data-dir>/admin.token (the data
    /// directory is BERTH_DATA_DIR, else $XDG_DATA_HOME/berth, else
    /// ~/.local/share/berth).
    #[arg(
        long,
        global = true,
        env = "BERTH_TOKEN",
        hide_env_values = true,
        value_name = "TOKEN"
    )]
    pub token: Option<String>,
    // The doc comment is the command line's help, where `<data-dir>` is a
    // placeholder, not HTML.
    #[allow(rustdoc::invalid_html_tags)]
    /// The CA certificate (PEM) to verify an https:// controller with; by
    /// default what `berth login` saved (its CA, or the public roots), else
    /// <data-dir>/ca.crt when there is one, else the public roots.
    #[arg(long, global = true, env = "BERTH_CA_CERT", value_name = "FILE")]
    pub ca_cert: Option<PathBuf>,
}

/// Every command.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the controller: the API and the provisioning engine.
    Serve(ServeArgs),
    /// Deploy an application from a charm and add its units.
    ///
    /// CHARM is a charm name (wordpress), or the path of a charm directory
    /// (./wordpress) or a .charm (zip) archive. A local charm is checked
    /// here, uploaded to the controller (POST /v1/charms), and deployed by
    /// the URL the controller gives it, so the controller may be on
    /// another machine; uploading the same contents again reuses the
    /// stored charm.
    Deploy(applications::DeployArgs),
    /// Add units to an application.
    AddUnit(applications::AddUnitArgs),
    /// Remove units (and their subordinates); their machines stay.
    #[command(visible_alias = "destroy-unit")]
    RemoveUnit(applications::RemoveUnitArgs),
    /// Remove an application, its units and its relations.
    RemoveApplication(applications::RemoveApplicationArgs),
    /// Set an application's constraints (for units added from now on).
    SetConstraints(applications::SetConstraintsArgs),
    /// Show an application's constraints.
    #[command(visible_alias = "get-constraints")]
    Constraints(applications::ConstraintsArgs),
    /// Set the model's constraints (for units and machines added from now
    /// on).
    SetModelConstraints(model::SetModelConstraintsArgs),
    /// Show the model's constraints.
    #[command(visible_alias = "get-model-constraints")]
    ModelConstraints,
    /// Add machines, or containers.
    AddMachine(machines::AddMachineArgs),
    /// Remove machines.
    #[command(visible_alias = "destroy-machine")]
    RemoveMachine(machines::RemoveMachineArgs),
    /// Make machines whose provisioning failed eligible again.
    #[command(visible_alias = "resolved")]
    RetryProvisioning(machines::RetryArgs),
    /// Explain why a machine is (or is not) placed: how many instance types
    /// each constraint ruled out, which zones were ruled out and why, and
    /// the nearest fits if one constraint were relaxed, with prices.
    Explain(plans::ExplainArgs),
    /// Set an hourly budget in US dollars for the model, or for one
    /// application (`set-budget wordpress 2.50`); `none` clears it. A
    /// command whose plan would exceed a budget is refused.
    SetBudget(plans::SetBudgetArgs),
    /// Show the hourly budgets.
    Budgets,
    /// Relate two applications.
    #[command(visible_alias = "relate")]
    Integrate(relations::IntegrateArgs),
    /// Remove a relation (and the subordinate units it made).
    RemoveRelation(relations::IntegrateArgs),
    /// Show the model: applications, units and machines.
    Status(status::StatusArgs),
    /// List the availability zones.
    Zones,
    /// Let new machines go to a zone again.
    EnableZone(zones::ZoneArgs),
    /// Keep new machines out of a zone.
    DisableZone(zones::ZoneArgs),
    // The doc comment is the command line's help, where `<data-dir>` is a
    // placeholder, not HTML.
    #[allow(rustdoc::invalid_html_tags)]
    /// Check that a controller answers with a token, save it, and make it
    /// the current controller.
    ///
    /// The URL and token are kept in controllers.toml in the user's
    /// configuration directory ($XDG_CONFIG_HOME/berth, else
    /// ~/.config/berth), readable by its owner only. The token is --token
    /// (BERTH_TOKEN), else <data-dir>/admin.token.
    Login(controllers::LoginArgs),
    /// List the saved controllers; the current one is marked with `*`.
    Controllers,
    /// Make a saved controller the current one.
    Switch(controllers::SwitchArgs),
    /// Show the simulated cloud's faults, replace them (`set`) or clear
    /// them (`clear`).
    ///
    /// For trying out how berth copes: zones down, zone capacity, failing
    /// launches, provider calls that hang or are throttled, agents that
    /// never check in. Only a controller on the simulated cloud has them.
    SimFaults(sim::SimFaultsArgs),
    /// Wait until every machine is started or in error.
    Wait(wait::WaitArgs),
    /// Run the machine agent: check in with a one-time password, then send
    /// heartbeats.
    Agent(agent::AgentArgs),
    /// Print a shell completion script (for example:
    /// `berth completion bash > /etc/bash_completion.d/berth`).
    Completion(docs::CompletionArgs),
    /// Write man pages for berth and each of its commands into a directory.
    Man(docs::ManArgs),
}

/// `berth serve`'s options; each overrides the configuration file and the
/// environment (see [`crate::config`]).
#[derive(Clone, Debug, Default, PartialEq, Eq, Args)]
pub struct ServeArgs {
    /// The address to listen on (default 127.0.0.1:17070).
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<SocketAddr>,
    /// Where berth keeps its database, admin token and secrets.
    #[arg(long, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// A PostgreSQL URL, or a SQLite file path (default: berth.db in the
    /// data directory).
    #[arg(long, value_name = "URL")]
    pub database_url: Option<String>,
    /// A TOML configuration file.
    #[arg(long, env = "BERTH_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,
}

/// Where a command writes. Commands take this rather than the process's
/// streams so that tests can capture what they print.
pub struct Io<'a> {
    pub out: &'a mut dyn Write,
    pub err: &'a mut dyn Write,
    /// Whether `out` is a terminal: progress bars and screen redraws are
    /// only drawn there; elsewhere output is plain lines.
    pub tty: bool,
}

impl Io<'_> {
    /// Writes each warning the controller returned as a `WARNING` line on
    /// standard error.
    ///
    /// # Errors
    ///
    /// When standard error cannot be written.
    pub fn warnings(&mut self, warnings: &[String]) -> Result<(), CliError> {
        for warning in warnings {
            writeln!(self.err, "WARNING {warning}")?;
        }
        Ok(())
    }
}

/// The controller a command talks to; the admin token is looked for only
/// when a command first needs it, after its arguments have parsed.
pub struct Session {
    url: String,
    token: Option<String>,
    /// The CA an `https://` controller is verified with.
    ca: Option<TrustedCa>,
    /// Where the admin token file is looked for.
    data_dir: PathBuf,
    client: Option<Client>,
}

impl Session {
    /// A session with the controller at `url`.
    pub fn new(url: &str, token: Option<String>, data_dir: PathBuf) -> Session {
        Session {
            url: url.to_string(),
            token,
            ca: None,
            data_dir,
            client: None,
        }
    }

    /// The session, verifying an `https://` controller with `ca`.
    #[must_use]
    pub fn trusting(mut self, ca: Option<TrustedCa>) -> Session {
        self.ca = ca;
        self
    }

    /// The URL the session talks to.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// A client carrying the admin token.
    ///
    /// # Errors
    ///
    /// [`CliError::Usage`] for a bad URL; [`CliError::NoToken`].
    pub fn client(&mut self) -> Result<&Client, CliError> {
        Ok(match &mut self.client {
            Some(client) => client,
            empty => {
                // The URL before the token: a bad URL is the user's error,
                // whatever token there is.
                client::check_url(&self.url)?;
                let token = token::discover(self.token.as_deref(), &self.data_dir)?;
                empty.insert(Client::with_ca(&self.url, Some(token), self.ca.as_ref())?)
            }
        })
    }

    /// A client without the admin token, for the agent's calls.
    ///
    /// # Errors
    ///
    /// [`CliError::Usage`] for a bad URL.
    pub fn anonymous(&self) -> Result<Client, CliError> {
        Client::with_ca(&self.url, None, self.ca.as_ref())
    }
}

/// A count given with `flag`: at least `min`, at most the API's limit.
///
/// # Errors
///
/// [`CliError::Usage`] naming the flag and the range.
pub fn count(flag: &str, n: u32, min: u32) -> Result<u32, CliError> {
    if n < min || n > MAX_COUNT_PER_REQUEST {
        return Err(CliError::Usage(format!(
            "{flag} must be between {min} and {MAX_COUNT_PER_REQUEST}, got {n}"
        )));
    }
    Ok(n)
}

/// A number of units given with `flag`, at least `min` and of any size:
/// the command sends it in requests of the API's size ([`split_units`]).
///
/// # Errors
///
/// [`CliError::Usage`] naming the flag and the least it takes.
pub fn unit_count(flag: &str, n: u32, min: u32) -> Result<u32, CliError> {
    if n < min {
        return Err(CliError::Usage(format!(
            "{flag} must be at least {min}, got {n}"
        )));
    }
    Ok(n)
}

/// Refuses more `--to` directives (`to`, already checked, comma-separated)
/// than the `n` units they place, as the controller would.
///
/// # Errors
///
/// [`CliError::Usage`] naming both counts.
pub fn directives_fit(n: u32, to: Option<&str>) -> Result<(), CliError> {
    let given = to.map_or(0, |t| t.split(',').filter(|d| !d.is_empty()).count());
    if given > n as usize {
        return Err(CliError::Usage(format!(
            "{given} placement directives given for {n} unit{}: give at most one per unit",
            if n == 1 { "" } else { "s" }
        )));
    }
    Ok(())
}

/// `n` units in parts of at most the API's request size, each with its
/// share of the `--to` directives (`to`, already checked, comma-separated;
/// directives beyond the units, which the commands refuse first with
/// [`directives_fit`], would go with the last part). At least one part, of
/// 0 units when `n` is 0.
pub fn split_units(n: u32, to: Option<&str>) -> Vec<(u32, Option<String>)> {
    let directives: Vec<&str> = to
        .map(|t| t.split(',').filter(|d| !d.is_empty()).collect())
        .unwrap_or_default();
    let mut parts = Vec::new();
    let mut start: u32 = 0;
    loop {
        let size = (n - start).min(MAX_COUNT_PER_REQUEST);
        let end = start + size;
        let last = end >= n;
        let from = (start as usize).min(directives.len());
        let until = if last {
            directives.len()
        } else {
            (end as usize).min(directives.len())
        };
        let share = directives[from..until].join(",");
        parts.push((size, (!share.is_empty()).then_some(share)));
        start = end;
        if last {
            return parts;
        }
    }
}

/// Runs a parsed command line (anything but `serve`) on the process's
/// standard output and error, and returns the exit code.
pub fn run(cli: Cli) -> ExitCode {
    let stdout = std::io::stdout();
    let tty = stdout.is_terminal();
    let mut out = stdout.lock();
    let mut err = std::io::stderr().lock();
    let mut io = Io {
        out: &mut out,
        err: &mut err,
        tty,
    };
    ExitCode::from(execute(cli, &mut io))
}

/// The global flags, by their clap ids.
const GLOBAL_FLAGS: [(&str, &str); 3] = [
    ("url", "--url"),
    ("token", "--token"),
    ("ca_cert", "--ca-cert"),
];

/// Parses a command line (the program name first) as clap does, and
/// refuses a global flag given on it to a command that has no use for it,
/// saying why. The same setting from its environment variable is let be:
/// `BERTH_URL` and the others are often set for every command.
///
/// # Errors
///
/// clap's error: a usage error (exit code 2), or `--help` or `--version`
/// (exit code 0).
pub fn parse_from<I, T>(args: I) -> Result<Cli, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let mut command = Cli::command();
    let matches = command.try_get_matches_from_mut(args)?;
    let cli = Cli::from_arg_matches(&matches).map_err(|e| e.format(&mut command))?;
    for (id, flag) in GLOBAL_FLAGS {
        if given_on_command_line(&matches, id) {
            if let Some(why) = unused_global_flag(&cli.command, flag) {
                return Err(command.error(clap::error::ErrorKind::ArgumentConflict, why));
            }
        }
    }
    Ok(cli)
}

/// Whether the global argument `id` was given on the command line, before
/// or after the command (not by its environment variable).
fn given_on_command_line(matches: &ArgMatches, id: &str) -> bool {
    matches.value_source(id) == Some(ValueSource::CommandLine)
        || matches
            .subcommand()
            .is_some_and(|(_, command)| given_on_command_line(command, id))
}

/// Why the global `flag` (`--url`, `--token` or `--ca-cert`) means
/// nothing to `command`; `None` when the command uses it.
fn unused_global_flag(command: &Command, flag: &str) -> Option<String> {
    let talks_to_none = |what: &str| {
        Some(format!(
            "{flag} is for commands that talk to a controller; {what}"
        ))
    };
    match (command, flag) {
        (Command::Serve(_), "--url") => talks_to_none("berth serve listens at --listen"),
        (Command::Serve(_), "--token") => {
            talks_to_none("berth serve makes or reads its own admin token (see --data-dir)")
        }
        (Command::Serve(_), _) => {
            talks_to_none("berth serve's HTTPS is set in its configuration's [tls] section")
        }
        (Command::Login(_), "--url") => Some(
            "--url is not for berth login, which takes the controller's URL as its argument: \
             berth login URL"
                .to_string(),
        ),
        (Command::Controllers, _) => talks_to_none("berth controllers lists the saved controllers"),
        (Command::Switch(_), _) => {
            talks_to_none("berth switch makes a saved controller the current one")
        }
        (Command::Completion(_), _) => {
            talks_to_none("berth completion prints a shell completion script")
        }
        (Command::Man(_), _) => talks_to_none("berth man writes man pages"),
        (Command::Agent(_), "--token") => Some(
            "--token is not for berth agent, which proves itself with its one-time password \
             (--password) or its credential (--credential-file)"
                .to_string(),
        ),
        _ => None,
    }
}

/// Parses `args` (the program name first, see [`parse_from`]) and runs
/// the command, writing to `io`; returns the exit code. Usage errors are
/// clap's, with exit code 2; `--help` and `--version` print to `io.out`
/// and exit 0.
pub fn run_args<I, T>(args: I, io: &mut Io<'_>) -> u8
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    match parse_from(args) {
        Ok(cli) => execute(cli, io),
        Err(e) => {
            let target: &mut dyn Write = if e.use_stderr() {
                &mut *io.err
            } else {
                &mut *io.out
            };
            let _ = write!(target, "{}", e.render());
            u8::try_from(e.exit_code()).unwrap_or(EXIT_USAGE)
        }
    }
}

/// Runs a parsed command, writing to `io`; returns the exit code.
pub fn execute(cli: Cli, io: &mut Io<'_>) -> u8 {
    let data_dir = crate::config::default_data_dir(None);
    let saved = controllers::controllers_path();
    let token = cli.token.as_deref();
    let outcome = match &cli.command {
        // These talk to no controller, so none is looked for: a saved
        // controllers file or a CA that would not do cannot stop them.
        Command::Serve(_) => Err(serve_refused()),
        Command::Completion(args) => docs::completion(args, io),
        Command::Man(args) => docs::man(args, io),
        Command::Login(args) => {
            controllers::login(args, token, cli.ca_cert.as_deref(), &data_dir, &saved, io)
        }
        Command::Controllers => controllers::list(&saved, io),
        Command::Switch(args) => controllers::switch(args, &saved, io),
        command => controllers::resolve(cli.url.as_deref(), token, &saved).and_then(|target| {
            controllers::ca_cert_used(&target.url, cli.ca_cert.as_deref())?;
            let ca = if controllers::names_https(&target.url) {
                controllers::trusted_ca(cli.ca_cert.as_deref(), &target.saved_ca, &data_dir)?
            } else {
                None
            };
            let mut session = Session::new(&target.url, target.token, data_dir).trusting(ca);
            dispatch(command, &mut session, io)
        }),
    };
    match outcome {
        Ok(()) => {
            let _ = io.out.flush();
            EXIT_OK
        }
        Err(e) => {
            let _ = io.out.flush();
            let _ = writeln!(io.err, "ERROR {e}");
            e.exit_code()
        }
    }
}

/// Runs one command.
///
/// # Errors
///
/// The command's [`CliError`]; `serve` is refused (the start-up code runs
/// it).
pub fn dispatch(command: &Command, session: &mut Session, io: &mut Io<'_>) -> Result<(), CliError> {
    match command {
        Command::Serve(_) => Err(serve_refused()),
        Command::Login(_) | Command::Controllers | Command::Switch(_) => Err(CliError::Usage(
            "'berth login', 'controllers' and 'switch' manage the saved controllers and talk to no session"
                .into(),
        )),
        Command::Deploy(args) => applications::deploy(args, session, io),
        Command::Explain(args) => plans::explain(args, session, io),
        Command::SetBudget(args) => plans::set_budget(args, session, io),
        Command::Budgets => plans::budgets(session, io),
        Command::AddUnit(args) => applications::add_unit(args, session, io),
        Command::RemoveUnit(args) => applications::remove_unit(args, session, io),
        Command::RemoveApplication(args) => applications::remove_application(args, session, io),
        Command::SetConstraints(args) => applications::set_constraints(args, session, io),
        Command::Constraints(args) => applications::constraints(args, session, io),
        Command::SetModelConstraints(args) => model::set_constraints(args, session, io),
        Command::ModelConstraints => model::constraints(session, io),
        Command::AddMachine(args) => machines::add_machine(args, session, io),
        Command::RemoveMachine(args) => machines::remove_machine(args, session, io),
        Command::RetryProvisioning(args) => machines::retry(args, session, io),
        Command::Integrate(args) => relations::integrate(args, session, io),
        Command::RemoveRelation(args) => relations::remove_relation(args, session, io),
        Command::Status(args) => status::run(args, session, io),
        Command::Zones => zones::list(session, io),
        Command::EnableZone(args) => zones::set_enabled(args, true, session, io),
        Command::DisableZone(args) => zones::set_enabled(args, false, session, io),
        Command::SimFaults(args) => sim::run(args, session, io),
        Command::Wait(args) => wait::run(args, session, io),
        Command::Agent(args) => agent::run(args, session, io, &mut agent::RealClock),
        Command::Completion(args) => docs::completion(args, io),
        Command::Man(args) => docs::man(args, io),
    }
}

/// `berth serve` given to the command line client.
fn serve_refused() -> CliError {
    CliError::Usage(
        "'berth serve' is run by the controller's start-up code, not by the command line client"
            .into(),
    )
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Parses a command line (without the program name).
    pub(crate) fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("berth").chain(args.iter().copied()))
    }

    /// The command of a command line that must parse.
    pub(crate) fn command(args: &[&str]) -> Command {
        match parse(args) {
            Ok(cli) => cli.command,
            Err(e) => panic!("{args:?} does not parse: {e}"),
        }
    }

    /// Runs a command line against a controller that is not there (port 9
    /// on loopback), with a token given so that none is looked for.
    pub(crate) fn run_offline(args: &[&str]) -> (u8, String, String) {
        let mut full = vec!["berth", "--url", "http://127.0.0.1:9", "--token", "t"];
        full.extend_from_slice(args);
        run_line(&full)
    }

    /// Runs a whole command line (the program name first): the exit code,
    /// standard output and standard error.
    fn run_line(args: &[&str]) -> (u8, String, String) {
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let code = run_args(
            args.iter().copied(),
            &mut Io {
                out: &mut out,
                err: &mut err,
                tty: false,
            },
        );
        (
            code,
            String::from_utf8(out).unwrap(),
            String::from_utf8(err).unwrap(),
        )
    }

    #[test]
    fn the_url_defaults_to_the_local_controller_and_the_token_to_none() {
        let cli = parse(&["status"]).unwrap();
        if std::env::var_os("BERTH_URL").is_none() {
            assert_eq!(cli.url, None);
        }
        if std::env::var_os("BERTH_TOKEN").is_none() {
            assert_eq!(cli.token, None);
        }
    }

    #[test]
    fn url_and_token_are_taken_before_or_after_the_command() {
        let before = parse(&["--url", "http://h:1", "--token", "t", "zones"]).unwrap();
        let after = parse(&["zones", "--url", "http://h:1", "--token", "t"]).unwrap();
        for cli in [before, after] {
            assert_eq!(cli.url.as_deref(), Some("http://h:1"));
            assert_eq!(cli.token.as_deref(), Some("t"));
        }
    }

    #[test]
    fn serve_takes_listen_data_dir_database_url_and_config() {
        let Command::Serve(args) = command(&[
            "serve",
            "--listen",
            "0.0.0.0:8080",
            "--data-dir",
            "/var/lib/berth",
            "--database-url",
            "postgres://db/berth",
            "--config",
            "/etc/berth.toml",
        ]) else {
            panic!("not serve");
        };
        assert_eq!(
            args,
            ServeArgs {
                listen: Some("0.0.0.0:8080".parse().unwrap()),
                data_dir: Some("/var/lib/berth".into()),
                database_url: Some("postgres://db/berth".into()),
                config: Some("/etc/berth.toml".into()),
            }
        );
    }

    #[test]
    fn serve_options_are_all_optional() {
        let Command::Serve(args) = command(&["serve"]) else {
            panic!("not serve");
        };
        assert_eq!(args.listen, None);
        assert_eq!(args.data_dir, None);
        assert_eq!(args.database_url, None);
        if std::env::var_os("BERTH_CONFIG").is_none() {
            assert_eq!(args.config, None);
        }
    }

    #[test]
    fn a_bad_listen_address_is_a_usage_error() {
        let e = parse(&["serve", "--listen", "nowhere"]).unwrap_err();
        assert_eq!(e.exit_code(), 2);
    }

    #[test]
    fn the_command_line_client_does_not_run_serve() {
        let (code, out, err) = run_line(&["berth", "serve"]);
        assert_eq!(code, 2);
        assert_eq!(out, "");
        assert_eq!(
            err,
            "ERROR 'berth serve' is run by the controller's start-up code, not by the command line client\n"
        );
    }

    #[test]
    fn global_flags_given_to_a_command_that_does_not_use_them_are_refused() {
        for (args, message) in [
            (
                &["berth", "--token", "t", "serve"][..],
                "--token is for commands that talk to a controller; berth serve makes or reads its \
                 own admin token (see --data-dir)",
            ),
            (
                &["berth", "serve", "--url", "http://h:1"][..],
                "--url is for commands that talk to a controller; berth serve listens at --listen",
            ),
            (
                &["berth", "controllers", "--ca-cert", "/tmp/ca.crt"][..],
                "--ca-cert is for commands that talk to a controller; berth controllers lists the \
                 saved controllers",
            ),
            (
                &["berth", "--url", "http://h:1", "switch", "a"][..],
                "--url is for commands that talk to a controller; berth switch makes a saved \
                 controller the current one",
            ),
            (
                &["berth", "--url", "http://h:1", "completion", "bash"][..],
                "--url is for commands that talk to a controller; berth completion prints a shell \
                 completion script",
            ),
            (
                &["berth", "man", "/tmp/man", "--token", "t"][..],
                "--token is for commands that talk to a controller; berth man writes man pages",
            ),
            (
                &["berth", "agent", "--machine", "0", "--token", "t"][..],
                "--token is not for berth agent, which proves itself with its one-time password \
                 (--password) or its credential (--credential-file)",
            ),
            (
                &["berth", "login", "--url", "http://h:1", "http://h:2"][..],
                "--url is not for berth login, which takes the controller's URL as its argument: \
                 berth login URL",
            ),
        ] {
            let (code, out, err) = run_line(args);
            assert_eq!((code, out.as_str()), (2, ""), "{args:?}");
            assert!(
                err.starts_with(&format!("error: {message}\n")),
                "{args:?}: {err}"
            );
        }
    }

    #[test]
    fn global_flags_count_as_given_only_on_the_command_line() {
        let matches = Cli::command()
            .try_get_matches_from(["berth", "completion", "bash"])
            .unwrap();
        // Whatever BERTH_URL, BERTH_TOKEN and BERTH_CA_CERT hold here.
        for (id, _) in GLOBAL_FLAGS {
            assert!(!given_on_command_line(&matches, id), "{id}");
        }
        let matches = Cli::command()
            .try_get_matches_from(["berth", "sim-faults", "clear", "--token", "t"])
            .unwrap();
        assert!(given_on_command_line(&matches, "token"));
        // Commands that use them take them.
        for args in [
            &["berth", "--url", "http://h:1", "--token", "t", "status"][..],
            &["berth", "--ca-cert", "/tmp/ca.crt", "login", "http://h:1"][..],
        ] {
            assert!(parse_from(args.iter().copied()).is_ok(), "{args:?}");
        }
    }

    #[test]
    fn completion_and_man_look_for_no_controller() {
        // As BERTH_URL and BERTH_CA_CERT would give them: a CA certificate
        // for a plain HTTP controller, which a command that talks to one
        // refuses.
        let dir = tempfile::tempdir().unwrap();
        let man = dir.path().to_str().unwrap();
        for args in [&["completion", "bash"][..], &["man", man][..]] {
            let mut cli = parse(args).unwrap();
            cli.url = Some("http://127.0.0.1:9".into());
            cli.ca_cert = Some("/nonexistent".into());
            let (mut out, mut err) = (Vec::new(), Vec::new());
            let code = execute(
                cli,
                &mut Io {
                    out: &mut out,
                    err: &mut err,
                    tty: false,
                },
            );
            assert_eq!(
                (code, String::from_utf8(err).unwrap().as_str()),
                (0, ""),
                "{args:?}"
            );
            assert!(!out.is_empty(), "{args:?}");
        }
    }

    #[test]
    fn an_unknown_command_is_claps_usage_error() {
        let (code, _, err) = run_offline(&["frobnicate"]);
        assert_eq!(code, 2);
        assert!(
            err.contains("unrecognized subcommand 'frobnicate'"),
            "{err}"
        );
    }

    #[test]
    fn help_goes_to_standard_output_and_exits_0() {
        let (code, out, err) = run_offline(&["--help"]);
        assert_eq!(code, 0);
        assert!(out.contains("Usage: berth"), "{out}");
        assert_eq!(err, "");
    }

    #[test]
    fn an_unreachable_controller_is_one_clear_line() {
        let (code, out, err) = run_offline(&["status"]);
        assert_eq!(code, 1);
        assert_eq!(out, "");
        assert_eq!(
            err,
            "ERROR cannot reach the berth controller at http://127.0.0.1:9: is 'berth serve' running?\n"
        );
    }

    #[test]
    fn counts_are_checked_against_the_apis_limit() {
        assert_eq!(count("-n", 0, 0).unwrap(), 0);
        assert_eq!(count("-n", 1000, 1).unwrap(), 1000);
        assert_eq!(
            count("--num-units", 0, 1).unwrap_err().to_string(),
            "--num-units must be between 1 and 1000, got 0"
        );
        assert_eq!(count("-n", 1001, 0).unwrap_err().exit_code(), 2);
    }

    #[test]
    fn the_cli_definition_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
