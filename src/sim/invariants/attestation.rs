//! A1-A4 on the world's truth: an attested release only when no sign of life came after the fence.

use super::*;

/// When the world's record shows remediation `task`'s fence admitted: its first status write past
/// `Pending`, or its first write of the fencing taint if that came first; with neither, its
/// creation, which comes no later.
pub(super) fn admitted_at(truth: &Truth, task: &str) -> Option<Micros> {
    let created = || {
        let at = truth.remediations.get(task)?.metadata.creation_timestamp.as_ref()?.0;
        Some(at.duration_since(truth.wall(0)).as_micros() as Micros)
    };
    truth
        .log
        .iter()
        .find_map(|r| match r {
            Record::Status { at, remediation, phase, .. }
                if remediation == task && phase != Phase::Pending.as_str() =>
            {
                Some(*at)
            }
            Record::NodeWrite { at, by, before, after, .. }
                if by.task == task
                    && after.iter().any(|t| t.key == CoronerTaint::Fencing.key())
                    && !before.iter().any(|t| t.key == CoronerTaint::Fencing.key()) =>
            {
                Some(*at)
            }
            _ => None,
        })
        .or_else(created)
}

/// A release by attestation (docs/safety.md, "Attestations"), in effect at `at`: an attestation of
/// this node, not expired, about the Node object as it is; and nothing the fence recorded showed the
/// machine alive — the last reading of the node's machine, if any, was Off; no kubelet renewal or
/// `Ready=True` since the fence was admitted; no Lease fresh and no `Ready=True` now.
pub(super) fn attestation_holds(
    truth: &Truth,
    scenario: &Scenario,
    by: &Caller,
    release: &Release,
) -> Result<(), String> {
    let name = by.task.trim_start_matches("attestation/");
    let attestation = truth.attestations.get(name).ok_or_else(|| format!("attestation {name} does not exist"))?;
    let created = truth.log.iter().find_map(|r| match r {
        Record::Attested { at, name: of, .. } if of == name => Some(*at),
        _ => None,
    });
    let created = created.ok_or_else(|| format!("nobody created attestation {name}"))?;
    let node = truth.nodes.get(&release.node).ok_or("the node is gone")?;
    if attestation.spec.node_name != release.node || node.uid().as_deref() != Some(attestation.spec.node_uid.as_str()) {
        return Err(format!("attestation {name} is about another Node object"));
    }
    if release.at - created > micros(attestation.spec.valid_for.get()) {
        return Err(format!("attestation {name} had expired"));
    }
    let machine = truth.machine_of_node(&release.node).ok_or("the node has no machine")?;
    let fence = &release.remediation;
    let acknowledged = |reason| attestation.spec.acknowledge.iter().any(|a| a.reason == reason);
    // The fence's power action: its first ForceOff that reached a BMC, or Off that reached an outlet.
    let power_action = truth.log.iter().find_map(|r| match r {
        Record::Reset { at, by, on: false, guard: false, .. } | Record::OutletSwitched { at, by, on: false, .. }
            if by.task == *fence =>
        {
            Some(*at)
        }
        _ => None,
    });
    let last_reading = truth.log.iter().rev().find_map(|r| match r {
        Record::Answer {
            by,
            bmc,
            machine: Some(of),
            said: Answered::System { reported_off, .. },
            sampled,
            answered,
            ..
        } if by.task == *fence && *of == machine && *sampled <= release.at => {
            Some((*reported_off, *sampled, *answered, *bmc))
        }
        _ => None,
    });
    if let Some((false, sampled, answered, bmc)) = last_reading {
        // A1: an On from a BMC that has not answered the fence since, read before its power action,
        // may be acknowledged; one read after it has no override.
        let dark_since = !truth.log.iter().any(|r| {
            matches!(r, Record::Answer { by, bmc: of, said: Answered::System { .. }, answered: later, .. }
                if by.task == *fence && *of == bmc && *later > answered)
        });
        let before_power_action = power_action.is_none_or(|at| at > sampled);
        if !(acknowledged(AcknowledgedReason::BmcReportedOn) && dark_since && before_power_action) {
            return Err(format!(
                "the fence's last reading of {} ({}) was not Off: the BMC showed the machine alive{}",
                truth.machines[machine].name,
                show(sampled),
                if dark_since { "" } else { ", and it answered the fence since" }
            ));
        }
    }
    let since = admitted_at(truth, fence).unwrap_or(0);
    binding_verified_at_admission(truth, attestation, fence, &release.node, since)?;
    let freshness = micros(scenario.spec.lease_freshness.get());
    let ended = truth.log.iter().find_map(|r| match r {
        Record::Status { at, remediation, after, .. }
            if remediation == fence && after.as_deref() == Some(conditions::FALSE) =>
        {
            Some(*at)
        }
        _ => None,
    });
    // A1: life the fence saw before its power action may be acknowledged (`FenceSawLife`) by an
    // attestation created once leaseFreshness has passed since; life after the power action or
    // after the fence ended, and a Lease fresh at the release, have no override.
    let acknowledged_life = |t: Micros| {
        acknowledged(AcknowledgedReason::FenceSawLife)
            && ended.is_some_and(|ended| t < ended)
            && power_action.is_none_or(|at| t < at)
            && t <= release.at - freshness
            && created >= t + freshness - SECOND
    };
    let life = truth.life.get(&release.node).into_iter().flatten().find(|(t, kind)| {
        matches!(kind, Life::Lease | Life::Ready)
            && *t <= release.at
            && (*t >= since || *t > release.at - freshness)
            && !acknowledged_life(*t)
    });
    if let Some((t, kind)) = life {
        return Err(format!("the node's kubelet reported ({kind:?}) at {}, during or after the fence", show(*t)));
    }
    if crate::fence::ready_status(node) == Some(conditions::TRUE) {
        return Err("the node reports Ready=True".into());
    }
    Ok(())
}

/// Whether the node showed life before the power action at `at`, early enough for coroner to have
/// known: its kubelet renewed its Lease in the freshness window (not in the last moment, which the
/// watch may not have brought yet), or reported `Ready=True` in that window, or a person labelled it
/// excluded — those two before the process last read the Node (a power action rests on that read;
/// one taken before the intent was persisted does not count as a re-check, and then everything up to
/// the action counts); or the Node is another than the one admitted.
pub(super) fn shows_life(
    truth: &Truth,
    (pid, node, remediation): (u32, &str, &str),
    at: Micros,
    intent: &Option<(String, u32, String)>,
    scenario: &Scenario,
) -> Option<String> {
    let window = micros(scenario.spec.lease_freshness.get());
    let current = truth.nodes.get(node)?;
    let admitted = truth
        .remediations
        .get(remediation)
        .and_then(|r| r.status.as_ref()?.evidence.as_ref()?.node.as_ref().map(|n| n.uid.clone()));
    let seen_until = seen_until(truth, (pid, node, remediation), at, intent);
    // A replacement after the process's last read of the Node, right before the request, it could not see.
    let replacements: Vec<Micros> = truth
        .life
        .get(node)
        .into_iter()
        .flatten()
        .filter(|(_, kind)| *kind == Life::Replaced)
        .map(|(t, _)| *t)
        .collect();
    let seen_replaced = replacements.is_empty() || replacements.iter().any(|t| *t <= seen_until);
    if admitted.is_some_and(|uid| current.uid().as_ref() != Some(&uid)) && seen_replaced {
        return Some("it is another Node than the one admitted (a new UID)".into());
    }
    truth
        .life
        .get(node)?
        .iter()
        .rev()
        .find(|(t, kind)| match kind {
            Life::Lease => *t <= at - UNSEEN_LEASE && *t >= at - window,
            Life::Ready => *t <= seen_until && *t >= at - window,
            Life::Excluded => *t <= seen_until,
            // Not a sign of life: a person's word that the machine may run again (judged for the guard).
            Life::Approved => false,
            Life::Replaced => false,
        })
        .map(|(t, kind)| match kind {
            Life::Excluded => format!("it was labelled {} at {}", contract::EXCLUDE_LABEL, show(*t)),
            _ => format!("its kubelet reported ({kind:?}) at {}", show(*t)),
        })
}

/// Until when the process that acted at `at` had seen the Node: its last read of it, if that came
/// after the intent was persisted (the re-check right before acting); else everything up to `at`.
pub(super) fn seen_until(
    truth: &Truth,
    (pid, node, remediation): (u32, &str, &str),
    at: Micros,
    intent: &Option<(String, u32, String)>,
) -> Micros {
    let decided = intent.as_ref().and_then(|(instance, attempt, decided)| {
        truth.intents.get(&(remediation.to_owned(), format!("{instance}/{attempt}/{decided}"))).copied()
    });
    let last_read = truth
        .node_reads
        .get(&(pid, remediation.to_owned(), node.to_owned()))
        .and_then(|reads| reads.iter().rev().find(|read| **read <= at).copied());
    match (last_read, decided) {
        (Some(read), Some(decided)) if read >= decided => read,
        _ => at,
    }
}

/// Whether coroner may take the out-of-service taint owned by remediation `owner` off its node now:
/// that fence is past its release (powering on again, with `Reboot`), or the remediation is being
/// deleted or gone.
/// docs/safety.md, "After the release": a Lease renewed since the power-off means the machine
/// switched off is not this node, and the taint is taken back at once. Judged from the world: the
/// node's Lease was renewed after the owning remediation was created (no fence's power-off comes
/// before that), whatever coroner recorded.
pub(super) fn taken_back_on_life(truth: &Truth, node: &str, owner: Option<&str>) -> bool {
    // In true time: a kubelet's renewTime may run behind the world's clock.
    let Some(name) = truth.remediations.values().find(|r| r.uid().as_deref() == owner).map(|r| r.name_any()) else {
        return false;
    };
    let created = truth.created.iter().rev().find(|(of, ..)| *of == name).map(|(.., at)| *at);
    let renewed = truth.life.get(node).and_then(|life| life.iter().rev().find(|(_, k)| *k == Life::Lease));
    created.zip(renewed).is_some_and(|(created, (renewed, _))| *renewed > created)
}

pub(super) fn release_may_end(truth: &Truth, owner: Option<&str>) -> bool {
    let Some(r) = truth.remediations.values().find(|r| r.uid().as_deref() == owner) else { return true };
    let phase = Phase::of(r);
    r.metadata.deletion_timestamp.is_some()
        || matches!(phase, Phase::PoweringOn | Phase::WaitingForNode)
        || (phase == Phase::Done && r.spec.action == FenceAction::Reboot)
}
