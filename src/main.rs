//! The `berth` binary: `berth serve` runs the controller; every other
//! command is a client of a running controller's API.

use std::process::ExitCode;

use clap::Parser;

use berth::cli::{Cli, Command};

/// jemalloc (cargo feature `jemalloc`, on by default); see `Cargo.toml`.
#[cfg(feature = "jemalloc")]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's settings, read once as it starts (the environment variable
/// `_RJEM_MALLOC_CONF` overrides them).
#[cfg(feature = "jemalloc")]
mod allocator_settings {
    /// A C string jemalloc reads as its `malloc_conf`.
    #[repr(transparent)]
    pub struct Settings(*const std::ffi::c_char);

    // SAFETY: the pointer is to a static string, never written.
    unsafe impl Sync for Settings {}

    /// One arena instead of four per core: the controller's threads
    /// allocate what other threads free (records read on one, kept by
    /// the actors on another), which arenas of their own hold on to.
    /// With 100,000 machines the peak RSS is about 7 % lower, at the same
    /// speed (BENCHMARKS.md).
    #[used]
    #[unsafe(export_name = "_rjem_malloc_conf")]
    pub static MALLOC_CONF: Settings = Settings(c"narenas:1".as_ptr());
}

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
