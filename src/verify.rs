//! What `coroner verify` answers, as pure functions: which nodes a NodeHealthCheck that uses a coroner
//! template selects, how a binding's TLS is trusted, and whether a fence would go through were a node
//! `Ready=Unknown` now. The controller gathers the inputs (`controller::verify`); the BMC reading is
//! the binding verifier's, the gates are the fence's.

use std::collections::BTreeMap;

use k8s_openapi::{
    api::core::v1::{Node, NodeCondition},
    apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta},
};
use kube::{
    ResourceExt,
    core::{Selector, SelectorExt},
};
use serde_json::Value;

use crate::{
    api::{BmcBinding, NodeVerification},
    gates::Gate,
    verification::Check,
};

/// A `CoronerRemediationTemplate` a NodeHealthCheck names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TemplateRef {
    pub namespace: String,
    pub name: String,
}

/// The coroner templates a NodeHealthCheck (as NHC's API serves it, untyped) names: its
/// `remediationTemplate`, or those of its `escalatingRemediations`.
pub fn coroner_templates(nhc: &Value) -> Vec<TemplateRef> {
    templates_of_kind(nhc, "CoronerRemediationTemplate")
}

/// The templates of `kind` a NodeHealthCheck names (FAR's, for the importer).
pub fn templates_of_kind(nhc: &Value, kind: &str) -> Vec<TemplateRef> {
    let spec = &nhc["spec"];
    let single = std::iter::once(&spec["remediationTemplate"]);
    let escalating = spec["escalatingRemediations"].as_array().into_iter().flatten().map(|e| &e["remediationTemplate"]);
    single
        .chain(escalating)
        .filter(|t| t["kind"] == kind)
        .filter_map(|t| {
            Some(TemplateRef { namespace: t["namespace"].as_str()?.to_owned(), name: t["name"].as_str()?.to_owned() })
        })
        .collect()
}

/// Whether a NodeHealthCheck's selector selects a node with this metadata. A selector that does not
/// parse selects nothing.
pub fn selects(nhc: &Value, node: &ObjectMeta) -> bool {
    let selector = serde_json::from_value::<LabelSelector>(nhc["spec"]["selector"].clone())
        .ok()
        .and_then(|s| Selector::try_from(s).ok());
    selector.is_some_and(|selector| selector.matches(node.labels.as_ref().unwrap_or(&BTreeMap::new())))
}

/// The nodes the NodeHealthChecks using a coroner template select, each with the first such
/// template, and the cluster's other nodes (nothing remediates them through coroner). A selector that
/// does not parse selects nothing; an empty one (NHC's webhook refuses it) would select every node.
pub fn selection<'a>(
    nhcs: &[Value],
    nodes: impl IntoIterator<Item = &'a ObjectMeta> + Clone,
) -> (BTreeMap<String, TemplateRef>, Vec<String>) {
    let mut selected = BTreeMap::new();
    for nhc in nhcs {
        let Some(template) = coroner_templates(nhc).into_iter().next() else { continue };
        for node in nodes.clone().into_iter().filter(|n| selects(nhc, n)) {
            selected.entry(node.name.clone().unwrap_or_default()).or_insert_with(|| template.clone());
        }
    }
    let unselected = nodes.into_iter().filter_map(|n| n.name.clone()).filter(|n| !selected.contains_key(n)).collect();
    (selected, unselected)
}

/// The nodes a NodeHealthCheck using a coroner template selects that no BmcBinding names: when one
/// dies, coroner can prove nothing and releases nothing (`coroner_nodes_unprotected`).
pub fn unprotected<T>(selected: &BTreeMap<String, T>, bindings: &[BmcBinding]) -> Vec<String> {
    selected.keys().filter(|n| !bindings.iter().any(|b| &b.spec.node_name == *n)).cloned().collect()
}

/// The node as a fence would find it had it died now: `Ready=Unknown` (the gates then judge the rest
/// as it is: labels, taints, other nodes, running remediations).
pub fn as_if_dead(node: &Node) -> Node {
    let mut dead = node.clone();
    let status = dead.status.get_or_insert_with(Default::default);
    let conditions = status.conditions.get_or_insert_with(Vec::new);
    conditions.retain(|c| c.type_ != "Ready");
    conditions.push(NodeCondition { type_: "Ready".into(), status: "Unknown".into(), ..NodeCondition::default() });
    dead
}

/// How a binding's BMC certificate is trusted, in words.
pub fn tls_trust(binding: &BmcBinding) -> String {
    if binding.spec.ipmi.is_some() {
        return "n/a (IPMI: no TLS)".into();
    }
    let policy = binding.spec.tls_policy();
    if policy.insecure_skip_verify {
        return "INSECURE: the certificate is not verified (insecureSkipVerify)".into();
    }
    match (&policy.ca_bundle_ref, &policy.certificate_sha256) {
        (Some(ca), _) => format!("CA bundle {:?} {}/{}", ca.kind, ca.name, ca.key),
        (None, Some(_)) => "certificate pin (SHA-256)".into(),
        (None, None) => "none set (the binding is refused)".into(),
    }
}

/// What a binding's PDU levels rest on, from the binding verifier's conditions: `None` without levels.
pub fn levels_summary(binding: &BmcBinding) -> Option<String> {
    let count = binding.spec.pdu_levels.len();
    if count == 0 {
        return None;
    }
    let outlets: usize = binding.spec.pdu_levels.iter().map(|l| l.outlets.len()).sum();
    let conditions = binding.status.as_ref().map(|s| s.conditions.as_slice()).unwrap_or_default();
    let types = [
        crate::verification::OUTLET_MAPPING_PROVEN,
        crate::verification::OUTLETS_EXCLUSIVE,
        crate::verification::PDU_TRANSPORT_SECURE,
    ];
    let mut said: Vec<String> = types
        .iter()
        .filter_map(|t| conditions.iter().find(|c| c.type_ == *t))
        .filter(|c| c.status != crate::api::conditions::TRUE)
        .map(|c| format!("{}: {}", c.reason, c.message))
        .collect();
    if said.is_empty() {
        let seen = types.iter().all(|t| conditions.iter().any(|c| c.type_ == *t));
        said.push(if seen {
            "mappings confirmed, outlets exclusive, transports secure".into()
        } else {
            "not verified yet".into()
        });
    }
    Some(format!("{count} level(s), {outlets} outlet(s) after the BMC; {}", said.join("; ")))
}

/// The answer for one node: what the BMC said (`check`, `None` without a single binding) and what
/// the gates would do with it dead (`gate`). A fence would go through only on a verified identity and
/// gates that admit it, or only make it wait (a queue, the quorum rule).
pub fn answer(node: &str, bindings: &[&BmcBinding], check: Option<&Check>, gate: &Gate) -> NodeVerification {
    let mut answer = NodeVerification {
        node: node.to_owned(),
        bindings: bindings.iter().map(|b| b.name_any()).collect(),
        ..NodeVerification::default()
    };
    if let [binding] = bindings {
        answer.endpoint = Some(binding.spec.endpoint());
        answer.tls = Some(tls_trust(binding));
        answer.credentials = Some(format!("Secret {}", binding.spec.credentials_secret_ref.name));
        answer.levels = levels_summary(binding);
    }
    answer.gates = Some(match gate {
        Gate::Admit => "Admitted".into(),
        Gate::Wait(reason, message) => format!("waits: {} ({message})", reason.as_str()),
        Gate::Refuse(reason, message) => format!("refused: {} ({message})", reason.as_str()),
    });
    let identity = match check {
        None if bindings.is_empty() => {
            Err("no BmcBinding names the node: nothing could prove its power off".to_owned())
        }
        None => Err(format!("{} BmcBindings name the node: a fence cannot tell which is meant", bindings.len())),
        Some(Check::Read { system_id, uuid, power_state, identity }) => {
            answer.power = Some(power_state.clone());
            match identity {
                Ok(matched) => Ok(format!("{matched:?} match: system {system_id} reports UUID {uuid}")),
                Err((reason, message)) => Err(format!("{}: {message}", reason.as_str())),
            }
        }
        Some(Check::Conflict(message) | Check::Invalid(message) | Check::NoNodeSystem(message)) => Err(message.clone()),
        Some(Check::Failed { reason, message } | Check::Refused { reason, message }) => {
            Err(format!("{}: {message}", reason.as_str()))
        }
    };
    if let Some(Check::Invalid(message)) = check {
        answer.credentials = Some(format!("unusable: {message}"));
    }
    let (identity, identity_problem) = match identity {
        Ok(text) => (text, None),
        Err(text) => (text.clone(), Some(text)),
    };
    answer.identity = Some(identity);
    answer.why_not = identity_problem.or_else(|| match gate {
        Gate::Refuse(reason, message) => Some(format!("{}: {message}", reason.as_str())),
        Gate::Admit | Gate::Wait(..) => None,
    });
    answer.would_fence = answer.why_not.is_none();
    answer
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use serde_json::json;

    use super::*;
    use crate::{
        api::{BmcBindingSpec, RedfishTarget, SecretRef, TlsPolicy, UuidMatch},
        contract::Reason,
    };

    fn node(name: &str, labels: &[(&str, &str)]) -> Node {
        Node {
            metadata: ObjectMeta {
                name: Some(name.into()),
                labels: Some(labels.iter().map(|(k, v)| ((*k).into(), (*v).into())).collect()),
                ..ObjectMeta::default()
            },
            ..Node::default()
        }
    }

    fn nhc(selector: Value, template: Value) -> Value {
        json!({"spec": {"selector": selector, "remediationTemplate": template}})
    }

    fn coroner_template() -> Value {
        json!({"apiVersion": "coroner.dev/v1alpha1", "kind": "CoronerRemediationTemplate", "name": "coroner-reboot", "namespace": "coroner-system"})
    }

    fn binding(tls: TlsPolicy) -> BmcBinding {
        BmcBinding::new(
            "worker-1",
            BmcBindingSpec {
                node_name: "worker-1".into(),
                redfish: Some(RedfishTarget { endpoint: "https://bmc-1".into(), system_id: None }),
                ipmi: None,
                credentials_secret_ref: SecretRef { name: "worker-1-bmc".into() },
                tls: Some(tls),
                pdu_levels: Vec::new(),
            },
        )
    }

    #[test]
    fn a_binding_s_levels_are_shown_with_what_their_mapping_rests_on() {
        let mut with = binding(TlsPolicy::default());
        assert_eq!(levels_summary(&with), None);
        with.spec.pdu_levels = vec![
            serde_json::from_value(json!({"mappingProof": "OperatorStatement", "outlets": [
                {"snmp": {"address": "pdu-a", "outlet": 3}, "credentialsSecretRef": {"name": "pdu"}},
                {"snmp": {"address": "pdu-b", "outlet": 3}, "credentialsSecretRef": {"name": "pdu"}}]}))
            .unwrap(),
        ];
        assert_eq!(levels_summary(&with).unwrap(), "1 level(s), 2 outlet(s) after the BMC; not verified yet");
        let mut status = crate::api::BmcBindingStatus::default();
        crate::verification::record_levels(
            &mut status,
            &with,
            std::slice::from_ref(&with),
            &[],
            jiff::Timestamp::UNIX_EPOCH,
        );
        with.status = Some(status);
        let shown = levels_summary(&with).unwrap();
        assert!(shown.contains("OutletMappingUnproven: level 2: stated by an operator"), "{shown}");
    }

    #[test]
    fn only_nodes_a_node_health_check_with_a_coroner_template_selects_are_selected() {
        let nodes =
            [node("w1", &[("role", "worker")]), node("cp1", &[("role", "cp")]), node("w2", &[("role", "worker")])];
        let far = json!({"kind": "FenceAgentsRemediationTemplate", "name": "far", "namespace": "far"});
        let nhcs = [
            nhc(json!({"matchLabels": {"role": "worker"}}), coroner_template()),
            nhc(json!({"matchLabels": {"role": "cp"}}), far.clone()),
        ];
        let (selected, unselected) = selection(&nhcs, nodes.iter().map(|n| &n.metadata));
        assert_eq!(selected.keys().collect::<Vec<_>>(), ["w1", "w2"]);
        let bound = binding(TlsPolicy::default());
        let mut w2 = bound.clone();
        w2.spec.node_name = "w2".into();
        assert_eq!(unprotected(&selected, &[w2]), ["w1"], "w1 has no binding");
        assert_eq!(selected["w1"], TemplateRef { namespace: "coroner-system".into(), name: "coroner-reboot".into() });
        assert_eq!(unselected, ["cp1"]);
        // A coroner template as one of the escalating remediations counts too.
        let escalating = json!({"spec": {"selector": {"matchExpressions": [{"key": "role", "operator": "In", "values": ["cp"]}]},
            "escalatingRemediations": [{"remediationTemplate": far, "order": 0}, {"remediationTemplate": coroner_template(), "order": 1}]}});
        let (selected, _) = selection(&[escalating], nodes.iter().map(|n| &n.metadata));
        assert_eq!(selected.keys().collect::<Vec<_>>(), ["cp1"]);
    }

    #[test]
    fn a_node_taken_as_dead_is_ready_unknown_and_keeps_everything_else() {
        let mut live = node("w1", &[("role", "worker")]);
        live.status = Some(k8s_openapi::api::core::v1::NodeStatus {
            conditions: Some(vec![NodeCondition {
                type_: "Ready".into(),
                status: "True".into(),
                ..Default::default()
            }]),
            ..Default::default()
        });
        let dead = as_if_dead(&live);
        let conditions = dead.status.unwrap().conditions.unwrap();
        assert_eq!(conditions.len(), 1);
        assert_eq!((conditions[0].type_.as_str(), conditions[0].status.as_str()), ("Ready", "Unknown"));
        assert_eq!(dead.metadata.labels, live.metadata.labels);
    }

    #[test]
    fn tls_is_described_as_the_binding_trusts_it_and_insecure_is_flagged() {
        let pin = TlsPolicy { certificate_sha256: Some("ab".repeat(32)), ..TlsPolicy::default() };
        assert_eq!(tls_trust(&binding(pin)), "certificate pin (SHA-256)");
        let insecure = TlsPolicy { insecure_skip_verify: true, ..TlsPolicy::default() };
        assert!(tls_trust(&binding(insecure)).starts_with("INSECURE"));
    }

    #[test]
    fn a_fence_would_go_through_only_on_a_verified_identity_and_gates_that_do_not_refuse() {
        let b = binding(TlsPolicy { certificate_sha256: Some("ab".repeat(32)), ..TlsPolicy::default() });
        let read =
            |identity| Check::Read { system_id: "1".into(), uuid: "u".into(), power_state: "On".into(), identity };
        let ok = read(Ok(UuidMatch::Exact));
        let fenced = answer("worker-1", &[&b], Some(&ok), &Gate::Admit);
        assert!(fenced.would_fence && fenced.why_not.is_none(), "{fenced:?}");
        assert_eq!(fenced.power.as_deref(), Some("On"));
        let queued = answer("worker-1", &[&b], Some(&ok), &Gate::Wait(Reason::Queued, "place 2".into()));
        assert!(queued.would_fence, "a queue only delays it");
        let excluded = answer("worker-1", &[&b], Some(&ok), &Gate::Refuse(Reason::NodeExcluded, "label".into()));
        assert!(!excluded.would_fence && excluded.why_not.unwrap().starts_with("NodeExcluded"));
        let wrong = read(Err((Reason::IdentityMismatch, "not the node's".into())));
        let refused = answer("worker-1", &[&b], Some(&wrong), &Gate::Admit);
        assert!(!refused.would_fence && refused.why_not.unwrap().starts_with("IdentityMismatch"));
        let unbound = answer("worker-2", &[], None, &Gate::Refuse(Reason::NoBmcBinding, "none".into()));
        assert!(!unbound.would_fence && unbound.why_not.unwrap().contains("no BmcBinding"));
    }
}
