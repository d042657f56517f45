//! What the controller observes for the state machine, and the pure checks it runs on Kubernetes
//! objects while observing.

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Pod, Toleration};
use std::time::Duration as StdDuration;

use super::Mono;
use crate::{
    api::{CoronerRemediationSpec, CoronerRemediationStatus, NodeEvidence, conditions},
    bmc::{BmcError, PowerState, ResetType, SystemReading},
    contract::{self, Reason},
    identity::Claim,
    taints::CoronerTaint,
};

#[derive(Clone, Debug, PartialEq)]
pub enum Observation {
    /// Nothing needed (WaitingForNode reads the node snapshot in the context).
    Nothing,
    /// The plan said to wait: just requeue.
    Wait,
    Admission(Verdict),
    Identity(Result<IdentityFound, IdentityProblem>),
    Power(Result<PowerReading, BmcFailure>),
    ResetAnswered {
        action: ResetType,
        result: Result<u16, BmcFailure>,
    },
    /// Right before a power action, the node (read again) no longer allows it: nothing was sent.
    ActionRefused(NodeRefusal),
    /// P1: right before a power action the binding, read fresh, led to another device than the one
    /// the reading that asked for it was taken through: nothing was sent.
    DeviceChanged {
        proven: DeviceMark,
        now: DeviceMark,
    },
    /// Right before a power action there was no device to send it to (the binding deleted, its
    /// Secret unusable, no fresh reading): nothing was sent.
    ActionUnsent(BmcFailure),
    /// The checked release: what was done, or why not.
    Release(Result<Released, ReleaseRefusal>),
    /// `ResourceDeletion`: the node passed the release check and no pod is deleted yet (`Ok`, with
    /// `pods_deleted` 0), or why not.
    DeletionMayBegin(Result<Released, ReleaseRefusal>),
    Workloads(Workloads),
    /// One reading of every outlet of a PDU level, or why the level could not be read at all (its
    /// binding or Secret unusable: final; the PDUs' errors are in the outcomes).
    Outlets(Result<LevelReading, BmcFailure>),
    /// L7: what the node's BMC answered once every outlet of the level had read Off for settle.
    BmcAfterOutlets(AskedAfterOutlets),
    /// A4: what the failed fence's look through its binding found, with NodeHealthCheck's
    /// `nhc-timed-out` value as the remediation carries it now.
    Looked {
        found: Result<IdentityFound, IdentityProblem>,
        nhc_timed_out: Option<String>,
    },
    /// A4: the look asked for is never to be taken ([`LookGate::Withdraw`]).
    LookNotTaken(String),
    /// What the plan asked for could not be observed: the API server (or a Secret, a list) failed.
    /// The phase's deadline is judged on it all the same (docs/safety.md P5).
    Unavailable(String),
}

/// The gates' answer for a pending remediation.
#[derive(Clone, Debug, PartialEq)]
pub enum Verdict {
    Admit(Box<NodeEvidence>),
    /// Another remediation of this node released it and that release stands
    /// ([`crate::gates::release_to_adopt`]): this one stands on it instead of fencing the machine again.
    Adopt(crate::gates::Adoptable),
    Wait {
        reason: Reason,
        message: String,
        /// When to look again, if not the usual recheck: a queued remediation sleeps until the
        /// window frees, or until the queue moves and wakes it (`gates::queued_recheck`).
        recheck: Option<StdDuration>,
    },
    Refuse {
        reason: Reason,
        message: String,
    },
}

/// Which device served an answer: the binding's generation and the client built from what it refers
/// to (each new client, after a Secret or CA change or a rebuild, has a new serial).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeviceMark {
    pub generation: i64,
    pub serial: u64,
}

/// One reading of a PDU level's outlets, in the level's order.
#[derive(Clone, Debug, PartialEq)]
pub struct LevelReading {
    pub level: u32,
    pub outcomes: Vec<crate::levels::OutletOutcome>,
    /// From the first outlet's request to the last one's answer.
    pub sampled: Sampled,
    /// The binding's generation and the digest of the level's outlets and credentials.
    pub through: DeviceMark,
}

/// The node's binding's PDU levels, as a step that may move on to one sees them.
#[derive(Clone, Copy, Debug)]
pub struct LevelsView<'a> {
    pub binding: &'a str,
    pub generation: Option<i64>,
    pub levels: &'a [crate::api::PduLevel],
    /// Per level (index 0 is level 2): the generation at which the machine confirmed its mapping, from
    /// a confirmation coroner sealed (L5).
    pub confirmed: &'a [Option<i64>],
}

/// The system the binding leads to, and what else claims a machine.
#[derive(Clone, Debug, PartialEq)]
pub struct IdentityFound {
    pub binding: String,
    pub endpoint: String,
    /// Whether the identity read's TLS certificate was verified; `None`: the device speaks no TLS
    /// (IPMI).
    pub tls_verified: Option<bool>,
    pub system: SystemReading,
    pub claims: Vec<Claim>,
    pub through: DeviceMark,
    /// When the identity read was asked for and answered: it is also the fence's first power reading.
    pub sampled: Sampled,
    /// The device's origin (one power action per origin at a time).
    pub origin: String,
}

/// L7: the question to the node's BMC once a level's outlets read Off for settle.
#[derive(Clone, Debug, PartialEq)]
pub enum AskedAfterOutlets {
    /// A fresh connection to its address heard nothing: what a BMC without power gives.
    Silent,
    /// The question could not be put (its binding or Secret unusable, its name unresolved, this
    /// process's own session busy): no sign either way.
    NotAsked(String),
    /// Something at its address answered: then what the identity read found.
    Answered(Box<Result<IdentityFound, IdentityProblem>>),
}

#[derive(Clone, Debug, PartialEq)]
pub enum IdentityProblem {
    /// The binding or what it refers to is missing or unusable (final).
    Binding {
        reason: Reason,
        message: String,
        /// What a system that claims the node's UUID reported, when not `Off`: a refused identity
        /// read still shows the machine alive (an attestation never follows it, A1).
        seen_on: Option<String>,
    },
    Bmc(BmcFailure),
    /// The BMC failed after a system that names the node answered with a power reading not `Off`
    /// (`seen_on`): the machine was seen alive, whatever failed after (A1).
    SeenThenFailed {
        failure: BmcFailure,
        seen_on: String,
    },
}

/// When a reading was asked for and when its answer came, on this process's monotonic clock: the
/// value may have been sampled at any moment in between.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sampled {
    pub requested: Mono,
    pub answered: Mono,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PowerReading {
    pub uuid: String,
    pub power_state: PowerState,
    pub sampled: Sampled,
    pub through: DeviceMark,
}

impl PowerReading {
    pub fn of(system: &SystemReading, sampled: Sampled, through: DeviceMark) -> Self {
        Self { uuid: system.uuid.clone(), power_state: system.power_state.clone(), sampled, through }
    }
}

/// A BMC error as the state machine sees it: may it clear by itself, and which final reason if not.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BmcFailure {
    pub transient: bool,
    pub reason: Reason,
    pub message: String,
}

impl From<&BmcError> for BmcFailure {
    fn from(error: &BmcError) -> Self {
        Self { transient: error.is_transient(), reason: error.reason(), message: error.to_string() }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Released {
    /// When the releasing write happened.
    pub at: Timestamp,
    pub node_ready: String,
    pub lease_renew_time: Option<Timestamp>,
    /// Whether the out-of-service taint is coroner's (added by this remediation).
    pub taint_owned: bool,
    /// The out-of-service taint was coroner's, left by this remediation (its UID here) that no
    /// longer exists, and this release took it over (R4, [`crate::taints::adopt_orphan`]).
    pub took_over_from: Option<String>,
    /// ResourceDeletion: how many pods were force-deleted.
    pub pods_deleted: Option<u32>,
    /// ResourceDeletion stopped after some pods (the node no longer silent, the proof too old, a
    /// refused delete): why. The pods deleted are released all the same, and the fence fails.
    pub interrupted: Option<ReleaseRefusal>,
}

impl Released {
    /// A release at `at` on the node as the release check saw it; nothing claimed or deleted yet.
    pub fn checked(snapshot: &NodeSnapshot, at: Timestamp) -> Self {
        Self {
            at,
            node_ready: snapshot.ready.clone().unwrap_or_default(),
            lease_renew_time: snapshot.lease_renew_time,
            taint_owned: false,
            took_over_from: None,
            pods_deleted: None,
            interrupted: None,
        }
    }
}

/// Why the node no longer allows what the fence is about to do: each is a fact about the node, said
/// as it is (a Node that disappeared is not "a machine that is not this node").
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NodeRefusal {
    #[error("Node {node} disappeared")]
    Gone { node: String },
    #[error("Node {node} was replaced (UID {admitted} → {now})")]
    Replaced { node: String, admitted: String, now: String },
    #[error("Node {node} reports Ready={ready}: its kubelet reports again")]
    Awake { node: String, ready: String },
    #[error("Node {node} is labelled {}={value:?}", contract::EXCLUDE_LABEL)]
    Excluded { node: String, value: String },
    #[error("Node {node}'s Lease changed since admission ({admitted} → {now}): something on the node is alive")]
    LeaseChanged { node: String, admitted: String, now: String },
    #[error("Node {node}'s Lease was renewed (renewTime {renewed}) after the power-off began")]
    LeaseRenewed { node: String, renewed: Timestamp },
    #[error("Node {node} carries {taint}: no power-on while any out-of-service taint is on it")]
    OutOfService { node: String, taint: String },
}

impl NodeRefusal {
    /// The condition reason for this refusal.
    pub fn reason(&self) -> Reason {
        match self {
            Self::Gone { .. } => Reason::NodeNotFound,
            Self::Replaced { .. } => Reason::NodeReplaced,
            Self::Awake { .. } => Reason::NodeNotUnreachable,
            Self::Excluded { .. } => Reason::NodeExcluded,
            Self::LeaseChanged { .. } => Reason::NodeLeaseChanged,
            Self::LeaseRenewed { .. } => Reason::NodeAliveAfterPowerOff,
            Self::OutOfService { .. } => Reason::OutOfServiceTaintPresent,
        }
    }
}

/// Why a release was not written.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReleaseRefusal {
    /// The node no longer passes the release check: nothing released, for good.
    #[error("{0}")]
    Node(NodeRefusal),
    /// The proof's last Off reading aged past its freshness before the Node write: read again first.
    #[error("the power-off proof is older than pollInterval + the request timeout")]
    ProofExpired,
    /// The API server refused the Node write (an admission webhook or policy): retried, within the
    /// attempt, on a fresh proof.
    #[error("the Node update was refused: {0}")]
    WriteRefused(String),
    /// Right after the write the node's Lease read renewed since the power-off: the machine coroner
    /// switched off is not this node, or did not go off. The taint was taken back at once.
    #[error(
        "Node {node}'s Lease was renewed (renewTime {renewed}) although its machine reads Off; the out-of-service taint was taken back"
    )]
    DidNotTakeEffect { node: String, renewed: Timestamp },
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Workloads {
    /// Pods bound to the node that are terminating or that the out-of-service taint would evict.
    pub blocking_pods: u32,
    pub volume_attachments: u32,
}

pub use crate::node::{NodeSnapshot, ready_status};

fn admitted_node(status: &CoronerRemediationStatus) -> Option<&NodeEvidence> {
    status.evidence.as_ref().and_then(|e| e.node.as_ref())
}

/// The node is the one admitted (same UID) and still silent: `Ready=Unknown`, or `False` when the
/// template opts in (it must not have turned True).
pub fn same_silent_node(
    spec: &CoronerRemediationSpec,
    status: &CoronerRemediationStatus,
    node: &NodeSnapshot,
) -> Result<(), NodeRefusal> {
    if let Some(admitted) = admitted_node(status)
        && node.uid != admitted.uid
    {
        return Err(NodeRefusal::Replaced {
            node: node.name.clone(),
            admitted: admitted.uid.clone(),
            now: node.uid.clone(),
        });
    }
    let silent = match node.ready.as_deref() {
        Some(conditions::UNKNOWN) => true,
        Some(conditions::FALSE) => spec.remediate_ready_false,
        _ => false,
    };
    if silent {
        Ok(())
    } else {
        Err(NodeRefusal::Awake {
            node: node.name.clone(),
            ready: node.ready.clone().unwrap_or_else(|| "absent".into()),
        })
    }
}

/// Right before a ForceOff the node must still pass the admission gates that concern it (the same
/// node, still silent, not excluded), and its Lease must be as admission saw it: renewed, created or
/// deleted since admission holds the power action for good. A node that never had a Lease is judged
/// as at admission: no Lease then and none now gives no evidence either way (docs/safety.md).
pub fn may_power_off(
    spec: &CoronerRemediationSpec,
    status: &CoronerRemediationStatus,
    node: &NodeSnapshot,
) -> Result<(), NodeRefusal> {
    same_silent_node(spec, status, node)?;
    if let Some(value) = &node.excluded {
        return Err(NodeRefusal::Excluded { node: node.name.clone(), value: value.clone() });
    }
    lease_as_admitted(status, node)
}

/// The node's Lease is in the state admission recorded: present or not, and the same renewTime.
pub fn lease_as_admitted(status: &CoronerRemediationStatus, node: &NodeSnapshot) -> Result<(), NodeRefusal> {
    let Some(admitted) = admitted_node(status) else { return Ok(()) };
    let then = (admitted.lease_present, admitted.lease_renew_time.as_ref().map(|t| t.0));
    let now = (node.lease_present, node.lease_renew_time);
    if then == now {
        return Ok(());
    }
    let show = |(present, renewed): (bool, Option<Timestamp>)| match (present, renewed) {
        (false, _) => "no Lease".to_owned(),
        (true, None) => "a Lease without renewTime".to_owned(),
        (true, Some(at)) => format!("renewTime {at}"),
    };
    Err(NodeRefusal::LeaseChanged { node: node.name.clone(), admitted: show(then), now: show(now) })
}

/// Right before an `On`: no out-of-service taint of any value or effect is on the node
/// (kube-controller-manager acts on the key alone).
pub fn may_power_on(node: &NodeSnapshot) -> Result<(), NodeRefusal> {
    // R5: the exclusion label stops every power action of the fence, the `Reboot`'s `On` included.
    if let Some(value) = &node.excluded {
        return Err(NodeRefusal::Excluded { node: node.name.clone(), value: value.clone() });
    }
    match &node.out_of_service {
        Some(taint) => Err(NodeRefusal::OutOfService { node: node.name.clone(), taint: taint.clone() }),
        None => Ok(()),
    }
}

/// The release's safety check, run on the Node about to be updated: the node coroner admitted, still
/// silent, and its Lease not renewed since the power-off began (any change counts, earlier values
/// too: a kubelet's clock may be behind or step back).
pub fn release_check(
    spec: &CoronerRemediationSpec,
    status: &CoronerRemediationStatus,
    node: &NodeSnapshot,
) -> Result<(), NodeRefusal> {
    same_silent_node(spec, status, node)?;
    lease_unrenewed_since_power_off(status, node)
}

/// The node's Lease was not renewed since the power-off began (a Lease that vanished was not).
pub fn lease_unrenewed_since_power_off(
    status: &CoronerRemediationStatus,
    node: &NodeSnapshot,
) -> Result<(), NodeRefusal> {
    let at_power_off = status.progress.as_ref().and_then(|p| p.lease_renew_time_at_power_off.as_ref()).map(|t| t.0);
    match (node.lease_renew_time, at_power_off) {
        (Some(renewed), Some(before)) if renewed != before => {
            Err(NodeRefusal::LeaseRenewed { node: node.name.clone(), renewed })
        }
        _ => Ok(()),
    }
}

/// Mirror pods belong to a kubelet's static pods; deleting them through the API does nothing useful.
pub fn is_mirror_pod(pod: &Pod) -> bool {
    pod.metadata.annotations.as_ref().is_some_and(|a| a.contains_key("kubernetes.io/config.mirror"))
}

/// Whether a pod still holds up the release: it is terminating, or the out-of-service taint has yet
/// to evict it (it does not tolerate the taint).
pub fn pod_blocks_release(pod: &Pod) -> bool {
    if pod.metadata.deletion_timestamp.is_some() {
        return true;
    }
    let finished =
        pod.status.as_ref().and_then(|s| s.phase.as_deref()).is_some_and(|p| p == "Succeeded" || p == "Failed");
    if finished || is_mirror_pod(pod) {
        return false;
    }
    let tolerations = pod.spec.as_ref().and_then(|s| s.tolerations.as_deref()).unwrap_or_default();
    !tolerations.iter().any(tolerates_out_of_service)
}

/// Kubernetes' toleration rule, for `node.kubernetes.io/out-of-service=nodeshutdown:NoExecute`.
fn tolerates_out_of_service(toleration: &Toleration) -> bool {
    let taint = CoronerTaint::OutOfService;
    let effect_matches = toleration.effect.as_deref().is_none_or(|e| e.is_empty() || e == taint.effect());
    let key = toleration.key.as_deref().unwrap_or_default();
    let key_matches = match toleration.operator.as_deref() {
        Some("Exists") => key.is_empty() || key == taint.key(),
        _ => key == taint.key() && toleration.value.as_deref() == Some("nodeshutdown"),
    };
    effect_matches && key_matches
}

#[cfg(test)]
mod tests {
    use jiff::SignedDuration;
    use k8s_openapi::api::core::v1::{PodSpec, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;

    use super::*;
    use crate::api::{CoronerRemediationSpec, Evidence, Progress};

    fn t(secs: i64) -> Timestamp {
        Timestamp::UNIX_EPOCH + SignedDuration::from_secs(1_800_000_000 + secs)
    }

    fn node(ready: &str, lease: Option<Timestamp>) -> NodeSnapshot {
        NodeSnapshot {
            name: "w".into(),
            uid: "uid-1".into(),
            ready: Some(ready.into()),
            lease_present: lease.is_some(),
            lease_renew_time: lease,
            ..NodeSnapshot::default()
        }
    }

    fn fenced() -> CoronerRemediationStatus {
        CoronerRemediationStatus {
            evidence: Some(Evidence { node: Some(node("Unknown", Some(t(0))).evidence(t(5))), ..Evidence::default() }),
            progress: Some(Progress { lease_renew_time_at_power_off: Some(MicroTime(t(0))), ..Progress::default() }),
            ..CoronerRemediationStatus::default()
        }
    }

    #[test]
    fn release_needs_the_same_silent_node() {
        let spec = CoronerRemediationSpec::default();
        assert_eq!(release_check(&spec, &fenced(), &node("Unknown", Some(t(0)))), Ok(()));
        assert_eq!(
            release_check(&spec, &fenced(), &node("Unknown", None)),
            Ok(()),
            "a Lease that vanished was not renewed"
        );
        for alive in [
            node("True", Some(t(0))),
            node("False", Some(t(0))),
            node("Unknown", Some(t(0) + SignedDuration::from_micros(1))),
        ] {
            assert!(release_check(&spec, &fenced(), &alive).is_err(), "{alive:?}");
        }
        let mut replaced = node("Unknown", Some(t(0)));
        replaced.uid = "uid-2".into();
        assert!(matches!(release_check(&spec, &fenced(), &replaced), Err(NodeRefusal::Replaced { .. })));
    }

    #[test]
    fn each_release_refusal_says_its_own_cause() {
        let spec = CoronerRemediationSpec::default();
        let mut replaced = node("Unknown", Some(t(0)));
        replaced.uid = "uid-2".into();
        let cases = [
            (replaced, Reason::NodeReplaced),
            (node("True", Some(t(0))), Reason::NodeNotUnreachable),
            (node("Unknown", Some(t(1))), Reason::NodeAliveAfterPowerOff),
        ];
        for (snapshot, reason) in cases {
            assert_eq!(release_check(&spec, &fenced(), &snapshot).unwrap_err().reason(), reason, "{snapshot:?}");
        }
        let gone = NodeRefusal::Gone { node: "w".into() };
        assert_eq!((gone.reason(), gone.to_string()), (Reason::NodeNotFound, "Node w disappeared".into()));
    }

    #[test]
    fn right_before_a_force_off_the_node_must_still_pass_its_admission_gates() {
        let spec = CoronerRemediationSpec::default();
        assert_eq!(may_power_off(&spec, &fenced(), &node("Unknown", Some(t(0)))), Ok(()));
        let awake = may_power_off(&spec, &fenced(), &node("True", Some(t(0))));
        assert!(matches!(awake, Err(NodeRefusal::Awake { .. })), "{awake:?}");
        let mut excluded = node("Unknown", Some(t(0)));
        excluded.excluded = Some(String::new());
        assert!(matches!(may_power_off(&spec, &fenced(), &excluded), Err(NodeRefusal::Excluded { .. })));
        let mut replaced = node("Unknown", Some(t(0)));
        replaced.uid = "uid-2".into();
        assert!(matches!(may_power_off(&spec, &fenced(), &replaced), Err(NodeRefusal::Replaced { .. })));
    }

    #[test]
    fn a_lease_renewed_created_or_deleted_since_admission_holds_the_power_action() {
        let spec = CoronerRemediationSpec::default();
        for changed in [node("Unknown", Some(t(1))), node("Unknown", None)] {
            let refusal = may_power_off(&spec, &fenced(), &changed).unwrap_err();
            assert_eq!(refusal.reason(), Reason::NodeLeaseChanged, "{changed:?}");
        }
        // Admitted without a Lease: one that appears is a change; none now is as admitted.
        let mut no_lease = fenced();
        no_lease.evidence.as_mut().unwrap().node = Some(node("Unknown", None).evidence(t(5)));
        assert_eq!(may_power_off(&spec, &no_lease, &node("Unknown", None)), Ok(()));
        assert!(may_power_off(&spec, &no_lease, &node("Unknown", Some(t(0)))).is_err());
    }

    #[test]
    fn no_power_on_while_any_out_of_service_taint_is_on_the_node() {
        assert_eq!(may_power_on(&node("Unknown", None)), Ok(()));
        let mut tainted = node("Unknown", None);
        tainted.out_of_service = Some("node.kubernetes.io/out-of-service=manual:NoSchedule".into());
        let refusal = may_power_on(&tainted).unwrap_err();
        assert_eq!(refusal.reason(), Reason::OutOfServiceTaintPresent);
        assert!(refusal.to_string().contains("manual:NoSchedule"));
    }

    #[test]
    fn ready_false_is_silent_enough_only_when_opted_in() {
        let opted_in = CoronerRemediationSpec { remediate_ready_false: true, ..CoronerRemediationSpec::default() };
        assert_eq!(release_check(&opted_in, &fenced(), &node("False", Some(t(0)))), Ok(()));
        assert!(release_check(&opted_in, &fenced(), &node("True", Some(t(0)))).is_err());
    }

    fn pod(deleting: bool, phase: &str, tolerations: Vec<Toleration>, mirror: bool) -> Pod {
        let mut pod = Pod::default();
        if deleting {
            pod.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(t(0)));
        }
        if mirror {
            pod.metadata.annotations = Some([("kubernetes.io/config.mirror".to_owned(), "x".to_owned())].into());
        }
        pod.spec = Some(PodSpec { tolerations: Some(tolerations), ..PodSpec::default() });
        pod.status = Some(PodStatus { phase: Some(phase.into()), ..PodStatus::default() });
        pod
    }

    fn toleration(key: Option<&str>, operator: &str, value: Option<&str>, effect: Option<&str>) -> Toleration {
        Toleration {
            key: key.map(str::to_owned),
            operator: Some(operator.into()),
            value: value.map(str::to_owned),
            effect: effect.map(str::to_owned),
            ..Toleration::default()
        }
    }

    #[test]
    fn pods_hold_the_release_until_evicted_or_gone() {
        assert!(pod_blocks_release(&pod(true, "Running", vec![], false)), "terminating");
        assert!(pod_blocks_release(&pod(false, "Running", vec![], false)), "not yet evicted");
        assert!(!pod_blocks_release(&pod(false, "Succeeded", vec![], false)), "finished");
        assert!(!pod_blocks_release(&pod(false, "Running", vec![], true)), "mirror pod");
        let oos = "node.kubernetes.io/out-of-service";
        for tolerates in [
            toleration(None, "Exists", None, None),
            toleration(Some(oos), "Exists", None, Some("NoExecute")),
            toleration(Some(oos), "Equal", Some("nodeshutdown"), None),
        ] {
            assert!(!pod_blocks_release(&pod(false, "Running", vec![tolerates.clone()], false)), "{tolerates:?}");
        }
        for not_enough in [
            toleration(Some(oos), "Equal", Some("other"), None),
            toleration(Some(oos), "Exists", None, Some("NoSchedule")),
            toleration(Some("node.kubernetes.io/unreachable"), "Exists", None, Some("NoExecute")),
        ] {
            assert!(pod_blocks_release(&pod(false, "Running", vec![not_enough.clone()], false)), "{not_enough:?}");
        }
    }
}
