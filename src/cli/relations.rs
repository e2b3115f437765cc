//! Relation commands: `integrate` (alias `relate`) and `remove-relation`.

use clap::Args;

use crate::api::relations::{RelationRequest, RelationResponse};
use crate::cli::error::CliError;
use crate::cli::{Io, Session};
use crate::domain::charm::EndpointSpec;

/// `berth integrate A B`, `berth remove-relation A B`.
#[derive(Clone, Debug, PartialEq, Eq, Args)]
pub struct IntegrateArgs {
    /// An application, optionally with an endpoint: wordpress, mysql:db.
    #[arg(value_name = "A")]
    pub first: String,
    #[arg(value_name = "B")]
    pub second: String,
}

impl IntegrateArgs {
    /// The request these arguments make.
    ///
    /// # Errors
    ///
    /// [`CliError::Usage`] for an endpoint that does not parse.
    pub fn request(&self) -> Result<RelationRequest, CliError> {
        let parse = |s: &str| -> Result<String, CliError> {
            Ok(s.parse::<EndpointSpec>()
                .map_err(CliError::usage)?
                .to_string())
        };
        Ok(RelationRequest {
            endpoints: vec![parse(&self.first)?, parse(&self.second)?],
        })
    }
}

/// `berth integrate`: prints the relation made, requirer first.
///
/// # Errors
///
/// Bad endpoints before anything is sent; the controller's refusal.
pub fn integrate(
    args: &IntegrateArgs,
    session: &mut Session,
    io: &mut Io<'_>,
) -> Result<(), CliError> {
    let request = args.request()?;
    let made: RelationResponse = session.client()?.post("/v1/relations", &request)?;
    writeln!(
        io.out,
        "integrated {} with {} (interface {}, scope {})",
        made.requirer, made.provider, made.interface, made.scope
    )?;
    Ok(())
}

/// `berth remove-relation`.
///
/// # Errors
///
/// Bad endpoints before anything is sent; the controller's refusal.
pub fn remove_relation(
    args: &IntegrateArgs,
    session: &mut Session,
    io: &mut Io<'_>,
) -> Result<(), CliError> {
    let request = args.request()?;
    session
        .client()?
        .post_no_content("/v1/relations/remove", &request)?;
    writeln!(
        io.out,
        "removed the relation between {} and {}",
        request.endpoints[0], request.endpoints[1]
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::cli::tests::{command, parse, run_offline};
    use crate::cli::Command;

    #[test]
    fn integrate_and_its_alias_relate_take_two_endpoints() {
        for name in ["integrate", "relate"] {
            let Command::Integrate(args) = command(&[name, "wordpress", "mysql:db"]) else {
                panic!("{name}")
            };
            assert_eq!(args.request().unwrap().endpoints, ["wordpress", "mysql:db"]);
        }
        assert_eq!(
            parse(&["integrate", "wordpress"]).unwrap_err().exit_code(),
            2
        );
        assert_eq!(
            parse(&["integrate", "a", "b", "c"])
                .unwrap_err()
                .exit_code(),
            2
        );
    }

    #[test]
    fn remove_relation_takes_two_endpoints() {
        let Command::RemoveRelation(args) = command(&["remove-relation", "ntp", "mysql"]) else {
            panic!()
        };
        assert_eq!(args.request().unwrap().endpoints, ["ntp", "mysql"]);
    }

    #[test]
    fn a_bad_endpoint_is_refused_before_sending() {
        let (code, out, err) = run_offline(&["integrate", "wordpress", "mysql:"]);
        assert_eq!((code, out.as_str()), (2, ""));
        assert_eq!(err, "ERROR invalid endpoint \"mysql:\"\n");
    }
}
