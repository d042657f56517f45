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

    /// Evidence the attester saw and accepts, each named as the preflight (`coroner attest`) prints
    /// it: its reason and the moment of the evidence. Only what the rules let an attester accept
    /// (docs/safety.md A1, A2), and only by an attestation created after that moment plus the
    /// template's leaseFreshness.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 3))]
    pub acknowledge: Vec<Acknowledgement>,
}

/// One piece of evidence an attestation accepts (`--acknowledge FenceSawLife=<time>`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Acknowledgement {
    pub reason: AcknowledgedReason,
    /// The moment of the evidence, as the preflight prints it (compared to the second).
    pub at: Time,
}

/// The refusals an acknowledgement may clear; every other one has no override.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum AcknowledgedReason {
    /// Life seen before the power action: a Lease renewal while the fence ran, or a new bootID.
    FenceSawLife,
    /// An `On` reading from a BMC that has not answered since.
    BmcReportedOn,
    /// A binding not verified at its content when the fence was admitted.
    BindingUnverified,
}

impl AcknowledgedReason {
    pub const ALL: [Self; 3] = [Self::FenceSawLife, Self::BmcReportedOn, Self::BindingUnverified];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::FenceSawLife => "FenceSawLife",
            Self::BmcReportedOn => "BmcReportedOn",
            Self::BindingUnverified => "BindingUnverified",
        }
    }
}

impl std::fmt::Display for Acknowledgement {
    /// As the CLI takes it: `FenceSawLife=2026-12-05T01:00:00Z`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}={}", self.reason.as_str(), self.at.0.round(jiff::Unit::Second).unwrap_or(self.at.0))
    }
}

impl std::str::FromStr for Acknowledgement {
    type Err = String;

    /// `REASON=TIME`, TIME an RFC 3339 timestamp.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let (reason, at) = text.split_once('=').ok_or_else(|| format!("{text:?} is not REASON=TIME"))?;
        let reason = AcknowledgedReason::ALL.into_iter().find(|r| r.as_str() == reason.trim()).ok_or_else(|| {
            let known: Vec<&str> = AcknowledgedReason::ALL.iter().map(|r| r.as_str()).collect();
            format!("{reason:?} cannot be acknowledged; these can: {}", known.join(", "))
        })?;
        let at: jiff::Timestamp = at
            .trim()
            .parse()
            .map_err(|e| format!("{at:?} is not an RFC 3339 time (e.g. 2026-12-05T01:00:00Z): {e}"))?;
        Ok(Self { reason, at: Time(at) })
    }
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
