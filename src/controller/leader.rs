//! Leadership of this replica: the election loop (kube-lease-manager) that runs the controllers only
//! while this replica holds the Lease, and the hand-over when the leader runs on the node to fence.
//! The rules themselves (whether the Lease still allows a mutation, who can take over) are pure and
//! live in [`crate::leader`], where the simulator uses them too; this module is the kube wiring.

use std::{sync::Arc, time::Duration as StdDuration};

use k8s_openapi::api::core::v1::Pod;
use kube::{Api, ResourceExt, api::ListParams};
use kube_lease_manager::LeaseManagerBuilder;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::{Context, Error, run_controllers};
use crate::{
    driver::ApiResult,
    leader::{self, Election},
    telemetry::Health,
};

/// Stands for election until `shutdown` is cancelled; while this replica leads, the controllers run
/// (each term with a new term number: power readings of an earlier term never count). Losing the
/// Lease stops them; a hand-over also stands aside for two Lease durations so that another replica
/// takes the Lease. On shutdown the Lease is released.
pub(super) async fn run(
    ctx: Arc<Context>,
    election: Election,
    health: Health,
    shutdown: CancellationToken,
) -> Result<(), Error> {
    let seconds = election.lease_duration.as_secs().max(3);
    let manager = LeaseManagerBuilder::new(ctx.client.clone(), &election.lease_name)
        .with_namespace(&election.namespace)
        .with_identity(&election.identity)
        .with_duration(seconds)
        // Renew at half-life; the check before a BMC mutation renews it once more itself (P6).
        .with_grace((seconds / 2).max(1))
        .build()
        .await?;
    health.set_ready(true);
    info!(identity = %election.identity, lease = %election.lease_name, "standing for election");
    loop {
        tokio::select! {
            () = shutdown.cancelled() => break,
            changed = manager.changed() => match changed {
                Ok(true) => {}
                Ok(false) => continue,
                Err(error) => {
                    warn!(%error, "leader election");
                    tokio::time::sleep(StdDuration::from_secs(1)).await;
                    continue;
                }
            },
        }
        ctx.term.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        ctx.leading.store(true, std::sync::atomic::Ordering::Release);
        election.new_term();
        // The term's first renewal of its own: from here on the check judges on the monotonic clock.
        if let Err(refusal) = election.ensure_leader(&ctx.client, StdDuration::ZERO).await {
            warn!(%refusal, "could not renew the leader Lease at the start of the term");
        }
        info!(identity = %election.identity, "became the leader");
        ctx.metrics.leader.set(1);
        ctx.metrics.leader_changes.inc();
        let term = shutdown.child_token();
        let controllers = tokio::spawn(run_controllers(ctx.clone(), term.clone()));
        let handing_over = loop {
            tokio::select! {
                // A shutdown first: no renewal starts once it is asked for (the grace counts on it).
                biased;
                () = shutdown.cancelled() => break false,
                () = ctx.step_down.notified() => break true,
                changed = manager.changed() => match changed {
                    Ok(true) => {}
                    Ok(false) => {
                        warn!("lost leadership; in-flight fences send nothing more");
                        break false;
                    }
                    Err(error) => {
                        // Without renewals the Lease runs out; stop acting before someone else starts.
                        warn!(%error, "cannot renew the leader Lease; stepping down");
                        break true;
                    }
                },
            }
        };
        // Reconciles still in flight read no more (A1: another process reads now).
        ctx.leading.store(false, std::sync::atomic::Ordering::Release);
        term.cancel();
        let _ = controllers.await;
        ctx.metrics.leader.set(0);
        if let Err(error) = manager.release().await {
            warn!(%error, "could not release the leader Lease");
        }
        if shutdown.is_cancelled() {
            break;
        }
        if handing_over {
            info!("handed leadership over; standing aside for two Lease durations");
            tokio::time::sleep(election.lease_duration * 2).await;
        }
    }
    if let Err(error) = manager.release().await {
        warn!(%error, "could not release the leader Lease");
    }
    ctx.metrics.leader.set(0);
    Ok(())
}

/// The leader runs on `node_to_fence`: asks the election loop to step down if another replica
/// can take over ([`leader::can_take_over`]). `false`: none can (or no election), the fence waits.
pub(super) async fn hand_over(ctx: &Context, node_to_fence: &str) -> ApiResult<bool> {
    let (Some(pod), Some(_)) = (&ctx.settings.pod_name, &ctx.settings.election) else { return Ok(false) };
    let siblings = ready_siblings(ctx, pod, node_to_fence).await?;
    if siblings > 0 {
        ctx.step_down.notify_one();
    }
    Ok(siblings > 0)
}

/// How many other replicas of this coroner (pods with the same `app.kubernetes.io/name` and
/// `app.kubernetes.io/instance` labels as `pod`) could take leadership over.
async fn ready_siblings(ctx: &Context, pod: &str, node_to_fence: &str) -> Result<usize, kube::Error> {
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), ctx.namespace());
    let Some(me) = pods.get_opt(pod).await? else { return Ok(0) };
    let selector: Vec<String> = ["app.kubernetes.io/name", "app.kubernetes.io/instance"]
        .iter()
        .filter_map(|key| me.labels().get(*key).map(|value| format!("{key}={value}")))
        .collect();
    if selector.is_empty() {
        return Ok(0);
    }
    let others = pods.list(&ListParams::default().labels(&selector.join(","))).await?.items;
    Ok(others.iter().filter(|p| leader::can_take_over(p, pod, node_to_fence)).count())
}
