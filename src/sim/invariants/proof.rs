//! P2-P5 and A1 on the world's truth: the readings a proof rests on, whether the machine was off
//! through them, and whether the node was silent at its release.

use super::*;

/// One reading in the record, as the proof rules see it.
#[derive(Clone, Copy, Debug)]
pub(super) struct Reading {
    requested: Micros,
    sampled: Micros,
    answered: Micros,
    machine: Option<usize>,
    off: bool,
    truly_on: bool,
}

impl Reading {
    fn times(&self) -> fence::Sampled {
        fence::Sampled {
            requested: crate::sim::exec::duration(self.requested),
            answered: crate::sim::exec::duration(self.answered),
        }
    }
}

/// The system readings `by` received up to `until`, in order.
pub(super) fn readings_by(truth: &Truth, by: &Caller, until: Micros) -> Vec<Reading> {
    truth
        .log
        .iter()
        .filter_map(|r| match r {
            Record::Answer { by: who, machine, read_from, sampled, answered, truly_on, said, .. }
                if who == by && *answered <= until =>
            {
                // A failed try is retried within the same reading, and the gap rule bounds what it
                // leaves unseen: only what a system answered counts, as requested when its read
                // began (the value was sampled somewhere between then and its answer).
                let Answered::System { reported_off: off, .. } = said else { return None };
                let off = *off;
                Some(Reading {
                    requested: *read_from,
                    sampled: *sampled,
                    answered: *answered,
                    machine: *machine,
                    off,
                    truly_on: *truly_on,
                })
            }
            _ => None,
        })
        .collect()
}

/// A release by BMC proof (docs/safety.md, "The proof"), sent by `by` at `sent` and in effect at
/// `at`, judged from the answers that process received in its term for that remediation: they end in
/// Off readings of the node's machine, dense by the gap rule, spanning `settle`, the last one fresh
/// when the release was sent; the machine was truly off at every proving sample and stayed off from
/// the last one until the release took effect — unless the world switched it on after the last
/// proving reading's request (no reading can see that: the guard must). A power-on wholly between two
/// proving samples is not judged (docs/safety.md P4: invisible to sampling, and nothing runs elsewhere
/// before the release). A BMC that lies Off consistently is exempt from the truth check only.
pub(super) fn proof_holds(
    truth: &Truth,
    scenario: &Scenario,
    by: &Caller,
    node: &str,
    (since, sent): (Micros, Micros),
    at: Micros,
) -> Result<(), String> {
    let machine = truth.machine_of_node(node).ok_or("the node has no machine")?;
    let m = &truth.machines[machine];
    let spec = &scenario.spec;
    let all: Vec<Reading> = readings_by(truth, by, sent).into_iter().filter(|r| r.requested >= since).collect();
    // A read of another system during discovery (every member is read) is no reading of this machine:
    // it neither extends nor breaks the run (docs/safety.md, "When a reading was taken"). A last
    // reading of another machine still leaves no proof behind the release.
    let misdirected = all.last().is_some_and(|r| r.machine.is_some_and(|m| m != machine));
    let readings: Vec<Reading> =
        all.iter().filter(|r| !misdirected && r.machine.is_none_or(|m| m == machine)).copied().collect();
    let trailing = readings.iter().rev().take_while(|r| r.off && r.machine == Some(machine)).count();
    let run = &readings[readings.len() - trailing..];
    let Some(last) = run.last() else {
        let what = all.last().map_or("no reading at all".to_owned(), |r| match r.machine {
            Some(other) if other != machine => format!("its last reading was of {}", truth.machines[other].name),
            _ => format!("its last reading ({}) was not Off", show(r.requested)),
        });
        return Err(format!("p{}/{} has no Off reading of {} behind it: {what}", by.pid, by.term, m.name));
    };
    let gap = micros(fence::gap_bound(spec));
    let mut first = run.len() - 1;
    while first > 0 && fence::dense(&run[first - 1].times(), &run[first].times(), spec).is_ok() {
        first -= 1;
    }
    let dense = &run[first..];
    let settle = micros(spec.settle.get());
    let Some(start) = dense.iter().rposition(|r| last.requested - r.answered >= settle) else {
        return Err(format!(
            "its dense Off readings of {} (from {}, gap bound {}) do not span settle {}",
            m.name,
            show(dense[0].requested),
            show(gap),
            show(settle)
        ));
    };
    let proving = &dense[start..];
    let fresh = micros(fence::freshness(spec, timing()));
    if sent - last.requested > fresh {
        return Err(format!(
            "the proof's last reading ({}) was older than pollInterval + the request timeout when the release was sent",
            show(last.requested)
        ));
    }
    if scenario.bmc == BmcKind::LiesOff {
        return Ok(());
    }
    if let Some(on) = proving.iter().find(|r| r.truly_on) {
        return Err(format!("{} was on when the BMC sampled it for a proving reading at {}", m.name, show(on.sampled)));
    }
    // P4: a power-on wholly between two proving samples is invisible to sampling and frees nothing;
    // from the last proving sample the machine must stay off until the release takes effect.
    let until = before_injected_power_on(truth, machine, last.requested, at);
    if !m.off_throughout(last.sampled, until) {
        return Err(format!(
            "{} was on at some time between the proof's last sample ({}) and the release taking effect ({})",
            m.name,
            show(last.sampled),
            show(at)
        ));
    }
    Ok(())
}

/// Until when a release in effect at `at` must find `machine` off since its proof: the world's own
/// power-on after the proof's last request (`last_requested`) is the guard's to catch, not the proof's.
pub(super) fn before_injected_power_on(truth: &Truth, machine: usize, last_requested: Micros, at: Micros) -> Micros {
    let injected = truth.log.iter().find_map(|r| match r {
        Record::PoweredOn { at: on, machine: which, .. } if *which == machine && *on > last_requested && *on <= at => {
            Some(*on)
        }
        _ => None,
    });
    injected.map_or(at, |on| on - 1)
}

/// Whether `release` was proven through a PDU level: its remediation's fence read outlets before it.
pub(super) fn released_through_level(truth: &Truth, release: &Release) -> bool {
    truth.log.iter().any(|r| {
        matches!(r, Record::OutletAnswer { by, requested, .. } if by.task == release.remediation && *requested <= release.at)
    })
}

/// A release by a device's proof: through a PDU level when the releasing process read outlets for
/// it ([`level_proof_holds`]), or by the BMC's readings ([`proof_holds`]; for a process that read
/// outlets, only readings taken after its last outlet reading: a fence that proved again through
/// its BMC after a level, A4).
pub(super) fn released_on_proof(
    truth: &Truth,
    scenario: &Scenario,
    by: &Caller,
    node: &str,
    sent: Micros,
    at: Micros,
) -> Result<(), Violation> {
    let last_outlet = truth
        .log
        .iter()
        .filter_map(|r| match r {
            Record::OutletAnswer { by: who, requested, .. } if who == by && *requested <= sent => Some(*requested),
            _ => None,
        })
        .max();
    let Some(last_outlet) = last_outlet else {
        return proof_holds(truth, scenario, by, node, (0, sent), at).map_err(|e| Invariant::BmcProof.says(e));
    };
    // A4: a fence whose level failed may prove the machine off again through its BMC once that
    // answers an attestation's look: it then releases on BMC readings all taken after its last
    // outlet reading.
    level_proof_holds(truth, scenario, by, node, sent, at).or_else(|outlets| {
        proof_holds(truth, scenario, by, node, (last_outlet, sent), at).map_err(|bmc| {
            Invariant::LevelProof.says(format!("{outlets}; nor by its BMC after its last outlet reading: {bmc}"))
        })
    })
}

/// What a release write is conditioned on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Write {
    /// The taint: a patch of the Node under the resourceVersion the checks read, so a Node replaced
    /// before it lands is never written.
    OnTheNode,
    /// A pod's deletion (`ResourceDeletion`): not one atomic update with the Node, so its checks run
    /// again before each pod (docs/safety.md, "Silence at release"), and a Node replaced after the
    /// last read before that delete is the rule's own window.
    BesideTheNode,
}

/// Silence at release (docs/safety.md, "What counts as proof"): a fence writes its release (the
/// taint, or a pod's deletion) sent at `sent` and in effect at `at` only on the Node it admitted, not
/// replaced since (until the write took effect for the taint, until the releasing process last read
/// the Node before a pod's deletion: [`Write`]); silent as the releasing process last read it before
/// the write (`Ready=Unknown`, or anything but `True` with `remediateReadyFalse`); and its Lease not
/// renewed between the power-off (the fence's first reading that proved the machine off, through its
/// BMC or an outlet; admission when there is none) and that read. A renewal after the read is the
/// check after the write's to see.
pub(super) fn silent_at_release(
    truth: &Truth,
    scenario: &Scenario,
    by: &Caller,
    node: &str,
    (sent, at): (Micros, Micros),
    write: Write,
) -> Result<(), String> {
    let admitted = admitted_at(truth, &by.task).unwrap_or(0);
    let read = truth
        .node_reads
        .get(&(by.pid, by.task.clone(), node.to_owned()))
        .and_then(|reads| reads.iter().rev().find(|read| **read <= sent).copied())
        .unwrap_or(sent);
    let life = truth.life.get(node).map(Vec::as_slice).unwrap_or_default();
    let until = match write {
        Write::OnTheNode => at,
        Write::BesideTheNode => read,
    };
    if let Some((replaced, _)) = life.iter().find(|(t, kind)| *kind == Life::Replaced && *t > admitted && *t <= until) {
        return Err(format!("the Node was replaced at {} after the fence admitted it", show(*replaced)));
    }
    let ready = truth
        .ready_history
        .get(node)
        .and_then(|history| history.iter().rev().find(|(t, _)| *t <= read))
        .map(|(_, status)| status.as_str());
    let silent = match ready {
        Some(status) if scenario.spec.remediate_ready_false => status != conditions::TRUE,
        Some(status) => status == conditions::UNKNOWN,
        None => true,
    };
    if !silent {
        return Err(format!(
            "the Node showed Ready={ready:?} when the releasing process last read it ({})",
            show(read)
        ));
    }
    let machine = truth.machine_of_node(node);
    let proved_off =
        truth.log.iter().filter_map(|r| match r {
            Record::Answer {
                by: who, machine: m, sampled, said: Answered::System { reported_off: true, .. }, ..
            } if who.task == by.task && *m == machine && machine.is_some() && *sampled >= admitted => Some(*sampled),
            Record::OutletAnswer { by: who, sampled, proves_off: true, .. }
                if who.task == by.task && *sampled >= admitted =>
            {
                Some(*sampled)
            }
            _ => None,
        });
    let power_off = proved_off.min().unwrap_or(admitted);
    if let Some((renewed, _)) = life.iter().find(|(t, kind)| *kind == Life::Lease && *t > power_off && *t <= read) {
        return Err(format!(
            "its Lease was renewed at {}, after the power-off ({}) and before the releasing process last read the Node ({})",
            show(*renewed),
            show(power_off),
            show(read)
        ));
    }
    Ok(())
}

/// A2: an attested release only on a binding verified at the content it had when the fence was
/// admitted (unless the attestation acknowledges `BindingUnverified`): judged from the world's record
/// of the binding's content, at some moment between the fence's last status write before its
/// admission (when it read the binding for it) and the admission. The world verifies once, before
/// the outage, and counts the verifier's verifications its truth confirms
/// ([`super::super::world::Truth::note_verification_if_true`]).
pub(super) fn binding_verified_at_admission(
    truth: &Truth,
    attestation: &crate::api::CoronerAttestation,
    fence: &str,
    binding: &str,
    admitted: Micros,
) -> Result<(), String> {
    if attestation.spec.acknowledge.iter().any(|a| a.reason == AcknowledgedReason::BindingUnverified) {
        return Ok(());
    }
    // The verifications the world counts up to the admission: what coroner's status says counts for nothing.
    let verified: Vec<u64> = truth
        .binding_verifications
        .iter()
        .filter(|(at, of, _)| of == binding && *at <= admitted)
        .map(|(_, _, content)| *content)
        .collect();
    let Some(verified) = verified.last().copied() else {
        return Err(format!("binding {binding} was never verified before fence {fence} was admitted (A2)"));
    };
    let read_from = truth
        .log
        .iter()
        .filter_map(|r| match r {
            Record::Status { at, remediation, .. } if remediation == fence && *at < admitted => Some(*at),
            _ => None,
        })
        .max()
        .unwrap_or(0);
    let mut moments = vec![read_from];
    moments.extend(
        truth
            .binding_contents
            .iter()
            .filter(|(at, of, _)| of == binding && *at > read_from && *at <= admitted)
            .map(|(at, ..)| *at),
    );
    let verified_then = moments.iter().any(|at| truth.binding_content_at(binding, *at) == Some(verified));
    if verified_then {
        Ok(())
    } else {
        Err(format!(
            "binding {binding} was not verified at the content it had when fence {fence} was admitted ({}), and no acknowledgement says so (A2)",
            show(admitted)
        ))
    }
}
