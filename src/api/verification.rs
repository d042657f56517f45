//! `CoronerVerification`: a request to check, now, whether coroner could fence some nodes — their
//! bindings, TLS, credentials, identity, power, and what the gates would do if the node went
//! `Ready=Unknown`. `kubectl coroner verify` creates one; the controller, which has the network path
//! and the credentials, answers in its status and deletes it an hour after it is done. It never
//! sends a power action.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

// kube-derive takes one printcolumn(...) per column; clippy reads the repeated keys as duplicates.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "coroner.dev",
    version = "v1alpha1",
    kind = "CoronerVerification",
    doc = "A request to check whether coroner could fence these nodes now (bindings, TLS, credentials, identity, power, the gates as if the node were dead). Answered in its status by the controller, deleted an hour after; no power action is ever sent.",
    namespaced,
    status = "CoronerVerificationStatus",
    shortname = "cver",
    category = "medik8s",
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(name = "Checked", type_ = "integer", json_path = ".status.checked"),
    printcolumn(name = "Nodes", type_ = "integer", json_path = ".status.total"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("self.all || size(self.nodes) > 0 || (has(self.fetchCertificates) && size(self.fetchCertificates) > 0)").message("name the nodes to verify, or set all: true (every node a NodeHealthCheck using a coroner template selects), or name endpoints in fetchCertificates"))]
#[x_kube(validation = Rule::new("self == oldSelf").message("a verification's spec never changes: create a new one"))]
pub struct CoronerVerificationSpec {
    /// The nodes to check.
    #[serde(default)]
    #[schemars(length(max = 5000))]
    pub nodes: Vec<String>,
    /// Also every node that a NodeHealthCheck whose template (or one of its escalating templates) is a
    /// CoronerRemediationTemplate selects; the other nodes are listed apart, for information.
    #[serde(default)]
    pub all: bool,
    /// https endpoints (at most 50) whose certificate the controller reads at first contact, from where
    /// fences run: a TLS handshake and nothing after it (no request, no credential). Each answer is a
    /// SHA-256 pin to check out of band before it is trusted (`kubectl coroner import-far` uses them
    /// for FAR bindings that skipped verification).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 50))]
    pub fetch_certificates: Vec<String>,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum VerificationPhase {
    /// Not started yet, or under way (`checked` of `total`).
    #[default]
    Running,
    /// Every node was checked; deleted an hour after `completedAt`.
    Done,
    /// The nodes to check could not be known (the message says why); deleted an hour after.
    Failed,
}

impl VerificationPhase {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Running => "Running",
            Self::Done => "Done",
            Self::Failed => "Failed",
        }
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CoronerVerificationStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<VerificationPhase>,
    #[serde(default)]
    #[schemars(extend("format" = "int32"))]
    pub checked: u32,
    #[serde(default)]
    #[schemars(extend("format" = "int32"))]
    pub total: u32,
    /// Why the verification failed (phase `Failed`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_at: Option<Time>,
    /// One answer per node checked, in the order the nodes were listed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nodes: Vec<NodeVerification>,
    /// With `all`: the cluster's other nodes, which no NodeHealthCheck using a coroner template
    /// selects (nothing would remediate them through coroner).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unselected: Vec<String>,
    /// One answer per endpoint of `fetchCertificates`, in their order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub certificates: Vec<FetchedCertificate>,
}

/// A certificate read at first contact.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FetchedCertificate {
    pub endpoint: String,
    /// The SHA-256 of the certificate the endpoint showed (as `tls.certificateSHA256` takes it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// That none was read (in general terms: the answer is no port scanner).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fetched_at: Option<Time>,
}

/// What coroner found for one node.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeVerification {
    pub node: String,
    /// Whether a fence would go through, were the node `Ready=Unknown` now.
    pub would_fence: bool,
    /// The BmcBinding(s) that name the node.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bindings: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// How the BMC's certificate is verified (CA bundle, pin), or that it is not (insecure, flagged),
    /// or `n/a` (IPMI).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<String>,
    /// The credentials Secret, and whether it could be used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials: Option<String>,
    /// The identity proof: how the UUID matched, or why it did not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity: Option<String>,
    /// The power of the verified system.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power: Option<String>,
    /// What a fence would meet at its gates, the node taken as dead: `Admitted`, or the reason of the
    /// first gate that would hold (waiting) or refuse it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gates: Option<String>,
    /// The binding's PDU levels after the BMC (docs/safety.md, Fencing levels): how many, and what
    /// their mappings, outlets and transports rest on, as the binding verifier last found them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub levels: Option<String>,
    /// Why a fence would not go through (the first cause), when it would not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub why_not: Option<String>,
}
