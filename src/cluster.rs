//! Thin Kubernetes reads and writes the controller needs beside the fence loop's traits: the node
//! Lease, status writes, pods on a node, and what a BmcBinding refers to.

use std::time::Duration as StdDuration;

use jiff::Timestamp;
use k8s_openapi::api::{
    coordination::v1::Lease,
    core::v1::{ConfigMap, Pod, Secret},
};
use kube::{
    Api, Client, ResourceExt,
    api::{ListParams, PostParams},
};

use crate::{
    api::{BmcBinding, CaBundleKind, CoronerRemediation, CoronerRemediationStatus},
    bmc::{Credentials, Password, tls},
};

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

/// A BmcBinding's references could not be resolved into something usable.
#[derive(Debug, thiserror::Error)]
pub enum BindingError {
    #[error("{0}")]
    Invalid(String),
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
}

/// The credentials the binding names. The password goes only into the BMC client, never into a
/// message.
pub async fn credentials(client: &Client, binding: &BmcBinding) -> Result<Credentials, BindingError> {
    let namespace = binding.namespace().unwrap_or_default();
    let name = &binding.spec.credentials_secret_ref.name;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &namespace);
    let secret = secrets
        .get_opt(name)
        .await?
        .ok_or_else(|| BindingError::Invalid(format!("credentials Secret {namespace}/{name} does not exist")))?;
    let field = |key: &str| {
        secret
            .data
            .as_ref()
            .and_then(|d| d.get(key))
            .and_then(|v| String::from_utf8(v.0.clone()).ok())
            .filter(|v| !v.is_empty())
            .ok_or_else(|| {
                BindingError::Invalid(format!(
                    "credentials Secret {namespace}/{name} has no non-empty UTF-8 key {key:?}"
                ))
            })
    };
    Ok(Credentials { username: field("username")?, password: Password::new(field("password")?) })
}

/// The trust the binding configures, with its CA bundle read from the ConfigMap or Secret.
pub async fn trust(client: &Client, binding: &BmcBinding) -> Result<tls::Trust, BindingError> {
    let namespace = binding.namespace().unwrap_or_default();
    let policy = &binding.spec.tls;
    let ca_bundle_pem = match &policy.ca_bundle_ref {
        None => None,
        Some(reference) => {
            let missing = || {
                BindingError::Invalid(format!(
                    "{:?} {namespace}/{} has no key {:?}",
                    reference.kind, reference.name, reference.key
                ))
            };
            let bytes = match reference.kind {
                CaBundleKind::ConfigMap => {
                    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &namespace);
                    let map = api.get_opt(&reference.name).await?.ok_or_else(|| {
                        BindingError::Invalid(format!(
                            "CA bundle ConfigMap {namespace}/{} does not exist",
                            reference.name
                        ))
                    })?;
                    map.data
                        .and_then(|d| d.get(&reference.key).map(|v| v.as_bytes().to_vec()))
                        .or_else(|| map.binary_data.and_then(|d| d.get(&reference.key).map(|v| v.0.clone())))
                        .ok_or_else(missing)?
                }
                CaBundleKind::Secret => {
                    let api: Api<Secret> = Api::namespaced(client.clone(), &namespace);
                    let secret = api.get_opt(&reference.name).await?.ok_or_else(|| {
                        BindingError::Invalid(format!("CA bundle Secret {namespace}/{} does not exist", reference.name))
                    })?;
                    secret.data.and_then(|d| d.get(&reference.key).map(|v| v.0.clone())).ok_or_else(missing)?
                }
            };
            Some(bytes)
        }
    };
    tls::Trust::from_policy(policy, ca_bundle_pem).map_err(|e| BindingError::Invalid(e.to_string()))
}

/// How long to wait before looking at an API object again after a transient error.
pub const ERROR_REQUEUE: StdDuration = StdDuration::from_secs(2);
