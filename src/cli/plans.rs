//! Plans, explanations and budgets at the command line: `--dry-run`,
//! `--if-revision` and `--format` on every command that starts or removes
//! machines ([`PlanArgs`]), `berth explain MACHINE`, `berth set-budget
//! [APP] AMOUNT` and `berth budgets`.

use clap::{Args, ValueEnum};

use crate::api::plans::{BudgetRequest, BudgetsResponse, ExplanationResponse};
use crate::cli::client::segment;
use crate::cli::error::CliError;
use crate::cli::{Io, Session};
use crate::domain::instance_types::HourlyPrice;
use crate::plan::{Action, Plan};
use crate::status::text::Table;

/// How a plan (or an explanation) is printed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum PlanFormat {
    /// A table, with the costs below it.
    #[default]
    Tabular,
    /// The API's JSON.
    Json,
}

/// The options every command that starts or removes machines takes.
#[derive(Clone, Debug, Default, PartialEq, Eq, Args)]
pub struct PlanArgs {
    /// Print what the command would start and remove, where, at what price,
    /// and the model's hourly cost before and after; change nothing (but
    /// for storing a local charm on the controller, for the plan to read).
    #[arg(long)]
    pub dry_run: bool,
    /// Carry the command out only if the model is still at this revision
    /// (the revision a dry run printed); refused if anything changed since.
    #[arg(long, value_name = "REVISION")]
    pub if_revision: Option<i64>,
    /// How --dry-run prints the plan.
    #[arg(long, value_enum, default_value_t = PlanFormat::Tabular, value_name = "FORMAT")]
    pub format: PlanFormat,
}

impl PlanArgs {
    /// The query string of a `DELETE` route: empty, or `?dry_run=true`,
    /// `&if_revision=N` (after `sep`, `?` or `&`).
    pub fn query(&self, sep: char) -> String {
        let mut parts = Vec::new();
        if self.dry_run {
            parts.push("dry_run=true".to_string());
        }
        if let Some(revision) = self.if_revision {
            parts.push(format!("if_revision={revision}"));
        }
        if parts.is_empty() {
            String::new()
        } else {
            format!("{sep}{}", parts.join("&"))
        }
    }

    /// Checks the options before anything is sent.
    ///
    /// # Errors
    ///
    /// [`CliError::Usage`] for `--format` without `--dry-run`, or a
    /// negative revision.
    pub fn check(&self) -> Result<(), CliError> {
        if self.format != PlanFormat::Tabular && !self.dry_run {
            return Err(CliError::Usage(
                "--format applies to --dry-run's plan: give --dry-run too".into(),
            ));
        }
        if let Some(revision) = self.if_revision.filter(|r| *r < 0) {
            return Err(CliError::Usage(format!(
                "--if-revision must be a revision (0 or more), not {revision}"
            )));
        }
        Ok(())
    }

    /// For a dry run: sends the request with `send`, prints the plan and
    /// answers `true`; otherwise `false` and nothing is sent.
    ///
    /// # Errors
    ///
    /// The controller's refusal; an output error.
    pub fn dry_run(
        &self,
        io: &mut Io<'_>,
        send: impl FnOnce() -> Result<Plan, CliError>,
    ) -> Result<bool, CliError> {
        if !self.dry_run {
            return Ok(false);
        }
        let plan = send()?;
        print_plan(&plan, self.format, io)?;
        Ok(true)
    }
}

fn price(p: Option<HourlyPrice>) -> String {
    p.map(|p| format!("${p}")).unwrap_or_default()
}

/// The plan as a table (or JSON), with the model's cost before and after
/// and each budget.
///
/// # Errors
///
/// An output error.
pub fn print_plan(plan: &Plan, format: PlanFormat, io: &mut Io<'_>) -> Result<(), CliError> {
    if format == PlanFormat::Json {
        let text = serde_json::to_string(plan).map_err(std::io::Error::other)?;
        writeln!(io.out, "{text}")?;
        return Ok(());
    }
    if plan.machines.is_empty() {
        writeln!(io.out, "No machine would be started or removed.")?;
    } else {
        let mut table = Table::new(&[
            "Action",
            "Machine",
            "Apps",
            "Type",
            "AZ",
            "$/h",
            "$/month",
            "Constraints",
            "Problem",
        ]);
        table.align_right(5);
        table.align_right(6);
        for m in &plan.machines {
            table.row(vec![
                match m.action {
                    Action::Add => "add",
                    Action::Retry => "retry",
                    Action::Remove => "remove",
                }
                .to_string(),
                m.machine.to_string(),
                m.applications.join(","),
                m.instance_type.clone().unwrap_or_default(),
                m.zone.clone().unwrap_or_default(),
                price(m.hourly_price),
                price(m.monthly_price),
                m.constraints.clone(),
                m.problem.clone().unwrap_or_default(),
            ]);
        }
        write!(io.out, "{}", table.render())?;
    }
    writeln!(io.out)?;
    writeln!(
        io.out,
        "Model cost: ${}/h (${}/month) now, ${}/h (${}/month) after",
        plan.hourly_cost_before,
        plan.monthly_cost_before,
        plan.hourly_cost_after,
        plan.monthly_cost_after
    )?;
    for budget in &plan.budgets {
        writeln!(
            io.out,
            "Budget of {}: ${}/h; ${}/h after{}",
            budget
                .application
                .as_deref()
                .map_or_else(|| "the model".to_string(), |a| format!("application {a}")),
            budget.hourly_budget,
            budget.hourly_cost_after,
            if budget.exceeded {
                " (exceeded: the command would be refused)"
            } else {
                ""
            }
        )?;
    }
    writeln!(
        io.out,
        "Plan made at revision {}: apply it with --if-revision {}",
        plan.revision, plan.revision
    )?;
    Ok(())
}

/// `berth explain MACHINE`.
#[derive(Clone, Debug, PartialEq, Eq, Args)]
pub struct ExplainArgs {
    /// The machine: 3, or 0/lxd/1.
    #[arg(value_name = "MACHINE")]
    pub machine: String,
    /// How to print the explanation.
    #[arg(long, value_enum, default_value_t = PlanFormat::Tabular, value_name = "FORMAT")]
    pub format: PlanFormat,
}

/// `berth explain`: how many instance types each constraint ruled out,
/// which zones were ruled out and why, and the nearest fits.
///
/// # Errors
///
/// A bad machine id before anything is sent; the controller's refusal.
pub fn explain(args: &ExplainArgs, session: &mut Session, io: &mut Io<'_>) -> Result<(), CliError> {
    let id: crate::domain::names::MachineId = args.machine.parse().map_err(CliError::usage)?;
    let path = format!("/v1/machines/{}/explanation", segment(&id.to_string()));
    if args.format == PlanFormat::Json {
        let raw: serde_json::Value = session.client()?.get(&path)?;
        writeln!(io.out, "{raw}")?;
        return Ok(());
    }
    let explained: ExplanationResponse = session.client()?.get(&path)?;
    let message = explained
        .message
        .as_deref()
        .map(|m| format!(": {m}"))
        .unwrap_or_default();
    writeln!(
        io.out,
        "Machine {} is {}{message}",
        explained.machine, explained.state
    )?;
    write!(io.out, "{}", explained.text)?;
    Ok(())
}

/// `berth set-budget [APP] AMOUNT`.
#[derive(Clone, Debug, PartialEq, Eq, Args)]
pub struct SetBudgetArgs {
    /// An application (leave out for the model's budget), then US dollars
    /// an hour (12.50), or `none` to clear the budget.
    #[arg(value_name = "ARGS", num_args = 1..=2, required = true)]
    pub args: Vec<String>,
}

impl SetBudgetArgs {
    /// The request these arguments make.
    ///
    /// # Errors
    ///
    /// [`CliError::Usage`] for a bad application name or amount.
    pub fn request(&self) -> Result<BudgetRequest, CliError> {
        let (application, amount) = match self.args.as_slice() {
            [amount] => (None, amount),
            [app, amount] => (
                Some(
                    app.parse::<crate::domain::names::ApplicationName>()
                        .map_err(CliError::usage)?
                        .to_string(),
                ),
                amount,
            ),
            _ => return Err(CliError::Usage("give [APP] AMOUNT".into())),
        };
        let hourly = match amount.as_str() {
            "none" => None,
            text => Some(
                text.strip_prefix('$')
                    .unwrap_or(text)
                    .parse::<HourlyPrice>()
                    .map_err(CliError::usage)?
                    .to_string(),
            ),
        };
        Ok(BudgetRequest {
            application,
            hourly,
        })
    }
}

fn print_budgets(budgets: &BudgetsResponse, io: &mut Io<'_>) -> Result<(), CliError> {
    let mut table = Table::new(&["Scope", "Budget $/h"]);
    table.align_right(1);
    table.row(vec![
        "model".to_string(),
        budgets
            .model
            .map_or_else(|| "none".to_string(), |b| format!("${b}")),
    ]);
    for (application, budget) in &budgets.applications {
        table.row(vec![application.clone(), format!("${budget}")]);
    }
    write!(io.out, "{}", table.render())?;
    Ok(())
}

/// `berth set-budget`: prints the budgets in force afterwards.
///
/// # Errors
///
/// Bad input before anything is sent; the controller's refusal.
pub fn set_budget(
    args: &SetBudgetArgs,
    session: &mut Session,
    io: &mut Io<'_>,
) -> Result<(), CliError> {
    let request = args.request()?;
    let budgets: BudgetsResponse = session.client()?.put("/v1/budgets", &request)?;
    print_budgets(&budgets, io)
}

/// `berth budgets`.
///
/// # Errors
///
/// The controller's refusal.
pub fn budgets(session: &mut Session, io: &mut Io<'_>) -> Result<(), CliError> {
    let budgets: BudgetsResponse = session.client()?.get("/v1/budgets")?;
    print_budgets(&budgets, io)
}
