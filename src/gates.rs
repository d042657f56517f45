//! Safety gates: each a named pure function that admits a fence or says why not (waiting or final).
//! They run while a remediation is Pending; the fence itself proves identity and power afterwards.

use k8s_openapi::api::core::v1::Node;

use crate::{
    api::BmcBinding,
    contract::{self, Reason},
    fence::ready_status,
};

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Gate {
    Admit,
    Wait(Reason, String),
    Refuse(Reason, String),
}

/// Everything the gates look at for one remediation.
pub struct GateInputs<'a> {
    pub node: &'a Node,
    /// The BmcBindings in coroner's namespace that name this node.
    pub bindings: &'a [BmcBinding],
    pub namespace: &'a str,
}

/// The gates in order; the first that does not admit decides.
pub fn evaluate(inputs: &GateInputs<'_>) -> Gate {
    [not_excluded(inputs.node), unreachable_only(inputs.node), one_binding(inputs)]
        .into_iter()
        .find(|gate| *gate != Gate::Admit)
        .unwrap_or(Gate::Admit)
}

/// A node labelled `remediation.medik8s.io/exclude-from-remediation` (any value) is never fenced.
pub fn not_excluded(node: &Node) -> Gate {
    let excluded = node.metadata.labels.as_ref().and_then(|l| l.get(contract::EXCLUDE_LABEL));
    match excluded {
        Some(value) => Gate::Refuse(
            Reason::NodeExcluded,
            format!("node carries {}={value:?}; remove the label to allow fencing", contract::EXCLUDE_LABEL),
        ),
        None => Gate::Admit,
    }
}

/// Only `Ready=Unknown` is fenced: `True` or `False` come from a kubelet that is still reporting.
pub fn unreachable_only(node: &Node) -> Gate {
    match ready_status(node) {
        Some("Unknown") => Gate::Admit,
        other => Gate::Refuse(
            Reason::NodeNotUnreachable,
            format!(
                "node is Ready={}: a kubelet is still reporting, so the node is not dead; coroner fences Ready=Unknown only",
                other.unwrap_or("absent")
            ),
        ),
    }
}

/// Exactly one BmcBinding must name the node.
pub fn one_binding(inputs: &GateInputs<'_>) -> Gate {
    let node = inputs.node.metadata.name.as_deref().unwrap_or_default();
    match inputs.bindings {
        [_] => Gate::Admit,
        [] => Gate::Refuse(
            Reason::NoBmcBinding,
            format!(
                "no BmcBinding in namespace {} has spec.nodeName {node}; create one with the node's Redfish endpoint, credentials Secret and CA bundle or certificate pin (see docs/install.md)",
                inputs.namespace
            ),
        ),
        several => {
            let names: Vec<_> = several.iter().filter_map(|b| b.metadata.name.as_deref()).collect();
            Gate::Refuse(
                Reason::BindingConflict,
                format!("BmcBindings {} all claim node {node}; keep exactly one", names.join(", ")),
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{NodeCondition, NodeStatus};

    use super::*;
    use crate::api::{BmcBindingSpec, RedfishTarget, SecretRef, TlsPolicy};

    fn node(ready: Option<&str>, labels: &[(&str, &str)]) -> Node {
        let mut node = Node::default();
        node.metadata.name = Some("worker-1".into());
        node.metadata.labels = Some(labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect());
        node.status = Some(NodeStatus {
            conditions: ready
                .map(|s| vec![NodeCondition { type_: "Ready".into(), status: s.into(), ..NodeCondition::default() }]),
            ..NodeStatus::default()
        });
        node
    }

    fn binding(name: &str) -> BmcBinding {
        BmcBinding::new(
            name,
            BmcBindingSpec {
                node_name: "worker-1".into(),
                redfish: RedfishTarget { endpoint: "https://10.0.0.1".into(), system_id: None },
                credentials_secret_ref: SecretRef { name: "bmc".into() },
                tls: TlsPolicy::default(),
            },
        )
    }

    fn reason(gate: Gate) -> Option<Reason> {
        match gate {
            Gate::Admit => None,
            Gate::Wait(reason, _) | Gate::Refuse(reason, _) => Some(reason),
        }
    }

    #[test]
    fn only_ready_unknown_is_admitted() {
        assert_eq!(unreachable_only(&node(Some("Unknown"), &[])), Gate::Admit);
        for ready in [Some("True"), Some("False"), None] {
            assert_eq!(reason(unreachable_only(&node(ready, &[]))), Some(Reason::NodeNotUnreachable), "{ready:?}");
        }
    }

    #[test]
    fn the_exclusion_label_refuses_whatever_its_value() {
        for value in ["true", "", "false"] {
            assert_eq!(
                reason(not_excluded(&node(Some("Unknown"), &[(contract::EXCLUDE_LABEL, value)]))),
                Some(Reason::NodeExcluded)
            );
        }
        assert_eq!(not_excluded(&node(Some("Unknown"), &[("other", "x")])), Gate::Admit);
    }

    #[test]
    fn exactly_one_binding_is_needed() {
        let n = node(Some("Unknown"), &[]);
        let (one, two) = ([binding("a")], [binding("a"), binding("b")]);
        let gate = |bindings: &[BmcBinding]| one_binding(&GateInputs { node: &n, bindings, namespace: "coroner" });
        assert_eq!(gate(&one), Gate::Admit);
        assert!(matches!(gate(&[]), Gate::Refuse(Reason::NoBmcBinding, message) if message.contains("create one")));
        assert_eq!(reason(gate(&two)), Some(Reason::BindingConflict));
    }

    #[test]
    fn the_first_refusal_decides() {
        let n = node(Some("True"), &[(contract::EXCLUDE_LABEL, "true")]);
        assert_eq!(
            reason(evaluate(&GateInputs { node: &n, bindings: &[], namespace: "coroner" })),
            Some(Reason::NodeExcluded)
        );
        let ok = node(Some("Unknown"), &[]);
        assert_eq!(evaluate(&GateInputs { node: &ok, bindings: &[binding("a")], namespace: "coroner" }), Gate::Admit);
    }
}
