//! Load: a real `berth serve` process deploys units while 100 status
//! readers poll and 500 event-stream clients follow the change log. Every
//! stream must receive every revision from before the deploy to after it,
//! in order, with none skipped, repeated or dropped, and every status
//! request must succeed. The size is bounded for the suite; `cargo bench
//! --bench load` runs 10,000 units and measures the deploy against its
//! time alone (figures in RELIABILITY.md).

use crate::support::load::{berth_binary, run, LoadPlan};

const UNITS: usize = 1000;
const STATUS_READERS: usize = 100;
const STREAMS: usize = 500;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_hundred_streams_and_a_hundred_status_readers_miss_nothing_during_a_deploy() {
    let _turn = crate::support::heavy_test().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let report = run(
        &berth_binary(),
        dir.path(),
        LoadPlan {
            units: UNITS,
            status_readers: STATUS_READERS,
            streams: STREAMS,
            streams_take_gzip: true,
        },
        tokio::runtime::Handle::current(),
    )
    .await;
    println!(
        "{UNITS} units settled in {:.2} s with {STATUS_READERS} status readers ({} requests) and {STREAMS} streams; revisions {}..{}; {} events delivered; streams drained {:.2} s after; {:.1} KiB per open stream; peak RSS {} KiB; CPU while deploying: controller {:.2} s, clients {:.2} s; kernel TCP memory peak {} KiB",
        report.settled.as_secs_f64(),
        report.status_requests,
        report.revision_before,
        report.revision_after,
        report.events_delivered(),
        report.streams_drained.as_secs_f64(),
        report.kib_per_stream(),
        report.peak_rss_kib,
        report.controller_cpu_s,
        report.clients_cpu_s,
        report.peak_tcp_kib,
    );
    assert!(
        report.status_failures.is_empty(),
        "status requests failed: {:?}",
        &report.status_failures[..report.status_failures.len().min(5)]
    );
    assert!(report.status_requests >= STATUS_READERS);
    let expected = usize::try_from(report.revision_after - report.revision_before).unwrap();
    assert!(expected >= UNITS, "the deploy wrote {expected} changes");
    for (i, stream) in report.streams.iter().enumerate() {
        assert_eq!(stream.error, None, "stream {i}");
        assert!(
            stream.breaks.is_empty(),
            "stream {i} skipped or repeated: {:?}",
            &stream.breaks[..stream.breaks.len().min(5)]
        );
        assert_eq!(stream.first, Some(report.revision_before + 1), "stream {i}");
        assert!(stream.last >= Some(report.revision_after), "stream {i}");
        assert!(
            stream.events >= expected,
            "stream {i} got {} of {expected}",
            stream.events
        );
    }
}
