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
    printcolumn(name = "IPMI", type_ = "string", json_path = ".spec.ipmi.address"),
    printcolumn(
        name = "Verified",
        type_ = "string",
        json_path = r#".status.conditions[?(@.type=="IdentityVerified")].status"#
    ),
    printcolumn(
        name = "Reason",
        type_ = "string",
        json_path = r#".status.conditions[?(@.type=="IdentityVerified")].reason"#
    ),
    printcolumn(name = "Power", type_ = "string", json_path = ".status.powerState"),
    printcolumn(name = "Last Checked", type_ = "date", json_path = ".status.lastPowerCheckTime"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("has(self.redfish) != has(self.ipmi)").message("set exactly one of spec.redfish (a Redfish service) and spec.ipmi (an IPMI v2.0 BMC)"))]
#[x_kube(validation = Rule::new("!has(self.redfish) || has(self.tls)").message("a Redfish binding says how its BMC's certificate is trusted: set spec.tls.caBundleRef or spec.tls.certificateSHA256"))]
#[x_kube(validation = Rule::new("!has(self.ipmi) || !has(self.tls)").message("an IPMI BMC speaks no TLS: remove spec.tls (docs/safety.md, IPMI devices)"))]
pub struct BmcBindingSpec {
    /// The Node this BMC powers. One binding per node.
    #[schemars(length(min = 1, max = 253))]
    pub node_name: String,
    /// A Redfish service (exactly one of `redfish` and `ipmi`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redfish: Option<RedfishTarget>,
    /// An IPMI v2.0 BMC, RMCP+ with cipher suite 3 (exactly one of `redfish` and `ipmi`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ipmi: Option<IpmiTarget>,
    /// Secret in the binding's namespace with the keys `username` and `password` (and for IPMI,
    /// optionally `kg`: the BMC key, in hex).
    pub credentials_secret_ref: SecretRef,
    /// How a Redfish BMC's certificate is trusted (required with `redfish`, refused with `ipmi`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<TlsPolicy>,
    /// Fencing levels after the BMC (level 1), in order: the first is level 2. Each level is the PDU
    /// outlets that feed the machine; a level proves Off only when every outlet of it does
    /// (docs/safety.md, Fencing levels). With levels, only `action: Off` remediations are admitted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 8))]
    pub pdu_levels: Vec<PduLevel>,
}

/// One fencing level of PDU outlets.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PduLevel {
    /// Every outlet that feeds the machine (a machine with two supplies on two PDUs lists both).
    #[schemars(length(min = 1, max = 4))]
    pub outlets: Vec<PduOutlet>,
    /// How the mapping from these outlets to this machine is known. Without it, the level is usable
    /// only once the machine itself confirmed the mapping (docs/safety.md L5). `OperatorStatement`:
    /// a person states the mapping is right; nothing checked it, every fence through the level carries
    /// the Warning `OutletMappingUnproven`, and a wrong mapping switches off another machine while
    /// this one runs on and is released.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mapping_proof: Option<MappingProof>,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum MappingProof {
    OperatorStatement,
}

/// One PDU outlet: exactly one of `redfish` and `snmp`.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("has(self.redfish) != has(self.snmp)").message("set exactly one of redfish (a Redfish PowerDistribution outlet) and snmp (an APC rPDU outlet over SNMP)"))]
#[x_kube(validation = Rule::new("!has(self.redfish) || has(self.tls)").message("a Redfish PDU says how its certificate is trusted: set tls.caBundleRef or tls.certificateSHA256"))]
#[x_kube(validation = Rule::new("!has(self.snmp) || !has(self.tls)").message("an SNMP PDU speaks no TLS: remove tls (SNMPv3 authPriv protects it)"))]
pub struct PduOutlet {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redfish: Option<RedfishOutlet>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snmp: Option<SnmpOutlet>,
    /// Secret in the binding's namespace. Redfish: `username`, `password`. SNMPv3: `username`,
    /// `authKey`, `privKey` (authPriv: SHA-256 and AES-128 unless `snmp.authProtocol` and
    /// `snmp.privProtocol` say otherwise). SNMPv1/v2c: `community`.
    pub credentials_secret_ref: SecretRef,
    /// How a Redfish PDU's certificate is trusted (required with `redfish`, refused with `snmp`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<TlsPolicy>,
    /// A metered outlet proves Off only while it draws at most this many watts (a welded relay reads
    /// Off and still feeds the machine). 5 unless set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.0, max = 1000.0))]
    pub floor_watts: Option<f64>,
    /// The other nodes this outlet also feeds, each of which must declare it too; an outlet two
    /// bindings name without declaring each other is a conflict (`OutletShared`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub shared_with: Vec<String>,
}

/// The watt floor of an outlet that sets none.
pub const DEFAULT_FLOOR_WATTS: f64 = 5.0;

impl PduOutlet {
    /// Where the outlet is, one string per outlet: two bindings naming the same one name the same
    /// outlet. `redfish:<origin><root>|<rack PDU>|<outlet>` or `snmp:<host>:<port>|<outlet>`.
    pub fn key(&self) -> String {
        match (&self.redfish, &self.snmp) {
            (Some(r), _) => {
                let endpoint = r.endpoint.trim_end_matches('/').to_ascii_lowercase();
                format!("redfish:{endpoint}|{}|{}", r.rack_pdu, r.outlet)
            }
            (None, Some(s)) => format!("snmp:{}|{}", host_port(&s.address, s.port.unwrap_or(161)), s.outlet),
            (None, None) => String::new(),
        }
    }

    pub fn floor(&self) -> f64 {
        self.floor_watts.unwrap_or(DEFAULT_FLOOR_WATTS)
    }
}

/// The PDU an outlet key ([`PduOutlet::key`]) is on: its part before the first `|`. One request at a
/// time goes to a PDU from one process.
pub fn outlet_origin(key: &str) -> &str {
    key.split('|').next().unwrap_or(key)
}

impl PduOutlet {
    /// Configured to send a community in clear text: reported as a Warning, like insecure TLS.
    pub fn is_insecure(&self) -> bool {
        self.snmp.as_ref().is_some_and(|s| s.version != SnmpVersion::V3)
            || self.tls.as_ref().is_some_and(|t| t.insecure_skip_verify)
    }
}

/// A Redfish PowerDistribution outlet: `{endpoint}/PowerEquipment/RackPDUs/{rackPdu}/Outlets/{outlet}`.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RedfishOutlet {
    /// https URL of the PDU's Redfish service root, e.g. `https://pdu-a.example/redfish/v1`.
    #[schemars(length(max = 2048))]
    #[x_kube(validation = Rule::new("self.matches('^https://[^/?#@ ]+(/[^?# ]*)?$')").message("endpoint must be https://host[:port][/path], e.g. https://pdu-a.example/redfish/v1: no credentials, spaces, query or fragment"))]
    pub endpoint: String,
    /// The rack PDU's `Id` (`RackPDUs/{id}`), e.g. `1`.
    #[schemars(length(min = 1, max = 128))]
    #[x_kube(validation = Rule::new("!self.contains('/') && !self.contains('%') && !self.contains(' ') && !self.contains('?') && !self.contains('#') && self != '.' && self != '..'").message("rackPdu is the rack PDU's Id, one path segment, e.g. 1"))]
    pub rack_pdu: String,
    /// The outlet's `Id` (`Outlets/{id}`), e.g. `A3`.
    #[schemars(length(min = 1, max = 128))]
    #[x_kube(validation = Rule::new("!self.contains('/') && !self.contains('%') && !self.contains(' ') && !self.contains('?') && !self.contains('#') && self != '.' && self != '..'").message("outlet is the outlet's Id, one path segment, e.g. A3"))]
    pub outlet: String,
}

/// An APC rPDU outlet (PowerNet-MIB rPDU table, `sysObjectID` 1.3.6.1.4.1.318.1.3.4.5).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SnmpOutlet {
    /// The PDU's host name or IP address (no scheme, no port).
    #[schemars(length(min = 1, max = 253))]
    #[x_kube(validation = Rule::new("self.matches('^[A-Za-z0-9.:-]+$') && !self.contains('://')").message("address is the PDU's host name or IP address, e.g. 10.0.0.50: no scheme, path or spaces (the port goes in port)"))]
    pub address: String,
    /// UDP port, 161 unless set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 65535))]
    pub port: Option<u16>,
    /// The outlet's row, 1 and up.
    #[schemars(range(min = 1, max = 1024))]
    pub outlet: u32,
    /// `V3` (USM authPriv) unless set; `V2c` and `V1` send the community in clear text and are
    /// reported as a Warning.
    #[serde(default)]
    pub version: SnmpVersion,
    /// SNMPv3 authentication: `SHA256` unless set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth_protocol: Option<SnmpAuthProtocol>,
    /// SNMPv3 privacy: `AES128` unless set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priv_protocol: Option<SnmpPrivProtocol>,
    /// The SNMPv3 contextName; APC PDUs use the empty one (the default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    pub context_name: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum SnmpVersion {
    #[default]
    V3,
    V2c,
    V1,
}

/// MD5 is not offered: its HMAC is no longer trusted.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum SnmpAuthProtocol {
    SHA1,
    SHA224,
    SHA256,
    SHA384,
    SHA512,
}

/// DES is not offered: 56-bit keys are brute-forceable.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum SnmpPrivProtocol {
    AES128,
    AES192,
    AES256,
}

/// An IPMI BMC's origin, the key of one action per BMC: `ipmi://host:port`, the host lowercased and
/// an IPv6 address bracketed.
pub fn ipmi_origin(address: &str, port: u16) -> String {
    format!("ipmi://{}", host_port(address, port))
}

/// `host:port`, the host lowercased and an IPv6 address bracketed: one spelling per UDP device.
pub fn host_port(address: &str, port: u16) -> String {
    let host = address.trim().to_ascii_lowercase();
    let host = match host.parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V6(v6)) => format!("[{v6}]"),
        Ok(ip) => ip.to_string(),
        Err(_) => host,
    };
    format!("{host}:{port}")
}

/// An IPMI v2.0 BMC.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct IpmiTarget {
    /// The BMC's host name or IP address (no scheme, no port).
    #[schemars(length(min = 1, max = 253))]
    #[x_kube(validation = Rule::new("self.matches('^[A-Za-z0-9.:-]+$') && !self.contains('://')").message("address is the BMC's host name or IP address, e.g. 10.0.0.12 or bmc-1.example: no scheme, path or spaces (the port goes in port)"))]
    pub address: String,
    /// UDP port, 623 unless set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 65535))]
    pub port: Option<u16>,
    /// The RMCP+ cipher suite: only 3 (RAKP-HMAC-SHA1, HMAC-SHA1-96, AES-CBC-128) is spoken; coroner
    /// never negotiates or falls back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self == 3").message("cipherSuite must be 3: coroner speaks IPMI v2.0 cipher suite 3 only, and never negotiates or falls back (suite 17 has no test peer yet)"))]
    pub cipher_suite: Option<u8>,
    /// The session privilege: Operator (enough for power control) unless set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub privilege: Option<IpmiPrivilege>,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum IpmiPrivilege {
    Operator,
    Administrator,
}

impl BmcBindingSpec {
    /// Where the BMC is: the Redfish endpoint, or `ipmi://address:port`.
    pub fn endpoint(&self) -> String {
        match (&self.redfish, &self.ipmi) {
            (Some(redfish), _) => redfish.endpoint.clone(),
            (None, Some(ipmi)) => ipmi_origin(&ipmi.address, ipmi.port.unwrap_or(623)),
            (None, None) => String::new(),
        }
    }

    /// The Redfish system the binding pins, if any (an IPMI BMC has one chassis).
    pub fn system_id(&self) -> Option<&str> {
        self.redfish.as_ref().and_then(|r| r.system_id.as_deref())
    }

    /// How a Redfish BMC's certificate is trusted; an IPMI BMC has none (the default policy, unused).
    pub fn tls_policy(&self) -> TlsPolicy {
        self.tls.clone().unwrap_or_default()
    }

    /// Whether the binding reads the Secret or ConfigMap `name` of its namespace (its credentials or
    /// its CA bundle): a change of that object is a reason to verify the binding again.
    pub fn refers_to(&self, kind: CaBundleKind, name: &str) -> bool {
        let ca = self
            .tls
            .as_ref()
            .and_then(|t| t.ca_bundle_ref.as_ref())
            .is_some_and(|ca| ca.kind == kind && ca.name == name);
        ca || (kind == CaBundleKind::Secret && self.credentials_secret_ref.name == name)
    }
}

// Each rule names what is wrong and shows a right value: the API server's answer to a bad binding
// is the first thing a new user reads. maxLength bounds the cost of the rules.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RedfishTarget {
    /// https URL of the Redfish service root, e.g. `https://10.0.0.12/redfish/v1` (a bare
    /// `https://host[:port]` means `/redfish/v1`). No credentials in it: they go in the Secret.
    #[schemars(length(max = 2048))]
    #[x_kube(validation = Rule::new("self.startsWith('https://')").message("endpoint must be an https URL of the BMC's Redfish service root, e.g. https://10.0.0.12/redfish/v1 (coroner never talks plain http to a BMC)"))]
    #[x_kube(validation = Rule::new("!self.matches('^https://[^/]*@')").message("endpoint must not carry credentials (user:password@host): put them in the Secret named by credentialsSecretRef"))]
    #[x_kube(validation = Rule::new("self.matches('^https://[^/?#@ ]+(/[^?# ]*)?$')").message("endpoint must be https://host[:port][/path], e.g. https://10.0.0.12/redfish/v1 or https://bmc-1.example:8443: a host, then an optional path, with no spaces, query (?) or fragment (#)"))]
    pub endpoint: String,
    /// Pins `Systems/{id}`: the last path segment of the system's URI, e.g. `1` or
    /// `System.Embedded.1` (not a URI). Without it coroner discovers the system: the only one, or the
    /// one whose UUID matches the node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 256))]
    #[x_kube(validation = Rule::new("self.matches('^[^/?# ]+$')").message("systemId is the last path segment of the system's URI, e.g. 1 or System.Embedded.1, not a URI: no /, ?, # or spaces"))]
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
    /// SHA-256 of the BMC's leaf certificate (DER): 64 hex digits with or without colons, any case,
    /// or openssl's line as it prints it (`sha256 Fingerprint=AB:CD:…`, from `openssl x509 -noout
    /// -fingerprint -sha256`). Trusts a factory self-signed certificate without turning verification
    /// off.
    #[serde(rename = "certificateSHA256", default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 128))]
    #[x_kube(validation = Rule::new("self.matches('^((?i)sha256 fingerprint=)?([0-9a-fA-F]{2}:?){31}[0-9a-fA-F]{2}$')").message("certificateSHA256 is the SHA-256 of the BMC's certificate: 64 hex digits, colons allowed (AB:CD:...), or openssl's line as is (sha256 Fingerprint=AB:CD:...); read it with: openssl s_client -connect HOST:443 </dev/null | openssl x509 -noout -fingerprint -sha256"))]
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
    /// What the last verification whose client coroner knew was made with: a digest of the spec and
    /// of the credential and CA values, keyed with a key only coroner holds (so it tells its readers
    /// nothing of the password). A fence's admission compares it with the content its client is made
    /// of (docs/safety.md A2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verified_content: Option<String>,
    /// L5: what the machine showed of each PDU level's mapping (docs/safety.md, Fencing levels).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub level_confirmations: Vec<LevelConfirmation>,
}

/// L5: the binding verifier's observations of one PDU level against the machine. A level is confirmed
/// at `generation` once both were seen: the BMC reading the verified system On with the node Ready
/// while every outlet drew above its floor, and reading it Off while every outlet drew at most its
/// floor. An observation that contradicts the mapping clears both.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LevelConfirmation {
    /// 2 for the binding's first `pduLevels` entry.
    #[schemars(extend("format" = "int32"))]
    pub level: u32,
    /// The binding's generation the observations were made at: an edit since unconfirms the level.
    pub generation: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_seen_at: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub off_seen_at: Option<Time>,
    /// The last observation, for people: the machine's power and each outlet's draw, or what
    /// contradicted the mapping.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last: Option<String>,
    /// A digest of the fields above keyed with a key only coroner holds: a confirmation anyone else
    /// wrote into the status counts for nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seal: Option<String>,
}
