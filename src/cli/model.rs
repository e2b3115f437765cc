//! Model commands: `set-model-constraints` and `model-constraints`.

use clap::Args;

use crate::api::applications::{ConstraintsRequest, ConstraintsResponse};
use crate::cli::applications::canonical_constraints;
use crate::cli::error::CliError;
use crate::cli::plans::PlanArgs;
use crate::cli::{Io, Session};

/// The route of the model constraints.
const PATH: &str = "/v1/model/constraints";

/// `berth set-model-constraints KEY=VALUE...`.
#[derive(Clone, Debug, PartialEq, Eq, Args)]
pub struct SetModelConstraintsArgs {
    /// The constraints: mem=4G cores=2. None clears them all.
    #[arg(value_name = "CONSTRAINTS")]
    pub constraints: Vec<String>,
    #[command(flatten)]
    pub plan: PlanArgs,
}

impl SetModelConstraintsArgs {
    /// The request these arguments make.
    ///
    /// # Errors
    ///
    /// [`CliError::Usage`] with the constraint parser's message.
    pub fn request(&self) -> Result<ConstraintsRequest, CliError> {
        Ok(ConstraintsRequest {
            constraints: canonical_constraints(&self.constraints)?,
            dry_run: self.plan.dry_run,
            if_revision: self.plan.if_revision,
        })
    }
}

/// `berth set-model-constraints`: prints nothing (as Juju); warnings go to
/// standard error.
///
/// # Errors
///
/// Bad constraints before anything is sent; the controller's refusal.
pub fn set_constraints(
    args: &SetModelConstraintsArgs,
    session: &mut Session,
    io: &mut Io<'_>,
) -> Result<(), CliError> {
    args.plan.check()?;
    let request = args.request()?;
    if args
        .plan
        .dry_run(io, || session.client()?.put(PATH, &request))?
    {
        return Ok(());
    }
    let set: ConstraintsResponse = session.client()?.put(PATH, &request)?;
    io.warnings(&set.warnings)
}

/// `berth model-constraints`: prints the model constraints in canonical
/// form.
///
/// # Errors
///
/// The controller's refusal.
pub fn constraints(session: &mut Session, io: &mut Io<'_>) -> Result<(), CliError> {
    let shown: ConstraintsResponse = session.client()?.get(PATH)?;
    writeln!(io.out, "{}", shown.constraints)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::cli::tests::{command, run_offline};
    use crate::cli::Command;

    #[test]
    fn set_model_constraints_takes_words_or_one_string() {
        for args in [
            &["set-model-constraints", "mem=4G", "cores=2"][..],
            &["set-model-constraints", "mem=4G cores=2"],
        ] {
            let Command::SetModelConstraints(args) = command(args) else {
                panic!()
            };
            assert_eq!(args.request().unwrap().constraints, "mem=4096M cores=2");
        }
    }

    #[test]
    fn set_model_constraints_with_nothing_clears_them() {
        let Command::SetModelConstraints(args) = command(&["set-model-constraints"]) else {
            panic!()
        };
        assert_eq!(args.request().unwrap().constraints, "");
    }

    #[test]
    fn bad_model_constraints_are_refused_before_sending() {
        let (code, out, err) = run_offline(&["set-model-constraints", "cores=many"]);
        assert_eq!((code, out.as_str()), (2, ""));
        assert_eq!(
            err,
            "ERROR bad \"cores\" constraint: must be a non-negative integer\n"
        );
    }

    #[test]
    fn model_constraints_and_its_alias_take_no_arguments() {
        for name in ["model-constraints", "get-model-constraints"] {
            assert!(matches!(command(&[name]), Command::ModelConstraints));
        }
        assert!(crate::cli::tests::parse(&["model-constraints", "x"]).is_err());
    }
}
