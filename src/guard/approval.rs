//! R3: approvals of a release's power-on, and whether an admission policy keeps them to the
//! approvers.

use super::*;

/// R3: why no admission policy keeps the approval annotation to the approvers, or `None` when one is
/// in force: a ValidatingAdmissionPolicy (failurePolicy Fail) sent UPDATEs of Nodes, whose expressions
/// read `coroner.dev/power-on-approved`, bound with Deny.
pub fn approval_policy_problem(
    policies: &[ValidatingAdmissionPolicy],
    bindings: &[ValidatingAdmissionPolicyBinding],
) -> Option<String> {
    let guards_approvals = |p: &ValidatingAdmissionPolicy| {
        let Some(spec) = p.spec.as_ref() else { return false };
        let nodes_updated =
            spec.match_constraints.as_ref().and_then(|m| m.resource_rules.as_ref()).is_some_and(|rules| {
                rules.iter().any(|r| {
                    let has = |list: Option<&Vec<String>>, wanted: &str| {
                        list.is_some_and(|l| l.iter().any(|v| v == wanted || v == "*"))
                    };
                    has(r.resources.as_ref(), "nodes") && has(r.operations.as_ref(), "UPDATE")
                })
            });
        let reads_annotation = serde_json::to_string(&spec.validations).is_ok_and(|v| v.contains(APPROVAL_ANNOTATION))
            || serde_json::to_string(&spec.match_conditions).is_ok_and(|v| v.contains(APPROVAL_ANNOTATION));
        nodes_updated && reads_annotation && spec.failure_policy.as_deref().is_none_or(|f| f == "Fail")
    };
    let candidates: Vec<String> = policies.iter().filter(|p| guards_approvals(p)).map(ResourceExt::name_any).collect();
    if candidates.is_empty() {
        return Some(format!("no ValidatingAdmissionPolicy guards {APPROVAL_ANNOTATION} on Nodes"));
    }
    let bound = bindings.iter().any(|b| {
        b.spec.as_ref().is_some_and(|s| {
            s.policy_name.as_ref().is_some_and(|n| candidates.contains(n))
                && s.validation_actions.iter().flatten().any(|a| a == "Deny")
        })
    });
    (!bound).then(|| format!("policy {} has no binding with Deny", candidates.join(", ")))
}

/// R3: what the remediation says of the approval policy while an approval of its release stands:
/// honoured either way, but without a policy anyone who may patch the Node could have written it
/// (`ApprovalPolicy=False`, `ApprovalPolicyMissing`, once). `None`: nothing changed.
pub fn approval_policy_record(
    status: &CoronerRemediationStatus,
    problem: Option<&str>,
    now: Timestamp,
) -> Option<(CoronerRemediationStatus, Option<Notice>)> {
    let mut new = status.clone();
    let message = match problem {
        Some(why) => format!(
            "an approval of this release is honoured, but {why}: anyone who may patch the Node could have written it (apply the policy shipped with coroner, docs/install.md)"
        ),
        None => format!("an admission policy keeps {APPROVAL_ANNOTATION} to the approvers"),
    };
    let (state, reason) = match problem {
        Some(_) => (conditions::FALSE, APPROVAL_POLICY_MISSING),
        None => (conditions::TRUE, "ApprovalPolicyInForce"),
    };
    if !conditions::set(&mut new.conditions, APPROVAL_POLICY, state, reason, &message, now) {
        return None;
    }
    let notice = problem.map(|_| Notice { warning: true, reason: APPROVAL_POLICY_MISSING.into(), message });
    Some((new, notice))
}

/// An approval is for the release it names: when the remediation whose release it approves goes, its
/// finalizer takes `coroner.dev/power-on-approved` off the Node with its taints. One for another
/// release is left alone.
pub fn approval_ends(status: &CoronerRemediationStatus, node: &Node, remediation_uid: &str) -> bool {
    let id = release_id(remediation_uid, status);
    let value = node.annotations().get(APPROVAL_ANNOTATION).map(String::as_str);
    matches!(approval(id.as_deref(), value), Approval::ForThisRelease(_))
}
