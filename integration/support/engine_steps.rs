//! Moving machines through their lifecycle as the engine would, for tests
//! that need a machine in some state: every step goes through the store's
//! one writer ([`Store::apply`]), so a test can only reach states the
//! lifecycle allows.

use berth::contracts::secrets::Secret;
use berth::domain::machine::{Event, FailureKind, Machine};
use berth::domain::names::MachineId;
use berth::store::lifecycle::{Applied, MachineEvent, MachineUpdate};
use berth::store::Store;

/// Applies `event` (with `update` written beside it) to machine `id` as
/// stored now, as the engine's actor would.
pub async fn apply(store: &Store, id: MachineId, event: Event, update: MachineUpdate) -> Applied {
    try_apply(store, id, event, update)
        .await
        .unwrap_or_else(|e| panic!("machine {id}: {e}"))
}

/// [`apply`], keeping the error.
pub async fn try_apply(
    store: &Store,
    id: MachineId,
    event: Event,
    update: MachineUpdate,
) -> Result<Applied, berth::store::lifecycle::ApplyError> {
    let current: Machine = store.machine(&id).expect("machine").machine;
    let request = MachineEvent {
        update,
        ..MachineEvent::new(id, event)
    };
    store.apply(current, request).await
}

/// Takes a pending machine to `starting` in `zone`; returns the one-time
/// password its launch was given.
pub async fn launch_in(store: &Store, id: MachineId, zone: &str) -> Secret {
    apply(store, id, Event::StartInstance, MachineUpdate::default()).await;
    let launching = apply(
        store,
        id,
        Event::ZoneChosen { zone: zone.into() },
        MachineUpdate::default(),
    )
    .await;
    launching.password.expect("a launch's one-time password")
}

/// Takes a pending machine to `awaiting-agent` with instance `instance` of
/// type `m5.large` in `zone`; returns its agent's one-time password.
pub async fn instance_started(store: &Store, id: MachineId, instance: &str, zone: &str) -> Secret {
    let password = launch_in(store, id, zone).await;
    let update = MachineUpdate {
        instance_type: Some("m5.large".into()),
        hardware: Some(format!(
            "arch=amd64 cores=2 mem=8192M availability-zone={zone}"
        )),
        ..MachineUpdate::default()
    };
    apply(
        store,
        id,
        Event::InstanceStarted {
            instance_id: instance.into(),
        },
        update,
    )
    .await;
    password
}

/// Takes a pending machine to `started` (its agent checked in) with
/// instance `instance` in `zone`; returns the agent's credential.
pub async fn started(store: &Store, id: MachineId, instance: &str, zone: &str) -> Secret {
    let password = instance_started(store, id, instance, zone).await;
    store
        .agent_connect(id, password)
        .await
        .unwrap_or_else(|e| panic!("machine {id}: {e}"))
}

/// Takes a pending machine to provisioning error with `message`, as a
/// launch that failed for good would.
pub async fn fail_provisioning(store: &Store, id: MachineId, message: &str) {
    launch_in(store, id, "a").await;
    apply(
        store,
        id,
        Event::InstanceFailed {
            kind: FailureKind::Permanent,
            message: message.into(),
        },
        MachineUpdate::default(),
    )
    .await;
}
