//! Applying an import: each node's credentials copied from FAR's Secrets and parameters into the
//! Secret its binding names, certificates pinned at first contact, the objects applied.

use super::*;

/// The parameters FAR passes its agent for `node`: the node's Secret over the shared Secret (whose
/// values get `{{.NodeName}}` expanded) over the template's parameters.
pub(super) fn far_params(
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

/// On a binding pinned by the importer: when and how its pin was read.
pub const PINNED_ANNOTATION: &str = "coroner.dev/pinned-at-first-contact";

/// Redfish bindings waiting for a pin get the certificate their BMC shows the controller (a
/// `CoronerVerification` with `fetchCertificates`: from the path the fence will use), marked as
/// pinned at first contact, to be checked out of band. A BMC that could not be reached stays
/// commented, with why.
pub(super) async fn pin_at_first_contact(
    client: &Client,
    namespace: &str,
    imports: &mut [Import],
) -> Result<(), CliError> {
    let mut endpoints: Vec<String> =
        imports.iter().flat_map(|i| &i.nodes).filter_map(|n| Some(n.needs_pin.as_ref()?.0.clone())).collect();
    endpoints.sort();
    endpoints.dedup();
    if endpoints.is_empty() {
        return Ok(());
    }
    let spec = crate::api::CoronerVerificationSpec { fetch_certificates: endpoints, ..Default::default() };
    let status =
        super::super::verify::request(client.clone(), namespace, spec, crate::api::Duration::from_secs(300)).await?;
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
pub(super) fn secret_strings(secret: &Secret) -> BTreeMap<String, String> {
    let data =
        secret.data.iter().flatten().filter_map(|(k, v)| Some((k.clone(), String::from_utf8(v.0.clone()).ok()?)));
    data.chain(secret.string_data.clone().into_iter().flatten()).collect()
}

pub(super) const FIELD_MANAGER: &str = "coroner-import-far";

/// Applies `object` unless an object of that name exists that import-far did not write: that one is
/// left as it is (`Ok(false)`), never overwritten.
pub(super) async fn apply<K>(api: &Api<K>, object: &K) -> Result<bool, CliError>
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
pub(super) fn credentials_secret(name: &str, namespace: &str, data: BTreeMap<String, String>) -> Secret {
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
pub(super) async fn apply_imports(
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
