//! `coroner uninstall-check`: whether coroner can be uninstalled without leaving a node behind.
//!
//! A remediation holds coroner's finalizer until coroner has removed the taints it added. Uninstall
//! coroner first and nothing removes them: a node that comes back `Ready=True` keeps
//! `node.kubernetes.io/out-of-service` (everything scheduled there is evicted) and
//! `coroner.dev/fencing`, the remediations stay stuck on the finalizer, and NodeHealthCheck can no
//! longer read the templates (their aggregated ClusterRole goes with coroner). So the check refuses
//! while any remediation still holds the finalizer, and says what to do. The Helm chart runs it as a
//! pre-delete hook; docs/install.md gives the same steps for OLM and kustomize.
//!
//! A release whose remediation was deleted before its node reported back stays on the Node for R1's
//! sweep ([`guard::UNCONFIRMED_ANNOTATION`]); without coroner no one judges it. That blocks nothing
//! (the node may never come back), so the check names those Nodes and passes.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta};

use crate::{
    api::{CoronerRemediation, Phase, conditions},
    contract, guard,
};

/// A remediation that blocks the uninstall, as the refusal lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Blocker {
    pub name: String,
    pub node: String,
    pub phase: String,
    /// `Succeeded=<status> (<reason>)`, or `Succeeded not set yet`.
    pub outcome: String,
    /// Whether the node carries the out-of-service taint this remediation added.
    pub holds_taint: bool,
}

/// The remediations that still hold coroner's finalizer.
pub fn blockers(remediations: &[CoronerRemediation]) -> Vec<Blocker> {
    remediations
        .iter()
        .filter(|r| r.metadata.finalizers.as_ref().is_some_and(|f| f.iter().any(|f| f == contract::FINALIZER)))
        .map(|r| {
            let status = r.status.as_ref();
            let succeeded: Option<&Condition> =
                status.and_then(|s| conditions::find(&s.conditions, contract::SUCCEEDED));
            Blocker {
                name: r.metadata.name.clone().unwrap_or_default(),
                node: contract::node_name(&r.metadata).unwrap_or_default().to_owned(),
                phase: Phase::of(r).as_str().to_owned(),
                outcome: succeeded.map_or_else(
                    || "Succeeded not set yet".to_owned(),
                    |c| format!("Succeeded={} ({})", c.status, c.reason),
                ),
                holds_taint: status
                    .and_then(|s| s.evidence.as_ref()?.release.as_ref())
                    .is_some_and(|r| r.taint_owned && r.taint_removed_at.is_none()),
            }
        })
        .collect()
}

/// The refusal: which remediations block, and exactly what to do. `None` when nothing blocks.
pub fn refusal(namespace: &str, blockers: &[Blocker]) -> Option<String> {
    if blockers.is_empty() {
        return None;
    }
    let mut text = format!(
        "refusing to uninstall: {} CoronerRemediation(s) in namespace {namespace} still hold coroner's finalizer ({}); without coroner nothing removes the taints they added, and a node that comes back keeps node.kubernetes.io/out-of-service (everything scheduled there is evicted):\n",
        blockers.len(),
        contract::FINALIZER
    );
    for b in blockers {
        let released = if b.holds_taint { ", released: its node carries coroner's out-of-service taint" } else { "" };
        text.push_str(&format!("  - {} (node {}, phase {}, {}{released})\n", b.name, b.node, b.phase, b.outcome));
    }
    text.push_str(&format!(
        "Finish or delete every remediation first, while coroner still runs:\n\
         1. Stop new ones: pause every NodeHealthCheck that uses coroner's templates (kubectl patch nhc <name> --type merge -p '{{\"spec\":{{\"pauseRequests\":[\"uninstalling coroner\"]}}}}'), or remove coroner's templates from it.\n\
         2. For a node that is back or fenced and left Off: bring it back (power it on, see docs/operations.md, \"Return to service\") and NodeHealthCheck deletes its remediation; or decommission it (kubectl delete node <node>).\n\
         3. Or delete the remediation (kubectl delete coronerremediation -n {namespace} <name>): coroner's finalizer removes the taints it added. A node still powered off then loses its out-of-service taint while off; it stays NotReady and its workloads stay where they moved.\n\
         Then uninstall again. `helm uninstall --no-hooks` skips this check and leaves the taints and the stuck remediations behind.\n"
    ));
    Some(text)
}

/// The Nodes whose release no one will judge once coroner is gone: node name, and its record (or
/// the annotation's value, when it does not parse).
pub fn unwatched(nodes: &[ObjectMeta]) -> Vec<(String, Result<guard::UnconfirmedRelease, String>)> {
    nodes
        .iter()
        .filter_map(|meta| {
            let value = meta.annotations.as_ref()?.get(guard::UNCONFIRMED_ANNOTATION)?;
            let record = serde_json::from_str(value).map_err(|_| value.clone());
            Some((meta.name.clone().unwrap_or_default(), record))
        })
        .collect()
}

/// What the check says about [`unwatched`] Nodes while passing. `None` when there are none.
pub fn unwatched_notice(unwatched: &[(String, Result<guard::UnconfirmedRelease, String>)]) -> Option<String> {
    if unwatched.is_empty() {
        return None;
    }
    let mut text = format!(
        "note: {} Node(s) carry {}: a release whose remediation was deleted before the node reported back. coroner watches them for the node returning on the bootID it had before the fence (it never went down, yet its workloads were released: FenceDidNotTakeEffect); once coroner is uninstalled no one does:\n",
        unwatched.len(),
        guard::UNCONFIRMED_ANNOTATION
    );
    for (node, record) in unwatched {
        match record {
            Ok(r) => text.push_str(&format!(
                "  - node {node} (remediation {}, bootID before the fence {})\n",
                r.remediation, r.boot_id
            )),
            Err(value) => text.push_str(&format!("  - node {node} (a record coroner cannot read: {value:?})\n")),
        }
    }
    text.push_str(&format!(
        "Before that node runs workloads again, compare its bootID (kubectl get node <node> -o jsonpath='{{.status.nodeInfo.bootID}}') with the one above: the same bootID means its machine never went down while its workloads ran elsewhere. Remove the annotation (kubectl annotate node <node> {}-) once the machine is known to have gone down.\n",
        guard::UNCONFIRMED_ANNOTATION
    ));
    Some(text)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn remediation(name: &str, finalizer: bool, released: bool) -> CoronerRemediation {
        let finalizers = if finalizer { json!([contract::FINALIZER]) } else { json!([]) };
        let evidence = if released {
            json!({"release": {"strategy": "OutOfServiceTaint", "releasedAt": "2026-12-01T10:00:00Z", "nodeReady": "Unknown", "taintOwned": true}})
        } else {
            json!({})
        };
        serde_json::from_value(json!({
            "apiVersion": "coroner.dev/v1alpha1", "kind": "CoronerRemediation",
            "metadata": {"name": name, "namespace": "coroner-system", "finalizers": finalizers,
                         "annotations": {contract::NODE_NAME_ANNOTATION: "worker-1"}},
            "spec": {},
            "status": {"phase": "Done", "evidence": evidence, "conditions": [{"type": "Succeeded", "status": "True", "reason": "NodeFenced",
                       "message": "m", "lastTransitionTime": "2026-12-01T10:00:00Z"}]},
        }))
        .unwrap()
    }

    #[test]
    fn a_remediation_holding_the_finalizer_blocks_the_uninstall_and_says_what_to_do() {
        let all = [remediation("worker-1-x7k2p", true, true), remediation("gone", false, false)];
        let blockers = blockers(&all);
        assert_eq!(blockers.len(), 1, "one without the finalizer is no longer coroner's");
        assert_eq!((blockers[0].node.as_str(), blockers[0].phase.as_str()), ("worker-1", "Done"));
        let text = refusal("coroner-system", &blockers).unwrap();
        for needle in [
            "worker-1-x7k2p (node worker-1, phase Done, Succeeded=True (NodeFenced), released",
            "pauseRequests",
            "kubectl delete coronerremediation -n coroner-system <name>",
            "--no-hooks",
        ] {
            assert!(text.contains(needle), "{needle} not in:\n{text}");
        }
    }

    #[test]
    fn a_node_with_an_unjudged_release_is_named_with_its_bootid_and_blocks_nothing() {
        let record = guard::UnconfirmedRelease {
            uid: "u-1".into(),
            remediation: "worker-1-x7k2p".into(),
            boot_id: "boot-a".into(),
        };
        let meta = |name: &str, value: Option<String>| ObjectMeta {
            name: Some(name.into()),
            annotations: value.map(|v| [(guard::UNCONFIRMED_ANNOTATION.to_owned(), v)].into()),
            ..ObjectMeta::default()
        };
        let nodes = [
            meta("worker-1", Some(serde_json::to_string(&record).unwrap())),
            meta("worker-2", None),
            meta("worker-3", Some("{".into())),
        ];
        let unwatched = unwatched(&nodes);
        assert_eq!(
            unwatched,
            vec![("worker-1".to_owned(), Ok(record)), ("worker-3".to_owned(), Err("{".to_owned()))],
            "a record that does not parse is named too"
        );
        let text = unwatched_notice(&unwatched).unwrap();
        for needle in [
            "node worker-1 (remediation worker-1-x7k2p, bootID before the fence boot-a)",
            "node worker-3 (a record coroner cannot read",
            "FenceDidNotTakeEffect",
        ] {
            assert!(text.contains(needle), "{needle} not in:\n{text}");
        }
        assert_eq!(unwatched_notice(&[]), None);
    }

    #[test]
    fn nothing_blocks_without_remediations() {
        assert_eq!(refusal("coroner-system", &blockers(&[remediation("gone", false, false)])), None);
    }
}
