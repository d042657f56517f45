//! The CoronerAttestation controller: kube-runtime's wiring around the attested release
//! ([`driver::attest`], over the fence loop's traits). A remediation change (its fence failing, NHC
//! deleting it) wakes the attestations of its node.

use std::sync::Arc;

use futures::StreamExt;
use kube::{
    Api, ResourceExt,
    runtime::{Controller, controller::Action, reflector::ObjectRef, watcher},
};
use tokio_util::sync::CancellationToken;
use tracing::warn;

use super::{Context, Error};
use crate::{
    api::{CoronerAttestation, CoronerRemediation},
    contract,
    driver::{self, Next},
};

/// Runs the controller until `stop`: first settles release records a stopped coroner left half-way.
pub(super) async fn run(ctx: Arc<Context>, stop: CancellationToken) {
    if let Err(error) = driver::attest::settle_dangling_records(&*ctx).await {
        warn!(%error, "could not check the remediations for half-written attested releases; retried at the next start");
    }
    let client = ctx.client.clone();
    let attestations: Api<CoronerAttestation> = Api::namespaced(client.clone(), ctx.namespace());
    let controller = Controller::new(attestations, watcher::Config::default());
    let store = controller.store();
    controller
        .watches(
            Api::<CoronerRemediation>::namespaced(client, ctx.namespace()),
            watcher::Config::default(),
            move |remediation: CoronerRemediation| {
                let node = contract::node_name(&remediation.metadata).map(str::to_owned);
                store
                    .state()
                    .into_iter()
                    .filter(|a| Some(&a.spec.node_name) == node.as_ref())
                    .map(|a| ObjectRef::from_obj(&*a))
                    .collect::<Vec<_>>()
            },
        )
        .graceful_shutdown_on(stop.cancelled_owned())
        .run(reconcile, super::error_policy, ctx.clone())
        .for_each(super::settle(&ctx))
        .await;
}

async fn reconcile(attestation: Arc<CoronerAttestation>, ctx: Arc<Context>) -> Result<Action, Error> {
    Ok(match driver::attest::reconcile(&*ctx, &ctx.local, &attestation.name_any()).await? {
        Next::Requeue(after) => Action::requeue(after),
        Next::AwaitChange => Action::await_change(),
    })
}
