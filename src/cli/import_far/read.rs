//! Reading FAR: templates from a file or the cluster, and the nodes each one remediates.

use super::*;

/// The FAR kind the importer reads.
pub(super) fn far_resource() -> ApiResource {
    let gvk =
        GroupVersionKind::gvk("fence-agents-remediation.medik8s.io", "v1alpha1", "FenceAgentsRemediationTemplate");
    ApiResource::from_gvk_with_plural(&gvk, "fenceagentsremediationtemplates")
}

pub(super) fn parse_far(text: &str, source: &str) -> Result<FarTemplate, CliError> {
    // No snippet of the text in the message: the lines around an error may hold a password.
    let mut options = serde_saphyr::Options::default();
    options.with_snippet = false;
    serde_saphyr::from_str_with_options(text, options)
        .map_err(|e| CliError::ImportFar(format!("{source} is not a FenceAgentsRemediationTemplate: {e}")))
}

/// Every FAR template in the cluster (or in `namespace`), sorted by namespace and name.
pub(super) async fn far_templates(client: &Client, namespace: Option<&str>) -> Result<Vec<FarTemplate>, CliError> {
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
pub(super) async fn nodes_for(client: &Client, far: &FarTemplate) -> Result<Vec<String>, CliError> {
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
