//! A3's admission policy: an attestation is believed only while a ValidatingAdmissionPolicy that
//! binds `spec.attestedBy` to the requester, and keeps the spec unchanged, is in force.

use super::*;

/// CEL text compared without its whitespace outside string literals.
pub(super) fn normalise_cel(expression: &str) -> String {
    let mut out = String::with_capacity(expression.len());
    let mut quote: Option<char> = None;
    for c in expression.chars() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None if c == '\'' || c == '"' => quote = Some(c),
            None if c.is_whitespace() => continue,
            None => {}
        }
        out.push(c);
    }
    out
}

pub(super) fn selector_is_empty(selector: Option<&LabelSelector>) -> bool {
    selector.is_none_or(|s| {
        s.match_labels.as_ref().is_none_or(|m| m.is_empty())
            && s.match_expressions.as_ref().is_none_or(|e| e.is_empty())
    })
}

pub(super) fn covers(list: Option<&Vec<String>>, wanted: &str) -> bool {
    list.is_some_and(|l| l.iter().any(|v| v == wanted || v == "*"))
}

/// Whether `rules` send `operation` on coronerattestations to the policy.
pub(super) fn rules_cover(rules: &[NamedRuleWithOperations], operation: &str) -> bool {
    rules.iter().any(|r| {
        covers(r.api_groups.as_ref(), crate::api::GROUP)
            && covers(r.api_versions.as_ref(), "v1alpha1")
            && covers(r.resources.as_ref(), RESOURCE)
            && covers(r.operations.as_ref(), operation)
            && r.resource_names.as_ref().is_none_or(|n| n.is_empty())
    })
}

/// What keeps `matches` from reaching every CREATE and UPDATE of an attestation, if anything.
/// `rules_required`: a policy must name its resources; a binding without rules inherits the policy's.
pub(super) fn narrowed(matches: Option<&MatchResources>, rules_required: bool) -> Option<String> {
    let Some(m) = matches else {
        return rules_required.then(|| "it has no matchConstraints".to_owned());
    };
    if !selector_is_empty(m.namespace_selector.as_ref()) || !selector_is_empty(m.object_selector.as_ref()) {
        return Some("a namespaceSelector or objectSelector narrows it".into());
    }
    if m.exclude_resource_rules.as_ref().is_some_and(|e| !e.is_empty()) {
        return Some("it excludes resources".into());
    }
    let rules = m.resource_rules.as_deref().unwrap_or_default();
    if rules.is_empty() && !rules_required {
        return None;
    }
    ["CREATE", "UPDATE"]
        .into_iter()
        .find(|op| !rules_cover(rules, op))
        .map(|op| format!("its resourceRules do not send {op} of {RESOURCE}.{} to it", crate::api::GROUP))
}

/// Why a ValidatingAdmissionPolicy does not make attestations unforgeable, or `None` when it does:
/// it sees every CREATE and UPDATE of an attestation, fails closed, has no parameters or match
/// conditions, and carries both rules.
pub fn policy_problem(policy: &ValidatingAdmissionPolicy) -> Option<String> {
    let spec = policy.spec.as_ref()?;
    if let Some(why) = narrowed(spec.match_constraints.as_ref(), true) {
        return Some(why);
    }
    if spec.failure_policy.as_deref().is_some_and(|p| p != "Fail") {
        return Some("its failurePolicy is not Fail".into());
    }
    if spec.param_kind.is_some() {
        return Some("it takes parameters".into());
    }
    if spec.match_conditions.as_ref().is_some_and(|c| !c.is_empty()) {
        return Some("matchConditions may skip it".into());
    }
    let expressions: Vec<String> = spec.validations.iter().flatten().map(|v| normalise_cel(&v.expression)).collect();
    for rule in [CREATE_RULE, UPDATE_RULE] {
        if !expressions.contains(&normalise_cel(rule)) {
            return Some(format!("it lacks the validation `{rule}`"));
        }
    }
    None
}

/// Why a binding does not apply `policy` with Deny to every attestation, or `None` when it does.
pub fn binding_problem(binding: &ValidatingAdmissionPolicyBinding, policy: &str) -> Option<String> {
    let spec = binding.spec.as_ref()?;
    if spec.policy_name.as_deref() != Some(policy) {
        return Some(format!("it binds {:?}", spec.policy_name.as_deref().unwrap_or_default()));
    }
    if !spec.validation_actions.iter().flatten().any(|a| a == "Deny") {
        return Some("its validationActions lack Deny".into());
    }
    if spec.param_ref.is_some() {
        return Some("it names parameters".into());
    }
    narrowed(spec.match_resources.as_ref(), false)
}

/// When an object's content last changed: its creation, or the latest write to the object itself
/// (status writes, by the API server's type checker, do not count).
pub(super) fn changed_at(meta: &ObjectMeta) -> Option<Timestamp> {
    let created = meta.creation_timestamp.as_ref().map(|t| t.0);
    let written =
        meta.managed_fields.iter().flatten().filter(|f| f.subresource.as_deref().unwrap_or_default().is_empty());
    written.filter_map(|f| f.time.as_ref().map(|t| t.0)).chain(created).max()
}

/// A ValidatingAdmissionPolicy with a binding makes the attester unforgeable ([`policy_problem`],
/// [`binding_problem`]), and both were in force when the attestation was created (older by at least
/// [`POLICY_SETTLE`]). Without one, attestations are ignored.
pub fn policy_in_force(
    policies: &[ValidatingAdmissionPolicy],
    bindings: &[ValidatingAdmissionPolicyBinding],
    attested_at: Timestamp,
) -> Result<String, Refusal> {
    let missing = |why: String| {
        Err(Refusal::new(
            AttestationReason::AttestationPolicyMissing,
            format!("{why}; apply the policy shipped with coroner (docs/install.md) and create a new attestation"),
        ))
    };
    let attestation_policies: Vec<_> = policies
        .iter()
        .filter(|p| {
            let rules =
                p.spec.as_ref().and_then(|s| s.match_constraints.as_ref()).and_then(|m| m.resource_rules.as_deref());
            rules.is_some_and(|r| r.iter().any(|r| covers(r.resources.as_ref(), RESOURCE)))
        })
        .collect();
    if attestation_policies.is_empty() {
        return missing(format!("no ValidatingAdmissionPolicy matches {RESOURCE}"));
    }
    let mut problems = Vec::new();
    let mut in_force: Vec<(String, String, Option<Timestamp>)> = Vec::new();
    for policy in attestation_policies {
        let name = policy.name_any();
        if let Some(why) = policy_problem(policy) {
            problems.push(format!("policy {name}: {why}"));
            continue;
        }
        let referring: Vec<_> = bindings
            .iter()
            .filter(|b| b.spec.as_ref().and_then(|s| s.policy_name.as_deref()) == Some(name.as_str()))
            .collect();
        if referring.is_empty() {
            problems.push(format!("policy {name} has no binding"));
        }
        for binding in referring {
            match binding_problem(binding, &name) {
                Some(why) => problems.push(format!("binding {}: {why}", binding.name_any())),
                None => {
                    let changed = changed_at(&policy.metadata).max(changed_at(&binding.metadata));
                    in_force.push((name.clone(), binding.name_any(), changed));
                }
            }
        }
    }
    let Some((policy, binding, changed)) = in_force.into_iter().min_by_key(|(_, _, changed)| *changed) else {
        return missing(problems.join("; "));
    };
    let settled = changed.and_then(|c| c.checked_add(SignedDuration::try_from(POLICY_SETTLE).ok()?).ok());
    match settled {
        Some(settled) if attested_at > settled => {
            Ok(format!("ValidatingAdmissionPolicy {policy} (binding {binding}) checks the attester"))
        }
        _ => Err(Refusal::new(
            AttestationReason::AttestationPredatesPolicy,
            format!(
                "created at {attested_at}, not more than {}s after policy {policy} or binding {binding} last changed ({}): its attester may not have been checked; create a new attestation",
                POLICY_SETTLE.as_secs(),
                changed.map(|c| c.to_string()).unwrap_or_else(|| "unknown".into())
            ),
        )),
    }
}
