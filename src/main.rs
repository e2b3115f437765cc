//! The `berth` binary: `berth serve` runs the controller; every other
//! command is a client of a running controller's API.

use std::process::ExitCode;

use berth::cli::Command;

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

/// One arena for glibc's allocator, which the bundled SQLite allocates
/// from (its page caches, statements and sorts), instead of up to eight per
/// core: the store's reader connections are used from many threads, and
/// each thread's arena held on to what it had freed. With 100,000 machines
/// the peak RSS is about 25 MB lower, at the same speed (BENCHMARKS.md).
/// `MALLOC_ARENA_MAX`, when set, is left to decide.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn one_c_allocator_arena() {
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        // SAFETY: `mallopt` sets one of the allocator's parameters; it is
        // called before the controller starts any thread.
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, 1);
        }
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn one_c_allocator_arena() {}

fn main() -> ExitCode {
    // clap prints a usage error, --help or --version and exits, as
    // `Cli::parse` would; global flags a command has no use for are
    // refused there too, `serve`'s included.
    let cli = berth::cli::parse_from(std::env::args_os()).unwrap_or_else(|e| e.exit());
    match cli.command {
        Command::Serve(args) => {
            one_c_allocator_arena();
            match berth::app::serve_with_args(&args) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("ERROR {e}");
                    ExitCode::FAILURE
                }
            }
        }
        _ => berth::cli::run(cli),
    }
}
