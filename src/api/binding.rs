//! `BmcBinding`: which BMC (Redfish service and system) powers which node, and how to trust it.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

// kube-derive takes one printcolumn(...) per column; clippy reads the repeated keys as duplicates.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "coroner.dev",
    version = "v1alpha1",
    kind = "BmcBinding",
    doc = "Which BMC (Redfish service and system) powers which node, and how to trust it.",
    namespaced,
    status = "BmcBindingStatus",
    shortname = "bmcb",
    printcolumn(name = "Node", type_ = "string", json_path = ".spec.nodeName"),
    printcolumn(name = "Endpoint", type_ = "string", json_path = ".spec.redfish.endpoint"),
    printcolumn(
        name = "Verified",
        type_ = "string",
        json_path = r#".status.conditions[?(@.type=="IdentityVerified")].status"#
    ),
    printcolumn(name = "Power", type_ = "string", json_path = ".status.powerState"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct BmcBindingSpec {
    /// The Node this BMC powers. One binding per node.
    #[schemars(length(min = 1, max = 253))]
    pub node_name: String,
    pub redfish: RedfishTarget,
    /// Secret in the binding's namespace with the keys `username` and `password`.
    pub credentials_secret_ref: SecretRef,
    pub tls: TlsPolicy,
}

impl BmcBindingSpec {
    /// Whether the binding reads the Secret or ConfigMap `name` of its namespace (its credentials or
    /// its CA bundle): a change of that object is a reason to verify the binding again.
    pub fn refers_to(&self, kind: CaBundleKind, name: &str) -> bool {
        let ca = self.tls.ca_bundle_ref.as_ref().is_some_and(|ca| ca.kind == kind && ca.name == name);
        ca || (kind == CaBundleKind::Secret && self.credentials_secret_ref.name == name)
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RedfishTarget {
    /// https URL of the Redfish service root, e.g. `https://10.0.0.12/redfish/v1` (a bare
    /// `https://host[:port]` means `/redfish/v1`). No credentials in it: they go in the Secret.
    #[schemars(regex(pattern = r"^https://[^/?#\s@]+(/[^?#\s]*)?$"), length(max = 2048))]
    pub endpoint: String,
    /// Pins `Systems/{id}`. Without it coroner discovers the system: the only one, or the one whose
    /// UUID matches the node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[^/?#\s]+$"), length(max = 256))]
    pub system_id: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
pub struct SecretRef {
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
}

/// How the BMC's certificate is trusted. The public web PKI is never trusted for a BMC: name a CA
/// bundle, pin the certificate, or (loudly, and only explicitly) skip verification.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("has(self.caBundleRef) || has(self.certificateSHA256) || self.insecureSkipVerify").message("set tls.caBundleRef or tls.certificateSHA256 (turning verification off with insecureSkipVerify is possible only explicitly, and is reported as a Warning)"))]
pub struct TlsPolicy {
    /// PEM CA certificates to trust, and only those.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_bundle_ref: Option<CaBundleRef>,
    /// SHA-256 of the BMC's leaf certificate (DER), hex with or without colons. Trusts a factory
    /// self-signed certificate without turning verification off.
    #[serde(rename = "certificateSHA256", default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^([0-9a-fA-F]{2}:?){31}[0-9a-fA-F]{2}$"))]
    pub certificate_sha256: Option<String>,
    /// Name to verify in the certificate when the endpoint is an IP address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub server_name: Option<String>,
    /// Turns certificate verification off. Never the default; the binding and every remediation
    /// through it then carry a Warning.
    #[serde(default)]
    pub insecure_skip_verify: bool,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CaBundleRef {
    pub kind: CaBundleKind,
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    #[schemars(length(min = 1, max = 253))]
    pub key: String,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum CaBundleKind {
    ConfigMap,
    Secret,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BmcBindingStatus {
    /// `Reachable`, `IdentityVerified` and `TLSVerified`, each stamped with the generation of the
    /// spec it describes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    /// The `Systems/{id}` in use (pinned or discovered).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_id: Option<String>,
    /// The UUID that system reported at the last successful verification.
    #[serde(rename = "uuid", default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
    /// The power of the node's machine, only as read from a system whose identity was verified in
    /// the same check (a verification, or a fence's proof); absent when the last check could not
    /// verify the identity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power_state: Option<String>,
    /// When `powerState` was read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_power_check_time: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_verification_time: Option<Time>,
    /// The binding's generation at that verification: after a spec change, `systemId` and `uuid`
    /// describe what the binding used to point at.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}
