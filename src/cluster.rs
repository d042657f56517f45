//! Thin Kubernetes reads and writes the controller needs beside the fence loop's traits: the node
//! Lease, status writes, and pods on a node.

use jiff::Timestamp;
use k8s_openapi::api::{coordination::v1::Lease, core::v1::Pod};
use kube::{
    Api, Client, ResourceExt,
    api::{ListParams, PostParams},
};

use crate::api::{CoronerRemediation, CoronerRemediationStatus};

/// Where kubelets renew their Leases.
pub const NODE_LEASE_NAMESPACE: &str = "kube-node-lease";

/// `None`: no Lease; `Some(renewTime)` otherwise.
pub async fn node_lease(client: &Client, node: &str) -> Result<Option<Option<Timestamp>>, kube::Error> {
    let leases: Api<Lease> = Api::namespaced(client.clone(), NODE_LEASE_NAMESPACE);
    Ok(leases.get_opt(node).await?.map(|lease| lease.spec.and_then(|s| s.renew_time).map(|t| t.0)))
}

/// Writes `status` through the status subresource under the object's resourceVersion: a concurrent
/// change (NHC updates whole objects) makes it fail rather than overwrite.
pub async fn persist_status(
    api: &Api<CoronerRemediation>,
    remediation: &CoronerRemediation,
    status: CoronerRemediationStatus,
) -> Result<CoronerRemediation, kube::Error> {
    let mut updated = remediation.clone();
    updated.status = Some(status);
    api.replace_status(&remediation.name_any(), &PostParams::default(), &updated).await
}

/// Pods bound to the node.
pub async fn pods_on(client: &Client, node_name: &str) -> Result<Vec<Pod>, kube::Error> {
    let pods: Api<Pod> = Api::all(client.clone());
    Ok(pods.list(&ListParams::default().fields(&format!("spec.nodeName={node_name}"))).await?.items)
}
