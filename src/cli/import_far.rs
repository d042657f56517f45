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

mod apply;
mod read;
mod translate;

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

pub use apply::*;
use read::*;
pub use translate::*;

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
