//! `coroner import-far -f FILE` (also `kubectl coroner import-far`): a FenceAgentsRemediationTemplate
//! as coroner's CoronerRemediationTemplate and one BmcBinding per node, as YAML on stdout, each
//! choice that differs from FAR commented. Credentials never go to stdout: a binding names the Secret
//! that must hold them. The FAR template is read as FAR documents its API
//! (`fence-agents-remediation.medik8s.io/v1alpha1`, the fields read here); reading the templates
//! from the cluster, and `--apply`, are not built yet.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::CliError;
use crate::api::{
    BmcBinding, BmcBindingSpec, CoronerRemediationSpec, CoronerRemediationTemplate, CoronerRemediationTemplateSpec,
    Duration, FenceAction, IpmiPrivilege, IpmiTarget, RedfishTarget, RemediationStrategy, RemediationTemplateBody,
    Retry, SecretRef, TlsPolicy,
};

#[derive(Debug, clap::Args)]
pub struct ImportFarArgs {
    /// A file holding one FenceAgentsRemediationTemplate (YAML or JSON).
    #[arg(short = 'f', long = "filename", env = "CORONER_IMPORT_FAR_FILE")]
    pub file: std::path::PathBuf,

    /// The nodes to write bindings for (comma-separated); FAR's `{{.NodeName}}` is expanded for each.
    /// Without it: the nodes the template's nodeparameters and nodeSecretNames name.
    #[arg(long, env = "CORONER_IMPORT_FAR_NODES", value_delimiter = ',')]
    pub nodes: Vec<String>,

    /// The namespace the imported objects go to.
    #[arg(long, env = "CORONER_NAMESPACE", default_value = "coroner-system")]
    pub namespace: String,
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
        "agent {0} is not supported: coroner fences through Redfish (fence_redfish) and IPMI v2.0 (fence_ipmilan --lanplus)"
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
}

/// One node's binding, or why it gets none; `notes` are the comments written above it.
#[derive(Clone, Debug)]
pub struct NodeImport {
    pub node: String,
    pub binding: Result<BmcBinding, Unsupported>,
    /// A Redfish binding's certificate must be pinned, read out of band first: the endpoint, and why
    /// (FAR's `--ssl-insecure`, or FAR's trust in the system's CAs, which coroner never uses).
    pub needs_pin: Option<(String, &'static str)>,
    pub notes: Vec<String>,
}

/// What the import writes.
#[derive(Clone, Debug)]
pub struct Import {
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
            },
        );
        binding.metadata.namespace = Some(namespace.to_owned());
        binding
    });
    NodeImport { node: node.to_owned(), binding, needs_pin, notes }
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
    let named: Vec<String> = if nodes.is_empty() {
        let mut named: Vec<String> = spec.nodeparameters.values().flat_map(|by| by.keys().cloned()).collect();
        named.extend(spec.node_secret_names.keys().cloned());
        named.sort();
        named.dedup();
        named
    } else {
        nodes.to_vec()
    };
    let (template, template_notes) = template(far, namespace);
    Import { template, template_notes, nodes: named.iter().map(|n| node_import(spec, n, namespace)).collect() }
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
    comments(&mut out, &import.template_notes);
    out.push_str(&serde_saphyr::to_string(&import.template)?);
    for node in &import.nodes {
        out.push_str("---\n");
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
    }
    Ok(out)
}

pub fn run(args: ImportFarArgs) -> Result<(), CliError> {
    let text = std::fs::read_to_string(&args.file)
        .map_err(|e| CliError::ImportFar(format!("cannot read {}: {e}", args.file.display())))?;
    // No snippet of the file in the message: the lines around an error may hold a password.
    let mut options = serde_saphyr::Options::default();
    options.with_snippet = false;
    let far: FarTemplate = serde_saphyr::from_str_with_options(&text, options).map_err(|e| {
        CliError::ImportFar(format!("{} is not a FenceAgentsRemediationTemplate: {e}", args.file.display()))
    })?;
    let import = import(&far, &args.nodes, &args.namespace);
    if import.nodes.is_empty() {
        return Err(CliError::ImportFar(
            "no node to write a binding for: name them with --nodes (the template names none in nodeparameters or nodeSecretNames)".into(),
        ));
    }
    let yaml = render(&import).map_err(|e| CliError::ImportFar(e.to_string()))?;
    use std::io::Write;
    std::io::stdout().write_all(yaml.as_bytes()).map_err(CliError::Output)?;
    // A node left without a binding is not protected: say so in the exit code.
    if import.nodes.iter().any(|n| n.binding.is_err() || n.needs_pin.is_some()) {
        return Err(CliError::ImportIncomplete);
    }
    Ok(())
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
        let other = lanplus.replace("fence_ipmilan", "fence_apc_snmp");
        assert_eq!(import_one(&other).err(), Some(Unsupported::Agent("fence_apc_snmp".into())));
    }

    fn import_one(yaml: &str) -> Result<BmcBinding, Unsupported> {
        import(&far(yaml), &["13".into()], "coroner-system").nodes.remove(0).binding
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
