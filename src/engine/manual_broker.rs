//! The ManualBroker: the engine's one way to the existing hosts enlisted
//! over SSH ([`crate::providers::manual`]), as the ProviderBroker is to
//! the cloud. It bounds how many SSH sessions run at once and answers an
//! enlistment by message, so a machine actor never waits on a host.

use std::sync::Arc;

use actix::prelude::*;
use tokio::sync::Semaphore;

use crate::contracts::provider::{FailureClass, ProviderError};
use crate::engine::protocol::{Enlist, HostEnlisted, InstanceFailed, Unenlist};
use crate::engine::supervision::{hooks, kinds};
use crate::providers::manual::ManualHosts;

/// The most SSH sessions at once: enlisting copies a binary of tens of
/// megabytes, so a few at a time keep the controller's link usable.
pub const MAX_SESSIONS: usize = 4;

pub struct ManualBroker {
    hosts: Arc<ManualHosts>,
    sessions: Arc<Semaphore>,
}

impl ManualBroker {
    pub fn new(hosts: ManualHosts) -> ManualBroker {
        ManualBroker {
            hosts: Arc::new(hosts),
            sessions: Arc::new(Semaphore::new(MAX_SESSIONS)),
        }
    }
}

impl Actor for ManualBroker {
    type Context = Context<Self>;
}

/// Its state is the hosts' settings and the session limit, which a
/// restart keeps; enlistments in flight run on.
impl Supervised for ManualBroker {}

fn closed() -> ProviderError {
    ProviderError::new(FailureClass::Transient, "the engine is stopping")
}

impl Handler<Enlist> for ManualBroker {
    type Result = ();

    fn handle(&mut self, msg: Enlist, _ctx: &mut Context<Self>) {
        hooks::checkpoint(kinds::MANUAL_BROKER);
        let (hosts, sessions) = (self.hosts.clone(), self.sessions.clone());
        actix::spawn(async move {
            let result = match sessions.acquire().await {
                Ok(_permit) => hosts.enlist(&msg.request).await,
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
        let (hosts, sessions) = (self.hosts.clone(), self.sessions.clone());
        Box::pin(async move {
            let _permit = sessions.acquire().await.map_err(|_| closed())?;
            hosts.remove(msg.machine, &msg.target).await
        })
    }
}
