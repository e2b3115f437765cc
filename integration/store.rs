//! The store's rules, each on SQLite and on PostgreSQL.

use std::collections::BTreeSet;
use std::time::Duration;

use berth::contracts::provider::ProviderZone;
use berth::contracts::secrets::{secret_matches, Secret};
use berth::domain::base::Base;
use berth::domain::constraints::Constraints;
use berth::domain::machine::{Effect, Event, FailureKind, Machine, MachineState, Policy};
use berth::domain::names::MachineId;
use berth::domain::placement::Placement;
use berth::store::lifecycle::{ApplyError, CheckInProof, MachineEvent, MachineUpdate};
use berth::store::machines::AddMachines;
use berth::store::{Origin, Store, StoreError};

use crate::on_both_backends;
use crate::support::engine_steps;

fn constraints(s: &str) -> Constraints {
    Constraints::parse(s).unwrap()
}

fn placement(s: &str) -> Placement {
    s.parse().unwrap()
}

fn machine(id: &str) -> MachineId {
    id.parse().unwrap()
}

/// `count` machines with the model's defaults.
async fn add_machines(store: &Store, count: u32) -> Vec<MachineId> {
    add_machine(
        store,
        AddMachines {
            count,
            ..AddMachines::default()
        },
    )
    .await
}

/// Every machine's id, in the store's order.
fn machine_ids(store: &Store) -> Vec<String> {
    store
        .machines()
        .unwrap()
        .iter()
        .map(|m| m.id.to_string())
        .collect()
}

async fn add_machine(store: &Store, request: AddMachines) -> Vec<MachineId> {
    store.add_machines(request).await.unwrap()
}

/// Puts a machine into provisioning error, as the engine would.
async fn fail_provisioning(store: &Store, id: &MachineId, message: &str) {
    engine_steps::fail_provisioning(store, *id, message).await;
}

/// Gives a machine a running instance of type `m5.large` in zone `a`,
/// its agent checked in, as the engine would.
async fn start_instance(store: &Store, id: &MachineId, instance: &str) {
    engine_steps::started(store, *id, instance, "a").await;
}

async fn a_machine_added_without_a_unit_copies_the_model_constraints(store: Store) {
    store
        .set_model_constraints(constraints("mem=4G cores=2"))
        .await
        .unwrap();
    let ids = add_machine(&store, AddMachines::default()).await;
    assert_eq!(ids, vec![machine("0")]);
    let record = store.machine(&ids[0]).unwrap();
    assert_eq!(record.constraints.to_string(), "mem=4096M cores=2");
    assert_eq!(record.state(), MachineState::Pending);
    assert_eq!(record.base, Base::DEFAULT);
}

async fn add_machine_constraints_fill_in_from_the_model_where_unset(store: Store) {
    store
        .set_model_constraints(constraints("mem=4G cores=2"))
        .await
        .unwrap();
    let request = AddMachines {
        constraints: constraints("mem=8G"),
        ..AddMachines::default()
    };
    let ids = add_machine(&store, request).await;
    assert_eq!(
        store.machine(&ids[0]).unwrap().constraints.to_string(),
        "mem=8192M cores=2"
    );
}

async fn changing_model_constraints_never_touches_existing_machines(store: Store) {
    store
        .set_model_constraints(constraints("mem=2G"))
        .await
        .unwrap();
    let first = add_machine(&store, AddMachines::default()).await;
    store
        .set_model_constraints(constraints("mem=3G"))
        .await
        .unwrap();
    let second = add_machine(&store, AddMachines::default()).await;
    assert_eq!(
        store.machine(&first[0]).unwrap().constraints.to_string(),
        "mem=2048M"
    );
    assert_eq!(
        store.machine(&second[0]).unwrap().constraints.to_string(),
        "mem=3072M"
    );
}

async fn machine_numbers_are_never_reused(store: Store) {
    let first = add_machines(&store, 2).await;
    store.remove_machine(first[1], false).await.unwrap();
    let next = add_machine(&store, AddMachines::default()).await;
    assert_eq!(first, vec![machine("0"), machine("1")]);
    assert_eq!(next, vec![machine("2")]);
}

async fn a_zone_placement_is_recorded_on_the_machine(store: Store) {
    let request = AddMachines {
        placement: Some(placement("zone=us-east-1a")),
        ..AddMachines::default()
    };
    let ids = add_machine(&store, request).await;
    let record = store.machine(&ids[0]).unwrap();
    assert_eq!(
        record.placement.as_ref().and_then(Placement::zone),
        Some("us-east-1a")
    );
}

async fn lxd_on_a_machine_makes_a_numbered_container_there(store: Store) {
    add_machine(&store, AddMachines::default()).await;
    let request = AddMachines {
        placement: Some(placement("lxd:0")),
        count: 2,
        ..AddMachines::default()
    };
    let ids = store.add_machines(request).await.unwrap();
    assert_eq!(ids, vec![machine("0/lxd/0"), machine("0/lxd/1")]);
}

async fn lxd_alone_makes_a_new_machine_with_a_container(store: Store) {
    let request = AddMachines {
        placement: Some(placement("lxd")),
        ..AddMachines::default()
    };
    let ids = store.add_machines(request).await.unwrap();
    assert_eq!(ids, vec![machine("0/lxd/0")]);
    assert_eq!(machine_ids(&store), vec!["0", "0/lxd/0"]);
}

async fn a_container_on_a_missing_machine_is_refused_and_changes_nothing(store: Store) {
    let before = store.revision();
    let request = AddMachines {
        placement: Some(placement("lxd:7")),
        ..AddMachines::default()
    };
    let err = store.add_machines(request).await.unwrap_err();
    assert!(matches!(err, StoreError::NotFound(_)), "{err:?}");
    assert_eq!(err.to_string(), "machine 7 not found");
    assert_eq!(store.revision(), before);
    assert!(store.machines().unwrap().is_empty());
}

async fn add_machine_refuses_a_machine_id_placement(store: Store) {
    let request = AddMachines {
        placement: Some(placement("3")),
        ..AddMachines::default()
    };
    let err = store.add_machines(request).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "machine-id 3 cannot be specified when adding machines"
    );
}

async fn add_machine_refuses_a_count_of_zero(store: Store) {
    let err = store
        .add_machines(AddMachines {
            count: 0,
            ..AddMachines::default()
        })
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Invalid(_)), "{err:?}");
    assert_eq!(err.to_string(), "the number of machines must be at least 1");
}

async fn a_machine_never_provisioned_is_removed_from_state_directly(store: Store) {
    let ids = add_machine(&store, AddMachines::default()).await;
    store.remove_machine(ids[0], false).await.unwrap();
    assert!(store.machines().unwrap().is_empty());
}

async fn a_machine_in_provisioning_error_is_removed_directly(store: Store) {
    let ids = add_machine(&store, AddMachines::default()).await;
    fail_provisioning(&store, &ids[0], "no capacity").await;
    store.remove_machine(ids[0], false).await.unwrap();
    assert!(store.machines().unwrap().is_empty());
}

async fn a_provisioned_machine_is_left_stopping_for_the_engine(store: Store) {
    let ids = add_machine(&store, AddMachines::default()).await;
    start_instance(&store, &ids[0], "i-1").await;
    store.remove_machine(ids[0], false).await.unwrap();
    let record = store.machine(&ids[0]).unwrap();
    assert_eq!(record.state(), MachineState::Stopping);
    assert_eq!(record.instance_id(), Some("i-1"));
}

async fn removing_a_machine_that_hosts_containers_needs_force(store: Store) {
    add_machine(&store, AddMachines::default()).await;
    let request = AddMachines {
        placement: Some(placement("lxd:0")),
        ..AddMachines::default()
    };
    store.add_machines(request).await.unwrap();
    let err = store.remove_machine(machine("0"), false).await.unwrap_err();
    assert!(matches!(err, StoreError::Conflict(_)), "{err:?}");
    assert_eq!(
        err.to_string(),
        "machine 0 is hosting containers 0/lxd/0: remove them first, or use --force"
    );
    store.remove_machine(machine("0"), true).await.unwrap();
    assert!(store.machines().unwrap().is_empty());
}

async fn removing_an_unknown_machine_is_not_found(store: Store) {
    let err = store.remove_machine(machine("42"), true).await.unwrap_err();
    assert!(matches!(err, StoreError::NotFound(_)), "{err:?}");
}

async fn retry_makes_a_machine_in_error_pending_with_new_constraints(store: Store) {
    let ids = add_machine(&store, AddMachines::default()).await;
    fail_provisioning(&store, &ids[0], "no instance type satisfies constraints").await;
    let retried = store
        .retry(ids.clone(), Some(constraints("mem=2G cpu-power=400")))
        .await
        .unwrap();
    assert_eq!(retried, ids);
    let record = store.machine(&ids[0]).unwrap();
    assert_eq!(record.state(), MachineState::Pending);
    assert_eq!(record.constraints.to_string(), "mem=2048M cpu-power=400");
    assert_eq!(record.machine.lifecycle.attempts_used, 0);
    assert_eq!(record.machine.lifecycle.last_error, None);
    assert_eq!(record.instance_id(), None);
}

async fn retry_without_constraints_keeps_the_old_ones(store: Store) {
    let request = AddMachines {
        constraints: constraints("mem=64G"),
        ..AddMachines::default()
    };
    let ids = add_machine(&store, request).await;
    fail_provisioning(&store, &ids[0], "boom").await;
    store.retry(ids.clone(), None).await.unwrap();
    assert_eq!(
        store.machine(&ids[0]).unwrap().constraints.to_string(),
        "mem=65536M"
    );
}

async fn retrying_a_machine_not_in_error_is_a_conflict_and_changes_nothing(store: Store) {
    let ids = add_machines(&store, 2).await;
    fail_provisioning(&store, &ids[0], "boom").await;
    let before = store.revision();
    let err = store
        .retry(ids.clone(), Some(constraints("mem=1G")))
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Conflict(_)), "{err:?}");
    assert_eq!(
        err.to_string(),
        "machine 1 is not in provisioning error (it is pending): only machines in error can be retried"
    );
    // The first machine was valid, but the request is all or nothing.
    assert_eq!(
        store.machine(&ids[0]).unwrap().state(),
        MachineState::ProvisioningError
    );
    assert_eq!(store.revision(), before);
}

async fn retry_all_takes_every_machine_in_error(store: Store) {
    let ids = add_machines(&store, 3).await;
    fail_provisioning(&store, &ids[0], "boom").await;
    fail_provisioning(&store, &ids[2], "boom").await;
    let retried = store.retry_all(None).await.unwrap();
    assert_eq!(retried, vec![ids[0], ids[2]]);
    assert!(store
        .machines()
        .unwrap()
        .iter()
        .all(|m| m.state() == MachineState::Pending));
}

async fn a_provisioning_error_keeps_no_instance_and_shows_the_message(store: Store) {
    let ids = add_machine(&store, AddMachines::default()).await;
    fail_provisioning(&store, &ids[0], "InsufficientInstanceCapacity").await;
    let record = store.machine(&ids[0]).unwrap();
    assert_eq!(record.instance_id(), None);
    assert_eq!(
        record.machine.lifecycle.last_error.as_deref(),
        Some("InsufficientInstanceCapacity")
    );
    assert_eq!(record.instance_type, None);
}

async fn zones_keep_an_administrators_disable_across_provider_reports(store: Store) {
    let report = |b_ok: bool| {
        vec![
            ProviderZone {
                name: "a".into(),
                available: true,
                reason: String::new(),
            },
            ProviderZone {
                name: "b".into(),
                available: b_ok,
                reason: if b_ok {
                    String::new()
                } else {
                    "impaired".into()
                },
            },
        ]
    };
    store.set_provider_zones(report(true)).await.unwrap();
    store.set_zone_enabled("a".into(), false).await.unwrap();
    store.set_provider_zones(report(false)).await.unwrap();
    let zones = store.zones().unwrap();
    assert_eq!(zones.len(), 2);
    assert!(!zones[0].available());
    assert_eq!(
        zones[0].unavailable_reason().as_deref(),
        Some("disabled by an administrator")
    );
    assert_eq!(zones[1].unavailable_reason().as_deref(), Some("impaired"));
    store.set_zone_enabled("a".into(), true).await.unwrap();
    assert!(store.zones().unwrap()[0].available());
}

async fn enabling_an_unknown_zone_is_not_found(store: Store) {
    let err = store
        .set_zone_enabled("nowhere".into(), true)
        .await
        .unwrap_err();
    assert_eq!(err.to_string(), "zone \"nowhere\" not found; zones: none");
}

async fn the_change_log_records_every_change_in_order(store: Store) {
    let start = store.revision();
    store
        .set_model_constraints(constraints("mem=1G"))
        .await
        .unwrap();
    let ids = add_machine(&store, AddMachines::default()).await;
    store.remove_machine(ids[0], false).await.unwrap();
    let changes = store.changes_since(start, 100).unwrap();
    let summary: Vec<(String, String, String)> = changes
        .iter()
        .map(|c| {
            (
                c.entity.as_str().to_string(),
                c.id.clone(),
                c.change.as_str().to_string(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        vec![
            ("model".into(), "model".into(), "updated".into()),
            ("machine".into(), "0".into(), "created".into()),
            ("machine".into(), "0".into(), "removed".into()),
        ]
    );
    let revisions: Vec<i64> = changes.iter().map(|c| c.revision).collect();
    assert_eq!(revisions, vec![start + 1, start + 2, start + 3]);
    assert_eq!(store.revision(), start + 3);
}

/// The engine does not read a machine whose only change is its creation
/// (a new machine is pending and held by no one), so every way of making
/// a machine logs it as new, and no later change of a machine looks so.
async fn a_machine_is_logged_new_when_made_and_never_after(store: Store) {
    let start = store.revision();
    let ids = add_machines(&store, 2).await;
    let placed = |to: &str| AddMachines {
        placement: Some(placement(to)),
        ..AddMachines::default()
    };
    let hosted = add_machine(&store, placed("lxd")).await;
    let contained = add_machine(&store, placed("lxd:0")).await;
    fail_provisioning(&store, &ids[0], "boom").await;
    store.retry(vec![ids[0]], None).await.unwrap();
    store.remove_machine(ids[1], false).await.unwrap();

    let changes = store.changes_since(start, 100).unwrap();
    let new: Vec<&str> = changes
        .iter()
        .filter(|c| c.is_new_machine())
        .map(|c| c.id.as_str())
        .collect();
    assert_eq!(new, vec!["0", "1", "2", "2/lxd/0", "0/lxd/0"]);
    for id in [ids[0], hosted[0], contained[0]] {
        let record = store.machine(&id).unwrap();
        if id != ids[0] {
            assert_eq!(record.state(), MachineState::Pending, "machine {id}");
        }
        assert_eq!(record.lease, None, "machine {id}");
    }
    let later: Vec<String> = changes
        .iter()
        .filter(|c| !c.is_new_machine())
        .map(|c| format!("{} {} {}", c.id, c.change.as_str(), c.detail))
        .collect();
    assert!(later.len() >= 4, "{later:?}");
    assert!(
        changes.iter().any(|c| c.is_retry()),
        "the retry is logged as one: {later:?}"
    );
}

async fn concurrent_writers_leave_no_gap_or_reorder_in_the_change_log(store: Store) {
    let start = store.revision();
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let mut ids = Vec::new();
            for _ in 0..25 {
                ids.extend(
                    store
                        .add_machines(AddMachines {
                            count: 2,
                            ..AddMachines::default()
                        })
                        .await
                        .unwrap(),
                );
            }
            ids
        }));
    }
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await.unwrap());
    }
    let unique: BTreeSet<_> = all.iter().collect();
    assert_eq!(unique.len(), 400);
    let changes = store.changes_since(start, 10_000).unwrap();
    assert_eq!(changes.len(), 400);
    for (i, change) in changes.iter().enumerate() {
        assert_eq!(change.revision, start + 1 + i as i64);
    }
}

async fn a_failed_operation_leaves_no_partial_write(store: Store) {
    // The first directive is fine, the second names a missing host: the
    // first machine must not be left behind.
    add_machine(&store, AddMachines::default()).await;
    let ids = vec![machine("0"), machine("9")];
    fail_provisioning(&store, &ids[0], "boom").await;
    let before = store.revision();
    let err = store.retry(ids, None).await.unwrap_err();
    assert!(matches!(err, StoreError::NotFound(_)), "{err:?}");
    assert_eq!(
        store.machine(&machine("0")).unwrap().state(),
        MachineState::ProvisioningError
    );
    assert_eq!(store.revision(), before);
}

/// Operations that fail after writing (one refused by the database, one
/// that gives up by itself), queued among operations that succeed, so the
/// writer commits them in the same batches.
async fn failed_operations_in_a_batch_undo_only_their_own_writes(store: Store) {
    use diesel::RunQueryDsl;
    add_machine(&store, AddMachines::default()).await;
    let before = store.revision();
    let mut tasks = Vec::new();
    for i in 0..90 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            match i % 3 {
                0 => store.add_machines(AddMachines::default()).await.map(|_| ()),
                1 => {
                    store
                        .write(|tx| {
                            diesel::sql_query("UPDATE model SET next_machine = next_machine + 1000")
                                .execute(tx.conn)?;
                            // Machine 0 exists: the database refuses this.
                            diesel::sql_query(
                                "INSERT INTO machines (id, host_number, base, role, state, created_at_ms, updated_at_ms) \
                                 VALUES ('0', 0, 'ubuntu@24.04', 'workload', 'pending', 0, 0)",
                            )
                            .execute(tx.conn)?;
                            Ok(())
                        })
                        .await
                }
                _ => {
                    store
                        .write(|tx| {
                            diesel::sql_query("UPDATE model SET next_machine = next_machine + 1000")
                                .execute(tx.conn)?;
                            Err::<(), _>(StoreError::Conflict("given up".into()))
                        })
                        .await
                }
            }
        }));
    }
    let mut refused_by_database = 0;
    let mut given_up = 0;
    for (i, task) in tasks.into_iter().enumerate() {
        match (i % 3, task.await.unwrap()) {
            (0, Ok(())) => {}
            (1, Err(StoreError::Conflict(m))) if m == "given up" => given_up += 1,
            (1, Err(_)) => refused_by_database += 1,
            (2, Err(StoreError::Conflict(m))) if m == "given up" => given_up += 1,
            (kind, outcome) => panic!("operation {i} (kind {kind}): {outcome:?}"),
        }
    }
    assert_eq!((refused_by_database, given_up), (30, 30));
    // Only the thirty machines added, numbered on from machine 0: no
    // failed operation's counter bump stayed.
    let mut ids = machine_ids(&store);
    ids.sort_by_key(|id| id.parse::<u64>().unwrap());
    let expected: Vec<String> = (0..=30).map(|n| n.to_string()).collect();
    assert_eq!(ids, expected);
    assert_eq!(store.revision(), before + 30);
    add_machine(&store, AddMachines::default()).await;
    assert!(store.machine(&machine("31")).is_ok());
}

async fn state_survives_closing_and_reopening_the_store(store: Store) {
    store
        .set_model_constraints(constraints("cores=4"))
        .await
        .unwrap();
    let ids = add_machines(&store, 3).await;
    start_instance(&store, &ids[1], "i-77").await;
    let model = store.model().unwrap();
    let revision = store.revision();
    let url = store.url().clone();
    drop(store);
    let reopened = Store::open(&url).unwrap();
    assert_eq!(reopened.model().unwrap(), model);
    assert_eq!(reopened.revision(), revision);
    let machines = reopened.machines().unwrap();
    assert_eq!(machines.len(), 3);
    assert_eq!(machines[1].instance_id(), Some("i-77"));
    assert_eq!(machines[1].instance_type.as_deref(), Some("m5.large"));
    let next = reopened
        .add_machines(AddMachines {
            count: 1,
            ..AddMachines::default()
        })
        .await
        .unwrap();
    assert_eq!(next, vec![machine("3")]);
}

async fn a_retrying_machine_keeps_its_attempts_failed_zones_and_message(store: Store) {
    // Transient failures leave the machine retrying with its message shown.
    let id = add_machine(&store, AddMachines::default()).await[0];
    engine_steps::launch_in(&store, id, "a").await;
    let before = berth::store::now_ms();
    let retrying = engine_steps::apply(
        &store,
        id,
        Event::InstanceFailed {
            kind: FailureKind::Transient,
            message: "RequestLimitExceeded".into(),
        },
        MachineUpdate::default(),
    )
    .await;
    assert_eq!(retrying.next.state, MachineState::Retrying);
    assert_eq!(retrying.next.lifecycle.attempts_used, 1);
    let record = store.machine(&id).unwrap();
    assert_eq!(record.machine, retrying.next);
    // Why, when and how many more, in Juju's words.
    let message = record.machine.lifecycle.last_error.clone().unwrap();
    let shown = regex_like_retry(&message);
    assert_eq!(
        shown,
        Some((
            format!("failed to start machine {id} (RequestLimitExceeded), retrying in"),
            "(9 more attempts)".to_string()
        )),
        "{message}"
    );
    assert!(
        record.retry_at_ms.is_some_and(|at| at >= before),
        "{record:?}"
    );
}

/// A retry message cut around its delay (which has jitter):
/// `failed to start machine 0 (cause), retrying in` and `(N more attempts)`.
fn regex_like_retry(message: &str) -> Option<(String, String)> {
    let (head, tail) = message.split_once(" retrying in ")?;
    let (_delay, attempts) = tail.split_once(' ')?;
    Some((format!("{head} retrying in"), attempts.to_string()))
}

async fn an_engine_save_from_a_stale_state_is_a_conflict_and_changes_nothing(store: Store) {
    let ids = add_machine(&store, AddMachines::default()).await;
    start_instance(&store, &ids[0], "i-1").await;
    store.remove_machine(ids[0], false).await.unwrap();
    // The engine still believes the machine is started.
    let believed = Machine {
        state: MachineState::Started,
        ..store.machine(&ids[0]).unwrap().machine
    };
    let err = match store
        .apply(believed, MachineEvent::new(ids[0], Event::AgentLost))
        .await
        .unwrap_err()
    {
        ApplyError::Store(e) => e,
        other => panic!("{other:?}"),
    };
    assert!(matches!(err, StoreError::Conflict(_)), "{err:?}");
    assert_eq!(
        store.machine(&ids[0]).unwrap().state(),
        MachineState::Stopping
    );
}

/// A save that keeps the machine's instance (on SQLite, written without
/// naming `instance_id`, guarded by the instance the engine holds) leaves
/// the instance as it is; and when the engine holds another instance than
/// the stored one, the machine still ends as the engine decided it, as any
/// save would write it.
async fn a_save_that_keeps_the_instance_writes_the_machine_as_decided(store: Store) {
    let instance = |store: &Store| {
        store
            .machine(&machine("0"))
            .unwrap()
            .machine
            .lifecycle
            .instance_id
    };
    let (id, otp) = awaiting_agent(&store).await;
    store.agent_connect(id, otp).await.unwrap();
    assert_eq!(store.machine(&id).unwrap().state(), MachineState::Started);
    assert_eq!(instance(&store).as_deref(), Some("i-1"));

    // The engine believes the machine runs another instance.
    let mut believed = store.machine(&id).unwrap().machine;
    believed.lifecycle.instance_id = Some("i-2".into());
    let before = store.revision();
    let applied = store
        .apply(believed, MachineEvent::new(id, Event::AgentLost))
        .await
        .unwrap();
    assert_eq!(applied.next.state, MachineState::Down);
    assert_eq!(store.machine(&id).unwrap().state(), MachineState::Down);
    assert_eq!(
        instance(&store).as_deref(),
        Some("i-2"),
        "written as decided"
    );
    assert_eq!(store.revision(), before + 1, "one change logged");

    // And back, keeping it.
    engine_steps::apply(&store, id, Event::AgentConnected, MachineUpdate::default()).await;
    assert_eq!(store.machine(&id).unwrap().state(), MachineState::Started);
    assert_eq!(instance(&store).as_deref(), Some("i-2"));
}

async fn the_writer_sets_keeps_and_clears_each_optional_column(store: Store) {
    let id = add_machine(&store, AddMachines::default()).await[0];
    let step = |event: Event, update: MachineUpdate| engine_steps::apply(&store, id, event, update);

    // No zone: retrying, with the time of the next try.
    step(Event::StartInstance, MachineUpdate::default()).await;
    let no_zone = Event::NoZoneAvailable {
        reason: "every zone is down".into(),
        permanent: false,
    };
    step(no_zone, MachineUpdate::default()).await;
    let record = store.machine(&id).unwrap();
    assert_eq!(record.state(), MachineState::Retrying);
    assert!(record.retry_at_ms.is_some());
    assert!(!record.awaiting_check_in);

    // The retry is due: the time is cleared; a launch stores a one-time
    // password's hash.
    let retried = MachineUpdate {
        clear_retry_at: true,
        ..MachineUpdate::default()
    };
    step(Event::RetryDue, retried).await;
    assert_eq!(store.machine(&id).unwrap().retry_at_ms, None);
    let launch = step(
        Event::ZoneChosen { zone: "a".into() },
        MachineUpdate::default(),
    )
    .await;
    let password = launch.password.expect("a launch has a password");
    let record = store.machine(&id).unwrap();
    assert_eq!(record.state(), MachineState::Starting);
    assert!(record.awaiting_check_in);

    // Launched: instance details are set; what the update leaves out is
    // kept.
    let details = MachineUpdate {
        instance_type: Some("t3a.small".into()),
        hardware: Some("arch=amd64 cores=2".into()),
        ..MachineUpdate::default()
    };
    let launched = step(
        Event::InstanceStarted {
            instance_id: "i-1".into(),
        },
        details,
    )
    .await;
    let record = store.machine(&id).unwrap();
    assert_eq!(record.machine, launched.next);
    assert_eq!(record.instance_type.as_deref(), Some("t3a.small"));
    assert_eq!(record.hardware.as_deref(), Some("arch=amd64 cores=2"));
    assert!(record.awaiting_check_in);

    // The agent checks in: the password goes, a heartbeat is set, and with
    // the instance still there its details stay.
    store.agent_connect(id, password).await.unwrap();
    let record = store.machine(&id).unwrap();
    assert_eq!(record.state(), MachineState::Started);
    assert!(!record.awaiting_check_in);
    assert!(record.last_heartbeat_ms.is_some());
    assert_eq!(record.instance_type.as_deref(), Some("t3a.small"));

    // Removed and its instance stopped: dead is never stored, the machine
    // goes.
    store.remove_machine(id, false).await.unwrap();
    let stopped = step(Event::InstanceStopped, MachineUpdate::default()).await;
    assert_eq!(stopped.next.state, MachineState::Dead);
    assert!(matches!(store.machine(&id), Err(StoreError::NotFound(_))));

    let gone = store
        .apply(
            Machine::new(),
            MachineEvent::new(machine("9"), Event::StartInstance),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(gone, ApplyError::Store(StoreError::NotFound(_))),
        "{gone:?}"
    );
}

async fn the_writer_applies_the_configured_policy(store: Store) {
    let policy = Policy {
        bootstrap_timeout: std::time::Duration::from_secs(7),
        ..Policy::default()
    };
    store.set_policy(policy);
    let id = add_machine(&store, AddMachines::default()).await[0];
    engine_steps::launch_in(&store, id, "a").await;
    let launched = engine_steps::apply(
        &store,
        id,
        Event::InstanceStarted {
            instance_id: "i-1".into(),
        },
        MachineUpdate::default(),
    )
    .await;
    assert_eq!(
        launched.effect,
        Effect::WatchBootstrap {
            after: std::time::Duration::from_secs(7)
        }
    );
}

/// An instance gone before its agent checked in is relaunched at once,
/// saying so, not that the agent took too long.
async fn an_instance_gone_before_its_agent_came_is_named_as_the_cause(store: Store) {
    let (id, _) = awaiting_agent(&store).await;
    let current = store.machine(&id).unwrap().machine;
    let request = MachineEvent {
        message: Some("instance i-1 was terminated before its agent checked in".into()),
        ..MachineEvent::new(id, Event::BootstrapTimedOut)
    };
    store.apply(current, request).await.unwrap();
    let record = store.machine(&id).unwrap();
    assert_eq!(record.state(), MachineState::Relaunching);
    assert_eq!(
        record.machine.lifecycle.last_error.as_deref(),
        Some("instance i-1 was terminated before its agent checked in (attempt 1 of 3)")
    );
}

async fn an_agent_of_a_machine_being_relaunched_is_refused_and_changes_nothing(store: Store) {
    let (id, otp) = awaiting_agent(&store).await;
    engine_steps::apply(
        &store,
        id,
        Event::BootstrapTimedOut,
        MachineUpdate::default(),
    )
    .await;
    let before = store.revision();
    let refused = store.agent_connect(id, otp).await.unwrap_err();
    assert!(matches!(refused, StoreError::Conflict(_)), "{refused:?}");
    assert_eq!(
        refused.to_string(),
        "machine 0: agent-connected is not allowed when a machine is relaunching \
         (only when it is awaiting-agent, started or down)"
    );
    assert_eq!(store.revision(), before);
    let record = store.machine(&id).unwrap();
    assert_eq!(record.state(), MachineState::Relaunching);
    assert!(record.awaiting_check_in);
}

async fn an_event_the_lifecycle_refuses_writes_nothing(store: Store) {
    let id = add_machine(&store, AddMachines::default()).await[0];
    let start = store.revision();
    let refused =
        engine_steps::try_apply(&store, id, Event::AgentConnected, MachineUpdate::default())
            .await
            .unwrap_err();
    assert!(matches!(refused, ApplyError::Illegal(_)), "{refused:?}");
    assert_eq!(store.revision(), start);
    assert_eq!(store.machine(&id).unwrap().state(), MachineState::Pending);
}

async fn engine_writes_are_marked_as_the_engines_in_the_change_log(store: Store) {
    let start = store.revision();
    let ids = add_machine(&store, AddMachines::default()).await;
    engine_steps::instance_started(&store, ids[0], "i-1", "a").await;
    let origins: Vec<Origin> = store
        .changes_since(start, 10)
        .unwrap()
        .iter()
        .map(|c| c.origin)
        .collect();
    assert_eq!(
        origins,
        vec![Origin::User, Origin::Engine, Origin::Engine, Origin::Engine]
    );
}

/// A launched machine waiting for its agent, with a one-time password.
async fn awaiting_agent(store: &Store) -> (MachineId, Secret) {
    let ids = add_machine(store, AddMachines::default()).await;
    let otp = engine_steps::instance_started(store, ids[0], "i-1", "a").await;
    (ids[0], otp)
}

async fn the_agents_one_time_password_starts_the_machine_once(store: Store) {
    let (id, otp) = awaiting_agent(&store).await;
    let credential = store.agent_connect(id, otp.clone()).await.unwrap();
    assert_eq!(store.machine(&id).unwrap().state(), MachineState::Started);
    let reused = store.agent_connect(id, otp).await.unwrap_err();
    assert!(matches!(reused, StoreError::Unauthorized(_)), "{reused:?}");
    assert_eq!(
        reused.to_string(),
        "machine 0: the one-time password is wrong or was already used"
    );
    assert_eq!(
        store.agent_heartbeat(id, credential).await.unwrap(),
        MachineState::Started
    );
}

async fn a_check_in_repeated_with_its_chosen_credential_is_answered_again(store: Store) {
    let (id, otp) = awaiting_agent(&store).await;
    let chosen = berth::contracts::secrets::new_secret();
    let proof = |chosen: Option<Secret>| CheckInProof {
        password: otp.clone(),
        chosen,
    };
    let credential = store
        .agent_check_in(id, proof(Some(chosen.clone())))
        .await
        .unwrap();
    assert_eq!(credential.expose(), chosen.expose());
    let after = store.revision();
    // The answer was lost: the same password and credential again.
    let again = store
        .agent_check_in(id, proof(Some(chosen.clone())))
        .await
        .unwrap();
    assert_eq!(again.expose(), chosen.expose());
    assert_eq!(store.revision(), after, "nothing is written twice");
    // The spent password with any other credential, or none, is refused.
    for other in [Some(berth::contracts::secrets::new_secret()), None] {
        let refused = store.agent_check_in(id, proof(other)).await.unwrap_err();
        assert!(
            matches!(refused, StoreError::Unauthorized(_)),
            "{refused:?}"
        );
    }
    assert_eq!(store.revision(), after);
    assert_eq!(
        store.agent_heartbeat(id, chosen).await.unwrap(),
        MachineState::Started
    );
}

async fn a_launch_resumed_under_its_token_keeps_the_earlier_password_valid(store: Store) {
    let ids = add_machine(
        &store,
        AddMachines {
            count: 3,
            ..AddMachines::default()
        },
    )
    .await;
    let mut first = Vec::new();
    for id in &ids {
        first.push(engine_steps::launch_in(&store, *id, "a").await);
    }
    // The controller restarts with the launches in flight: each is sent
    // again under its client token, with a fresh password, all at once
    // (saved together, as the engine's actors' saves are).
    store
        .claim_machines(ids.clone(), Duration::from_secs(30))
        .await
        .unwrap();
    let holding = hold_the_writer(&store).await;
    let mut commits = Vec::new();
    for id in &ids {
        let current = store.machine(id).unwrap().machine;
        let decided = store
            .decide(&current, MachineEvent::new(*id, Event::Resume))
            .unwrap();
        let store = store.clone();
        commits.push(tokio::spawn(async move { store.commit(decided).await }));
    }
    holding.await.unwrap();
    let mut resumed = Vec::new();
    for commit in commits {
        resumed.push(commit.await.unwrap().unwrap());
    }
    for (id, applied) in ids.iter().zip(&resumed) {
        assert!(applied.password.is_some(), "machine {id}: a fresh password");
        engine_steps::apply(
            &store,
            *id,
            Event::InstanceStarted {
                instance_id: format!("i-{id}"),
            },
            MachineUpdate::default(),
        )
        .await;
    }
    // The cloud answered with the instances the first launches started,
    // whose agents have the first passwords; the fresh one works as well.
    store.agent_connect(ids[0], first[0].clone()).await.unwrap();
    store.agent_connect(ids[1], first[1].clone()).await.unwrap();
    let fresh = resumed[2].password.clone().unwrap();
    store.agent_connect(ids[2], fresh).await.unwrap();
    for id in &ids {
        assert_eq!(store.machine(id).unwrap().state(), MachineState::Started);
    }
    // Spent, every one of them.
    let again = store
        .agent_connect(ids[2], first[2].clone())
        .await
        .unwrap_err();
    assert!(matches!(again, StoreError::Unauthorized(_)), "{again:?}");

    // Resumed again and again, the first password stays valid: the
    // cloud answers every call with the first call's instance.
    let id = add_machine(&store, AddMachines::default()).await[0];
    let first_of_many = engine_steps::launch_in(&store, id, "a").await;
    for _ in 0..6 {
        engine_steps::apply(&store, id, Event::Resume, MachineUpdate::default()).await;
    }
    let started = Event::InstanceStarted {
        instance_id: "i-8".into(),
    };
    engine_steps::apply(&store, id, started, MachineUpdate::default()).await;
    store.agent_connect(id, first_of_many).await.unwrap();

    // A new launch (a relaunch after the agent did not check in) has a
    // new token: only its own password is valid.
    let id = add_machine(&store, AddMachines::default()).await[0];
    let earlier = engine_steps::instance_started(&store, id, "i-9", "a").await;
    engine_steps::apply(
        &store,
        id,
        Event::BootstrapTimedOut,
        MachineUpdate::default(),
    )
    .await;
    engine_steps::apply(&store, id, Event::InstanceStopped, MachineUpdate::default()).await;
    let relaunched = engine_steps::apply(
        &store,
        id,
        Event::ZoneChosen { zone: "a".into() },
        MachineUpdate::default(),
    )
    .await;
    assert!(relaunched.password.is_some());
    let started = Event::InstanceStarted {
        instance_id: "i-10".into(),
    };
    engine_steps::apply(&store, id, started, MachineUpdate::default()).await;
    let refused = store.agent_connect(id, earlier).await.unwrap_err();
    assert!(
        matches!(refused, StoreError::Unauthorized(_)),
        "{refused:?}"
    );
}

async fn a_wrong_one_time_password_is_refused_and_changes_nothing(store: Store) {
    let (id, _otp) = awaiting_agent(&store).await;
    let before = store.revision();
    let err = store
        .agent_connect(id, Secret::new("guess"))
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Unauthorized(_)), "{err:?}");
    assert_eq!(
        store.machine(&id).unwrap().state(),
        MachineState::AwaitingAgent
    );
    assert_eq!(store.revision(), before);
}

async fn a_heartbeat_with_a_wrong_credential_is_refused(store: Store) {
    let (id, otp) = awaiting_agent(&store).await;
    store.agent_connect(id, otp).await.unwrap();
    let err = store
        .agent_heartbeat(id, Secret::new("guess"))
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Unauthorized(_)), "{err:?}");
}

async fn a_heartbeat_brings_a_down_machine_back_to_started(store: Store) {
    let (id, otp) = awaiting_agent(&store).await;
    let credential = store.agent_connect(id, otp).await.unwrap();
    engine_steps::apply(&store, id, Event::AgentLost, MachineUpdate::default()).await;
    assert_eq!(store.machine(&id).unwrap().state(), MachineState::Down);
    assert_eq!(
        store.agent_heartbeat(id, credential).await.unwrap(),
        MachineState::Started
    );
    assert_eq!(store.machine(&id).unwrap().state(), MachineState::Started);
}

/// The heartbeat watch reads the silent machines, then shows them down: a
/// machine heard between the read and the write stays started.
async fn a_machine_heard_after_the_silent_read_is_not_shown_down(store: Store) {
    let (heard, otp) = awaiting_agent(&store).await;
    let credential = store.agent_connect(heard, otp).await.unwrap();
    let ids = add_machine(&store, AddMachines::default()).await;
    let otp = engine_steps::instance_started(&store, ids[0], "i-2", "a").await;
    store.agent_connect(ids[0], otp).await.unwrap();
    tokio::time::sleep(Duration::from_millis(5)).await;
    let before = berth::store::now_ms();
    let mut silent = store.silent_agents(before).unwrap();
    silent.sort();
    assert_eq!(silent, vec![heard, ids[0]]);
    tokio::time::sleep(Duration::from_millis(5)).await;
    store.agent_heartbeat(heard, credential).await.unwrap();
    let down = store
        .agents_lost(silent, before, "agent is not responding".into())
        .await
        .unwrap();
    assert_eq!(down, vec![ids[0]]);
    assert_eq!(
        store.machine(&heard).unwrap().state(),
        MachineState::Started
    );
    let lost = store.machine(&ids[0]).unwrap();
    assert_eq!(lost.state(), MachineState::Down);
    assert_eq!(
        lost.machine.lifecycle.last_error.as_deref(),
        Some("agent is not responding")
    );
}

/// The simulated cloud's heartbeats leave alone a heartbeat stored a
/// moment ago (the check-in's), write an older one, and start a machine
/// shown down again either way.
async fn a_vouched_heartbeat_is_written_only_over_an_older_one(store: Store) {
    let heartbeat = |store: &Store, id: &MachineId| store.machine(id).unwrap().last_heartbeat_ms;
    let (id, otp) = awaiting_agent(&store).await;
    store.agent_connect(id, otp).await.unwrap();
    let checked_in = heartbeat(&store, &id).expect("the check-in's heartbeat");
    std::thread::sleep(Duration::from_millis(5));
    store
        .agents_alive(vec![id], Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(
        heartbeat(&store, &id),
        Some(checked_in),
        "heard a moment ago"
    );
    store
        .agents_alive(vec![id], Duration::from_millis(1))
        .await
        .unwrap();
    let later = heartbeat(&store, &id).unwrap();
    assert!(later > checked_in, "{later} after {checked_in}");

    engine_steps::apply(&store, id, Event::AgentLost, MachineUpdate::default()).await;
    assert_eq!(store.machine(&id).unwrap().state(), MachineState::Down);
    store
        .agents_alive(vec![id], Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(store.machine(&id).unwrap().state(), MachineState::Started);
    assert_eq!(heartbeat(&store, &id), Some(later));
}

async fn the_admin_token_is_made_once_and_only_its_hash_is_kept(store: Store) {
    let token = store
        .ensure_admin_token()
        .await
        .unwrap()
        .expect("a new token");
    assert!(store.ensure_admin_token().await.unwrap().is_none());
    let hash = store.admin_token_hash().unwrap();
    assert_ne!(hash, token.expose());
    assert!(secret_matches(token.expose(), &hash));
    let rotated = store.rotate_admin_token().await.unwrap();
    assert!(!secret_matches(
        token.expose(),
        &store.admin_token_hash().unwrap()
    ));
    assert!(secret_matches(
        rotated.expose(),
        &store.admin_token_hash().unwrap()
    ));
}

/// A second controller's store on the same database: another holder.
async fn another_controller(store: &Store) -> Store {
    let url = store.url().clone();
    tokio::task::spawn_blocking(move || Store::open(&url))
        .await
        .unwrap()
        .unwrap()
}

async fn two_controllers_never_hold_one_machine_and_a_lapsed_lease_is_taken_over(store: Store) {
    let ids = add_machines(&store, 3).await;
    let other = another_controller(&store).await;
    assert_ne!(store.holder(), other.holder());
    let ttl = std::time::Duration::from_secs(30);
    let mine = store.claim_machines(ids[..2].to_vec(), ttl).await.unwrap();
    assert_eq!(mine, ids[..2]);
    // The other gets only the machine nobody holds.
    let theirs = other.claim_machines(ids.clone(), ttl).await.unwrap();
    assert_eq!(theirs, ids[2..]);
    let lease = store.machine(&ids[0]).unwrap().lease.unwrap();
    assert_eq!(lease.holder, store.holder());
    assert!(store.holds_machine(&ids[0]).unwrap());
    assert!(!other.holds_machine(&ids[0]).unwrap());
    // Renewal keeps only one's own.
    let renewed = store.renew_leases(ttl).await.unwrap();
    assert_eq!(renewed.machines, ids[..2].iter().copied().collect());
    assert!(other
        .unheld_machines(berth::store::now_ms())
        .unwrap()
        .is_empty());

    // An engine write of a machine whose lease is another's is refused
    // and changes nothing.
    let current = other.machine(&ids[0]).unwrap().machine;
    let decided = other
        .decide(&current, MachineEvent::new(ids[0], Event::StartInstance))
        .unwrap();
    match other.commit(decided).await {
        Err(StoreError::Conflict(message)) => assert_eq!(
            message,
            format!(
                "machine {} is held by controller {}",
                ids[0],
                store.holder()
            )
        ),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        store.machine(&ids[0]).unwrap().state(),
        MachineState::Pending
    );
    let decided = store
        .decide(&current, MachineEvent::new(ids[0], Event::StartInstance))
        .unwrap();
    store.commit(decided).await.unwrap();
    assert_eq!(
        store.machine(&ids[0]).unwrap().state(),
        MachineState::Allocating
    );

    // Released, a machine is anyone's; lapsed, likewise. A controller lets
    // go only of its own: machine 2 stays the other's.
    store.release_machines(vec![ids[1], ids[2]]).await.unwrap();
    assert_eq!(store.machine(&ids[1]).unwrap().lease, None);
    assert_eq!(
        store.machine(&ids[2]).unwrap().lease.map(|l| l.holder),
        Some(other.holder().to_string())
    );
    let brief = std::time::Duration::from_millis(1);
    other.claim_machines(vec![ids[2]], brief).await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    let unheld: Vec<MachineId> = store
        .unheld_machines(berth::store::now_ms())
        .unwrap()
        .into_iter()
        .map(|(id, _)| id)
        .collect();
    assert_eq!(unheld, ids[1..]);
    assert_eq!(
        store.claim_machines(ids[1..].to_vec(), ttl).await.unwrap(),
        ids[1..]
    );
    assert!(other.renew_leases(ttl).await.unwrap().machines.is_empty());
}

async fn a_job_lease_has_one_holder_until_it_lapses(store: Store) {
    let other = another_controller(&store).await;
    let brief = std::time::Duration::from_millis(1);
    let ttl = std::time::Duration::from_secs(30);
    assert!(store.hold_job("reconcile", brief).await.unwrap());
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    assert!(other.hold_job("reconcile", ttl).await.unwrap());
    assert!(!store.hold_job("reconcile", ttl).await.unwrap());
    assert!(other.hold_job("reconcile", ttl).await.unwrap());
    assert_eq!(
        store.job_lease("reconcile").unwrap().unwrap().holder,
        other.holder()
    );
    assert_eq!(store.job_lease("never-held").unwrap(), None);
    // Each controller's own lease says it is alive.
    store.announce(ttl).await.unwrap();
    other.announce(ttl).await.unwrap();
    let mut both = vec![store.holder().to_string(), other.holder().to_string()];
    both.sort();
    assert_eq!(
        store.live_controllers(berth::store::now_ms()).unwrap(),
        both
    );
}

async fn the_models_secrets_are_made_once_and_never_replaced(store: Store) {
    let other = another_controller(&store).await;
    let token = store.model_admin_token(None).await.unwrap();
    assert!(secret_matches(
        token.expose(),
        &store.admin_token_hash().unwrap()
    ));
    // Another controller, with another token in its data directory, gets
    // the model's.
    let again = other
        .model_admin_token(Some(Secret::new("not-the-models")))
        .await
        .unwrap();
    assert_eq!(again.expose(), token.expose());
    assert!(secret_matches(
        token.expose(),
        &other.admin_token_hash().unwrap()
    ));
    let webhook = store
        .model_secret("webhook-secret", Secret::new("first"))
        .await
        .unwrap();
    let second = other
        .model_secret("webhook-secret", Secret::new("second"))
        .await
        .unwrap();
    assert_eq!((webhook.expose(), second.expose()), ("first", "first"));
}

async fn a_store_that_kept_only_the_tokens_hash_takes_the_token_that_matches_it(store: Store) {
    let old = store.ensure_admin_token().await.unwrap().unwrap();
    let kept = store.model_admin_token(Some(old.clone())).await.unwrap();
    assert_eq!(kept.expose(), old.expose());
    assert!(secret_matches(
        old.expose(),
        &store.admin_token_hash().unwrap()
    ));
}

async fn a_store_that_kept_only_the_tokens_hash_makes_a_new_one_without_the_token(store: Store) {
    let old = store.ensure_admin_token().await.unwrap().unwrap();
    let new = store
        .model_admin_token(Some(Secret::new("a-wrong-guess")))
        .await
        .unwrap();
    assert_ne!(new.expose(), old.expose());
    assert_ne!(new.expose(), "a-wrong-guess");
    assert!(secret_matches(
        new.expose(),
        &store.admin_token_hash().unwrap()
    ));
}

/// Machine `id`, pending, taken to allocating as the engine would.
async fn allocating(store: &Store, id: MachineId) -> Machine {
    let pending = store.machine(&id).unwrap().machine;
    let decided = store
        .decide(&pending, MachineEvent::new(id, Event::StartInstance))
        .unwrap();
    store.commit(decided).await.unwrap().next
}

/// The zone choice of machine `id`, which has no units (the kind a
/// census rebuild finds too), among `zones`.
fn unit_less_choice(
    id: MachineId,
    zones: &[berth::domain::zones::Zone],
) -> berth::store::census::ZoneChoice {
    berth::store::census::ZoneChoice {
        id,
        occupant: berth::domain::zones::Occupant::workload(Vec::<String>::new()),
        zones: zones.to_vec(),
        failed: BTreeSet::new(),
        zones_constraint: Default::default(),
        placement_zone: None,
        clear_retry_at: false,
    }
}

async fn the_zone_census_counts_a_chosen_zone_and_lets_it_go_with_the_zone(store: Store) {
    use berth::domain::zones::Zone;
    use berth::store::census::ZoneChosen;
    let ids = add_machines(&store, 2).await;
    let ttl = std::time::Duration::from_secs(30);
    store.claim_machines(ids.clone(), ttl).await.unwrap();
    let zones = vec![Zone::available("a"), Zone::available("b")];
    let mut chosen = Vec::new();
    for id in &ids {
        let allocating = allocating(&store, *id).await;
        let choice = unit_less_choice(*id, &zones);
        match store.choose_zone(allocating, choice).await.unwrap() {
            ZoneChosen::Chosen(applied) => {
                assert_eq!(applied.next.state, MachineState::Starting);
                chosen.push(applied.next.lifecycle.zone.unwrap());
            }
            ZoneChosen::NoZone { reason, .. } => panic!("{reason}"),
        }
    }
    // Spread: one in each.
    assert_eq!(chosen, ["a", "b"]);
    let census = store.zone_census().unwrap();
    assert_eq!(census.get(&("workload:".into(), "a".into())), Some(&1));
    assert_eq!(census.get(&("workload:".into(), "b".into())), Some(&1));
    // A launch that fails transiently gives the zone back.
    let starting = store.machine(&ids[0]).unwrap().machine;
    let failed = MachineEvent::new(
        ids[0],
        Event::InstanceFailed {
            kind: FailureKind::Transient,
            message: "throttled".into(),
        },
    );
    let decided = store.decide(&starting, failed).unwrap();
    store.commit(decided).await.unwrap();
    let census = store.zone_census().unwrap();
    assert_eq!(census.get(&("workload:".into(), "a".into())), None);
    assert_eq!(census.len(), 1);
    // Rebuilt from the machines, the census says the same.
    store.rebuild_zone_census().await.unwrap();
    assert_eq!(store.zone_census().unwrap(), census);
}

/// Zone choices sent all at once, so the writer takes many in one batch,
/// with a launch failure among them that lets its zone go: each choice
/// sees the ones before it, and the census stays what the machines say.
async fn zone_choices_in_one_batch_see_each_other(store: Store) {
    use berth::domain::zones::Zone;
    use berth::store::census::ZoneChosen;
    let ids = add_machines(&store, 31).await;
    let ttl = std::time::Duration::from_secs(30);
    store.claim_machines(ids.clone(), ttl).await.unwrap();
    let zones = vec![
        Zone::available("a"),
        Zone::available("b"),
        Zone::available("c"),
    ];
    let (first, rest) = ids.split_first().unwrap();
    // The first machine takes zone a before the rest start.
    let mut started = Vec::new();
    for id in &ids {
        started.push((*id, allocating(&store, *id).await));
    }
    let choice = |id: MachineId| unit_less_choice(id, &zones);
    let zone_of = |chosen: ZoneChosen| match chosen {
        ZoneChosen::Chosen(applied) => applied.next.lifecycle.zone.unwrap(),
        ZoneChosen::NoZone { reason, .. } => panic!("{reason}"),
    };
    let chosen = store
        .choose_zone(started[0].1.clone(), choice(*first))
        .await
        .unwrap();
    assert_eq!(zone_of(chosen), "a");
    let starting = store.machine(first).unwrap().machine;
    let mut tasks = Vec::new();
    for (i, (id, machine)) in started.into_iter().skip(1).enumerate() {
        let store = store.clone();
        let choice = choice(id);
        let starting = starting.clone();
        let first = *first;
        tasks.push(tokio::spawn(async move {
            if i == 15 {
                // Midway, the first machine's launch fails and its zone is
                // let go.
                let failed = MachineEvent::new(
                    first,
                    Event::InstanceFailed {
                        kind: FailureKind::Transient,
                        message: "throttled".into(),
                    },
                );
                let decided = store.decide(&starting, failed).unwrap();
                store.commit(decided).await.unwrap();
            }
            store.choose_zone(machine, choice).await.unwrap()
        }));
    }
    let mut per_zone = std::collections::BTreeMap::new();
    for task in tasks {
        *per_zone.entry(zone_of(task.await.unwrap())).or_insert(0) += 1;
    }
    assert_eq!(per_zone.values().sum::<i64>(), rest.len() as i64);
    // Thirty machines over three zones: ten each, whichever batch the
    // failure fell in.
    assert_eq!(per_zone.values().copied().collect::<Vec<_>>(), [10, 10, 10]);
    let census = store.zone_census().unwrap();
    for zone in ["a", "b", "c"] {
        assert_eq!(
            census.get(&("workload:".into(), zone.into())),
            Some(&10),
            "{zone}"
        );
    }
    store.rebuild_zone_census().await.unwrap();
    assert_eq!(store.zone_census().unwrap(), census);
}

/// A new machine the engine takes to allocating without writing it: its
/// zone choice writes it from pending to starting in one save and one
/// change, alone or gathered with others; a choice or a save whose machine
/// is no longer pending writes nothing.
async fn a_new_machine_goes_from_pending_to_starting_with_its_zone_in_one_save(store: Store) {
    use berth::domain::zones::Zone;
    use berth::store::census::ZoneChosen;
    let ids = add_machines(&store, 4).await;
    let ttl = std::time::Duration::from_secs(30);
    store.claim_machines(ids.clone(), ttl).await.unwrap();
    let zones = vec![Zone::available("a"), Zone::available("b")];
    let unwritten = |id: MachineId| {
        store
            .decide(&Machine::new(), MachineEvent::new(id, Event::StartInstance))
            .unwrap()
            .into_applied()
            .next
    };
    let before = store.revision();
    // Two choices queued behind a busy writer, so that they go in one
    // batch (on PostgreSQL, one statement).
    let holding = hold_the_writer(&store).await;
    let mut tasks = Vec::new();
    for id in &ids[..2] {
        let (store, allocating) = (store.clone(), unwritten(*id));
        let choice = unit_less_choice(*id, &zones);
        tasks.push(tokio::spawn(async move {
            store
                .choose_zone_from(allocating, MachineState::Pending, choice)
                .await
        }));
    }
    holding.await.unwrap();
    let mut chosen = Vec::new();
    for task in tasks {
        match task.await.unwrap().unwrap() {
            ZoneChosen::Chosen(applied) => {
                assert_eq!(applied.next.state, MachineState::Starting);
                chosen.push(applied.next.lifecycle.zone.unwrap());
            }
            ZoneChosen::NoZone { reason, .. } => panic!("{reason}"),
        }
    }
    chosen.sort();
    assert_eq!(chosen, ["a", "b"]);
    let logged: Vec<String> = store
        .changes_since(before, 100)
        .unwrap()
        .iter()
        .map(|c| format!("{} {}", c.id, c.detail))
        .collect();
    assert_eq!(logged.len(), 2, "{logged:?}");
    for id in &ids[..2] {
        let record = store.machine(id).unwrap();
        assert_eq!(record.state(), MachineState::Starting, "machine {id}");
        let zone = record.machine.lifecycle.zone.clone().unwrap();
        assert!(
            logged.contains(&format!("{id} state=starting zone={zone}")),
            "{logged:?}"
        );
    }
    let census = store.zone_census().unwrap();
    assert_eq!(census.values().sum::<i64>(), 2, "{census:?}");

    // No zone for a new machine: its error is written from pending.
    let no_zone = MachineEvent::new(
        ids[2],
        Event::NoZoneAvailable {
            reason: "no zone named x".into(),
            permanent: true,
        },
    );
    let decided = store.decide(&unwritten(ids[2]), no_zone).unwrap();
    let applied = store
        .commit(decided.stored_as(MachineState::Pending))
        .await
        .unwrap();
    assert_eq!(applied.next.state, MachineState::ProvisioningError);
    assert_eq!(
        store.machine(&ids[2]).unwrap().state(),
        MachineState::ProvisioningError
    );

    // A machine written to allocating meanwhile is not pending: the choice
    // said to start from pending conflicts and writes nothing.
    let allocating = allocating(&store, ids[3]).await;
    let revision = store.revision();
    let stale = store
        .choose_zone_from(
            allocating.clone(),
            MachineState::Pending,
            unit_less_choice(ids[3], &zones),
        )
        .await;
    assert!(matches!(stale, Err(StoreError::Conflict(_))), "{stale:?}");
    assert_eq!(store.machine(&ids[3]).unwrap().machine, allocating);
    assert_eq!(store.revision(), revision);
    assert_eq!(store.zone_census().unwrap(), census);
}

/// Keeps the writer busy for a moment, so that the writes queued meanwhile
/// go in one batch; await it after queueing them.
async fn hold_the_writer(store: &Store) -> tokio::task::JoinHandle<()> {
    let held = store.clone();
    let holding = tokio::spawn(async move {
        held.write(|_| {
            std::thread::sleep(std::time::Duration::from_millis(300));
            Ok(())
        })
        .await
        .unwrap();
    });
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    holding
}

/// What a save leaves of a machine, without what names it (its id, its
/// instance's id, the jittered retry time in its message).
fn saved_shape(store: &Store, id: &MachineId) -> String {
    let r = store.machine(id).unwrap();
    let life = &r.machine.lifecycle;
    format!(
        "{} zone={:?} attempts={} refusals={} instance={} message={} timeouts={} \
         stop_failures={} type={:?} price={:?} hardware={:?} addresses={:?} retry_at={} \
         awaiting={} heartbeat={}",
        r.state(),
        life.zone,
        life.attempts_used,
        life.zones_failed.len(),
        life.instance_id.is_some(),
        life.last_error.is_some(),
        life.bootstrap_timeouts,
        life.stop_failures,
        r.instance_type,
        r.hourly_price.map(|p| p.to_string()),
        r.hardware,
        r.addresses,
        r.retry_at_ms.is_some(),
        r.awaiting_check_in,
        r.last_heartbeat_ms.is_some(),
    )
}

/// Engine saves committed at once (on PostgreSQL the writer writes them
/// together, in one statement) leave each machine as the same save on
/// its own does, column by column; and those whose machine moved, is
/// another controller's or has gone are each refused with their own
/// reason and write nothing, whatever else is in their batch.
async fn engine_saves_at_once_leave_what_each_alone_would(store: Store) {
    const PAIRS: usize = 12;
    let ids = add_machines(&store, 2 * PAIRS as u32 + 3).await;
    let (together, alone) = ids[..2 * PAIRS].split_at(PAIRS);
    let (stale, theirs, gone) = (ids[2 * PAIRS], ids[2 * PAIRS + 1], ids[2 * PAIRS + 2]);
    let ttl = std::time::Duration::from_secs(30);
    let other = another_controller(&store).await;
    other.claim_machines(vec![theirs], ttl).await.unwrap();
    store.claim_machines(ids.clone(), ttl).await.unwrap();
    store.remove_machine(gone, false).await.unwrap();
    let credential = berth::contracts::secrets::hash_secret("credential");
    let step = |k: usize, id: MachineId| -> (Event, MachineUpdate) {
        match k {
            0 => (Event::StartInstance, MachineUpdate::default()),
            1 => (
                Event::NoZoneAvailable {
                    reason: "every zone is down".into(),
                    permanent: false,
                },
                MachineUpdate::default(),
            ),
            2 => (
                Event::RetryDue,
                MachineUpdate {
                    clear_retry_at: true,
                    ..MachineUpdate::default()
                },
            ),
            3 => (
                Event::ZoneChosen { zone: "b".into() },
                MachineUpdate {
                    spread_kind: Some("workload:".into()),
                    ..MachineUpdate::default()
                },
            ),
            4 => (
                Event::InstanceStarted {
                    instance_id: format!("i-{id}"),
                },
                MachineUpdate {
                    instance_type: Some("t3a.small".into()),
                    hourly_price: Some("0.0188".parse().unwrap()),
                    hardware: Some("arch=amd64 cores=2".into()),
                    addresses: Some(vec!["127.0.0.9".into()]),
                    ..MachineUpdate::default()
                },
            ),
            5 => (
                Event::AgentConnected,
                MachineUpdate {
                    credential_hash: Some(credential.clone()),
                    heartbeat_ms: Some(berth::store::now_ms()),
                    ..MachineUpdate::default()
                },
            ),
            _ => (Event::AgentLost, MachineUpdate::default()),
        }
    };
    for k in 0..7 {
        let before = store.revision();
        let holding = hold_the_writer(&store).await;
        let mut commits = Vec::new();
        for &id in together {
            let (event, update) = step(k, id);
            let current = store.machine(&id).unwrap().machine;
            let request = MachineEvent {
                update,
                ..MachineEvent::new(id, event)
            };
            let decided = store.decide(&current, request).unwrap();
            let store = store.clone();
            commits.push(tokio::spawn(async move { store.commit(decided).await }));
        }
        let mut refused = Vec::new();
        if k == 0 {
            let pending = store.machine(&stale).unwrap().machine;
            let believed = Machine {
                state: MachineState::Allocating,
                ..pending.clone()
            };
            let zone = Event::ZoneChosen { zone: "a".into() };
            for (id, current, event) in [
                (stale, believed, zone),
                (theirs, pending.clone(), Event::StartInstance),
                (gone, pending, Event::StartInstance),
            ] {
                let decided = store
                    .decide(&current, MachineEvent::new(id, event))
                    .unwrap();
                let store = store.clone();
                refused.push(tokio::spawn(async move { store.commit(decided).await }));
            }
        }
        holding.await.unwrap();
        for (commit, id) in commits.into_iter().zip(together) {
            let applied = commit.await.unwrap().unwrap();
            assert_eq!(store.machine(id).unwrap().machine, applied.next, "step {k}");
        }
        let refusals: Vec<String> = futures_util::future::join_all(refused)
            .await
            .into_iter()
            .map(|r| match r.unwrap() {
                Err(e) => e.to_string(),
                Ok(applied) => panic!("step {k}: written: {applied:?}"),
            })
            .collect();
        if k == 0 {
            assert_eq!(
                refusals,
                [
                    format!("machine {stale} is pending, not allocating: it changed meanwhile"),
                    format!("machine {theirs} is held by controller {}", other.holder()),
                    format!("machine {gone} not found"),
                ],
            );
            for id in [stale, theirs] {
                assert_eq!(store.machine(&id).unwrap().state(), MachineState::Pending);
            }
        }
        // One change per save written, none for those refused.
        assert_eq!(store.revision() - before, PAIRS as i64, "step {k}");
        for &id in alone {
            let (event, update) = step(k, id);
            engine_steps::apply(&store, id, event, update).await;
        }
        for (a, b) in together.iter().zip(alone) {
            assert_eq!(saved_shape(&store, a), saved_shape(&store, b), "step {k}");
        }
    }
}

/// Check-ins that arrive at once (on PostgreSQL the writer reads their
/// machines in one statement and saves them in one more) each get their
/// own answer: right passwords start their machines, a wrong one, a
/// second use of one and a gone machine are refused and change nothing,
/// and an agent whose machine is still starting is held until the engine
/// records its instance.
async fn check_ins_at_once_each_get_their_own_answer(store: Store) {
    const RIGHT: usize = 8;
    let ids = add_machines(&store, RIGHT as u32 + 4).await;
    let mut passwords = Vec::new();
    for (n, id) in ids[..RIGHT + 2].iter().enumerate() {
        let otp = engine_steps::instance_started(&store, *id, &format!("i-{n}"), "a").await;
        passwords.push(otp);
    }
    let (wrong, twice) = (ids[RIGHT], ids[RIGHT + 1]);
    let starting = ids[RIGHT + 2];
    let early = engine_steps::launch_in(&store, starting, "b").await;
    let gone = ids[RIGHT + 3];
    store.remove_machine(gone, false).await.unwrap();
    let waiting = store.machine(&wrong).unwrap().state();
    let before = store.revision();

    let mut tries: Vec<(MachineId, Secret)> = ids[..RIGHT]
        .iter()
        .copied()
        .zip(passwords.iter().cloned())
        .collect();
    tries.push((wrong, Secret::new("not-the-password".to_string())));
    tries.push((twice, passwords[RIGHT + 1].clone()));
    tries.push((twice, passwords[RIGHT + 1].clone()));
    tries.push((gone, passwords[0].clone()));
    tries.push((starting, early));
    let holding = hold_the_writer(&store).await;
    let tasks: Vec<_> = tries
        .iter()
        .cloned()
        .map(|(id, otp)| {
            let store = store.clone();
            tokio::spawn(async move { store.agent_connect(id, otp).await })
        })
        .collect();
    holding.await.unwrap();
    // The engine records the starting machine's instance meanwhile.
    engine_steps::apply(
        &store,
        starting,
        Event::InstanceStarted {
            instance_id: "i-early".into(),
        },
        MachineUpdate::default(),
    )
    .await;
    let answers: Vec<Result<Secret, StoreError>> = futures_util::future::join_all(tasks)
        .await
        .into_iter()
        .map(|t| t.unwrap())
        .collect();

    for (id, answer) in ids[..RIGHT].iter().zip(&answers) {
        let credential = answer
            .as_ref()
            .unwrap_or_else(|e| panic!("machine {id}: {e}"));
        assert_eq!(store.machine(id).unwrap().state(), MachineState::Started);
        assert_eq!(
            store
                .agent_heartbeat(*id, credential.clone())
                .await
                .unwrap(),
            MachineState::Started
        );
    }
    let refused = |answer: &Result<Secret, StoreError>| match answer {
        Err(e) => e.to_string(),
        Ok(_) => "connected".to_string(),
    };
    let wrong_password =
        |id: MachineId| format!("machine {id}: the one-time password is wrong or was already used");
    assert_eq!(refused(&answers[RIGHT]), wrong_password(wrong));
    assert_eq!(store.machine(&wrong).unwrap().state(), waiting);
    let mut second_use = vec![refused(&answers[RIGHT + 1]), refused(&answers[RIGHT + 2])];
    second_use.sort();
    assert_eq!(second_use, ["connected".to_string(), wrong_password(twice)]);
    assert_eq!(
        store.machine(&twice).unwrap().state(),
        MachineState::Started
    );
    assert_eq!(
        refused(&answers[RIGHT + 3]),
        format!("machine {gone} not found")
    );
    assert!(
        answers[RIGHT + 4].is_ok(),
        "{:?}",
        answers[RIGHT + 4].as_ref().err()
    );
    assert_eq!(
        store.machine(&starting).unwrap().state(),
        MachineState::Started
    );

    // One agent's change per machine started, and the engine's one.
    let changes = store.changes_since(before, 100).unwrap();
    let by_agents: Vec<&str> = changes
        .iter()
        .filter(|c| c.origin == Origin::Agent)
        .map(|c| c.id.as_str())
        .collect();
    assert_eq!(by_agents.len(), RIGHT + 2, "{changes:?}");
    assert_eq!(changes.len(), RIGHT + 3, "{changes:?}");
}

/// Zone choices that arrive at once (on PostgreSQL the writer makes them
/// in turn from one read of the census, then saves and counts them in
/// two statements) spread as one at a time would, and those that cannot
/// be written each say why and count nothing.
async fn zone_choices_at_once_each_get_their_own_answer(store: Store) {
    use berth::domain::zones::Zone;
    use berth::store::census::ZoneChosen;
    const CHOSEN: usize = 12;
    let ids = add_machines(&store, CHOSEN as u32 + 3).await;
    let (theirs, stale, no_zone) = (ids[CHOSEN], ids[CHOSEN + 1], ids[CHOSEN + 2]);
    let ttl = std::time::Duration::from_secs(30);
    let other = another_controller(&store).await;
    let zones = vec![
        Zone::available("a"),
        Zone::available("b"),
        Zone::available("c"),
    ];
    let mut machines = Vec::new();
    for id in &ids {
        store.claim_machines(vec![*id], ttl).await.unwrap();
        machines.push(allocating(&store, *id).await);
    }
    // Another controller takes one machine over; another is moved back by
    // a user (the engine still holds it allocating).
    store.release_machines(vec![theirs]).await.unwrap();
    other.claim_machines(vec![theirs], ttl).await.unwrap();
    let no_zone_yet = Event::NoZoneAvailable {
        reason: "every zone is down".into(),
        permanent: false,
    };
    engine_steps::apply(&store, stale, no_zone_yet, MachineUpdate::default()).await;
    let before = store.revision();
    let holding = hold_the_writer(&store).await;
    // Queued in this order, the three that write nothing first: join_all
    // polls (and so queues) its futures in turn.
    let mut order: Vec<usize> = (CHOSEN..CHOSEN + 3).collect();
    order.extend(0..CHOSEN);
    let choices = order.iter().map(|&at| {
        let id = ids[at];
        let mut choice = unit_less_choice(id, &zones);
        if id == no_zone {
            choice.failed = ["a", "b", "c"].map(String::from).into();
        }
        store.choose_zone(machines[at].clone(), choice)
    });
    let (answers, held) = tokio::join!(futures_util::future::join_all(choices), holding);
    held.unwrap();
    let mut answers: std::collections::BTreeMap<usize, _> =
        order.into_iter().zip(answers).collect();
    let answers: Vec<_> = (0..CHOSEN + 3)
        .map(|at| answers.remove(&at).unwrap())
        .collect();
    // Each takes the zone it would have taken alone, after the ones before
    // it that were written: a, b, c, a, ... (none counts the three).
    for (n, (id, answer)) in ids[..CHOSEN].iter().zip(&answers).enumerate() {
        match answer {
            Ok(ZoneChosen::Chosen(applied)) => {
                let zone = applied.next.lifecycle.zone.clone().unwrap();
                assert_eq!(zone, ["a", "b", "c"][n % 3], "machine {id}");
                assert_eq!(
                    store.machine(id).unwrap().machine.lifecycle.zone,
                    Some(zone.clone())
                );
            }
            other => panic!("machine {id}: {other:?}"),
        }
    }
    match &answers[CHOSEN] {
        Err(e) => assert_eq!(
            e.to_string(),
            format!("machine {theirs} is held by controller {}", other.holder())
        ),
        other => panic!("{other:?}"),
    }
    match &answers[CHOSEN + 1] {
        Err(StoreError::Conflict(message)) => {
            assert_eq!(
                message,
                &format!("machine {stale} is retrying, not allocating: it changed meanwhile")
            )
        }
        other => panic!("{other:?}"),
    }
    match &answers[CHOSEN + 2] {
        Ok(ZoneChosen::NoZone { reason, permanent }) => {
            assert_eq!(
                reason,
                "no zone left to try: \"a\" already refused this machine, \
                 \"b\" already refused this machine, \"c\" already refused this machine"
            );
            assert!(!permanent);
        }
        other => panic!("{other:?}"),
    }
    for id in [theirs, no_zone] {
        assert_eq!(
            store.machine(&id).unwrap().state(),
            MachineState::Allocating
        );
    }
    assert_eq!(store.revision() - before, CHOSEN as i64);
    let census = store.zone_census().unwrap();
    assert_eq!(census.values().sum::<i64>(), CHOSEN as i64, "{census:?}");
    store.rebuild_zone_census().await.unwrap();
    assert_eq!(store.zone_census().unwrap(), census);
}

on_both_backends!(
    two_controllers_never_hold_one_machine_and_a_lapsed_lease_is_taken_over,
    a_job_lease_has_one_holder_until_it_lapses,
    the_models_secrets_are_made_once_and_never_replaced,
    a_store_that_kept_only_the_tokens_hash_takes_the_token_that_matches_it,
    a_store_that_kept_only_the_tokens_hash_makes_a_new_one_without_the_token,
    the_zone_census_counts_a_chosen_zone_and_lets_it_go_with_the_zone,
    zone_choices_in_one_batch_see_each_other,
    a_new_machine_goes_from_pending_to_starting_with_its_zone_in_one_save,
    engine_saves_at_once_leave_what_each_alone_would,
    a_save_that_keeps_the_instance_writes_the_machine_as_decided,
    check_ins_at_once_each_get_their_own_answer,
    zone_choices_at_once_each_get_their_own_answer,
    the_writer_sets_keeps_and_clears_each_optional_column,
    an_event_the_lifecycle_refuses_writes_nothing,
    the_writer_applies_the_configured_policy,
    an_agent_of_a_machine_being_relaunched_is_refused_and_changes_nothing,
    the_agents_one_time_password_starts_the_machine_once,
    a_check_in_repeated_with_its_chosen_credential_is_answered_again,
    a_launch_resumed_under_its_token_keeps_the_earlier_password_valid,
    a_wrong_one_time_password_is_refused_and_changes_nothing,
    a_heartbeat_with_a_wrong_credential_is_refused,
    a_machine_heard_after_the_silent_read_is_not_shown_down,
    an_instance_gone_before_its_agent_came_is_named_as_the_cause,
    a_heartbeat_brings_a_down_machine_back_to_started,
    a_vouched_heartbeat_is_written_only_over_an_older_one,
    the_admin_token_is_made_once_and_only_its_hash_is_kept,
    an_engine_save_from_a_stale_state_is_a_conflict_and_changes_nothing,
    engine_writes_are_marked_as_the_engines_in_the_change_log,
    a_machine_added_without_a_unit_copies_the_model_constraints,
    add_machine_constraints_fill_in_from_the_model_where_unset,
    changing_model_constraints_never_touches_existing_machines,
    machine_numbers_are_never_reused,
    a_zone_placement_is_recorded_on_the_machine,
    lxd_on_a_machine_makes_a_numbered_container_there,
    lxd_alone_makes_a_new_machine_with_a_container,
    a_container_on_a_missing_machine_is_refused_and_changes_nothing,
    add_machine_refuses_a_machine_id_placement,
    add_machine_refuses_a_count_of_zero,
    a_machine_never_provisioned_is_removed_from_state_directly,
    a_machine_in_provisioning_error_is_removed_directly,
    a_provisioned_machine_is_left_stopping_for_the_engine,
    removing_a_machine_that_hosts_containers_needs_force,
    removing_an_unknown_machine_is_not_found,
    retry_makes_a_machine_in_error_pending_with_new_constraints,
    retry_without_constraints_keeps_the_old_ones,
    retrying_a_machine_not_in_error_is_a_conflict_and_changes_nothing,
    retry_all_takes_every_machine_in_error,
    a_provisioning_error_keeps_no_instance_and_shows_the_message,
    zones_keep_an_administrators_disable_across_provider_reports,
    enabling_an_unknown_zone_is_not_found,
    the_change_log_records_every_change_in_order,
    a_machine_is_logged_new_when_made_and_never_after,
    concurrent_writers_leave_no_gap_or_reorder_in_the_change_log,
    a_failed_operation_leaves_no_partial_write,
    failed_operations_in_a_batch_undo_only_their_own_writes,
    state_survives_closing_and_reopening_the_store,
    a_retrying_machine_keeps_its_attempts_failed_zones_and_message,
);

/// PostgreSQL's `plan_cache_mode` on a connection.
fn plan_cache_mode(conn: &mut berth::store::db::Conn) -> Result<String, StoreError> {
    use diesel::RunQueryDsl;
    #[derive(diesel::QueryableByName)]
    struct Setting {
        #[diesel(sql_type = diesel::sql_types::Text)]
        plan_cache_mode: String,
    }
    let berth::store::db::Conn::Postgres(conn) = conn else {
        return Err(StoreError::Invariant("not PostgreSQL".into()));
    };
    let setting: Setting = diesel::sql_query("SHOW plan_cache_mode").get_result(conn)?;
    Ok(setting.plan_cache_mode)
}

/// On PostgreSQL the readers plan every statement for the table as it is
/// (a plan kept from a fresh database's first reads, made while `units`
/// was small, scanned the whole table for every list of machine ids later
/// in a large deploy); the writer keeps its plans.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_readers_plan_each_statement_afresh_and_the_writer_keeps_its_plans() {
    let (store, _guard) = crate::support::postgres_store();
    for _ in 0..3 {
        assert_eq!(store.read(plan_cache_mode).unwrap(), "force_custom_plan");
    }
    let writers = store.write(|tx| plan_cache_mode(tx.conn)).await.unwrap();
    assert_eq!(writers, "auto");
}

/// SQLite's `temp_store` on a connection: 2 when temporary files (the
/// statement journal among them) are kept in memory.
fn sqlite_temp_store(conn: &mut berth::store::db::Conn) -> Result<i32, StoreError> {
    use diesel::RunQueryDsl;
    #[derive(diesel::QueryableByName)]
    struct Setting {
        #[diesel(sql_type = diesel::sql_types::Integer)]
        temp_store: i32,
    }
    let berth::store::db::Conn::Sqlite(conn) = conn else {
        return Err(StoreError::Invariant("not SQLite".into()));
    };
    let setting: Setting = diesel::sql_query("PRAGMA temp_store").get_result(conn)?;
    Ok(setting.temp_store)
}

/// On SQLite the writer keeps each operation's statement journal in memory
/// and leaves the write-ahead log to the checkpointer thread: its own
/// checkpoint waits for `WRITER_CHECKPOINT_PAGES` (8,192), and yet a few
/// hundred machines' writes reach the database file itself within
/// moments, with no connection closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_writes_reach_the_database_file_through_the_checkpointer() {
    use berth::store::checkpointer::CHECKPOINT_AFTER;
    use berth::store::db::DatabaseUrl;

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("berth.db");
    let store = Store::open(&DatabaseUrl::Sqlite(path.clone())).unwrap();
    assert_eq!(
        store.write(|tx| sqlite_temp_store(tx.conn)).await.unwrap(),
        2
    );
    assert_eq!(
        store.read(sqlite_temp_store).unwrap(),
        0,
        "readers keep SQLite's default"
    );
    // What opening wrote is checkpointed first.
    tokio::time::sleep(CHECKPOINT_AFTER * 5).await;
    let file_bytes = || std::fs::metadata(&path).unwrap().len();
    let before = file_bytes();
    add_machines(&store, 500).await;
    let grew = crate::support::eventually(
        "the database file to grow",
        Duration::from_secs(10),
        || async {
            let now = file_bytes();
            if now >= before + 64 * 1024 {
                Ok(now)
            } else {
                Err(format!("{now} bytes, {before} before the writes"))
            }
        },
    )
    .await;
    assert!(grew > before);
    assert_eq!(machine_ids(&store).len(), 500);
}

/// The environment variable under which
/// [`vouched_heartbeats_hold_little_of_sqlites_memory`] measures, in a
/// process of its own.
const MEASURE_SQLITE_MEMORY: &str = "BERTH_TEST_MEASURE_SQLITE_MEMORY";

/// A cloud vouching for 30,000 agents at once: every heartbeat is
/// written, and SQLite's memory grows by less than the pages those
/// machines fill. The writer keeps what a write's savepoint would undo in
/// memory until the write ends, so one write for them all would hold a
/// copy of every page they changed (10 MB here).
///
/// SQLite counts its memory for the whole process, and other tests use it
/// at the same time: the test runs itself again in a process of its own
/// and measures there.
#[test]
fn vouched_heartbeats_hold_little_of_sqlites_memory() {
    if std::env::var_os(MEASURE_SQLITE_MEMORY).is_none() {
        let name = "store::vouched_heartbeats_hold_little_of_sqlites_memory";
        let run = std::process::Command::new(std::env::current_exe().unwrap())
            .args([name, "--exact", "--nocapture", "--test-threads=1"])
            .env(MEASURE_SQLITE_MEMORY, "1")
            .output()
            .unwrap();
        let out = String::from_utf8_lossy(&run.stdout);
        let err = String::from_utf8_lossy(&run.stderr);
        assert!(
            run.status.success() && out.contains("1 passed"),
            "the measuring process: {}\n{out}\n{err}",
            run.status
        );
        return;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        use berth::store::db::DatabaseUrl;
        use libsqlite3_sys::{sqlite3_memory_highwater, sqlite3_memory_used};

        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&DatabaseUrl::Sqlite(dir.path().join("berth.db"))).unwrap();
        let ids = add_machines(&store, 30_000).await;
        // SAFETY: both read SQLite's counters (the second resets its high
        // mark to what is in use), with no other requirement.
        let before = unsafe {
            let used = sqlite3_memory_used();
            sqlite3_memory_highwater(1);
            used
        };
        store
            .agents_alive(ids.clone(), Duration::ZERO)
            .await
            .unwrap();
        // SAFETY: as above.
        let grew = unsafe { sqlite3_memory_highwater(0) } - before;
        let machines = store.machines().unwrap();
        assert_eq!(machines.len(), ids.len());
        assert!(
            machines.iter().all(|m| m.last_heartbeat_ms.is_some()),
            "every vouched machine's heartbeat is written"
        );
        println!("SQLite's memory grew by {grew} bytes");
        assert!(grew < 5 << 20, "SQLite's memory grew by {grew} bytes");
    });
}
