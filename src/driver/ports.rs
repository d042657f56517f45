//! What the fence loop touches, as small traits: the remediations (read; status written under a
//! resourceVersion precondition), the Nodes (read; written under a precondition), the nodes' Leases,
//! the leader Lease, the rest of the cluster the gates and the release read, Events, the BMCs and
//! the clock. Production implements them with kube and reqwest (`controller::Context`); the
//! simulator (`crate::sim`) implements them in memory, with faults.

use std::{future::Future, time::Duration as StdDuration};

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, ObjectReference, Pod};

use super::{Admissions, Memories, Origins};
use crate::{
    access::Unusable,
    api::{BmcBinding, BmcBindingStatus, CoronerRemediation, CoronerRemediationStatus},
    bmc::{BmcError, ResetType, SystemReading},
    fence::{Mono, Notice},
    gates::{LeaseSighting, StormLimits},
    leader,
    telemetry::Metrics,
};

/// A failed call to the Kubernetes API, by what the loop does about it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ApiError {
    /// The object changed since it was read (HTTP 409): read again and decide again.
    #[error("conflict: {0}")]
    Conflict(String),
    #[error("not found: {0}")]
    NotFound(String),
    /// Refused for good as sent (403, 422, an admission webhook or policy).
    #[error("denied: {0}")]
    Denied(String),
    /// Transport trouble, timeouts, 5xx: may clear by itself.
    #[error("Kubernetes API unavailable: {0}")]
    Unavailable(String),
}

impl ApiError {
    /// Event reason suffix and metric label.
    pub fn category(&self) -> &'static str {
        match self {
            Self::Conflict(_) => "conflict",
            Self::NotFound(_) => "not-found",
            Self::Denied(_) => "denied",
            Self::Unavailable(_) => "kube-api",
        }
    }
}

impl From<kube::Error> for ApiError {
    fn from(error: kube::Error) -> Self {
        match &error {
            kube::Error::Api(status) if status.code == 409 => Self::Conflict(status.message.clone()),
            kube::Error::Api(status) if status.code == 404 => Self::NotFound(status.message.clone()),
            kube::Error::Api(status) if matches!(status.code, 400 | 403 | 422) => Self::Denied(status.message.clone()),
            _ => Self::Unavailable(error.to_string()),
        }
    }
}

pub type ApiResult<T> = Result<T, ApiError>;

/// This process's clocks.
pub trait Clock {
    /// Wall-clock time, for what people and the API read.
    fn now(&self) -> Timestamp;
    /// The monotonic clock, for every duration coroner decides on.
    fn mono(&self) -> Mono;
}

pub trait Remediations {
    fn remediation(&self, name: &str) -> impl Future<Output = ApiResult<Option<CoronerRemediation>>> + Send;
    /// Every remediation in coroner's namespace.
    fn remediations(&self) -> impl Future<Output = ApiResult<Vec<CoronerRemediation>>> + Send;
    /// Writes `status` through the status subresource under `current`'s resourceVersion.
    fn write_status(
        &self,
        current: &CoronerRemediation,
        status: CoronerRemediationStatus,
    ) -> impl Future<Output = ApiResult<CoronerRemediation>> + Send;
}

pub trait Nodes {
    fn node(&self, name: &str) -> impl Future<Output = ApiResult<Option<Node>>> + Send;
    fn nodes(&self) -> impl Future<Output = ApiResult<Vec<Node>>> + Send;
    /// Writes `wanted`'s taints and annotations onto the Node as a patch under `current`'s
    /// resourceVersion; nothing else is sent (a whole-Node update would drop fields the server knows
    /// and these structs do not).
    fn patch_node(&self, current: &Node, wanted: &Node) -> impl Future<Output = ApiResult<Node>> + Send;
}

pub trait NodeLeases {
    /// `None`: the node has no Lease in kube-node-lease; `Some(renewTime)` otherwise.
    fn node_lease(&self, node: &str) -> impl Future<Output = ApiResult<Option<Option<Timestamp>>>> + Send;
    /// How long ago this process last saw the node's Lease change, on its monotonic clock.
    fn lease_sighting(&self, node: &str, now: Mono) -> LeaseSighting;
}

pub trait Leadership {
    /// Who takes power readings now: this process in its current leadership term.
    fn instance(&self) -> String;
    /// The node this replica runs on: its leader never fences it.
    fn own_node(&self) -> Option<&str>;
    /// Whether the leader Lease is still this replica's for longer than a request can take.
    fn ensure_leader(&self, need: StdDuration) -> impl Future<Output = Result<(), leader::Refusal>> + Send;
    /// Hands leadership to a replica that can fence `node_to_fence`, if there is one; `false` when
    /// there is none (or no election).
    fn hand_over(&self, node_to_fence: &str) -> impl Future<Output = ApiResult<bool>> + Send;
}

/// The rest of the cluster the gates, the identity step and the release read or change.
pub trait Cluster {
    /// Every BmcBinding in coroner's namespace.
    fn bindings(&self) -> impl Future<Output = ApiResult<Vec<BmcBinding>>> + Send;
    fn binding(&self, name: &str) -> impl Future<Output = ApiResult<Option<BmcBinding>>> + Send;
    /// Writes a binding's status (a merge patch from `old` to `new`: a field `new` lacks is cleared).
    fn write_binding_status(
        &self,
        name: &str,
        old: Option<&BmcBindingStatus>,
        new: &BmcBindingStatus,
    ) -> impl Future<Output = ApiResult<()>> + Send;
    /// Pods labelled `component=etcd` in kube-system.
    fn etcd_pods(&self) -> impl Future<Output = ApiResult<Vec<Pod>>> + Send;
    /// Pods bound to the node.
    fn pods_on(&self, node: &str) -> impl Future<Output = ApiResult<Vec<Pod>>> + Send;
    /// Force-deletes a pod (grace period 0) under its UID.
    fn delete_pod(&self, pod: &Pod) -> impl Future<Output = ApiResult<()>> + Send;
    /// VolumeAttachments that name the node.
    fn volume_attachments_on(&self, node: &str) -> impl Future<Output = ApiResult<usize>> + Send;
}

pub trait Events {
    /// Publishes an Event; failing to record one never fails a fence.
    fn publish(&self, regarding: &ObjectReference, notice: &Notice, action: &str) -> impl Future<Output = ()> + Send;
}

/// One power device's service (a Redfish BMC today): finds the node's target, reads its power,
/// acts on it.
pub trait Device: Send + Sync {
    /// scheme://host:port: one power action per origin at a time.
    fn origin(&self) -> String;
    /// The target the fence goes through: the pinned one, the only one, or the one whose UUID names
    /// the node. `Ok(Err(refusal))` when the device answered and identity is refused.
    fn find(
        &self,
        pinned: Option<&str>,
        node_uuid: &str,
    ) -> impl Future<Output = Result<Result<SystemReading, crate::identity::IdentityRefusal>, BmcError>> + Send;
    /// One reading of the target at `path`: its identity and power, from the same answer.
    fn read(&self, path: &str) -> impl Future<Output = Result<SystemReading, BmcError>> + Send;
    /// One power action, never retried. Returns the device's status code.
    fn act(&self, system: &SystemReading, reset: ResetType) -> impl Future<Output = Result<u16, BmcError>> + Send;
}

pub trait Devices {
    type Device: Device;
    /// The device a binding describes, with the serial of the client built for it (a new serial after
    /// each rebuild: new credentials, a new CA bundle). `Ok(Err(_))`: what the binding refers to (its
    /// Secret, CA bundle, pin, endpoint) cannot be used.
    fn device(
        &self,
        binding: &BmcBinding,
    ) -> impl Future<Output = ApiResult<Result<(Self::Device, u64), Unusable>>> + Send;
    /// Drops the binding's client: the next one is built from what the binding refers to now.
    fn forget_device(&self, binding: &BmcBinding);
}

/// Fixed for the life of the process.
#[derive(Clone, Debug)]
pub struct LoopSettings {
    /// coroner acts only on remediations and bindings in this namespace.
    pub namespace: String,
    pub limits: StormLimits,
    /// Timeout of one BMC request: the leader Lease must outlast it.
    pub request_timeout: StdDuration,
    /// Extra tries of a BMC read: with the timeout, what bounds the gap between two readings.
    pub read_retries: u32,
    /// How often the guard reads a released machine (±10 %).
    pub guard_interval: StdDuration,
}

/// Everything one process of coroner touches.
pub trait World: Clock + Remediations + Nodes + NodeLeases + Leadership + Cluster + Events + Devices + Sync {
    fn settings(&self) -> &LoopSettings;
    fn metrics(&self) -> &Metrics;
    /// Admissions happen one at a time in a process (so two remediations cannot both take the last
    /// slot); this remembers when fences were admitted, for the per-window budget.
    fn admissions(&self) -> &tokio::sync::Mutex<Admissions>;
    /// What this process knows of each fence, never persisted.
    fn memories(&self) -> &Memories;
    /// One request at a time per BMC origin, from this process.
    fn origins(&self) -> &Origins;
}
