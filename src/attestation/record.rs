//! The attested release's record: the re-checks right before the Node update, and the statuses of
//! the attestation and the remediation before, during and after it.

use super::*;

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
