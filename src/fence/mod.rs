//! The fence state machine. Every step is `next(spec, status, observation, context) -> Decision`: a pure
//! function of what is persisted in the remediation's status and what was just observed.
//!
//! The controller asks [`plan`] what to observe, observes it (BMC reads, the checked release, the node's
//! workloads), calls [`next`], persists the new status under a resourceVersion precondition, and only
//! then sends the BMC mutation the decision carries (the persisted intent comes first: if the write
//! fails, nothing is sent). The answer is fed back through [`next`] as [`Observation::ResetAnswered`].

mod observe;
#[cfg(test)]
mod props;
#[cfg(test)]
mod tests;

use std::time::Duration as StdDuration;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, Time};

pub use observe::*;

use crate::{
    api::{
        CoronerRemediationSpec, CoronerRemediationStatus, Evidence, FenceAction, IdentityEvidence, Intent, OffRun,
        Phase, PowerAction, PowerOffEvidence, PowerOnEvidence, Progress, Reading, ReleaseEvidence, ReleaseKind,
        conditions,
    },
    bmc::{PowerState, ResetType},
    contract::{self, Reason},
    identity,
};

/// Readings kept from the start and the end of an Off run; bounds the status size.
const FIRST_READINGS: usize = 3;
const LAST_READINGS: usize = 5;
/// How often a remediation that waits on something outside coroner looks again.
const WAIT_RECHECK: StdDuration = StdDuration::from_secs(5);

/// What the controller should observe (or do, for Kubernetes-side steps that are idempotent) next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Plan {
    /// Nothing to observe before this time has passed.
    Wait(StdDuration),
    /// Evaluate the safety gates and, when they admit, record the node as found.
    Admit,
    /// Resolve the binding and read the BMC's system(s) for the identity proof.
    VerifyIdentity,
    /// One power reading of the verified system.
    ReadPower { system_path: String },
    /// Re-check the node and release its workloads in one resourceVersion-checked update.
    Release,
    /// Count the node's pods and VolumeAttachments that still hold the release up.
    CheckWorkloads,
    /// Nothing to do until the node or the remediation changes.
    Idle,
}

/// A Kubernetes Event to publish on the remediation and on the node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Notice {
    pub warning: bool,
    pub reason: String,
    pub message: String,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    pub status: CoronerRemediationStatus,
    /// A BMC mutation to send after `status` (which records it as intent) has been persisted.
    pub reset: Option<ResetType>,
    /// When to look again; `None` waits for a change of the remediation or the node.
    pub requeue: Option<StdDuration>,
    pub notices: Vec<Notice>,
}

/// What stays fixed for one reconcile.
#[derive(Clone, Copy, Debug)]
pub struct Context<'a> {
    pub now: Timestamp,
    /// This coroner process; readings taken by another (earlier) process never count.
    pub instance: &'a str,
    pub node: &'a NodeSnapshot,
    /// Why the power action must wait, if it must: the lease gate, checked again right before it.
    pub hold_power_action: Option<&'a (Reason, String)>,
}

pub fn phase_of(status: &CoronerRemediationStatus) -> Phase {
    status.phase.unwrap_or_default()
}

/// What to observe next in the current phase.
pub fn plan(spec: &CoronerRemediationSpec, status: &CoronerRemediationStatus, ctx: Context<'_>) -> Plan {
    let progress = status.progress.clone().unwrap_or_default();
    let not_before = |at: Option<&MicroTime>| at.map(|t| t.0).filter(|t| *t > ctx.now).map(|t| until(ctx.now, t));
    let paced =
        || not_before(progress.last_reading_at.as_ref().map(|t| MicroTime(t.0 + spec.poll_interval.get())).as_ref());
    let system_path = || status.evidence.as_ref().and_then(|e| e.identity.as_ref()).map(|i| i.system_path.clone());
    match phase_of(status) {
        Phase::Pending => Plan::Admit,
        Phase::VerifyingIdentity => {
            not_before(progress.next_attempt_at.as_ref()).map_or(Plan::VerifyIdentity, Plan::Wait)
        }
        Phase::PoweringOff => match not_before(progress.next_attempt_at.as_ref()) {
            Some(wait) => Plan::Wait(wait),
            None => system_path().map_or(Plan::VerifyIdentity, |system_path| Plan::ReadPower { system_path }),
        },
        Phase::ConfirmingOff => match paced() {
            Some(wait) => Plan::Wait(wait),
            None => system_path().map_or(Plan::VerifyIdentity, |system_path| Plan::ReadPower { system_path }),
        },
        // Only a proof taken by this process (this leadership term) may release the node.
        Phase::Releasing if !proof_is_ours(status, ctx.instance) => {
            system_path().map_or(Plan::VerifyIdentity, |system_path| Plan::ReadPower { system_path })
        }
        Phase::Releasing => Plan::Release,
        Phase::WaitingForRelease => Plan::CheckWorkloads,
        // The out-of-service taint must be gone before the machine may come back.
        Phase::PoweringOn if ctx.node.out_of_service_owned => Plan::Wait(StdDuration::from_secs(1)),
        Phase::PoweringOn => match paced() {
            Some(wait) => Plan::Wait(wait),
            None => system_path().map_or(Plan::Idle, |system_path| Plan::ReadPower { system_path }),
        },
        Phase::WaitingForNode | Phase::Done | Phase::Failed => Plan::Idle,
    }
}

/// The next step of the fence.
pub fn next(
    spec: &CoronerRemediationSpec,
    status: &CoronerRemediationStatus,
    observation: Observation,
    ctx: Context<'_>,
) -> Decision {
    let mut step = Step::new(spec, status, ctx);
    match (phase_of(status), observation) {
        (_, Observation::ResetAnswered { action, result }) => step.reset_answered(action, result),
        (Phase::Pending, Observation::Admission(verdict)) => step.admission(verdict),
        (Phase::VerifyingIdentity | Phase::PoweringOff | Phase::ConfirmingOff, Observation::Identity(found)) => {
            step.identity(found)
        }
        (Phase::PoweringOff, Observation::Power(reading)) => step.powering_off(reading),
        (Phase::ConfirmingOff, Observation::Power(reading)) => step.confirming_off(reading),
        (Phase::Releasing, Observation::Power(reading)) => step.prove_again(reading),
        (Phase::Releasing, Observation::Release(outcome)) => step.released(outcome),
        (Phase::WaitingForRelease, Observation::Workloads(workloads)) => step.waiting_for_release(workloads),
        (Phase::PoweringOn, Observation::Power(reading)) => step.powering_on(reading),
        (Phase::WaitingForNode, Observation::Nothing) => step.waiting_for_node(),
        (_, Observation::Wait) => step.requeue = plan(spec, status, ctx).wait_time().or(Some(WAIT_RECHECK)),
        _ => {}
    }
    step.finish()
}

/// A decision made outside a fence step (start, timeout, missing node, leader on the node): stamps
/// the phase change and the update time.
fn standalone(
    old: &CoronerRemediationStatus,
    mut new: CoronerRemediationStatus,
    now: Timestamp,
    requeue: Option<StdDuration>,
    notices: Vec<Notice>,
) -> Decision {
    stamp_phase(old, &mut new, now);
    if new != *old {
        new.last_update_time = Some(Time(now));
    }
    Decision { status: new, reset: None, requeue, notices }
}

/// Marks when the phase changed, so operators (and alerts) see how long a remediation has been in it.
fn stamp_phase(old: &CoronerRemediationStatus, new: &mut CoronerRemediationStatus, now: Timestamp) {
    if new.phase != old.phase {
        new.phase_since = Some(MicroTime(now));
    }
}

/// A remediation seen for the first time: `Processing=True`, `Succeeded=Unknown` before any gate runs.
pub fn start(status: &CoronerRemediationStatus, node_name: &str, now: Timestamp) -> Option<Decision> {
    if status.phase.is_some() {
        return None;
    }
    let mut new = status.clone();
    let message = format!("remediation of node {node_name} accepted; checking the safety gates");
    contract::record(&mut new.conditions, Reason::RemediationStarted, &message, now);
    new.phase = Some(Phase::Pending);
    let notice = Notice { warning: false, reason: Reason::RemediationStarted.as_str().into(), message };
    Some(standalone(status, new, now, Some(StdDuration::ZERO), vec![notice]))
}

/// coroner's leader runs on the node to fence: it never fences itself. The remediation waits in its
/// phase (`Processing=True`) until another replica leads.
pub fn leader_on_target(status: &CoronerRemediationStatus, node_name: &str, now: Timestamp) -> Decision {
    let mut new = status.clone();
    let message =
        format!("coroner's leader runs on node {node_name}, the node to fence: waiting for another replica to lead");
    let changed = contract::record(&mut new.conditions, Reason::LeaderOnTargetNode, &message, now);
    let notices = if changed {
        vec![Notice { warning: true, reason: Reason::LeaderOnTargetNode.as_str().into(), message }]
    } else {
        vec![]
    };
    standalone(status, new, now, Some(WAIT_RECHECK), notices)
}

/// NHC stamped `nhc-timed-out`: no further BMC mutation. Unless the fence already succeeded, it fails.
pub fn timed_out(status: &CoronerRemediationStatus, now: Timestamp) -> Option<Decision> {
    let phase = phase_of(status);
    if phase.is_terminal() {
        return None;
    }
    let mut new = status.clone();
    let succeeded = conditions::is_true(&status.conditions, contract::SUCCEEDED);
    let message = if succeeded {
        format!("NodeHealthCheck timed the remediation out in phase {}; no further BMC request is sent", phase.as_str())
    } else {
        format!(
            "NodeHealthCheck timed the remediation out in phase {} before the fence succeeded; nothing released, no further BMC request is sent",
            phase.as_str()
        )
    };
    if succeeded {
        conditions::set(
            &mut new.conditions,
            contract::PROCESSING,
            conditions::FALSE,
            Reason::TimedOutByNHC.as_str(),
            &message,
            now,
        );
        new.phase = Some(Phase::Done);
    } else {
        contract::record(&mut new.conditions, Reason::TimedOutByNHC, &message, now);
        new.phase = Some(Phase::Failed);
    }
    let notice = Notice { warning: !succeeded, reason: Reason::TimedOutByNHC.as_str().into(), message };
    Some(standalone(status, new, now, None, vec![notice]))
}

/// The node is gone. Before success that ends the fence; after it, there is nothing left to wait for.
pub fn node_missing(status: &CoronerRemediationStatus, node_name: &str, now: Timestamp) -> Option<Decision> {
    let phase = phase_of(status);
    if phase.is_terminal() {
        return None;
    }
    let mut new = status.clone();
    let message = format!("Node {node_name} does not exist");
    if conditions::is_true(&status.conditions, contract::SUCCEEDED) {
        contract::record(
            &mut new.conditions,
            Reason::RemediationComplete,
            &format!("{message} any more; nothing left to do"),
            now,
        );
        new.phase = Some(Phase::Done);
    } else {
        contract::record(&mut new.conditions, Reason::NodeNotFound, &message, now);
        new.phase = Some(Phase::Failed);
    }
    let notice = Notice { warning: true, reason: Reason::NodeNotFound.as_str().into(), message };
    Some(standalone(status, new, now, None, vec![notice]))
}

/// Whether coroner's `coroner.dev/fencing:NoSchedule` taint belongs on the node in this state: from
/// admission on; after a final refusal only if a power action was ever decided (the machine may be
/// half-way off); with `Off` until the remediation is deleted; with `Reboot` until the node is back.
pub fn fencing_taint_wanted(spec: &CoronerRemediationSpec, status: &CoronerRemediationStatus) -> bool {
    match phase_of(status) {
        Phase::Pending => false,
        Phase::Failed => power_action_decided(status),
        Phase::Done => spec.action == FenceAction::Off || !node_returned(status),
        _ => true,
    }
}

/// Whether the out-of-service taint coroner owns should stay: from the release until coroner removes
/// it before powering the machine on again (with `Off`: until the remediation is deleted).
pub fn out_of_service_taint_wanted(status: &CoronerRemediationStatus) -> bool {
    status
        .evidence
        .as_ref()
        .and_then(|e| e.release.as_ref())
        .is_some_and(|r| r.taint_owned && r.taint_removed_at.is_none())
}

fn power_action_decided(status: &CoronerRemediationStatus) -> bool {
    status.progress.as_ref().is_some_and(|p| p.intent.is_some())
        || status.evidence.as_ref().and_then(|e| e.power_off.as_ref()).is_some_and(|p| !p.resets.is_empty())
}

fn node_returned(status: &CoronerRemediationStatus) -> bool {
    status.evidence.as_ref().and_then(|e| e.power_on.as_ref()).is_some_and(|p| p.new_boot_id.is_some())
}

fn until(now: Timestamp, at: Timestamp) -> StdDuration {
    StdDuration::try_from(at.duration_since(now)).unwrap_or_default()
}

fn elapsed(since: Timestamp, now: Timestamp) -> StdDuration {
    StdDuration::try_from(now.duration_since(since)).unwrap_or_default()
}

impl Plan {
    fn wait_time(&self) -> Option<StdDuration> {
        match self {
            Plan::Wait(wait) => Some(*wait),
            _ => None,
        }
    }
}

/// The working copy of one decision.
struct Step<'a> {
    spec: &'a CoronerRemediationSpec,
    ctx: Context<'a>,
    old: &'a CoronerRemediationStatus,
    status: CoronerRemediationStatus,
    progress: Progress,
    evidence: Evidence,
    reset: Option<ResetType>,
    requeue: Option<StdDuration>,
    notices: Vec<Notice>,
}

impl<'a> Step<'a> {
    fn new(spec: &'a CoronerRemediationSpec, old: &'a CoronerRemediationStatus, ctx: Context<'a>) -> Self {
        Self {
            spec,
            ctx,
            old,
            status: old.clone(),
            progress: old.progress.clone().unwrap_or_default(),
            evidence: old.evidence.clone().unwrap_or_default(),
            reset: None,
            requeue: None,
            notices: Vec::new(),
        }
    }

    fn now(&self) -> MicroTime {
        MicroTime(self.ctx.now)
    }

    fn finish(mut self) -> Decision {
        // A reset goes out only as the persisted intent of a live fence: if a later rule of this
        // step ended the attempt or the fence, nothing is sent.
        let phase = self.status.phase.unwrap_or_default();
        let intended = |reset: ResetType| {
            self.progress.intent.as_ref().is_some_and(|i| i.result.is_none() && i.action.as_str() == reset.as_str())
        };
        let reset = self.reset.filter(|r| !phase.is_terminal() && intended(*r));
        self.status.progress = Some(self.progress);
        self.status.evidence = Some(self.evidence);
        stamp_phase(self.old, &mut self.status, self.ctx.now);
        if self.status != *self.old {
            self.status.last_update_time = Some(Time(self.ctx.now));
        }
        Decision { status: self.status, reset, requeue: self.requeue, notices: self.notices }
    }

    /// Moves to `phase` with `reason`; a change of phase or reason is announced once as an Event.
    fn enter(&mut self, phase: Phase, reason: Reason, message: String) {
        let changed_reason =
            conditions::find(&self.status.conditions, contract::SUCCEEDED).is_none_or(|c| c.reason != reason.as_str());
        let changed = self.status.phase != Some(phase) || changed_reason;
        contract::record(&mut self.status.conditions, reason, &message, self.ctx.now);
        self.status.phase = Some(phase);
        // One Event per transition: a step that already announced this message with its own reason
        // (IdentityVerified, PowerOffProven) is not announced twice.
        if changed && !self.notices.iter().any(|n| n.message == message) {
            let warning = matches!(reason.disposition(), contract::Disposition::Final | contract::Disposition::Waiting);
            self.notify(warning, reason.as_str(), message);
        }
    }

    fn fail(&mut self, reason: Reason, message: String) {
        self.requeue = None;
        // An attestation may release the node only while its Lease stays exactly as it is now.
        self.progress.lease_renew_time_at_failure = Some(lease_time(self.ctx.node));
        self.enter(Phase::Failed, reason, message);
    }

    fn notify(&mut self, warning: bool, reason: &str, message: String) {
        self.notices.push(Notice { warning, reason: reason.to_owned(), message });
    }

    fn set_condition(&mut self, type_: &str, ok: bool, reason: &str, message: &str) {
        let status = if ok { conditions::TRUE } else { conditions::FALSE };
        conditions::set(&mut self.status.conditions, type_, status, reason, message, self.ctx.now);
    }

    fn attempt_label(&self) -> String {
        format!("attempt {}/{}", self.progress.attempt.max(1), self.spec.retry.count)
    }

    // Pending ---------------------------------------------------------------------------------------

    fn admission(&mut self, verdict: Verdict) {
        match verdict {
            Verdict::Admit(node) => {
                let message =
                    format!("gates passed for node {} (Ready={}); verifying the BMC's identity", node.name, node.ready);
                self.evidence.node = Some(node);
                self.progress = Progress { attempt: 1, attempt_started_at: Some(self.now()), ..Progress::default() };
                self.enter(Phase::VerifyingIdentity, Reason::VerifyingIdentity, message);
                self.requeue = Some(StdDuration::ZERO);
            }
            Verdict::Wait { reason, message } => {
                self.enter(Phase::Pending, reason, message);
                self.requeue = Some(WAIT_RECHECK);
            }
            Verdict::Refuse { reason, message } => self.fail(reason, message),
        }
    }

    // VerifyingIdentity -----------------------------------------------------------------------------

    fn identity(&mut self, found: Result<IdentityFound, IdentityProblem>) {
        let found = match found {
            Ok(found) => found,
            Err(IdentityProblem::Binding { reason, message }) => return self.fail(reason, message),
            Err(IdentityProblem::Bmc(failure)) if failure.transient => {
                return self.identity_attempt_failed(failure.message);
            }
            Err(IdentityProblem::Bmc(failure)) => return self.fail(failure.reason, failure.message),
        };
        let node_uuid = self.evidence.node.as_ref().map(|n| n.system_uuid.clone()).unwrap_or_default();
        let matched = match identity::prove(&node_uuid, &found.system.uuid, &found.claims) {
            Ok(matched) => matched,
            Err(refusal) => {
                return self.fail(refusal.reason(), format!("{refusal}; no power action taken"));
            }
        };
        if found.tls_verified {
            self.set_condition(
                contract::TLS_VERIFIED,
                true,
                "CertificateVerified",
                "the BMC's certificate was verified",
            );
        } else {
            let message =
                format!("BmcBinding {} sets insecureSkipVerify: the BMC's certificate is not verified", found.binding);
            self.set_condition(contract::TLS_VERIFIED, false, "InsecureSkipVerify", &message);
            self.notify(true, "InsecureSkipVerify", message);
        }
        let message = format!(
            "BMC system {} at {} has UUID {} ({:?} match with the node's systemUUID {node_uuid}); reading its power",
            found.system.id, found.endpoint, found.system.uuid, matched
        );
        self.notify(false, "IdentityVerified", message.clone());
        self.evidence.identity = Some(IdentityEvidence {
            binding: found.binding,
            endpoint: found.endpoint,
            system_id: found.system.id,
            system_path: found.system.path,
            bmc_uuid: found.system.uuid,
            node_uuid,
            match_kind: matched,
            verified_at: self.now(),
            tls_verified: found.tls_verified,
        });
        self.progress = Progress { attempt: 1, ..Progress::default() };
        self.enter(Phase::PoweringOff, Reason::PoweringOff, message);
        self.requeue = Some(StdDuration::ZERO);
    }

    fn identity_attempt_failed(&mut self, message: String) {
        if self.progress.attempt >= self.spec.retry.count {
            let message = format!("{message} ({}); no power action taken", self.attempt_label());
            return self.fail(Reason::BmcUnreachable, message);
        }
        let message = format!(
            "identity check failed ({}): {message}; retrying in {}",
            self.attempt_label(),
            self.spec.retry.interval
        );
        self.schedule_next_attempt();
        self.enter(Phase::VerifyingIdentity, Reason::AttemptFailed, message);
    }

    fn schedule_next_attempt(&mut self) {
        let next_at = MicroTime(self.ctx.now + self.spec.retry.interval.get());
        self.progress.attempt += 1;
        self.progress.attempt_started_at = None;
        self.progress.next_attempt_at = Some(next_at);
        self.progress.off_run = None;
        self.requeue = Some(self.spec.retry.interval.get());
    }

    // PoweringOff / ConfirmingOff ---------------------------------------------------------------------

    /// Checks that a reading comes from the verified system; ends the fence otherwise.
    fn same_system(&mut self, reading: &PowerReading) -> bool {
        let Some(verified) = self.evidence.identity.as_ref() else {
            self.fail(Reason::BmcProtocolError, "a power reading arrived before the identity proof".into());
            return false;
        };
        let same = identity::parse(&reading.uuid).zip(identity::parse(&verified.bmc_uuid)).is_some_and(|(a, b)| a == b);
        if !same {
            let (path, uuid, verified) =
                (verified.system_path.clone(), reading.uuid.clone(), verified.bmc_uuid.clone());
            if conditions::is_true(&self.status.conditions, contract::SUCCEEDED) {
                // Already released: the fence stands; only the power-on stops.
                let message = format!(
                    "system {path} now reports UUID {uuid:?}, not the verified {verified}; no power-on is sent"
                );
                self.set_condition(contract::POWERED_ON, false, Reason::IdentityChanged.as_str(), &message);
                self.notify(true, Reason::IdentityChanged.as_str(), message.clone());
                self.enter(Phase::WaitingForNode, Reason::WaitingForNode, message);
            } else {
                let message = format!(
                    "system {path} now reports UUID {uuid:?}, not the verified {verified}; the fence stops and nothing is released"
                );
                self.fail(Reason::IdentityChanged, message);
            }
        }
        same
    }

    fn start_attempt_if_needed(&mut self) {
        if self.progress.attempt_started_at.is_none() {
            self.progress.attempt_started_at = Some(self.now());
            self.progress.next_attempt_at = None;
            self.power_off_evidence().attempts = self.progress.attempt;
        }
    }

    fn power_off_evidence(&mut self) -> &mut PowerOffEvidence {
        self.evidence.power_off.get_or_insert_with(PowerOffEvidence::default)
    }

    fn powering_off(&mut self, reading: Result<PowerReading, BmcFailure>) {
        self.start_attempt_if_needed();
        self.progress.last_reading_at = Some(self.now());
        match reading {
            Ok(reading) if !self.same_system(&reading) => {}
            Ok(reading) if reading.power_state == PowerState::Off => {
                if self.power_off_evidence().resets.is_empty() {
                    self.power_off_evidence().already_off = true;
                }
                self.progress.lease_renew_time_at_power_off.get_or_insert_with(|| lease_time(self.ctx.node));
                self.progress.off_run = Some(self.new_run(&reading));
                let message = format!(
                    "power reads Off before any reset ({}); confirming for {}",
                    self.attempt_label(),
                    self.spec.settle
                );
                self.enter(Phase::ConfirmingOff, Reason::ConfirmingOff, message);
                self.requeue = Some(self.spec.poll_interval.get());
            }
            Ok(_) if self.held() => {}
            Ok(reading) => {
                // The Lease as it stood before the reset: a renewal after it means a live kubelet.
                self.progress.lease_renew_time_at_power_off = Some(lease_time(self.ctx.node));
                self.decide(PowerAction::ForceOff);
                self.progress.off_run = None;
                let message =
                    format!("power reads {}; sending ForceOff ({})", reading.power_state, self.attempt_label());
                self.enter(Phase::ConfirmingOff, Reason::ConfirmingOff, message);
                self.requeue = Some(self.spec.poll_interval.get());
            }
            Err(failure) if !failure.transient => {
                self.fail(failure.reason, format!("{}; nothing released", failure.message))
            }
            Err(failure) => {
                self.progress.last_error = Some(failure.message);
                self.check_attempt_deadline();
            }
        }
    }

    /// Persists the intent of a BMC mutation (with this attempt and process) and asks for it to be sent
    /// once the status carrying the intent is written.
    fn decide(&mut self, action: PowerAction) {
        self.progress.intent = Some(Intent {
            action,
            attempt: self.progress.attempt,
            decided_at: self.now(),
            instance: self.ctx.instance.to_owned(),
            result: None,
        });
        self.reset = Some(match action {
            PowerAction::ForceOff => ResetType::ForceOff,
            PowerAction::On => ResetType::On,
        });
    }

    /// A gate holds power actions (e.g. the node's Lease was renewed lately): wait in PoweringOff,
    /// saying why. Waiting is not part of an attempt: its powerOffTimeout starts when it may act.
    fn held(&mut self) -> bool {
        let Some((reason, message)) = self.ctx.hold_power_action else { return false };
        self.progress.attempt_started_at = None;
        self.enter(Phase::PoweringOff, *reason, format!("{message}; no power action yet"));
        self.requeue = Some(WAIT_RECHECK);
        true
    }

    /// An intent of `action` is persisted but was never answered: it may never have been sent.
    fn unsent(&self, action: PowerAction) -> bool {
        self.progress.intent.as_ref().is_some_and(|i| i.action == action && i.result.is_none())
    }

    fn new_run(&self, reading: &PowerReading) -> OffRun {
        OffRun {
            instance: self.ctx.instance.to_owned(),
            count: 1,
            first: vec![self.reading(reading)],
            last: vec![self.reading(reading)],
        }
    }

    fn reading(&self, reading: &PowerReading) -> Reading {
        Reading { at: self.now(), power_state: reading.power_state.to_string() }
    }

    fn confirming_off(&mut self, reading: Result<PowerReading, BmcFailure>) {
        self.start_attempt_if_needed();
        self.progress.last_reading_at = Some(self.now());
        match reading {
            Ok(reading) if !self.same_system(&reading) => return,
            Ok(reading) if reading.power_state == PowerState::Off => {
                let run = match self.progress.off_run.take() {
                    // Readings from an earlier coroner process never count.
                    Some(mut run) if run.instance == self.ctx.instance => {
                        run.count += 1;
                        if run.first.len() < FIRST_READINGS {
                            run.first.push(self.reading(&reading));
                        }
                        run.last.push(self.reading(&reading));
                        if run.last.len() > LAST_READINGS {
                            run.last.remove(0);
                        }
                        run
                    }
                    _ => self.new_run(&reading),
                };
                self.progress.lease_renew_time_at_power_off.get_or_insert_with(|| lease_time(self.ctx.node));
                if proven(&run, self.spec.settle.get()) {
                    return self.off_proven(run);
                }
                self.progress.off_run = Some(run);
            }
            Ok(reading) => {
                self.progress.off_run = None;
                self.progress.last_error = Some(format!("power reads {}", reading.power_state));
                if self.unsent(PowerAction::ForceOff) {
                    // The ForceOff persisted earlier was never answered: coroner stopped, or lost
                    // leadership, between persisting it and sending it. Send it now, right after
                    // this fresh reading, instead of waiting out the attempt; unless a gate holds
                    // power actions, which then waits like a first ForceOff would.
                    if self.held() {
                        return;
                    }
                    self.decide(PowerAction::ForceOff);
                    let message = format!(
                        "power reads {}; sending the ForceOff decided earlier ({})",
                        reading.power_state,
                        self.attempt_label()
                    );
                    self.enter(Phase::ConfirmingOff, Reason::ConfirmingOff, message);
                }
            }
            Err(failure) if !failure.transient => {
                return self.fail(failure.reason, format!("{}; nothing released", failure.message));
            }
            Err(failure) => {
                self.progress.off_run = None;
                self.progress.last_error = Some(failure.message);
            }
        }
        if !self.check_attempt_deadline() {
            self.requeue = Some(self.spec.poll_interval.get());
        }
    }

    /// Ends the attempt when powerOffTimeout has passed: schedules the next one, or fails when the
    /// budget is spent. Returns whether the attempt ended.
    fn check_attempt_deadline(&mut self) -> bool {
        let started = self.progress.attempt_started_at.as_ref().map_or(self.ctx.now, |t| t.0);
        if elapsed(started, self.ctx.now) < self.spec.power_off_timeout.get() {
            self.requeue = Some(self.spec.poll_interval.get());
            return false;
        }
        let last = self.progress.last_error.clone().unwrap_or_else(|| "no unbroken run of Off readings".into());
        if self.progress.attempt >= self.spec.retry.count {
            let message = format!(
                "no proof of power-off within {} in any of {} attempts (last: {last}); nothing released",
                self.spec.power_off_timeout, self.spec.retry.count
            );
            self.fail(Reason::PowerOffNotConfirmed, message);
        } else {
            let message = format!(
                "no proof of power-off within {} ({}; last: {last}); next attempt in {}",
                self.spec.power_off_timeout,
                self.attempt_label(),
                self.spec.retry.interval
            );
            self.schedule_next_attempt();
            self.progress.intent = None;
            self.enter(Phase::PoweringOff, Reason::AttemptFailed, message);
        }
        true
    }

    fn off_proven(&mut self, run: OffRun) {
        let first = run.first.first().map(|r| r.at.0.to_string()).unwrap_or_default();
        let message = format!(
            "power proven Off: {} consecutive Off readings from {first} spanning at least {}; releasing the node",
            run.count, self.spec.settle
        );
        let now = self.now();
        let evidence = self.power_off_evidence();
        evidence.proof = Some(run);
        evidence.proven_at = Some(now);
        self.progress.off_run = None;
        self.progress.last_error = None;
        self.notify(false, "PowerOffProven", message.clone());
        self.enter(Phase::Releasing, Reason::Releasing, message);
        self.requeue = Some(StdDuration::ZERO);
    }

    /// A proof taken by an earlier process cannot release: confirm again, in a fresh attempt clock
    /// (same attempt number, so no budget is spent on the restart).
    fn prove_again(&mut self, reading: Result<PowerReading, BmcFailure>) {
        if let Some(power_off) = self.evidence.power_off.as_mut() {
            power_off.proof = None;
            power_off.proven_at = None;
        }
        self.progress.off_run = None;
        self.progress.attempt_started_at = None;
        let message = "the power-off proof was taken by an earlier coroner process; proving it again".to_owned();
        self.enter(Phase::ConfirmingOff, Reason::ConfirmingOff, message);
        self.confirming_off(reading);
    }

    fn reset_answered(&mut self, action: ResetType, result: Result<u16, BmcFailure>) {
        let text = match &result {
            Ok(status) => format!("HTTP {status}"),
            Err(failure) => failure.message.clone(),
        };
        if let Some(intent) = self.progress.intent.as_mut() {
            intent.result = Some(text.clone());
        }
        let sent_at = self.progress.intent.as_ref().map_or_else(|| self.now(), |i| i.decided_at.clone());
        match action {
            ResetType::ForceOff => {
                let attempt = self.progress.attempt;
                self.power_off_evidence().resets.push(crate::api::ResetRecord {
                    attempt,
                    sent_at,
                    result: text.clone(),
                });
                // The answer proves nothing either way; only readings do. A rejection is still worth a Warning.
                self.notify(
                    result.is_err(),
                    "ForceOffSent",
                    format!("ForceOff sent ({}): {text}", self.attempt_label()),
                );
            }
            ResetType::On => {
                let power_on = self.evidence.power_on.get_or_insert_with(PowerOnEvidence::default);
                power_on.sent_at = Some(sent_at);
                power_on.result = Some(text.clone());
                self.notify(result.is_err(), "PowerOnSent", format!("On sent: {text}"));
            }
        }
        self.requeue = Some(self.spec.poll_interval.get());
    }

    // Releasing ---------------------------------------------------------------------------------------

    fn released(&mut self, outcome: Result<Released, String>) {
        let released = match outcome {
            Ok(released) => released,
            Err(why) => {
                let message = format!("{why}: the machine switched off is not this node; nothing released, no retry");
                return self.fail(Reason::NodeAliveAfterPowerOff, message);
            }
        };
        let how = match released.pods_deleted {
            Some(count) => format!("force-deleted {count} pods bound to the node"),
            None if released.taint_owned => "added the out-of-service taint".to_owned(),
            None => "the out-of-service taint was already there (not claimed)".to_owned(),
        };
        let message = format!("power proven Off and the node still silent (Ready={}); {how}", released.node_ready);
        self.evidence.release = Some(ReleaseEvidence {
            kind: ReleaseKind::BmcProof,
            attestation: None,
            strategy: self.spec.remediation_strategy,
            node_ready: released.node_ready,
            lease_renew_time: released.lease_renew_time.map(MicroTime),
            released_at: MicroTime(released.at),
            taint_owned: released.taint_owned,
            pods_deleted: released.pods_deleted,
            taint_removed_at: None,
            release_timed_out: false,
        });
        self.notify(false, Reason::NodeFenced.as_str(), message.clone());
        match self.spec.action {
            FenceAction::Off => {
                let message = format!("{message}; the machine stays off until someone powers it on");
                self.enter(Phase::Done, Reason::RemediationComplete, message);
            }
            FenceAction::Reboot => {
                self.enter(
                    Phase::WaitingForRelease,
                    Reason::WaitingForRelease,
                    format!("{message}; waiting for pods and volumes to be released"),
                );
                self.requeue = Some(self.spec.poll_interval.get());
            }
        }
    }

    // WaitingForRelease -------------------------------------------------------------------------------

    fn waiting_for_release(&mut self, workloads: Workloads) {
        let released_at = self.evidence.release.as_ref().map_or(self.ctx.now, |r| r.released_at.0);
        if workloads.blocking_pods == 0 && workloads.volume_attachments == 0 {
            self.set_condition(
                contract::WORKLOADS_RELEASED,
                true,
                "WorkloadsReleased",
                "no pod or VolumeAttachment holds the node any more",
            );
        } else if elapsed(released_at, self.ctx.now) >= self.spec.release_timeout.get() {
            let message = format!(
                "after {}: {} pods and {} VolumeAttachments still hold the node; powering on regardless",
                self.spec.release_timeout, workloads.blocking_pods, workloads.volume_attachments
            );
            self.set_condition(contract::WORKLOADS_RELEASED, false, "ReleaseTimeout", &message);
            self.notify(true, "ReleaseTimeout", message);
            if let Some(release) = self.evidence.release.as_mut() {
                release.release_timed_out = true;
            }
        } else {
            self.requeue = Some(self.spec.poll_interval.get().max(StdDuration::from_secs(2)));
            return;
        }
        if let Some(release) = self.evidence.release.as_mut() {
            release.taint_removed_at = release.taint_owned.then_some(MicroTime(self.ctx.now));
        }
        self.progress = Progress { attempt: 1, ..Progress::default() };
        self.enter(
            Phase::PoweringOn,
            Reason::PoweringOn,
            "workloads released; out-of-service taint removed; powering on".into(),
        );
        self.requeue = Some(StdDuration::from_secs(1));
    }

    // PoweringOn --------------------------------------------------------------------------------------

    fn powering_on(&mut self, reading: Result<PowerReading, BmcFailure>) {
        self.progress.last_reading_at = Some(self.now());
        let sent = self.progress.intent.as_ref().is_some_and(|i| i.action == PowerAction::On);
        match reading {
            Ok(reading) if !self.same_system(&reading) => {}
            Ok(reading) if reading.power_state == PowerState::On => {
                let message =
                    if sent { "power reads On again".to_owned() } else { "power already reads On".to_owned() };
                self.evidence.power_on.get_or_insert_with(PowerOnEvidence::default).confirmed_at = Some(self.now());
                self.set_condition(contract::POWERED_ON, true, "PoweredOn", &message);
                self.notify(false, "PoweredOn", message.clone());
                self.enter(
                    Phase::WaitingForNode,
                    Reason::WaitingForNode,
                    format!("{message}; waiting for the node to return with a new bootID"),
                );
            }
            Ok(_) if !sent || self.unsent(PowerAction::On) => {
                if !sent {
                    self.progress.attempt_started_at = Some(self.now());
                }
                self.decide(PowerAction::On);
                self.requeue = Some(self.spec.poll_interval.get());
            }
            outcome => {
                let last = match outcome {
                    Ok(reading) => format!("power reads {}", reading.power_state),
                    Err(failure) => failure.message,
                };
                let started = self.progress.attempt_started_at.as_ref().map_or(self.ctx.now, |t| t.0);
                if elapsed(started, self.ctx.now) >= self.spec.power_off_timeout.get() {
                    let message = format!(
                        "power did not read On within {} ({last}); the node stays fenced",
                        self.spec.power_off_timeout
                    );
                    self.set_condition(contract::POWERED_ON, false, "PowerOnNotConfirmed", &message);
                    self.notify(true, "PowerOnNotConfirmed", message.clone());
                    self.enter(Phase::WaitingForNode, Reason::WaitingForNode, message);
                } else {
                    self.progress.last_error = Some(last);
                    self.requeue = Some(self.spec.poll_interval.get());
                }
            }
        }
    }

    // WaitingForNode ----------------------------------------------------------------------------------

    fn waiting_for_node(&mut self) {
        let node = self.ctx.node;
        let old_boot = self.evidence.node.as_ref().map(|n| n.boot_id.as_str()).unwrap_or_default();
        if node.ready.as_deref() != Some(conditions::TRUE) || node.boot_id.is_empty() || node.boot_id == old_boot {
            return;
        }
        let power_on = self.evidence.power_on.get_or_insert_with(PowerOnEvidence::default);
        power_on.new_boot_id = Some(node.boot_id.clone());
        power_on.node_ready_at = Some(MicroTime(self.ctx.now));
        let message = format!("node is Ready again with bootID {}; coroner's taints are removed", node.boot_id);
        self.notify(false, "NodeRecovered", message.clone());
        self.enter(Phase::Done, Reason::RemediationComplete, message);
    }
}

/// Whether the power-off proof in `status` was taken by `instance` (the running process and
/// leadership term). Readings of an earlier process never count, also not as a finished proof.
fn proof_is_ours(status: &CoronerRemediationStatus, instance: &str) -> bool {
    status
        .evidence
        .as_ref()
        .and_then(|e| e.power_off.as_ref())
        .and_then(|p| p.proof.as_ref())
        .is_some_and(|proof| proof.instance == instance)
}

/// The proof: an unbroken run of Off readings whose first and last are at least `settle` apart.
pub fn proven(run: &OffRun, settle: StdDuration) -> bool {
    match (run.first.first(), run.last.last()) {
        (Some(first), Some(last)) => {
            SignedDuration::try_from(settle).is_ok_and(|settle| last.at.0.duration_since(first.at.0) >= settle)
        }
        _ => false,
    }
}

fn lease_time(node: &NodeSnapshot) -> MicroTime {
    // Absent Lease: record the epoch, so any Lease that appears later counts as a renewal.
    MicroTime(node.lease_renew_time.unwrap_or(Timestamp::UNIX_EPOCH))
}
