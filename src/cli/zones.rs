//! Zone commands: `zones`, `enable-zone` and `disable-zone`.

use clap::Args;

use crate::api::zones::ZoneView;
use crate::cli::client::segment;
use crate::cli::error::CliError;
use crate::cli::{Io, Session};
use crate::status::text::Table;

/// `berth enable-zone ZONE`, `berth disable-zone ZONE`.
#[derive(Clone, Debug, PartialEq, Eq, Args)]
pub struct ZoneArgs {
    /// The zone's name, as `berth zones` lists it.
    #[arg(value_name = "ZONE")]
    pub zone: String,
}

/// One word for a zone's state: `available`, `disabled` (by an
/// administrator) or `unavailable` (the provider says so).
pub fn zone_state(zone: &ZoneView) -> &'static str {
    if zone.available {
        "available"
    } else if zone.disabled {
        "disabled"
    } else {
        "unavailable"
    }
}

/// The zones as a table: `Zone  State  Message`.
pub fn zones_table(zones: &[ZoneView]) -> String {
    let mut table = Table::new(&["Zone", "State", "Message"]);
    for zone in zones {
        table.row(vec![
            zone.name.clone(),
            zone_state(zone).to_string(),
            zone.reason.clone().unwrap_or_default(),
        ]);
    }
    table.render()
}

/// `berth zones`.
///
/// # Errors
///
/// The controller's refusal.
pub fn list(session: &mut Session, io: &mut Io<'_>) -> Result<(), CliError> {
    let zones: Vec<ZoneView> = session.client()?.get("/v1/zones")?;
    if zones.is_empty() {
        writeln!(io.out, "No availability zones are known yet.")?;
        return Ok(());
    }
    write!(io.out, "{}", zones_table(&zones))?;
    Ok(())
}

/// `berth enable-zone`, `berth disable-zone`: prints the zone's state
/// after the change.
///
/// # Errors
///
/// The controller's refusal (404 for an unknown zone).
pub fn set_enabled(
    args: &ZoneArgs,
    enabled: bool,
    session: &mut Session,
    io: &mut Io<'_>,
) -> Result<(), CliError> {
    if args.zone.trim().is_empty() {
        return Err(CliError::Usage("the zone name is empty".into()));
    }
    let verb = if enabled { "enable" } else { "disable" };
    let path = format!("/v1/zones/{}/{verb}", segment(&args.zone));
    let zone: ZoneView = session.client()?.post(&path, &serde_json::json!({}))?;
    match &zone.reason {
        Some(reason) => writeln!(
            io.out,
            "zone {}: {} ({reason})",
            zone.name,
            zone_state(&zone)
        )?,
        None => writeln!(io.out, "zone {}: {}", zone.name, zone_state(&zone))?,
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::tests::{command, parse};
    use crate::cli::Command;

    fn zone(
        name: &str,
        provider_available: bool,
        disabled: bool,
        reason: Option<&str>,
    ) -> ZoneView {
        ZoneView {
            name: name.into(),
            available: provider_available && !disabled,
            provider_available,
            disabled,
            reason: reason.map(str::to_string),
        }
    }

    #[test]
    fn zones_are_a_table_of_state_and_reason() {
        let zones = [
            zone("sim-a", true, false, None),
            zone("sim-b", true, true, Some("disabled by an administrator")),
            zone("sim-c", false, false, Some("impaired")),
        ];
        assert_eq!(
            zones_table(&zones),
            "Zone   State        Message\n\
             sim-a  available\n\
             sim-b  disabled     disabled by an administrator\n\
             sim-c  unavailable  impaired\n"
        );
    }

    #[test]
    fn zone_commands_parse() {
        assert!(matches!(command(&["zones"]), Command::Zones));
        let Command::EnableZone(args) = command(&["enable-zone", "sim-a"]) else {
            panic!()
        };
        assert_eq!(args.zone, "sim-a");
        let Command::DisableZone(args) = command(&["disable-zone", "sim-b"]) else {
            panic!()
        };
        assert_eq!(args.zone, "sim-b");
        assert_eq!(parse(&["enable-zone"]).unwrap_err().exit_code(), 2);
    }
}
