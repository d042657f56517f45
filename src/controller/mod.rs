//! kube-runtime wiring: the controllers for remediations and templates, their shared context, and
//! the error policy.

mod leases;
mod remediation;
mod template;

pub use leases::LeaseTracker;

use std::{sync::Arc, time::Duration as StdDuration};

use futures::{StreamExt, future};
use k8s_openapi::api::core::v1::{Node, ObjectReference, Pod};
use kube::{
    Api, Client, ResourceExt,
    runtime::{
        Controller,
        controller::Action,
        events::{Event, EventType, Recorder, Reporter},
        reflector::ObjectRef,
        watcher,
    },
};
use tracing::{info, warn};

use crate::{
    api::{CoronerRemediation, CoronerRemediationTemplate, Phase},
    cluster::{self, ClusterError},
    contract,
    fence::Notice,
    gates::StormLimits,
};

/// The component name in Events and field managers.
pub const MANAGER: &str = "coroner";

/// Settings for talking to BMCs.
#[derive(Clone, Copy, Debug)]
pub struct BmcSettings {
    pub request_timeout: StdDuration,
    pub read_retries: u32,
    pub retry_backoff: StdDuration,
}

pub struct Context {
    pub client: Client,
    /// coroner acts only on remediations, templates and bindings in this namespace.
    pub namespace: String,
    /// This process; readings taken by an earlier process never count towards a proof.
    pub instance: String,
    pub recorder: Recorder,
    pub bmc: BmcSettings,
    pub limits: StormLimits,
    pub leases: LeaseTracker,
    /// Admissions happen one at a time (so two remediations cannot both take the last slot), and
    /// this remembers when fences were admitted, for the per-window budget.
    pub admissions: tokio::sync::Mutex<Admissions>,
}

/// When fences were admitted. Seeded from the remediations that still exist when coroner starts; a
/// remediation NHC deleted before a restart is forgotten (documented in docs/safety.md).
#[derive(Debug, Default)]
pub struct Admissions {
    pub seeded: bool,
    pub times: Vec<jiff::Timestamp>,
}

impl Context {
    pub fn new(client: Client, namespace: String, instance: String, bmc: BmcSettings, limits: StormLimits) -> Self {
        let reporter = Reporter { controller: MANAGER.into(), instance: Some(instance.clone()) };
        let recorder = Recorder::new(client.clone(), reporter);
        Self {
            client,
            namespace,
            instance,
            recorder,
            bmc,
            limits,
            leases: LeaseTracker::default(),
            admissions: tokio::sync::Mutex::new(Admissions::default()),
        }
    }

    /// Publishes an Event; failing to record one never fails a fence.
    async fn publish(&self, regarding: &ObjectReference, notice: &Notice, action: &str) {
        let event = Event {
            type_: if notice.warning { EventType::Warning } else { EventType::Normal },
            reason: notice.reason.clone(),
            note: Some(notice.message.chars().take(1000).collect()),
            action: action.to_owned(),
            secondary: None,
        };
        if let Err(error) = self.recorder.publish(&event, regarding).await {
            warn!(%error, reason = %notice.reason, "could not publish an Event");
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("the remediation has no {0}")]
    Incomplete(&'static str),
    #[error("finalizer: {0}")]
    Finalizer(#[source] Box<kube::runtime::finalizer::Error<Error>>),
}

impl Error {
    /// Event reason suffix and metric label.
    pub fn category(&self) -> &'static str {
        match self {
            Self::Cluster(e) => e.category(),
            Self::Kube(kube::Error::Api(status)) if status.code == 409 => "conflict",
            Self::Kube(_) => "kube-api",
            Self::Incomplete(_) => "invalid-object",
            Self::Finalizer(_) => "finalizer",
        }
    }
}

fn error_policy<K>(_object: Arc<K>, error: &Error, _ctx: Arc<Context>) -> Action {
    warn!(%error, category = error.category(), "reconcile failed; retrying");
    Action::requeue(cluster::ERROR_REQUEUE)
}

fn is_pending(remediation: &CoronerRemediation) -> bool {
    remediation.status.as_ref().and_then(|s| s.phase).unwrap_or_default() == Phase::Pending
}

/// Runs the remediation and template controllers until `shutdown` resolves.
pub async fn run(ctx: Arc<Context>, shutdown: impl future::Future<Output = ()> + Send + Sync + 'static) {
    let remediations: Api<CoronerRemediation> = Api::namespaced(ctx.client.clone(), &ctx.namespace);
    let templates: Api<CoronerRemediationTemplate> = Api::namespaced(ctx.client.clone(), &ctx.namespace);
    let nodes: Api<Node> = Api::all(ctx.client.clone());
    let shutdown = future::Shared::clone(&futures::FutureExt::shared(shutdown));

    tokio::spawn(ctx.leases.clone().run(ctx.client.clone()));
    let remediation_controller = Controller::new(remediations, watcher::Config::default());
    let by_node = remediation_controller.store();
    let pending = remediation_controller.store();
    // A node change wakes the remediations for that node (found through NHC's node-name annotation)
    // and every pending one (quorum and queues depend on other nodes); so does an etcd pod change.
    let remediation_controller = remediation_controller
        .watches(nodes, watcher::Config::default(), move |node: Node| {
            let name = node.name_any();
            by_node
                .state()
                .into_iter()
                .filter(|r| contract::node_name(&r.metadata) == Some(name.as_str()) || is_pending(r))
                .map(|r| ObjectRef::from_obj(&*r))
                .collect::<Vec<_>>()
        })
        .watches(
            Api::<Pod>::all(ctx.client.clone()),
            watcher::Config::default().labels("component=etcd"),
            move |_: Pod| {
                pending
                    .state()
                    .into_iter()
                    .filter(|r| is_pending(r))
                    .map(|r| ObjectRef::from_obj(&*r))
                    .collect::<Vec<_>>()
            },
        )
        .graceful_shutdown_on(shutdown.clone())
        .run(remediation::reconcile, error_policy, ctx.clone())
        .for_each(|result| async move {
            if let Err(error) = result {
                warn!(%error, "remediation controller");
            }
        });

    let template_controller = Controller::new(templates, watcher::Config::default())
        .graceful_shutdown_on(shutdown)
        .run(template::reconcile, error_policy, ctx.clone())
        .for_each(|_| async {});

    info!(namespace = %ctx.namespace, instance = %ctx.instance, "controllers started");
    future::join(remediation_controller, template_controller).await;
    info!("controllers stopped");
}
