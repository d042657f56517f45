//! The node as one reconcile sees it: its identity, its readiness, its Lease, and the taints,
//! labels and records on it, read through the taint and contract rules.

use jiff::Timestamp;
use k8s_openapi::{api::core::v1::Node, apimachinery::pkg::apis::meta::v1::MicroTime};

use crate::{
    api::{CoronerRemediationStatus, NodeEvidence},
    contract, taints,
};

/// The node as one reconcile sees it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeSnapshot {
    pub name: String,
    pub uid: String,
    /// The `Ready` condition's status, if the node has one.
    pub ready: Option<String>,
    pub boot_id: String,
    pub system_uuid: String,
    /// Whether the node's Lease in kube-node-lease exists, and its renewTime.
    pub lease_present: bool,
    pub lease_renew_time: Option<Timestamp>,
    /// The value of the exclusion label, when the node carries it.
    pub excluded: Option<String>,
    /// Any out-of-service taint on the node, whoever added it (`key=value:effect`).
    pub out_of_service: Option<String>,
    /// When this remediation's own exact out-of-service taint was added, if it is on the node: a
    /// release already done.
    pub released_at: Option<Timestamp>,
    /// The node carries this remediation's owner record of the out-of-service taint, with its taint or
    /// without: the Node update that released was made (someone may have removed the taint since).
    pub release_recorded: bool,
}

impl NodeSnapshot {
    pub fn new(node: &Node, lease_renew_time: Option<Option<Timestamp>>, remediation_uid: &str) -> Self {
        let status = node.status.as_ref();
        let info = status.and_then(|s| s.node_info.as_ref());
        Self {
            name: node.metadata.name.clone().unwrap_or_default(),
            uid: node.metadata.uid.clone().unwrap_or_default(),
            ready: ready_status(node).map(str::to_owned),
            boot_id: info.map(|i| i.boot_id.clone()).unwrap_or_default(),
            system_uuid: info.map(|i| i.system_uuid.clone()).unwrap_or_default(),
            lease_present: lease_renew_time.is_some(),
            lease_renew_time: lease_renew_time.flatten(),
            excluded: node.metadata.labels.as_ref().and_then(|l| l.get(contract::EXCLUDE_LABEL)).cloned(),
            out_of_service: taints::blocks_power_on(node)
                .map(|t| format!("{}={}:{}", t.key, t.value.as_deref().unwrap_or_default(), t.effect)),
            released_at: taints::release_on_node(node, remediation_uid),
            release_recorded: taints::ownership(node, taints::CoronerTaint::OutOfService)
                .is_some_and(|o| o.uid == remediation_uid),
        }
    }

    pub fn evidence(&self, now: Timestamp) -> NodeEvidence {
        NodeEvidence {
            name: self.name.clone(),
            uid: self.uid.clone(),
            system_uuid: self.system_uuid.clone(),
            boot_id: self.boot_id.clone(),
            ready: self.ready.clone().unwrap_or_else(|| "absent".into()),
            lease_present: self.lease_present,
            lease_renew_time: self.lease_renew_time.map(MicroTime),
            admitted_at: MicroTime(now),
            binding: None,
        }
    }
}

pub fn ready_status(node: &Node) -> Option<&str> {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
        .map(|c| c.status.as_str())
}

/// The Node is another object than the one admitted (the same name, a new UID).
pub fn replaced(status: &CoronerRemediationStatus, node: &NodeSnapshot) -> bool {
    let admitted = status.evidence.as_ref().and_then(|e| e.node.as_ref()).map(|n| n.uid.as_str());
    admitted.is_some_and(|uid| !uid.is_empty() && uid != node.uid)
}
