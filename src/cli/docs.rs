//! `berth completion` and `berth man`: the shell completion scripts and
//! man pages of the command line, made by clap's own generators from the
//! same definitions that parse it, so they never fall behind.

use std::path::{Path, PathBuf};

use clap::{Args, CommandFactory};
use clap_complete::Shell;

use crate::cli::error::CliError;
use crate::cli::{Cli, Io};

/// `berth completion SHELL`.
#[derive(Debug, Clone, PartialEq, Eq, Args)]
pub struct CompletionArgs {
    /// The shell to complete for: bash, zsh, fish, elvish or powershell.
    #[arg(value_name = "SHELL")]
    pub shell: Shell,
}

/// `berth man [DIR]`.
#[derive(Debug, Clone, PartialEq, Eq, Args)]
pub struct ManArgs {
    /// Where to write the pages (created if missing).
    #[arg(value_name = "DIR", default_value = ".")]
    pub dir: PathBuf,
}

/// Prints the completion script for `args.shell`.
///
/// # Errors
///
/// [`CliError::Output`] when standard output cannot be written.
pub fn completion(args: &CompletionArgs, io: &mut Io<'_>) -> Result<(), CliError> {
    let mut command = Cli::command();
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut command, "berth", &mut script);
    io.out.write_all(&script).map_err(CliError::Output)
}

/// Writes `berth.1` and a page for every command and nested command
/// (`berth-deploy.1`, `berth-sim-faults-set.1`, ...) into `args.dir`, as
/// `clap_mangen::generate_to` does, and prints the path of each page
/// written.
///
/// # Errors
///
/// [`CliError::File`] when the directory or a page cannot be written.
pub fn man(args: &ManArgs, io: &mut Io<'_>) -> Result<(), CliError> {
    let fail = |e: std::io::Error| {
        CliError::File(format!(
            "cannot write man pages to {}: {e}",
            args.dir.display()
        ))
    };
    std::fs::create_dir_all(&args.dir).map_err(fail)?;
    // Built, so that each command has its page's name (`berth-deploy`).
    let mut command = Cli::command().disable_help_subcommand(true);
    command.build();
    let mut pages = Vec::new();
    write_pages(command, &args.dir, &mut pages).map_err(fail)?;
    for page in pages {
        writeln!(io.out, "{}", page.display()).map_err(CliError::Output)?;
    }
    Ok(())
}

/// Writes the page of `command` into `dir`, then those of its commands
/// that are not hidden, depth first; adds each page's path to `pages`.
fn write_pages(
    command: clap::Command,
    dir: &Path,
    pages: &mut Vec<PathBuf>,
) -> std::io::Result<()> {
    pages.push(clap_mangen::Man::new(command.clone()).generate_to(dir)?);
    for sub in command.get_subcommands().filter(|c| !c.is_hide_set()) {
        write_pages(sub.clone(), dir, pages)?;
    }
    Ok(())
}
