//! The ManualBroker: the engine's one way to the existing hosts enlisted
//! over SSH ([`crate::providers::manual`]), as the ProviderBroker is to
//! the cloud. It bounds how many SSH sessions run at once and answers an
//! enlistment by message, so a machine actor never waits on a host. As the
//! ProviderBroker does, it acts on a host only while this controller's
//! lease on the machine can be trusted, checked once the session may
//! begin: a controller paused while its enlistment waited for a session
//! must not replace the agent of a machine another controller now holds.

use std::sync::Arc;

use actix::prelude::*;
use tokio::sync::Semaphore;

use crate::contracts::provider::{FailureClass, ProviderError};
use crate::domain::names::MachineId;
use crate::engine::leases::LeaseClock;
use crate::engine::protocol::{Enlist, HostEnlisted, InstanceFailed, Unenlist};
use crate::engine::supervision::{hooks, kinds};
use crate::providers::manual::ManualHosts;

/// The most SSH sessions at once: enlisting copies a binary of tens of
/// megabytes, so a few at a time keep the controller's link usable.
pub const MAX_SESSIONS: usize = 4;

pub struct ManualBroker {
    hosts: Arc<ManualHosts>,
    sessions: Arc<Semaphore>,
    /// This controller's leases, when it shares the store with others.
    fence: Option<Arc<LeaseClock>>,
}

impl ManualBroker {
    pub fn new(hosts: ManualHosts) -> ManualBroker {
        ManualBroker {
            hosts: Arc::new(hosts),
            sessions: Arc::new(Semaphore::new(MAX_SESSIONS)),
            fence: None,
        }
    }

    /// Acts on a machine's host only while `clock` trusts this
    /// controller's lease on the machine.
    pub fn fenced(mut self, clock: Arc<LeaseClock>) -> ManualBroker {
        self.fence = Some(clock);
        self
    }
}

impl Actor for ManualBroker {
    type Context = Context<Self>;
}

/// Its state is the hosts' settings and the session limit, which a
/// restart keeps; enlistments in flight run on.
impl Supervised for ManualBroker {}

/// Refuses to act on `machine`'s host unless its lease can be trusted now.
fn check_lease(fence: Option<&LeaseClock>, machine: MachineId) -> Result<(), ProviderError> {
    match fence {
        Some(clock) if !clock.trusts_machine(machine) => Err(ProviderError::new(
            FailureClass::Transient,
            "this controller does not hold the lease (it ran out before the SSH session \
             began); another controller may be working on it now",
        )),
        _ => Ok(()),
    }
}

fn closed() -> ProviderError {
    ProviderError::new(FailureClass::Transient, "the engine is stopping")
}

impl Handler<Enlist> for ManualBroker {
    type Result = ();

    fn handle(&mut self, msg: Enlist, _ctx: &mut Context<Self>) {
        hooks::checkpoint(kinds::MANUAL_BROKER);
        let (hosts, sessions, fence) = (
            self.hosts.clone(),
            self.sessions.clone(),
            self.fence.clone(),
        );
        actix::spawn(async move {
            let result = match sessions.acquire().await {
                Ok(_permit) => match check_lease(fence.as_deref(), msg.request.machine) {
                    Ok(()) => hosts.enlist(&msg.request).await,
                    Err(refused) => Err(refused),
                },
                Err(_) => Err(closed()),
            };
            // A machine actor that stopped meanwhile hears nothing; its
            // next actor enlists the host again (which replaces the agent).
            match result {
                Ok(enlisted) => msg.enlisted.do_send(HostEnlisted(enlisted)),
                Err(error) => msg.failed.do_send(InstanceFailed(error)),
            }
        });
    }
}

impl Handler<Unenlist> for ManualBroker {
    type Result = ResponseFuture<Result<(), ProviderError>>;

    fn handle(&mut self, msg: Unenlist, _ctx: &mut Context<Self>) -> Self::Result {
        let (hosts, sessions, fence) = (
            self.hosts.clone(),
            self.sessions.clone(),
            self.fence.clone(),
        );
        Box::pin(async move {
            let _permit = sessions.acquire().await.map_err(|_| closed())?;
            check_lease(fence.as_deref(), msg.machine)?;
            hosts.remove(msg.machine, &msg.target).await
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::time::Duration;

    use super::*;
    use crate::contracts::provider::AgentBootstrap;
    use crate::domain::constraints::Constraints;
    use crate::domain::placement::SshTarget;
    use crate::providers::manual::{EnlistRequest, ManualConfig};

    /// Keeps the failures a broker reports.
    struct Failures(Arc<Mutex<Vec<String>>>);

    impl Actor for Failures {
        type Context = Context<Self>;
    }

    impl Handler<InstanceFailed> for Failures {
        type Result = ();

        fn handle(&mut self, msg: InstanceFailed, _ctx: &mut Context<Self>) {
            self.0.lock().unwrap().push(msg.0.message);
        }
    }

    impl Handler<HostEnlisted> for Failures {
        type Result = ();

        fn handle(&mut self, _msg: HostEnlisted, _ctx: &mut Context<Self>) {
            self.0.lock().unwrap().push("enlisted".into());
        }
    }

    #[actix::test]
    async fn a_host_is_not_touched_once_the_machines_lease_cannot_be_trusted() {
        // A clock never renewed trusts no lease: what a controller paused
        // past its leases sees when its enlistment's session comes.
        let clock = Arc::new(LeaseClock::new(Duration::from_secs(15)));
        let broker =
            ManualBroker::new(ManualHosts::new(&ManualConfig::default(), "model")).fenced(clock);
        let broker = broker.start();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let failures = Failures(seen.clone()).start();
        let machine = MachineId::new(4);
        broker.do_send(Enlist {
            request: EnlistRequest {
                machine,
                target: "ubuntu@host.invalid".parse::<SshTarget>().unwrap(),
                constraints: Constraints::default(),
                base: None,
                agent: AgentBootstrap {
                    controller_url: "https://controller.invalid:17070".into(),
                    ca_cert: None,
                    one_time_password: crate::contracts::secrets::Secret::new("password"),
                },
            },
            enlisted: failures.clone().recipient(),
            failed: failures.recipient(),
        });
        let removed = broker
            .send(Unenlist {
                machine,
                target: "ubuntu@host.invalid".parse().unwrap(),
            })
            .await
            .unwrap();
        assert!(removed
            .unwrap_err()
            .message
            .contains("does not hold the lease"));
        for _ in 0..100 {
            if !seen.lock().unwrap().is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let seen = seen.lock().unwrap();
        assert_eq!(seen.len(), 1, "{seen:?}");
        assert!(seen[0].contains("does not hold the lease"), "{seen:?}");
    }
}
