//! `coroner import-far` (also `kubectl coroner import-far`): FenceAgentsRemediationTemplates as
//! coroner's CoronerRemediationTemplates and one BmcBinding per node, each choice that differs from
//! FAR commented. The FAR templates come from `-f FILE` or from the cluster (every one, or those in
//! `--far-namespace`). Without `--apply` the objects are printed as YAML and credentials never go to
//! stdout: a binding names the Secret that must hold them. With `--apply` they are applied to the
//! cluster, each node's credentials copied from FAR's Secrets and parameters straight into the Secret
//! its binding names, and `verify` then runs on the nodes imported. With the cluster at hand, a Redfish
//! binding's certificate is read by the controller at first contact and pinned, marked to be checked
//! out of band ([`PINNED_ANNOTATION`]). The FAR template is read as FAR documents its API
//! (`fence-agents-remediation.medik8s.io/v1alpha1`, the fields read here).

use std::collections::BTreeMap;

use k8s_openapi::{ByteString, api::core::v1::Secret};
use kube::{
    Api, Client, ResourceExt,
    api::{ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams},
};
use serde::Deserialize;

use super::{ApiArgs, CliError, kube_client};
use crate::api::{
    BmcBinding, BmcBindingSpec, CoronerRemediationSpec, CoronerRemediationTemplate, CoronerRemediationTemplateSpec,
    Duration, FenceAction, IpmiPrivilege, IpmiTarget, PduLevel, PduOutlet, RedfishTarget, RemediationStrategy,
    RemediationTemplateBody, Retry, SecretRef, SnmpAuthProtocol, SnmpOutlet, SnmpPrivProtocol, SnmpVersion, TlsPolicy,
};

#[derive(Debug, clap::Args)]
pub struct ImportFarArgs {
    /// A file holding one FenceAgentsRemediationTemplate (YAML or JSON). Without it: the ones in the
    /// cluster.
    #[arg(short = 'f', long = "filename", env = "CORONER_IMPORT_FAR_FILE")]
    pub file: Option<std::path::PathBuf>,

    /// Where FAR's templates and Secrets are read in the cluster (default: every namespace; with
    /// `-f`, the file's namespace).
    #[arg(long, env = "CORONER_IMPORT_FAR_NAMESPACE")]
    pub far_namespace: Option<String>,

    /// The nodes to write bindings for (comma-separated); FAR's `{{.NodeName}}` is expanded for each.
    /// Without it: the nodes the NodeHealthChecks using the FAR template select (from the cluster),
    /// and those the template's nodeparameters and nodeSecretNames name.
    #[arg(long, env = "CORONER_IMPORT_FAR_NODES", value_delimiter = ',')]
    pub nodes: Vec<String>,

    /// Apply the imported objects to the cluster (credentials copied from FAR's Secrets into
    /// coroner's), then verify the nodes imported. Without it: print them as YAML.
    #[arg(long, env = "CORONER_IMPORT_FAR_APPLY")]
    pub apply: bool,

    #[command(flatten)]
    pub api: ApiArgs,
}

/// FAR's template, as its API documents the fields the importer reads.
#[derive(Debug, Deserialize)]
pub struct FarTemplate {
    pub metadata: FarMetadata,
    pub spec: FarTemplateSpec,
}

#[derive(Debug, Deserialize)]
pub struct FarMetadata {
    pub name: String,
    #[serde(default)]
    pub namespace: Option<String>,
}

#[derive(Debug, Deserialize)]
pub struct FarTemplateSpec {
    pub template: FarTemplateBody,
}

#[derive(Debug, Deserialize)]
pub struct FarTemplateBody {
    pub spec: FarSpec,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FarSpec {
    pub agent: String,
    #[serde(default)]
    pub sharedparameters: BTreeMap<String, String>,
    #[serde(default)]
    pub nodeparameters: BTreeMap<String, BTreeMap<String, String>>,
    #[serde(rename = "retrycount")]
    pub retry_count: Option<i64>,
    #[serde(rename = "retryinterval")]
    pub retry_interval: Option<String>,
    pub timeout: Option<String>,
    pub remediation_strategy: Option<String>,
    pub shared_secret_name: Option<String>,
    #[serde(default)]
    pub node_secret_names: BTreeMap<String, String>,
}

/// Why a node gets no binding.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Unsupported {
    #[error(
        "agent {0} is not supported: coroner fences through Redfish (fence_redfish) and IPMI v2.0 (fence_ipmilan --lanplus), and through APC PDU outlets (fence_apc_snmp) as a level after them"
    )]
    Agent(String),
    #[error("fence_ipmilan without --lanplus speaks IPMI 1.5, which coroner never does (no integrity, no encryption)")]
    Ipmi15,
    #[error("IPMI cipher suite {0}: coroner speaks cipher suite 3 only")]
    CipherSuite(String),
    #[error(
        "IPMI privilege level {0:?}: coroner's sessions are Operator or Administrator (power control needs Operator)"
    )]
    Privilege(String),
    #[error("no --ip for this node")]
    NoAddress,
    #[error("{flag} {value:?} is not a number")]
    NotANumber { flag: &'static str, value: String },
    #[error("already imported from FAR template {0}: one binding per node")]
    Duplicate(String),
    #[error("no --plug for this node: the outlet that feeds it")]
    NoPlug,
    #[error("SNMP version {0:?}: fence_apc_snmp knows 1, 2c and 3")]
    SnmpVersion(String),
    #[error(
        "SNMPv3 security level {0:?}: coroner's SNMPv3 is authPriv only (a PDU that switches a machine off answers no unauthenticated or unencrypted request)"
    )]
    SnmpSecurityLevel(String),
    #[error("SNMPv3 {what} protocol {value:?}: coroner does not offer it ({why})")]
    SnmpProtocol { what: &'static str, value: String, why: &'static str },
    #[error(
        "its outlets are PDU level {level} of the BmcBinding imported from FAR template {from} (a PDU fences a machine only after its BMC could not)"
    )]
    LevelOf { level: usize, from: String },
    #[error(
        "a PDU outlet is a fencing level after the node's BMC, and no FAR template imported here gives this node a BMC binding (fence_redfish or fence_ipmilan)"
    )]
    LevelWithoutBmc,
    #[error(
        "not added: the BMC's FAR template {0} reboots (FAR's default action), and coroner refuses a Reboot for a binding with PDU levels (docs/safety.md L3); with action: Off in that template, import again"
    )]
    LevelNeedsOff(String),
    #[error(
        "not added: the node already has a PDU level from FAR template {0}; two fence_apc_snmp templates for one node may be its two supplies, which only one level listing both outlets proves off (L1): write that level by hand"
    )]
    SecondPduTemplate(String),
}

/// One node's binding, or why it gets none; `notes` are the comments written above it.
#[derive(Clone, Debug)]
pub struct NodeImport {
    pub node: String,
    pub binding: Result<BmcBinding, Unsupported>,
    /// fence_apc_snmp: the node's outlet as a PDU level, which [`merged`] adds to the node's binding
    /// from another FAR template (the binding above then says where it went).
    pub level: Option<PduLevel>,
    /// A Redfish binding's certificate must be pinned, read out of band first: the endpoint, and why
    /// (FAR's `--ssl-insecure`, or FAR's trust in the system's CAs, which coroner never uses).
    pub needs_pin: Option<(String, &'static str)>,
    pub notes: Vec<String>,
}

/// What the import writes.
#[derive(Clone, Debug)]
pub struct Import {
    /// fence_apc_snmp: the template imports as PDU levels of the nodes' bindings, not as a template.
    pub levels_only: bool,
    pub template: CoronerRemediationTemplate,
    pub template_notes: Vec<String>,
    pub nodes: Vec<NodeImport>,
}

/// A FAR duration (`5s`, `1m30s`) as coroner's.
fn duration(text: &str) -> Option<Duration> {
    text.parse().ok()
}

/// The template: FAR's defaults written out, never coroner's inherited.
fn template(far: &FarTemplate, namespace: &str) -> (CoronerRemediationTemplate, Vec<String>) {
    let spec = &far.spec.template.spec;
    let mut notes = Vec::new();
    let strategy = match spec.remediation_strategy.as_deref() {
        Some("OutOfServiceTaint") => RemediationStrategy::OutOfServiceTaint,
        other => {
            notes.push(format!(
                "remediationStrategy: ResourceDeletion, FAR's {} (coroner's default is OutOfServiceTaint)",
                if other.unwrap_or_default().is_empty() { "default" } else { "choice" }
            ));
            RemediationStrategy::ResourceDeletion
        }
    };
    if let Some(value) = spec.sharedparameters.get("action") {
        notes.push(format!(
            "FAR's action {value:?} (without dashes) is passed as is and FAR adds --action=reboot: it reboots"
        ));
    }
    let action = match spec.sharedparameters.get("--action").map(String::as_str) {
        Some("off") => FenceAction::Off,
        Some("reboot") | Some("") | None => {
            notes.push("action: Reboot, as FAR adds --action=reboot when none is given".into());
            FenceAction::Reboot
        }
        Some(other) => {
            notes.push(format!("FAR's --action={other} is not one coroner knows: action Reboot, as FAR's default"));
            FenceAction::Reboot
        }
    };
    let defaults = CoronerRemediationSpec::default();
    let count = match spec.retry_count {
        Some(n) if n >= 1 => u32::try_from(n).unwrap_or(u32::MAX),
        Some(n) => {
            notes.push(format!(
                "FAR's retrycount {n} runs no agent and reports success; coroner's retry.count is at least 1"
            ));
            1
        }
        None => 5,
    };
    let mut parsed = |field: &str, text: Option<&str>, default: u64| match text.map(|t| (t, duration(t))) {
        None => Duration::from_secs(default),
        Some((_, Some(d))) => d,
        Some((text, None)) => {
            notes.push(format!(
                "FAR's {field} {text:?} is no duration coroner reads: {default}s, FAR's default, is used"
            ));
            Duration::from_secs(default)
        }
    };
    let interval = parsed("retryinterval", spec.retry_interval.as_deref(), 5);
    let timeout = parsed("timeout", spec.timeout.as_deref(), 60);
    let spec = CoronerRemediationSpec {
        action,
        remediation_strategy: strategy,
        power_off_timeout: timeout,
        retry: Retry { count, interval },
        ..defaults
    };
    let mut template = CoronerRemediationTemplate::new(
        &far.metadata.name,
        CoronerRemediationTemplateSpec { template: RemediationTemplateBody { spec } },
    );
    template.metadata.namespace = Some(namespace.to_owned());
    (template, notes)
}

/// FAR's parameters for `node`: shared ones (`{{.NodeName}}` expanded), then the node's own.
fn parameters(spec: &FarSpec, node: &str) -> BTreeMap<String, String> {
    let mut params: BTreeMap<String, String> =
        spec.sharedparameters.iter().map(|(k, v)| (k.clone(), v.replace("{{.NodeName}}", node))).collect();
    for (flag, by_node) in &spec.nodeparameters {
        if let Some(value) = by_node.get(node) {
            params.insert(flag.clone(), value.clone());
        }
    }
    params
}

fn first<'a>(params: &'a BTreeMap<String, String>, flags: &[&str]) -> Option<&'a str> {
    flags.iter().find_map(|flag| params.get(*flag)).map(String::as_str)
}

fn port(params: &BTreeMap<String, String>) -> Result<Option<u16>, Unsupported> {
    first(params, &["--ipport", "-u"])
        .map(|v| v.parse().map_err(|_| Unsupported::NotANumber { flag: "--ipport", value: v.to_owned() }))
        .transpose()
}

/// One node's binding, as FAR's agent and parameters describe its BMC.
fn node_import(spec: &FarSpec, node: &str, namespace: &str) -> NodeImport {
    let params = parameters(spec, node);
    let mut notes = Vec::new();
    let secret = spec.node_secret_names.get(node).or(spec.shared_secret_name.as_ref());
    if spec.agent == "fence_apc_snmp" {
        return apc_import(&params, secret, node);
    }
    let secret_name = format!("{node}-bmc");
    notes.push(match secret {
        Some(far) => format!(
            "credentials: copy the username and password of FAR's Secret {far} into Secret {secret_name} (keys username, password)"
        ),
        None => format!("credentials: Secret {secret_name} with keys username and password"),
    });
    if params.keys().any(|k| matches!(k.as_str(), "--password" | "-p" | "--username" | "-l")) {
        notes.push(format!(
            "FAR's template carries credentials inline: they are not copied here; put them in Secret {secret_name}"
        ));
    }
    if params.keys().any(|k| matches!(k.as_str(), "--hexadecimal-kg" | "-y")) {
        notes.push(format!(
            "FAR's template carries a BMC key (--hexadecimal-kg): it is not copied here; put it, in hex, in Secret {secret_name} key kg"
        ));
    }
    if spec.agent == "fence_ipmilan" && first(&params, &["--privlvl", "-L"]).is_none() {
        notes.push(
            "privilege: Administrator, fence_ipmilan's default (coroner's is Operator, enough for power control)"
                .into(),
        );
    }
    for flag in ["--target", "--redfish-uri", "--ipmitool-path", "--method"] {
        if params.contains_key(flag) {
            notes.push(format!("FAR's {flag} has no equivalent in coroner and is not carried over"));
        }
    }
    let mut needs_pin = None;
    let target = match spec.agent.as_str() {
        "fence_redfish" => redfish(&params).map(|(redfish, insecure)| {
            let why = if insecure {
                "FAR ran with --ssl-insecure: coroner verifies the BMC's certificate"
            } else {
                "FAR trusted the system's CAs, which coroner never does for a BMC: pin the certificate (or name its CA in tls.caBundleRef)"
            };
            needs_pin = Some((redfish.endpoint.clone(), why));
            (Some(redfish), None)
        }),
        "fence_ipmilan" => ipmi(&params).map(|ipmi| (None, Some(ipmi))),
        other => Err(Unsupported::Agent(other.to_owned())),
    };
    let binding = target.map(|(redfish, ipmi)| {
        let tls = redfish.as_ref().map(|_| TlsPolicy {
            certificate_sha256: Some("REPLACE-WITH-THE-BMC-CERTIFICATE-SHA256".into()),
            ..TlsPolicy::default()
        });
        let mut binding = BmcBinding::new(
            node,
            BmcBindingSpec {
                node_name: node.to_owned(),
                redfish,
                ipmi,
                credentials_secret_ref: SecretRef { name: secret_name.clone() },
                tls,
                pdu_levels: Vec::new(),
            },
        );
        binding.metadata.namespace = Some(namespace.to_owned());
        binding
    });
    NodeImport { node: node.to_owned(), binding, level: None, needs_pin, notes }
}

/// fence_apc_snmp: the node's outlet as a PDU level for its binding (docs/safety.md, Fencing levels),
/// with the credentials' Secret `<node>-pdu` and what differs from FAR in the notes.
fn apc_import(params: &BTreeMap<String, String>, far_secret: Option<&String>, node: &str) -> NodeImport {
    let secret_name = format!("{node}-pdu");
    let mut notes = Vec::new();
    let level = apc_level(params, &secret_name);
    if let Ok(level) = &level {
        let snmp = level.outlets.first().and_then(|o| o.snmp.as_ref());
        let keys = match snmp.map(|s| s.version) {
            Some(SnmpVersion::V3) => "username, authKey, privKey (FAR's --username, --password, --snmp-priv-passwd)",
            _ => "community (FAR's --community; fence_apc_snmp's default is \"private\")",
        };
        notes.push(match far_secret {
            Some(far) => {
                format!("credentials: copy them from FAR's Secret {far} into Secret {secret_name} (keys {keys})")
            }
            None => format!("credentials: Secret {secret_name} with keys {keys}"),
        });
        if snmp.is_some_and(|s| s.version != SnmpVersion::V3) {
            notes.push(
                "SNMPv1/v2c as FAR ran it (fence_apc_snmp's default is v1): the community travels in clear text; coroner says so as a Warning (PduTransportSecure=False). Prefer SNMPv3 authPriv".into(),
            );
        }
        notes.push(
            "mappingProof is not set: FAR switched this plug on its operator's word, and coroner uses a level only once the machine confirmed its outlets (an APC rPDU meters no outlet draw, so it never can) or someone states the mapping. Add mappingProof: OperatorStatement only once the level lists every outlet that feeds the machine (a machine with two supplies needs both outlets in this one level: L1) and you have checked each plug (docs/safety.md L5)".into(),
        );
        notes.push("APC rPDU (AP78xx/79xx) only: coroner refuses a PDU whose sysObjectID it does not know".into());
    }
    // Until [`merged`] finds the node's binding from a BMC's FAR template.
    let (binding, level) = match level {
        Ok(level) => (Err(Unsupported::LevelWithoutBmc), Some(level)),
        Err(why) => (Err(why), None),
    };
    NodeImport { node: node.to_owned(), binding, level, needs_pin: None, notes }
}

/// fence_apc_snmp's `--ip`, `--ipport`, `--plug`, `--snmp-version` (its default: 1) and, for v3,
/// `--snmp-sec-level` (authPriv only), `--snmp-auth-prot` (SHA) and `--snmp-priv-prot` (AES); MD5
/// and DES are refused, as coroner offers neither.
fn apc_level(params: &BTreeMap<String, String>, secret: &str) -> Result<PduLevel, Unsupported> {
    let address = first(params, &["--ip", "-a"]).ok_or(Unsupported::NoAddress)?.to_owned();
    let plug = first(params, &["--plug", "-n"]).ok_or(Unsupported::NoPlug)?;
    // fence_apc_snmp also takes outlet names and switch:plug; coroner only outlet numbers.
    let outlet = Some(plug)
        .filter(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_digit()))
        .and_then(|p| p.parse::<u32>().ok())
        .filter(|n| *n >= 1)
        .ok_or_else(|| Unsupported::NotANumber { flag: "--plug", value: plug.to_owned() })?;
    let version = match first(params, &["--snmp-version", "-d"]).unwrap_or("1") {
        "1" => SnmpVersion::V1,
        "2c" => SnmpVersion::V2c,
        "3" => SnmpVersion::V3,
        other => return Err(Unsupported::SnmpVersion(other.to_owned())),
    };
    let (mut auth_protocol, mut priv_protocol) = (None, None);
    if version == SnmpVersion::V3 {
        // fence_snmp sets authPriv itself when both passwords are given and no level is.
        let both = ["--snmp-priv-passwd", "--password"].iter().all(|flag| params.contains_key(*flag));
        let implied = both.then_some("authPriv");
        match first(params, &["--snmp-sec-level", "-E"]).or(implied) {
            Some("authPriv") => {}
            other => {
                let level = other.unwrap_or("unset: set --snmp-sec-level authPriv in the FAR template");
                return Err(Unsupported::SnmpSecurityLevel(level.to_owned()));
            }
        }
        auth_protocol = match first(params, &["--snmp-auth-prot", "-b"]) {
            Some("SHA") => Some(SnmpAuthProtocol::SHA1),
            other => {
                let why = "MD5's HMAC is no longer trusted; use SHA";
                let value = other.unwrap_or("unset (net-snmp's MD5)").to_owned();
                return Err(Unsupported::SnmpProtocol { what: "authentication", value, why });
            }
        };
        priv_protocol = match first(params, &["--snmp-priv-prot", "-B"]) {
            Some("AES") => Some(SnmpPrivProtocol::AES128),
            other => {
                let why = "DES's 56-bit keys are brute-forceable; use AES";
                let value = other.unwrap_or("unset (net-snmp's DES)").to_owned();
                return Err(Unsupported::SnmpProtocol { what: "privacy", value, why });
            }
        };
    }
    let port = port(params)?.filter(|p| *p != 161);
    let snmp = SnmpOutlet { address, port, outlet, version, auth_protocol, priv_protocol, context_name: None };
    let outlet = PduOutlet {
        redfish: None,
        snmp: Some(snmp),
        credentials_secret_ref: SecretRef { name: secret.to_owned() },
        tls: None,
        floor_watts: None,
        shared_with: Vec::new(),
    };
    Ok(PduLevel { outlets: vec![outlet], mapping_proof: None })
}

/// fence_redfish's `--ip`, `--ipport` and `--systems-uri`; whether it ran with `--ssl-insecure`.
fn redfish(params: &BTreeMap<String, String>) -> Result<(RedfishTarget, bool), Unsupported> {
    let ip = first(params, &["--ip", "-a"]).ok_or(Unsupported::NoAddress)?;
    let endpoint = match port(params)? {
        Some(port) if port != 443 => format!("https://{ip}:{port}/redfish/v1"),
        _ => format!("https://{ip}/redfish/v1"),
    };
    let system_id = first(params, &["--systems-uri"])
        .and_then(|uri| uri.trim_end_matches('/').rsplit('/').next())
        .filter(|id| !id.is_empty())
        .map(str::to_owned);
    let insecure = params.contains_key("--ssl-insecure");
    Ok((RedfishTarget { endpoint, system_id }, insecure))
}

/// fence_ipmilan with `--lanplus`: address, port, cipher suite (3 only) and privilege
/// (fence_ipmilan's default is administrator).
fn ipmi(params: &BTreeMap<String, String>) -> Result<IpmiTarget, Unsupported> {
    // fence_ipmilan takes lanplus as a bare flag or "1"; "0" is IPMI 1.5.
    if !matches!(first(params, &["--lanplus", "-P"]), Some("" | "1")) {
        return Err(Unsupported::Ipmi15);
    }
    let address = first(params, &["--ip", "-a"]).ok_or(Unsupported::NoAddress)?.to_owned();
    match first(params, &["--cipher", "-C"]) {
        None | Some("3") => {}
        Some(other) => return Err(Unsupported::CipherSuite(other.to_owned())),
    }
    let privilege = match first(params, &["--privlvl", "-L"]).map(str::to_ascii_lowercase).as_deref() {
        None | Some("administrator") => Some(IpmiPrivilege::Administrator),
        Some("operator") => None,
        Some(other) => return Err(Unsupported::Privilege(other.to_owned())),
    };
    Ok(IpmiTarget { address, port: port(params)?.filter(|p| *p != 623), cipher_suite: None, privilege })
}

/// The import of `far` for `nodes` (none: the nodes its parameters and Secrets name).
pub fn import(far: &FarTemplate, nodes: &[String], namespace: &str) -> Import {
    let spec = &far.spec.template.spec;
    let named = if nodes.is_empty() { named_nodes(spec) } else { nodes.to_vec() };
    let (template, template_notes) = template(far, namespace);
    let nodes = named.iter().map(|n| node_import(spec, n, namespace)).collect();
    Import { levels_only: spec.agent == "fence_apc_snmp", template, template_notes, nodes }
}

/// The nodes a FAR template names itself (in nodeparameters and nodeSecretNames), sorted.
pub fn named_nodes(spec: &FarSpec) -> Vec<String> {
    let mut named: Vec<String> = spec.nodeparameters.values().flat_map(|by| by.keys().cloned()).collect();
    named.extend(spec.node_secret_names.keys().cloned());
    named.sort();
    named.dedup();
    named
}

/// Imports of several FAR templates, in order: a node that an earlier one already gave a binding
/// gets none from a later one ([`Unsupported::Duplicate`]): two bindings for one node are a conflict.
pub fn merged(mut imports: Vec<Import>) -> Vec<Import> {
    let mut bound: BTreeMap<String, String> = BTreeMap::new();
    for import in &mut imports {
        let from = import.template.name_any();
        for node in &mut import.nodes {
            if node.binding.is_err() {
                continue;
            }
            match bound.get(&node.node) {
                Some(first) => {
                    node.binding = Err(Unsupported::Duplicate(first.clone()));
                    node.needs_pin = None;
                }
                None => {
                    bound.insert(node.node.clone(), from.clone());
                }
            }
        }
    }
    // fence_apc_snmp's outlet becomes a PDU level of the node's binding: one per node (L1: two
    // templates' outlets may be one machine's two supplies, which only one level listing both proves
    // off), and only for a template that powers off (L3).
    let levels: Vec<(usize, usize, PduLevel)> = imports
        .iter()
        .enumerate()
        .flat_map(|(i, import)| {
            import.nodes.iter().enumerate().filter_map(move |(n, node)| node.level.clone().map(|level| (i, n, level)))
        })
        .collect();
    let mut leveled: BTreeMap<String, String> = BTreeMap::new();
    for (i, n, level) in levels {
        let node_name = imports[i].nodes[n].node.clone();
        let pdu_from = imports[i].template.name_any();
        if let Some(first) = leveled.get(&node_name) {
            imports[i].nodes[n].binding = Err(Unsupported::SecondPduTemplate(first.clone()));
            continue;
        }
        let target = imports.iter_mut().find_map(|import| {
            let from = import.template.name_any();
            let reboots = import.template.spec.template.spec.action == FenceAction::Reboot;
            let node = import.nodes.iter_mut().find(|node| node.node == node_name && node.binding.is_ok())?;
            Some((from, reboots, node))
        });
        let why = match target {
            None => Unsupported::LevelWithoutBmc,
            Some((from, true, _)) => Unsupported::LevelNeedsOff(from),
            Some((from, false, node)) => match node.binding.as_mut() {
                Err(_) => Unsupported::LevelWithoutBmc,
                Ok(binding) => {
                    binding.spec.pdu_levels.push(level);
                    // Level 1 is the BMC: the first PDU level is level 2.
                    let number = binding.spec.pdu_levels.len() + 1;
                    node.notes.push(format!(
                        "PDU level {number} from FAR template {pdu_from} (fence_apc_snmp): its credentials go in Secret {node_name}-pdu (--apply copies them from that template's), and it is used only once its mapping is stated (see that template's note); NodeHealthCheck's timeout must cover this template's attempts and the level's (docs/operations.md)"
                    ));
                    leveled.insert(node_name.clone(), pdu_from.clone());
                    Unsupported::LevelOf { level: number, from }
                }
            },
        };
        imports[i].nodes[n].binding = Err(why);
    }
    imports
}

/// The parameters FAR passes its agent for `node`: the node's Secret over the shared Secret (whose
/// values get `{{.NodeName}}` expanded) over the template's parameters.
fn far_params(
    spec: &FarSpec,
    node: &str,
    shared: Option<&BTreeMap<String, String>>,
    own: Option<&BTreeMap<String, String>>,
) -> Result<BTreeMap<String, String>, String> {
    let mut params = parameters(spec, node);
    // As FAR: a parameter both inline and in a Secret is an error, not a choice.
    let inline: Vec<String> = params.keys().cloned().collect();
    if let Some(both) = shared.into_iter().chain(own).flat_map(|s| s.keys()).find(|k| inline.contains(k)) {
        return Err(format!(
            "FAR's {both} is both in the template and in a Secret, which FAR refuses: fix the FAR template"
        ));
    }
    for (flag, value) in shared.into_iter().flatten() {
        params.insert(flag.clone(), value.replace("{{.NodeName}}", node));
    }
    for (flag, value) in own.into_iter().flatten() {
        params.insert(flag.clone(), value.clone());
    }
    Ok(params)
}

/// What goes into a PDU level's Secret (`<node>-pdu`) from a fence_apc_snmp FAR template, as FAR would
/// pass it to fence_apc_snmp for `node`: SNMPv3's `username`, `authKey` and `privKey` (its
/// `--username`, `--password`, `--snmp-priv-passwd`), or v1/v2c's `community` (`--community`, or
/// fence_apc_snmp's default `private`, which FAR then used). Values only, never printed.
pub fn far_pdu_credentials(
    spec: &FarSpec,
    node: &str,
    shared: Option<&BTreeMap<String, String>>,
    own: Option<&BTreeMap<String, String>>,
    version: SnmpVersion,
) -> Result<BTreeMap<String, String>, String> {
    let params = far_params(spec, node, shared, own)?;
    let value = |flags: &[&str]| first(&params, flags).filter(|v| !v.is_empty()).map(str::to_owned);
    if version != SnmpVersion::V3 {
        let community = value(&["--community", "-c"]).unwrap_or_else(|| "private".to_owned());
        return Ok(BTreeMap::from([("community".to_owned(), community)]));
    }
    let keys = [
        ("username", &["--username", "-l"][..]),
        ("authKey", &["--password", "-p"][..]),
        ("privKey", &["--snmp-priv-passwd", "-P"][..]),
    ];
    let mut data = BTreeMap::new();
    let mut missing = Vec::new();
    for (key, flags) in keys {
        match value(flags) {
            Some(found) => {
                data.insert(key.to_owned(), found);
            }
            None => missing.push(flags[0]),
        }
    }
    // fence-agents runs a script in place of (and over) the password it names: coroner cannot.
    let script = ["--password-script", "-S", "--snmp-priv-passwd-script", "-R"];
    if params.keys().any(|k| script.contains(&k.as_str())) {
        return Err("FAR runs a password script: coroner cannot run it; put the keys in the Secret yourself".into());
    }
    match missing.as_slice() {
        [] => Ok(data),
        _ => Err(format!("no {} for node {node} in FAR's Secrets or parameters", missing.join(" or "))),
    }
}

/// What goes into the Secret a binding names: the username and password (and an IPMI BMC key, `kg`)
/// as FAR would pass them to its agent for `node`: the node's Secret over the shared Secret (whose
/// values get `{{.NodeName}}` expanded) over the template's parameters. Values only, never printed.
pub fn far_credentials(
    spec: &FarSpec,
    node: &str,
    shared: Option<&BTreeMap<String, String>>,
    own: Option<&BTreeMap<String, String>>,
) -> Result<BTreeMap<String, String>, String> {
    let params = far_params(spec, node, shared, own)?;
    let mut data = BTreeMap::new();
    let mut missing = Vec::new();
    for (key, flags) in [("username", ["--username", "-l"]), ("password", ["--password", "-p"])] {
        match first(&params, &flags).filter(|v| !v.is_empty()) {
            Some(value) => {
                data.insert(key.to_owned(), value.to_owned());
            }
            None => missing.push(flags[0]),
        }
    }
    if let Some(kg) = first(&params, &["--hexadecimal-kg", "-y"]).filter(|v| !v.is_empty()) {
        data.insert("kg".to_owned(), kg.to_owned());
    }
    // fence-agents runs the script in place of (and over) --password: coroner cannot.
    if params.keys().any(|k| matches!(k.as_str(), "--password-script" | "-S")) {
        return Err(
            "FAR runs a --password-script: coroner cannot run it; put the password in the Secret yourself".into()
        );
    }
    match missing.as_slice() {
        [] => Ok(data),
        _ => Err(format!("no {} for node {node} in FAR's Secrets or parameters", missing.join(" or "))),
    }
}

fn comments(out: &mut String, notes: &[String]) {
    for note in notes {
        out.push_str(&format!("# {note}\n"));
    }
}

/// The import as YAML documents, their notes as comments; a node without a binding, or whose
/// certificate must be pinned first, gets its binding commented out with what to do.
pub fn render(import: &Import) -> Result<String, serde_saphyr::SerializeError> {
    let mut out = String::from("# Imported from a FenceAgentsRemediationTemplate by coroner import-far.\n");
    out.push_str("---\n");
    if import.levels_only {
        out.push_str(&format!(
            "# FAR template {} (fence_apc_snmp) imports as PDU levels of the nodes' BmcBindings, not as a template of its own:\n# in a NodeHealthCheck, coroner's template for the BMC's FAR template takes the place of both.\n",
            import.template.name_any()
        ));
    } else {
        comments(&mut out, &import.template_notes);
        out.push_str(&serde_saphyr::to_string(&import.template)?);
    }
    for node in &import.nodes {
        out.push_str(&render_node(node)?);
    }
    Ok(out)
}

/// One node's document: its notes, and its binding, or why it has none.
fn render_node(node: &NodeImport) -> Result<String, serde_saphyr::SerializeError> {
    let mut out = String::from("---\n");
    out.push_str(&format!("# node {}\n", node.node));
    comments(&mut out, &node.notes);
    match &node.binding {
        Err(why) => out.push_str(&format!("# no BmcBinding: {why}\n")),
        Ok(binding) => {
            let yaml = serde_saphyr::to_string(binding)?;
            match &node.needs_pin {
                None => out.push_str(&yaml),
                Some((endpoint, why)) => {
                    let host = endpoint.trim_start_matches("https://").split('/').next().unwrap_or_default();
                    let host = if host.contains(':') { host.to_owned() } else { format!("{host}:443") };
                    out.push_str(&format!(
                        "# {why}. Read its pin out of band, from a host whose path to the BMC you trust, put it in\n# tls.certificateSHA256, and uncomment (docs/install.md, Trusting a BMC's certificate):\n#   openssl s_client -connect {host} </dev/null | openssl x509 -noout -fingerprint -sha256\n"
                    ));
                    for line in yaml.lines() {
                        out.push_str(&format!("# {line}\n"));
                    }
                }
            }
        }
    }
    Ok(out)
}

/// The FAR kind the importer reads.
fn far_resource() -> ApiResource {
    let gvk =
        GroupVersionKind::gvk("fence-agents-remediation.medik8s.io", "v1alpha1", "FenceAgentsRemediationTemplate");
    ApiResource::from_gvk_with_plural(&gvk, "fenceagentsremediationtemplates")
}

fn parse_far(text: &str, source: &str) -> Result<FarTemplate, CliError> {
    // No snippet of the text in the message: the lines around an error may hold a password.
    let mut options = serde_saphyr::Options::default();
    options.with_snippet = false;
    serde_saphyr::from_str_with_options(text, options)
        .map_err(|e| CliError::ImportFar(format!("{source} is not a FenceAgentsRemediationTemplate: {e}")))
}

/// Every FAR template in the cluster (or in `namespace`), sorted by namespace and name.
async fn far_templates(client: &Client, namespace: Option<&str>) -> Result<Vec<FarTemplate>, CliError> {
    let resource = far_resource();
    let api: Api<DynamicObject> = match namespace {
        Some(namespace) => Api::namespaced_with(client.clone(), namespace, &resource),
        None => Api::all_with(client.clone(), &resource),
    };
    let list = api.list(&ListParams::default()).await.map_err(|e| {
        CliError::ImportFar(format!("cannot list FenceAgentsRemediationTemplates (is FAR's CRD installed?): {e}"))
    })?;
    let mut templates = Vec::new();
    for object in list.items {
        let source = format!("{}/{}", object.namespace().unwrap_or_default(), object.name_any());
        let value = serde_json::to_value(&object).map_err(|e| CliError::ImportFar(format!("{source}: {e}")))?;
        templates.push(
            serde_json::from_value::<FarTemplate>(value)
                .map_err(|e| CliError::ImportFar(format!("{source} is not a FenceAgentsRemediationTemplate: {e}")))?,
        );
    }
    templates.sort_by(|a, b| (&a.metadata.namespace, &a.metadata.name).cmp(&(&b.metadata.namespace, &b.metadata.name)));
    Ok(templates)
}

/// The nodes NodeHealthChecks using `far` select, and those it names itself.
async fn nodes_for(client: &Client, far: &FarTemplate) -> Result<Vec<String>, CliError> {
    let nhcs = crate::cluster::node_health_checks(client)
        .await
        .map_err(|e| CliError::ImportFar(format!("cannot list NodeHealthChecks: {e}")))?;
    let using: Vec<&serde_json::Value> = nhcs
        .iter()
        .filter(|nhc| {
            crate::verify::templates_of_kind(nhc, "FenceAgentsRemediationTemplate")
                .iter()
                .any(|t| t.name == far.metadata.name && Some(&t.namespace) == far.metadata.namespace.as_ref())
        })
        .collect();
    let nodes = Api::<k8s_openapi::api::core::v1::Node>::all(client.clone())
        .list_metadata(&ListParams::default())
        .await
        .map_err(|e| CliError::ImportFar(format!("cannot list Nodes: {e}")))?;
    let mut found = named_nodes(&far.spec.template.spec);
    for node in &nodes.items {
        if using.iter().any(|nhc| crate::verify::selects(nhc, &node.metadata)) {
            found.push(node.name_any());
        }
    }
    found.sort();
    found.dedup();
    Ok(found)
}

/// On a binding pinned by the importer: when and how its pin was read.
pub const PINNED_ANNOTATION: &str = "coroner.dev/pinned-at-first-contact";

/// Redfish bindings waiting for a pin get the certificate their BMC shows the controller (a
/// `CoronerVerification` with `fetchCertificates`: from the path the fence will use), marked as
/// pinned at first contact, to be checked out of band. A BMC that could not be reached stays
/// commented, with why.
async fn pin_at_first_contact(client: &Client, namespace: &str, imports: &mut [Import]) -> Result<(), CliError> {
    let mut endpoints: Vec<String> =
        imports.iter().flat_map(|i| &i.nodes).filter_map(|n| Some(n.needs_pin.as_ref()?.0.clone())).collect();
    endpoints.sort();
    endpoints.dedup();
    if endpoints.is_empty() {
        return Ok(());
    }
    let spec = crate::api::CoronerVerificationSpec { fetch_certificates: endpoints, ..Default::default() };
    let status = super::verify::request(client.clone(), namespace, spec, crate::api::Duration::from_secs(300)).await?;
    for node in imports.iter_mut().flat_map(|i| &mut i.nodes) {
        pin(node, &status.certificates);
    }
    Ok(())
}

/// Pins `node`'s binding to the certificate read for its endpoint, if one was.
pub fn pin(node: &mut NodeImport, fetched: &[crate::api::FetchedCertificate]) {
    let (Some((endpoint, _)), Ok(binding)) = (&node.needs_pin, &mut node.binding) else { return };
    let Some(found) = fetched.iter().find(|c| &c.endpoint == endpoint) else { return };
    let (Some(sha256), Some(at)) = (&found.sha256, &found.fetched_at) else {
        node.notes.push(format!(
            "the controller could not read the certificate of {endpoint}: {}",
            found.error.as_deref().unwrap_or("no answer")
        ));
        return;
    };
    let how = format!("pinned at first contact on {} through the controller: verify out of band", at.0);
    binding.spec.tls = Some(TlsPolicy { certificate_sha256: Some(sha256.clone()), ..TlsPolicy::default() });
    binding.metadata.annotations.get_or_insert_with(BTreeMap::new).insert(PINNED_ANNOTATION.into(), how.clone());
    node.notes.push(format!("{how} (openssl s_client -connect … | openssl x509 -noout -fingerprint -sha256)"));
    node.needs_pin = None;
}

/// A Secret's values as text (a value that is not UTF-8 is left out: no flag of FAR's is binary).
fn secret_strings(secret: &Secret) -> BTreeMap<String, String> {
    let data =
        secret.data.iter().flatten().filter_map(|(k, v)| Some((k.clone(), String::from_utf8(v.0.clone()).ok()?)));
    data.chain(secret.string_data.clone().into_iter().flatten()).collect()
}

const FIELD_MANAGER: &str = "coroner-import-far";

/// Applies `object` unless an object of that name exists that import-far did not write: that one is
/// left as it is (`Ok(false)`), never overwritten.
async fn apply<K>(api: &Api<K>, object: &K) -> Result<bool, CliError>
where
    K: kube::Resource + Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let name = object.name_any();
    let existing = api.get_opt(&name).await.map_err(|e| CliError::ImportFar(format!("cannot read {name}: {e}")))?;
    let ours = |o: &K| o.meta().managed_fields.iter().flatten().any(|f| f.manager.as_deref() == Some(FIELD_MANAGER));
    if existing.as_ref().is_some_and(|o| !ours(o)) {
        return Ok(false);
    }
    api.patch(&name, &PatchParams::apply(FIELD_MANAGER), &Patch::Apply(object))
        .await
        .map(|_| true)
        .map_err(|e| CliError::ImportFar(format!("cannot apply {name}: {e}")))
}

/// A credentials Secret import-far writes (labelled as its own).
fn credentials_secret(name: &str, namespace: &str, data: BTreeMap<String, String>) -> Secret {
    let mut secret = Secret {
        data: Some(data.into_iter().map(|(k, v)| (k, ByteString(v.into_bytes()))).collect()),
        type_: Some("Opaque".into()),
        ..Secret::default()
    };
    secret.metadata.name = Some(name.to_owned());
    secret.metadata.namespace = Some(namespace.to_owned());
    secret.metadata.labels = Some(BTreeMap::from([("app.kubernetes.io/managed-by".into(), FIELD_MANAGER.into())]));
    secret
}

/// `--apply`: each template, and each node's Secret and binding that need nothing more; then `verify`
/// on the nodes applied. Returns whether some node still needs attention.
async fn apply_imports(
    client: &Client,
    args: &ImportFarArgs,
    fars: &[FarTemplate],
    imports: &[Import],
) -> Result<(Vec<String>, bool), CliError> {
    let namespace = &args.api.namespace;
    let (templates, bindings, secrets): (Api<CoronerRemediationTemplate>, Api<BmcBinding>, Api<Secret>) = (
        Api::namespaced(client.clone(), namespace),
        Api::namespaced(client.clone(), namespace),
        Api::namespaced(client.clone(), namespace),
    );
    let mut applied = Vec::new();
    let mut attention = false;
    // The BMC templates first: a PDU level's Secret is written only for a node whose binding was.
    let mut ordered: Vec<(&FarTemplate, &Import)> = fars.iter().zip(imports).collect();
    ordered.sort_by_key(|(_, import)| import.levels_only);
    for (far, import) in ordered {
        let spec = &far.spec.template.spec;
        let Some(far_namespace) = far.metadata.namespace.clone().or_else(|| args.far_namespace.clone()) else {
            return Err(CliError::ImportFar(format!(
                "FAR template {} names no namespace: give --far-namespace, where its Secrets are",
                far.metadata.name
            )));
        };
        let far_secrets: Api<Secret> = Api::namespaced(client.clone(), &far_namespace);
        let read = async |name: &str| {
            far_secrets
                .get_opt(name)
                .await
                .map_err(|e| CliError::ImportFar(format!("cannot read FAR's Secret {far_namespace}/{name}: {e}")))
        };
        let shared = match &spec.shared_secret_name {
            Some(name) => read(name).await?.map(|s| secret_strings(&s)),
            None => None,
        };
        // A template none of whose nodes can be bound would only be a template no fence can use.
        if import.nodes.iter().any(|n| n.binding.is_ok() && n.needs_pin.is_none()) {
            let name = import.template.name_any();
            if apply(&templates, &import.template).await? {
                println!("applied CoronerRemediationTemplate {namespace}/{name}");
            } else {
                attention = true;
                println!(
                    "# CoronerRemediationTemplate {namespace}/{name} exists and was not written by import-far: left as it is"
                );
            }
        }
        let mut left = String::new();
        for node in &import.nodes {
            // fence_apc_snmp: the level goes with the node's binding (from its BMC's template); its
            // Secret is copied here from this template's credentials.
            if import.levels_only
                && matches!(node.binding, Err(Unsupported::LevelOf { .. }))
                && let Some(outlet) = node.level.as_ref().and_then(|l| l.outlets.first())
                && let Some(snmp) = &outlet.snmp
            {
                let own = match spec.node_secret_names.get(&node.node) {
                    Some(name) => read(name).await?.map(|s| secret_strings(&s)),
                    None => None,
                };
                let name = outlet.credentials_secret_ref.name.clone();
                let credentials = match applied.contains(&node.node) {
                    true => far_pdu_credentials(spec, &node.node, shared.as_ref(), own.as_ref(), snmp.version),
                    false => Err("the node's BmcBinding was not applied, so its level is not either".to_owned()),
                };
                match credentials {
                    Ok(data) => {
                        let secret = credentials_secret(&name, namespace, data);
                        if apply(&secrets, &secret).await? {
                            println!(
                                "applied Secret {namespace}/{name} of {}'s PDU level (from FAR's credentials)",
                                node.node
                            );
                        } else {
                            attention = true;
                            println!(
                                "# Secret {namespace}/{name} exists and was not written by import-far: left as it is"
                            );
                        }
                    }
                    Err(why) => {
                        attention = true;
                        left.push_str(&format!("---\n# node {}: PDU Secret {name} not applied: {why}\n", node.node));
                    }
                }
            }
            let binding = match (&node.binding, &node.needs_pin) {
                (Ok(binding), None) => binding,
                _ => {
                    attention = true;
                    left.push_str(&render_node(node).map_err(|e| CliError::ImportFar(e.to_string()))?);
                    continue;
                }
            };
            let own = match spec.node_secret_names.get(&node.node) {
                Some(name) => read(name).await?.map(|s| secret_strings(&s)),
                None => None,
            };
            let data = match far_credentials(spec, &node.node, shared.as_ref(), own.as_ref()) {
                Ok(data) => data,
                Err(why) => {
                    attention = true;
                    left.push_str(&format!("---\n# node {}: not applied: {why}\n", node.node));
                    continue;
                }
            };
            let name = binding.spec.credentials_secret_ref.name.clone();
            let secret = credentials_secret(&name, namespace, data);
            if !apply(&secrets, &secret).await? || !apply(&bindings, binding).await? {
                attention = true;
                left.push_str(&format!(
                    "---\n# node {}: not applied: Secret {name} or BmcBinding {} exists and was not written by import-far (left as it is)\n",
                    node.node,
                    binding.name_any()
                ));
                continue;
            }
            println!(
                "applied BmcBinding {namespace}/{} and its Secret {name} (from FAR's credentials)",
                binding.name_any()
            );
            // A pin read at first contact is trust on first use until checked out of band.
            attention |= binding.annotations().contains_key(PINNED_ANNOTATION);
            applied.push(node.node.clone());
        }
        if !left.is_empty() {
            println!("# Not applied, from FAR template {}:\n{left}", far.metadata.name);
        }
    }
    Ok((applied, attention))
}

pub async fn run(args: ImportFarArgs) -> Result<(), CliError> {
    // A file and no --apply: nothing is read from the cluster.
    let client = match (&args.file, args.apply) {
        (Some(_), false) => None,
        _ => Some(kube_client(args.api.kubeconfig.as_deref(), args.api.context.as_deref()).await?),
    };
    let fars = match (&args.file, &client) {
        (Some(path), _) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| CliError::ImportFar(format!("cannot read {}: {e}", path.display())))?;
            let mut far = parse_far(&text, &path.display().to_string())?;
            far.metadata.namespace = far.metadata.namespace.or_else(|| args.far_namespace.clone());
            vec![far]
        }
        (None, Some(client)) => far_templates(client, args.far_namespace.as_deref()).await?,
        (None, None) => unreachable!("a client is made whenever no file is given"),
    };
    if fars.is_empty() {
        return Err(CliError::ImportFar(format!(
            "no FenceAgentsRemediationTemplate in {}",
            args.far_namespace.as_deref().map_or("any namespace".to_owned(), |n| format!("namespace {n}"))
        )));
    }
    let mut imports = Vec::new();
    for far in &fars {
        let nodes = match (&client, args.nodes.is_empty(), &args.file) {
            (Some(client), true, None) => nodes_for(client, far).await?,
            _ => args.nodes.clone(),
        };
        imports.push(import(far, &nodes, &args.api.namespace));
    }
    let mut imports = merged(imports);
    if let Some(client) = &client {
        pin_at_first_contact(client, &args.api.namespace, &mut imports).await?;
    }
    if imports.iter().all(|i| i.nodes.is_empty()) {
        return Err(CliError::ImportFar(
            "no node to write a binding for: name them with --nodes (no NodeHealthCheck using the template selects any, and the template names none in nodeparameters or nodeSecretNames)".into(),
        ));
    }
    let attention = |import: &Import| import.nodes.iter().any(|n| n.binding.is_err() || n.needs_pin.is_some());
    let Some(client) = client.filter(|_| args.apply) else {
        use std::io::Write;
        for import in &imports {
            let yaml = render(import).map_err(|e| CliError::ImportFar(e.to_string()))?;
            std::io::stdout().write_all(yaml.as_bytes()).map_err(CliError::Output)?;
        }
        // A node left without a binding is not protected: say so in the exit code.
        return if imports.iter().any(attention) { Err(CliError::ImportIncomplete) } else { Ok(()) };
    };
    let (applied, incomplete) = apply_imports(&client, &args, &fars, &imports).await?;
    if !applied.is_empty() {
        let timeout = crate::api::Duration::from_secs(600);
        let spec = crate::api::CoronerVerificationSpec { nodes: applied, ..Default::default() };
        let status = super::verify::request(client, &args.api.namespace, spec, timeout).await?;
        print!("\n{}", super::verify::render_table(&status));
        if !super::verify::all_protected(&status) {
            return Err(CliError::NotProtected(status.nodes.iter().filter(|n| !n.would_fence).count()));
        }
    }
    if incomplete { Err(CliError::ImportIncomplete) } else { Ok(()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn far(yaml: &str) -> FarTemplate {
        serde_saphyr::from_str(yaml).unwrap()
    }

    const REDFISH: &str = r#"
apiVersion: fence-agents-remediation.medik8s.io/v1alpha1
kind: FenceAgentsRemediationTemplate
metadata: {name: far-redfish, namespace: openshift-workload-availability}
spec:
  template:
    spec:
      agent: fence_redfish
      sharedparameters:
        --username: admin
        --password: s3cret
        --ip: "bmc-{{.NodeName}}.example"
        --systems-uri: /redfish/v1/Systems/System.Embedded.1
      nodeparameters:
        --ipport: {worker-0: "8443", worker-1: "443"}
      retrycount: 0
      timeout: 2m
"#;

    #[test]
    fn fence_redfish_maps_to_redfish_bindings_with_fars_defaults_written_out_and_no_credentials() {
        let import = import(&far(REDFISH), &[], "coroner-system");
        let spec = &import.template.spec.template.spec;
        assert_eq!(spec.remediation_strategy, RemediationStrategy::ResourceDeletion, "FAR's default");
        assert_eq!(spec.action, FenceAction::Reboot, "FAR adds --action=reboot");
        assert_eq!(spec.retry.count, 1, "retrycount 0 becomes 1");
        assert_eq!(spec.power_off_timeout, Duration::from_secs(120));
        assert!(import.template_notes.iter().any(|n| n.contains("retrycount 0")));
        let nodes: Vec<&str> = import.nodes.iter().map(|n| n.node.as_str()).collect();
        assert_eq!(nodes, ["worker-0", "worker-1"]);
        let binding = import.nodes[0].binding.as_ref().unwrap();
        let redfish = binding.spec.redfish.as_ref().unwrap();
        assert_eq!(redfish.endpoint, "https://bmc-worker-0.example:8443/redfish/v1");
        assert_eq!(redfish.system_id.as_deref(), Some("System.Embedded.1"));
        let other = import.nodes[1].binding.as_ref().unwrap().spec.redfish.clone().unwrap();
        assert_eq!(other.endpoint, "https://bmc-worker-1.example/redfish/v1");
        let yaml = render(&import).unwrap();
        assert!(!yaml.contains("s3cret") && !yaml.contains("--password: "), "{yaml}");
        assert!(yaml.contains("carries credentials inline"), "{yaml}");
        assert!(!yaml.contains("insecureSkipVerify: true"), "{yaml}");
        assert!(
            yaml.contains("trusted the system's CAs") && yaml.contains("-connect bmc-worker-1.example:443"),
            "{yaml}"
        );
    }

    #[test]
    fn ssl_insecure_becomes_a_pin_to_read_out_of_band_and_a_commented_binding() {
        let yaml = REDFISH.replace("      nodeparameters:", "        --ssl-insecure: \"\"\n      nodeparameters:");
        let import = import(&far(&yaml), &["worker-0".into()], "coroner-system");
        let (endpoint, why) = import.nodes[0].needs_pin.clone().unwrap();
        assert_eq!(endpoint, "https://bmc-worker-0.example:8443/redfish/v1");
        assert!(why.contains("--ssl-insecure"));
        let text = render(&import).unwrap();
        assert!(text.contains("openssl s_client -connect bmc-worker-0.example:8443"), "{text}");
        assert!(text.contains("# kind: BmcBinding"), "the binding is commented out: {text}");
        assert!(!text.contains("insecureSkipVerify: true"));
    }

    #[test]
    fn fence_ipmilan_with_lanplus_maps_to_an_ipmi_binding_and_without_it_is_refused() {
        let lanplus = r#"
metadata: {name: far-ipmi}
spec:
  template:
    spec:
      agent: fence_ipmilan
      remediationStrategy: OutOfServiceTaint
      sharedparameters: {--lanplus: "", --ip: "10.0.0.{{.NodeName}}", --action: "off", --privlvl: ADMINISTRATOR}
"#;
        let import = import(&far(lanplus), &["13".into()], "coroner-system");
        let ipmi = import.nodes[0].binding.as_ref().unwrap().spec.ipmi.clone().unwrap();
        assert_eq!((ipmi.address.as_str(), ipmi.privilege), ("10.0.0.13", Some(IpmiPrivilege::Administrator)));
        let default = import_one(&lanplus.replace(", --privlvl: ADMINISTRATOR", "")).unwrap();
        assert_eq!(default.spec.ipmi.unwrap().privilege, Some(IpmiPrivilege::Administrator), "fence_ipmilan's default");
        let user = lanplus.replace("ADMINISTRATOR", "user");
        assert_eq!(import_one(&user).err(), Some(Unsupported::Privilege("user".into())));
        let zero = lanplus.replace("--lanplus: \"\"", "--lanplus: \"0\"");
        assert_eq!(import_one(&zero).err(), Some(Unsupported::Ipmi15), "lanplus 0 is IPMI 1.5");
        assert!(import.nodes[0].binding.as_ref().unwrap().spec.tls.is_none(), "IPMI has no TLS");
        let spec = &import.template.spec.template.spec;
        assert_eq!(
            (spec.action, spec.remediation_strategy),
            (FenceAction::Off, RemediationStrategy::OutOfServiceTaint)
        );
        let v15 = lanplus.replace("--lanplus: \"\", ", "");
        assert_eq!(import_one(&v15).err(), Some(Unsupported::Ipmi15));
        let suite = lanplus.replace("--lanplus: \"\"", "--lanplus: \"\", --cipher: \"17\"");
        assert_eq!(import_one(&suite).err(), Some(Unsupported::CipherSuite("17".into())));
        let other = lanplus.replace("fence_ipmilan", "fence_ilo_ssh");
        assert_eq!(import_one(&other).err(), Some(Unsupported::Agent("fence_ilo_ssh".into())));
    }

    #[test]
    fn credentials_come_from_the_node_secret_over_the_shared_secret_over_the_parameters() {
        let redfish = far(REDFISH);
        let spec = &redfish.spec.template.spec;
        let inline = far_credentials(spec, "worker-0", None, None).unwrap();
        assert_eq!((inline["username"].as_str(), inline["password"].as_str()), ("admin", "s3cret"));
        let shared = BTreeMap::from([("--password".to_owned(), "pw-{{.NodeName}}".to_owned())]);
        let both = far_credentials(spec, "worker-0", Some(&shared), None).unwrap_err();
        assert!(both.contains("--password is both in the template and in a Secret"), "as FAR refuses it: {both}");
        let without = far(&REDFISH.replace("        --password: s3cret\n", ""));
        let spec = &without.spec.template.spec;
        let from_shared = far_credentials(spec, "worker-0", Some(&shared), None).unwrap();
        assert_eq!(from_shared["password"], "pw-worker-0", "shared Secret values are templated");
        let own = BTreeMap::from([("--password".to_owned(), "{{.NodeName}}".to_owned())]);
        let from_own = far_credentials(spec, "worker-0", Some(&shared), Some(&own)).unwrap();
        assert_eq!(from_own["password"], "{{.NodeName}}", "a node Secret is not templated, as in FAR");
        let bare = far(&REDFISH.replace("        --username: admin\n        --password: s3cret\n", ""));
        let missing = far_credentials(&bare.spec.template.spec, "worker-0", None, None).unwrap_err();
        assert_eq!(missing, "no --username or --password for node worker-0 in FAR's Secrets or parameters");
        assert!(!missing.contains("s3cret"));
    }

    #[test]
    fn a_node_two_far_templates_name_gets_one_binding_from_the_first() {
        let first = import(&far(REDFISH), &[], "coroner-system");
        let second = import(&far(&REDFISH.replace("far-redfish", "far-other")), &["worker-1".into()], "coroner-system");
        let merged = merged(vec![first, second]);
        assert!(merged[0].nodes.iter().all(|n| n.binding.is_ok()));
        assert_eq!(merged[1].nodes[0].binding.as_ref().err(), Some(&Unsupported::Duplicate("far-redfish".into())));
        assert!(merged[1].nodes[0].needs_pin.is_none(), "nothing to pin for a binding not written");
    }

    #[test]
    fn the_nodes_a_nodehealthcheck_using_the_far_template_selects_are_found() {
        let nhc = serde_json::json!({"spec": {
            "selector": {"matchLabels": {"role": "worker"}},
            "remediationTemplate": {"kind": "FenceAgentsRemediationTemplate", "namespace": "far", "name": "far-redfish"}}});
        let templates = crate::verify::templates_of_kind(&nhc, "FenceAgentsRemediationTemplate");
        assert_eq!((templates[0].namespace.as_str(), templates[0].name.as_str()), ("far", "far-redfish"));
        let labelled = |role: &str| kube::api::ObjectMeta {
            labels: Some(BTreeMap::from([("role".to_owned(), role.to_owned())])),
            ..Default::default()
        };
        assert!(crate::verify::selects(&nhc, &labelled("worker")));
        assert!(!crate::verify::selects(&nhc, &labelled("master")));
    }

    #[test]
    fn a_certificate_read_through_the_controller_pins_the_binding_and_says_to_verify_it_out_of_band() {
        let yaml = REDFISH.replace("      nodeparameters:", "        --ssl-insecure: \"\"\n      nodeparameters:");
        let mut import = import(&far(&yaml), &["worker-0".into(), "worker-1".into()], "coroner-system");
        let at = jiff::Timestamp::from_second(1_800_000_000).unwrap();
        let fetched = [
            crate::api::FetchedCertificate {
                endpoint: "https://bmc-worker-0.example:8443/redfish/v1".into(),
                sha256: Some("AB:CD".into()),
                error: None,
                fetched_at: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(at)),
            },
            crate::api::FetchedCertificate {
                endpoint: "https://bmc-worker-1.example/redfish/v1".into(),
                sha256: None,
                error: Some("connection refused".into()),
                fetched_at: None,
            },
        ];
        for node in &mut import.nodes {
            pin(node, &fetched);
        }
        let pinned = &import.nodes[0];
        assert!(pinned.needs_pin.is_none());
        let binding = pinned.binding.as_ref().unwrap();
        assert_eq!(binding.spec.tls.as_ref().unwrap().certificate_sha256.as_deref(), Some("AB:CD"));
        let how = &binding.annotations()[PINNED_ANNOTATION];
        assert!(how.contains("pinned at first contact on 2027-01-15") && how.ends_with("verify out of band"), "{how}");
        let dark = &import.nodes[1];
        assert!(dark.needs_pin.is_some(), "stays commented");
        assert!(dark.notes.iter().any(|n| n.contains("could not read the certificate") && n.contains("refused")));
        let text = render(&import).unwrap();
        assert!(text.contains("certificateSHA256: AB:CD") && !text.contains("# certificateSHA256: AB:CD"), "{text}");
    }

    fn import_one(yaml: &str) -> Result<BmcBinding, Unsupported> {
        import(&far(yaml), &["13".into()], "coroner-system").nodes.remove(0).binding
    }

    const APC: &str = r#"
apiVersion: fence-agents-remediation.medik8s.io/v1alpha1
kind: FenceAgentsRemediationTemplate
metadata: {name: far-apc, namespace: openshift-workload-availability}
spec:
  template:
    spec:
      agent: fence_apc_snmp
      sharedSecretName: apc-credentials
      sharedparameters:
        --ip: pdu-a.example
        --snmp-version: "3"
        --snmp-sec-level: authPriv
        --snmp-auth-prot: SHA
        --snmp-priv-prot: AES
      nodeparameters:
        --plug: {worker-0: "3", worker-1: "4"}
"#;

    /// FAR's fence_redfish template with `--action off` (a Reboot takes no level: L3).
    fn redfish_off() -> String {
        REDFISH.replace("--username: admin", "--username: admin\n        --action: \"off\"")
    }

    fn apc_and_redfish() -> Vec<Import> {
        merged(vec![import(&far(&redfish_off()), &[], "coroner-system"), import(&far(APC), &[], "coroner-system")])
    }

    #[test]
    fn a_pdu_level_s_secret_holds_what_far_passes_fence_apc_snmp() {
        let apc = far(APC);
        let spec = &apc.spec.template.spec;
        let shared = BTreeMap::from([
            ("--username".to_owned(), "fencer".to_owned()),
            ("--password".to_owned(), "auth-{{.NodeName}}".to_owned()),
            ("--snmp-priv-passwd".to_owned(), "priv-s3cret".to_owned()),
        ]);
        let v3 = far_pdu_credentials(spec, "worker-0", Some(&shared), None, SnmpVersion::V3).unwrap();
        let keys = [("authKey", "auth-worker-0"), ("privKey", "priv-s3cret"), ("username", "fencer")];
        assert_eq!(v3, keys.into_iter().map(|(k, v)| (k.to_owned(), v.to_owned())).collect());
        let no_priv = BTreeMap::from([("--username".to_owned(), "fencer".to_owned())]);
        let missing = far_pdu_credentials(spec, "worker-0", Some(&no_priv), None, SnmpVersion::V3).unwrap_err();
        assert!(missing.contains("--password or --snmp-priv-passwd"), "{missing}");
        // v1 as FAR runs it: its --community, or fence_apc_snmp's default.
        let default = far_pdu_credentials(spec, "worker-0", None, None, SnmpVersion::V1).unwrap();
        assert_eq!(default["community"], "private");
        let own = BTreeMap::from([("--community".to_owned(), "c0mm".to_owned())]);
        let given = far_pdu_credentials(spec, "worker-0", None, Some(&own), SnmpVersion::V2c).unwrap();
        assert_eq!(given, BTreeMap::from([("community".to_owned(), "c0mm".to_owned())]));
        // fence-agents runs a password script over the password it names: nothing to copy.
        let scripted = BTreeMap::from([("-R".to_owned(), "/usr/local/bin/priv".to_owned())]);
        let all = shared.into_iter().chain(scripted).collect();
        let refused = far_pdu_credentials(spec, "worker-0", Some(&all), None, SnmpVersion::V3).unwrap_err();
        assert!(refused.contains("password script"), "{refused}");
    }

    #[test]
    fn fence_apc_snmp_becomes_the_next_pdu_level_of_the_nodes_bmc_binding_with_no_mapping_stated() {
        let imports = apc_and_redfish();
        let worker0 = imports[0].nodes.iter().find(|n| n.node == "worker-0").unwrap();
        let binding = worker0.binding.as_ref().unwrap();
        let [level] = binding.spec.pdu_levels.as_slice() else { panic!("one level: {:?}", binding.spec.pdu_levels) };
        assert_eq!(level.mapping_proof, None, "FAR's trust in the plug is not stated for the operator");
        let outlet = &level.outlets[0];
        let snmp = outlet.snmp.as_ref().unwrap();
        assert_eq!((snmp.address.as_str(), snmp.port, snmp.outlet), ("pdu-a.example", None, 3));
        assert_eq!(snmp.version, SnmpVersion::V3);
        assert_eq!(
            (snmp.auth_protocol, snmp.priv_protocol),
            (Some(SnmpAuthProtocol::SHA1), Some(SnmpPrivProtocol::AES128))
        );
        assert_eq!(outlet.credentials_secret_ref.name, "worker-0-pdu");
        assert!(
            worker0.notes.iter().any(|n| n.starts_with("PDU level 2 from FAR template far-apc")),
            "{:?}",
            worker0.notes
        );
        // The apc template's own entry says where the outlet went, and how to state it.
        let apc = imports[1].nodes.iter().find(|n| n.node == "worker-0").unwrap();
        assert_eq!(apc.binding.as_ref().err(), Some(&Unsupported::LevelOf { level: 2, from: "far-redfish".into() }));
        assert!(apc.notes.iter().any(|n| n.contains("mappingProof: OperatorStatement")), "{:?}", apc.notes);
        assert!(apc.notes.iter().any(|n| n.contains("apc-credentials") && n.contains("authKey")), "{:?}", apc.notes);
        let text = render(&imports[1]).unwrap();
        assert!(!text.contains("kind: CoronerRemediationTemplate"), "no template of its own:\n{text}");
        // Rendered with its level, the binding parses back.
        let yaml = serde_saphyr::to_string(binding).unwrap();
        let parsed: BmcBinding = serde_saphyr::from_str(&yaml).unwrap();
        assert_eq!(parsed.spec.pdu_levels, binding.spec.pdu_levels);
    }

    #[test]
    fn fence_apc_snmp_gives_a_level_only_to_a_node_whose_bmc_template_powers_off_and_only_one() {
        let alone = merged(vec![import(&far(APC), &[], "coroner-system")]);
        for node in &alone[0].nodes {
            assert_eq!(node.binding.as_ref().err(), Some(&Unsupported::LevelWithoutBmc), "{}", node.node);
        }
        // A node the PDU template names and the BMC's does not: no level; order does not matter.
        let more = APC.replace(r#"{worker-0: "3", worker-1: "4"}"#, r#"{worker-0: "3", worker-1: "4", worker-2: "5"}"#);
        let imports = merged(vec![
            import(&far(&more), &[], "coroner-system"),
            import(&far(&redfish_off()), &[], "coroner-system"),
        ]);
        let pdu = |node: &str| imports[0].nodes.iter().find(|n| n.node == node).unwrap().binding.clone().err();
        assert_eq!(pdu("worker-2"), Some(Unsupported::LevelWithoutBmc));
        assert_eq!(pdu("worker-0"), Some(Unsupported::LevelOf { level: 2, from: "far-redfish".into() }));
        // FAR's default action reboots: coroner refuses a Reboot with levels, so none is added.
        let imports =
            merged(vec![import(&far(REDFISH), &[], "coroner-system"), import(&far(APC), &[], "coroner-system")]);
        assert!(imports[0].nodes.iter().all(|n| n.binding.as_ref().unwrap().spec.pdu_levels.is_empty()));
        assert_eq!(imports[1].nodes[0].binding.clone().err(), Some(Unsupported::LevelNeedsOff("far-redfish".into())));
        // A second PDU template for the node (its other supply?) is not a level of its own.
        let other = APC.replace("far-apc", "far-apc-b").replace("pdu-a.example", "pdu-b.example");
        let imports = merged(vec![
            import(&far(&redfish_off()), &[], "coroner-system"),
            import(&far(APC), &[], "coroner-system"),
            import(&far(&other), &[], "coroner-system"),
        ]);
        assert_eq!(imports[0].nodes[0].binding.as_ref().unwrap().spec.pdu_levels.len(), 1);
        assert_eq!(imports[2].nodes[0].binding.clone().err(), Some(Unsupported::SecondPduTemplate("far-apc".into())));
    }

    #[test]
    fn fence_apc_snmp_as_far_runs_it_by_default_is_snmpv1_with_a_warning_and_md5_des_or_no_privacy_are_refused() {
        let v1 = APC.replace("        --snmp-version: \"3\"\n", "").replace("        --snmp-sec-level: authPriv\n", "");
        let imports =
            merged(vec![import(&far(&redfish_off()), &[], "coroner-system"), import(&far(&v1), &[], "coroner-system")]);
        let binding = imports[0].nodes[0].binding.as_ref().unwrap();
        let snmp = binding.spec.pdu_levels[0].outlets[0].snmp.clone().unwrap();
        assert_eq!(snmp.version, SnmpVersion::V1, "fence_apc_snmp's default, written out");
        assert!(imports[1].nodes[0].notes.iter().any(|n| n.contains("clear text")));
        let level = |yaml: &str| import(&far(yaml), &["worker-0".into()], "coroner-system").nodes.remove(0).binding;
        let md5 = APC.replace("--snmp-auth-prot: SHA", "--snmp-auth-prot: MD5");
        assert!(matches!(level(&md5), Err(Unsupported::SnmpProtocol { what: "authentication", .. })));
        let des = APC.replace("--snmp-priv-prot: AES", "--snmp-priv-prot: DES");
        assert!(matches!(level(&des), Err(Unsupported::SnmpProtocol { what: "privacy", .. })));
        let no_priv = APC.replace("--snmp-sec-level: authPriv", "--snmp-sec-level: authNoPriv");
        assert_eq!(level(&no_priv).err(), Some(Unsupported::SnmpSecurityLevel("authNoPriv".into())));
        let no_plug = level(&APC.replace("--plug", "--other"));
        assert_eq!(no_plug.err(), Some(Unsupported::NoPlug));
        let named = level(&APC.replace(r#"worker-0: "3""#, r#"worker-0: "+3""#));
        assert!(matches!(named, Err(Unsupported::NotANumber { flag: "--plug", .. })), "an outlet name, not a number");
        // Unset protocols are net-snmp's MD5 and DES: refused, and said so.
        let unset = APC.replace("        --snmp-auth-prot: SHA\n", "");
        assert!(matches!(level(&unset), Err(Unsupported::SnmpProtocol { value, .. }) if value.starts_with("unset")));
        // fence_snmp implies authPriv only with both passwords given.
        let implied = APC.replace("--snmp-sec-level: authPriv", "--snmp-priv-passwd: p\n        --password: a");
        assert_eq!(level(&implied).err(), Some(Unsupported::LevelWithoutBmc), "accepted as authPriv");
        let half = APC.replace("--snmp-sec-level: authPriv", "--snmp-priv-passwd: p");
        assert!(matches!(level(&half), Err(Unsupported::SnmpSecurityLevel(_))));
    }

    #[test]
    fn the_rendered_objects_parse_back_as_coroners_kinds() {
        let text = render(&import(&far(REDFISH), &[], "coroner-system")).unwrap();
        let documents: Vec<&str> = text.split("---\n").skip(1).collect();
        let template: CoronerRemediationTemplate = serde_saphyr::from_str(documents[0]).unwrap();
        assert_eq!(template.metadata.name.as_deref(), Some("far-redfish"));
        // A Redfish binding waits, commented, for its pin; uncommented it is a BmcBinding.
        let uncommented: String = documents[1]
            .lines()
            .filter_map(|l| l.strip_prefix("# "))
            .skip_while(|l| !l.starts_with("apiVersion"))
            .map(|l| format!("{l}\n"))
            .collect();
        let binding: BmcBinding = serde_saphyr::from_str(&uncommented).unwrap();
        assert_eq!(binding.spec.node_name, "worker-0");
    }
}
