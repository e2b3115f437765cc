//! The `berth` binary: `berth serve` runs the controller; every other
//! command is a client of a running controller's API.

use std::process::ExitCode;

use clap::Parser;

use berth::cli::{Cli, Command};

/// jemalloc (cargo feature `jemalloc`, on by default); see `Cargo.toml`.
#[cfg(feature = "jemalloc")]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Serve(args) => match berth::app::serve_with_args(&args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("ERROR {e}");
                ExitCode::FAILURE
            }
        },
        _ => berth::cli::run(cli),
    }
}
