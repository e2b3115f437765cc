//! The store's application, unit and relation rules, on both backends.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use berth::charms::{load_charm_dir, resolve};
use berth::contracts::provider::ProviderZone;
use berth::domain::base::Base;
use berth::domain::charm::ParsedCharm;
use berth::domain::constraints::Constraints;
use berth::domain::instance_types::{Catalogue, HourlyPrice};
use berth::domain::machine::{Event, MachineState};
use berth::domain::names::{ApplicationName, MachineId, UnitName};
use berth::domain::placement::{parse_to_list, Placement};
use berth::plan::{plan, BudgetCheck, Plan, Pricing};
use berth::status::cache::StatusCache;
use berth::status::document::StatusDocument;
use berth::status::view::status_view;
use berth::store::applications::DeployRequest;
use berth::store::lifecycle::MachineUpdate;
use berth::store::machines::AddMachines;
use berth::store::plans::{Check, Guard};
use berth::store::records::RelationRecord;
use berth::store::{Store, StoreError};

use crate::on_both_backends;
use crate::support::{charm_dir, engine_steps};

const NTP: &str = "name: ntp
summary: keeps time
subordinate: true
requires:
  juju-info:
    interface: juju-info
    scope: container
series: [jammy, noble]
";

const MYSQL: &str = "name: mysql
provides:
  db:
    interface: mysql
series: [jammy]
";

const WORDPRESS: &str = "name: wordpress
requires:
  db:
    interface: mysql
series: [jammy]
";

const WORDPRESS_CONFIG: &str = "options:
  port:
    type: int
    default: 80
    description: the port
";

fn app(name: &str) -> ApplicationName {
    name.parse().unwrap()
}

fn named(charm: &str) -> ParsedCharm {
    resolve(charm).unwrap()
}

fn local(metadata: &str, config: Option<&str>) -> ParsedCharm {
    let dir = charm_dir(metadata, config);
    load_charm_dir(dir.path()).unwrap()
}

fn request(name: &str, charm: ParsedCharm, units: u32) -> DeployRequest {
    DeployRequest {
        application: app(name),
        charm,
        base: None,
        constraints: Constraints::default(),
        units,
        placement: Vec::new(),
        settings: BTreeMap::new(),
    }
}

/// ntp on ubuntu@22.04, to match mysql.
fn ntp_on_jammy() -> DeployRequest {
    let mut ntp = request("ntp", local(NTP, None), 0);
    ntp.base = Some(Base::from_series("jammy").unwrap());
    ntp
}

fn mem_of_machines(store: &Store) -> Vec<String> {
    store
        .machines()
        .unwrap()
        .iter()
        .map(|m| m.constraints.to_string())
        .collect()
}

async fn the_seed_sequence_gives_one_2g_machine_and_two_3g_machines(store: Store) {
    // juju deploy --constraints mem=2G wordpress
    let mut deploy = request("wordpress", named("wordpress"), 1);
    deploy.constraints = Constraints::parse("mem=2G").unwrap();
    store.deploy(deploy).await.unwrap();
    // juju set-constraints --application wordpress mem=3G
    store
        .set_application_constraints(app("wordpress"), Constraints::parse("mem=3G").unwrap())
        .await
        .unwrap();
    // juju add-unit wordpress -n 2
    store
        .add_units(app("wordpress"), 2, Vec::new())
        .await
        .unwrap();
    assert_eq!(
        mem_of_machines(&store),
        vec!["mem=2048M", "mem=3072M", "mem=3072M"]
    );
    let units: Vec<String> = store
        .units()
        .unwrap()
        .iter()
        .map(|u| u.constraints.to_string())
        .collect();
    assert_eq!(units, vec!["mem=2048M", "mem=3072M", "mem=3072M"]);
}

async fn a_unit_snapshots_the_model_and_application_constraints_merged(store: Store) {
    store
        .set_model_constraints(Constraints::parse("zones=a cores=4 mem=1G").unwrap())
        .await
        .unwrap();
    let mut deploy = request("wordpress", named("wordpress"), 1);
    deploy.constraints = Constraints::parse("mem=2G cores=").unwrap();
    store.deploy(deploy).await.unwrap();
    // cores= on the application blocks the model's cores=4.
    assert_eq!(
        store.units().unwrap()[0].constraints.to_string(),
        "mem=2048M cores= zones=a"
    );
    assert_eq!(mem_of_machines(&store), vec!["mem=2048M cores= zones=a"]);
}

async fn changing_model_constraints_never_touches_existing_units(store: Store) {
    store
        .set_model_constraints(Constraints::parse("mem=1G").unwrap())
        .await
        .unwrap();
    store
        .deploy(request("wordpress", named("wordpress"), 1))
        .await
        .unwrap();
    store
        .set_model_constraints(Constraints::parse("mem=8G").unwrap())
        .await
        .unwrap();
    store
        .add_units(app("wordpress"), 1, Vec::new())
        .await
        .unwrap();
    assert_eq!(mem_of_machines(&store), vec!["mem=1024M", "mem=8192M"]);
}

async fn unit_constraints_sit_over_the_applications_and_the_models_key_by_key(store: Store) {
    store
        .set_model_constraints(Constraints::parse("zones=a cores=4").unwrap())
        .await
        .unwrap();
    let mut deploy = request("wordpress", named("wordpress"), 1);
    deploy.constraints = Constraints::parse("mem=2G cores=2").unwrap();
    store.deploy(deploy).await.unwrap();
    // The unit's mem wins; cores comes from the application, zones from
    // the model; `cpu-power=` is the unit's own empty setting.
    let placed = store
        .add_units_with_constraints(
            app("wordpress"),
            1,
            Vec::new(),
            Constraints::parse("mem=8G cpu-power=").unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(placed.len(), 1);
    assert_eq!(
        mem_of_machines(&store),
        vec![
            "mem=2048M cores=2 zones=a",
            "mem=8192M cores=2 cpu-power= zones=a"
        ]
    );
    // A later change to the application touches neither unit.
    store
        .set_application_constraints(app("wordpress"), Constraints::parse("mem=4G").unwrap())
        .await
        .unwrap();
    let units: Vec<String> = store
        .units()
        .unwrap()
        .iter()
        .map(|u| u.constraints.to_string())
        .collect();
    assert_eq!(
        units,
        vec![
            "mem=2048M cores=2 zones=a",
            "mem=8192M cores=2 cpu-power= zones=a"
        ]
    );
    // Units added without constraints of their own take the application's
    // as it is now.
    store
        .add_units(app("wordpress"), 1, Vec::new())
        .await
        .unwrap();
    assert_eq!(
        store.units().unwrap()[2].constraints.to_string(),
        "mem=4096M cores=4 zones=a"
    );
}

async fn place_with_and_place_in_put_new_containers_beside_an_applications_units(store: Store) {
    store
        .deploy(request("wordpress", named("wordpress"), 2))
        .await
        .unwrap();
    // Machine 0 runs a second unit: machine 1 is the least loaded.
    let mut beside = request("mysql", named("mysql"), 1);
    beside.placement = vec!["0".parse().unwrap()];
    store.deploy(beside).await.unwrap();
    let mut cache = request("memcached", named("memcached"), 2);
    cache.placement = vec![
        "place-with=wordpress".parse().unwrap(),
        "place-in=0".parse().unwrap(),
    ];
    let deployed = store.deploy(cache).await.unwrap();
    let machines: Vec<String> = deployed
        .units
        .iter()
        .map(|u| u.machine.to_string())
        .collect();
    assert_eq!(machines, ["1/lxd/0", "0/lxd/0"]);
    // The next one goes beside the least loaded again: machine 1 now runs
    // two units (one in its container), machine 0 three.
    let placed = store
        .add_units(
            app("memcached"),
            1,
            vec!["place-with=wordpress".parse().unwrap()],
        )
        .await
        .unwrap();
    assert_eq!(placed[0].machine.to_string(), "1/lxd/1");

    let before = store.revision();
    let unknown = store
        .add_units(
            app("memcached"),
            1,
            vec!["place-with=ghost".parse().unwrap()],
        )
        .await
        .unwrap_err();
    assert_eq!(unknown.to_string(), r#"application "ghost" not found"#);
    let mut empty = request("ntp", named("wordpress"), 0);
    empty.application = app("idle");
    store.deploy(empty).await.unwrap();
    let before_idle = store.revision();
    let no_units = store
        .add_units(
            app("memcached"),
            1,
            vec!["place-with=idle".parse().unwrap()],
        )
        .await
        .unwrap_err();
    assert_eq!(
        no_units.to_string(),
        r#"cannot place with application "idle": it has no units on machines yet"#
    );
    assert_eq!(store.revision(), before_idle);
    assert!(before < before_idle);
}

/// The machines of `application`'s units, in unit order.
fn machines_of_units(store: &Store, application: &str) -> Vec<String> {
    store
        .units()
        .unwrap()
        .into_iter()
        .filter(|u| u.application.as_str() == application)
        .map(|u| u.machine.map(|m| m.to_string()).unwrap_or_default())
        .collect()
}

async fn scale_with_keeps_a_unit_beside_every_unit_of_the_leader(store: Store) {
    store.deploy(request("db", named("db"), 2)).await.unwrap();
    let mut cache = request("cache", named("cache"), 1);
    cache.placement = vec!["scale-with=db".parse().unwrap()];
    let deployed = store.deploy(cache).await.unwrap();
    assert_eq!(
        deployed.units.len(),
        2,
        "one per unit of db, whatever -n says"
    );
    assert_eq!(machines_of_units(&store, "cache"), ["0/lxd/0", "1/lxd/0"]);
    assert_eq!(
        store.application(&app("cache")).unwrap().scale_with,
        Some(app("db"))
    );
    // A unit added to db brings one of cache beside it...
    let added = store.add_units(app("db"), 1, Vec::new()).await.unwrap();
    assert_eq!(added[0].machine.to_string(), "2");
    assert_eq!(
        machines_of_units(&store, "cache"),
        ["0/lxd/0", "1/lxd/0", "2/lxd/0"]
    );
    // ... and one removed takes its follower with it.
    store
        .remove_units(vec!["db/0".parse().unwrap()])
        .await
        .unwrap();
    assert_eq!(machines_of_units(&store, "cache"), ["1/lxd/0", "2/lxd/0"]);

    // Refused, changing nothing: units added to the follower itself, the
    // directive outside deploy, with others, on itself, or naming no
    // application.
    let before = store.revision();
    let refused = store
        .add_units(app("cache"), 1, Vec::new())
        .await
        .unwrap_err();
    assert_eq!(
        refused.to_string(),
        r#"application "cache" scales with "db": add units to "db" instead"#
    );
    let refused = store
        .add_units(app("db"), 1, vec!["scale-with=db".parse().unwrap()])
        .await
        .unwrap_err();
    assert_eq!(
        refused.to_string(),
        "scale-with=db is a deploy directive: it places a whole application"
    );
    let mut with_others = request("web", named("web"), 2);
    with_others.placement = vec!["scale-with=db".parse().unwrap(), "0".parse().unwrap()];
    assert!(store
        .deploy(with_others)
        .await
        .unwrap_err()
        .to_string()
        .starts_with("scale-with=db places every unit: give it alone"));
    let mut itself = request("self", named("self"), 1);
    itself.placement = vec!["scale-with=self".parse().unwrap()];
    assert_eq!(
        store.deploy(itself).await.unwrap_err().to_string(),
        r#"application "self" cannot scale with itself"#
    );
    let mut ghost = request("shadow", named("shadow"), 1);
    ghost.placement = vec!["scale-with=ghost".parse().unwrap()];
    assert_eq!(
        store.deploy(ghost).await.unwrap_err().to_string(),
        r#"application "ghost" not found"#
    );
    assert_eq!(store.revision(), before);

    // Removing db removes the units that followed it; cache stays, scaling
    // with nothing, and takes units of its own again.
    store.remove_application(app("db")).await.unwrap();
    assert!(machines_of_units(&store, "cache").is_empty());
    assert_eq!(store.application(&app("cache")).unwrap().scale_with, None);
    store.add_units(app("cache"), 1, Vec::new()).await.unwrap();
    assert_eq!(machines_of_units(&store, "cache").len(), 1);
}

/// C scales with B, which scales with A: a unit added to A brings one of B
/// beside it, one of C beside that, and one of B's subordinate beside B's.
async fn a_unit_added_to_a_leader_brings_the_whole_chain_of_followers_and_their_subordinates(
    store: Store,
) {
    store
        .deploy(request("a", local(MYSQL, None), 1))
        .await
        .unwrap();
    for (follower, leader) in [("b", "a"), ("c", "b")] {
        let mut deploy = request(follower, local(MYSQL, None), 0);
        deploy.placement = vec![format!("scale-with={leader}").parse().unwrap()];
        store.deploy(deploy).await.unwrap();
    }
    store.deploy(ntp_on_jammy()).await.unwrap();
    store
        .integrate("b".parse().unwrap(), "ntp".parse().unwrap())
        .await
        .unwrap();
    assert_eq!(machines_of_units(&store, "b"), ["0/lxd/0"]);
    assert_eq!(machines_of_units(&store, "c"), ["0/lxd/1"]);

    store.add_units(app("a"), 1, Vec::new()).await.unwrap();
    assert_eq!(machines_of_units(&store, "a"), ["0", "1"]);
    assert_eq!(machines_of_units(&store, "b"), ["0/lxd/0", "1/lxd/0"]);
    assert_eq!(machines_of_units(&store, "c"), ["0/lxd/1", "1/lxd/1"]);
    assert_eq!(
        units_of(&store, "ntp"),
        vec![
            ("ntp/0".into(), "0/lxd/0".into(), Some("b/0".into())),
            ("ntp/1".into(), "1/lxd/0".into(), Some("b/1".into())),
        ]
    );

    // Removing A's unit takes the chain beside it, subordinate included.
    store
        .remove_units(vec!["a/0".parse().unwrap()])
        .await
        .unwrap();
    assert_eq!(machines_of_units(&store, "b"), ["1/lxd/0"]);
    assert_eq!(machines_of_units(&store, "c"), ["1/lxd/1"]);
    assert_eq!(
        units_of(&store, "ntp"),
        vec![("ntp/1".into(), "1/lxd/0".into(), Some("b/1".into()))]
    );
}

/// A follower's units come and go with its leader's: removing one alone is
/// refused, as adding one is, and changes nothing.
async fn a_followers_unit_is_not_removed_alone(store: Store) {
    store.deploy(request("db", named("db"), 1)).await.unwrap();
    for (follower, leader) in [("cache", "db"), ("proxy", "cache")] {
        let mut deploy = request(follower, named(follower), 0);
        deploy.placement = vec![format!("scale-with={leader}").parse().unwrap()];
        store.deploy(deploy).await.unwrap();
    }
    let before = store.revision();
    for (unit, leader) in [("cache/0", "db/0"), ("proxy/0", "cache/0")] {
        let refused = store
            .remove_units(vec![unit.parse().unwrap()])
            .await
            .unwrap_err();
        assert!(matches!(refused, StoreError::Invalid(_)), "{refused:?}");
        assert_eq!(
            refused.to_string(),
            format!(r#"unit "{unit}" scales with "{leader}": remove "{leader}" instead"#)
        );
    }
    assert_eq!(store.revision(), before);
    assert_eq!(machines_of_units(&store, "cache"), ["0/lxd/0"]);
    assert_eq!(machines_of_units(&store, "proxy"), ["0/lxd/1"]);
}

/// A handle on `store` whose writes are planned as the API plans them,
/// against the embedded catalogue offered in every zone: a dry run is
/// undone, a real command over a budget is refused as a conflict, and each
/// plan is left in the slot returned.
fn planned(store: &Store, dry_run: bool) -> (Store, Arc<Mutex<Option<Plan>>>) {
    let slot = Arc::new(Mutex::new(None));
    let kept = slot.clone();
    let check: Check = Arc::new(move |rehearsal| {
        let offers = |_: &str, _: &str| true;
        let made = plan(
            rehearsal,
            &Pricing {
                catalogue: Catalogue::embedded().unwrap(),
                price_ceiling: HourlyPrice::from_micro_usd(10_000_000),
                offers: &offers,
            },
        );
        let over = made.over_budget();
        *kept.lock().unwrap() = Some(made);
        match over {
            Some(message) if !dry_run => Err(StoreError::Conflict(message)),
            _ => Ok(!dry_run),
        }
    });
    let guarded = store.guarded(Guard {
        if_revision: None,
        always: dry_run,
        check,
    });
    (guarded, slot)
}

/// The check of `application`'s budget in the last plan left in `slot`.
fn budget_of(slot: &Mutex<Option<Plan>>, application: &str) -> BudgetCheck {
    let made = slot.lock().unwrap().clone().expect("a plan");
    made.budgets
        .iter()
        .find(|b| b.application.as_deref() == Some(application))
        .cloned()
        .unwrap_or_else(|| panic!("no budget of {application} in {made:?}"))
}

fn status_cost(store: &Store, application: &str) -> HourlyPrice {
    status_view(&store.status().unwrap(), "sim").applications[&app(application)].hourly_cost
}

/// A unit placed on a running machine charges its application for the
/// machine, in the plan as in status: over the application's budget, the
/// command is refused and changes nothing.
async fn a_unit_placed_on_a_running_machine_counts_toward_its_applications_budget(store: Store) {
    store
        .deploy(request("wordpress", named("wordpress"), 1))
        .await
        .unwrap();
    store
        .deploy(request("blog", named("blog"), 0))
        .await
        .unwrap();
    let id: MachineId = "0".parse().unwrap();
    let price: HourlyPrice = "0.096".parse().unwrap();
    engine_steps::launch_in(&store, id, "a").await;
    let update = MachineUpdate {
        instance_type: Some("m5.large".into()),
        hourly_price: Some(price),
        ..MachineUpdate::default()
    };
    let started = Event::InstanceStarted {
        instance_id: "i-0".into(),
    };
    engine_steps::apply(&store, id, started, update).await;
    store
        .set_budget(Some(app("blog")), Some("0.05".parse().unwrap()))
        .await
        .unwrap();
    let to_machine = || vec![Placement::Machine(id)];

    let before = store.revision();
    let (dry, slot) = planned(&store, true);
    dry.add_units(app("blog"), 1, to_machine()).await.unwrap();
    let check = budget_of(&slot, "blog");
    assert_eq!(check.hourly_cost_before, HourlyPrice::default());
    assert_eq!(check.hourly_cost_after, price);
    assert!(check.exceeded, "{check:?}");
    assert_eq!(store.revision(), before, "a dry run changes nothing");

    let (real, _) = planned(&store, false);
    let refused = real
        .add_units(app("blog"), 1, to_machine())
        .await
        .unwrap_err();
    assert!(matches!(refused, StoreError::Conflict(_)), "{refused:?}");
    assert!(
        refused.to_string().contains(
            r#"application "blog"'s hourly cost would go from $0 to $0.096, over its budget of $0.05"#
        ),
        "{refused}"
    );
    assert_eq!(
        store.revision(),
        before,
        "a refused command changes nothing"
    );
    assert!(units_of(&store, "blog").is_empty());

    // Within the budget it is kept, and status charges what the plan said.
    store
        .set_budget(Some(app("blog")), Some("0.1".parse().unwrap()))
        .await
        .unwrap();
    let (real, slot) = planned(&store, false);
    real.add_units(app("blog"), 1, to_machine()).await.unwrap();
    assert_eq!(budget_of(&slot, "blog").hourly_cost_after, price);
    assert_eq!(status_cost(&store, "blog"), price);
}

/// A subordinate runs on its principals' machines at no cost of its own,
/// in the plan as in status: its budget does not hold its principal back.
async fn a_subordinates_budget_is_not_charged_for_its_principals_machines(store: Store) {
    store
        .set_provider_zones(vec![ProviderZone {
            name: "a".into(),
            available: true,
            reason: String::new(),
        }])
        .await
        .unwrap();
    mysql_related_to_ntp(&store, 1).await;
    store
        .set_budget(Some(app("ntp")), Some("0.0001".parse().unwrap()))
        .await
        .unwrap();
    let (real, slot) = planned(&store, false);
    real.add_units(app("mysql"), 1, Vec::new()).await.unwrap();
    let made = slot.lock().unwrap().clone().expect("a plan");
    assert!(
        made.machines[0].hourly_price.is_some(),
        "the new machine is priced: {made:?}"
    );
    let check = budget_of(&slot, "ntp");
    assert_eq!(check.hourly_cost_after, HourlyPrice::default());
    assert!(!check.exceeded, "{check:?}");
    assert_eq!(units_of(&store, "ntp").len(), 2);
    assert_eq!(status_cost(&store, "ntp"), HourlyPrice::default());
}

async fn deploying_an_application_twice_is_a_conflict(store: Store) {
    store
        .deploy(request("wordpress", named("wordpress"), 1))
        .await
        .unwrap();
    let before = store.revision();
    let err = store
        .deploy(request("wordpress", named("wordpress"), 1))
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Conflict(_)), "{err:?}");
    assert_eq!(err.to_string(), "application \"wordpress\" already exists");
    assert_eq!(store.revision(), before);
}

async fn an_application_takes_the_charms_first_base_and_its_units_and_machines_follow(
    store: Store,
) {
    let deployed = store
        .deploy(request("mysql", local(MYSQL, None), 2))
        .await
        .unwrap();
    let jammy = Base::from_series("jammy").unwrap();
    assert_eq!(deployed.base, jammy);
    assert!(store.units().unwrap().iter().all(|u| u.base == jammy));
    assert!(store.machines().unwrap().iter().all(|m| m.base == jammy));
}

async fn a_base_the_charm_does_not_support_is_refused(store: Store) {
    let mut deploy = request("mysql", local(MYSQL, None), 1);
    deploy.base = Some("ubuntu@24.04".parse().unwrap());
    let err = store.deploy(deploy).await.unwrap_err();
    assert!(matches!(err, StoreError::Invalid(_)), "{err:?}");
    assert!(err.to_string().contains("not supported by charm"), "{err}");
    assert!(store.machines().unwrap().is_empty());
}

async fn a_unit_goes_only_to_a_machine_of_its_base(store: Store) {
    store
        .add_machines(AddMachines {
            base: Some("ubuntu@24.04".parse().unwrap()),
            ..AddMachines::default()
        })
        .await
        .unwrap();
    let mut deploy = request("mysql", local(MYSQL, None), 1);
    deploy.placement = parse_to_list("0").unwrap();
    let before = store.revision();
    let err = store.deploy(deploy).await.unwrap_err();
    assert!(matches!(err, StoreError::Conflict(_)), "{err:?}");
    assert_eq!(
        err.to_string(),
        "cannot place a unit of base ubuntu@22.04 on machine 0: the machine's base is ubuntu@24.04"
    );
    assert_eq!(store.revision(), before);
    assert!(store.application(&app("mysql")).is_err());
}

async fn to_an_existing_machine_puts_the_unit_there(store: Store) {
    store.add_machines(AddMachines::default()).await.unwrap();
    let mut deploy = request("wordpress", named("wordpress"), 2);
    deploy.placement = parse_to_list("0").unwrap();
    let deployed = store.deploy(deploy).await.unwrap();
    let machines: Vec<String> = deployed
        .units
        .iter()
        .map(|u| u.machine.to_string())
        .collect();
    // The first unit goes to machine 0; the second, without a directive, to
    // a new machine.
    assert_eq!(machines, vec!["0", "1"]);
}

async fn to_lxd_on_a_machine_makes_a_container_for_the_unit(store: Store) {
    store.add_machines(AddMachines::default()).await.unwrap();
    let mut deploy = request("wordpress", named("wordpress"), 2);
    deploy.placement = parse_to_list("lxd:0,lxd").unwrap();
    deploy.constraints = Constraints::parse("mem=1G").unwrap();
    let deployed = store.deploy(deploy).await.unwrap();
    let machines: Vec<String> = deployed
        .units
        .iter()
        .map(|u| u.machine.to_string())
        .collect();
    assert_eq!(machines, vec!["0/lxd/0", "1/lxd/0"]);
    // The new host was made without a unit: it takes the model's (empty)
    // constraints; the containers take the unit's.
    let all: Vec<(String, String)> = store
        .machines()
        .unwrap()
        .iter()
        .map(|m| (m.id.to_string(), m.constraints.to_string()))
        .collect();
    assert_eq!(
        all,
        vec![
            ("0".into(), "".into()),
            ("0/lxd/0".into(), "mem=1024M".into()),
            ("1".into(), "".into()),
            ("1/lxd/0".into(), "mem=1024M".into()),
        ]
    );
}

async fn a_zone_placement_gives_the_units_machine_that_zone(store: Store) {
    let mut deploy = request("wordpress", named("wordpress"), 1);
    deploy.placement = parse_to_list("zone=us-east-1a").unwrap();
    store.deploy(deploy).await.unwrap();
    let machine = &store.machines().unwrap()[0];
    assert_eq!(
        machine.placement.as_ref().and_then(Placement::zone),
        Some("us-east-1a")
    );
}

async fn more_directives_than_units_are_refused(store: Store) {
    let mut deploy = request("wordpress", named("wordpress"), 1);
    deploy.placement = parse_to_list("zone=a,zone=b").unwrap();
    let err = store.deploy(deploy).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "2 placement directives given for 1 units: give at most one per unit"
    );
}

async fn a_subordinate_is_deployed_without_units_constraints_or_placement(store: Store) {
    let err = store
        .deploy(request("ntp", local(NTP, None), 1))
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Invalid(_)), "{err:?}");
    let mut constrained = request("ntp", local(NTP, None), 0);
    constrained.constraints = Constraints::parse("mem=1G").unwrap();
    let err = store.deploy(constrained).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "subordinate application \"ntp\" cannot have constraints: it runs on its principals' machines"
    );
    store
        .deploy(request("ntp", local(NTP, None), 0))
        .await
        .unwrap();
    let err = store
        .add_units(app("ntp"), 1, Vec::new())
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Invalid(_)), "{err:?}");
    let err = store
        .set_application_constraints(app("ntp"), Constraints::parse("mem=1G").unwrap())
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Invalid(_)), "{err:?}");
}

fn units_of(store: &Store, application: &str) -> Vec<(String, String, Option<String>)> {
    store
        .units()
        .unwrap()
        .into_iter()
        .filter(|u| u.application.as_str() == application)
        .map(|u| {
            (
                u.name.to_string(),
                u.machine.map(|m| m.to_string()).unwrap_or_default(),
                u.principal.map(|p| p.to_string()),
            )
        })
        .collect()
}

/// mysql with `units` units, and the subordinate ntp related to it.
async fn mysql_related_to_ntp(store: &Store, units: u32) -> RelationRecord {
    store
        .deploy(request("mysql", local(MYSQL, None), units))
        .await
        .unwrap();
    store.deploy(ntp_on_jammy()).await.unwrap();
    store
        .integrate("mysql".parse().unwrap(), "ntp".parse().unwrap())
        .await
        .unwrap()
}

async fn integrating_a_subordinate_puts_a_unit_beside_every_principal_unit_and_later_ones(
    store: Store,
) {
    let relation = mysql_related_to_ntp(&store, 2).await;
    assert_eq!(relation.scope, "container");
    assert_eq!(
        units_of(&store, "ntp"),
        vec![
            ("ntp/0".into(), "0".into(), Some("mysql/0".into())),
            ("ntp/1".into(), "1".into(), Some("mysql/1".into())),
        ]
    );
    store.add_units(app("mysql"), 1, Vec::new()).await.unwrap();
    assert_eq!(units_of(&store, "ntp").len(), 3);
    assert_eq!(
        units_of(&store, "ntp")[2],
        ("ntp/2".into(), "2".into(), Some("mysql/2".into()))
    );
    // Subordinates are not removed directly.
    let err = store
        .remove_units(vec!["ntp/0".parse::<UnitName>().unwrap()])
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Invalid(_)), "{err:?}");
    // Removing the relation removes them.
    store
        .remove_relation("ntp".parse().unwrap(), "mysql".parse().unwrap())
        .await
        .unwrap();
    assert!(units_of(&store, "ntp").is_empty());
}

async fn a_subordinate_relation_needs_matching_bases(store: Store) {
    let mut deploy = request("wordpress", named("wordpress"), 1);
    deploy.base = Some("ubuntu@24.04".parse().unwrap());
    store.deploy(deploy).await.unwrap();
    let mut ntp = request("ntp", local(NTP, None), 0);
    ntp.base = Some("ubuntu@22.04".parse().unwrap());
    store.deploy(ntp).await.unwrap();
    let err = store
        .integrate("wordpress".parse().unwrap(), "ntp".parse().unwrap())
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Conflict(_)), "{err:?}");
    assert!(err.to_string().contains("same base"), "{err}");
}

async fn a_global_relation_joins_provider_and_requirer_and_is_not_added_twice(store: Store) {
    store
        .deploy(request("mysql", local(MYSQL, None), 1))
        .await
        .unwrap();
    store
        .deploy(request(
            "wordpress",
            local(WORDPRESS, Some(WORDPRESS_CONFIG)),
            1,
        ))
        .await
        .unwrap();
    let relation = store
        .integrate("wordpress".parse().unwrap(), "mysql".parse().unwrap())
        .await
        .unwrap();
    assert_eq!(relation.key, "wordpress:db mysql:db");
    assert_eq!(relation.scope, "global");
    let err = store
        .integrate("mysql".parse().unwrap(), "wordpress".parse().unwrap())
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Conflict(_)), "{err:?}");
}

async fn integrating_two_unrelated_principals_finds_no_relation(store: Store) {
    store
        .deploy(request("mysql", local(MYSQL, None), 0))
        .await
        .unwrap();
    store
        .deploy(request("other", named("other"), 0))
        .await
        .unwrap();
    let err = store
        .integrate("mysql".parse().unwrap(), "other".parse().unwrap())
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Invalid(_)), "{err:?}");
    assert_eq!(err.to_string(), "no relations found");
}

async fn settings_are_checked_against_the_charms_options(store: Store) {
    let mut deploy = request("wordpress", local(WORDPRESS, Some(WORDPRESS_CONFIG)), 0);
    deploy.settings.insert("port".into(), "abc".into());
    let err = store.deploy(deploy.clone()).await.unwrap_err();
    assert!(matches!(err, StoreError::Invalid(_)), "{err:?}");
    assert_eq!(err.to_string(), "option \"port\" expected int, got \"abc\"");
    deploy.settings.insert("port".into(), "8080".into());
    store.deploy(deploy).await.unwrap();
    let record = store.application(&app("wordpress")).unwrap();
    assert_eq!(record.settings["port"], 8080);
}

async fn the_same_charm_contents_reuse_one_revision_and_new_contents_get_the_next(store: Store) {
    let dir = charm_dir(MYSQL, None);
    let first = store
        .deploy(request("db1", load_charm_dir(dir.path()).unwrap(), 0))
        .await
        .unwrap();
    let again = store
        .deploy(request("db2", load_charm_dir(dir.path()).unwrap(), 0))
        .await
        .unwrap();
    std::fs::write(dir.path().join("README.md"), "changed").unwrap();
    let changed = store
        .deploy(request("db3", load_charm_dir(dir.path()).unwrap(), 0))
        .await
        .unwrap();
    assert_eq!(first.charm, "local:mysql-0");
    assert_eq!(again.charm, "local:mysql-0");
    assert_eq!(changed.charm, "local:mysql-1");
}

async fn removing_a_unit_on_an_unprovisioned_machine_removes_it_and_leaves_the_machine(
    store: Store,
) {
    store
        .deploy(request("wordpress", named("wordpress"), 2))
        .await
        .unwrap();
    store
        .remove_units(vec!["wordpress/0".parse().unwrap()])
        .await
        .unwrap();
    let units: Vec<String> = store
        .units()
        .unwrap()
        .iter()
        .map(|u| u.name.to_string())
        .collect();
    assert_eq!(units, vec!["wordpress/1"]);
    assert_eq!(store.machines().unwrap().len(), 2);
}

async fn removing_units_is_all_or_nothing(store: Store) {
    store
        .deploy(request("wordpress", named("wordpress"), 1))
        .await
        .unwrap();
    let err = store
        .remove_units(vec![
            "wordpress/0".parse().unwrap(),
            "wordpress/9".parse().unwrap(),
        ])
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::NotFound(_)), "{err:?}");
    assert_eq!(store.units().unwrap().len(), 1);
}

async fn a_machine_hosting_units_is_removed_only_with_force(store: Store) {
    store
        .deploy(request("wordpress", named("wordpress"), 1))
        .await
        .unwrap();
    let machine: MachineId = "0".parse().unwrap();
    let err = store.remove_machine(machine, false).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "machine 0 is hosting units wordpress/0: remove them first, or use --force"
    );
    store.remove_machine(machine, true).await.unwrap();
    assert!(store.machines().unwrap().is_empty());
    assert!(store.units().unwrap().is_empty());
}

async fn removing_an_application_removes_its_units_and_relations_but_not_machines(store: Store) {
    mysql_related_to_ntp(&store, 2).await;
    store.remove_application(app("mysql")).await.unwrap();
    assert!(store.units().unwrap().is_empty());
    assert!(store.status().unwrap().relations.is_empty());
    assert_eq!(store.machines().unwrap().len(), 2);
    assert!(store.application(&app("mysql")).is_err());
}

async fn unknown_applications_are_not_found(store: Store) {
    let err = store
        .add_units(app("ghost"), 1, Vec::new())
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::NotFound(_)), "{err:?}");
    assert_eq!(err.to_string(), "application \"ghost\" not found");
    let err = store.remove_application(app("ghost")).await.unwrap_err();
    assert!(matches!(err, StoreError::NotFound(_)), "{err:?}");
}

async fn status_reads_everything_at_one_revision(store: Store) {
    store
        .deploy(request("mysql", local(MYSQL, None), 2))
        .await
        .unwrap();
    let status = store.status().unwrap();
    assert_eq!(status.revision, store.revision());
    assert_eq!(status.applications.len(), 1);
    assert_eq!(status.units.len(), 2);
    assert_eq!(status.machines.len(), 2);
    assert_eq!(status.model.name, "default");
}

/// Brings `document` forward by what the store says changed, and checks it
/// shows what a fresh read of the whole state shows.
fn bring_forward_and_compare(store: &Store, document: &mut StatusDocument, step: &str) {
    let delta = store
        .status_delta(document.revision(), 100_000)
        .unwrap()
        .expect("a delta this small is read entity by entity");
    assert_eq!(delta.revision, store.revision(), "{step}");
    document.apply(delta);
    let fresh = store.status().unwrap();
    let rendered: serde_json::Value = serde_json::from_slice(&document.render()).unwrap();
    assert_eq!(
        rendered,
        serde_json::to_value(status_view(&fresh, "sim")).unwrap(),
        "{step}"
    );
    let shown = store.status_shown().unwrap();
    for readers in [2, 3] {
        let in_shares = store.status_shown_in_shares(readers).unwrap();
        assert_eq!(in_shares.as_ref(), Some(&shown), "{step}: {readers} shares");
    }
    let mut whole = StatusDocument::new("sim");
    whole.apply(shown);
    assert_eq!(whole.render(), document.render(), "{step}: read whole");
}

async fn a_status_document_brought_forward_shows_what_a_fresh_read_shows(store: Store) {
    let mut document = StatusDocument::new("sim");
    document.apply(store.status_shown().unwrap());
    store.add_machines(AddMachines::default()).await.unwrap();
    let mut deploy = request("mysql", local(MYSQL, None), 3);
    deploy.placement = parse_to_list("lxd:0").unwrap();
    store.deploy(deploy).await.unwrap();
    bring_forward_and_compare(&store, &mut document, "deploy");

    store.deploy(ntp_on_jammy()).await.unwrap();
    store
        .integrate("mysql".parse().unwrap(), "ntp".parse().unwrap())
        .await
        .unwrap();
    store.add_units(app("mysql"), 1, Vec::new()).await.unwrap();
    bring_forward_and_compare(&store, &mut document, "integrate");

    // Only the machine's row changes; its units show its progress.
    let host: MachineId = "1".parse().unwrap();
    engine_steps::apply(&store, host, Event::StartInstance, MachineUpdate::default()).await;
    store
        .set_model_constraints(Constraints::parse("cores=4").unwrap())
        .await
        .unwrap();
    bring_forward_and_compare(&store, &mut document, "machine and model");

    store
        .remove_units(vec!["mysql/2".parse().unwrap()])
        .await
        .unwrap();
    store
        .remove_relation("ntp".parse().unwrap(), "mysql".parse().unwrap())
        .await
        .unwrap();
    bring_forward_and_compare(&store, &mut document, "remove units and relation");

    store.remove_application(app("mysql")).await.unwrap();
    store
        .remove_machine("0".parse().unwrap(), true)
        .await
        .unwrap();
    bring_forward_and_compare(&store, &mut document, "remove application and machine");

    // Nothing changed since: an empty delta. Anything changed and a limit
    // of none: read the whole state instead.
    let quiet = store.status_delta(document.revision(), 0).unwrap().unwrap();
    assert_eq!(quiet.revision, document.revision());
    assert!(quiet.machines.is_empty() && quiet.units.is_empty());
    store.add_machines(AddMachines::default()).await.unwrap();
    assert!(store
        .status_delta(document.revision(), 0)
        .unwrap()
        .is_none());
}

async fn a_prepared_status_is_rendered_at_the_head_and_follows_later_writes(store: Store) {
    store
        .deploy(request("wordpress", resolve("wordpress").unwrap(), 2))
        .await
        .unwrap();
    let prepared = StatusCache::prepared(&store, "sim").unwrap();
    assert_eq!(prepared.rendered_revision(), Some(store.revision()));
    assert_eq!(StatusCache::default().rendered_revision(), None);
    let fresh = StatusCache::default().get(&store, "sim").await.unwrap();
    assert_eq!(
        prepared.get(&store, "sim").await.unwrap().to_vec(),
        fresh.to_vec()
    );

    // A write after it was prepared is in the next answer.
    store.deploy(ntp_on_jammy()).await.unwrap();
    let after: serde_json::Value =
        serde_json::from_slice(&prepared.get(&store, "sim").await.unwrap().to_vec()).unwrap();
    assert_eq!(prepared.rendered_revision(), Some(store.revision()));
    assert_eq!(
        after,
        serde_json::to_value(status_view(&store.status().unwrap(), "sim")).unwrap()
    );
    assert!(after["applications"]["ntp"].is_object());
}

async fn machine_summaries_show_what_a_reconciliation_needs(store: Store) {
    store
        .deploy(request("wordpress", resolve("wordpress").unwrap(), 2))
        .await
        .unwrap();
    let spare = store.add_machines(AddMachines::default()).await.unwrap()[0];
    engine_steps::started(&store, "1".parse().unwrap(), "i-1", "a").await;

    let summaries = store.machine_summaries().unwrap();
    let shown: Vec<_> = summaries
        .iter()
        .map(|m| {
            (
                m.id.to_string(),
                m.state,
                m.instance_id(),
                m.zone(),
                m.addresses(),
            )
        })
        .collect();
    assert_eq!(
        shown,
        vec![
            ("0".into(), MachineState::Pending, None, None, ""),
            (
                "1".into(),
                MachineState::Started,
                Some("i-1"),
                Some("a"),
                ""
            ),
            (spare.to_string(), MachineState::Pending, None, None, ""),
        ]
    );
    // The same as the full records say.
    for (summary, full) in summaries.iter().zip(store.engine_machines(None).unwrap()) {
        assert_eq!(summary.id, full.record.id);
        assert_eq!(summary.role, full.record.role);
        assert_eq!(summary.state, full.record.state());
        assert_eq!(
            summary.instance_id(),
            full.record.machine.lifecycle.instance_id.as_deref()
        );
        assert_eq!(
            summary.zone(),
            full.record.machine.lifecycle.zone.as_deref()
        );
    }

    // Only the machines that record one of the instances or are named, in
    // id order, each once; none for names nothing matches.
    let machine_one: MachineId = "1".parse().unwrap();
    let of = |instances: &[&str], machines: &[MachineId]| {
        let instances: Vec<String> = instances.iter().map(|i| i.to_string()).collect();
        store
            .machine_summaries_of(&instances, machines)
            .unwrap()
            .into_iter()
            .map(|m| m.id.to_string())
            .collect::<Vec<_>>()
    };
    assert_eq!(of(&["i-1"], &[spare]), ["1".to_string(), spare.to_string()]);
    assert_eq!(of(&["i-1"], &[machine_one]), ["1"]);
    assert_eq!(of(&["i-9"], &[]), Vec::<String>::new());
    assert_eq!(of(&[], &[]), Vec::<String>::new());
    let picked = store.machine_summaries_of(&["i-1".into()], &[]).unwrap();
    assert_eq!(picked, summaries[1..2]);
    // Longer lists than one statement takes are read in rounds; a machine
    // found in two of them comes once.
    let mut many: Vec<String> = (0..600).map(|n| format!("i-none-{n}")).collect();
    many.push("i-1".into());
    let picked = store.machine_summaries_of(&many, &[machine_one]).unwrap();
    assert_eq!(picked, summaries[1..2]);
}

/// The census as stored, checked against a count afresh of every machine.
async fn census_counted_afresh_agrees(store: &Store) -> BTreeMap<(String, String), i64> {
    let kept = store.zone_census().unwrap();
    store.rebuild_zone_census().await.unwrap();
    assert_eq!(store.zone_census().unwrap(), kept);
    kept
}

fn counted(kind: &str, zone: &str) -> BTreeMap<(String, String), i64> {
    BTreeMap::from([((kind.to_string(), zone.to_string()), 1)])
}

/// A unit joining or leaving a machine that holds a zone moves the machine
/// to its new kind's count as it happens, so the census never needs
/// counting afresh when a controller starts; only a store written before
/// this rule is counted afresh, once.
async fn a_unit_joining_or_leaving_a_zoned_machine_moves_the_machines_census_count(store: Store) {
    use berth::domain::zones::{Occupant, Zone};
    use berth::store::census::{ZoneChoice, ZoneChosen};
    assert!(store.count_zone_census_unless_current().await.unwrap());
    assert!(!store.count_zone_census_unless_current().await.unwrap());
    store
        .deploy(request("mysql", local(MYSQL, None), 1))
        .await
        .unwrap();
    let id: MachineId = "0".parse().unwrap();
    let ttl = std::time::Duration::from_secs(30);
    store.claim_machines(vec![id], ttl).await.unwrap();
    let allocating =
        engine_steps::apply(&store, id, Event::StartInstance, MachineUpdate::default())
            .await
            .next;
    let choice = ZoneChoice {
        id,
        occupant: Occupant::workload(["mysql"]),
        zones: vec![Zone::available("a")],
        failed: Default::default(),
        zones_constraint: Default::default(),
        placement_zone: None,
        clear_retry_at: false,
    };
    let chosen = store.choose_zone(allocating, choice).await.unwrap();
    assert!(matches!(chosen, ZoneChosen::Chosen(_)), "{chosen:?}");
    assert_eq!(
        census_counted_afresh_agrees(&store).await,
        counted("workload:mysql", "a")
    );
    // A unit of another application joins the machine.
    store
        .deploy(request("wordpress", local(WORDPRESS, None), 0))
        .await
        .unwrap();
    let joined = store
        .add_units(app("wordpress"), 1, vec![Placement::Machine(id)])
        .await
        .unwrap();
    assert_eq!(
        census_counted_afresh_agrees(&store).await,
        counted("workload:mysql,wordpress", "a")
    );
    // A subordinate joins beside mysql/0.
    store.deploy(ntp_on_jammy()).await.unwrap();
    store
        .integrate("mysql".parse().unwrap(), "ntp".parse().unwrap())
        .await
        .unwrap();
    assert_eq!(
        census_counted_afresh_agrees(&store).await,
        counted("workload:mysql,ntp,wordpress", "a")
    );
    // The wordpress unit leaves, then mysql (and its subordinate with it).
    store
        .remove_units(vec![joined[0].unit.clone()])
        .await
        .unwrap();
    assert_eq!(
        census_counted_afresh_agrees(&store).await,
        counted("workload:mysql,ntp", "a")
    );
    store.remove_application(app("mysql")).await.unwrap();
    assert_eq!(
        census_counted_afresh_agrees(&store).await,
        counted("workload:", "a")
    );
    assert!(!store.count_zone_census_unless_current().await.unwrap());
}

/// Machines read by id come back each once, with the applications of
/// their units, whatever the length of the list: lists are bound at a few
/// lengths on SQLite (the last id repeated), and in lists of at most 1,024.
async fn machines_read_by_id_come_back_each_once_whatever_the_length_of_the_list(store: Store) {
    store
        .deploy(request("wordpress", named("wordpress"), 1030))
        .await
        .unwrap();
    store
        .add_machines(AddMachines {
            count: 5,
            ..AddMachines::default()
        })
        .await
        .unwrap();
    let all: Vec<MachineId> = (0..1035u64).map(MachineId::new).collect();
    for (from, count) in [
        (0, 1),
        (1029, 3),
        (7, 5),
        (0, 512),
        (3, 1024),
        (0, 1025),
        (0, 1035),
    ] {
        let wanted = &all[from..from + count];
        let read = store.engine_machines(Some(wanted)).unwrap();
        let ids: Vec<MachineId> = read.iter().map(|m| m.record.id).collect();
        assert_eq!(ids, wanted, "{count} ids from {from}");
        for machine in &read {
            let expected: Vec<&str> = if machine.record.id.host_number() < 1030 {
                vec!["wordpress"]
            } else {
                vec![]
            };
            assert_eq!(
                machine
                    .applications
                    .iter()
                    .map(String::as_str)
                    .collect::<Vec<_>>(),
                expected,
                "machine {}",
                machine.record.id
            );
        }
    }
    // Ids nothing matches, alone or among others, read nothing for them.
    let missing = [
        MachineId::new(5000),
        MachineId::new(5001),
        MachineId::new(2),
    ];
    let read = store.engine_machines(Some(&missing)).unwrap();
    assert_eq!(
        read.iter().map(|m| m.record.id).collect::<Vec<_>>(),
        [MachineId::new(2)]
    );
    assert!(store.engine_machines(Some(&[])).unwrap().is_empty());
}

on_both_backends!(
    a_prepared_status_is_rendered_at_the_head_and_follows_later_writes,
    machines_read_by_id_come_back_each_once_whatever_the_length_of_the_list,
    machine_summaries_show_what_a_reconciliation_needs,
    a_status_document_brought_forward_shows_what_a_fresh_read_shows,
    the_seed_sequence_gives_one_2g_machine_and_two_3g_machines,
    unit_constraints_sit_over_the_applications_and_the_models_key_by_key,
    place_with_and_place_in_put_new_containers_beside_an_applications_units,
    scale_with_keeps_a_unit_beside_every_unit_of_the_leader,
    a_unit_added_to_a_leader_brings_the_whole_chain_of_followers_and_their_subordinates,
    a_followers_unit_is_not_removed_alone,
    a_unit_placed_on_a_running_machine_counts_toward_its_applications_budget,
    a_subordinates_budget_is_not_charged_for_its_principals_machines,
    a_unit_snapshots_the_model_and_application_constraints_merged,
    changing_model_constraints_never_touches_existing_units,
    deploying_an_application_twice_is_a_conflict,
    an_application_takes_the_charms_first_base_and_its_units_and_machines_follow,
    a_base_the_charm_does_not_support_is_refused,
    a_unit_goes_only_to_a_machine_of_its_base,
    to_an_existing_machine_puts_the_unit_there,
    to_lxd_on_a_machine_makes_a_container_for_the_unit,
    a_zone_placement_gives_the_units_machine_that_zone,
    more_directives_than_units_are_refused,
    a_subordinate_is_deployed_without_units_constraints_or_placement,
    integrating_a_subordinate_puts_a_unit_beside_every_principal_unit_and_later_ones,
    a_subordinate_relation_needs_matching_bases,
    a_global_relation_joins_provider_and_requirer_and_is_not_added_twice,
    integrating_two_unrelated_principals_finds_no_relation,
    settings_are_checked_against_the_charms_options,
    the_same_charm_contents_reuse_one_revision_and_new_contents_get_the_next,
    removing_a_unit_on_an_unprovisioned_machine_removes_it_and_leaves_the_machine,
    removing_units_is_all_or_nothing,
    a_machine_hosting_units_is_removed_only_with_force,
    removing_an_application_removes_its_units_and_relations_but_not_machines,
    unknown_applications_are_not_found,
    status_reads_everything_at_one_revision,
    a_unit_joining_or_leaving_a_zoned_machine_moves_the_machines_census_count,
);
