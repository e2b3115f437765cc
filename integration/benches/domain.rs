//! The hot pure functions: `cargo bench --bench domain`.
//!
//! - constraint parsing (a typical string, and every key at once);
//! - instance-type selection over the full embedded EC2 catalogue
//!   (1,340 types): defaults, a memory floor, a named type with a floor;
//! - zone choice with thousands of machines already placed.

use std::collections::BTreeSet;
use std::hint::black_box;

use berth::domain::constraints::{Constraints, Setting};
use berth::domain::instance_types::{select, Catalogue, Requirements};
use berth::domain::machine::MachineRole;
use berth::domain::zones::{
    order_zones, DistributionGroup, Occupant, Zone, ZoneCensus, ZoneRequest,
};
use criterion::{criterion_group, criterion_main, Criterion};

fn constraint_parsing(c: &mut Criterion) {
    c.bench_function("parse mem=4G cores=2", |b| {
        b.iter(|| Constraints::parse(black_box("mem=4G cores=2")))
    });
    let every_key =
        "arch=amd64 container=lxd mem=1G cores=2 cpu-power=100 root-disk=8G root-disk-source=ebs \
                     instance-type=m5.large virt-type=hvm tags=a,^b zones=z1,z2 spaces=db,^dmz \
                     allocate-public-ip=true image-id=ami-0123";
    c.bench_function("parse every key", |b| {
        b.iter(|| Constraints::parse(black_box(every_key)))
    });
    let parsed = Constraints::parse(every_key).expect("valid");
    c.bench_function("print canonical form", |b| {
        b.iter(|| black_box(&parsed).to_string())
    });
}

fn instance_type_selection(c: &mut Criterion) {
    let catalogue = Catalogue::embedded().expect("embedded catalogue");
    for (name, constraints) in [
        ("select defaults over the EC2 catalogue", ""),
        (
            "select mem=3G cores=2 over the EC2 catalogue",
            "mem=3G cores=2",
        ),
        (
            "select mem=8G instance-type=m1.small over the EC2 catalogue",
            "mem=8G instance-type=m1.small",
        ),
        (
            "select arch=arm64 mem=max over the EC2 catalogue",
            "arch=arm64 mem=max",
        ),
    ] {
        let requirements = Requirements::resolve(
            &Constraints::parse(constraints).expect("valid"),
            MachineRole::Workload,
        );
        c.bench_function(name, |b| {
            b.iter(|| select(black_box(&requirements), catalogue))
        });
    }
}

fn zone_choice(c: &mut Criterion) {
    let zones: Vec<Zone> = (0..6)
        .map(|i| Zone::available(format!("zone-{i}")))
        .collect();
    let mut census = ZoneCensus::new();
    // 5,000 machines of 50 applications, spread unevenly.
    for m in 0..5_000usize {
        let app = format!("app-{}", m % 50);
        census.add(&format!("zone-{}", (m * 7) % 6), &Occupant::workload([app]));
    }
    let group: DistributionGroup = Occupant::workload(["app-7"]).group();
    let failed = BTreeSet::new();
    let unset = Setting::Unset;
    c.bench_function("order 6 zones with 5,000 machines placed", |b| {
        b.iter(|| {
            order_zones(black_box(&ZoneRequest {
                zones: &zones,
                census: &census,
                group: &group,
                failed: &failed,
                zones_constraint: &unset,
                placement: None,
            }))
        })
    });
}

criterion_group!(
    benches,
    constraint_parsing,
    instance_type_selection,
    zone_choice
);
criterion_main!(benches);
