//! The two taints coroner puts on a node, and who owns them.
//!
//! coroner owns a taint only if it recorded, in the same Node update that added the taint, an owner
//! annotation naming the remediation's UID and the exact taint it added (key, value, effect,
//! timeAdded). Only that exact taint is ever removed: a taint someone else added — the same key
//! included, or the same key and effect re-added after coroner's was removed — is never touched, and an
//! annotation whose taint differs from the node's claims nothing. Every change here is a whole-Node
//! update under the resourceVersion it was read at, touching no other taint (never a merge patch of
//! the taint list).

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde::{Deserialize, Serialize};

/// The key kube-controller-manager acts on, whatever the value or effect (KEP-2268).
pub const OUT_OF_SERVICE_KEY: &str = "node.kubernetes.io/out-of-service";

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
            Self::OutOfService => OUT_OF_SERVICE_KEY,
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

    /// The Node annotation that records the owner and the exact taint ([`Ownership`]).
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

/// The owner annotation's value: the remediation that added the taint, and the taint exactly as added,
/// as JSON (`{"uid":"…","key":"…","value":"nodeshutdown","effect":"NoExecute","timeAdded":"…Z"}`).
/// An annotation written before this record existed (the bare UID) claims nothing.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Ownership {
    pub uid: String,
    pub key: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    pub effect: String,
    pub time_added: Time,
    /// With the out-of-service taint: the bootID the Node reported when coroner added it, so a taint
    /// whose remediation is gone is removed only once the machine booted again ([`orphaned`]).
    #[serde(rename = "bootID", default, skip_serializing_if = "Option::is_none")]
    pub boot_id: Option<String>,
    /// A taint taken over from a remediation that no longer exists ([`adopt_orphan`]): its record
    /// as it was, to put back if this release is taken back ([`taken_back`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub took_over: Option<Box<Ownership>>,
}

impl Ownership {
    fn new(taint: CoronerTaint, uid: &str, added: Timestamp) -> Self {
        Self {
            uid: uid.to_owned(),
            key: taint.key().to_owned(),
            value: taint.value().map(str::to_owned),
            effect: taint.effect().to_owned(),
            time_added: Time(added),
            boot_id: None,
            took_over: None,
        }
    }

    fn taint(&self) -> Taint {
        Taint {
            key: self.key.clone(),
            value: self.value.clone(),
            effect: self.effect.clone(),
            time_added: Some(self.time_added.clone()),
        }
    }

    /// Whether `taint` is exactly the one recorded (timeAdded to the second: the API server keeps no more).
    fn describes(&self, taint: &Taint) -> bool {
        taint.key == self.key
            && taint.value == self.value
            && taint.effect == self.effect
            && taint.time_added.as_ref().is_some_and(|t| t.0.as_second() == self.time_added.0.as_second())
    }
}

fn taints(node: &Node) -> &[Taint] {
    node.spec.as_ref().and_then(|s| s.taints.as_deref()).unwrap_or_default()
}

pub fn has(node: &Node, taint: CoronerTaint) -> bool {
    taints(node).iter().any(|t| taint.matches(t))
}

/// The owner record of `taint` on the node, if its annotation holds one for that taint's key.
pub fn ownership(node: &Node, taint: CoronerTaint) -> Option<Ownership> {
    let text = node.metadata.annotations.as_ref()?.get(taint.owner_annotation())?;
    serde_json::from_str::<Ownership>(text).ok().filter(|o| o.key == taint.key() && o.effect == taint.effect())
}

/// The taint `owner_uid` owns: the exact taint its record describes, if it is on the node.
pub fn owned<'a>(node: &'a Node, taint: CoronerTaint, owner_uid: &str) -> Option<&'a Taint> {
    let record = ownership(node, taint).filter(|o| o.uid == owner_uid)?;
    taints(node).iter().find(|t| record.describes(t))
}

/// Whether the exact taint `owner_uid` recorded is on the node.
pub fn owns(node: &Node, taint: CoronerTaint, owner_uid: &str) -> bool {
    owned(node, taint, owner_uid).is_some()
}

/// A release already on the Node: the exact out-of-service taint `owner_uid` recorded is there, and
/// when it was added. A fence that finds it (after a crash between the release write and its status
/// write) records that release; it never removes and re-adds it.
pub fn release_on_node(node: &Node, owner_uid: &str) -> Option<Timestamp> {
    let record = ownership(node, CoronerTaint::OutOfService).filter(|o| o.uid == owner_uid)?;
    taints(node).iter().any(|t| record.describes(t)).then_some(record.time_added.0)
}

/// The taint that holds a power-on: any taint with the out-of-service key, whatever its value or
/// effect, and whoever added it (kube-controller-manager acts on the key alone: while it is there, a
/// machine switched on would run next to the workloads released from it).
pub fn blocks_power_on(node: &Node) -> Option<&Taint> {
    taints(node).iter().find(|t| t.key == OUT_OF_SERVICE_KEY)
}

/// The node with `taint` added and owned by `owner_uid` (the record holds the exact taint, its
/// timeAdded `now` to the second), or `None` when a taint with that key and effect is already there
/// (then it is someone else's, or already ours, and is not claimed again).
pub fn with_taint(node: &Node, taint: CoronerTaint, owner_uid: &str, now: Timestamp) -> Option<Node> {
    if has(node, taint) {
        return None;
    }
    let added = Timestamp::from_second(now.as_second()).unwrap_or(now);
    let mut record = Ownership::new(taint, owner_uid, added);
    if taint == CoronerTaint::OutOfService {
        record.boot_id = boot_id(node).map(str::to_owned);
    }
    // Strings and a timestamp: serializing cannot fail.
    let annotation = serde_json::to_string(&record).ok()?;
    let mut updated = node.clone();
    updated.spec.get_or_insert_with(Default::default).taints.get_or_insert_with(Vec::new).push(record.taint());
    updated
        .metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(taint.owner_annotation().to_owned(), annotation);
    Some(updated)
}

/// The node without the exact taints of `taints` that `owner_uid` recorded, and without its records
/// (also a record whose taint is gone or differs: it claims nothing, and that taint stays), or `None`
/// when `owner_uid` records none of them.
pub fn without_owned(node: &Node, taints: &[CoronerTaint], owner_uid: &str) -> Option<Node> {
    let ours: Vec<(CoronerTaint, Ownership)> =
        taints.iter().filter_map(|t| ownership(node, *t).filter(|o| o.uid == owner_uid).map(|o| (*t, o))).collect();
    if ours.is_empty() {
        return None;
    }
    let mut updated = node.clone();
    if let Some(list) = updated.spec.as_mut().and_then(|s| s.taints.as_mut()) {
        list.retain(|t| !ours.iter().any(|(_, record)| record.describes(t)));
    }
    if let Some(annotations) = updated.metadata.annotations.as_mut() {
        for (taint, _) in &ours {
            annotations.remove(taint.owner_annotation());
        }
    }
    Some(updated)
}

fn boot_id(node: &Node) -> Option<&str> {
    let id = node.status.as_ref()?.node_info.as_ref()?.boot_id.as_str();
    (!id.is_empty()).then_some(id)
}

fn ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == crate::api::conditions::TRUE))
}

/// The remediations coroner's taint records on the Node name.
pub fn record_owners(node: &Node) -> Vec<String> {
    [CoronerTaint::Fencing, CoronerTaint::OutOfService]
        .into_iter()
        .filter_map(|t| ownership(node, t))
        .map(|o| o.uid)
        .collect()
}

/// R4: the node with coroner's out-of-service taint whose remediation no longer exists (its record
/// names none of `live`, its exact taint is on the node) taken over by `owner_uid`, the node's
/// current remediation, as its release: the record names it, with the bootID the node reports now,
/// and the taint stays on the node throughout, only its timeAdded moved to `now` (when this release
/// is made). Returns the node and the UID the record named, or `None` when there is no such taint.
pub fn adopt_orphan(node: &Node, owner_uid: &str, live: &[String], now: Timestamp) -> Option<(Node, String)> {
    let taint = CoronerTaint::OutOfService;
    let record = ownership(node, taint).filter(|o| o.uid != owner_uid && !live.contains(&o.uid))?;
    let index = taints(node).iter().position(|t| record.describes(t))?;
    let added = Timestamp::from_second(now.as_second()).unwrap_or(now);
    let adopted = Ownership {
        uid: owner_uid.to_owned(),
        time_added: Time(added),
        boot_id: boot_id(node).map(str::to_owned),
        took_over: Some(Box::new(Ownership { took_over: None, ..record.clone() })),
        ..record.clone()
    };
    let annotation = serde_json::to_string(&adopted).ok()?;
    let mut updated = node.clone();
    let list = updated.spec.as_mut().and_then(|s| s.taints.as_mut())?;
    list[index].time_added = Some(Time(added));
    updated
        .metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(taint.owner_annotation().to_owned(), annotation);
    Some((updated, record.uid))
}

/// R4: the remediation a release of `owner_uid` took its out-of-service taint over from, if it did.
pub fn taken_over_from(node: &Node, owner_uid: &str) -> Option<String> {
    let record = ownership(node, CoronerTaint::OutOfService).filter(|o| o.uid == owner_uid)?;
    record.took_over.map(|previous| previous.uid)
}

/// A release of `owner_uid` taken back (the node showed life right after it): its out-of-service
/// taint and record go, or, for a taint it took over ([`adopt_orphan`]), the record of the
/// remediation it took it from is put back with the taint as that one added it, so the sweep
/// judges it as before (R4). `None` when `owner_uid` records no such taint.
pub fn taken_back(node: &Node, owner_uid: &str) -> Option<Node> {
    let taint = CoronerTaint::OutOfService;
    let record = ownership(node, taint).filter(|o| o.uid == owner_uid)?;
    let Some(previous) = record.took_over.as_deref() else { return without_owned(node, &[taint], owner_uid) };
    let annotation = serde_json::to_string(previous).ok()?;
    let mut updated = node.clone();
    if let Some(list) = updated.spec.as_mut().and_then(|s| s.taints.as_mut())
        && let Some(found) = list.iter_mut().find(|t| record.describes(t))
    {
        found.time_added = Some(previous.time_added.clone());
    }
    updated
        .metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(taint.owner_annotation().to_owned(), annotation);
    Some(updated)
}

/// A record of coroner's on a Node whose remediation no longer exists, and what becomes of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Orphan {
    pub taint: CoronerTaint,
    /// The remediation the record names.
    pub owner: String,
    /// `None`: remove it (its exact taint, if there, and the record); else why it stays.
    pub held: Option<OrphanHeld>,
}

/// Why an out-of-service taint whose remediation is gone stays on the Node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OrphanHeld {
    /// The node does not report `Ready=True`: nothing shows the machine is back, and while the taint
    /// is there its workloads may run elsewhere.
    NotReady,
    /// The node reports the bootID it had when the taint was added: the machine may never have gone
    /// down, so what the taint released may still run on it.
    SameBoot,
    /// The record holds no bootID (an earlier version's), so a new boot cannot be told.
    BootUnrecorded,
}

impl OrphanHeld {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NotReady => "the node does not report Ready=True",
            Self::SameBoot => "the node reports the bootID it had when the taint was added",
            Self::BootUnrecorded => "the taint's record holds no bootID to tell a new boot by",
        }
    }
}

/// R4: coroner's taint records on the Node whose remediation is not among `live` (the UIDs of the
/// remediations that exist, listed after the Node was read: a UID is never reused, so one missing is
/// gone) — a stale leader's write that landed after the finalizer ran. The fencing taint and a record
/// whose taint is gone go at once; an out-of-service taint only once the node is `Ready=True` with a
/// bootID other than the one recorded when it was added.
pub fn orphaned(node: &Node, live: &[String]) -> Vec<Orphan> {
    [CoronerTaint::Fencing, CoronerTaint::OutOfService]
        .into_iter()
        .filter_map(|taint| {
            let record = ownership(node, taint).filter(|o| !live.contains(&o.uid))?;
            let on_node = taints(node).iter().any(|t| record.describes(t));
            let held = match (taint, on_node) {
                (CoronerTaint::OutOfService, true) if !ready(node) => Some(OrphanHeld::NotReady),
                (CoronerTaint::OutOfService, true) => match (record.boot_id.as_deref(), boot_id(node)) {
                    (None, _) => Some(OrphanHeld::BootUnrecorded),
                    (Some(then), now) if now.is_none_or(|now| now == then) => Some(OrphanHeld::SameBoot),
                    _ => None,
                },
                _ => None,
            };
            Some(Orphan { taint, owner: record.uid, held })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::NodeSpec;

    use super::*;

    const ADDED: &str = "2025-03-01T12:00:00Z";

    fn node(taints: Vec<Taint>, annotations: &[(&str, &str)]) -> Node {
        let mut node = Node { spec: Some(NodeSpec { taints: Some(taints), ..NodeSpec::default() }), ..Node::default() };
        node.metadata.annotations = Some(annotations.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect());
        node
    }

    fn taint(key: &str, effect: &str) -> Taint {
        Taint { key: key.into(), effect: effect.into(), ..Taint::default() }
    }

    fn at(time: &str) -> Timestamp {
        time.parse().unwrap()
    }

    fn out_of_service(value: &str, added: &str) -> Taint {
        Taint {
            key: OUT_OF_SERVICE_KEY.into(),
            value: Some(value.into()),
            effect: "NoExecute".into(),
            time_added: Some(Time(at(added))),
        }
    }

    fn record(uid: &str, added: &str) -> String {
        serde_json::to_string(&Ownership::new(CoronerTaint::OutOfService, uid, at(added))).unwrap()
    }

    fn keys(node: &Node) -> Vec<String> {
        node.spec
            .as_ref()
            .and_then(|s| s.taints.as_ref())
            .map(|t| t.iter().map(|t| t.key.clone()).collect())
            .unwrap_or_default()
    }

    /// The node as the API server returns it: taints and annotations through JSON.
    fn round_trip(node: &Node) -> Node {
        serde_json::from_value(serde_json::to_value(node).unwrap()).unwrap()
    }

    #[test]
    fn an_orphaned_out_of_service_taint_is_adopted_by_the_current_remediation_and_stays_on_the_node() {
        let mut before = node(
            vec![out_of_service("nodeshutdown", ADDED), taint("drbd.linbit.com/lost-quorum", "NoSchedule")],
            &[("coroner.dev/out-of-service-owner", &record("uid-gone", ADDED))],
        );
        before.status = Some(k8s_openapi::api::core::v1::NodeStatus {
            node_info: Some(k8s_openapi::api::core::v1::NodeSystemInfo {
                boot_id: "boot-2".into(),
                ..Default::default()
            }),
            ..Default::default()
        });
        let now = at("2025-03-01T12:10:00.700Z");
        let (after, from) = adopt_orphan(&before, "uid-new", &["uid-new".into()], now).unwrap();
        let after = round_trip(&after);
        assert_eq!(from, "uid-gone");
        assert_eq!(keys(&after), keys(&before), "no taint removed or added");
        assert_eq!(release_on_node(&after, "uid-new"), Some(at("2025-03-01T12:10:00Z")));
        assert_eq!(ownership(&after, CoronerTaint::OutOfService).unwrap().boot_id.as_deref(), Some("boot-2"));
        assert!(!owns(&after, CoronerTaint::OutOfService, "uid-gone"));
        assert_eq!(taken_over_from(&after, "uid-new").as_deref(), Some("uid-gone"));
        // Taken back (the node showed life right after): the gone remediation's record and taint, as before.
        let back = round_trip(&taken_back(&after, "uid-new").unwrap());
        assert_eq!(keys(&back), keys(&before));
        assert_eq!(release_on_node(&back, "uid-gone"), Some(at(ADDED)));
        assert_eq!(ownership(&back, CoronerTaint::OutOfService), ownership(&before, CoronerTaint::OutOfService));
        // A live owner's taint, someone else's taint, or ours already: nothing to adopt.
        assert_eq!(adopt_orphan(&before, "uid-new", &["uid-new".into(), "uid-gone".into()], now), None);
        assert_eq!(adopt_orphan(&before, "uid-gone", &[], now), None);
        let foreign = node(vec![out_of_service("nodeshutdown", ADDED)], &[]);
        assert_eq!(adopt_orphan(&foreign, "uid-new", &[], now), None);
        let rewritten = node(
            vec![out_of_service("rewritten", ADDED)],
            &[("coroner.dev/out-of-service-owner", &record("uid-gone", ADDED))],
        );
        assert_eq!(adopt_orphan(&rewritten, "uid-new", &[], now), None, "a record whose taint differs claims nothing");
    }

    #[test]
    fn adding_keeps_every_other_taint_and_records_the_exact_taint() {
        let before = node(
            vec![
                taint("node.kubernetes.io/unreachable", "NoExecute"),
                taint("drbd.linbit.com/lost-quorum", "NoSchedule"),
            ],
            &[],
        );
        let now = at("2025-03-01T12:00:00.987654Z");
        let after = round_trip(&with_taint(&before, CoronerTaint::OutOfService, "uid-1", now).unwrap());
        assert_eq!(
            keys(&after),
            ["node.kubernetes.io/unreachable", "drbd.linbit.com/lost-quorum", "node.kubernetes.io/out-of-service"]
        );
        assert!(owns(&after, CoronerTaint::OutOfService, "uid-1"));
        let added = after.spec.clone().unwrap().taints.unwrap().pop().unwrap();
        assert_eq!(added, out_of_service("nodeshutdown", ADDED), "timeAdded to the second, as the API server keeps it");
        let recorded: serde_json::Value =
            serde_json::from_str(&after.metadata.annotations.unwrap()["coroner.dev/out-of-service-owner"]).unwrap();
        assert_eq!(
            recorded,
            serde_json::json!({"uid": "uid-1", "key": OUT_OF_SERVICE_KEY, "value": "nodeshutdown", "effect": "NoExecute", "timeAdded": ADDED})
        );
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
            vec![out_of_service("nodeshutdown", ADDED)],
            &[("coroner.dev/out-of-service-owner", &record("uid-9", ADDED))],
        );
        assert!(without_owned(&before, &[CoronerTaint::OutOfService], "uid-1").is_none());
        assert!(!owns(&before, CoronerTaint::OutOfService, "uid-1"));
    }

    #[test]
    fn a_stale_record_whose_taint_differs_claims_nothing_and_only_the_record_goes() {
        // Our record, but the taint on the node now is someone else's: re-added later, or with
        // another value (only key and effect are unique on a node).
        for theirs in [out_of_service("nodeshutdown", "2025-03-01T12:05:00Z"), out_of_service("manual", ADDED), {
            let mut untimed = out_of_service("nodeshutdown", ADDED);
            untimed.time_added = None;
            untimed
        }] {
            let before = node(vec![theirs.clone()], &[("coroner.dev/out-of-service-owner", &record("uid-1", ADDED))]);
            assert!(!owns(&before, CoronerTaint::OutOfService, "uid-1"), "{theirs:?}");
            assert_eq!(release_on_node(&before, "uid-1"), None);
            let after = without_owned(&before, &[CoronerTaint::OutOfService], "uid-1").unwrap();
            assert_eq!(after.spec.unwrap().taints.unwrap(), [theirs]);
            assert!(after.metadata.annotations.unwrap().is_empty());
        }
    }

    #[test]
    fn a_record_from_before_exact_ownership_claims_nothing() {
        // The bare UID that earlier versions wrote: it cannot say which taint was added.
        let before =
            node(vec![out_of_service("nodeshutdown", ADDED)], &[("coroner.dev/out-of-service-owner", "uid-1")]);
        assert!(!owns(&before, CoronerTaint::OutOfService, "uid-1"));
        assert!(without_owned(&before, &[CoronerTaint::OutOfService], "uid-1").is_none());
    }

    #[test]
    fn a_stale_owner_annotation_without_its_taint_is_cleaned_up() {
        let fencing = serde_json::to_string(&Ownership::new(CoronerTaint::Fencing, "uid-1", at(ADDED))).unwrap();
        let before = node(vec![], &[("coroner.dev/fencing-owner", &fencing)]);
        let after = without_owned(&before, &[CoronerTaint::Fencing], "uid-1").unwrap();
        assert!(after.metadata.annotations.unwrap().is_empty());
    }

    #[test]
    fn a_release_on_the_node_is_recognised_with_its_time() {
        let released = node(
            vec![out_of_service("nodeshutdown", ADDED)],
            &[("coroner.dev/out-of-service-owner", &record("uid-1", ADDED))],
        );
        assert_eq!(release_on_node(&released, "uid-1"), Some(at(ADDED)));
        assert_eq!(release_on_node(&released, "uid-2"), None);
        assert_eq!(
            release_on_node(&node(vec![], &[("coroner.dev/out-of-service-owner", &record("uid-1", ADDED))]), "uid-1"),
            None
        );
        let added = with_taint(&node(vec![], &[]), CoronerTaint::OutOfService, "uid-1", at(ADDED)).unwrap();
        assert_eq!(release_on_node(&round_trip(&added), "uid-1"), Some(at(ADDED)));
    }

    #[test]
    fn any_out_of_service_taint_blocks_power_on_whoever_added_it() {
        assert!(blocks_power_on(&node(vec![taint("coroner.dev/fencing", "NoSchedule")], &[])).is_none());
        for effect in ["NoExecute", "NoSchedule", "PreferNoSchedule"] {
            for value in [None, Some("nodeshutdown"), Some("someone-else")] {
                let theirs = Taint { value: value.map(str::to_owned), ..taint(OUT_OF_SERVICE_KEY, effect) };
                assert_eq!(blocks_power_on(&node(vec![theirs.clone()], &[])), Some(&theirs));
            }
        }
    }

    fn booted(node: &Node, boot_id: &str, ready: &str) -> Node {
        let mut node = node.clone();
        node.status = Some(k8s_openapi::api::core::v1::NodeStatus {
            node_info: Some(k8s_openapi::api::core::v1::NodeSystemInfo {
                boot_id: boot_id.into(),
                ..Default::default()
            }),
            conditions: Some(vec![k8s_openapi::api::core::v1::NodeCondition {
                type_: "Ready".into(),
                status: ready.into(),
                ..Default::default()
            }]),
            ..Default::default()
        });
        node
    }

    #[test]
    fn an_out_of_service_taint_whose_remediation_is_gone_goes_only_once_the_node_is_ready_on_a_new_boot() {
        let fenced = booted(&node(vec![], &[]), "boot-1", "Unknown");
        let released = round_trip(&with_taint(&fenced, CoronerTaint::OutOfService, "uid-1", at(ADDED)).unwrap());
        let held = |node: &Node| orphaned(node, &[]).into_iter().map(|o| (o.owner, o.held)).collect::<Vec<_>>();
        assert_eq!(orphaned(&released, &["uid-1".into()]), [], "its remediation exists: its own finalizer decides");
        assert_eq!(held(&released), [("uid-1".into(), Some(OrphanHeld::NotReady))]);
        assert_eq!(held(&booted(&released, "boot-1", "True")), [("uid-1".into(), Some(OrphanHeld::SameBoot))]);
        assert_eq!(held(&booted(&released, "", "True")), [("uid-1".into(), Some(OrphanHeld::SameBoot))]);
        assert_eq!(held(&booted(&released, "boot-2", "True")), [("uid-1".into(), None)]);
        // An earlier version's record holds no bootID: a new boot cannot be told.
        let unrecorded = booted(
            &node(
                vec![out_of_service("nodeshutdown", ADDED)],
                &[("coroner.dev/out-of-service-owner", &record("uid-1", ADDED))],
            ),
            "boot-2",
            "True",
        );
        assert_eq!(held(&unrecorded), [("uid-1".into(), Some(OrphanHeld::BootUnrecorded))]);
    }

    #[test]
    fn a_fencing_taint_or_a_record_without_its_taint_whose_remediation_is_gone_goes_at_once() {
        let fencing = with_taint(&node(vec![], &[]), CoronerTaint::Fencing, "uid-1", at(ADDED)).unwrap();
        let orphans = orphaned(&fencing, &["uid-2".into()]);
        assert_eq!(orphans, [Orphan { taint: CoronerTaint::Fencing, owner: "uid-1".into(), held: None }]);
        let record_only = node(vec![], &[("coroner.dev/out-of-service-owner", &record("uid-1", ADDED))]);
        let orphans = orphaned(&record_only, &[]);
        assert_eq!(orphans, [Orphan { taint: CoronerTaint::OutOfService, owner: "uid-1".into(), held: None }]);
        // Someone else's taint with the key, and no record: nothing of coroner's.
        assert_eq!(orphaned(&node(vec![out_of_service("nodeshutdown", ADDED)], &[]), &[]), []);
    }
}
