//! Reflector stores the fence loop reads instead of LISTs (docs/benchmarks.md lists the reads that
//! stay direct): the Nodes and the etcd Pods (filled by the very watches that wake the remediation
//! controller), the remediations (that controller's own cache) and the BmcBindings (the binding
//! controller's). A store trails the API server by the watch's delay; where a fresh read is the
//! safety rule the loop reads directly (the `Nodes::node`, `Remediations::remediation`,
//! `Cluster::binding` and `NodeLeases::node_lease` GETs), and the gates that count add this leader's
//! own admissions to what a store shows. Each leadership term sets its stores; until a term has, the
//! loop lists.

use std::sync::{Mutex, PoisonError};

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::{Resource, runtime::reflector::Store};

use crate::{
    api::{BmcBinding, CoronerRemediation},
    driver::ApiError,
};

/// How long a read waits for a store's first list before it lists by itself.
const FILL_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// One kind's store, set by the term whose controllers fill it.
pub struct Slot<K: Resource<DynamicType = ()> + Clone + 'static>(Mutex<Option<Store<K>>>);

impl<K: Resource<DynamicType = ()> + Clone + 'static> Default for Slot<K> {
    fn default() -> Self {
        Self(Mutex::new(None))
    }
}

impl<K: Resource<DynamicType = ()> + Clone + 'static> Slot<K> {
    pub fn set(&self, store: Store<K>) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = Some(store);
    }

    fn clear(&self) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = None;
    }

    /// One object by name, as [`Slot::read`] reads them all: `None` when the caller must read it
    /// directly.
    pub async fn get(&self, name: &str, namespace: &str) -> Option<Result<Option<K>, ApiError>> {
        let store = self.0.lock().unwrap_or_else(PoisonError::into_inner).clone()?;
        match tokio::time::timeout(FILL_WAIT, store.wait_until_ready()).await {
            Ok(Ok(())) => {
                let key = kube::runtime::reflector::ObjectRef::new(name).within(namespace);
                Some(Ok(store.get(&key).map(|o| K::clone(&o))))
            }
            Ok(Err(_)) => Some(Err(ApiError::Unavailable(format!("the {} watch stopped", K::kind(&()))))),
            Err(_) => None,
        }
    }

    /// Every object the store holds once it has been filled; `None` when no term set one, or when it
    /// is not filled within [`FILL_WAIT`] (the caller lists: a store that never fills must not hold a
    /// fence).
    pub async fn read(&self) -> Option<Result<Vec<K>, ApiError>> {
        self.project(K::clone).await
    }

    /// What `view` takes of every object the store holds, as [`Slot::read`] reads them (no copy of
    /// the objects themselves).
    pub async fn project<T>(&self, view: impl Fn(&K) -> T) -> Option<Result<Vec<T>, ApiError>> {
        let store = self.0.lock().unwrap_or_else(PoisonError::into_inner).clone()?;
        match tokio::time::timeout(FILL_WAIT, store.wait_until_ready()).await {
            Ok(Ok(())) => Some(Ok(store.state().iter().map(|o| view(o)).collect())),
            Ok(Err(_)) => Some(Err(ApiError::Unavailable(format!("the {} watch stopped", K::kind(&()))))),
            Err(_) => {
                tracing::warn!(kind = %K::kind(&()), ?FILL_WAIT, "store not filled yet; listing instead");
                None
            }
        }
    }
}

#[derive(Default)]
pub struct Stores {
    pub nodes: Slot<Node>,
    pub etcd_pods: Slot<Pod>,
    pub remediations: Slot<CoronerRemediation>,
    pub bindings: Slot<BmcBinding>,
}

impl Stores {
    /// At a term's start: an earlier term's stores, whose watches ended with it, are never read
    /// (until this term's are set, the loop lists).
    pub fn clear(&self) {
        self.nodes.clear();
        self.etcd_pods.clear();
        self.remediations.clear();
        self.bindings.clear();
    }
}

/// What a Node keeps in the store: no managed fields, no image list (often most of a Node's size);
/// its labels, annotations, taints, conditions and nodeInfo stay.
pub fn strip_node(node: &mut Node) {
    node.metadata.managed_fields = None;
    if let Some(status) = node.status.as_mut() {
        status.images = None;
    }
}

/// What an etcd Pod keeps in the store: no managed fields.
pub fn strip_pod(pod: &mut Pod) {
    pod.metadata.managed_fields = None;
}

/// What a remediation or a binding keeps in its controller's store: no managed fields (after a
/// 50-node storm they were 1.5 MiB of the live heap, docs/benchmarks.md). Nothing coroner decides
/// reads them from a store; a status write sends none, so the API server keeps its own.
pub fn strip_managed_fields<K: kube::Resource>(object: &mut K) {
    object.meta_mut().managed_fields = None;
}

#[cfg(test)]
mod tests {
    use k8s_openapi::{
        api::core::v1::{ContainerImage, NodeStatus, NodeSystemInfo},
        apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry,
    };

    use super::*;

    #[test]
    fn a_stored_node_keeps_what_the_gates_read_and_drops_its_images_and_managed_fields() {
        let mut node = Node::default();
        node.metadata.labels = Some([("role".to_owned(), "worker".to_owned())].into());
        node.metadata.managed_fields = Some(vec![ManagedFieldsEntry::default()]);
        node.status = Some(NodeStatus {
            images: Some(vec![ContainerImage::default()]),
            node_info: Some(NodeSystemInfo { system_uuid: "u".into(), ..NodeSystemInfo::default() }),
            ..NodeStatus::default()
        });
        strip_node(&mut node);
        assert_eq!(node.metadata.managed_fields, None);
        let status = node.status.unwrap();
        assert_eq!(status.images, None);
        assert_eq!(status.node_info.unwrap().system_uuid, "u");
        assert!(node.metadata.labels.is_some());
    }

    #[tokio::test]
    async fn no_store_set_means_the_loop_lists() {
        assert!(Stores::default().nodes.read().await.is_none());
    }
}
