//! What a store write costs: `cargo bench --bench store`.
//!
//! Measures, on SQLite in WAL mode in a temporary directory (or on
//! PostgreSQL when `BERTH_BENCH_POSTGRES_URL` names an empty database):
//! - one writer, one operation at a time (each its own commit);
//! - many concurrent writers, which the writer groups into shared commits;
//! - one deploy of 1,000 units (one transaction);
//! - reading the full status with 1,000 machines, while writes go on;
//! - planning a deploy of 10,000 units (a dry run: the deploy carried out
//!   in a savepoint, each machine given its zone and instance type over
//!   the EC2 catalogue, the costs summed, and everything undone).
//!
//! Prints a table; nothing is asserted (speed is measured, not tested).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use std::sync::{Arc, Mutex};

use berth::charms::resolve;
use berth::contracts::provider::ProviderZone;
use berth::domain::constraints::Constraints;
use berth::domain::instance_types::{Catalogue, HourlyPrice};
use berth::plan::{plan, Plan, Pricing};
use berth::store::applications::DeployRequest;
use berth::store::db::DatabaseUrl;
use berth::store::machines::AddMachines;
use berth::store::plans::{Check, Guard};
use berth::store::Store;

fn open() -> (Store, Option<tempfile::TempDir>) {
    if let Ok(url) = std::env::var("BERTH_BENCH_POSTGRES_URL") {
        return (
            Store::open(&DatabaseUrl::parse(&url).expect("url")).expect("open"),
            None,
        );
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(&DatabaseUrl::Sqlite(dir.path().join("bench.db"))).expect("open");
    (store, Some(dir))
}

fn row(what: &str, ops: usize, took: Duration) {
    let per_op = took.as_secs_f64() * 1e6 / ops as f64;
    let rate = ops as f64 / took.as_secs_f64();
    println!(
        "{what:<48} {ops:>7} ops {:>9.1} ms {per_op:>9.1} µs/op {rate:>10.0} ops/s",
        took.as_secs_f64() * 1e3
    );
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let (store, _dir) = open();
        println!("store: {}", store.url());

        let sequential = 500;
        let start = Instant::now();
        for _ in 0..sequential {
            store
                .add_machines(AddMachines::default())
                .await
                .expect("add");
        }
        row(
            "add-machine, one writer, one at a time",
            sequential,
            start.elapsed(),
        );

        let writers = 64;
        let each = 50;
        let start = Instant::now();
        let before = store.revision();
        let tasks: Vec<_> = (0..writers)
            .map(|_| {
                let store = store.clone();
                tokio::spawn(async move {
                    for _ in 0..each {
                        store
                            .add_machines(AddMachines::default())
                            .await
                            .expect("add");
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await.expect("writer");
        }
        let took = start.elapsed();
        row(
            &format!("add-machine, {writers} concurrent writers (group commit)"),
            writers * each,
            took,
        );
        assert_eq!(store.revision() - before, (writers * each) as i64);

        let start = Instant::now();
        store
            .deploy(DeployRequest {
                application: "wordpress".parse().expect("name"),
                charm: resolve("wordpress").expect("charm"),
                base: None,
                constraints: Constraints::parse("mem=2G").expect("constraints"),
                units: 1000,
                placement: Vec::new(),
                settings: BTreeMap::new(),
            })
            .await
            .expect("deploy");
        row(
            "deploy -n 1000 (one transaction, 2,000 rows)",
            1,
            start.elapsed(),
        );

        let machines = store.machines().expect("machines").len();
        let reads = 20;
        let writer = {
            let store = store.clone();
            tokio::spawn(async move {
                for _ in 0..200 {
                    store
                        .add_machines(AddMachines::default())
                        .await
                        .expect("add");
                }
            })
        };
        let start = Instant::now();
        for _ in 0..reads {
            let s = store.clone();
            tokio::task::spawn_blocking(move || s.status().expect("status"))
                .await
                .expect("read");
        }
        row(
            &format!("status with {machines} machines, writes going on"),
            reads,
            start.elapsed(),
        );
        writer.await.expect("writer");

        planning(&store).await;
    });
}

/// A dry run of deploying 10,000 units, end to end and the plan alone.
async fn planning(store: &Store) {
    store
        .set_provider_zones(
            ["a", "b", "c"]
                .map(|z| ProviderZone {
                    name: format!("bench-{z}"),
                    available: true,
                    reason: String::new(),
                })
                .to_vec(),
        )
        .await
        .expect("zones");
    let planned: Arc<Mutex<Option<(Plan, Duration)>>> = Arc::default();
    let kept = planned.clone();
    let check: Check = Arc::new(move |rehearsal| {
        let start = Instant::now();
        let offers = |_: &str, _: &str| true;
        let made = plan(
            rehearsal,
            &Pricing {
                catalogue: Catalogue::embedded().expect("catalogue"),
                price_ceiling: HourlyPrice::from_micro_usd(10_000_000),
                offers: &offers,
            },
        );
        *kept.lock().expect("plan") = Some((made, start.elapsed()));
        Ok(false)
    });
    let units = 10_000;
    let at = store.revision();
    let start = Instant::now();
    store
        .guarded(Guard {
            if_revision: None,
            always: true,
            check,
        })
        .deploy(DeployRequest {
            application: "planned".parse().expect("name"),
            charm: resolve("wordpress").expect("charm"),
            base: None,
            constraints: Constraints::parse("mem=4G cores=2").expect("constraints"),
            units,
            placement: Vec::new(),
            settings: BTreeMap::new(),
        })
        .await
        .expect("dry run");
    let took = start.elapsed();
    assert_eq!(store.revision(), at, "a dry run writes nothing");
    let (made, planning) = planned.lock().expect("plan").take().expect("a plan");
    assert_eq!(made.machines.len(), units as usize);
    row(
        &format!("plan deploy -n {units} (dry run, end to end)"),
        1,
        took,
    );
    row(
        &format!("  of which the plan of {units} machines"),
        1,
        planning,
    );
    println!(
        "  plan: {} machines, ${}/h after, {} zones used",
        made.machines.len(),
        made.hourly_cost_after,
        made.machines
            .iter()
            .filter_map(|m| m.zone.as_deref())
            .collect::<std::collections::BTreeSet<_>>()
            .len()
    );
}
