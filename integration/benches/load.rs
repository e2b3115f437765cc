//! Event streams and status readers under a deploy: `cargo bench --bench
//! load`.
//!
//! For each size (default 10,000 units; set `BERTH_BENCH_SIZES`), against a
//! real `berth serve` process on SQLite and the simulated cloud with no
//! delays, it deploys the units twice on fresh data directories: alone,
//! then with 100 status readers polling and 500 event-stream clients
//! following the change log from the revision before the deploy (set
//! `BERTH_BENCH_READERS` and `BERTH_BENCH_STREAMS` to change them). It
//! prints both times to settled and their ratio, the events delivered, how
//! long the streams took to receive the last revision after the deploy
//! settled, the memory each open stream costs and the controller's peak
//! memory; a second row gives the bytes the streams received and the CPU
//! seconds the controller and the clients spent while the deploy ran, and
//! the most memory the kernel held for TCP (every socket on the machine)
//! until the streams had the last revision. It writes
//! `target/bench/load.json`. The clients run in this process on the
//! same cores as the controller, on a runtime of their own; the requests
//! that drive the deploy and time it run on another, at normal priority.
//! The stream clients take gzip, as browsers do; `BERTH_BENCH_STREAM_GZIP=0`
//! has them ask for the stream as it is.
//! `BERTH_BENCH_CLIENT_NICE=19` lowers the clients' threads' priority, and
//! `BERTH_BENCH_CLIENT_IDLE=1` runs them under `SCHED_IDLE`, which takes
//! only the time the controller leaves and gives way at once when it
//! wakes: a stand-in for clients on other machines, so that the figure
//! shows the controller's own cost rather than the clients' competition
//! for two cores. Nothing is asserted: the figures go into
//! RELIABILITY.md. It checks what the suite checks: every stream received
//! every revision in order, and no status request failed.

#[path = "../support/load.rs"]
mod load;

use std::path::{Path, PathBuf};

use serde_json::json;

use load::{berth_binary, run, LoadPlan};

fn setting(name: &str, default: Vec<usize>) -> Vec<usize> {
    std::env::var(name)
        .ok()
        .map(|s| s.split(',').filter_map(|n| n.trim().parse().ok()).collect())
        .filter(|v: &Vec<usize>| !v.is_empty())
        .unwrap_or(default)
}

fn bench_root() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target"));
    target.join("bench")
}

fn main() {
    let client_nice = setting("BERTH_BENCH_CLIENT_NICE", vec![0])[0] as i32;
    let client_idle = setting("BERTH_BENCH_CLIENT_IDLE", vec![0])[0] != 0;
    let streams_take_gzip = setting("BERTH_BENCH_STREAM_GZIP", vec![1])[0] != 0;
    // The deploy's own requests, at normal priority.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let clients = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .on_thread_start(move || {
            // Linux's nice value and scheduling policy belong to the
            // thread: this lowers the clients' worker threads, not the
            // deploy's or the controller (a separate process started from
            // the main thread).
            unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, client_nice) };
            if client_idle {
                let param = libc::sched_param { sched_priority: 0 };
                unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) };
            }
        })
        .build()
        .expect("clients' runtime");
    let readers = setting("BERTH_BENCH_READERS", vec![100])[0];
    let streams = setting("BERTH_BENCH_STREAMS", vec![500])[0];
    let dir = bench_root().join("load");
    let mut rows = Vec::new();
    println!(
        "{:>8} {:>8} {:>8} {:>9} {:>9} {:>7} {:>12} {:>10} {:>9} {:>11} {:>9}",
        "units",
        "readers",
        "streams",
        "alone s",
        "loaded s",
        "ratio",
        "events",
        "status rq",
        "drain s",
        "KiB/stream",
        "peak MiB",
    );
    println!(
        "{:>8} {:>12} {:>10} {:>10} {:>10} {:>10}",
        "", "bytes", "chunks", "berth cpu", "client cpu", "TCP MiB"
    );
    for units in setting("BERTH_BENCH_SIZES", vec![10_000]) {
        let alone = runtime.block_on(run(
            &berth_binary(),
            &dir,
            LoadPlan {
                units,
                status_readers: 0,
                streams: 0,
                streams_take_gzip,
            },
            clients.handle().clone(),
        ));
        let loaded = runtime.block_on(run(
            &berth_binary(),
            &dir,
            LoadPlan {
                units,
                status_readers: readers,
                streams,
                streams_take_gzip,
            },
            clients.handle().clone(),
        ));
        let complete = loaded.streams.iter().all(|s| {
            s.error.is_none()
                && s.breaks.is_empty()
                && s.first == Some(loaded.revision_before + 1)
                && s.last >= Some(loaded.revision_after)
        });
        assert!(complete, "a stream missed, repeated or lost revisions");
        assert!(
            loaded.status_failures.is_empty(),
            "status requests failed: {:?}",
            &loaded.status_failures[..loaded.status_failures.len().min(5)]
        );
        let ratio = loaded.settled.as_secs_f64() / alone.settled.as_secs_f64();
        println!(
            "{:>8} {:>8} {:>8} {:>9.2} {:>9.2} {:>7.2} {:>12} {:>10} {:>9.2} {:>11.1} {:>9.0}",
            units,
            readers,
            streams,
            alone.settled.as_secs_f64(),
            loaded.settled.as_secs_f64(),
            ratio,
            loaded.events_delivered(),
            loaded.status_requests,
            loaded.streams_drained.as_secs_f64(),
            loaded.kib_per_stream(),
            loaded.peak_rss_kib as f64 / 1024.0,
        );
        println!(
            "{:>8} {:>12} {:>10} {:>10.2} {:>10.2} {:>10.0}   (alone: berth cpu {:.2}, TCP MiB {:.0})",
            "",
            loaded.streams.iter().map(|s| s.bytes).sum::<usize>(),
            loaded.streams.iter().map(|s| s.chunks).sum::<usize>(),
            loaded.controller_cpu_s,
            loaded.clients_cpu_s,
            loaded.peak_tcp_kib as f64 / 1024.0,
            alone.controller_cpu_s,
            alone.peak_tcp_kib as f64 / 1024.0,
        );
        rows.push(json!({
            "units": units,
            "status_readers": readers,
            "streams": streams,
            "alone_settled_s": alone.settled.as_secs_f64(),
            "loaded_settled_s": loaded.settled.as_secs_f64(),
            "ratio": ratio,
            "revisions": loaded.revision_after - loaded.revision_before,
            "events_delivered": loaded.events_delivered(),
            "status_requests": loaded.status_requests,
            "streams_drained_s": loaded.streams_drained.as_secs_f64(),
            "kib_per_stream": loaded.kib_per_stream(),
            "peak_rss_mib": loaded.peak_rss_kib as f64 / 1024.0,
            "stream_bytes": loaded.streams.iter().map(|s| s.bytes).sum::<usize>(),
            "controller_cpu_s": loaded.controller_cpu_s,
            "alone_controller_cpu_s": alone.controller_cpu_s,
            "clients_cpu_s": loaded.clients_cpu_s,
            "peak_tcp_mib": loaded.peak_tcp_kib as f64 / 1024.0,
            "client_nice": client_nice,
            "client_idle": client_idle,
            "streams_take_gzip": streams_take_gzip,
        }));
    }
    let out = bench_root().join("load.json");
    std::fs::write(
        &out,
        serde_json::to_string_pretty(&json!({ "sizes": rows })).expect("json"),
    )
    .expect("write load.json");
    println!("wrote {}", out.display());
}
