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
pub use crate::words::api_error::{ApiError, ApiResult};

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

/// The Secret in coroner's namespace that holds the key of its device digests
/// ([`crate::access::ContentKey`]).
pub const CONTENT_KEY_SECRET: &str = "coroner-content-key";
const CONTENT_KEY_ITEM: &str = "key";

/// Why coroner has no content key.
#[derive(Debug, thiserror::Error)]
pub enum ContentKeyError {
    #[error(
        "could not read or create Secret {namespace}/{CONTENT_KEY_SECRET} (coroner's Role needs get and create on secrets in its namespace): {source}"
    )]
    Api { namespace: String, source: kube::Error },
    #[error(
        "Secret {namespace}/{CONTENT_KEY_SECRET} has no key {CONTENT_KEY_ITEM:?} of at least 32 bytes: delete it and coroner makes a new one (every binding then counts as verified once it is verified again)"
    )]
    Unusable { namespace: String },
    #[error("no random source for coroner's content key: {0}")]
    Random(getrandom::Error),
}

/// coroner's content key: read from its Secret, or made once by the first replica that finds none
/// (a replica that loses the race to create it reads the winner's). A key is never replaced: a new
/// one makes every recorded `verifiedContent` another content, so bindings count as unverified
/// (docs/safety.md A2) until each is verified again.
pub async fn content_key(client: &Client, namespace: &str) -> Result<crate::access::ContentKey, ContentKeyError> {
    use k8s_openapi::{ByteString, api::core::v1::Secret};
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let failed = |source| ContentKeyError::Api { namespace: namespace.to_owned(), source };
    let secret = match api.get_opt(CONTENT_KEY_SECRET).await.map_err(failed)? {
        Some(secret) => secret,
        None => {
            let fresh = crate::access::ContentKey::random().map_err(ContentKeyError::Random)?;
            let mut secret = Secret {
                data: Some([(CONTENT_KEY_ITEM.to_owned(), ByteString(fresh.bytes().to_vec()))].into()),
                immutable: Some(true),
                ..Secret::default()
            };
            secret.metadata.name = Some(CONTENT_KEY_SECRET.into());
            secret.metadata.labels = Some([("app.kubernetes.io/managed-by".to_owned(), "coroner".to_owned())].into());
            match api.create(&PostParams::default(), &secret).await {
                Ok(created) => created,
                Err(kube::Error::Api(status)) if status.code == 409 => {
                    api.get(CONTENT_KEY_SECRET).await.map_err(failed)?
                }
                Err(error) => return Err(failed(error)),
            }
        }
    };
    let bytes = secret.data.as_ref().and_then(|d| d.get(CONTENT_KEY_ITEM)).map(|b| b.0.as_slice());
    match bytes {
        Some(bytes) if bytes.len() >= crate::access::ContentKey::LEN => Ok(crate::access::ContentKey::new(bytes)),
        _ => Err(ContentKeyError::Unusable { namespace: namespace.to_owned() }),
    }
}
