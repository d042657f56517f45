//! R2: the guard's rounds — when it reads, what a reading finds, the identification after an
//! attested release, its decision, and the checks right before its ForceOff.

use super::*;

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

/// What a guard round does once a release stands ([`release_stands`]): the guard's plan, as the
/// fence's (`fence::plan`); [`next`] decides on what the round found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Plan {
    /// Nothing: the release is its sibling's to guard (one guard per release), or this process knows
    /// it was deposed (A1: the new leader's guard reads).
    Nothing,
    /// Not due yet: read again after this.
    Wait(StdDuration),
    /// A round: L9's outlets of the level that proved the release first (`Some(level)`), then the
    /// machine ([`machine`]).
    Round { outlets: Option<u32> },
}

/// The guard's plan for this reconcile. `sibling_guards`: the release was adopted from a sibling
/// remediation that still exists; `leading`: this process believes it still leads.
pub fn plan(
    status: &CoronerRemediationStatus,
    memory: &Memory,
    sibling_guards: bool,
    leading: bool,
    (now, interval, uid): (Mono, StdDuration, &str),
) -> Plan {
    if sibling_guards {
        return Plan::Nothing;
    }
    if let Some(wait) = due(status, memory, now, interval, uid) {
        return Plan::Wait(wait);
    }
    if !leading {
        return Plan::Nothing;
    }
    let level = status.evidence.as_ref().and_then(|e| e.power_off.as_ref()).and_then(|p| p.level.as_ref());
    Plan::Round { outlets: level.map(|l| l.level) }
}

/// How a round reaches the machine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Machine {
    /// The system the proof went through, at its path.
    Read(String),
    /// Found first through the binding, as a fence does ([`identity_target`], [`identify`]): an
    /// attested release (no proof's system), or a binding whose spec changed since the proof (P1: it
    /// leads to no proof's machine until it is found and proven again through the binding as it is
    /// now; a proof that recorded no generation counts as changed).
    Identify,
}

/// [`Machine`] for the proof's binding at `generation_now` (its generation as read now; `None`:
/// the binding is gone, judged on the reading itself).
pub fn machine(status: &CoronerRemediationStatus, generation_now: Option<i64>) -> Machine {
    let identity = status.evidence.as_ref().and_then(|e| e.identity.as_ref());
    match identity {
        Some(identity) if generation_now.is_none() || identity.binding_generation == generation_now => {
            Machine::Read(identity.system_path.clone())
        }
        _ => Machine::Identify,
    }
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
pub fn shows_life(power: &PowerState) -> bool {
    !matches!(power, PowerState::Off | PowerState::OffUnknown(_))
}

/// R2: a sighting of life the guard's identification made though it could not finish (the device
/// failed after the node's system answered), recorded with the round's status so that a process
/// that takes over acts on it too ([`GuardStatus::sighted_at`]).
pub fn sighted(status: &CoronerRemediationStatus, now: Timestamp) -> CoronerRemediationStatus {
    let mut new = status.clone();
    new.guard.get_or_insert_with(GuardStatus::default).sighted_at = Some(MicroTime(now));
    new
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
