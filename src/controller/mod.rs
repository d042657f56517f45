//! kube-runtime wiring: the controllers for remediations, templates, bindings and attestations,
//! their shared context, the error policy and the gauges. Leadership (the election loop, the
//! hand-over) is in [`leader`].

mod attestation;
mod binding;
mod events;
mod leader;
mod leases;
mod remediation;
pub mod retry;
mod stores;
mod template;
mod verify;
mod world;

pub use leases::LeaseTracker;

pub use crate::access::BmcSettings;

use std::{sync::Arc, time::Duration as StdDuration};

use futures::StreamExt;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::{
    Api, Client, Resource, ResourceExt,
    api::ListParams,
    runtime::{
        Controller, WatchStreamExt,
        controller::Action,
        events::{Recorder, Reporter},
        reflector::{self, ObjectRef},
        watcher,
    },
};
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use crate::{
    access::{self, Clients},
    api::{BmcBinding, CoronerRemediation, CoronerRemediationTemplate, Phase},
    driver::{
        self, ApiError, Listing, LoopSettings,
        ports::{Cluster, Remediations},
    },
    gates::StormLimits,
    telemetry::{self, Health, Metrics},
};
pub use leader::Election;

/// The component name in Events and field managers.
pub const MANAGER: &str = "coroner";
/// How often the gauges are recomputed.
const GAUGE_PERIOD: StdDuration = StdDuration::from_secs(5);

/// Continuous BmcBinding verification.
#[derive(Clone, Copy, Debug)]
pub struct VerifySettings {
    pub interval: StdDuration,
    pub concurrency: u16,
}

/// Everything fixed for the life of the process.
pub struct Settings {
    /// coroner acts only on remediations, templates and bindings in this namespace.
    pub namespace: String,
    /// This process; readings taken by an earlier process never count towards a proof.
    pub instance: String,
    /// What device digests are keyed with ([`crate::cluster::content_key`]).
    pub content_key: access::ContentKey,
    pub bmc: BmcSettings,
    pub limits: StormLimits,
    pub verify: VerifySettings,
    /// How often the guard reads a released machine.
    pub guard_interval: StdDuration,
    /// `None`: no leader election (one replica acts alone).
    pub election: Option<Election>,
    /// The node and pod this replica runs as: the leader never fences its own node.
    pub node_name: Option<String>,
    pub pod_name: Option<String>,
}

pub struct Context {
    pub client: Client,
    pub settings: Settings,
    /// What the fence loop needs of `settings`.
    fence: LoopSettings,
    /// This process's monotonic epoch.
    pub started: std::time::Instant,
    /// What the fence loop keeps in memory: admissions, what each fence learnt, device origins' turns.
    pub local: driver::Local,
    /// The Events told, published off the fence's path.
    events: events::EventQueue,
    pub metrics: Metrics,
    pub leases: LeaseTracker,
    /// Asks the leadership loop to hand leadership over to another replica.
    pub step_down: tokio::sync::Notify,
    /// Leadership terms of this process: power readings from an earlier term never count.
    term: std::sync::atomic::AtomicU64,
    /// Whether this process still leads in its term (always, without an election).
    leading: std::sync::atomic::AtomicBool,
    /// The Redfish clients bindings describe (the fence's and the verifier's).
    clients: Clients,
    /// Consecutive failed reconciles per object, for the error policy's backoff.
    failures: retry::Failures,
    /// What the fence loop reads instead of LISTs, set by each leadership term.
    stores: stores::Stores,
}

impl Context {
    pub fn new(client: Client, settings: Settings, metrics: Metrics) -> Self {
        let reporter = Reporter { controller: MANAGER.into(), instance: Some(settings.instance.clone()) };
        let recorder = Recorder::new(client.clone(), reporter);
        let fence = LoopSettings {
            namespace: settings.namespace.clone(),
            limits: settings.limits,
            request_timeout: settings.bmc.request_timeout,
            read_retries: settings.bmc.read_retries,
            guard_interval: settings.guard_interval,
        };
        let clients = Clients::new(settings.bmc, settings.content_key.clone());
        let leading = std::sync::atomic::AtomicBool::new(settings.election.is_none());
        Self {
            client,
            settings,
            fence,
            started: std::time::Instant::now(),
            local: driver::Local::default(),
            events: events::EventQueue::new(recorder),
            metrics,
            leases: LeaseTracker::default(),
            step_down: tokio::sync::Notify::new(),
            term: std::sync::atomic::AtomicU64::new(0),
            leading,
            clients,
            stores: stores::Stores::default(),
            failures: retry::Failures::default(),
        }
    }

    /// Who takes power readings now: this process in its current leadership term. A replica that
    /// loses leadership and regains it starts its proofs afresh.
    pub fn instance(&self) -> String {
        format!("{}/{}", self.settings.instance, self.term.load(std::sync::atomic::Ordering::Acquire))
    }

    pub fn namespace(&self) -> &str {
        &self.settings.namespace
    }

    fn remediations_api(&self) -> Api<CoronerRemediation> {
        Api::namespaced(self.client.clone(), self.namespace())
    }

    fn bindings_api(&self) -> Api<BmcBinding> {
        Api::namespaced(self.client.clone(), self.namespace())
    }

    fn attestations_api(&self) -> Api<crate::api::CoronerAttestation> {
        Api::namespaced(self.client.clone(), self.namespace())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Fence(#[from] driver::Error),
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error(transparent)]
    Api(#[from] ApiError),
    #[error("finalizer: {0}")]
    Finalizer(#[source] Box<kube::runtime::finalizer::Error<Error>>),
    #[error("leader election: {0}")]
    Election(#[from] kube_lease_manager::LeaseManagerError),
}

impl Error {
    /// Event reason suffix and metric label.
    pub fn category(&self) -> &'static str {
        match self {
            Self::Fence(e) => e.category(),
            Self::Kube(kube::Error::Api(status)) if status.code == 409 => "conflict",
            Self::Kube(_) => "kube-api",
            Self::Api(e) => e.category(),
            Self::Finalizer(inner) => match inner.as_ref() {
                kube::runtime::finalizer::Error::ApplyFailed(e) | kube::runtime::finalizer::Error::CleanupFailed(e) => {
                    e.category()
                }
                _ => "finalizer",
            },
            Self::Election(_) => "election",
        }
    }
}

/// The error policy of every controller ([`retry`]: by the error's class, with a per-object
/// backoff while the API server is unavailable).
fn error_policy<K: Resource<DynamicType = ()>>(object: Arc<K>, error: &Error, ctx: Arc<Context>) -> Action {
    retry_policy(object.as_ref(), error, &ctx, None)
}

/// The remediation controller's: a fence that reads the machine retries a conflict or an unavailable
/// API server within min(pollInterval, 250 ms) ([`crate::fence::retry_within`]).
fn fence_error_policy(remediation: Arc<CoronerRemediation>, error: &Error, ctx: Arc<Context>) -> Action {
    let within = crate::fence::retry_within(&remediation.spec, remediation.status.as_ref());
    retry_policy(remediation.as_ref(), error, &ctx, within)
}

fn retry_policy<K: Resource<DynamicType = ()>>(
    object: &K,
    error: &Error,
    ctx: &Context,
    within: Option<StdDuration>,
) -> Action {
    let class = retry::class(error);
    let failures = ctx.failures.failed(object);
    let after = retry::retry_after(class, failures, within);
    match after {
        _ if retry::expected(error, failures) => {
            info!(%error, category = error.category(), ?class, ?after, "reconcile ended early; retrying");
        }
        Some(after) => warn!(%error, category = error.category(), ?class, ?after, "reconcile failed; retrying"),
        None => {
            warn!(%error, category = error.category(), ?class, "reconcile failed; waiting for a change of the object")
        }
    }
    ctx.metrics
        .reconcile_errors
        .get_or_create(&crate::telemetry::CategoryLabels { category: error.category().into() })
        .inc();
    after.map_or_else(Action::await_change, Action::requeue)
}

/// What a controller does with each reconcile's result: a success restarts the object's backoff.
fn settle<K: Resource<DynamicType = ()>, E>(
    ctx: &Arc<Context>,
) -> impl FnMut(Result<(ObjectRef<K>, Action), E>) -> std::future::Ready<()> + use<K, E> {
    let ctx = ctx.clone();
    move |result| {
        if let Ok((object, _)) = result {
            ctx.failures.succeeded(&object);
        }
        std::future::ready(())
    }
}

fn is_pending(remediation: &CoronerRemediation) -> bool {
    Phase::of(remediation) == Phase::Pending
}

/// Runs coroner until `shutdown` is cancelled: the controllers run only while this replica leads
/// ([`leader::run`]; always, without election). On shutdown the controllers stop taking work and the
/// Lease is released.
pub async fn run(ctx: Arc<Context>, health: Health, shutdown: CancellationToken) -> Result<(), Error> {
    if !crds_current(&ctx, &shutdown).await {
        return Ok(());
    }
    tokio::spawn(ctx.leases.clone().run(ctx.client.clone(), ctx.started));
    tokio::spawn(refresh_gauges(ctx.clone(), shutdown.clone()));
    let publisher = ctx.clone();
    tokio::spawn(async move { publisher.events.publish().await });
    let result = match ctx.settings.election.clone() {
        Some(election) => leader::run(ctx.clone(), election, health, shutdown).await,
        None => {
            health.set_ready(true);
            ctx.metrics.leader.set(1);
            run_controllers(ctx.clone(), shutdown).await;
            Ok(())
        }
    };
    if !ctx.events.flush(EVENTS_FLUSH).await {
        warn!("shutting down with Events still unpublished");
    }
    result
}

/// How long a shutdown waits for the Events already told to be published.
const EVENTS_FLUSH: StdDuration = StdDuration::from_secs(2);

/// Waits until every CRD coroner serves carries the schema revision it needs (`api::crd_outdated`):
/// until then it acts on nothing, stays not ready and says why (`CrdOutdated`, the gauge
/// `coroner_crd_outdated`). `false` when `shutdown` came first.
async fn crds_current(ctx: &Context, shutdown: &CancellationToken) -> bool {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let api: Api<CustomResourceDefinition> = Api::all(ctx.client.clone());
    loop {
        let mut served = Vec::new();
        let mut unreadable = None;
        for crd in crate::api::crds() {
            let name = crd.name_any();
            match api.get_opt(&name).await {
                Ok(found) => served.push((name, found.and_then(|c| c.metadata.annotations))),
                Err(error) => unreadable = Some(format!("cannot read CRD {name}: {error}")),
            }
        }
        let problem =
            unreadable.or_else(|| crate::api::crd_outdated(served.iter().map(|(n, a)| (n.as_str(), a.as_ref()))));
        let Some(problem) = problem else {
            ctx.metrics.crd_outdated.set(0);
            return true;
        };
        ctx.metrics.crd_outdated.set(1);
        error!(reason = "CrdOutdated", "acting on nothing: {problem}");
        tokio::select! {
            () = shutdown.cancelled() => return false,
            () = tokio::time::sleep(StdDuration::from_secs(30)) => {}
        }
    }
}

/// The remediation, template and binding controllers, until `stop` is cancelled.
async fn run_controllers(ctx: Arc<Context>, stop: CancellationToken) {
    let client = ctx.client.clone();
    let namespace = ctx.namespace().to_owned();
    let remediations: Api<CoronerRemediation> = Api::namespaced(client.clone(), &namespace);
    ctx.stores.clear();
    // The controller's own watch, its store stripped of managed fields (kube-runtime's
    // `unstable-runtime-stream-control`, as `watches_stream` below).
    let (remediation_store, remediation_writer) = reflector::store::<CoronerRemediation>();
    let own = watcher(remediations.clone(), watcher::Config::default())
        .modify(stores::strip_managed_fields)
        .reflect(remediation_writer)
        .applied_objects();
    let remediation_controller = Controller::for_stream(own, remediation_store);
    let by_node = remediation_controller.store();
    let pending = remediation_controller.store();
    let queued = remediation_controller.store();
    // The phase each remediation was last seen in, to tell when the queue moves.
    let phases = std::sync::Mutex::new(std::collections::HashMap::<String, Phase>::new());
    ctx.stores.remediations.set(remediation_controller.store());
    // The Node and etcd Pod watches that wake remediations also fill the stores the loop reads.
    let (nodes, node_writer) = reflector::store::<Node>();
    ctx.stores.nodes.set(nodes);
    let node_events = watcher(Api::<Node>::all(client.clone()), watcher::Config::default())
        .default_backoff()
        .modify(stores::strip_node)
        .reflect(node_writer)
        .touched_objects();
    let (etcd_pods, pod_writer) = reflector::store::<Pod>();
    ctx.stores.etcd_pods.set(etcd_pods);
    let etcd_events = watcher(Api::<Pod>::all(client.clone()), watcher::Config::default().labels("component=etcd"))
        .default_backoff()
        .modify(stores::strip_pod)
        .reflect(pod_writer)
        .touched_objects();
    // R4: Nodes carrying a taint record of a remediation the cache does not hold, and R1: Nodes
    // carrying a release left to watch past its remediation, for the sweeper.
    let (orphans, sweeps) = tokio::sync::mpsc::unbounded_channel::<String>();
    // R1: a remediation being deleted wakes its node's sweep (its DELETED event still shows the
    // finalizer it had), which judges, once it is gone, the release its finalizer may have left.
    let gone = orphans.clone();
    // A node change wakes the remediations for that node (found through NHC's node-name annotation),
    // and every pending one only for a control-plane node (the quorum gate); an etcd pod change
    // wakes every pending one.
    // Each wake-up on purpose is noted, so that a queued remediation tells it from its timer
    // (`gates::queued_look_skipped`).
    let poke = |ctx: &Context, refs: Vec<ObjectRef<CoronerRemediation>>| {
        for r in &refs {
            ctx.local.poke(&r.name);
        }
        refs
    };
    let (by_node_ctx, queue_ctx, etcd_ctx) = (ctx.clone(), ctx.clone(), ctx.clone());
    let remediation_controller = remediation_controller
        .watches_stream(node_events, move |node: Node| {
            let name = node.name_any();
            let remediations = by_node.state();
            let cached = |owner: &str| remediations.iter().any(|r| r.uid().as_deref() == Some(owner));
            if crate::driver::orphans::wants_sweep(&node, cached) {
                // The receiver lives as long as the controllers.
                let _ = orphans.send(name.clone());
            }
            let woken = remediations
                .into_iter()
                .filter(|r| crate::gates::woken_by_node_change(&node, r))
                .map(|r| ObjectRef::from_obj(&*r))
                .collect::<Vec<_>>();
            poke(&by_node_ctx, woken)
        })
        // A remediation that leaves Pending or a power slot, or is gone, wakes the pending ones: a
        // queued remediation waits for that (or for the window), not on a timer.
        .watches(remediations, watcher::Config::default(), move |changed: CoronerRemediation| {
            let uid = changed.uid().unwrap_or_default();
            if changed.metadata.deletion_timestamp.is_some()
                && let Some(node) = crate::driver::node_of(&changed)
            {
                let _ = gone.send(node);
            }
            let after = changed.metadata.deletion_timestamp.is_none().then(|| Phase::of(&changed));
            let before = {
                let mut phases = phases.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                match after {
                    Some(phase) => phases.insert(uid.clone(), phase),
                    None => phases.remove(&uid),
                }
            };
            if !crate::gates::moves_the_queue(before, after) {
                return Vec::new();
            }
            let woken = queued
                .state()
                .into_iter()
                .filter(|r| is_pending(r) && r.uid().as_deref() != Some(uid.as_str()))
                .map(|r| ObjectRef::from_obj(&*r))
                .collect::<Vec<_>>();
            poke(&queue_ctx, woken)
        })
        .watches_stream(etcd_events, move |_: Pod| {
            let woken = pending
                .state()
                .into_iter()
                .filter(|r| is_pending(r))
                .map(|r| ObjectRef::from_obj(&*r))
                .collect::<Vec<_>>();
            poke(&etcd_ctx, woken)
        })
        .graceful_shutdown_on(stop.clone().cancelled_owned())
        .run(remediation::reconcile, fence_error_policy, ctx.clone())
        .for_each(settle(&ctx));
    let template_controller = Controller::new(
        Api::<CoronerRemediationTemplate>::namespaced(client.clone(), &namespace),
        watcher::Config::default(),
    )
    .graceful_shutdown_on(stop.clone().cancelled_owned())
    .run(template::reconcile, error_policy, ctx.clone())
    .for_each(settle(&ctx));
    let attestation_controller = attestation::run(ctx.clone(), stop.clone());
    let binding_controller = binding::run(ctx.clone(), stop.clone());
    let verify_controller = verify::run(ctx.clone(), stop.clone());
    let sweeper = sweep_orphans(ctx.clone(), sweeps, stop.clone());
    info!(namespace, instance = %ctx.instance(), "controllers started");
    let grace = shutdown_grace(ctx.settings.election.as_ref(), &ctx.settings.bmc);
    // A controller told to stop before its cache filled never finishes its graceful shutdown
    // (kube-runtime holds its runner until the store is ready, and nothing feeds the store any
    // more): after the grace the controllers are dropped, which aborts their reconciles as a crash
    // would, and the fence is built to survive a crash at any await.
    tokio::select! {
        _ = async { futures::join!(remediation_controller, template_controller, binding_controller, attestation_controller, verify_controller, sweeper) } => {
            info!("controllers stopped");
        }
        () = async { stop.cancelled().await; tokio::time::sleep(grace).await } => {
            warn!(?grace, "controllers did not stop within the grace; dropped, their reconciles aborted");
        }
    }
}

/// R4 and R1 past the remediation: sweeps each Node the watches name
/// ([`crate::driver::orphans::sweep`]) until `stop`; a sweep that fails is tried again on the
/// Node's next event.
async fn sweep_orphans(
    ctx: Arc<Context>,
    mut nodes: tokio::sync::mpsc::UnboundedReceiver<String>,
    stop: CancellationToken,
) {
    loop {
        let name = tokio::select! {
            () = stop.cancelled() => return,
            name = nodes.recv() => match name { Some(name) => name, None => return },
        };
        if let Err(error) = crate::driver::orphans::sweep(&*ctx, &ctx.local, &name).await {
            warn!(
                node = name,
                category = error.category(),
                "sweeping coroner's records whose remediation is gone: {error}"
            );
        }
    }
}

/// How long stopping controllers may take for in-flight reconciles to finish. With an election,
/// the Lease duration: the Lease is no longer renewed once the controllers are told to stop, and a
/// reconcile may not send anything once too little of it is left. Without one, one BMC read with
/// its retries and one action.
fn shutdown_grace(election: Option<&Election>, bmc: &access::BmcSettings) -> StdDuration {
    match election {
        // As the Lease is written: whole seconds, at least 3.
        Some(election) => election.lease_duration.max(StdDuration::from_secs(3)),
        None => bmc.request_timeout * (2 + bmc.read_retries),
    }
}

/// Recomputes the gauges every few seconds, from the stores while leading ([`telemetry::remediation_gauges`],
/// [`telemetry::binding_gauges`]), and every minute the nodes nothing could fence
/// ([`crate::verify::unprotected`], from the Nodes' metadata only): a list that fails leaves its
/// gauges as they were.
async fn refresh_gauges(ctx: Arc<Context>, shutdown: CancellationToken) {
    for round in 0u64.. {
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(GAUGE_PERIOD) => {}
        }
        // From the leader's stores; a replica that does not lead (it has none) lists.
        if let Ok(list) = ctx.remediations(Listing::Stored).await {
            ctx.metrics.set_remediation_gauges(&telemetry::remediation_gauges(&list, Timestamp::now()));
        }
        let Ok(bindings) = ctx.bindings(Listing::Stored).await else { continue };
        ctx.metrics.set_binding_gauges(&telemetry::binding_gauges(&bindings));
        if round % UNPROTECTED_EVERY != 0 {
            continue;
        }
        let nodes = match ctx.stores.nodes.read().await {
            Some(stored) => stored.map(|nodes| nodes.into_iter().map(|n| n.metadata).collect::<Vec<_>>()),
            None => Api::<Node>::all(ctx.client.clone())
                .list_metadata(&ListParams::default())
                .await
                .map(|list| list.items.into_iter().map(|n| n.metadata).collect())
                .map_err(ApiError::from),
        };
        if let (Ok(nhcs), Ok(nodes)) = (crate::cluster::node_health_checks(&ctx.client).await, nodes) {
            let (selected, _) = crate::verify::selection(&nhcs, nodes.iter());
            let unprotected = crate::verify::unprotected(&selected, &bindings);
            ctx.metrics.nodes_unprotected.set(i64::try_from(unprotected.len()).unwrap_or(i64::MAX));
        }
    }
}

/// The unprotected-nodes gauge is recomputed every this many gauge rounds (a minute).
const UNPROTECTED_EVERY: u64 = 12;

#[cfg(test)]
mod tests {
    use super::*;

    const BMC: access::BmcSettings = access::BmcSettings {
        request_timeout: StdDuration::from_secs(10),
        read_retries: 2,
        retry_backoff: StdDuration::from_millis(250),
    };

    #[test]
    fn an_elected_replica_waits_for_its_reconciles_as_long_as_its_unrenewed_lease_lets_them_act() {
        let election = Election::new(
            "coroner-leader".into(),
            "coroner-system".into(),
            "coroner-0".into(),
            StdDuration::from_secs(15),
        );
        assert_eq!(shutdown_grace(Some(&election), &BMC), StdDuration::from_secs(15));
    }

    #[test]
    fn a_replica_without_election_waits_for_one_read_with_its_retries_and_one_action() {
        assert_eq!(shutdown_grace(None, &BMC), StdDuration::from_secs(40));
    }
}
