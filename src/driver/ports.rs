//! What the fence loop touches, as small traits: the remediations (read; status written under a
//! resourceVersion precondition), the Nodes (read; written under a precondition), the nodes' Leases,
//! the leader Lease, the rest of the cluster the gates and the release read, Events, the power
//! devices and the clock. Production implements them with kube and reqwest (`controller::Context`);
//! the simulator (`crate::sim`) implements them in memory, with faults. What a process only
//! remembers is not here: it is [`super::Local`].

use std::{future::Future, time::Duration as StdDuration};

use jiff::Timestamp;
use k8s_openapi::api::{
    admissionregistration::v1::{ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding},
    core::v1::{Node, ObjectReference, Pod},
};

use crate::{
    api::{
        BmcBinding, BmcBindingStatus, CoronerAttestation, CoronerAttestationStatus, CoronerRemediation,
        CoronerRemediationStatus, CoronerRemediationTemplate,
    },
    bmc::{self, BmcError, ResetType, SystemReading},
    fence::{Mono, Notice},
    gates::{LeaseSighting, StormLimits},
    leader,
    pdu::{OutletReading, PduError},
    telemetry::Metrics,
    words::{api_error::ApiResult, binding::Unusable, discovery::Interrupted},
};

/// This process's clocks.
pub trait Clock {
    /// Wall-clock time, for what people and the API read.
    fn now(&self) -> Timestamp;
    /// The monotonic clock, for every duration coroner decides on.
    fn mono(&self) -> Mono;
    /// Waits `duration` on the monotonic clock.
    fn sleep(&self, duration: StdDuration) -> impl Future<Output = ()> + Send;
}

/// Where a list comes from: a reflector store, which trails the API server by its watch's delay
/// (production's stores, the simulator's lagging view), or the API server now — only where a fresh
/// list is the rule, named at each call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Listing {
    Stored,
    Fresh,
}

pub trait Remediations {
    fn remediation(&self, name: &str) -> impl Future<Output = ApiResult<Option<CoronerRemediation>>> + Send;
    /// Every remediation in coroner's namespace.
    fn remediations(&self, from: Listing) -> impl Future<Output = ApiResult<Vec<CoronerRemediation>>> + Send;
    /// Writes `status` through the status subresource under `current`'s resourceVersion.
    fn write_status(
        &self,
        current: &CoronerRemediation,
        status: CoronerRemediationStatus,
    ) -> impl Future<Output = ApiResult<CoronerRemediation>> + Send;
}

pub trait Nodes {
    fn node(&self, name: &str) -> impl Future<Output = ApiResult<Option<Node>>> + Send;
    fn nodes(&self, from: Listing) -> impl Future<Output = ApiResult<Vec<Node>>> + Send;
    /// Every Node's name and systemUUID (empty when it reports none): what the identity rules
    /// compare, without a copy of every Node per fence (a thousand Nodes are megabytes).
    fn system_uuids(&self, from: Listing) -> impl Future<Output = ApiResult<Vec<(String, String)>>> + Send;
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
    /// Whether this process still believes it leads (no request: what its election loop knows). A
    /// process that knows it was deposed reads no machine: another process reads now, and a reading
    /// this one could not record would be lost (docs/safety.md A1).
    fn leading(&self) -> bool;
    /// Whether the leader Lease is still this replica's for longer than a request can take.
    fn ensure_leader(&self, need: StdDuration) -> impl Future<Output = Result<(), leader::Refusal>> + Send;
    /// Hands leadership to a replica that can fence `node_to_fence`, if there is one; `false` when
    /// there is none (or no election).
    fn hand_over(&self, node_to_fence: &str) -> impl Future<Output = ApiResult<bool>> + Send;
}

/// The rest of the cluster the gates, the identity step and the release read or change.
pub trait Cluster {
    /// Every BmcBinding in coroner's namespace.
    fn bindings(&self, from: Listing) -> impl Future<Output = ApiResult<Vec<BmcBinding>>> + Send;
    fn binding(&self, name: &str) -> impl Future<Output = ApiResult<Option<BmcBinding>>> + Send;
    /// One BmcBinding from the store (no request: it trails the API server by the watch's delay).
    fn stored_binding(&self, name: &str) -> impl Future<Output = ApiResult<Option<BmcBinding>>> + Send;
    /// A2: the verification kept for `node` beyond its binding object
    /// ([`crate::verification::KEPT_VERIFICATIONS`]), read fresh; its seal is not checked here.
    fn kept_verification(
        &self,
        node: &str,
    ) -> impl Future<Output = ApiResult<Option<crate::verification::KeptVerification>>> + Send;
    /// A2: the node's entry of [`crate::verification::KEPT_VERIFICATIONS`] (`None`: none, or one
    /// that does not parse) with the ConfigMap's resourceVersion (`None`: no ConfigMap yet).
    fn kept_record(
        &self,
        node: &str,
    ) -> impl Future<Output = ApiResult<(Option<crate::verification::KeptVerification>, Option<String>)>> + Send;
    /// Writes the node's entry under the ConfigMap's `version` as [`Cluster::kept_record`] read it
    /// (`None`: creates the ConfigMap). `Conflict`: another writer came first.
    fn write_kept(
        &self,
        node: &str,
        kept: &crate::verification::KeptVerification,
        version: Option<&str>,
    ) -> impl Future<Output = ApiResult<()>> + Send;
    /// Every CoronerRemediationTemplate in coroner's namespace, from the API server.
    fn templates(&self) -> impl Future<Output = ApiResult<Vec<CoronerRemediationTemplate>>> + Send;
    /// Writes a binding's status (a merge patch from `old` to `new`: a field `new` lacks is cleared).
    fn write_binding_status(
        &self,
        name: &str,
        old: Option<&BmcBindingStatus>,
        new: &BmcBindingStatus,
    ) -> impl Future<Output = ApiResult<()>> + Send;
    /// Pods labelled `component=etcd` in kube-system.
    fn etcd_pods(&self, from: Listing) -> impl Future<Output = ApiResult<Vec<Pod>>> + Send;
    /// Pods bound to the node.
    fn pods_on(&self, node: &str) -> impl Future<Output = ApiResult<Vec<Pod>>> + Send;
    /// Force-deletes a pod (grace period 0) under its UID.
    fn delete_pod(&self, pod: &Pod) -> impl Future<Output = ApiResult<()>> + Send;
    /// VolumeAttachments that name the node.
    fn volume_attachments_on(&self, node: &str) -> impl Future<Output = ApiResult<usize>> + Send;
}

/// Attestations, and the admission policies that make their attester unforgeable.
pub trait Attestations {
    fn attestation(&self, name: &str) -> impl Future<Output = ApiResult<Option<CoronerAttestation>>> + Send;
    /// Every attestation in coroner's namespace.
    fn attestations(&self) -> impl Future<Output = ApiResult<Vec<CoronerAttestation>>> + Send;
    /// Writes `status` through the status subresource under `current`'s resourceVersion.
    fn write_attestation_status(
        &self,
        current: &CoronerAttestation,
        status: CoronerAttestationStatus,
    ) -> impl Future<Output = ApiResult<CoronerAttestation>> + Send;
    /// Every ValidatingAdmissionPolicy and binding. A cluster without the v1 API or an RBAC that
    /// hides them reads as none (attestations are then ignored: `AttestationPolicyMissing`).
    fn admission_policies(
        &self,
    ) -> impl Future<Output = ApiResult<(Vec<ValidatingAdmissionPolicy>, Vec<ValidatingAdmissionPolicyBinding>)>> + Send;
}

pub trait Events {
    /// Publishes an Event; failing to record one never fails a fence.
    fn publish(&self, regarding: &ObjectReference, notice: &Notice, action: &str) -> impl Future<Output = ()> + Send;
}

/// A power target with an identity of its own, which the fence proves before it acts: a Redfish
/// system (through [`bmc::Bmc`], below), an IPMI BMC. Outlets that feed a machine have no identity of
/// their own; they prove nothing about which machine they feed, and are a level's devices, not a
/// target.
pub trait Target: Send + Sync {
    /// scheme://host:port: one power action per origin at a time.
    fn origin(&self) -> String;
    /// The target the fence goes through: the pinned one, the only one, or the one whose UUID names
    /// the node. `Ok(Err(refusal))` when the device answered and identity is refused.
    /// `Err`: the device failed, with what answered before it ([`Interrupted`]).
    fn find(
        &self,
        pinned: Option<&str>,
        node_uuid: &str,
    ) -> impl Future<Output = Result<Result<SystemReading, crate::identity::IdentityRefusal>, Interrupted>> + Send;
    /// One reading of the target at `path`: its identity and power, from the same answer.
    fn read(&self, path: &str) -> impl Future<Output = Result<SystemReading, BmcError>> + Send;
    /// One power action, never retried. Returns the device's status code: the HTTP status, or 0
    /// for an IPMI request that completed normally.
    fn act(&self, system: &SystemReading, reset: ResetType) -> impl Future<Output = Result<u16, BmcError>> + Send;
    /// L7: whether anything at the device's address answers one fresh request ([`bmc::Heard`]).
    fn heard(&self) -> impl Future<Output = bmc::Heard> + Send;
}

/// The one Redfish adapter: whatever speaks Redfish's system operations (the real client, the
/// simulator's BMCs, a scripted one) is a target through the same discovery and identity rule.
impl<B: bmc::Bmc> Target for B {
    fn origin(&self) -> String {
        bmc::Bmc::origin(self)
    }

    async fn find(
        &self,
        pinned: Option<&str>,
        node_uuid: &str,
    ) -> Result<Result<SystemReading, crate::identity::IdentityRefusal>, Interrupted> {
        find_system(self, pinned, node_uuid).await
    }

    async fn read(&self, path: &str) -> Result<SystemReading, BmcError> {
        self.system(path).await
    }

    async fn act(&self, system: &SystemReading, reset: ResetType) -> Result<u16, BmcError> {
        self.reset(system, reset).await
    }

    async fn heard(&self) -> bmc::Heard {
        bmc::Bmc::heard(self).await
    }
}

/// The system a BMC's fence goes through: [`bmc::discover`] and [`crate::identity::select`]. `Ok(Err(refusal))` when the BMC answered and identity is refused with its own
/// reason (no system is the node's, another system reports the node's UUID, a member could not be
/// read, a path answered as two UUIDs); a transient member failure is that member's error, so the
/// fence retries it, with every system that answered. A refusal `prove` repeats on the one candidate
/// returns that candidate.
async fn find_system<B: bmc::Bmc>(
    bmc: &B,
    pinned: Option<&str>,
    node_uuid: &str,
) -> Result<Result<SystemReading, crate::identity::IdentityRefusal>, Interrupted> {
    use crate::identity::{IdentityRefusal, select};

    let discovery = bmc::discover(bmc, pinned).await?;
    let refusal = match select(&discovery, node_uuid) {
        Ok(selected) => return Ok(Ok(selected.system)),
        Err(refusal) => refusal,
    };
    let only = match (&discovery.pinned, discovery.systems.as_slice()) {
        (Some(pinned), _) => Some(pinned),
        (None, [only]) => Some(&only.system),
        _ => None,
    };
    let answered = || discovery.pinned.iter().chain(discovery.systems.iter().map(|a| &a.system)).cloned().collect();
    let member_error = |transient_only: bool| {
        let mut unreadable = discovery.unreadable.iter();
        unreadable
            .find(|u| !transient_only || u.error.is_transient())
            .map(|u| Err(Interrupted { error: u.error.clone(), answered: answered() }))
    };
    match refusal {
        // No candidate, so no pin: every unread member is unexcused, and its failure is the cause.
        IdentityRefusal::Unread { .. } => member_error(false).unwrap_or(Ok(Err(refusal))),
        IdentityRefusal::MemberUnreadable { transient: true, .. } => member_error(true).unwrap_or(Ok(Err(refusal))),
        IdentityRefusal::SharedOnBmc { .. }
        | IdentityRefusal::MemberUnreadable { .. }
        | IdentityRefusal::Unstable { .. } => Ok(Err(refusal)),
        // `prove` refuses these again, with their own reasons, on the system that is returned.
        _ => Ok(only.cloned().ok_or(refusal)),
    }
}

/// The outlets of one PDU level (docs/safety.md L1–L9), in the level's order: Redfish
/// PowerDistribution or APC rPDU over SNMP in production, the simulator's PDUs in its world. A
/// command's answer proves nothing; only a later reading does.
pub trait Level: Send + Sync {
    /// Each outlet as [`crate::api::PduOutlet::key`] names it, with its watt floor.
    fn outlets(&self) -> Vec<(String, f64)>;
    fn read(&self, index: usize) -> impl Future<Output = Result<OutletReading, PduError>> + Send;
    /// Immediate Off, never a reboot or a delayed command.
    fn switch_off(&self, index: usize) -> impl Future<Output = Result<(), PduError>> + Send;
}

pub trait Devices {
    type Target: Target;
    type Level: Level;
    /// The outlets of the binding's PDU level `level` (2 for its first `pduLevels` entry), with the
    /// digest of the level's spec and credential values (P2: equal values, the same device).
    /// `Ok(Err(_))`: the level does not exist, or what it refers to cannot be used.
    fn level(
        &self,
        binding: &BmcBinding,
        level: u32,
    ) -> impl Future<Output = ApiResult<Result<(Self::Level, u64), Unusable>>> + Send;
    /// The target a binding describes, with its device digest (`access::device_digest`: the same
    /// endpoint, TLS material and credential values give the same digest, however often the client
    /// is rebuilt; P2). `Ok(Err(_))`: what the binding refers to (its Secret, CA bundle, pin,
    /// endpoint) cannot be used.
    fn target(
        &self,
        binding: &BmcBinding,
    ) -> impl Future<Output = ApiResult<Result<(Self::Target, u64), Unusable>>> + Send;
    /// L5: the seal coroner puts on a level's confirmation of `binding` (only its holder can make one).
    fn seal(&self, binding: &BmcBinding, confirmation: &crate::api::LevelConfirmation) -> String;
    /// A2: the seal coroner puts on a verification it keeps for `node` (only its holder can make one).
    fn seal_kept(&self, node: &str, kept: &crate::verification::KeptVerification) -> String;
    /// Drops the binding's client: the next one is built from what the binding refers to now.
    fn forget_target(&self, binding: &BmcBinding);
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
pub trait World:
    Clock + Remediations + Nodes + NodeLeases + Leadership + Cluster + Attestations + Events + Devices + Sync
{
    fn settings(&self) -> &LoopSettings;
    fn metrics(&self) -> &Metrics;
    /// Test builds only: what the simulated world sabotages in this process ([`crate::sabotage`]).
    #[cfg(test)]
    fn sabotage(&self) -> crate::sabotage::Sabotage {
        crate::sabotage::Sabotage::None
    }
}

/// A Node's name and systemUUID, as [`Nodes::system_uuids`] lists them.
pub fn system_uuid_of(node: &Node) -> (String, String) {
    let uuid = node.status.as_ref().and_then(|s| s.node_info.as_ref()).map(|i| i.system_uuid.clone());
    (node.metadata.name.clone().unwrap_or_default(), uuid.unwrap_or_default())
}
