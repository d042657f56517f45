//! The two taints coroner puts on a node, and who owns them.
//!
//! coroner owns a taint only if it recorded that, as an owner annotation naming the remediation's
//! UID, in the same Node update that added the taint. A taint someone else added — the same key
//! included — is never removed. Every change here is a whole-Node update under the resourceVersion
//! it was read at, touching no other taint (never a merge patch of the taint list).

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CoronerTaint {
    /// `coroner.dev/fencing:NoSchedule`: added once the gates admit a fence; keeps new pods off a node
    /// coroner is working on.
    Fencing,
    /// `node.kubernetes.io/out-of-service=nodeshutdown:NoExecute` (KEP-2268): kube-controller-manager
    /// then evicts the node's pods, force-deletes the terminating ones and force-detaches volumes.
    OutOfService,
}

impl CoronerTaint {
    pub fn key(self) -> &'static str {
        match self {
            Self::Fencing => "coroner.dev/fencing",
            Self::OutOfService => "node.kubernetes.io/out-of-service",
        }
    }

    pub fn effect(self) -> &'static str {
        match self {
            Self::Fencing => "NoSchedule",
            Self::OutOfService => "NoExecute",
        }
    }

    fn value(self) -> Option<&'static str> {
        match self {
            Self::Fencing => None,
            Self::OutOfService => Some("nodeshutdown"),
        }
    }

    /// The Node annotation that names the remediation UID owning this taint.
    pub fn owner_annotation(self) -> &'static str {
        match self {
            Self::Fencing => "coroner.dev/fencing-owner",
            Self::OutOfService => "coroner.dev/out-of-service-owner",
        }
    }

    fn matches(self, taint: &Taint) -> bool {
        taint.key == self.key() && taint.effect == self.effect()
    }
}

pub fn has(node: &Node, taint: CoronerTaint) -> bool {
    node.spec.as_ref().and_then(|s| s.taints.as_ref()).is_some_and(|t| t.iter().any(|t| taint.matches(t)))
}

/// Whether the taint is on the node and its owner annotation names `owner_uid`.
pub fn owns(node: &Node, taint: CoronerTaint, owner_uid: &str) -> bool {
    has(node, taint) && owner_of(node, taint) == Some(owner_uid)
}

fn owner_of(node: &Node, taint: CoronerTaint) -> Option<&str> {
    node.metadata.annotations.as_ref()?.get(taint.owner_annotation()).map(String::as_str)
}

/// The node with `taint` added and owned by `owner_uid`, or `None` when a taint with that key and
/// effect is already there (then it is someone else's, or already ours, and is not claimed again).
pub fn with_taint(node: &Node, taint: CoronerTaint, owner_uid: &str, now: Timestamp) -> Option<Node> {
    if has(node, taint) {
        return None;
    }
    let mut updated = node.clone();
    updated.spec.get_or_insert_with(Default::default).taints.get_or_insert_with(Vec::new).push(Taint {
        key: taint.key().to_owned(),
        value: taint.value().map(str::to_owned),
        effect: taint.effect().to_owned(),
        time_added: Some(Time(now)),
    });
    updated
        .metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(taint.owner_annotation().to_owned(), owner_uid.to_owned());
    Some(updated)
}

/// The node without those of `taints` that `owner_uid` owns (and without their owner annotations),
/// or `None` when there is nothing of ours to remove.
pub fn without_owned(node: &Node, taints: &[CoronerTaint], owner_uid: &str) -> Option<Node> {
    let ours: Vec<CoronerTaint> = taints.iter().copied().filter(|t| owner_of(node, *t) == Some(owner_uid)).collect();
    if ours.is_empty() {
        return None;
    }
    let mut updated = node.clone();
    if let Some(list) = updated.spec.as_mut().and_then(|s| s.taints.as_mut()) {
        list.retain(|t| !ours.iter().any(|ours| ours.matches(t)));
    }
    if let Some(annotations) = updated.metadata.annotations.as_mut() {
        for taint in &ours {
            annotations.remove(taint.owner_annotation());
        }
    }
    Some(updated)
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::NodeSpec;

    use super::*;

    fn node(taints: Vec<Taint>, annotations: &[(&str, &str)]) -> Node {
        let mut node = Node { spec: Some(NodeSpec { taints: Some(taints), ..NodeSpec::default() }), ..Node::default() };
        node.metadata.annotations = Some(annotations.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect());
        node
    }

    fn taint(key: &str, effect: &str) -> Taint {
        Taint { key: key.into(), effect: effect.into(), ..Taint::default() }
    }

    fn keys(node: &Node) -> Vec<String> {
        node.spec
            .as_ref()
            .and_then(|s| s.taints.as_ref())
            .map(|t| t.iter().map(|t| t.key.clone()).collect())
            .unwrap_or_default()
    }

    #[test]
    fn adding_keeps_every_other_taint_and_records_the_owner() {
        let before = node(
            vec![
                taint("node.kubernetes.io/unreachable", "NoExecute"),
                taint("drbd.linbit.com/lost-quorum", "NoSchedule"),
            ],
            &[],
        );
        let after = with_taint(&before, CoronerTaint::OutOfService, "uid-1", Timestamp::UNIX_EPOCH).unwrap();
        assert_eq!(
            keys(&after),
            ["node.kubernetes.io/unreachable", "drbd.linbit.com/lost-quorum", "node.kubernetes.io/out-of-service"]
        );
        assert!(owns(&after, CoronerTaint::OutOfService, "uid-1"));
        let added = after.spec.unwrap().taints.unwrap().pop().unwrap();
        assert_eq!((added.value.as_deref(), added.effect.as_str()), (Some("nodeshutdown"), "NoExecute"));
        assert!(added.time_added.is_some());
    }

    #[test]
    fn a_taint_already_there_is_not_claimed() {
        let before = node(vec![taint("node.kubernetes.io/out-of-service", "NoExecute")], &[]);
        assert!(with_taint(&before, CoronerTaint::OutOfService, "uid-1", Timestamp::UNIX_EPOCH).is_none());
        assert!(!owns(&before, CoronerTaint::OutOfService, "uid-1"));
        assert!(without_owned(&before, &[CoronerTaint::OutOfService], "uid-1").is_none());
    }

    #[test]
    fn only_the_owner_removes_and_only_its_own_taints() {
        let before = with_taint(
            &node(vec![taint("other", "NoSchedule")], &[]),
            CoronerTaint::Fencing,
            "uid-1",
            Timestamp::UNIX_EPOCH,
        )
        .unwrap();
        let before = with_taint(&before, CoronerTaint::OutOfService, "uid-1", Timestamp::UNIX_EPOCH).unwrap();
        assert!(without_owned(&before, &[CoronerTaint::Fencing, CoronerTaint::OutOfService], "uid-2").is_none());

        let after = without_owned(&before, &[CoronerTaint::OutOfService], "uid-1").unwrap();
        assert_eq!(keys(&after), ["other", "coroner.dev/fencing"]);
        assert!(owns(&after, CoronerTaint::Fencing, "uid-1"));
        assert!(!after.metadata.annotations.as_ref().unwrap().contains_key("coroner.dev/out-of-service-owner"));

        let cleaned = without_owned(&after, &[CoronerTaint::Fencing, CoronerTaint::OutOfService], "uid-1").unwrap();
        assert_eq!(keys(&cleaned), ["other"]);
        assert!(cleaned.metadata.annotations.unwrap().is_empty());
    }

    #[test]
    fn a_same_key_taint_with_another_owner_survives_cleanup() {
        let before = node(
            vec![taint("node.kubernetes.io/out-of-service", "NoExecute")],
            &[("coroner.dev/out-of-service-owner", "uid-9")],
        );
        assert!(without_owned(&before, &[CoronerTaint::OutOfService], "uid-1").is_none());
    }

    #[test]
    fn a_stale_owner_annotation_without_its_taint_is_cleaned_up() {
        let before = node(vec![], &[("coroner.dev/fencing-owner", "uid-1")]);
        let after = without_owned(&before, &[CoronerTaint::Fencing], "uid-1").unwrap();
        assert!(after.metadata.annotations.unwrap().is_empty());
    }
}
