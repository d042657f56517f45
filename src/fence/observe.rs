//! What the controller observes for the state machine, and the pure checks it runs on Kubernetes
//! objects while observing.

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, Pod, Toleration};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;

use crate::{
    api::{CoronerRemediationSpec, CoronerRemediationStatus, NodeEvidence, conditions},
    bmc::{BmcError, PowerState, ResetType, SystemReading},
    contract::Reason,
    identity::Claim,
    taints::{self, CoronerTaint},
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
    /// The checked release: what was done, or why the node proved alive.
    Release(Result<Released, String>),
    Workloads(Workloads),
}

/// The gates' answer for a pending remediation.
#[derive(Clone, Debug, PartialEq)]
pub enum Verdict {
    Admit(NodeEvidence),
    Wait { reason: Reason, message: String },
    Refuse { reason: Reason, message: String },
}

/// The system the binding leads to, and what else claims a machine.
#[derive(Clone, Debug, PartialEq)]
pub struct IdentityFound {
    pub binding: String,
    pub endpoint: String,
    pub tls_verified: bool,
    pub system: SystemReading,
    pub claims: Vec<Claim>,
}

#[derive(Clone, Debug, PartialEq)]
pub enum IdentityProblem {
    /// The binding or what it refers to is missing or unusable (final).
    Binding {
        reason: Reason,
        message: String,
    },
    Bmc(BmcFailure),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PowerReading {
    pub uuid: String,
    pub power_state: PowerState,
}

impl From<&SystemReading> for PowerReading {
    fn from(system: &SystemReading) -> Self {
        Self { uuid: system.uuid.clone(), power_state: system.power_state.clone() }
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
        let reason = match error {
            BmcError::Unreachable(_) => Reason::BmcUnreachable,
            BmcError::Tls(_) => Reason::BmcTlsVerificationFailed,
            BmcError::Unauthorized(_) => Reason::BmcAuthenticationFailed,
            BmcError::Status { .. } if error.is_transient() => Reason::BmcUnreachable,
            BmcError::Status { .. } | BmcError::Protocol { .. } | BmcError::CrossHostRedirect(_) => {
                Reason::BmcProtocolError
            }
            BmcError::Setup(_) => Reason::BindingInvalid,
        };
        Self { transient: error.is_transient(), reason, message: error.to_string() }
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
    /// ResourceDeletion: how many pods were force-deleted.
    pub pods_deleted: Option<u32>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Workloads {
    /// Pods bound to the node that are terminating or that the out-of-service taint would evict.
    pub blocking_pods: u32,
    pub volume_attachments: u32,
}

/// The node as one reconcile sees it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeSnapshot {
    pub name: String,
    pub uid: String,
    /// The `Ready` condition's status, if the node has one.
    pub ready: Option<String>,
    pub boot_id: String,
    pub system_uuid: String,
    /// Whether the node's Lease in kube-node-lease exists, and its renewTime.
    pub lease_present: bool,
    pub lease_renew_time: Option<Timestamp>,
    /// Whether the out-of-service taint owned by this remediation is still on the node.
    pub out_of_service_owned: bool,
}

impl NodeSnapshot {
    pub fn new(node: &Node, lease_renew_time: Option<Option<Timestamp>>, remediation_uid: &str) -> Self {
        let status = node.status.as_ref();
        let info = status.and_then(|s| s.node_info.as_ref());
        Self {
            name: node.metadata.name.clone().unwrap_or_default(),
            uid: node.metadata.uid.clone().unwrap_or_default(),
            ready: ready_status(node).map(str::to_owned),
            boot_id: info.map(|i| i.boot_id.clone()).unwrap_or_default(),
            system_uuid: info.map(|i| i.system_uuid.clone()).unwrap_or_default(),
            lease_present: lease_renew_time.is_some(),
            lease_renew_time: lease_renew_time.flatten(),
            out_of_service_owned: taints::owns(node, CoronerTaint::OutOfService, remediation_uid),
        }
    }

    pub fn evidence(&self, now: Timestamp) -> NodeEvidence {
        NodeEvidence {
            name: self.name.clone(),
            uid: self.uid.clone(),
            system_uuid: self.system_uuid.clone(),
            boot_id: self.boot_id.clone(),
            ready: self.ready.clone().unwrap_or_else(|| "absent".into()),
            lease_present: self.lease_present,
            lease_renew_time: self.lease_renew_time.map(MicroTime),
            admitted_at: MicroTime(now),
        }
    }
}

pub fn ready_status(node: &Node) -> Option<&str> {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
        .map(|c| c.status.as_str())
}

/// The release's safety check, run on the Node about to be updated: it must be the node coroner
/// admitted (same UID), still `Ready=Unknown` (or `False` when opted in), and its Lease not renewed since the power-off began.
/// Anything else means the machine switched off was not this node.
pub fn release_check(
    spec: &CoronerRemediationSpec,
    status: &CoronerRemediationStatus,
    node: &NodeSnapshot,
) -> Result<(), String> {
    let admitted = status.evidence.as_ref().and_then(|e| e.node.as_ref()).ok_or("no node was recorded at admission")?;
    if node.uid != admitted.uid {
        return Err(format!("Node {} was replaced (UID {} → {})", node.name, admitted.uid, node.uid));
    }
    let silent = match node.ready.as_deref() {
        Some(conditions::UNKNOWN) => true,
        // Opted in: fenced while a kubelet still reported False; it must not have turned True.
        Some(conditions::FALSE) => spec.remediate_ready_false,
        _ => false,
    };
    if !silent {
        return Err(format!(
            "Node {} reports Ready={} after the power-off",
            node.name,
            node.ready.as_deref().unwrap_or("absent")
        ));
    }
    let at_power_off = status.progress.as_ref().and_then(|p| p.lease_renew_time_at_power_off.as_ref()).map(|t| t.0);
    // Any change counts, earlier values too: a kubelet's clock may be behind or step back.
    if let (Some(renewed), Some(before)) = (node.lease_renew_time, at_power_off)
        && renewed != before
    {
        return Err(format!("Node {}'s Lease was renewed (renewTime {renewed}) after the power-off began", node.name));
    }
    Ok(())
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
        assert!(release_check(&spec, &fenced(), &replaced).unwrap_err().contains("replaced"));
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
