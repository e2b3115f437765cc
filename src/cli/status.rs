//! `berth status`: the model as `juju status` shows it.
//!
//! The status is read from the API (`GET /v1/status`) and printed by
//! [`crate::status::text`]: Juju's tables by default, `--format json` the
//! API's JSON on one line, `--format yaml` the same data as YAML.
//! `--watch` reprints the status after every change, following the change
//! log, and reads it again with backoff while the controller restarts or
//! sheds load; piped, its YAML frames are one YAML document each. Names
//! (`berth status wordpress mysql/0`) and `--machines 1-100` show only
//! part of it (see [`crate::status::filter`]).

use std::time::SystemTime;

use clap::{Args, ValueEnum};

use crate::cli::client::Client;
use crate::cli::error::CliError;
use crate::cli::follow::{retry_transient, Backoff, Follower};
use crate::cli::{Io, Session};
use crate::status::filter::StatusFilter;
use crate::status::text::{self, Shown};
use crate::status::view::Status;

/// The status route.
pub const PATH: &str = "/v1/status";

/// How to print the status.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// Juju's tables.
    #[default]
    Tabular,
    /// The API's JSON, on one line.
    Json,
    /// The same data as YAML.
    Yaml,
}

/// `berth status`.
#[derive(Clone, Debug, PartialEq, Eq, Args)]
pub struct StatusArgs {
    /// Show only these applications and units (`wordpress`,
    /// `wordpress/3`), with the machines they are on.
    #[arg(value_name = "APPLICATION|UNIT")]
    pub filter: Vec<String>,
    /// Show only these machines (and their containers) and the units on
    /// them: numbers and ranges such as `1-100,205`.
    #[arg(long, value_name = "RANGES")]
    pub machines: Option<String>,
    #[arg(long, value_enum, default_value_t = Format::Tabular)]
    pub format: Format,
    /// Print the status again after every change, until interrupted.
    #[arg(long)]
    pub watch: bool,
}

/// The status in `format`, ending in a newline; `shown` says whether a
/// filter picked it (for the tables' word when it is empty).
///
/// # Errors
///
/// [`CliError::Protocol`] if the status cannot be encoded (it always
/// can: it was decoded from the same types).
pub fn render(status: &Status, shown: Shown, format: Format) -> Result<String, CliError> {
    let encoding = |e: String| CliError::Protocol {
        url: PATH.to_string(),
        reason: format!("cannot encode the status: {e}"),
    };
    match format {
        Format::Tabular => Ok(text::tabular(
            status,
            shown,
            env!("CARGO_PKG_VERSION"),
            &text::utc_clock(SystemTime::now()),
        )),
        Format::Json => text::json(status).map_err(|e| encoding(e.to_string())),
        Format::Yaml => text::yaml(status).map_err(|e| encoding(e.to_string())),
    }
}

/// `berth status`.
///
/// # Errors
///
/// The controller's refusal.
pub fn run(args: &StatusArgs, session: &mut Session, io: &mut Io<'_>) -> Result<(), CliError> {
    // A filter that does not parse is refused before the controller is
    // asked.
    let filter = filter_of(args)?;
    let shown = match filter.is_whole() {
        true => Shown::Whole,
        false => Shown::Filtered,
    };
    let path = format!("{PATH}{}", filter.query());
    let client = session.client()?.clone();
    if args.watch {
        return watch(&client, &path, shown, args.format, io, None);
    }
    let status: Status = client.get(&path)?;
    write!(io.out, "{}", render(&status, shown, args.format)?)?;
    Ok(())
}

/// The filter `args` ask for: each name with a `/` is a unit, any other an
/// application.
///
/// # Errors
///
/// [`CliError::Usage`] for a name or range that does not parse.
pub fn filter_of(args: &StatusArgs) -> Result<StatusFilter, CliError> {
    let (units, applications): (Vec<&str>, Vec<&str>) = args
        .filter
        .iter()
        .map(String::as_str)
        .partition(|name| name.contains('/'));
    let joined = |names: Vec<&str>| (!names.is_empty()).then(|| names.join(","));
    StatusFilter::parse(
        joined(applications).as_deref(),
        joined(units).as_deref(),
        args.machines.as_deref(),
    )
    .map_err(|e| CliError::Usage(e.to_string()))
}

/// Prints the status at `path` (`/v1/status`, or a filtered one), then
/// again after every change, `frames` times (or until interrupted). On a
/// terminal each print replaces the last; in a file or pipe they follow
/// each other: YAML frames as the documents of one YAML stream, JSON
/// frames and tables a blank line apart. While the controller cannot be
/// reached, or answers 5xx, the status is read again after a backoff
/// delay.
///
/// # Errors
///
/// The controller's refusal for another reason (a wrong token, a filter
/// it does not take).
pub fn watch(
    client: &Client,
    path: &str,
    shown: Shown,
    format: Format,
    io: &mut Io<'_>,
    frames: Option<usize>,
) -> Result<(), CliError> {
    let mut follower = Follower::new(client);
    let mut retry = Backoff::new();
    let mut printed = 0usize;
    loop {
        let status: Status = retry_transient(&mut retry, None, |_| client.get(path))?;
        let text = render(&status, shown, format)?;
        print_frame(&text, format, printed == 0, io)?;
        printed += 1;
        if frames.is_some_and(|n| printed >= n) {
            return Ok(());
        }
        follower.next_change(status.model.revision, None, |_| true)?;
    }
}

/// Prints one frame of a watch, `text` in `format`. On a terminal it
/// replaces the screen; elsewhere frames follow each other: YAML frames
/// each as a document of one YAML stream (after `---`), JSON frames (a
/// line each) and tables a blank line apart. `first` says whether it is
/// the first.
///
/// # Errors
///
/// [`CliError::Output`].
fn print_frame(text: &str, format: Format, first: bool, io: &mut Io<'_>) -> Result<(), CliError> {
    if io.tty {
        write!(io.out, "\x1b[H\x1b[2J{text}")?;
    } else {
        match format {
            Format::Yaml => writeln!(io.out, "---")?,
            Format::Json | Format::Tabular if !first => writeln!(io.out)?,
            Format::Json | Format::Tabular => {}
        }
        write!(io.out, "{text}")?;
    }
    io.out.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::tests::{command, parse};
    use crate::cli::Command;

    fn empty() -> Status {
        serde_json::from_value(serde_json::json!({
            "model": {
                "name": "default", "uuid": "model-uuid", "type": "iaas",
                "controller": "0f3c9a2e", "cloud": "sim", "revision": 42,
            },
            "machines": {},
            "applications": {},
        }))
        .unwrap()
    }

    #[test]
    fn each_format_prints_through_its_status_renderer() {
        let status = empty();
        assert_eq!(
            render(&status, Shown::Whole, Format::Json).unwrap(),
            text::json(&status).unwrap()
        );
        assert_eq!(
            render(&status, Shown::Whole, Format::Yaml).unwrap(),
            text::yaml(&status).unwrap()
        );
        let table = render(&status, Shown::Whole, Format::Tabular).unwrap();
        assert!(table.starts_with("Model    Controller"), "{table}");
        assert!(table.ends_with("Model \"default\" is empty.\n"), "{table}");
    }

    #[test]
    fn piped_yaml_frames_are_one_yaml_stream_of_a_document_each() {
        use serde::Deserialize;

        let mut second = empty();
        second.model.revision = 43;
        let mut out = Vec::new();
        let mut io = Io {
            out: &mut out,
            err: &mut std::io::sink(),
            tty: false,
        };
        for (status, first) in [(empty(), true), (second.clone(), false)] {
            let text = render(&status, Shown::Whole, Format::Yaml).unwrap();
            print_frame(&text, Format::Yaml, first, &mut io).unwrap();
        }
        let out = String::from_utf8(out).unwrap();
        assert!(out.starts_with("---\nmodel:\n"), "{out}");
        let frames: Vec<Status> = serde_yaml_ng::Deserializer::from_str(&out)
            .map(|document| Status::deserialize(document).unwrap())
            .collect();
        assert_eq!(frames, [empty(), second]);
    }

    #[test]
    fn piped_json_and_table_frames_are_a_blank_line_apart() {
        let mut out = Vec::new();
        let mut io = Io {
            out: &mut out,
            err: &mut std::io::sink(),
            tty: false,
        };
        for first in [true, false] {
            print_frame("{}\n", Format::Json, first, &mut io).unwrap();
        }
        for first in [true, false] {
            print_frame("Model\n", Format::Tabular, first, &mut io).unwrap();
        }
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "{}\n\n{}\nModel\n\nModel\n"
        );
    }

    #[test]
    fn status_takes_a_format_and_watch() {
        let Command::Status(args) = command(&["status"]) else {
            panic!()
        };
        assert_eq!(
            args,
            StatusArgs {
                filter: Vec::new(),
                machines: None,
                format: Format::Tabular,
                watch: false
            }
        );
        for (given, format) in [
            ("tabular", Format::Tabular),
            ("json", Format::Json),
            ("yaml", Format::Yaml),
        ] {
            let Command::Status(args) = command(&["status", "--format", given, "--watch"]) else {
                panic!()
            };
            assert_eq!((args.format, args.watch), (format, true));
        }
        let Command::Status(args) = command(&["status", "--format=json"]) else {
            panic!()
        };
        assert_eq!(args.format, Format::Json);
        assert_eq!(
            parse(&["status", "--format", "xml"])
                .unwrap_err()
                .exit_code(),
            2
        );
    }

    #[test]
    fn status_takes_applications_units_and_machine_ranges() {
        let Command::Status(args) = command(&[
            "status",
            "wordpress",
            "mysql/0",
            "ntp",
            "--machines",
            "7,1-3",
        ]) else {
            panic!()
        };
        assert_eq!(
            filter_of(&args).unwrap().query(),
            "?application=ntp,wordpress&unit=mysql/0&machines=1-3,7"
        );
        let Command::Status(args) = command(&["status"]) else {
            panic!()
        };
        assert!(filter_of(&args).unwrap().is_whole());
        for (words, message) in [
            (
                &["status", "Word"][..],
                r#""Word" is not a valid application name"#,
            ),
            (
                &["status", "mysql/x"][..],
                r#""mysql/x" is not a valid unit name"#,
            ),
            (
                &["status", "--machines", "3-1"][..],
                r#"machine range "3-1" runs backwards: write the smaller number first"#,
            ),
            (
                &["status", "--machines", "a"][..],
                r#""a" is not a machine range: expected machine numbers and ranges such as 1-100,205"#,
            ),
        ] {
            let Command::Status(args) = command(words) else {
                panic!()
            };
            let error = filter_of(&args).unwrap_err();
            assert_eq!(
                (error.to_string(), error.exit_code()),
                (message.to_string(), 2)
            );
        }
    }
}
