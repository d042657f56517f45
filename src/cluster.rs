//! The Kubernetes vocabulary: what a failed API call means to the loop ([`ApiError`]), and thin
//! reads and writes the controller needs beside the fence loop's traits (the node Lease, status
//! writes, pods on a node).

use jiff::Timestamp;
use k8s_openapi::api::{coordination::v1::Lease, core::v1::Pod};
use kube::{
    Api, Client, ResourceExt,
    api::{ListParams, PostParams},
};

use crate::api::{CoronerRemediation, CoronerRemediationStatus};

/// A failed call to the Kubernetes API, by what the loop does about it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ApiError {
    /// The object changed since it was read (HTTP 409): read again and decide again.
    #[error("conflict: {0}")]
    Conflict(String),
    #[error("not found: {0}")]
    NotFound(String),
    /// Refused for good as sent (403, 422, an admission webhook or policy).
    #[error("denied: {0}")]
    Denied(String),
    /// Transport trouble, timeouts, 5xx: may clear by itself.
    #[error("Kubernetes API unavailable: {0}")]
    Unavailable(String),
}

impl ApiError {
    /// Event reason suffix and metric label.
    pub fn category(&self) -> &'static str {
        match self {
            Self::Conflict(_) => "conflict",
            Self::NotFound(_) => "not-found",
            Self::Denied(_) => "denied",
            Self::Unavailable(_) => "kube-api",
        }
    }
}

impl From<kube::Error> for ApiError {
    fn from(error: kube::Error) -> Self {
        match &error {
            kube::Error::Api(status) if status.code == 409 => Self::Conflict(status.message.clone()),
            kube::Error::Api(status) if status.code == 404 => Self::NotFound(status.message.clone()),
            kube::Error::Api(status) if matches!(status.code, 400 | 403 | 422) => Self::Denied(status.message.clone()),
            _ => Self::Unavailable(error.to_string()),
        }
    }
}

pub type ApiResult<T> = Result<T, ApiError>;

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

/// Every NodeHealthCheck, as NHC's API serves it (untyped: its CRD is NHC's, and coroner reads only a
/// selector and template references, `crate::verify`).
pub async fn node_health_checks(client: &Client) -> Result<Vec<serde_json::Value>, kube::Error> {
    let nhc = kube::api::ApiResource {
        group: "remediation.medik8s.io".into(),
        version: "v1alpha1".into(),
        api_version: "remediation.medik8s.io/v1alpha1".into(),
        kind: "NodeHealthCheck".into(),
        plural: "nodehealthchecks".into(),
    };
    let list = Api::<kube::api::DynamicObject>::all_with(client.clone(), &nhc).list(&ListParams::default()).await?;
    Ok(list.items.iter().filter_map(|o| serde_json::to_value(o).ok()).collect())
}
