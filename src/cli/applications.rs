//! Application commands: `deploy`, `add-unit`, `remove-unit` (alias
//! `destroy-unit`), `remove-application`, `set-constraints` and
//! `constraints`.
//!
//! A local charm (`deploy ./wordpress`, or a `.charm` zip archive) is
//! uploaded first: the directory is checked and packed here, sent to
//! `POST /v1/charms`, and deployed by the URL the controller answers, so
//! the controller never reads this machine's paths and may be anywhere.
//! The same contents uploaded again are the same charm.

use std::collections::BTreeMap;
use std::path::Path;

use clap::Args;

use crate::api::applications::{
    AddUnitsRequest, AddUnitsResponse, ConstraintsRequest, ConstraintsResponse, DeployRequest,
    DeployResponse, PlacedUnitView, RemoveUnitsRequest,
};
use crate::api::charms::CharmUploaded;
use crate::api::input::PlacementList;
use crate::charms::{self, CharmLoadError};
use crate::cli::client::segment;
use crate::cli::error::CliError;
use crate::cli::plans::PlanArgs;
use crate::cli::{directives_fit, split_units, unit_count, Io, Session};
use crate::domain::base::Base;
use crate::domain::constraints::Constraints;
use crate::domain::names::{ApplicationName, UnitName};
use crate::domain::placement::{parse_to_list, scale_with};

/// `berth deploy CHARM [APP]`.
#[derive(Clone, Debug, PartialEq, Eq, Args)]
pub struct DeployArgs {
    /// A charm name (wordpress), or the path of a charm directory
    /// (./wordpress) or .charm archive, which is uploaded first.
    #[arg(value_name = "CHARM")]
    pub charm: String,
    /// The application's name; the charm's name by default.
    #[arg(value_name = "APP")]
    pub application: Option<String>,
    /// How many units to add (1, or 0 for a subordinate charm).
    #[arg(short = 'n', long = "num-units", value_name = "N")]
    pub num_units: Option<u32>,
    /// The base to deploy on, such as ubuntu@22.04.
    #[arg(long, value_name = "BASE")]
    pub base: Option<String>,
    /// The application's constraints, such as "mem=2G cores=2".
    #[arg(long, value_name = "CONSTRAINTS")]
    pub constraints: Option<String>,
    /// Where the units go, one directive per unit: 3, lxd, lxd:3,
    /// zone=us-east-1a (comma-separated).
    #[arg(long, value_name = "LIST")]
    pub to: Option<String>,
    /// A charm setting, KEY=VALUE; repeat for several.
    #[arg(long = "config", value_name = "KEY=VALUE")]
    pub config: Vec<String>,
    #[command(flatten)]
    pub plan: PlanArgs,
}

/// `berth add-unit APP`.
#[derive(Clone, Debug, PartialEq, Eq, Args)]
pub struct AddUnitArgs {
    #[arg(value_name = "APP")]
    pub application: String,
    /// How many units to add.
    #[arg(short = 'n', long = "num-units", value_name = "N", default_value_t = 1)]
    pub num_units: u32,
    /// Where the units go, one directive per unit (comma-separated).
    #[arg(long, value_name = "LIST")]
    pub to: Option<String>,
    /// Constraints for these units only, such as "mem=8G", over the
    /// application's key by key.
    #[arg(long, value_name = "CONSTRAINTS")]
    pub constraints: Option<String>,
    #[command(flatten)]
    pub plan: PlanArgs,
}

/// `berth remove-unit UNIT...`.
#[derive(Clone, Debug, PartialEq, Eq, Args)]
pub struct RemoveUnitArgs {
    /// Principal units, such as wordpress/0; all are removed or none.
    #[arg(value_name = "UNIT", required = true)]
    pub units: Vec<String>,
    #[command(flatten)]
    pub plan: PlanArgs,
}

/// `berth remove-application APP`.
#[derive(Clone, Debug, PartialEq, Eq, Args)]
pub struct RemoveApplicationArgs {
    #[arg(value_name = "APP")]
    pub application: String,
    #[command(flatten)]
    pub plan: PlanArgs,
}

/// `berth set-constraints APP KEY=VALUE...`, or with the application given
/// by `--application` (or the seeds' `--service`):
/// `berth set-constraints --service wordpress mem=3G`.
#[derive(Clone, Debug, PartialEq, Eq, Args)]
pub struct SetConstraintsArgs {
    /// The application, instead of the first argument.
    #[arg(
        long = "application",
        visible_alias = "service",
        alias = "service-name",
        value_name = "APP"
    )]
    pub application: Option<String>,
    /// The application (unless given with --application), then the
    /// constraints: mem=3G cores=2. None clears them all.
    #[arg(value_name = "ARGS")]
    pub args: Vec<String>,
    #[command(flatten)]
    pub plan: PlanArgs,
}

/// `berth constraints APP`.
#[derive(Clone, Debug, PartialEq, Eq, Args)]
pub struct ConstraintsArgs {
    #[arg(value_name = "APP")]
    pub application: String,
}

/// The charm argument: a path made absolute (a charm directory or
/// archive, which [`deploy`] uploads and replaces with the charm's URL),
/// or a charm name.
///
/// # Errors
///
/// [`CliError::Usage`] for a name that is not a valid charm name, or a
/// path that cannot be made absolute or is not UTF-8.
pub fn charm_argument(charm: &str) -> Result<String, CliError> {
    if charms::is_path(charm) {
        let absolute = std::path::absolute(Path::new(charm)).map_err(|e| {
            CliError::Usage(format!("cannot resolve the charm path {charm:?}: {e}"))
        })?;
        return absolute.to_str().map(str::to_string).ok_or_else(|| {
            CliError::Usage(format!("the charm path {charm:?} is not valid UTF-8"))
        });
    }
    charm
        .parse::<ApplicationName>()
        .map_err(|_| CliError::usage(CharmLoadError::InvalidName(charm.to_string())))?;
    Ok(charm.to_string())
}

/// An application name.
///
/// # Errors
///
/// [`CliError::Usage`] with the domain's message.
pub fn application_name(name: &str) -> Result<ApplicationName, CliError> {
    name.parse().map_err(CliError::usage)
}

/// Constraints given as one string or several words, in the canonical
/// form the controller stores (`mem=3G` is sent as `mem=3072M`).
///
/// # Errors
///
/// [`CliError::Usage`] with the constraint parser's message.
pub fn canonical_constraints<S: AsRef<str>>(args: &[S]) -> Result<String, CliError> {
    Ok(Constraints::parse_args(args)
        .map_err(CliError::usage)?
        .to_string())
}

/// A `--to` list, checked and written back in its canonical form.
///
/// # Errors
///
/// [`CliError::Usage`] with the placement parser's message.
pub fn placement_list(to: &str) -> Result<String, CliError> {
    let list = parse_to_list(to).map_err(CliError::usage)?;
    Ok(list
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(","))
}

/// `--config KEY=VALUE` settings.
///
/// # Errors
///
/// [`CliError::Usage`] for a setting without `=` or a key, or a key given
/// twice.
pub fn config_settings(
    settings: &[String],
) -> Result<BTreeMap<String, serde_json::Value>, CliError> {
    let mut config = BTreeMap::new();
    for setting in settings {
        let (key, value) = setting
            .split_once('=')
            .filter(|(key, _)| !key.trim().is_empty())
            .ok_or_else(|| {
                CliError::Usage(format!(
                    "invalid --config value {setting:?}: expected KEY=VALUE"
                ))
            })?;
        let key = key.trim().to_string();
        if config.contains_key(&key) {
            return Err(CliError::Usage(format!(
                "config key {key:?} is given more than once"
            )));
        }
        config.insert(key, serde_json::Value::String(value.to_string()));
    }
    Ok(config)
}

impl DeployArgs {
    /// The request these arguments make.
    ///
    /// # Errors
    ///
    /// [`CliError::Usage`] for anything that does not parse.
    pub fn request(&self) -> Result<DeployRequest, CliError> {
        let charm = charm_argument(&self.charm)?;
        let application = self
            .application
            .as_deref()
            .map(application_name)
            .transpose()?
            .map(|name| name.to_string());
        let num_units = self
            .num_units
            .map(|n| unit_count("--num-units", n, 0))
            .transpose()?;
        let base = self
            .base
            .as_deref()
            .map(|b| b.parse::<Base>().map_err(CliError::usage))
            .transpose()?
            .map(|b| b.to_string());
        let constraints = self
            .constraints
            .as_deref()
            .map(|c| canonical_constraints(&[c]))
            .transpose()?;
        let to = self.to.as_deref().map(placement_list).transpose()?;
        let directives = to
            .as_deref()
            .map(parse_to_list)
            .transpose()
            .map_err(CliError::usage)?;
        match directives.as_deref().and_then(scale_with) {
            // The leader's units decide how many there are.
            Some(leader) if num_units.is_some() => {
                return Err(CliError::Usage(format!(
                    "--to scale-with={leader} places a unit beside every unit of {leader}: leave out --num-units"
                )));
            }
            Some(_) => {}
            // One unit unless `-n` says otherwise (none for a subordinate
            // charm, which the controller knows and refuses directives for).
            None => directives_fit(num_units.unwrap_or(1), to.as_deref())?,
        }
        // The first part; the rest are added as units ([`Self::rest`]).
        let (num_units, to) = match num_units {
            Some(n) => {
                let (first, to) = split_units(n, to.as_deref()).remove(0);
                (Some(first), to)
            }
            None => (None, to),
        };
        let to = to.map(PlacementList::One);
        Ok(DeployRequest {
            charm,
            application,
            num_units,
            base,
            constraints,
            to,
            config: config_settings(&self.config)?,
            dry_run: self.plan.dry_run,
            if_revision: self.plan.if_revision,
        })
    }
}

/// The parts after the first of `n` units placed by `to`, each one
/// add-unit request: empty unless `n` is more than the API's request size.
///
/// # Errors
///
/// [`CliError::Usage`] for a bad `--to`; with `--dry-run` or
/// `--if-revision`, which take one request.
fn later_parts(
    n: u32,
    to: Option<&str>,
    plan: &PlanArgs,
) -> Result<Vec<(u32, Option<String>)>, CliError> {
    let to = to.map(placement_list).transpose()?;
    let parts = split_units(n, to.as_deref());
    if parts.len() > 1 && (plan.dry_run || plan.if_revision.is_some()) {
        return Err(CliError::Usage(format!(
            "--dry-run and --if-revision take at most {} units (one request); ask for fewer",
            crate::api::MAX_COUNT_PER_REQUEST
        )));
    }
    Ok(parts.into_iter().skip(1).collect())
}

/// Adds `parts` of units to `application` one request after another,
/// printing where each unit went.
fn add_parts(
    session: &mut Session,
    io: &mut Io<'_>,
    application: &ApplicationName,
    parts: Vec<(u32, Option<String>)>,
    constraints: Option<String>,
) -> Result<(), CliError> {
    let path = format!("/v1/applications/{}/units", segment(application.as_str()));
    for (num_units, to) in parts {
        let request = AddUnitsRequest {
            num_units: Some(num_units),
            to: to.map(PlacementList::One),
            constraints: constraints.clone(),
            dry_run: false,
            if_revision: None,
        };
        let added: AddUnitsResponse = session.client()?.post(&path, &request)?;
        print_placed(io, &added.units)?;
    }
    Ok(())
}

impl AddUnitArgs {
    /// The application and the request these arguments make.
    ///
    /// # Errors
    ///
    /// [`CliError::Usage`] for anything that does not parse.
    pub fn request(&self) -> Result<(ApplicationName, AddUnitsRequest), CliError> {
        let application = application_name(&self.application)?;
        let num_units = unit_count("--num-units", self.num_units, 1)?;
        let to = self.to.as_deref().map(placement_list).transpose()?;
        directives_fit(num_units, to.as_deref())?;
        let (num_units, to) = split_units(num_units, to.as_deref()).remove(0);
        let to = to.map(PlacementList::One);
        let constraints = self
            .constraints
            .as_deref()
            .map(|c| canonical_constraints(&[c]))
            .transpose()?;
        Ok((
            application,
            AddUnitsRequest {
                num_units: Some(num_units),
                to,
                constraints,
                dry_run: self.plan.dry_run,
                if_revision: self.plan.if_revision,
            },
        ))
    }
}

impl RemoveUnitArgs {
    /// The units, parsed.
    ///
    /// # Errors
    ///
    /// [`CliError::Usage`] naming the first unit name that is not one.
    pub fn units(&self) -> Result<Vec<UnitName>, CliError> {
        self.units
            .iter()
            .map(|u| u.parse().map_err(CliError::usage))
            .collect()
    }
}

impl SetConstraintsArgs {
    /// The application and the canonical constraints.
    ///
    /// # Errors
    ///
    /// [`CliError::Usage`] when no application is named, or for a bad name
    /// or constraint.
    pub fn request(&self) -> Result<(ApplicationName, ConstraintsRequest), CliError> {
        let (application, constraints) =
            match &self.application {
                Some(app) => (app.as_str(), self.args.as_slice()),
                None => match self.args.split_first() {
                    Some((app, rest)) if !app.contains('=') => (app.as_str(), rest),
                    _ => return Err(CliError::Usage(
                        "no application name specified: give it first (set-constraints wordpress \
                         mem=3G) or with --application"
                            .into(),
                    )),
                },
            };
        Ok((
            application_name(application)?,
            ConstraintsRequest {
                constraints: canonical_constraints(constraints)?,
                dry_run: self.plan.dry_run,
                if_revision: self.plan.if_revision,
            },
        ))
    }
}

fn print_placed(io: &mut Io<'_>, units: &[PlacedUnitView]) -> Result<(), CliError> {
    for placed in units {
        writeln!(
            io.out,
            "added unit {} to machine {}",
            placed.unit, placed.machine
        )?;
    }
    Ok(())
}

/// `berth deploy`: prints what was deployed and where each unit went;
/// constraint warnings go to standard error.
///
/// # Errors
///
/// Bad input before anything is sent; the controller's refusal.
pub fn deploy(args: &DeployArgs, session: &mut Session, io: &mut Io<'_>) -> Result<(), CliError> {
    args.plan.check()?;
    let mut request = args.request()?;
    let later = later_parts(args.num_units.unwrap_or(0), args.to.as_deref(), &args.plan)?;
    if charms::is_path(&args.charm) {
        let uploaded = upload_charm(session, Path::new(&request.charm))?;
        if args.plan.dry_run && uploaded.created {
            // The one change a dry run makes: the plan reads the charm
            // from the controller. The same contents are not stored again.
            writeln!(
                io.err,
                "Stored charm {:?} on the controller for the plan to read",
                uploaded.charm
            )?;
        }
        request.charm = uploaded.charm;
    }
    if args
        .plan
        .dry_run(io, || session.client()?.post("/v1/applications", &request))?
    {
        return Ok(());
    }
    let deployed: DeployResponse = session.client()?.post("/v1/applications", &request)?;
    io.warnings(&deployed.warnings)?;
    writeln!(
        io.out,
        "Deployed {:?} from charm {:?} on {}",
        deployed.application, deployed.charm, deployed.base
    )?;
    print_placed(io, &deployed.units)?;
    let application = application_name(&deployed.application)?;
    add_parts(session, io, &application, later, None)
}

/// Uploads the charm directory or archive at `path`: the URL the
/// controller stored it under, and whether this upload stored it.
///
/// # Errors
///
/// A directory that is not a charm, or a file that cannot be read, before
/// anything is sent; the controller's refusal of the archive.
fn upload_charm(session: &mut Session, path: &Path) -> Result<CharmUploaded, CliError> {
    let archive = if path.is_dir() {
        charms::pack_charm_dir(path).map_err(CliError::usage)?
    } else {
        std::fs::read(path).map_err(|e| {
            CliError::Usage(format!(
                "cannot read the charm {}: {e}; expected a charm directory or a .charm (zip) archive",
                path.display()
            ))
        })?
    };
    session
        .client()?
        .post_bytes("/v1/charms", "application/zip", &archive)
}

/// `berth add-unit`: prints where each unit went.
///
/// # Errors
///
/// Bad input before anything is sent; the controller's refusal.
pub fn add_unit(
    args: &AddUnitArgs,
    session: &mut Session,
    io: &mut Io<'_>,
) -> Result<(), CliError> {
    args.plan.check()?;
    let (application, request) = args.request()?;
    let later = later_parts(args.num_units, args.to.as_deref(), &args.plan)?;
    let path = format!("/v1/applications/{}/units", segment(application.as_str()));
    if args
        .plan
        .dry_run(io, || session.client()?.post(&path, &request))?
    {
        return Ok(());
    }
    let constraints = request.constraints.clone();
    let added: AddUnitsResponse = session.client()?.post(&path, &request)?;
    print_placed(io, &added.units)?;
    add_parts(session, io, &application, later, constraints)?;
    io.warnings(&added.warnings)
}

/// `berth remove-unit`.
///
/// # Errors
///
/// Bad input before anything is sent; the controller's refusal (then no
/// unit was removed).
pub fn remove_unit(
    args: &RemoveUnitArgs,
    session: &mut Session,
    io: &mut Io<'_>,
) -> Result<(), CliError> {
    args.plan.check()?;
    let units = args.units()?;
    let request = RemoveUnitsRequest {
        units: units.iter().map(ToString::to_string).collect(),
        dry_run: args.plan.dry_run,
        if_revision: args.plan.if_revision,
    };
    if args
        .plan
        .dry_run(io, || session.client()?.post("/v1/units/remove", &request))?
    {
        return Ok(());
    }
    session
        .client()?
        .post_no_content("/v1/units/remove", &request)?;
    for unit in &units {
        writeln!(io.out, "removed unit {unit}")?;
    }
    Ok(())
}

/// `berth remove-application`.
///
/// # Errors
///
/// Bad input before anything is sent; the controller's refusal.
pub fn remove_application(
    args: &RemoveApplicationArgs,
    session: &mut Session,
    io: &mut Io<'_>,
) -> Result<(), CliError> {
    args.plan.check()?;
    let application = application_name(&args.application)?;
    let path = format!(
        "/v1/applications/{}{}",
        segment(application.as_str()),
        args.plan.query('?')
    );
    if args
        .plan
        .dry_run(io, || session.client()?.delete_as(&path))?
    {
        return Ok(());
    }
    session.client()?.delete(&path)?;
    writeln!(io.out, "removed application {application}")?;
    Ok(())
}

/// `berth set-constraints`: prints nothing (as Juju); warnings go to
/// standard error.
///
/// # Errors
///
/// Bad input before anything is sent; the controller's refusal.
pub fn set_constraints(
    args: &SetConstraintsArgs,
    session: &mut Session,
    io: &mut Io<'_>,
) -> Result<(), CliError> {
    args.plan.check()?;
    let (application, request) = args.request()?;
    let path = format!(
        "/v1/applications/{}/constraints",
        segment(application.as_str())
    );
    if args
        .plan
        .dry_run(io, || session.client()?.put(&path, &request))?
    {
        return Ok(());
    }
    let set: ConstraintsResponse = session.client()?.put(&path, &request)?;
    io.warnings(&set.warnings)
}

/// `berth constraints`: prints the application's constraints in canonical
/// form (`mem=3072M cores=2`).
///
/// # Errors
///
/// Bad input before anything is sent; the controller's refusal.
pub fn constraints(
    args: &ConstraintsArgs,
    session: &mut Session,
    io: &mut Io<'_>,
) -> Result<(), CliError> {
    let application = application_name(&args.application)?;
    let path = format!(
        "/v1/applications/{}/constraints",
        segment(application.as_str())
    );
    let shown: ConstraintsResponse = session.client()?.get(&path)?;
    writeln!(io.out, "{}", shown.constraints)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::tests::{command, parse, run_offline};
    use crate::cli::Command;

    fn deploy_args(args: &[&str]) -> DeployArgs {
        let mut full = vec!["deploy"];
        full.extend_from_slice(args);
        match command(&full) {
            Command::Deploy(args) => args,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn deploy_takes_every_option_juju_does() {
        let args = deploy_args(&[
            "wordpress",
            "blog",
            "-n",
            "3",
            "--base",
            "ubuntu@22.04",
            "--constraints",
            "mem=3G cores=2",
            "--to",
            "lxd:1,zone=sim-a,2",
            "--config",
            "port=8080",
            "--config",
            "title=My blog",
        ]);
        assert_eq!(
            args,
            DeployArgs {
                charm: "wordpress".into(),
                application: Some("blog".into()),
                num_units: Some(3),
                base: Some("ubuntu@22.04".into()),
                constraints: Some("mem=3G cores=2".into()),
                to: Some("lxd:1,zone=sim-a,2".into()),
                config: vec!["port=8080".into(), "title=My blog".into()],
                plan: PlanArgs::default(),
            }
        );
        let request = args.request().unwrap();
        assert_eq!(
            serde_json::to_value(&request).unwrap(),
            serde_json::json!({
                "charm": "wordpress",
                "application": "blog",
                "num_units": 3,
                "base": "ubuntu@22.04",
                "constraints": "mem=3072M cores=2",
                "to": "lxd:1,zone=sim-a,2",
                "config": {"port": "8080", "title": "My blog"},
            })
        );
    }

    #[test]
    fn deploy_options_may_come_before_the_charm_as_in_the_seeds() {
        let args = deploy_args(&["--constraints", "mem=2G", "wordpress"]);
        assert_eq!(args.charm, "wordpress");
        assert_eq!(args.constraints.as_deref(), Some("mem=2G"));
        assert_eq!(args.num_units, None);
        let request = args.request().unwrap();
        assert_eq!(request.num_units, None);
        assert_eq!(request.constraints.as_deref(), Some("mem=2048M"));
        assert!(request.config.is_empty());
    }

    #[test]
    fn the_long_form_of_n_is_num_units() {
        assert_eq!(
            deploy_args(&["wordpress", "--num-units", "2"]).num_units,
            Some(2)
        );
    }

    #[test]
    fn a_local_charm_path_is_sent_absolute() {
        let args = deploy_args(&["./charms/wordpress"]);
        let request = args.request().unwrap();
        let expected = std::env::current_dir().unwrap().join("charms/wordpress");
        assert_eq!(
            Path::new(&request.charm)
                .components()
                .filter(|c| !matches!(c, std::path::Component::CurDir))
                .collect::<std::path::PathBuf>(),
            expected
        );
        assert!(Path::new(&request.charm).is_absolute());
        let absolute = deploy_args(&["/srv/charms/wordpress"]).request().unwrap();
        assert_eq!(absolute.charm, "/srv/charms/wordpress");
    }

    #[test]
    fn bad_deploy_input_is_refused_with_the_domains_message() {
        let cases: [(&[&str], &str); 10] = [
            (
                &["wordpress", "--constraints", "mem=lots"],
                "bad \"mem\" constraint: must be a non-negative float with optional M/G/T/P suffix",
            ),
            (
                &["wordpress", "--constraints", "colour=red"],
                "unknown constraint \"colour\"",
            ),
            (
                &["wordpress", "--to", "4,5,,"],
                "invalid --to parameter \"4,5,,\"",
            ),
            (
                &["wordpress", "--base", "windows@11"],
                "unknown base \"windows@11\": expected an ubuntu or debian base",
            ),
            (
                &["wordpress", "Bad_Name"],
                "\"Bad_Name\" is not a valid application name",
            ),
            (
                &["Bad_Charm"],
                "\"Bad_Charm\" is not a valid charm name: expected a charm name (such as wordpress) or a path to a charm directory (such as ./wordpress)",
            ),
            (
                &["wordpress", "--config", "port"],
                "invalid --config value \"port\": expected KEY=VALUE",
            ),
            (
                &["cache", "--to", "lxd:0,lxd:1"],
                "2 placement directives given for 1 unit: give at most one per unit",
            ),
            (
                &["cache", "-n", "2", "--to", "lxd:0,lxd:1,lxd:2"],
                "3 placement directives given for 2 units: give at most one per unit",
            ),
            (
                &["cache", "-n", "2", "--to", "scale-with=db"],
                "--to scale-with=db places a unit beside every unit of db: leave out --num-units",
            ),
        ];
        for (args, message) in cases {
            let e = deploy_args(args).request().unwrap_err();
            assert_eq!(e.to_string(), message, "{args:?}");
            assert_eq!(e.exit_code(), 2);
        }
    }

    #[test]
    fn a_config_key_given_twice_is_refused() {
        let e = config_settings(&["a=1".into(), "a=2".into()]).unwrap_err();
        assert_eq!(e.to_string(), "config key \"a\" is given more than once");
    }

    #[test]
    fn a_config_value_may_hold_equals_signs_and_be_empty() {
        let config = config_settings(&["url=http://x/?a=b".into(), "empty=".into()]).unwrap();
        assert_eq!(config["url"], "http://x/?a=b");
        assert_eq!(config["empty"], "");
    }

    #[test]
    fn bad_deploy_input_sends_nothing_and_exits_2() {
        // The controller at --url is not there: a request would fail with
        // exit code 1 and "cannot reach".
        let (code, out, err) = run_offline(&["deploy", "wordpress", "--constraints", "mem=lots"]);
        assert_eq!(code, 2);
        assert_eq!(out, "");
        assert_eq!(
            err,
            "ERROR bad \"mem\" constraint: must be a non-negative float with optional M/G/T/P suffix\n"
        );
    }

    #[test]
    fn deploy_needs_a_charm() {
        assert_eq!(parse(&["deploy"]).unwrap_err().exit_code(), 2);
    }

    #[test]
    fn add_unit_takes_a_count_and_placement() {
        let Command::AddUnit(args) =
            command(&["add-unit", "wordpress", "-n", "2", "--to", "3,lxd:4"])
        else {
            panic!()
        };
        let (app, request) = args.request().unwrap();
        assert_eq!(app.as_str(), "wordpress");
        assert_eq!(
            serde_json::to_value(&request).unwrap(),
            serde_json::json!({"num_units": 2, "to": "3,lxd:4"})
        );
        let Command::AddUnit(args) = command(&["add-unit", "wordpress"]) else {
            panic!()
        };
        assert_eq!(args.request().unwrap().1.num_units, Some(1));
    }

    #[test]
    fn a_deploy_larger_than_one_request_sends_the_first_part_and_adds_the_rest() {
        let args = deploy_args(&["wordpress", "-n", "2500", "--to", "zone=sim-a,lxd"]);
        let request = args.request().unwrap();
        assert_eq!(request.num_units, Some(1000));
        assert_eq!(
            request.to,
            Some(PlacementList::One("zone=sim-a,lxd".into()))
        );
        assert_eq!(
            later_parts(2500, args.to.as_deref(), &args.plan).unwrap(),
            vec![(1000, None), (500, None)]
        );
        // Directives go with the units they place.
        let to: Vec<String> = (0..1500).map(|i| format!("zone=z{i}")).collect();
        let parts = crate::cli::split_units(1200, Some(&to.join(",")));
        assert_eq!(parts.len(), 2);
        assert_eq!(parts[0].0, 1000);
        assert_eq!(parts[0].1.as_ref().unwrap().split(',').count(), 1000);
        assert_eq!(parts[1].0, 200);
        // The last part takes the directives beyond the units, for the
        // controller to judge.
        assert_eq!(parts[1].1.as_ref().unwrap().split(',').count(), 500);
        assert_eq!(crate::cli::split_units(0, None), vec![(0, None)]);
        // A plan is one request.
        let dry = deploy_args(&["wordpress", "-n", "1001", "--dry-run"]);
        assert_eq!(
            later_parts(1001, None, &dry.plan).unwrap_err().to_string(),
            "--dry-run and --if-revision take at most 1000 units (one request); ask for fewer"
        );
    }

    #[test]
    fn add_unit_refuses_zero_units_and_bad_placement() {
        let Command::AddUnit(args) = command(&["add-unit", "wordpress", "-n", "0"]) else {
            panic!()
        };
        assert_eq!(
            args.request().unwrap_err().to_string(),
            "--num-units must be at least 1, got 0"
        );
        let Command::AddUnit(args) = command(&["add-unit", "wordpress", "--to", "kvm:1"]) else {
            panic!()
        };
        assert_eq!(
            args.request().unwrap_err().to_string(),
            "invalid --to parameter \"kvm:1\": invalid placement scope \"kvm\": containers other than lxd are not supported"
        );
        let Command::AddUnit(args) = command(&[
            "add-unit",
            "wordpress",
            "-n",
            "2",
            "--to",
            "lxd:0,lxd:1,lxd:2",
        ]) else {
            panic!()
        };
        let e = args.request().unwrap_err();
        assert_eq!(
            e.to_string(),
            "3 placement directives given for 2 units: give at most one per unit"
        );
        assert_eq!(e.exit_code(), 2);
    }

    #[test]
    fn remove_unit_and_its_alias_destroy_unit_take_several_units() {
        for name in ["remove-unit", "destroy-unit"] {
            let Command::RemoveUnit(args) = command(&[name, "wordpress/0", "mysql/12"]) else {
                panic!("{name}")
            };
            let units: Vec<String> = args
                .units()
                .unwrap()
                .iter()
                .map(|u| u.to_string())
                .collect();
            assert_eq!(units, ["wordpress/0", "mysql/12"]);
        }
        assert_eq!(parse(&["remove-unit"]).unwrap_err().exit_code(), 2);
    }

    #[test]
    fn remove_unit_refuses_a_bad_unit_name_before_sending() {
        let (code, _, err) = run_offline(&["remove-unit", "wordpress/0", "wordpress"]);
        assert_eq!(code, 2);
        assert_eq!(err, "ERROR \"wordpress\" is not a valid unit name\n");
    }

    #[test]
    fn remove_application_refuses_a_bad_name_before_sending() {
        let Command::RemoveApplication(args) = command(&["remove-application", "wordpress"]) else {
            panic!()
        };
        assert_eq!(args.application, "wordpress");
        let (code, _, err) = run_offline(&["remove-application", "Word_Press"]);
        assert_eq!(code, 2);
        assert_eq!(
            err,
            "ERROR \"Word_Press\" is not a valid application name\n"
        );
    }

    fn set_constraints(args: &[&str]) -> Result<(String, String), CliError> {
        let mut full = vec!["set-constraints"];
        full.extend_from_slice(args);
        let Command::SetConstraints(args) = command(&full) else {
            panic!()
        };
        args.request()
            .map(|(app, request)| (app.to_string(), request.constraints))
    }

    #[test]
    fn set_constraints_takes_the_application_first_or_by_flag() {
        let expected = ("wordpress".to_string(), "mem=3072M cores=2".to_string());
        for args in [
            &["wordpress", "mem=3G", "cores=2"][..],
            &["wordpress", "mem=3G cores=2"],
            &["--application", "wordpress", "mem=3G", "cores=2"],
            &["--service", "wordpress", "mem=3G", "cores=2"],
            &["mem=3G", "cores=2", "--service", "wordpress"],
            &["--service-name", "wordpress", "mem=3G", "cores=2"],
        ] {
            assert_eq!(set_constraints(args).unwrap(), expected, "{args:?}");
        }
    }

    #[test]
    fn set_constraints_with_no_constraints_clears_them() {
        assert_eq!(
            set_constraints(&["wordpress"]).unwrap(),
            ("wordpress".to_string(), String::new())
        );
    }

    #[test]
    fn set_constraints_needs_an_application() {
        for args in [&[][..], &["mem=3G"]] {
            let e = set_constraints(args).unwrap_err();
            assert!(
                e.to_string().starts_with("no application name specified"),
                "{e}"
            );
            assert_eq!(e.exit_code(), 2);
        }
    }

    #[test]
    fn set_constraints_refuses_bad_constraints_and_keys_set_twice() {
        assert_eq!(
            set_constraints(&["wordpress", "mem=3G", "mem=4G"])
                .unwrap_err()
                .to_string(),
            "bad \"mem\" constraint: already set"
        );
        assert_eq!(
            set_constraints(&["wordpress", "cores"])
                .unwrap_err()
                .to_string(),
            "malformed constraint \"cores\""
        );
    }

    #[test]
    fn constraints_and_its_alias_get_constraints_take_an_application() {
        for name in ["constraints", "get-constraints"] {
            let Command::Constraints(args) = command(&[name, "wordpress"]) else {
                panic!("{name}")
            };
            assert_eq!(args.application, "wordpress");
        }
        assert_eq!(parse(&["constraints"]).unwrap_err().exit_code(), 2);
    }
}
