//! The guard after the release: a machine that reads anything but `Off` again while its workloads run
//! elsewhere is exactly the double run coroner exists to prevent. While this remediation's release
//! stands ([`release_stands`], docs/safety.md R1), coroner keeps reading the system that proved it
//! off, and a node that reports back with the bootID it had before the fence never went down at all.
//! Pure decisions; the loop ([`crate::driver`]) reads, writes and sends.

use std::time::Duration as StdDuration;

use jiff::Timestamp;
use k8s_openapi::{
    api::{
        admissionregistration::v1::{ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding},
        core::v1::Node,
    },
    apimachinery::pkg::apis::meta::v1::MicroTime,
};
use kube::ResourceExt;

use crate::{
    api::{
        CoronerRemediationStatus, GuardFinding, GuardPolicy, GuardStatus, IdentityEvidence, Intent, PowerAction,
        conditions,
    },
    bmc::{PowerState, ResetType},
    fence::{BmcFailure, Decision, IdentityFound, IdentityProblem, Memory, Mono, NodeSnapshot, Notice, PowerReading},
    identity,
};

/// `False` (`FenceDidNotTakeEffect`) when the node reported back with its pre-fence bootID.
pub const FENCE_TOOK_EFFECT: &str = "FenceTookEffect";

pub const POWERED_ON: &str = Event::ReleasedMachinePoweredOn.as_str();
pub const BLIND: &str = Event::GuardBlind.as_str();
pub const DID_NOT_TAKE_EFFECT: &str = "FenceDidNotTakeEffect";
pub const APPROVAL_NOT_FOR_THIS_RELEASE: &str = Event::ApprovalNotForThisRelease.as_str();
pub const RECORD_DIVERGED: &str = Event::ReleaseRecordDiverged.as_str();
/// The remediation's condition that says whether approvals are guarded by an admission policy.
pub const APPROVAL_POLICY: &str = "ApprovalPolicy";
pub const APPROVAL_POLICY_MISSING: &str = Event::ApprovalPolicyMissing.as_str();
pub const UNGUARDED_NODE_DELETED: &str = Event::ReleaseUnguardedNodeDeleted.as_str();
pub const RETURNED_WITHOUT_APPROVAL: &str = Event::ReturnedWithoutApproval.as_str();

pub use crate::release::{
    APPROVAL_ANNOTATION, Approval, approval, release_id, release_id_at, release_stands, with_release_id,
};
use crate::words::event::Event;
pub use crate::words::guard::{GUARD, GUARD_HELD, MACHINE_OFF, MACHINE_OFF_MESSAGE, armed_at_release};
use crate::{
    node::replaced,
    release::{power_on_answered, release_made},
};

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

/// R4: how a standing release's record and the Node disagree — the Node replaced under the same
/// name, the out-of-service taint coroner wrote no longer on it as written (removed or rewritten by
/// someone else), or a release resting on someone else's out-of-service taint. `None`: they agree.
pub fn record_diverged(status: &CoronerRemediationStatus, node: &NodeSnapshot) -> Option<String> {
    let release = status.evidence.as_ref()?.release.as_ref()?;
    if replaced(status, node) {
        let admitted = status.evidence.as_ref()?.node.as_ref()?.uid.as_str();
        return Some(format!("Node {} was replaced (UID {admitted} admitted, {} now)", node.name, node.uid));
    }
    if release.strategy != crate::api::RemediationStrategy::OutOfServiceTaint || release.taint_removed_at.is_some() {
        return None;
    }
    if !release.taint_owned {
        return Some(format!(
            "the release rests on an out-of-service taint coroner did not add ({})",
            node.out_of_service.as_deref().unwrap_or("gone since")
        ));
    }
    node.released_at.is_none().then(|| match &node.out_of_service {
        Some(now) => format!("the out-of-service taint coroner added was rewritten by someone else (now {now})"),
        None => "the out-of-service taint coroner added was removed by someone else".to_owned(),
    })
}

/// R4: the record of a divergence to write and report, once per cause: `None` when nothing changed.
/// While the release stands, the guard goes on against the machine of the admitted identity.
pub fn diverged_record(
    status: &CoronerRemediationStatus,
    node: &NodeSnapshot,
) -> Option<(CoronerRemediationStatus, Option<Notice>)> {
    let now = record_diverged(status, node);
    let before = status.guard.as_ref().and_then(|g| g.record_diverged.clone());
    if now == before {
        return None;
    }
    let mut new = status.clone();
    new.guard.get_or_insert_with(GuardStatus::default).record_diverged.clone_from(&now);
    let uuid = status.evidence.as_ref().and_then(|e| e.node.as_ref()).map_or("", |n| n.system_uuid.as_str());
    let notice = now.map(|cause| Notice {
        warning: true,
        reason: RECORD_DIVERGED.into(),
        message: format!(
            "{cause}: the release still stands, and the guard goes on against the machine of the admitted identity (systemUUID {uuid})"
        ),
    });
    Some((new, notice))
}

/// R4: a Node deleted while a release of it stood (the documented decommission): NHC deletes the
/// orphaned remediation and the guard ends with it. The warning the finalizer publishes on the
/// binding, naming the machine's identity; `None` when no release stood.
pub fn unguarded_by_node_deletion(status: &CoronerRemediationStatus, node: &str) -> Option<(String, Notice)> {
    let evidence = status.evidence.as_ref()?;
    let release = evidence.release.as_ref()?;
    if release.taint_removed_at.is_some() || power_on_answered(status) {
        return None;
    }
    let binding = evidence
        .identity
        .as_ref()
        .map(|i| i.binding.clone())
        .or_else(|| evidence.node.as_ref()?.binding.as_ref().map(|b| b.name.clone()))?;
    let machine = match &evidence.identity {
        Some(identity) => {
            format!("system {} (UUID {}) at {}", identity.system_path, identity.bmc_uuid, identity.endpoint)
        }
        None => format!("systemUUID {}", evidence.node.as_ref().map_or("", |n| n.system_uuid.as_str())),
    };
    let message = format!(
        "Node {node} was deleted while coroner's release of it stood: nothing guards its machine, {machine}, any more. Keep it switched off, or wipe it before it runs again: its workloads may run elsewhere"
    );
    Some((binding, Notice { warning: true, reason: UNGUARDED_NODE_DELETED.into(), message }))
}

/// R1: the node reports `Ready=True` while coroner's release of it still stood — no `On` of
/// coroner's decided or sent, its taint not taken off for one — and nobody approved this release: a
/// machine brought back unapproved, reported once (`ReturnedWithoutApproval`). `None`: nothing to
/// report; else the status that records it.
pub fn returned_without_approval(
    status: &CoronerRemediationStatus,
    node: &NodeSnapshot,
    approval: Approval<'_>,
    now: Timestamp,
) -> Option<CoronerRemediationStatus> {
    let release = status.evidence.as_ref()?.release.as_ref()?;
    let returned = node.ready.as_deref() == Some(conditions::TRUE)
        && release.taint_removed_at.is_none()
        && !power_on_decided(status)
        && !matches!(approval, Approval::ForThisRelease(_));
    if !returned || status.guard.as_ref().is_some_and(|g| g.returned_without_approval.is_some()) {
        return None;
    }
    let mut new = status.clone();
    new.guard.get_or_insert_with(GuardStatus::default).returned_without_approval = Some(MicroTime(now));
    Some(new)
}

/// What `ReturnedWithoutApproval` says (a Warning on the remediation and the Node).
pub fn returned_notice(node: &str, release_id: Option<&str>) -> Notice {
    let message = format!(
        "node {node} reports Ready=True while release {} stood, and nobody approved it (coroner approve NODE): its machine was brought back while its workloads may run elsewhere; check them",
        release_id.unwrap_or_default()
    );
    Notice { warning: true, reason: RETURNED_WITHOUT_APPROVAL.into(), message }
}

/// The `Reboot`'s `On` is decided (its intent persisted, right before the request; a refused one is
/// withdrawn) or was sent.
fn power_on_decided(status: &CoronerRemediationStatus) -> bool {
    let intent = status.progress.as_ref().and_then(|p| p.intent.as_ref());
    intent.is_some_and(|i| i.action == PowerAction::On)
        || status.evidence.as_ref().and_then(|e| e.power_on.as_ref()).is_some_and(|p| p.sent_at.is_some())
}

/// The guard's period for one remediation: `interval` ± 10 %, drawn from the remediation's UID and
/// the read it is for, so replicas and remediations do not read their BMCs in step.
pub fn jittered(interval: StdDuration, uid: &str, read: u64) -> StdDuration {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in uid.bytes().chain(read.to_le_bytes()) {
        hash = (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
    }
    let per_mille = hash % 201;
    interval.mul_f64(0.9 + per_mille as f64 / 1000.0)
}

/// How soon the guard reads again after a ForceOff it decided did not take: left unanswered (a
/// check before the request failed on the API server, the process died) or failed at the BMC.
pub const GUARD_RETRY: StdDuration = StdDuration::from_secs(1);

/// How long until the guard reads again (`None`: now). A ForceOff the guard decided that did not
/// take makes it due [`GUARD_RETRY`] after its reading, not a whole interval later, which two such
/// rounds in a row would stretch past the guard's bound (R2).
pub fn due(
    status: &CoronerRemediationStatus,
    memory: &Memory,
    now: Mono,
    interval: StdDuration,
    uid: &str,
) -> Option<StdDuration> {
    let last = memory.guarded_at?;
    let wait = if unanswered_force_off(status) { GUARD_RETRY } else { jittered(interval, uid, memory.guard_reads) };
    let next = last + wait;
    (next > now).then(|| next - now)
}

/// What one guard reading says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Finding {
    Off,
    /// The verified system reads something else: the machine may be running.
    NotOff(PowerState),
    /// No reading, or one of another system: never counted as Off.
    Blind(String),
    /// After a level release (docs/safety.md L9): an outlet of the level reads other than Off (on,
    /// a command pending, or drawing above its floor): it may feed the machine again.
    OutletNotOff(String),
}

/// A guard reading judged: only `Off` from the verified system is Off.
pub fn assess(status: &CoronerRemediationStatus, reading: &Result<PowerReading, BmcFailure>) -> Finding {
    let verified = status.evidence.as_ref().and_then(|e| e.identity.as_ref()).map(|i| i.bmc_uuid.as_str());
    match reading {
        Err(failure) => Finding::Blind(failure.message.clone()),
        Ok(reading) => {
            let same =
                verified.and_then(identity::parse).zip(identity::parse(&reading.uuid)).is_some_and(|(a, b)| a == b);
            match (same, &reading.power_state) {
                (false, _) => {
                    Finding::Blind(format!("the system now reports UUID {:?}, not the verified one", reading.uuid))
                }
                (true, PowerState::Off) => Finding::Off,
                // The BMC does not vouch for its Off: neither Off nor a sign of life.
                (true, PowerState::OffUnknown(_)) => {
                    Finding::Blind(format!("power reads {}: the BMC does not know the system", reading.power_state))
                }
                (true, other) => Finding::NotOff(other.clone()),
            }
        }
    }
}

/// R2: what the guard judges on. A reading the fence took of the released machine, not Off, while
/// the release stood ([`Memory::sighted_on`]) counts as the guard's own, and so does a ForceOff an
/// earlier guard decided and left unanswered (its process died before or after sending it): an Off
/// read after either (a glitch that ended) does not clear it, and the ForceOff goes (on a machine
/// already off it changes nothing).
pub fn with_sighting(status: &CoronerRemediationStatus, finding: &Finding, memory: &Memory) -> Finding {
    match (finding, &memory.sighted_on) {
        (Finding::Off, Some(power)) => Finding::NotOff(power.clone()),
        (Finding::Off, None) if unanswered_force_off(status) || sighting_unhandled(status) => {
            Finding::NotOff(PowerState::On)
        }
        _ => finding.clone(),
    }
}

/// A sighting the fence recorded ([`GuardStatus::sighted_at`]) that no guard round has acted on yet:
/// no power-on reported and no guard ForceOff decided since (a blind round acts on nothing). A process
/// that took over from the one that saw it acts on it as that one would have.
fn sighting_unhandled(status: &CoronerRemediationStatus) -> bool {
    let Some(guard) = status.guard.as_ref() else { return false };
    let Some(sighted) = guard.sighted_at.as_ref().map(|t| t.0) else { return false };
    let reported = conditions::find(&status.conditions, GUARD).is_some_and(|c| c.reason == POWERED_ON);
    let found_since = reported && guard.last_finding.as_ref().is_some_and(|f| f.at.0 >= sighted);
    let decided_since = guard.intent.as_ref().is_some_and(|i| i.decided_at.0 >= sighted);
    !found_since && !decided_since
}

/// A guard ForceOff decided (its intent persisted) whose success, or the reason it was not sent, is
/// not recorded: it may not have taken ([`answered`] records a failed one so).
fn unanswered_force_off(status: &CoronerRemediationStatus) -> bool {
    let intent = status.guard.as_ref().and_then(|g| g.intent.as_ref());
    intent.is_some_and(|i| i.action == PowerAction::ForceOff && i.result.is_none())
}

/// Why the guard cannot tell which machine an attested release left behind: it stays blind.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum Unidentified {
    #[error("no systemUUID was recorded when the fence was admitted")]
    NoAdmittedUuid,
    #[error("the Node now reports systemUUID {now:?}, not {admitted}, which it had when the fence was admitted")]
    OtherHardware { admitted: String, now: String },
    /// The binding, its Secret or the BMC did not lead to a system.
    #[error("{}", match .0 {
        IdentityProblem::Binding { message, .. } => message,
        IdentityProblem::Bmc(f) | IdentityProblem::SeenThenFailed { failure: f, .. } => &f.message,
    })]
    NotReached(IdentityProblem),
    #[error(transparent)]
    Refused(#[from] identity::IdentityRefusal),
}

/// The systemUUID the guard looks for after an attested release: the one the Node had when the fence
/// was admitted, and only while the Node still reports it (other hardware under the same name is not
/// the released machine).
pub fn identity_target(status: &CoronerRemediationStatus, node: &NodeSnapshot) -> Result<String, Unidentified> {
    let admitted = status.evidence.as_ref().and_then(|e| e.node.as_ref()).map(|n| n.system_uuid.as_str());
    match admitted {
        None | Some("") => Err(Unidentified::NoAdmittedUuid),
        Some(uuid) if uuid != node.system_uuid => {
            Err(Unidentified::OtherHardware { admitted: uuid.to_owned(), now: node.system_uuid.clone() })
        }
        Some(uuid) => Ok(uuid.to_owned()),
    }
}

/// An attested release proved no system: nothing tells the guard which machine to read. It takes the
/// fence's way to one in what the BMC answers now (the binding naming the node, the system whose UUID
/// is `node_uuid`, no other claim on that UUID: [`identity::prove`]) and records it as the release's
/// identity, through which it reads, and enforces, from then on. R2: the identity read is the guard's
/// device answering: a machine it finds not Off is a sighting ([`GuardStatus::sighted_at`], and
/// [`Memory::sighted_on`] in the process, [`identified_sighting`]), acted on at once.
pub fn identify(
    status: &CoronerRemediationStatus,
    found: Result<IdentityFound, IdentityProblem>,
    node_uuid: &str,
    now: Timestamp,
) -> Result<(CoronerRemediationStatus, Notice), Unidentified> {
    let found = found.map_err(Unidentified::NotReached)?;
    let matched = identity::prove(node_uuid, &found.system.uuid, &found.claims)?;
    let message = format!(
        "the guard found the released machine: BMC system {} at {} has UUID {} ({matched:?} match with the node's systemUUID {node_uuid}); it reads its power from now on",
        found.system.id, found.endpoint, found.system.uuid
    );
    let mut new = status.clone();
    new.evidence.get_or_insert_with(Default::default).identity = Some(IdentityEvidence {
        binding: found.binding,
        endpoint: found.endpoint,
        system_id: found.system.id,
        system_path: found.system.path,
        bmc_uuid: found.system.uuid,
        node_uuid: node_uuid.to_owned(),
        match_kind: matched,
        verified_at: MicroTime(now),
        tls_verified: found.tls_verified == Some(true),
        binding_generation: Some(found.through.generation),
        binding_content: Some(crate::words::digest::content_hex(found.through.serial)),
    });
    if shows_life(&found.system.power_state) {
        new.guard.get_or_insert_with(Default::default).sighted_at = Some(MicroTime(now));
    }
    new.last_update_time = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now));
    Ok((new, Notice { warning: false, reason: Event::GuardIdentityVerified.as_str().into(), message }))
}

/// R2: a power state the guard takes for the machine running, as [`assess`] does: anything but `Off`
/// and an `Off` the BMC does not vouch for (neither Off nor a sign of life).
fn shows_life(power: &PowerState) -> bool {
    !matches!(power, PowerState::Off | PowerState::OffUnknown(_))
}

/// R2: what the guard remembers of the machine its identification found: a power that is not Off is
/// its own sighting ([`identify`]).
pub fn identified_sighting(memory: &Memory, found: &Result<IdentityFound, IdentityProblem>) -> Memory {
    match found {
        Ok(found) if shows_life(&found.system.power_state) => {
            Memory { sighted_on: Some(found.system.power_state.clone()), guarded_at: None, ..memory.clone() }
        }
        // What answered before the device failed saw the machine alive (A1's life, R2's sighting).
        Err(IdentityProblem::SeenThenFailed { seen_on, .. }) => {
            Memory { sighted_on: Some(PowerState::parse(seen_on)), guarded_at: None, ..memory.clone() }
        }
        _ => memory.clone(),
    }
}

/// What one guard step knows besides the reading.
#[derive(Clone, Copy, Debug)]
pub struct Watch<'a> {
    pub policy: GuardPolicy,
    /// The Node's `coroner.dev/power-on-approved`, judged against this release ([`approval`]).
    pub approval: Approval<'a>,
    pub instance: &'a str,
    pub now: Timestamp,
    pub mono: Mono,
}

/// The guard's step for one reading. It writes status only when the finding changes (or it decides a
/// ForceOff); with `Enforce` and no approval on the Node, a released machine that reads anything but
/// Off is switched off again: the intent is persisted first, as for every BMC mutation.
pub fn next(status: &CoronerRemediationStatus, memory: &Memory, finding: &Finding, watch: Watch<'_>) -> Decision {
    let Watch { policy, approval, instance, now, mono } = watch;
    let sighted = with_sighting(status, finding, memory);
    let finding = &sighted;
    let mut new = status.clone();
    let mut notices = Vec::new();
    let mut reset = None;
    let guard = new.guard.get_or_insert_with(GuardStatus::default);
    let finding_at = |seen: String| GuardFinding { at: MicroTime(now), seen };
    let (state, reason, message) = match finding {
        Finding::Off => (conditions::TRUE, MACHINE_OFF, MACHINE_OFF_MESSAGE.to_owned()),
        Finding::NotOff(power) => {
            guard.last_finding = Some(finding_at(power.to_string()));
            let message =
                format!("the released machine reads {power}: it may be running while its workloads run elsewhere");
            (conditions::FALSE, POWERED_ON, message)
        }
        Finding::Blind(why) => {
            guard.last_finding = Some(finding_at(why.clone()));
            (conditions::UNKNOWN, BLIND, format!("the guard cannot read the released machine: {why}"))
        }
        Finding::OutletNotOff(what) => {
            guard.last_finding = Some(finding_at(what.clone()));
            let message = format!(
                "{what}: the level that proved the release may feed the machine again while its workloads run elsewhere"
            );
            (conditions::FALSE, POWERED_ON, message)
        }
    };
    let changed = conditions::set(&mut new.conditions, GUARD, state, reason, &message, now);
    if changed {
        notices.push(Notice { warning: *finding != Finding::Off, reason: reason.to_owned(), message: message.clone() });
    }
    let ignored = match approval {
        Approval::NotForThisRelease(value) => Some(value),
        _ => None,
    };
    let guard = new.guard.get_or_insert_with(GuardStatus::default);
    if guard.ignored_approval.as_deref() != ignored {
        guard.ignored_approval = ignored.map(str::to_owned);
        if let Some(value) = ignored {
            notices.push(Notice {
                warning: true,
                reason: APPROVAL_NOT_FOR_THIS_RELEASE.into(),
                message: format!(
                    "the Node's {APPROVAL_ANNOTATION} {value:?} does not name this release: it counts for nothing (coroner approve NODE writes one that does)"
                ),
            });
        }
    }
    if let Finding::NotOff(_) | Finding::OutletNotOff(_) = finding {
        match (policy, approval) {
            // An earlier intent left unanswered (a crash, a hold) was sent or not: the machine still
            // reads on, so this reading decides anew.
            (GuardPolicy::Enforce, Approval::None | Approval::NotForThisRelease(_)) => {
                new.guard.get_or_insert_with(GuardStatus::default).intent = Some(Intent {
                    action: PowerAction::ForceOff,
                    attempt: 1,
                    decided_at: MicroTime(now),
                    instance: instance.to_owned(),
                    result: None,
                });
                reset = Some(ResetType::ForceOff);
                notices.push(Notice {
                    warning: true,
                    reason: POWERED_ON.into(),
                    message: format!(
                        "{message}; guard: Enforce decides a ForceOff (GuardForceOffSent follows with the request, GuardHeld if a check before it holds it)"
                    ),
                });
            }
            (GuardPolicy::Enforce, Approval::ForThisRelease(approved)) if changed => notices.push(Notice {
                warning: false,
                reason: Event::PowerOnApproved.as_str().into(),
                message: format!(
                    "the Node carries {APPROVAL_ANNOTATION} for this release: {approved:?}; the guard leaves the machine on"
                ),
            }),
            _ => {}
        }
    }
    if new.guard.as_ref().is_some_and(|g| *g == GuardStatus::default()) {
        new.guard = status.guard.clone();
    }
    // A blind reading sends nothing: the fence's sighting waits for one that can be acted on.
    let sighted_on = matches!(finding, Finding::Blind(_)).then(|| memory.sighted_on.clone()).flatten();
    let memory = Memory { guarded_at: Some(mono), guard_reads: memory.guard_reads + 1, sighted_on, ..memory.clone() };
    if new != *status {
        new.last_update_time = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now));
    }
    Decision { status: new, memory, reset, requeue: None, notices }
}

/// Why the guard does not send the ForceOff it decided: the Node, read again right before, no longer
/// calls for it, or the request would not go where the reading came from.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum GuardHold {
    #[error("the Node no longer exists")]
    NodeGone,
    #[error("the release ended (the node reports Ready=True, or coroner powers it on)")]
    ReleaseEnded,
    #[error("the Node now carries {APPROVAL_ANNOTATION} for this release: {0:?}")]
    Approved(String),
    /// The remediation changed since the intent was written (or is being deleted): the next reading
    /// decides again.
    #[error("the remediation changed since the ForceOff was decided; the next reading decides again")]
    RemediationChanged,
    /// P1: the binding, read fresh, leads to another device (endpoint, TLS material or credential
    /// values) than the reading that called for the ForceOff.
    #[error(
        "the BmcBinding changed since the reading that called for the ForceOff; the next reading, through the binding as it is now, decides again"
    )]
    DeviceChanged,
    /// The binding leads to no device right now (deleted, its Secret unusable).
    #[error("the BmcBinding leads to no device ({0}); the next reading decides again")]
    NoDevice(String),
    /// L6: an outlet of the level is another node's too, undeclared, or feeds a node not being fenced.
    #[error("{0}; the next reading decides again")]
    OutletShared(String),
}

/// Right before the guard's ForceOff, the Node read again must still call for it: the release stands
/// ([`release_stands`]) and no approval of this release's power-on. The decision was taken on the
/// Node as the reconcile began, which may be seconds old by now.
pub fn may_enforce(
    status: &CoronerRemediationStatus,
    node: Option<&Node>,
    remediation_uid: &str,
) -> Result<(), GuardHold> {
    let node = node.ok_or(GuardHold::NodeGone)?;
    if !release_stands(status, &NodeSnapshot::new(node, None, remediation_uid)) {
        return Err(GuardHold::ReleaseEnded);
    }
    let id = release_id(remediation_uid, status);
    match approval(id.as_deref(), node.annotations().get(APPROVAL_ANNOTATION).map(String::as_str)) {
        Approval::ForThisRelease(approved) => Err(GuardHold::Approved(approved.to_owned())),
        Approval::None | Approval::NotForThisRelease(_) => Ok(()),
    }
}

/// A guard ForceOff not sent ([`may_enforce`]), recorded on its intent.
pub fn withheld(status: &CoronerRemediationStatus, memory: &Memory, hold: &GuardHold, now: Timestamp) -> Decision {
    let mut new = status.clone();
    if let Some(intent) = new.guard.as_mut().and_then(|g| g.intent.as_mut()) {
        intent.result = Some(format!("not sent: {hold}"));
    }
    new.last_update_time = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now));
    let notice = Notice {
        warning: false,
        reason: GUARD_HELD.into(),
        message: format!("the guard did not send ForceOff: {hold}"),
    };
    Decision { status: new, memory: memory.clone(), reset: None, requeue: None, notices: vec![notice] }
}

/// The answer to a guard's ForceOff, recorded on its intent. A failed one (an error status, no
/// answer) leaves the intent unanswered: the machine was seen on and may still be, so the guard
/// reads again after [`GUARD_RETRY`] and sends ForceOff again even if that reading finds it off
/// ([`with_sighting`], R2).
pub fn answered(
    status: &CoronerRemediationStatus,
    memory: &Memory,
    result: &Result<u16, BmcFailure>,
    now: Timestamp,
) -> Decision {
    answered_by(status, memory, result, now, None)
}

/// [`answered`], for the guard's Off to the outlets of `level` (docs/safety.md L9).
pub fn outlets_answered(
    status: &CoronerRemediationStatus,
    memory: &Memory,
    result: &Result<u16, BmcFailure>,
    now: Timestamp,
    level: u32,
) -> Decision {
    answered_by(status, memory, result, now, Some(level))
}

fn answered_by(
    status: &CoronerRemediationStatus,
    memory: &Memory,
    result: &Result<u16, BmcFailure>,
    now: Timestamp,
    level: Option<u32>,
) -> Decision {
    let mut new = status.clone();
    let guard = new.guard.get_or_insert_with(GuardStatus::default);
    let what = match level {
        Some(level) => format!("Off to the outlets of level {level}"),
        None => "ForceOff to the released machine".to_owned(),
    };
    let message = match result {
        Ok(code) => {
            let text = match (level, *code) {
                (Some(_), _) => "accepted".to_owned(),
                (None, 0) => "accepted (IPMI completion code 0x00)".to_owned(),
                (None, code) => format!("HTTP {code}"),
            };
            if let Some(intent) = guard.intent.as_mut() {
                intent.result = Some(text.clone());
            }
            guard.enforced += 1;
            format!("the guard sent {what}: {text}")
        }
        Err(failure) => format!(
            "the guard sent {what} and it failed: {}; it reads again within {}s and sends it again",
            failure.message,
            GUARD_RETRY.as_secs()
        ),
    };
    new.last_update_time = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now));
    let notice = Notice { warning: true, reason: Event::GuardForceOffSent.as_str().into(), message };
    Decision { status: new, memory: memory.clone(), reset: None, requeue: None, notices: vec![notice] }
}

/// bootID continuity: a fenced node that reports back (its kubelet posts `Ready` again) with the
/// bootID it had when the fence was admitted never went down — the fence did not take effect. The
/// strongest split-brain signal there is. A release counts from the moment it may have taken effect:
/// recorded (an attested one once the Node shows its update), begun (`ResourceDeletion`'s first pod
/// may be gone), or its exact taint on the Node (written, its status write lost or not landed yet).
pub fn fence_did_not_take_effect(status: &CoronerRemediationStatus, node: &NodeSnapshot) -> Option<String> {
    let before = boot_before_release(status, node)?;
    (reports(node) && node.boot_id == before).then(|| {
        format!(
            "node {} reports Ready={} with bootID {before}, the one it had before the fence: it never went down, yet its workloads were released",
            node.name,
            node.ready.as_deref().unwrap_or_default()
        )
    })
}

/// The bootID the node had when its fence was admitted, once a release may have taken effect
/// ([`fence_did_not_take_effect`]).
fn boot_before_release<'a>(status: &'a CoronerRemediationStatus, node: &NodeSnapshot) -> Option<&'a str> {
    let evidence = status.evidence.as_ref()?;
    let begun = status.progress.as_ref().is_some_and(|p| p.release_begun.is_some());
    if !release_made(status, node) && !begun && node.released_at.is_none() {
        return None;
    }
    Some(evidence.node.as_ref()?.boot_id.as_str()).filter(|b| !b.is_empty())
}

/// Whether the node's kubelet reports (`Ready` True or False), so its bootID is its machine's now.
fn reports(node: &NodeSnapshot) -> bool {
    matches!(node.ready.as_deref(), Some(conditions::TRUE | conditions::FALSE))
}

/// Whether the remediation records that its fence did not take effect (the reconcile, or the
/// finalizer, that saw it first published the Event and counted it).
fn did_not_take_effect_recorded(status: &CoronerRemediationStatus) -> bool {
    conditions::find(&status.conditions, FENCE_TOOK_EFFECT)
        .is_some_and(|c| c.status == conditions::FALSE && c.reason == DID_NOT_TAKE_EFFECT)
}

/// R1 in the finalizer, on the node as read: what to report now, and what to leave on the Node to
/// watch past the remediation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AtDeletion {
    pub report: Option<String>,
    pub watch: Option<UnconfirmedRelease>,
}

/// The finalizer's R1 decision. Nothing once the remediation records the report (or this process
/// made it). Otherwise the report is due when the node is back on its pre-fence bootID after a
/// release that may have taken effect ([`fence_did_not_take_effect`]), or after the one recorded on
/// the Node by an earlier try of this finalizer (`on_node`: its taints, the other evidence of that
/// release, went with that try). With no report due, the release to watch: the one the status and
/// Node show ([`watched_after_deletion`]), or the earlier try's while the node has neither reported
/// nor booted since.
pub fn at_deletion(
    status: &CoronerRemediationStatus,
    node: &NodeSnapshot,
    on_node: Option<&UnconfirmedRelease>,
    remediation: &str,
    remediation_uid: &str,
    reported_here: bool,
) -> AtDeletion {
    if reported_here || did_not_take_effect_recorded(status) {
        return AtDeletion { report: None, watch: None };
    }
    let own = on_node.filter(|r| r.uid == remediation_uid);
    let judged = own.map(|r| (r, after_deletion(r, node, &[])));
    let report = fence_did_not_take_effect(status, node).or_else(|| match &judged {
        Some((_, AfterDeletion::NeverWentDown(message))) => Some(message.clone()),
        _ => None,
    });
    if report.is_some() {
        return AtDeletion { report, watch: None };
    }
    let kept = judged.filter(|(r, j)| *j == AfterDeletion::Waits && r.boot_id == node.boot_id).map(|(r, _)| r.clone());
    AtDeletion { report: None, watch: watched_after_deletion(status, node, remediation, remediation_uid).or(kept) }
}

/// On a Node: a release whose remediation was deleted before the node reported back
/// ([`UnconfirmedRelease`]).
pub const UNCONFIRMED_ANNOTATION: &str = "coroner.dev/release-unconfirmed";

/// R1 past the remediation: a release that may have taken effect, whose remediation was deleted (by
/// hand, or by NHC before the node returned) while the node had not reported since on the bootID it
/// had before the fence. The finalizer leaves it on the Node, so that the sweep of Node events can
/// still tell whether that machine ever went down ([`after_deletion`]).
#[derive(serde::Serialize, serde::Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct UnconfirmedRelease {
    pub uid: String,
    pub remediation: String,
    #[serde(rename = "bootID")]
    pub boot_id: String,
}

/// The record a finalizer left on the node, if it holds one.
pub fn unconfirmed_release(node: &Node) -> Option<UnconfirmedRelease> {
    serde_json::from_str(node.annotations().get(UNCONFIRMED_ANNOTATION)?).ok()
}

/// What a finalizer leaves on the Node: its release, when that release may have taken effect and the
/// node, as read, has neither reported back since (then the finalizer reports it itself) nor changed
/// its bootID (then its machine went down).
pub fn watched_after_deletion(
    status: &CoronerRemediationStatus,
    node: &NodeSnapshot,
    remediation: &str,
    remediation_uid: &str,
) -> Option<UnconfirmedRelease> {
    let before = boot_before_release(status, node)?;
    (!reports(node) && node.boot_id == before).then(|| UnconfirmedRelease {
        uid: remediation_uid.to_owned(),
        remediation: remediation.to_owned(),
        boot_id: before.to_owned(),
    })
}

/// The finalizer's Node update for R1 past the remediation: `node` with `watch` ([`at_deletion`])
/// recorded while the node, as read for the write, still shows the bootID from before the fence;
/// otherwise without a record this remediation left on an earlier try (since then the finalizer
/// reported it, or the machine booted). `None`: nothing to change.
pub fn with_watch(node: &Node, watch: Option<&UnconfirmedRelease>, remediation_uid: &str) -> Option<Node> {
    let current = unconfirmed_release(node);
    let booted = node.status.as_ref().and_then(|s| s.node_info.as_ref()).map(|i| i.boot_id.as_str());
    let mut updated = node.clone();
    match watch.filter(|w| Some(w.boot_id.as_str()) == booted) {
        Some(watch) if current.as_ref() != Some(watch) => {
            let value = serde_json::to_string(watch).ok()?;
            updated.annotations_mut().insert(UNCONFIRMED_ANNOTATION.to_owned(), value);
        }
        None if current.is_some_and(|c| c.uid == remediation_uid) => {
            updated.annotations_mut().remove(UNCONFIRMED_ANNOTATION);
        }
        _ => return None,
    }
    Some(updated)
}

/// What the sweep makes of an [`UnconfirmedRelease`] on the node as read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AfterDeletion {
    /// The node has not reported on that bootID nor booted since, or the remediation is still listed
    /// (its finalizer judges, and reports once): the record stays.
    Waits,
    /// It reports with the bootID it had before the fence: `FenceDidNotTakeEffect`, then the record goes.
    NeverWentDown(String),
    /// The Node shows another bootID: the machine went down since; the record goes.
    BootedSince,
}

/// R1 past the remediation, in the sweep: judges a record whose remediation is not among `live`
/// (the UIDs listed after the Node was read; a UID is never reused) on the node as read.
pub fn after_deletion(record: &UnconfirmedRelease, node: &NodeSnapshot, live: &[String]) -> AfterDeletion {
    if node.boot_id.is_empty() || live.contains(&record.uid) {
        AfterDeletion::Waits
    } else if node.boot_id != record.boot_id {
        AfterDeletion::BootedSince
    } else if reports(node) {
        AfterDeletion::NeverWentDown(format!(
            "node {} reports Ready={} with bootID {}, the one it had before the fence of remediation {} (UID {}), deleted before the node reported back: it never went down, yet its workloads were released",
            node.name,
            node.ready.as_deref().unwrap_or_default(),
            record.boot_id,
            record.remediation,
            record.uid
        ))
    } else {
        AfterDeletion::Waits
    }
}

/// An approval is for the release it names: when the remediation whose release it approves goes, its
/// finalizer takes `coroner.dev/power-on-approved` off the Node with its taints. One for another
/// release is left alone.
pub fn approval_ends(status: &CoronerRemediationStatus, node: &Node, remediation_uid: &str) -> bool {
    let id = release_id(remediation_uid, status);
    let value = node.annotations().get(APPROVAL_ANNOTATION).map(String::as_str);
    matches!(approval(id.as_deref(), value), Approval::ForThisRelease(_))
}

/// The step that records [`fence_did_not_take_effect`] once, as a critical condition and Event.
pub fn record_did_not_take_effect(
    status: &CoronerRemediationStatus,
    memory: &Memory,
    message: &str,
    now: Timestamp,
) -> Option<Decision> {
    let mut new = status.clone();
    if !conditions::set(&mut new.conditions, FENCE_TOOK_EFFECT, conditions::FALSE, DID_NOT_TAKE_EFFECT, message, now) {
        return None;
    }
    new.last_update_time = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now));
    let notice = Notice { warning: true, reason: DID_NOT_TAKE_EFFECT.into(), message: message.to_owned() };
    Some(Decision { status: new, memory: memory.clone(), reset: None, requeue: None, notices: vec![notice] })
}

#[cfg(test)]
mod tests;
