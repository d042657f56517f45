//! Attestations: when no BMC can answer, a person's audited statement that a node is dead may release
//! it. Every rule is a named pure function here; `controller::attestation` reads the world, asks
//! [`evaluate`], and writes what it decides. The same functions give `coroner attest` its preflight.
//!
//! Nothing here proves that the machine is off. What it does hold to: the attester cannot be forged
//! (a ValidatingAdmissionPolicy must be in force, older than the attestation), the node's fence ended
//! without proof, the node has stayed silent since (Ready=Unknown, the same UID, its Lease exactly as
//! it was when the fence ended: a renewed Lease is evidence of life, and nothing overrides it), and the
//! gates that need no BMC pass. A stale Lease alone never releases anything.

use std::time::Duration as StdDuration;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::{
    api::{
        admissionregistration::v1::{
            MatchResources, NamedRuleWithOperations, ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
        },
        core::v1::{Node, Pod},
    },
    apimachinery::pkg::apis::meta::v1::{LabelSelector, MicroTime, ObjectMeta, Time},
};
use kube::ResourceExt;

use crate::{
    api::{
        AcknowledgedReason, Acknowledgement, AttestationEvidence, AttestationLook, AttestationPhase, AttestedRelease,
        AttestedReleaseState, BmcBinding, CheckResult, CoronerAttestation, CoronerAttestationStatus,
        CoronerRemediation, CoronerRemediationStatus, Evidence, LookFound, Phase, PreconditionCheck, ReleaseEvidence,
        ReleaseKind, RemediationStrategy, conditions,
    },
    contract::{self, Reason},
    gates::{self, Gate, GateInputs, LeaseSighting, StormLimits},
    taints::{self, CoronerTaint},
};

/// The ValidatingAdmissionPolicy's rule on CREATE: the attester is the user who creates it.
pub const CREATE_RULE: &str = "request.operation != 'CREATE' || object.spec.attestedBy == request.userInfo.username";
/// Its rule on UPDATE: the spec never changes (metadata and status stay writable).
pub const UPDATE_RULE: &str = "request.operation != 'UPDATE' || object.spec == oldObject.spec";
/// The API server loads a new or changed policy asynchronously: an attestation created within this
/// time after the policy (or its binding) last changed may have been admitted without it.
pub const POLICY_SETTLE: StdDuration = StdDuration::from_secs(5);
/// The attestation's one condition; on a remediation, set by an attested release (A3).
pub const RELEASED: &str = "Released";
/// The `Released` condition's reason on a remediation released by attestation.
pub const OPERATOR_ATTESTED: &str = "OperatorAttested";

const RESOURCE: &str = "coronerattestations";

macro_rules! reasons {
    ($($name:ident => $finality:ident, $meaning:literal;)+) => {
        /// Why an attestation does not release (yet): the reason of its `Released=False` condition and
        /// of the Warning Event. `docs/safety.md` carries the same table (a test compares them).
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum AttestationReason { $($name,)+ }

        impl AttestationReason {
            pub const ALL: &'static [AttestationReason] = &[$(AttestationReason::$name,)+];

            pub fn as_str(self) -> &'static str {
                match self { $(AttestationReason::$name => stringify!($name),)+ }
            }

            pub fn finality(self) -> Finality {
                match self { $(AttestationReason::$name => Finality::$finality,)+ }
            }

            pub fn meaning(self) -> &'static str {
                match self { $(AttestationReason::$name => $meaning,)+ }
            }
        }
    };
}

/// Whether a refusal may clear by itself before the attestation expires.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Finality {
    /// Checked again until validFor runs out.
    Waiting,
    /// The attestation can never release; create a new one once the cause is gone.
    Final,
}

reasons! {
    AttestationExpired => Final, "the attestation is older than its validFor";
    AttestationPolicyMissing => Waiting, "no ValidatingAdmissionPolicy, bound with Deny everywhere, checks spec.attestedBy on CREATE and keeps spec unchanged on UPDATE: attestations are ignored";
    AttestationPredatesPolicy => Final, "the attestation was created before (or within 5s after) the policy or its binding last changed: its attester may not have been checked";
    FenceInProgress => Waiting, "a fence of the node is still running: its BMC may yet prove the power off";
    NoFailedFence => Waiting, "no CoronerRemediation for the node has ended with Succeeded=False";
    AlreadyReleased => Final, "a remediation for the node already released it";
    FenceSawLife => Final, "a fence of the node ended on evidence that the node is alive (NodeNotUnreachable, NodeAliveAfterPowerOff, OutletMappingWrong), or its Lease was renewed while the fence ran";
    BindingUnverified => Final, "the fence's BmcBinding was not verified, before the fence was admitted, at the content (spec, credential and CA values) its client had then (or no single binding was recorded then): a binding that reaches no BMC fails exactly like a dead one, so its silence is no evidence";
    BmcReportedOn => Final, "the fence's last reading of the node's verified system was not Off: its BMC showed the machine alive";
    ReadingUnrecorded => Final, "the coroner process reading the fence's machine stopped before it could record what it last read, and the fence ended without another reading: that reading may have shown the machine alive";
    NodeNotFound => Final, "the node does not exist";
    NodeUidMismatch => Final, "the node's UID is not the one attested: it was replaced";
    NodeNotUnreachable => Final, "the node is not Ready=Unknown: a kubelet is reporting";
    LeaseNotRecorded => Final, "the failed remediation recorded no Lease renewTime to compare with";
    LeaseChangedSinceFence => Final, "the node's Lease changed since the fence ended (renewed, created or deleted): evidence of life, no override";
    NodeLeaseFresh => Waiting, "coroner saw the node's Lease renewed within leaseFreshness";
    NodeExcluded => Final, "the node carries remediation.medik8s.io/exclude-from-remediation";
    ControlPlaneNever => Final, "the node is a control-plane node and the remediation's template says controlPlane: Never";
    ControlPlaneQuorumGuard => Waiting, "releasing this control-plane node now could cost etcd quorum, or another control-plane node is being fenced";
    GateRefused => Final, "a safety gate refused for a reason of its own (the message names it)";
    OutOfServiceTaintPresent => Final, "the node already carries a node.kubernetes.io/out-of-service taint that coroner does not own";
    RemediationDeleted => Final, "the remediation was deleted while the release was written; the taint was taken back";
    AwaitingDeviceLook => Waiting, "every other precondition passed: the failed fence looks through its device once more before the release (A4)";
    Superseded => Final, "the failed fence's device answered this attestation's look as the node's machine: the fence proves it off again, and only that proof releases (A4)";
    ProvenAgain => Final, "the failed fence proved the machine off again on an earlier attestation's look and that proof failed: only the fence's own proof releases the node now (A4)";
}

/// The table of attestation reasons as Markdown; `docs/safety.md` carries exactly this (a test checks).
pub fn reason_table() -> String {
    let mut table = String::from("| Reason | Waiting or final | Meaning |\n|---|---|---|\n");
    for reason in AttestationReason::ALL {
        let finality = match reason.finality() {
            Finality::Waiting => "waiting",
            Finality::Final => "final",
        };
        table.push_str(&format!("| `{}` | {finality} | {} |\n", reason.as_str(), reason.meaning()));
    }
    table
}

/// A typed refusal: the reason a user reads is the real cause.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    pub reason: AttestationReason,
    pub message: String,
    /// The moment of the evidence behind a refusal an attester may acknowledge
    /// ([`acknowledgement_clears`]); `None`: no override.
    pub evidence_at: Option<Timestamp>,
}

impl Refusal {
    fn new(reason: AttestationReason, message: impl Into<String>) -> Self {
        Self { reason, message: message.into(), evidence_at: None }
    }

    /// The same refusal, acknowledgeable as evidence seen at `at` (when known).
    fn acknowledgeable(self, at: Option<Timestamp>) -> Self {
        Self { evidence_at: at.map(|at| at.round(jiff::Unit::Second).unwrap_or(at)), ..self }
    }

    pub fn is_final(&self) -> bool {
        self.reason.finality() == Finality::Final
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.reason.as_str(), self.message)
    }
}

/// A gate's refusal as an attestation refusal (same reason name where there is one); `passed` is what
/// an admitting gate says.
fn from_gate(gate: Gate, passed: &str) -> Result<String, Refusal> {
    let (reason, message, waiting) = match gate {
        Gate::Admit => return Ok(passed.to_owned()),
        Gate::Wait(reason, message) => (reason, message, true),
        Gate::Refuse(reason, message) => (reason, message, false),
    };
    let mapped = match reason {
        Reason::NodeExcluded => AttestationReason::NodeExcluded,
        Reason::NodeNotUnreachable => AttestationReason::NodeNotUnreachable,
        Reason::ControlPlaneNever => AttestationReason::ControlPlaneNever,
        Reason::NodeLeaseFresh => AttestationReason::NodeLeaseFresh,
        Reason::ControlPlaneQuorumGuard => AttestationReason::ControlPlaneQuorumGuard,
        other => {
            let how = if waiting { "waits" } else { "refuses" };
            return Err(Refusal::new(AttestationReason::GateRefused, format!("{} {how}: {message}", other.as_str())));
        }
    };
    Err(Refusal::new(mapped, message))
}

// The preconditions ---------------------------------------------------------------------------------

/// The preconditions, in the order they are checked and listed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Precondition {
    NotExpired,
    PolicyInForce,
    FenceEndedWithoutProof,
    NoLifeInFence,
    BindingVerifiedAtAdmission,
    NodeIsTheAttestedOne,
    NodeUnreachable,
    NoNewBoot,
    LeaseUnchangedSinceFence,
    LeaseStale,
    NotExcluded,
    ControlPlaneAllowed,
    ControlPlaneQuorum,
    NoForeignOutOfServiceTaint,
    DeviceLooked,
}

impl Precondition {
    pub const ALL: [Precondition; 15] = [
        Self::NotExpired,
        Self::PolicyInForce,
        Self::FenceEndedWithoutProof,
        Self::NoLifeInFence,
        Self::BindingVerifiedAtAdmission,
        Self::NodeIsTheAttestedOne,
        Self::NodeUnreachable,
        Self::NoNewBoot,
        Self::LeaseUnchangedSinceFence,
        Self::LeaseStale,
        Self::NotExcluded,
        Self::ControlPlaneAllowed,
        Self::ControlPlaneQuorum,
        Self::NoForeignOutOfServiceTaint,
        Self::DeviceLooked,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::NotExpired => "NotExpired",
            Self::PolicyInForce => "PolicyInForce",
            Self::FenceEndedWithoutProof => "FenceEndedWithoutProof",
            Self::NoLifeInFence => "NoLifeInFence",
            Self::BindingVerifiedAtAdmission => "BindingVerifiedAtAdmission",
            Self::NodeIsTheAttestedOne => "NodeIsTheAttestedOne",
            Self::NodeUnreachable => "NodeUnreachable",
            Self::NoNewBoot => "NoNewBoot",
            Self::LeaseUnchangedSinceFence => "LeaseUnchangedSinceFence",
            Self::LeaseStale => "LeaseStale",
            Self::NotExcluded => "NotExcluded",
            Self::ControlPlaneAllowed => "ControlPlaneAllowed",
            Self::ControlPlaneQuorum => "ControlPlaneQuorum",
            Self::NoForeignOutOfServiceTaint => "NoForeignOutOfServiceTaint",
            Self::DeviceLooked => "DeviceLooked",
        }
    }
}

/// The attestation is younger than its validFor (timed from its server-set creationTimestamp).
pub fn not_expired(created: Timestamp, valid_for: StdDuration, now: Timestamp) -> Result<String, Refusal> {
    let age = StdDuration::try_from(now.duration_since(created)).unwrap_or_default();
    if age < valid_for {
        Ok(format!("created {}s ago, valid for {}s", age.as_secs(), valid_for.as_secs()))
    } else {
        Err(Refusal::new(
            AttestationReason::AttestationExpired,
            format!(
                "created {}s ago, valid for {}s; create a new attestation if the node is still dead",
                age.as_secs(),
                valid_for.as_secs()
            ),
        ))
    }
}

/// CEL text compared without its whitespace outside string literals.
fn normalise_cel(expression: &str) -> String {
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

fn selector_is_empty(selector: Option<&LabelSelector>) -> bool {
    selector.is_none_or(|s| {
        s.match_labels.as_ref().is_none_or(|m| m.is_empty())
            && s.match_expressions.as_ref().is_none_or(|e| e.is_empty())
    })
}

fn covers(list: Option<&Vec<String>>, wanted: &str) -> bool {
    list.is_some_and(|l| l.iter().any(|v| v == wanted || v == "*"))
}

/// Whether `rules` send `operation` on coronerattestations to the policy.
fn rules_cover(rules: &[NamedRuleWithOperations], operation: &str) -> bool {
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
fn narrowed(matches: Option<&MatchResources>, rules_required: bool) -> Option<String> {
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
fn changed_at(meta: &ObjectMeta) -> Option<Timestamp> {
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

fn succeeded_condition(r: &CoronerRemediation) -> Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
    conditions::find(&r.status.as_ref()?.conditions, contract::SUCCEEDED)
}

fn release_of(r: &CoronerRemediation) -> Option<&ReleaseEvidence> {
    r.status.as_ref()?.evidence.as_ref()?.release.as_ref()
}

/// The record of `attestation_uid`'s release on the remediation, if it has one.
pub fn attested_record<'r>(r: &'r CoronerRemediation, attestation_uid: &str) -> Option<&'r AttestationEvidence> {
    release_of(r)
        .filter(|release| release.kind == ReleaseKind::OperatorAttested)
        .and_then(|release| release.attestation.as_ref())
        .filter(|a| a.uid == attestation_uid)
}

/// The remediation whose fence the attestation completes: one for the node (its UID, where the
/// remediation recorded one) that ended with `Succeeded=False` (nhc-timed-out or not), the latest to
/// fail. No fence of the node may still run, none may have released it already (unless by this very
/// attestation: a release being resumed), and none may have ended on evidence of life.
pub fn fence_ended_without_proof<'r>(
    attestation: &CoronerAttestation,
    remediations: &'r [CoronerRemediation],
) -> Result<&'r CoronerRemediation, Refusal> {
    let spec = &attestation.spec;
    let uid = attestation.uid().unwrap_or_default();
    let for_node: Vec<&CoronerRemediation> = remediations
        .iter()
        .filter(|r| contract::node_name(&r.metadata) == Some(spec.node_name.as_str()))
        .filter(|r| r.metadata.deletion_timestamp.is_none())
        .filter(|r| {
            let admitted = r.status.as_ref().and_then(|s| s.evidence.as_ref()?.node.as_ref()).map(|n| n.uid.as_str());
            admitted.is_none_or(|admitted| admitted == spec.node_uid)
        })
        .collect();
    // A4: this attestation's look found the machine, before anything else (a crash between the
    // fence's reopening and this attestation's own status write leaves it live until now).
    if let Some(proving) =
        for_node.iter().find(|r| look_of(r).is_some_and(|l| l.attestation_uid == uid && proves_again(l)))
    {
        return Err(Refusal::new(
            AttestationReason::Superseded,
            format!(
                "remediation {}'s device answered this attestation's look as the node's machine ({}): its fence proves it off again, and only that proof releases",
                proving.name_any(),
                look_of(proving).and_then(|l| l.message.clone()).unwrap_or_default()
            ),
        ));
    }
    if let Some(ours) = for_node.iter().find(|r| !uid.is_empty() && attested_record(r, &uid).is_some()) {
        return Ok(ours);
    }
    if let Some(released) = for_node.iter().find(|r| release_of(r).is_some()) {
        let how = match release_of(released).and_then(|r| r.attestation.as_ref()) {
            Some(a) => format!("on attestation {} by {}", a.name, a.attested_by),
            None => "with a BMC proof".to_owned(),
        };
        return Err(Refusal::new(
            AttestationReason::AlreadyReleased,
            format!("remediation {} already released node {} {how}", released.name_any(), spec.node_name),
        ));
    }
    if let Some(running) =
        for_node.iter().find(|r| !r.status.as_ref().and_then(|s| s.phase).is_some_and(Phase::is_terminal))
    {
        let phase = running.status.as_ref().and_then(|s| s.phase).unwrap_or_default();
        return Err(Refusal::new(
            AttestationReason::FenceInProgress,
            format!(
                "remediation {} is still fencing node {} (phase {})",
                running.name_any(),
                spec.node_name,
                phase.as_str()
            ),
        ));
    }
    let failed: Vec<&CoronerRemediation> = for_node
        .iter()
        .copied()
        .filter(|r| succeeded_condition(r).is_some_and(|c| c.status == conditions::FALSE))
        .collect();
    // OutletMappingWrong: the node's BMC still answered for its machine with a level's outlets Off.
    let life = [Reason::NodeNotUnreachable, Reason::NodeAliveAfterPowerOff, Reason::OutletMappingWrong];
    if let Some(alive) =
        failed.iter().find(|r| succeeded_condition(r).is_some_and(|c| life.iter().any(|l| l.as_str() == c.reason)))
    {
        let reason = succeeded_condition(alive).map(|c| c.reason.clone()).unwrap_or_default();
        return Err(Refusal::new(
            AttestationReason::FenceSawLife,
            format!("remediation {} ended with {reason}: the node showed life", alive.name_any()),
        ));
    }
    if let Some(again) = failed.iter().find(|r| look_of(r).is_some_and(proves_again)) {
        let look = look_of(again).map(|l| l.attestation.clone()).unwrap_or_default();
        let ended = again
            .status
            .as_ref()
            .and_then(|s| conditions::find(&s.conditions, contract::PROCESSING))
            .map(|c| c.reason.clone())
            .unwrap_or_default();
        return Err(Refusal::new(
            AttestationReason::ProvenAgain,
            format!(
                "remediation {} proved the machine off again on attestation {look}'s look and that proof ended {ended}: only the fence's own proof releases node {}",
                again.name_any(),
                spec.node_name
            ),
        ));
    }
    failed.into_iter().max_by_key(|r| succeeded_condition(r).map(|c| c.last_transition_time.0)).ok_or_else(|| {
        Refusal::new(
            AttestationReason::NoFailedFence,
            format!(
                "no remediation for node {} (UID {}) has ended with Succeeded=False; an attestation is for a node whose fence could not prove it dead",
                spec.node_name, spec.node_uid
            ),
        )
    })
}

fn look_of(remediation: &CoronerRemediation) -> Option<&AttestationLook> {
    remediation.status.as_ref()?.evidence.as_ref()?.attestation_look.as_ref()
}

fn proves_again(look: &AttestationLook) -> bool {
    look.found == Some(LookFound::ProvingAgain)
}

/// How long a look stands for the attestation that asked: the fence's `leaseFreshness`, the time
/// within which a sign of life counts as now. A look not taken never stands.
fn look_stands(look: &AttestationLook, remediation: &CoronerRemediation, now: Timestamp) -> bool {
    let freshness = admitted_spec(remediation).lease_freshness.get();
    look.found.is_some()
        && look
            .looked_at
            .as_ref()
            .is_some_and(|at| StdDuration::try_from(now.duration_since(at.0)).unwrap_or_default() <= freshness)
}

/// A4: the failed fence looked through its device once more for this attestation, within the
/// fence's `leaseFreshness`, and its device did not answer as the node's machine (what it showed is
/// recorded, and A1 judges it). Until then the attestation waits (`AwaitingDeviceLook`), and
/// coroner asks for the look ([`look_asked`]).
pub fn device_looked(
    remediation: &CoronerRemediation,
    attestation_uid: &str,
    now: Timestamp,
) -> Result<String, Refusal> {
    match look_of(remediation) {
        Some(look)
            if look.attestation_uid == attestation_uid
                && !proves_again(look)
                && look_stands(look, remediation, now) =>
        {
            let at = look.looked_at.as_ref().map(|t| t.0.to_string()).unwrap_or_default();
            let found = look.found.map(|f| format!("{f:?}")).unwrap_or_default();
            Ok(format!(
                "the fence's device was asked again at {at}: {found} ({})",
                look.message.clone().unwrap_or_default()
            ))
        }
        _ => Err(Refusal::new(
            AttestationReason::AwaitingDeviceLook,
            format!("remediation {} looks through its device once more before the release", remediation.name_any()),
        )),
    }
}

/// A4: the remediation's status with this attestation's look asked for, when it must be: the fence
/// failed, released nothing and proves nothing again, no ask is pending (this attestation's or
/// another's), and this attestation has no look that stands or was not taken.
pub fn look_asked(
    remediation: &CoronerRemediation,
    attestation: &CoronerAttestation,
    plan: &ReleasePlan,
    now: Timestamp,
) -> Option<CoronerRemediationStatus> {
    let status = remediation.status.as_ref()?;
    let uid = attestation.uid()?;
    let released = status.evidence.as_ref().is_some_and(|e| e.release.is_some())
        || status.progress.as_ref().is_some_and(|p| p.release_begun.is_some());
    if status.phase != Some(Phase::Failed) || released {
        return None;
    }
    // An ask still pending is answered first, whoever asked (two attestations never take turns
    // overwriting each other's); a look not taken is not asked for again by the same attestation.
    if let Some(look) = look_of(remediation)
        && (proves_again(look)
            || look.looked_at.is_none()
            || (look.attestation_uid == uid && (look.found.is_none() || look_stands(look, remediation, now))))
    {
        return None;
    }
    let mut asked = status.clone();
    asked.evidence.get_or_insert_with(Default::default).attestation_look = Some(AttestationLook {
        attestation: attestation.name_any(),
        attestation_uid: uid,
        requested_at: MicroTime(now),
        may_prove_again: plan.acknowledged.is_empty(),
        nhc_timed_out: contract::nhc_timed_out(&remediation.metadata).map(str::to_owned),
        looked_at: None,
        found: None,
        message: None,
    });
    Some(asked)
}

/// A1: nothing the failed fence recorded showed the machine alive — judged from what it recorded,
/// never from a baseline it updated: its last reading of the verified system was `Off` (or there was
/// none), and the node's Lease stayed as it was at admission until the fence failed. Every sign of
/// life it finds, in order: an attester may acknowledge some ([`acknowledgement_clears`]), and an
/// acknowledgement clears only the one it names, never the others.
/// `remembered`: what this process's fence last read, when its status write failed.
pub fn no_life_in_fence(remediation: &CoronerRemediation, remembered: Option<&str>) -> Result<String, Vec<Refusal>> {
    let status = remediation.status.as_ref();
    let progress = status.and_then(|s| s.progress.as_ref());
    let recorded = progress.and_then(|p| p.last_power_state.as_deref());
    let mut refusals = Vec::new();
    if let Some(power) =
        [recorded, remembered].into_iter().flatten().find(|p| crate::bmc::PowerState::recorded_shows_life(p))
    {
        // An `On` the fence recorded from a BMC that has not answered since may be acknowledged
        // (its moment: that answer); one from a BMC that still answers, or one only this process
        // remembers, may not.
        let answered = progress.and_then(|p| p.last_answer_at.as_ref()).map(|t| t.0);
        let tried = progress.and_then(|p| p.last_reading_at.as_ref()).map(|t| t.0);
        // Life after coroner's own ForceOff has no override, however dark the BMC went since.
        let resets = status.and_then(|s| s.evidence.as_ref()?.power_off.as_ref()).map(|p| p.resets.as_slice());
        let after_force_off = |at: Timestamp| resets.unwrap_or_default().iter().any(|r| r.sent_at.0 < at);
        let dark_since = answered.filter(|answered| {
            recorded == Some(power) && tried.is_some_and(|t| t > *answered) && !after_force_off(*answered)
        });
        let no_override =
            "there is no override (fix the mapping, or switch the machine off at its console so its BMC reads Off)";
        let why = match (dark_since, answered) {
            (Some(at), _) => format!("its BMC has not answered since {at}"),
            (None, Some(at)) if after_force_off(at) => format!("read after coroner's ForceOff: {no_override}"),
            _ => no_override.to_owned(),
        };
        refusals.push(
            Refusal::new(
                AttestationReason::BmcReportedOn,
                format!(
                    "the last reading of remediation {} found the machine's power {power}, not Off: its BMC showed it alive; {why}",
                    remediation.name_any()
                ),
            )
            .acknowledgeable(dark_since),
        );
    }
    // A4: while a look is asked for, its reader is named and its reading not yet recorded; the
    // attestation waits for the look (DeviceLooked), and is judged on what it recorded.
    let looking = status.is_some_and(|s| crate::fence::look_pending(s).is_some());
    if let Some(reader) =
        progress.filter(|_| !looking).and_then(|p| p.reader.as_deref().or(p.unrecorded_reader.as_deref()))
    {
        refusals.push(Refusal::new(
            AttestationReason::ReadingUnrecorded,
            format!(
                "coroner process {reader} was reading remediation {}'s machine and stopped before it could record what it last read, and the fence ended without another reading: that reading may have shown the machine alive. A fence that reads again records it: delete the remediation (NodeHealthCheck creates a new one) and attest once that one fails",
                remediation.name_any()
            ),
        ));
    }
    // The guard's readings are readings of the verified system too: its last one must not show life.
    let guard = status.and_then(|s| conditions::find(&s.conditions, crate::guard::GUARD));
    if let Some(guard) = guard.filter(|c| c.reason == crate::guard::POWERED_ON) {
        let seen = status.and_then(|s| s.guard.as_ref()?.last_finding.as_ref()).map_or("not Off", |f| f.seen.as_str());
        refusals.push(Refusal::new(
            AttestationReason::BmcReportedOn,
            format!(
                "the guard's last reading of remediation {}'s released machine found its power {seen} ({}): its BMC showed it alive; there is no override",
                remediation.name_any(),
                guard.message
            ),
        ));
    }
    let admitted = status.and_then(|s| s.evidence.as_ref()?.node.as_ref()).map(|n| {
        if n.lease_present { lease_mark(Some(n.lease_renew_time.as_ref().map(|t| t.0))) } else { Timestamp::UNIX_EPOCH }
    });
    let failed = progress.and_then(|p| p.lease_renew_time_at_failure.as_ref()).map(|t| t.0);
    if let (Some(admitted), Some(failed)) = (admitted, failed)
        && admitted != failed
    {
        // Life after coroner's power action has no override (the binding may reach another machine).
        // It is dated by when the fence first saw the Lease change (coroner's clock), never by the
        // kubelet's renewTime: a kubelet clock behind would move a renewal after the power action
        // before it. A change no step of the fence saw is after it.
        let power_action = first_power_action(remediation);
        let seen = progress.and_then(|p| p.lease_change_seen_at.as_ref()).map(|t| t.0);
        let before =
            failed != Timestamp::UNIX_EPOCH && seen.is_some_and(|seen| before_power_action(seen, power_action));
        let after = match power_action.filter(|_| !before) {
            Some(at) => format!(
                "; it changed after coroner's first power action ({at}): the machine switched off may not be this node, and there is no override"
            ),
            None => String::new(),
        };
        refusals.push(
            Refusal::new(
                AttestationReason::FenceSawLife,
                format!(
                    "the node's Lease changed while remediation {} ran ({} at admission, {} when it failed): something on the node was alive{after}",
                    remediation.name_any(),
                    describe_mark(admitted),
                    describe_mark(failed)
                ),
            )
            .acknowledgeable(seen.filter(|_| before)),
        );
    }
    if !refusals.is_empty() {
        return Err(refusals);
    }
    let last = progress.and_then(|p| p.last_power_state.as_deref()).unwrap_or("no reading");
    Ok(format!("the fence's last reading: {last}; the Lease unchanged while it ran"))
}

/// A2: the failed fence's BmcBinding was verified, before the fence was admitted, at the content the
/// fence's client was made of then (a keyed digest of the spec and of the credential and CA values:
/// `verification::at_admission`): a binding edited since its last verification (a mistyped
/// endpoint, a wrong password, another CA bundle) reaches no BMC and fails exactly like a dead one.
/// Judged from the record taken at admission, so a verification after it does not count; the
/// binding's metadata, or its Secret's, is not its content. The identity's own client, when it was
/// built again during the fence, must be that content too. A record taken before contents were
/// recorded is refused (acknowledgeable). A fence that found no binding contacted no device.
pub fn binding_verified_at_admission(remediation: &CoronerRemediation) -> Result<String, Refusal> {
    let status = remediation.status.as_ref();
    let node = status.and_then(|s| s.evidence.as_ref()?.node.as_ref());
    let failed_on =
        status.and_then(|s| conditions::find(&s.conditions, contract::SUCCEEDED)).map(|c| c.reason.as_str());
    if failed_on == Some(Reason::NoBmcBinding.as_str()) {
        return Ok("no BmcBinding named the node: the fence contacted no device".into());
    }
    let name = remediation.name_any();
    let Some(binding) = node.and_then(|n| n.binding.as_ref()) else {
        return Err(Refusal::new(
            AttestationReason::BindingUnverified,
            format!(
                "remediation {name} recorded no single BmcBinding at admission (several named the node, or it predates that record): nothing shows the binding it used was verified"
            ),
        ));
    };
    let history = binding_history(binding);
    // The client the identity was then read through, when the fence got that far: built again from
    // the Secret after a rejection, it may be another content than the admission's.
    let identity = status.and_then(|s| s.evidence.as_ref()?.identity.as_ref()?.binding_content.as_ref());
    let verified = binding.verified_at.is_some()
        && binding.content.as_ref().is_some_and(|content| binding.verified_content.as_ref() == Some(content));
    if verified && identity.is_some_and(|used| binding.verified_content.as_ref() != Some(used)) {
        let admitted = node.map(|n| n.admitted_at.0);
        return Err(Refusal::new(
            AttestationReason::BindingUnverified,
            format!(
                "BmcBinding {} was {history}, but remediation {name} read the identity with other credentials or CA bundle than the ones verified (read again from the Secret during the fence): fix the binding so that it verifies (the guard and the next fence read through it)",
                binding.name
            ),
        )
        .acknowledgeable(admitted));
    }
    if verified {
        return Ok(format!("BmcBinding {} {history}, at the content its client had at admission", binding.name));
    }
    let admitted = node.map(|n| n.admitted_at.0);
    Err(Refusal::new(
        AttestationReason::BindingUnverified,
        format!(
            "BmcBinding {} was {history}; when remediation {name} was admitted it had generation {} and {}: a binding that reaches no BMC fails like a dead one; fix the binding so that it verifies (the guard and the next fence read through it)",
            binding.name,
            binding.generation,
            unverified_because(binding)
        ),
    )
    .acknowledgeable(admitted))
}

/// Why an admission record does not show its binding verified at its content.
fn unverified_because(binding: &crate::api::BindingAtAdmission) -> String {
    match (&binding.content, &binding.verified_content, &binding.verified_at) {
        (_, _, None) => "no verification before it".to_owned(),
        (None, _, _) => {
            "no content recorded (its Secret or CA bundle could not be read, or the record predates contents)"
                .to_owned()
        }
        (Some(_), None, _) => {
            "no content recorded for that verification (made by an earlier coroner version)".to_owned()
        }
        (Some(_), Some(_), _) if binding.verified_generation == Some(binding.generation) => {
            "another content at the same generation: its credentials or CA bundle changed since".to_owned()
        }
        (Some(_), Some(_), _) => {
            "another content: its spec changed since (and maybe its credentials or CA bundle)".to_owned()
        }
    }
}

/// "last verified <time> at generation <n>", or "never verified".
fn binding_history(binding: &crate::api::BindingAtAdmission) -> String {
    if let (Some(at), Some(uid)) = (&binding.verified_at, &binding.verified_by_earlier_object) {
        return format!(
            "last verified {} as an earlier BmcBinding object of the node (UID {uid}, no longer its binding)",
            at.0
        );
    }
    match (&binding.verified_at, binding.verified_generation) {
        (Some(at), Some(generation)) => format!("last verified {} at generation {generation}", at.0),
        (Some(at), None) => format!("last verified {}", at.0),
        _ => "never verified".to_owned(),
    }
}

/// The node exists and is the Node object attested (same UID).
pub fn node_is_the_attested_one(node: Option<&Node>, name: &str, uid: &str) -> Result<String, Refusal> {
    let Some(node) = node else {
        return Err(Refusal::new(AttestationReason::NodeNotFound, format!("Node {name} does not exist")));
    };
    let actual = node.metadata.uid.as_deref().unwrap_or_default();
    if actual == uid {
        Ok(format!("Node {name} has UID {uid}"))
    } else {
        Err(Refusal::new(
            AttestationReason::NodeUidMismatch,
            format!("Node {name} has UID {actual}, the attestation names {uid}: it is another Node object now"),
        ))
    }
}

/// The node is `Ready=Unknown`: no kubelet reports for it. Never `False`, whatever the template says:
/// a kubelet that reports NotReady is alive.
pub fn node_unreachable(node: &Node) -> Result<String, Refusal> {
    match crate::fence::ready_status(node) {
        Some(conditions::UNKNOWN) => Ok("Ready=Unknown".into()),
        other => Err(Refusal::new(
            AttestationReason::NodeNotUnreachable,
            format!("node is Ready={}: a kubelet is reporting, so the node is not dead", other.unwrap_or("absent")),
        )),
    }
}

/// The bootID the failed fence's admission recorded (empty: none recorded).
pub fn admitted_boot_id(remediation: &CoronerRemediation) -> &str {
    remediation.status.as_ref().and_then(|s| s.evidence.as_ref()?.node.as_ref()).map_or("", |n| n.boot_id.as_str())
}

/// A1: the last new bootID the failed fence saw the node report, and when it first saw it, on
/// coroner's clock ([`crate::fence::note_life_seen`]); none when no step of the fence saw one.
pub fn boot_seen(remediation: &CoronerRemediation) -> Option<(String, Timestamp)> {
    let progress = remediation.status.as_ref()?.progress.as_ref()?;
    Some((progress.boot_seen.clone()?, progress.boot_change_seen_at.as_ref()?.0))
}

/// A1: a Node whose kubelet reported a bootID other than the one the fence admitted the node with
/// booted since: something ran on that machine, whatever it reads now (`FenceSawLife`). It is dated
/// by when the fence first saw that boot (`seen`: the bootID and when, coroner's clock), never by the
/// kubelet's heartbeat time: a boot the fence never saw is first seen now, after the power action,
/// and has no override.
pub fn no_new_boot(
    admitted: &str,
    node: &Node,
    power_action: Option<Timestamp>,
    seen: Option<(String, Timestamp)>,
) -> Result<String, Refusal> {
    let now = node.status.as_ref().and_then(|s| s.node_info.as_ref()).map_or("", |i| i.boot_id.as_str());
    if admitted.is_empty() || now == admitted {
        return Ok(if admitted.is_empty() {
            "no bootID recorded at admission".into()
        } else {
            format!("bootID {now} as at admission")
        });
    }
    let seen = seen.filter(|(boot, _)| boot == now).map(|(_, at)| at);
    // A boot first seen after coroner's power action (or never seen by the fence) has no override.
    let before = seen.is_some_and(|at| before_power_action(at, power_action));
    let after = if before {
        ""
    } else {
        "; first seen after coroner's first power action (or never by the fence): no override"
    };
    Err(Refusal::new(
        AttestationReason::FenceSawLife,
        format!(
            "the node reports bootID {now}, not {admitted} as when its fence was admitted: the machine booted since, and its kubelet ran{after}"
        ),
    )
    .acknowledgeable(seen.filter(|_| before)))
}

/// How far a kubelet's clock may be from coroner's when a sign of life is placed before or after
/// the power action: life this close to it counts as after (no override).
pub const CLOCK_MARGIN: SignedDuration = SignedDuration::from_secs(5);

/// A1: when the fence's power action may first have reached a device: its first recorded reset (to
/// the BMC or a level's outlets), or a ForceOff decided and not answered (it may have gone out).
pub fn first_power_action(remediation: &CoronerRemediation) -> Option<Timestamp> {
    let status = remediation.status.as_ref()?;
    let power_off = status.evidence.as_ref().and_then(|e| e.power_off.as_ref());
    let resets = power_off.into_iter().flat_map(|p| p.resets.iter().map(|r| r.sent_at.0));
    let intent = status.progress.as_ref().and_then(|p| p.intent.as_ref());
    let decided = intent.filter(|i| i.action == crate::api::PowerAction::ForceOff).map(|i| i.decided_at.0);
    resets.chain(decided).min()
}

/// Whether a sign of life at `at` came before the power action (with [`CLOCK_MARGIN`]): only then
/// may an attester acknowledge it.
fn before_power_action(at: Timestamp, power_action: Option<Timestamp>) -> bool {
    power_action.is_none_or(|action| at + CLOCK_MARGIN < action)
}

/// A node Lease as one mark to compare: its renewTime, the epoch when it has none or does not exist
/// (as the fence records it).
pub fn lease_mark(lease: Option<Option<Timestamp>>) -> Timestamp {
    lease.flatten().unwrap_or(Timestamp::UNIX_EPOCH)
}

fn describe_mark(mark: Timestamp) -> String {
    if mark == Timestamp::UNIX_EPOCH { "no renewTime (no Lease)".into() } else { format!("renewTime {mark}") }
}

/// The Lease mark the remediation recorded when its fence failed; a remediation NHC timed out before
/// it failed recorded none, and then the mark at admission (earlier, so stricter) is used.
pub fn lease_at_fence_end(remediation: &CoronerRemediation) -> Option<Timestamp> {
    let status = remediation.status.as_ref()?;
    let at_failure = status.progress.as_ref().and_then(|p| p.lease_renew_time_at_failure.as_ref()).map(|t| t.0);
    let at_admission = || {
        let node = status.evidence.as_ref()?.node.as_ref()?;
        Some(if node.lease_present {
            lease_mark(Some(node.lease_renew_time.as_ref().map(|t| t.0)))
        } else {
            Timestamp::UNIX_EPOCH
        })
    };
    at_failure.or_else(at_admission)
}

/// The node's Lease is exactly as it was when the fence ended: a renewal, a new Lease or a deleted one
/// since then refuses, and nothing overrides that.
pub fn lease_unchanged_since_fence(
    baseline: Option<Timestamp>,
    current: Option<Option<Timestamp>>,
) -> Result<String, Refusal> {
    let Some(baseline) = baseline else {
        return Err(Refusal::new(
            AttestationReason::LeaseNotRecorded,
            "the remediation recorded no Lease when its fence ended (a coroner before attestations, or no admission); nothing to compare with",
        ));
    };
    let now = lease_mark(current);
    if now == baseline {
        Ok(format!("{} as when the fence ended", describe_mark(now)))
    } else {
        Err(Refusal::new(
            AttestationReason::LeaseChangedSinceFence,
            format!(
                "the node's Lease changed since the fence ended ({} then, {} now): something on the node is alive; there is no override",
                describe_mark(baseline),
                describe_mark(now)
            ),
        ))
    }
}

/// coroner has not seen the Lease renewed within the remediation's leaseFreshness (its own clock).
pub fn lease_stale(sighting: LeaseSighting, freshness: StdDuration) -> Result<String, Refusal> {
    from_gate(gates::lease_stale(sighting, freshness), &format!("not renewed within {}s", freshness.as_secs()))
}

/// The Node carries this remediation's owner record of the out-of-service taint: its releasing update
/// was made, whatever became of the taint since (a webhook may rewrite it on the way in, R4).
pub fn release_recorded(node: &Node, remediation_uid: &str) -> bool {
    taints::ownership(node, CoronerTaint::OutOfService).is_some_and(|o| o.uid == remediation_uid)
}

/// No out-of-service taint on the node other than this remediation's own.
pub fn no_foreign_out_of_service_taint(node: &Node, remediation_uid: &str) -> Result<String, Refusal> {
    if release_recorded(node, remediation_uid) {
        return Ok("the out-of-service taint is already this remediation's".into());
    }
    let key = CoronerTaint::OutOfService.key();
    let foreign = node.spec.as_ref().and_then(|s| s.taints.as_ref()).is_some_and(|t| t.iter().any(|t| t.key == key));
    if foreign {
        Err(Refusal::new(
            AttestationReason::OutOfServiceTaintPresent,
            format!(
                "node already carries a {key} taint coroner did not add: its workloads are released already, by someone else"
            ),
        ))
    } else {
        Ok(format!("no {key} taint yet"))
    }
}

// The evaluation --------------------------------------------------------------------------------------

/// A1/A2: whether the attestation acknowledges the evidence behind `refusal`: an acknowledgement of
/// the same reason naming the same moment (to the second), on an attestation created after that
/// moment plus the template's leaseFreshness (the node then had time to show any life it had, and
/// the Lease is judged unchanged since the fence by its own precondition, which has no override).
/// `None`: no override for this refusal; `Some(Err(hint))`: not acknowledged, and how it could be.
pub fn acknowledgement_clears(
    refusal: &Refusal,
    acknowledge: &[Acknowledgement],
    created: Timestamp,
    freshness: StdDuration,
) -> Option<Result<Acknowledgement, String>> {
    let at = refusal.evidence_at?;
    let reason = AcknowledgedReason::ALL.into_iter().find(|r| r.as_str() == refusal.reason.as_str())?;
    let wanted = Acknowledgement { reason, at: Time(at) };
    let earliest = at + freshness;
    let named = acknowledge.iter().any(|a| a.reason == reason && a.at.0.as_second() == at.as_second());
    Some(match (named, created > earliest) {
        (true, true) => Ok(wanted),
        (true, false) => Err(format!(
            "; acknowledged, but by an attestation created at {created}, before {earliest} (the evidence plus leaseFreshness): create a new one"
        )),
        (false, _) => Err(format!(
            "; an attester who accepts this evidence may say so: coroner attest --acknowledge {wanted}, in an attestation created after {earliest}"
        )),
    })
}

/// A refusal met again right before the Node write that the evaluation found acknowledged: the same
/// reason and moment, in the plan's list (checked then against the attestation's creation).
pub fn acknowledged_in(plan: &ReleasePlan, refusal: &Refusal) -> bool {
    let Some(at) = refusal.evidence_at else { return false };
    plan.acknowledged
        .iter()
        .any(|a| a.reason.as_str() == refusal.reason.as_str() && a.at.0.as_second() == at.as_second())
}

/// What the cluster-wide gates look at; absent for the CLI's preflight (coroner checks them).
pub struct ClusterView<'a> {
    pub namespace: &'a str,
    pub nodes: &'a [Node],
    pub etcd_pods: &'a [Pod],
    pub bmc_bindings: &'a [BmcBinding],
    /// What this process's fences last read of their machines, by remediation UID: a reading whose
    /// status write failed counts too.
    pub remembered_power: &'a std::collections::BTreeMap<String, String>,
}

pub struct Inputs<'a> {
    pub attestation: &'a CoronerAttestation,
    pub now: Timestamp,
    /// Every ValidatingAdmissionPolicy and binding; `None`: not readable here.
    pub policies: Option<(&'a [ValidatingAdmissionPolicy], &'a [ValidatingAdmissionPolicyBinding])>,
    /// Every remediation in coroner's namespace.
    pub remediations: &'a [CoronerRemediation],
    pub node: Option<&'a Node>,
    /// The node's Lease in kube-node-lease: `None` none, else its renewTime.
    pub lease: Option<Option<Timestamp>>,
    /// coroner's own sighting of the Lease; `None`: not known here.
    pub sighting: Option<LeaseSighting>,
    pub cluster: Option<ClusterView<'a>>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    Passed(String),
    Refused(Refusal),
    NotChecked(String),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Check {
    pub precondition: Precondition,
    pub outcome: Outcome,
}

/// Everything the Node write needs, as plain data.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReleasePlan {
    pub node_name: String,
    pub node_uid: String,
    /// The bootID the fence admitted the node with: a new one in the releasing update refuses it.
    pub boot_id: String,
    pub remediation: String,
    pub remediation_uid: String,
    /// The Lease mark that must still hold in the releasing Node update.
    pub lease_baseline: Timestamp,
    /// The evidence the attester acknowledged, each of which cleared a refusal.
    pub acknowledged: Vec<Acknowledgement>,
    /// When the fence's power action may first have reached a device ([`first_power_action`]).
    pub power_action: Option<Timestamp>,
    /// The new bootID the fence saw, and when it first saw it (coroner's clock).
    pub boot_seen: Option<(String, Timestamp)>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    Release(ReleasePlan),
    /// A4: every other precondition passed; the failed fence must look through its device once
    /// more first ([`look_asked`]).
    Look(ReleasePlan),
    Wait(Refusal),
    Refuse(Refusal),
}

pub struct Evaluation<'a> {
    pub checks: Vec<Check>,
    pub remediation: Option<&'a CoronerRemediation>,
    pub verdict: Verdict,
}

/// A3: the failed fence's template as it was admitted (an edit since does not count), as the fence
/// itself judges it.
pub fn admitted_spec(remediation: &CoronerRemediation) -> &crate::api::CoronerRemediationSpec {
    remediation.status.as_ref().and_then(|s| s.admitted_spec.as_ref()).unwrap_or(&remediation.spec)
}

/// Checks every precondition, in order, and decides: the first final refusal refuses, else the first
/// waiting one waits, else the node is released. Checks that depend on one that did not pass are
/// listed as not checked.
pub fn evaluate<'a>(inputs: &Inputs<'a>) -> Evaluation<'a> {
    let attestation = inputs.attestation;
    let spec = &attestation.spec;
    let created = attestation.metadata.creation_timestamp.as_ref().map_or(inputs.now, |t| t.0);
    let mut checks = Vec::new();
    // A1's signs of life, each acknowledged on its own (the check shows the first not acknowledged).
    let mut life = Vec::new();
    let mut push = |precondition, outcome| checks.push(Check { precondition, outcome });
    let result = |r: Result<String, Refusal>| match r {
        Ok(message) => Outcome::Passed(message),
        Err(refusal) => Outcome::Refused(refusal),
    };
    let skipped = |why: &str| Outcome::NotChecked(why.to_owned());

    push(Precondition::NotExpired, result(not_expired(created, spec.valid_for.get(), inputs.now)));
    push(
        Precondition::PolicyInForce,
        match inputs.policies {
            Some((policies, bindings)) => result(policy_in_force(policies, bindings, created)),
            None => skipped("ValidatingAdmissionPolicies not readable here; coroner checks them"),
        },
    );
    let remediation = fence_ended_without_proof(attestation, inputs.remediations);
    push(
        Precondition::FenceEndedWithoutProof,
        result(remediation.as_ref().map(|r| fence_summary(r)).map_err(Clone::clone)),
    );
    let remediation = remediation.ok();
    push(
        Precondition::NoLifeInFence,
        remediation.map_or_else(
            || skipped("no failed fence"),
            |r| {
                let uid = r.uid().unwrap_or_default();
                let remembered = inputs.cluster.as_ref().and_then(|c| c.remembered_power.get(&uid)).map(String::as_str);
                match no_life_in_fence(r, remembered) {
                    Ok(message) => Outcome::Passed(message),
                    Err(found) => {
                        life = found;
                        Outcome::Refused(life[0].clone())
                    }
                }
            },
        ),
    );
    push(
        Precondition::BindingVerifiedAtAdmission,
        remediation.map_or_else(|| skipped("no failed fence"), |r| result(binding_verified_at_admission(r))),
    );
    let node = node_is_the_attested_one(inputs.node, &spec.node_name, &spec.node_uid);
    let node_ok = node.is_ok();
    push(Precondition::NodeIsTheAttestedOne, result(node));
    let node = inputs.node.filter(|_| node_ok);
    let no_node = "the node is not the attested one";
    push(Precondition::NodeUnreachable, node.map_or_else(|| skipped(no_node), |n| result(node_unreachable(n))));
    push(
        Precondition::NoNewBoot,
        match (node, remediation) {
            (Some(n), Some(r)) => result(no_new_boot(admitted_boot_id(r), n, first_power_action(r), boot_seen(r))),
            _ => skipped("needs the node and its failed fence"),
        },
    );
    let baseline = remediation.and_then(lease_at_fence_end);
    push(
        Precondition::LeaseUnchangedSinceFence,
        match remediation {
            Some(_) => result(lease_unchanged_since_fence(baseline, inputs.lease)),
            None => skipped("no failed fence to compare with"),
        },
    );
    push(
        Precondition::LeaseStale,
        match (remediation, inputs.sighting) {
            (Some(r), Some(sighting)) => result(lease_stale(sighting, admitted_spec(r).lease_freshness.get())),
            (None, _) => skipped("no failed fence"),
            (_, None) => skipped("coroner's own view of the Lease; coroner checks it"),
        },
    );
    push(
        Precondition::NotExcluded,
        node.map_or_else(|| skipped(no_node), |n| result(from_gate(gates::not_excluded(n), "no exclusion label"))),
    );
    push(
        Precondition::ControlPlaneAllowed,
        match (node, remediation) {
            (Some(n), Some(r)) => result(from_gate(
                gates::control_plane_allowed(admitted_spec(r).control_plane, n),
                "the template allows this node",
            )),
            _ => skipped("needs the node and its failed fence"),
        },
    );
    let gate_inputs = match (node, remediation, inputs.cluster.as_ref()) {
        (Some(node), Some(remediation), Some(cluster)) => Some(GateInputs {
            remediation,
            node,
            namespace: cluster.namespace,
            now: inputs.now,
            lease: inputs.sighting.unwrap_or(LeaseSighting::Missing),
            bindings: cluster.bmc_bindings,
            nodes: cluster.nodes,
            etcd_pods: cluster.etcd_pods,
            remediations: inputs.remediations,
            // A3: the storm limits are not consulted (the fence took its slot at its admission).
            recent_admissions: &[],
            limits: StormLimits { max_concurrent: u32::MAX, max_per_window: u32::MAX, window: StdDuration::ZERO },
        }),
        _ => None,
    };
    let unchecked = if inputs.cluster.is_none() {
        "coroner checks it right before the release"
    } else {
        "needs the node and its failed fence"
    };
    push(
        Precondition::ControlPlaneQuorum,
        gate_inputs.as_ref().map_or_else(
            || skipped(unchecked),
            |g| result(from_gate(gates::control_plane_quorum(g), "not a control-plane node, or quorum survives")),
        ),
    );
    push(
        Precondition::NoForeignOutOfServiceTaint,
        match (node, remediation) {
            (Some(n), Some(r)) => result(no_foreign_out_of_service_taint(n, &r.uid().unwrap_or_default())),
            _ => skipped("needs the node and its failed fence"),
        },
    );
    push(
        Precondition::DeviceLooked,
        match (remediation, inputs.cluster.is_some()) {
            (Some(r), true) => result(device_looked(r, &attestation.uid().unwrap_or_default(), inputs.now)),
            (Some(_), false) => {
                skipped("coroner has the fence look through its device once more right before the release")
            }
            (None, _) => skipped("no failed fence"),
        },
    );

    // A1/A2: refusals the attester acknowledged pass, named in the check and the release record.
    let mut acknowledged = Vec::new();
    if let Some(r) = remediation {
        let freshness = admitted_spec(r).lease_freshness.get();
        for check in &mut checks {
            let Outcome::Refused(first) = &check.outcome else { continue };
            let found =
                if check.precondition == Precondition::NoLifeInFence { life.clone() } else { vec![first.clone()] };
            let mut passed = Vec::new();
            check.outcome = Outcome::Passed(String::new());
            for mut refusal in found {
                match acknowledgement_clears(&refusal, &spec.acknowledge, created, freshness) {
                    Some(Ok(ack)) => {
                        passed.push(format!("acknowledged by the attester ({ack}): {}", refusal.message));
                        acknowledged.push(ack);
                    }
                    Some(Err(hint)) => {
                        refusal.message.push_str(&hint);
                        check.outcome = Outcome::Refused(refusal);
                        break;
                    }
                    None => {
                        check.outcome = Outcome::Refused(refusal);
                        break;
                    }
                }
            }
            if let Outcome::Passed(message) = &mut check.outcome {
                *message = passed.join("; ");
            }
        }
    }
    let refusals = || {
        checks.iter().filter_map(|c| match &c.outcome {
            Outcome::Refused(r) => Some(r.clone()),
            _ => None,
        })
    };
    let awaiting_look = |r: &Refusal| r.reason == AttestationReason::AwaitingDeviceLook;
    let verdict = if let Some(refusal) = refusals().find(Refusal::is_final) {
        Verdict::Refuse(refusal)
    } else if refusals().next().is_some()
        && refusals().all(|r| awaiting_look(&r))
        && let Some(plan) = remediation.and_then(|r| plan_of(attestation, r))
    {
        Verdict::Look(ReleasePlan { acknowledged, ..plan })
    } else if let Some(first) = refusals().next() {
        Verdict::Wait(first)
    } else if let Some(plan) = remediation.and_then(|r| plan_of(attestation, r)) {
        Verdict::Release(ReleasePlan { acknowledged, ..plan })
    } else {
        // Unreachable with every check passed; waiting is the safe answer.
        Verdict::Wait(Refusal::new(AttestationReason::NoFailedFence, "no failed fence to release on"))
    };
    Evaluation { checks, remediation, verdict }
}

/// The release of `attestation` through the failed fence `remediation`: the node attested, and the
/// Lease mark the fence ended on, which must still hold (none recorded: no plan).
pub fn plan_of(attestation: &CoronerAttestation, remediation: &CoronerRemediation) -> Option<ReleasePlan> {
    Some(ReleasePlan {
        node_name: attestation.spec.node_name.clone(),
        node_uid: attestation.spec.node_uid.clone(),
        boot_id: admitted_boot_id(remediation).to_owned(),
        remediation: remediation.name_any(),
        remediation_uid: remediation.uid().unwrap_or_default(),
        lease_baseline: lease_at_fence_end(remediation)?,
        acknowledged: Vec::new(),
        power_action: first_power_action(remediation),
        boot_seen: boot_seen(remediation),
    })
}

fn fence_summary(remediation: &CoronerRemediation) -> String {
    let condition = succeeded_condition(remediation);
    let reason = condition.map(|c| c.reason.as_str()).unwrap_or_default();
    let at = condition.map(|c| c.last_transition_time.0.to_string()).unwrap_or_default();
    let timed_out = if contract::timed_out_by_nhc(&remediation.metadata) { ", timed out by NHC" } else { "" };
    format!("remediation {} ended Succeeded=False ({reason}{timed_out}) at {at}", remediation.name_any())
}

/// The checks right inside the releasing Node update, on the Node about to be written and its
/// current Lease: the same node, still Ready=Unknown, the Lease unchanged, not excluded, no foreign
/// out-of-service taint.
/// A3: right after the releasing Node update the Lease is read again, as the BMC release does: a
/// Lease that changed since the fence ended (renewed while the update was on its way) takes the
/// taint back at once; so does one found changed under a release already on the Node.
pub fn lease_held_after_release(plan: &ReleasePlan, lease: Option<Option<Timestamp>>) -> Result<(), Refusal> {
    lease_unchanged_since_fence(Some(plan.lease_baseline), lease).map(drop).map_err(|refusal| {
        Refusal::new(refusal.reason, format!("{}; the out-of-service taint was taken back", refusal.message))
    })
}

pub fn recheck_node(plan: &ReleasePlan, node: Option<&Node>, lease: Option<Option<Timestamp>>) -> Result<(), Refusal> {
    node_is_the_attested_one(node, &plan.node_name, &plan.node_uid)?;
    let node = node.ok_or_else(|| Refusal::new(AttestationReason::NodeNotFound, "the node disappeared"))?;
    node_unreachable(node)?;
    no_new_boot(&plan.boot_id, node, plan.power_action, plan.boot_seen.clone())
        .or_else(|r| if acknowledged_in(plan, &r) { Ok(String::new()) } else { Err(r) })?;
    lease_unchanged_since_fence(Some(plan.lease_baseline), lease)?;
    from_gate(gates::not_excluded(node), "")?;
    no_foreign_out_of_service_taint(node, &plan.remediation_uid)?;
    Ok(())
}

// Status and records ----------------------------------------------------------------------------------

/// The checks as the attestation's status lists them.
pub fn check_records(checks: &[Check]) -> Vec<PreconditionCheck> {
    checks
        .iter()
        .map(|c| {
            let (result, message) = match &c.outcome {
                Outcome::Passed(m) => (CheckResult::Passed, m.clone()),
                Outcome::Refused(r) if r.is_final() => (CheckResult::Refused, r.to_string()),
                Outcome::Refused(r) => (CheckResult::Waiting, r.to_string()),
                Outcome::NotChecked(m) => (CheckResult::NotChecked, m.clone()),
            };
            PreconditionCheck { name: c.precondition.as_str().into(), result, message }
        })
        .collect()
}

/// The attestation's status after a check that did not release: Pending (waiting) or Refused.
pub fn refused_status(
    old: &CoronerAttestationStatus,
    checks: &[Check],
    refusal: &Refusal,
    now: Timestamp,
) -> CoronerAttestationStatus {
    let mut status = old.clone();
    status.phase = Some(if refusal.is_final() { AttestationPhase::Refused } else { AttestationPhase::Pending });
    status.checks = check_records(checks);
    conditions::set(
        &mut status.conditions,
        RELEASED,
        conditions::FALSE,
        refusal.reason.as_str(),
        &refusal.message,
        now,
    );
    status
}

/// The attestation's status while the release is written: deleting it no longer cancels.
pub fn releasing_status(
    old: &CoronerAttestationStatus,
    checks: &[Check],
    plan: &ReleasePlan,
    now: Timestamp,
) -> CoronerAttestationStatus {
    let mut status = old.clone();
    status.phase = Some(AttestationPhase::Releasing);
    status.checks = check_records(checks);
    status.last_checked_at = Some(MicroTime(now));
    let message =
        format!("every precondition holds; releasing node {} through remediation {}", plan.node_name, plan.remediation);
    conditions::set(&mut status.conditions, RELEASED, conditions::UNKNOWN, "Releasing", &message, now);
    status
}

/// The attestation's status once released.
pub fn released_status(
    old: &CoronerAttestationStatus,
    released: &AttestedRelease,
    now: Timestamp,
) -> CoronerAttestationStatus {
    let mut status = old.clone();
    status.phase = Some(AttestationPhase::Released);
    status.released = Some(released.clone());
    let message = format!(
        "added {}={}:{} to node, owned by remediation {}; it is removed when NodeHealthCheck deletes the remediation",
        released.taint_key, released.taint_value, released.taint_effect, released.remediation
    );
    conditions::set(&mut status.conditions, RELEASED, conditions::TRUE, "Released", &message, now);
    status
}

/// Whether a status differs from the old one in more than the time of the check (no write for a
/// recheck that found the same).
pub fn status_changed(old: &CoronerAttestationStatus, new: &CoronerAttestationStatus) -> bool {
    let strip = |s: &CoronerAttestationStatus| CoronerAttestationStatus { last_checked_at: None, ..s.clone() };
    strip(old) != strip(new)
}

/// The remediation's status with the release recorded before the Node update (`Releasing`): the
/// remediation then wants the taint it is about to own, so it never removes it.
pub fn record_release(
    status: &CoronerRemediationStatus,
    attestation: &CoronerAttestation,
    plan: &ReleasePlan,
    now: Timestamp,
) -> CoronerRemediationStatus {
    let mut status = status.clone();
    let evidence = status.evidence.get_or_insert_with(Evidence::default);
    evidence.release = Some(ReleaseEvidence {
        adopted_from: None,
        release_id: Some(crate::guard::release_id_at(&plan.remediation_uid, now)),
        kind: ReleaseKind::OperatorAttested,
        attestation: Some(AttestationEvidence {
            name: attestation.name_any(),
            uid: attestation.uid().unwrap_or_default(),
            attested_by: attestation.spec.attested_by.clone(),
            reason: attestation.spec.reason.clone(),
            attested_at: attestation.metadata.creation_timestamp.clone().unwrap_or(Time(now)),
            state: AttestedReleaseState::Releasing,
            acknowledged: plan.acknowledged.clone(),
        }),
        strategy: RemediationStrategy::OutOfServiceTaint,
        node_ready: conditions::UNKNOWN.into(),
        lease_renew_time: (plan.lease_baseline != Timestamp::UNIX_EPOCH).then_some(MicroTime(plan.lease_baseline)),
        released_at: MicroTime(now),
        taint_owned: true,
        pods_deleted: None,
        taint_removed_at: None,
        release_timed_out: false,
    });
    status.last_update_time = Some(Time(now));
    status
}

/// The remediation's status with the release confirmed (`Released`) as the Node update made it.
pub fn confirm_release(status: &CoronerRemediationStatus, released: &AttestedRelease) -> CoronerRemediationStatus {
    let mut status = status.clone();
    if let Some(release) = status.evidence.as_mut().and_then(|e| e.release.as_mut()) {
        release.released_at = released.released_at.clone();
        release.lease_renew_time = released.lease_renew_time.clone();
        if let Some(attestation) = release.attestation.as_mut() {
            attestation.state = AttestedReleaseState::Released;
        }
    }
    status.last_update_time = Some(Time(released.released_at.0));
    said_released_by_attestation(status, released.released_at.0)
}

/// The remediation's reason for a person after an attested release (A3): a `Released` condition
/// (reason `OperatorAttested`) names the attestation; `Succeeded` stays `False` (NodeHealthCheck has
/// acted on it already), and the failure's message no longer asks for a retry.
pub fn said_released_by_attestation(mut status: CoronerRemediationStatus, at: Timestamp) -> CoronerRemediationStatus {
    let Some(record) = status.evidence.as_ref().and_then(|e| e.release.as_ref()?.attestation.clone()) else {
        return status;
    };
    let message = format!(
        "released at {at} by attestation {} of {} ({}); Succeeded stays False, as NodeHealthCheck saw it: nothing to retry",
        record.name,
        record.attested_by,
        bounded(String::new(), &record.reason, 300)
    );
    conditions::set(&mut status.conditions, RELEASED, conditions::TRUE, OPERATOR_ATTESTED, &message, at);
    for type_ in [contract::PROCESSING, contract::SUCCEEDED] {
        if let Some(condition) = status.conditions.iter_mut().find(|c| c.type_ == type_) {
            let cause = contract::cause(&condition.message).to_owned();
            if cause != condition.message {
                condition.message = format!("{cause}. Released since by attestation {}: nothing to retry", record.name);
            }
        }
    }
    status
}

/// The remediation's status with its attestation record marked `Released` (a release found on the
/// Node after a restart).
pub fn mark_released(status: &CoronerRemediationStatus) -> Option<CoronerRemediationStatus> {
    let attestation = status.evidence.as_ref()?.release.as_ref()?.attestation.as_ref()?;
    if attestation.state == AttestedReleaseState::Released {
        return None;
    }
    let mut status = status.clone();
    if let Some(a) = status.evidence.as_mut().and_then(|e| e.release.as_mut()).and_then(|r| r.attestation.as_mut()) {
        a.state = AttestedReleaseState::Released;
    }
    let at = status.evidence.as_ref()?.release.as_ref()?.released_at.0;
    Some(said_released_by_attestation(status, at))
}

/// The release as the Node shows it: the out-of-service taint the remediation recorded as its own (or
/// the one a webhook rewrote it into), if its record is there.
/// `released_at`: when the releasing update was sent; `None` for a release found later (then the
/// taint's timeAdded, to the second).
pub fn release_on_node(
    node: &Node,
    remediation: &str,
    remediation_uid: &str,
    lease: Option<Option<Timestamp>>,
    released_at: Option<Timestamp>,
) -> Option<AttestedRelease> {
    let oos = CoronerTaint::OutOfService;
    if !release_recorded(node, remediation_uid) {
        return None;
    }
    // Its own exact taint, or the one a webhook rewrote it into on the way in.
    let taints = node.spec.as_ref()?.taints.as_ref()?;
    let taint = taints::owned(node, oos, remediation_uid).or_else(|| taints.iter().find(|t| t.key == oos.key()))?;
    let added = taint.time_added.clone().or(released_at.map(Time))?;
    Some(AttestedRelease {
        remediation: remediation.to_owned(),
        remediation_uid: remediation_uid.to_owned(),
        node_uid: node.metadata.uid.clone().unwrap_or_default(),
        taint_key: taint.key.clone(),
        taint_value: taint.value.clone().unwrap_or_default(),
        taint_effect: taint.effect.clone(),
        released_at: MicroTime(released_at.unwrap_or(added.0)),
        taint_time_added: added,
        lease_renew_time: lease.flatten().map(MicroTime),
    })
}

/// The remediation's status without the `Releasing` record of `attestation_uid` (its release did not
/// happen), or `None` when it has no such record.
pub fn withdraw_release(status: &CoronerRemediationStatus, attestation_uid: &str) -> Option<CoronerRemediationStatus> {
    let release = status.evidence.as_ref()?.release.as_ref()?;
    let ours = release.kind == ReleaseKind::OperatorAttested
        && release
            .attestation
            .as_ref()
            .is_some_and(|a| a.uid == attestation_uid && a.state == AttestedReleaseState::Releasing);
    if !ours {
        return None;
    }
    let mut status = status.clone();
    if let Some(evidence) = status.evidence.as_mut() {
        evidence.release = None;
    }
    Some(status)
}

/// What to do with a remediation's `Releasing` attestation record found at startup.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dangling {
    /// Nothing to do: no such record, or its attestation still exists (its reconcile finishes it).
    Keep,
    /// The Node carries the release's owner record: the release happened; record it as done.
    Confirm,
    /// The attestation is gone and the taint is not there: the release never happened.
    Withdraw,
}

/// A `Releasing` record left by a coroner that stopped between the record and the Node update.
pub fn dangling_record(remediation: &CoronerRemediation, attestation_exists: bool, node: Option<&Node>) -> Dangling {
    let releasing = release_of(remediation)
        .and_then(|r| r.attestation.as_ref())
        .is_some_and(|a| a.state == AttestedReleaseState::Releasing);
    if !releasing {
        return Dangling::Keep;
    }
    let uid = remediation.uid().unwrap_or_default();
    // The owner record on the Node is the update made, also when its taint was rewritten or removed since.
    if node.is_some_and(|n| release_recorded(n, &uid)) {
        Dangling::Confirm
    } else if attestation_exists {
        Dangling::Keep
    } else {
        Dangling::Withdraw
    }
}

/// The Event on the remediation and the Node for an attested release, with the reason verbatim as
/// far as an Event note (1 KiB) allows; the full text is in the remediation's evidence.
pub fn release_message(attestation: &CoronerAttestation) -> String {
    let head = format!(
        "released without a BMC proof on attestation {} by {}: the node's workloads may restart elsewhere; the old host must stay off, or be wiped, before it rejoins. Reason: ",
        attestation.name_any(),
        attestation.spec.attested_by
    );
    bounded(head, &attestation.spec.reason, 900)
}

/// `head` + as much of `tail` as fits in `max` bytes (cut at a character boundary, marked with …).
pub fn bounded(head: String, tail: &str, max: usize) -> String {
    let mut out = head;
    if out.len() + tail.len() <= max {
        out.push_str(tail);
        return out;
    }
    for c in tail.chars() {
        if out.len() + c.len_utf8() + '…'.len_utf8() > max {
            break;
        }
        out.push(c);
    }
    out.push('…');
    out
}

#[cfg(test)]
mod tests;
