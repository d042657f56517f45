//! Leadership of this replica: the election loop (kube-lease-manager) that runs the controllers only
//! while this replica holds the Lease, and the hand-over when the leader runs on the node to fence.
//! The rules themselves (whether the Lease still allows a mutation, who can take over) are pure and
//! live in [`crate::leader`], where the simulator uses them too; this module is the kube wiring.

use std::{
    sync::{Arc, Mutex, PoisonError},
    time::{Duration as StdDuration, Instant},
};

use jiff::Timestamp;
use k8s_openapi::{
    api::{coordination::v1::Lease, core::v1::Pod},
    apimachinery::pkg::apis::meta::v1::MicroTime,
};
use kube::{Api, Client, ResourceExt, api::ListParams, api::PostParams};
use kube_lease_manager::LeaseManagerBuilder;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::{Context, Error, run_controllers};
use crate::{
    driver::{ApiError, ApiResult},
    leader::{self, Held, Refusal, held, may_mutate},
    telemetry::Health,
};

#[derive(Clone, Debug)]
pub struct Election {
    pub lease_name: String,
    pub namespace: String,
    /// This replica's holder identity (its pod name).
    pub identity: String,
    pub lease_duration: StdDuration,
    /// This process's last successful renewal request of the current term: when it was sent, on its
    /// monotonic clock, and the Lease's resourceVersion it wrote (shared by the clones of one process).
    renewed: Arc<Mutex<Option<(Instant, String)>>>,
}

impl Election {
    pub fn new(lease_name: String, namespace: String, identity: String, lease_duration: StdDuration) -> Self {
        Self { lease_name, namespace, identity, lease_duration, renewed: Arc::default() }
    }

    fn held(&self, lease: Option<&Lease>) -> Held {
        let renewed = self.renewed.lock().unwrap_or_else(PoisonError::into_inner).clone();
        held(lease, renewed.as_ref().map(|(sent, version)| (sent.elapsed(), version.as_str())), Timestamp::now())
    }

    /// A new term: nothing this process renewed before counts.
    pub fn new_term(&self) {
        *self.renewed.lock().unwrap_or_else(PoisonError::into_inner) = None;
    }

    /// P6, the leader check: reads the Lease, which must still be this replica's as this process
    /// knows it ([`held`], [`may_mutate`]: a Lease that may have run out is not renewed), renews it
    /// under its resourceVersion, and judges `need` on the monotonic clock from when that renewal
    /// was sent.
    pub async fn ensure_leader(&self, client: &Client, need: StdDuration) -> Result<(), Refusal> {
        let leases: Api<Lease> = Api::namespaced(client.clone(), &self.namespace);
        // kube-lease-manager's own renewal may come in between: read again once.
        for _ in 0..2 {
            let lease = leases.get_opt(&self.lease_name).await.map_err(|e| Refusal::Unreadable(ApiError::from(e)))?;
            // Still held, by more than the skew margin: kube-lease-manager renews only at half-life,
            // so asking `need` of the Lease before renewing it would refuse a healthy leader.
            may_mutate(lease.as_ref(), &self.identity, self.held(lease.as_ref()), StdDuration::ZERO)?;
            let Some(mut lease) = lease else { return Err(Refusal::NoLease) };
            if let Some(spec) = lease.spec.as_mut() {
                spec.renew_time = Some(MicroTime(Timestamp::now()));
            }
            let sent = Instant::now();
            match leases.replace(&self.lease_name, &PostParams::default(), &lease).await.map_err(ApiError::from) {
                Ok(renewed) => {
                    let version = renewed.resource_version().unwrap_or_default();
                    *self.renewed.lock().unwrap_or_else(PoisonError::into_inner) = Some((sent, version));
                    return may_mutate(Some(&renewed), &self.identity, Held::Since(sent.elapsed()), need);
                }
                Err(ApiError::Conflict(_)) => {}
                Err(error) => return Err(Refusal::NotRenewed(error)),
            }
        }
        Err(Refusal::NotRenewed(ApiError::Conflict("the leader Lease changed under both renewals".into())))
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(holder: &str, renewed: i64, duration: i32) -> Lease {
        use k8s_openapi::api::coordination::v1::LeaseSpec;
        let renewed = Timestamp::UNIX_EPOCH + jiff::SignedDuration::from_secs(1_800_000_000 + renewed);
        Lease {
            spec: Some(LeaseSpec {
                holder_identity: Some(holder.into()),
                renew_time: Some(MicroTime(renewed)),
                lease_duration_seconds: Some(duration),
                ..LeaseSpec::default()
            }),
            ..Lease::default()
        }
    }

    type Sent = Vec<(String, String, serde_json::Value)>;

    /// A mock apiserver that answers each request with `held` at the next of `versions`, and
    /// returns what was sent: method, path and query, body.
    fn serve(held: Lease, versions: &'static [&'static str]) -> (Client, tokio::task::JoinHandle<Sent>) {
        use http::{Request, Response};
        use kube::client::Body;
        let (mock, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let server = tokio::spawn(async move {
            let mut seen = Vec::new();
            for version in versions {
                let Some((request, respond)) = handle.next_request().await else { break };
                let (method, uri) = (request.method().to_string(), request.uri().to_string());
                let bytes = request.into_body().collect_bytes().await.unwrap();
                let body =
                    if bytes.is_empty() { serde_json::Value::Null } else { serde_json::from_slice(&bytes).unwrap() };
                seen.push((method, uri, body));
                let mut answer = held.clone();
                answer.metadata.resource_version = Some((*version).into());
                respond
                    .send_response(Response::builder().body(Body::from(serde_json::to_vec(&answer).unwrap())).unwrap());
            }
            seen
        });
        (Client::new(mock, "default"), server)
    }

    /// The leader check as sent: a GET of the Lease, then its renewal as a PUT under the
    /// resourceVersion read (a Lease written in between conflicts instead of being overwritten).
    #[tokio::test]
    async fn the_leader_check_renews_the_lease_it_read_under_that_version_and_judges_from_the_renewal() {
        let election =
            Election::new("coroner-leader".into(), "coroner-system".into(), "a".into(), StdDuration::from_secs(15));
        let need = StdDuration::from_secs(5);
        // Its renewTime long past, and no renewal of this term yet: the wall clock judges, and refuses.
        let mut held = lease("a", -100_000_000, 15);
        held.metadata.name = Some("coroner-leader".into());
        let (client, server) = serve(held.clone(), &["9"]);
        assert!(matches!(election.ensure_leader(&client, need).await, Err(Refusal::TooLittleLeft { .. })));
        assert_eq!(server.await.unwrap().len(), 1, "a Lease that may have run out is not renewed");
        // Renewed by this process at version 9 a moment ago: the monotonic clock judges, whatever
        // renewTime says, and the renewal goes under version 9.
        *election.renewed.lock().unwrap() = Some((Instant::now(), "9".into()));
        let (client, server) = serve(held, &["9", "10"]);
        assert_eq!(election.ensure_leader(&client, need).await, Ok(()));
        let seen = server.await.unwrap();
        let path = "/apis/coordination.k8s.io/v1/namespaces/coroner-system/leases/coroner-leader";
        assert_eq!((seen[0].0.as_str(), seen[0].1.as_str()), ("GET", path));
        assert_eq!((seen[1].0.as_str(), seen[1].1.as_str()), ("PUT", format!("{path}?").as_str()));
        assert_eq!(seen[1].2["metadata"]["resourceVersion"], serde_json::json!("9"), "conditional on the Lease read");
        assert_eq!(election.renewed.lock().unwrap().as_ref().map(|(_, v)| v.clone()), Some("10".into()));
    }
}
