//! Attestations: when no BMC can answer, a person's audited statement that a node is dead may release
//! it. Every rule is a named pure function here; `controller::attestation` reads the world, asks
//! [`evaluate`], and writes what it decides. The same functions give `coroner attest` its preflight.
//!
//! Nothing here proves that the machine is off. What it does hold to: the attester cannot be forged
//! (a ValidatingAdmissionPolicy must be in force, older than the attestation), the node's fence ended
//! without proof, the node has stayed silent since (Ready=Unknown, the same UID, its Lease exactly as
//! it was when the fence ended: a renewed Lease is evidence of life, and nothing overrides it), and the
//! gates that need no BMC pass. A stale Lease alone never releases anything.

mod policy;
mod preconditions;
mod record;

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

pub use policy::*;
pub use preconditions::*;
pub use record::*;

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
pub const OPERATOR_ATTESTED: &str = crate::words::event::Event::OperatorAttested.as_str();

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

#[cfg(test)]
mod tests;
