//! Thin Kubernetes side effects: resourceVersion-checked Node updates, the checked release, workload
//! counts, status writes and what a BmcBinding refers to. The decisions live in the pure modules.

use std::time::Duration as StdDuration;

use jiff::Timestamp;
use k8s_openapi::api::{
    coordination::v1::Lease,
    core::v1::{ConfigMap, Node, Pod, Secret},
    storage::v1::VolumeAttachment,
};
use kube::{
    Api, Client, ResourceExt,
    api::{DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions},
};

use crate::{
    api::{
        BmcBinding, BmcBindingStatus, CaBundleKind, CoronerRemediation, CoronerRemediationSpec,
        CoronerRemediationStatus,
    },
    bmc::{Credentials, Password, tls},
    fence::{self, NodeSnapshot, Released, Workloads},
    leader,
    taints::{self, CoronerTaint},
};

/// Where kubelets renew their Leases.
pub const NODE_LEASE_NAMESPACE: &str = "kube-node-lease";
/// A node that changes this often under us is being written by something else; try again later.
const MAX_CONFLICTS: u32 = 10;

#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("Node {0} changed under every one of {MAX_CONFLICTS} updates")]
    Conflicts(String),
}

impl ClusterError {
    pub fn category(&self) -> &'static str {
        match self {
            Self::Kube(kube::Error::Api(status)) if status.code == 409 => "conflict",
            Self::Kube(_) => "kube-api",
            Self::Conflicts(_) => "conflict",
        }
    }
}

fn is_conflict(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 409)
}

fn is_not_found(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 404)
}

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

/// Reads the node, lets `change` decide, and replaces it under the resourceVersion it was read at;
/// on a conflict it reads and decides again. `Ok(None)`: the node is gone or nothing to change.
pub async fn update_node(
    nodes: &Api<Node>,
    name: &str,
    mut change: impl FnMut(&Node) -> Option<Node>,
) -> Result<Option<Node>, ClusterError> {
    for _ in 0..MAX_CONFLICTS {
        let Some(node) = nodes.get_opt(name).await? else { return Ok(None) };
        let Some(updated) = change(&node) else { return Ok(None) };
        match nodes.replace(name, &PostParams::default(), &updated).await {
            Ok(written) => return Ok(Some(written)),
            Err(e) if is_conflict(&e) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Err(ClusterError::Conflicts(name.to_owned()))
}

/// Brings coroner's taints on the node in line with the remediation's state: adds the fencing taint
/// when wanted, removes whichever of them this remediation owns and no longer wants.
pub async fn align_taints(
    nodes: &Api<Node>,
    name: &str,
    owner_uid: &str,
    fencing: bool,
    out_of_service: bool,
) -> Result<(), ClusterError> {
    let now = Timestamp::now();
    update_node(nodes, name, |node| {
        let mut unwanted = Vec::new();
        if !fencing {
            unwanted.push(CoronerTaint::Fencing);
        }
        if !out_of_service {
            unwanted.push(CoronerTaint::OutOfService);
        }
        let removed = taints::without_owned(node, &unwanted, owner_uid);
        let base = removed.as_ref().unwrap_or(node);
        let added = if fencing { taints::with_taint(base, CoronerTaint::Fencing, owner_uid, now) } else { None };
        added.or(removed)
    })
    .await
    .map(drop)
}

/// Removes every coroner taint this remediation owns (the finalizer's job).
pub async fn remove_owned_taints(nodes: &Api<Node>, name: &str, owner_uid: &str) -> Result<(), ClusterError> {
    update_node(nodes, name, |node| {
        taints::without_owned(node, &[CoronerTaint::Fencing, CoronerTaint::OutOfService], owner_uid)
    })
    .await
    .map(drop)
}

/// The node as it is now, if `fence::release_check` holds on it and its current Lease;
/// `Ok(Err(why))` when the node turned out alive (or gone).
async fn silent_node(
    client: &Client,
    spec: &CoronerRemediationSpec,
    status: &CoronerRemediationStatus,
    node_name: &str,
    owner_uid: &str,
) -> Result<Result<(Node, NodeSnapshot), String>, ClusterError> {
    let nodes: Api<Node> = Api::all(client.clone());
    let Some(node) = nodes.get_opt(node_name).await? else {
        return Ok(Err(format!("Node {node_name} disappeared")));
    };
    let snapshot = NodeSnapshot::new(&node, node_lease(client, node_name).await?, owner_uid);
    Ok(fence::release_check(spec, status, &snapshot).map(|()| (node, snapshot)))
}

/// The release with the out-of-service taint: one Node update under the read resourceVersion that
/// adds the taint and its owner annotation, and only if `fence::release_check` holds on exactly that
/// Node and its current Lease. A conflict re-reads both and checks again.
pub async fn release_with_taint(
    client: &Client,
    spec: &CoronerRemediationSpec,
    status: &CoronerRemediationStatus,
    node_name: &str,
    owner_uid: &str,
) -> Result<Result<Released, String>, ClusterError> {
    let nodes: Api<Node> = Api::all(client.clone());
    for _ in 0..MAX_CONFLICTS {
        let (node, snapshot) = match silent_node(client, spec, status, node_name, owner_uid).await? {
            Ok(silent) => silent,
            Err(alive) => return Ok(Err(alive)),
        };
        let released = |taint_owned| Released {
            at: Timestamp::now(),
            node_ready: snapshot.ready.clone().unwrap_or_default(),
            lease_renew_time: snapshot.lease_renew_time,
            taint_owned,
            pods_deleted: None,
        };
        let Some(updated) = taints::with_taint(&node, CoronerTaint::OutOfService, owner_uid, Timestamp::now()) else {
            // Already there: ours if an earlier pass of this remediation added it, else not claimed.
            return Ok(Ok(released(taints::owns(&node, CoronerTaint::OutOfService, owner_uid))));
        };
        match nodes.replace(node_name, &PostParams::default(), &updated).await {
            Ok(_) => return Ok(Ok(released(true))),
            Err(e) if is_conflict(&e) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Err(ClusterError::Conflicts(node_name.to_owned()))
}

/// The release with `ResourceDeletion` (as FAR does): after the same check, force-delete every pod
/// bound to the node (grace period 0, UID precondition), mirror pods excepted, checking again before
/// each further pod. Never VolumeAttachments. Unlike the taint, this is not one atomic update.
pub async fn release_by_deletion(
    client: &Client,
    spec: &CoronerRemediationSpec,
    status: &CoronerRemediationStatus,
    node_name: &str,
    owner_uid: &str,
) -> Result<Result<Released, String>, ClusterError> {
    let snapshot = match silent_node(client, spec, status, node_name, owner_uid).await? {
        Ok((_, snapshot)) => snapshot,
        Err(alive) => return Ok(Err(alive)),
    };
    let mut deleted = 0;
    for pod in pods_on(client, node_name).await? {
        if fence::is_mirror_pod(&pod) {
            continue;
        }
        // Deleting takes a while: the node must still be silent before each pod goes.
        if deleted > 0
            && let Err(alive) = silent_node(client, spec, status, node_name, owner_uid).await?
        {
            return Ok(Err(alive));
        }
        let api: Api<Pod> = Api::namespaced(client.clone(), &pod.namespace().unwrap_or_default());
        let params = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions { uid: pod.metadata.uid.clone(), resource_version: None }),
            ..DeleteParams::default()
        };
        match api.delete(&pod.name_any(), &params).await {
            Ok(_) => deleted += 1,
            // Gone already (another remediator may delete the same pod), or replaced by a new pod.
            Err(e) if is_not_found(&e) || is_conflict(&e) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(Ok(Released {
        at: Timestamp::now(),
        node_ready: snapshot.ready.unwrap_or_default(),
        lease_renew_time: snapshot.lease_renew_time,
        taint_owned: false,
        pods_deleted: Some(deleted),
    }))
}

async fn pods_on(client: &Client, node_name: &str) -> Result<Vec<Pod>, kube::Error> {
    let pods: Api<Pod> = Api::all(client.clone());
    Ok(pods.list(&ListParams::default().fields(&format!("spec.nodeName={node_name}"))).await?.items)
}

/// What still holds the node: pods that are terminating or not yet evicted, and VolumeAttachments.
pub async fn workloads(client: &Client, node_name: &str) -> Result<Workloads, kube::Error> {
    let blocking_pods = pods_on(client, node_name).await?.iter().filter(|p| fence::pod_blocks_release(p)).count();
    let attachments: Api<VolumeAttachment> = Api::all(client.clone());
    let volume_attachments = attachments
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .filter(|va| va.spec.node_name == node_name)
        .count();
    Ok(Workloads { blocking_pods: count(blocking_pods), volume_attachments: count(volume_attachments) })
}

fn count(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
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

/// Records a verification on the binding's status (merge patch of the status subresource).
pub async fn record_binding_status(
    client: &Client,
    binding: &BmcBinding,
    status: &BmcBindingStatus,
) -> Result<(), kube::Error> {
    let api: Api<BmcBinding> = Api::namespaced(client.clone(), &binding.namespace().unwrap_or_default());
    let patch = serde_json::json!({ "status": status });
    api.patch_status(&binding.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await.map(drop)
}

/// How long to wait before looking at an API object again after a transient error.
pub const ERROR_REQUEUE: StdDuration = StdDuration::from_secs(2);

/// How many other replicas of this coroner (pods with the same `app.kubernetes.io/name` and
/// `app.kubernetes.io/instance` labels as `pod`) could take leadership over from a leader running on
/// `node_to_fence` ([`leader::can_take_over`]).
pub async fn ready_siblings(
    client: &Client,
    namespace: &str,
    pod: &str,
    node_to_fence: &str,
) -> Result<usize, kube::Error> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let Some(me) = pods.get_opt(pod).await? else { return Ok(0) };
    let selector: Vec<String> = ["app.kubernetes.io/name", "app.kubernetes.io/instance"]
        .iter()
        .filter_map(|key| me.labels().get(*key).map(|value| format!("{key}={value}")))
        .collect();
    if selector.is_empty() {
        return Ok(0);
    }
    let others = pods.list(&ListParams::default().labels(&selector.join(","))).await?.items;
    Ok(others.iter().filter(|p| leader::can_take_over(p, pod, node_to_fence)).count())
}
