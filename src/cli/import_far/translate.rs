//! Translating a FAR template: coroner's template, and each node's binding (Redfish, IPMI or an APC
//! outlet level) with every choice that differs from FAR commented.

use super::*;

/// A FAR duration (`5s`, `1m30s`) as coroner's.
pub(super) fn duration(text: &str) -> Option<Duration> {
    text.parse().ok()
}

/// The template: FAR's defaults written out, never coroner's inherited.
pub(super) fn template(far: &FarTemplate, namespace: &str) -> (CoronerRemediationTemplate, Vec<String>) {
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
pub(super) fn parameters(spec: &FarSpec, node: &str) -> BTreeMap<String, String> {
    let mut params: BTreeMap<String, String> =
        spec.sharedparameters.iter().map(|(k, v)| (k.clone(), v.replace("{{.NodeName}}", node))).collect();
    for (flag, by_node) in &spec.nodeparameters {
        if let Some(value) = by_node.get(node) {
            params.insert(flag.clone(), value.clone());
        }
    }
    params
}

pub(super) fn first<'a>(params: &'a BTreeMap<String, String>, flags: &[&str]) -> Option<&'a str> {
    flags.iter().find_map(|flag| params.get(*flag)).map(String::as_str)
}

pub(super) fn port(params: &BTreeMap<String, String>) -> Result<Option<u16>, Unsupported> {
    first(params, &["--ipport", "-u"])
        .map(|v| v.parse().map_err(|_| Unsupported::NotANumber { flag: "--ipport", value: v.to_owned() }))
        .transpose()
}

/// One node's binding, as FAR's agent and parameters describe its BMC.
pub(super) fn node_import(spec: &FarSpec, node: &str, namespace: &str) -> NodeImport {
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
pub(super) fn apc_import(params: &BTreeMap<String, String>, far_secret: Option<&String>, node: &str) -> NodeImport {
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
pub(super) fn apc_level(params: &BTreeMap<String, String>, secret: &str) -> Result<PduLevel, Unsupported> {
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
pub(super) fn redfish(params: &BTreeMap<String, String>) -> Result<(RedfishTarget, bool), Unsupported> {
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
pub(super) fn ipmi(params: &BTreeMap<String, String>) -> Result<IpmiTarget, Unsupported> {
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

pub(super) fn comments(out: &mut String, notes: &[String]) {
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
pub(super) fn render_node(node: &NodeImport) -> Result<String, serde_saphyr::SerializeError> {
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
