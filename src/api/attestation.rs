//! `CoronerAttestation`: a person's audited statement that a node is dead, for when no BMC can answer.
//! coroner acts on it only under the rules of `crate::attestation` (docs/safety.md, "Attestations").

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, MicroTime, Time};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::Duration;

/// Most bytes a reason may have: it is recorded verbatim on the remediation.
pub const MAX_REASON_BYTES: usize = 1024;

// kube-derive takes one printcolumn(...) per column; clippy reads the repeated keys as duplicates.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "coroner.dev",
    version = "v1alpha1",
    kind = "CoronerAttestation",
    doc = "A person's statement that a node is dead (machine off or disconnected from its storage), for a node whose fence ended without proof because no BMC could answer. The attester is checked by a ValidatingAdmissionPolicy; coroner re-checks the node before releasing its workloads.",
    namespaced,
    status = "CoronerAttestationStatus",
    shortname = "catt",
    printcolumn(name = "Node", type_ = "string", json_path = ".spec.nodeName"),
    printcolumn(name = "Attested By", type_ = "string", json_path = ".spec.attestedBy"),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(name = "Reason", type_ = "string", json_path = r#".status.conditions[?(@.type=="Released")].reason"#),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("size(bytes(self.reason)) <= 1024").message("reason may have at most 1024 bytes (1 KiB)"))]
#[x_kube(validation = Rule::new("self.reason.matches('[^\\\\s]')").message("reason must say why the node is dead: it may not be blank"))]
#[x_kube(validation = Rule::new("duration(self.validFor) > duration('0s') && duration(self.validFor) <= duration('24h')").message("validFor must be positive and at most 24h: an attestation speaks about now"))]
pub struct CoronerAttestationSpec {
    /// The node that is dead.
    #[schemars(length(min = 1, max = 253))]
    pub node_name: String,

    /// The node's `metadata.uid`: the attestation is about this Node object, not a later one of the
    /// same name.
    #[serde(rename = "nodeUID")]
    #[schemars(length(min = 1, max = 128))]
    pub node_uid: String,

    /// Why the attester knows the machine is dead (what they saw, who unplugged it), recorded verbatim
    /// on the remediation. At most 1 KiB.
    #[schemars(length(min = 1, max = 1024))]
    pub reason: String,

    /// The attester's Kubernetes user name. The ValidatingAdmissionPolicy shipped with coroner rejects
    /// an attestation whose attestedBy is not the user who creates it.
    #[schemars(length(min = 1, max = 1024))]
    pub attested_by: String,

    /// How long after its creation the attestation may still release the node.
    #[serde(default = "default_valid_for")]
    pub valid_for: Duration,
}

fn default_valid_for() -> Duration {
    Duration::from_secs(15 * 60)
}

/// Where an attestation stands.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum AttestationPhase {
    /// Waiting for its preconditions (the `Released` condition says which one).
    #[default]
    Pending,
    /// The release is being written; deleting the attestation no longer cancels it.
    Releasing,
    /// The node's workloads were released (see `released`). Final: deleting the attestation changes
    /// nothing.
    Released,
    /// A precondition can never hold (or the attestation expired); nothing was released. Final.
    Refused,
}

impl AttestationPhase {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "Pending",
            Self::Releasing => "Releasing",
            Self::Released => "Released",
            Self::Refused => "Refused",
        }
    }

    pub fn is_final(self) -> bool {
        matches!(self, Self::Released | Self::Refused)
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CoronerAttestationStatus {
    /// `Released`: True once released; False with the reason of the precondition that refuses (or
    /// waits).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,

    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<AttestationPhase>,

    /// Every precondition as coroner last checked it, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub checks: Vec<PreconditionCheck>,

    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_checked_at: Option<MicroTime>,

    /// What was released, once it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub released: Option<AttestedRelease>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PreconditionCheck {
    /// The precondition's name (docs/safety.md lists them).
    pub name: String,
    pub result: CheckResult,
    pub message: String,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum CheckResult {
    Passed,
    /// Not yet: checked again until validFor runs out.
    Waiting,
    /// Never: the attestation is refused.
    Refused,
    /// Not checked (an earlier precondition it depends on did not pass, or not visible to the checker).
    NotChecked,
}

impl CheckResult {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Passed => "Passed",
            Self::Waiting => "Waiting",
            Self::Refused => "Refused",
            Self::NotChecked => "NotChecked",
        }
    }
}

/// The release an attestation made: the exact taint added and the remediation that owns it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AttestedRelease {
    /// The CoronerRemediation (in the same namespace) whose failed fence the attestation completed; it
    /// owns the taint, and its finalizer removes it when NodeHealthCheck deletes it.
    pub remediation: String,
    #[serde(rename = "remediationUID")]
    pub remediation_uid: String,
    #[serde(rename = "nodeUID")]
    pub node_uid: String,
    pub taint_key: String,
    pub taint_value: String,
    pub taint_effect: String,
    pub taint_time_added: Time,
    /// The node Lease's renewTime checked in the releasing Node update (absent: no Lease).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_renew_time: Option<MicroTime>,
    pub released_at: MicroTime,
}
