//! The invariants, checked after every step against the simulated world's truth: what the machines
//! really did, who really added a taint, what the kubelets really reported. coroner's own status is
//! read only to know what it claimed.

use std::collections::BTreeMap;

use kube::ResourceExt;

use super::{
    exec::{Micros, SECOND, micros},
    scenario::{Expect, Scenario},
    world::{Adder, Life, Record, Truth, taint_key},
};
use crate::{
    api::{FenceAction, Phase, conditions},
    contract,
    taints::CoronerTaint,
};

/// How long a death or a leadership move may leave nobody leading: the leader Lease runs out (15 s),
/// then another replica takes it at its next try.
const LEADERLESS: Micros = 20 * SECOND;
/// A Lease renewal closer than this to a power action may not have reached coroner yet (its watch).
const UNSEEN_LEASE: Micros = 2 * SECOND;

#[derive(Debug, Default)]
pub struct Checker {
    checked: usize,
    /// Mutations per (process, remediation, persisted intent).
    mutations: BTreeMap<(u32, String, String), u32>,
}

fn oos(key: &str) -> bool {
    key == CoronerTaint::OutOfService.key()
}

impl Checker {
    /// Judges the records written since the last call, and the deadlines that ran out.
    pub fn check(&mut self, truth: &Truth, scenario: &Scenario) -> Result<(), String> {
        while self.checked < truth.log.len() {
            let record = &truth.log[self.checked];
            self.checked += 1;
            self.judge(truth, scenario, record)?;
        }
        self.guard_reported(truth, scenario)?;
        self.fence_did_not_take_effect_reported(truth, scenario)
    }

    /// A power-on the world injects into a released machine is reported within 2 × the guard
    /// interval (a `ReleasedMachinePoweredOn` Event), unless coroner's taint left the node, or a
    /// process died or leadership moved meanwhile or shortly before (nobody could read). A slow apiserver slows each of
    /// a guard round's calls (the Node, the status write, the Events): the bound grows by as many slow
    /// answers.
    fn guard_reported(&self, truth: &Truth, scenario: &Scenario) -> Result<(), String> {
        let slow_api = scenario.faults.slow > 0.0
            || scenario.events.iter().any(|(_, event)| matches!(event, super::scenario::Event::SlowApi { .. }));
        let slowdown = if slow_api { 6 * scenario.faults.slow_latency } else { 0 };
        let bound = 2 * micros(super::GUARD_INTERVAL) + 2 * SECOND + slowdown;
        for (injected, node) in &truth.injected_on {
            if truth.now < injected + bound {
                continue;
            }
            let window = |at: &Micros| *at >= *injected && *at <= injected + bound;
            let reported = truth.log.iter().any(
                |r| matches!(r, Record::Event { at, reason, .. } if window(at) && reason == crate::guard::POWERED_ON),
            );
            let disrupted = truth.disruptions.iter().any(|at| *at >= injected - LEADERLESS && *at <= injected + bound);
            let taint_left = truth.log.iter().any(|r| match r {
                Record::NodeWrite { at, node: n, before, after, .. } => {
                    window(at) && n == node && before.iter().any(|t| oos(&t.key)) && !after.iter().any(|t| oos(&t.key))
                }
                _ => false,
            }) || !truth.released_by_coroner(node);
            if !reported && !disrupted && !taint_left {
                return Err(format!(
                    "the world powered the released machine of {node} on at {}; no ReleasedMachinePoweredOn by {}",
                    show(*injected),
                    show(injected + bound)
                ));
            }
        }
        Ok(())
    }

    /// A lying BMC's release cannot be caught by a reading; the node coming back with its pre-fence
    /// bootID must be: a `FenceDidNotTakeEffect` Event within 10 s of its kubelet's `Ready=True`.
    fn fence_did_not_take_effect_reported(&self, truth: &Truth, scenario: &Scenario) -> Result<(), String> {
        if scenario.bmc != super::scenario::BmcKind::LiesOff {
            return Ok(());
        }
        let released = truth.log.iter().find_map(|r| match r {
            Record::NodeWrite { at, before, after, .. }
                if after.iter().any(|t| oos(&t.key)) && !before.iter().any(|t| oos(&t.key)) =>
            {
                Some(*at)
            }
            _ => None,
        });
        let Some(released) = released else { return Ok(()) };
        let Some(machine) = truth.machine_of_node(super::TARGET) else { return Ok(()) };
        // Never switched off since the release, and its kubelet reported Ready afterwards.
        if !truth.machines[machine].on_at(released)
            || truth.machines[machine].history.iter().any(|(at, on)| *at > released && !on)
        {
            return Ok(());
        }
        let back = truth
            .life
            .get(super::TARGET)
            .and_then(|life| life.iter().find(|(at, kind)| *at > released && *kind == Life::Ready).map(|(at, _)| *at));
        let Some(back) = back else { return Ok(()) };
        // What coroner can know: the node back with the very bootID its Node showed at the release.
        let boot_now = truth
            .nodes
            .get(super::TARGET)
            .and_then(|n| n.status.as_ref()?.node_info.as_ref())
            .map(|i| i.boot_id.as_str());
        if boot_now != truth.boot_at_release.get(super::TARGET).map(String::as_str) {
            return Ok(());
        }
        if truth.now < back + 10 * SECOND
            || truth.disruptions.iter().any(|at| *at >= back - LEADERLESS && *at <= back + 10 * SECOND)
        {
            return Ok(());
        }
        let reported = truth.log.iter().any(|r| {
            matches!(r, Record::Event { at, reason, .. } if *at >= back && reason == crate::guard::DID_NOT_TAKE_EFFECT)
        });
        if reported {
            Ok(())
        } else {
            Err(format!(
                "node {} came back at {} with the bootID it had before a fence that never took effect; no FenceDidNotTakeEffect",
                super::TARGET,
                show(back)
            ))
        }
    }

    fn judge(&mut self, truth: &Truth, scenario: &Scenario, record: &Record) -> Result<(), String> {
        match record {
            Record::NodeWrite { at, sent, pid, node, before, after, before_annotations, after_annotations } => {
                if after.iter().any(|t| oos(&t.key) && !before.iter().any(|b| taint_key(b) == taint_key(t))) {
                    let owner = owner_of(after_annotations);
                    let remediation = truth
                        .remediations
                        .values()
                        .find(|r| r.uid() == owner)
                        .map(|r| r.name_any())
                        .unwrap_or_default();
                    released_on_proof(truth, scenario, &remediation, node, *sent).map_err(|e| {
                        format!("p{pid} added the out-of-service taint to {node} at {}: {e}", show(*at))
                    })?;
                }
                for removed in before.iter().filter(|b| !after.iter().any(|a| taint_key(a) == taint_key(b))) {
                    match truth.provenance.get(&taint_key(removed)) {
                        Some(Adder::Coroner { .. }) => {}
                        other => {
                            return Err(format!(
                                "p{pid} removed taint {} from {node} at {}, which coroner did not add (added by {other:?})",
                                taint_key(removed),
                                show(*at)
                            ));
                        }
                    }
                    let owner = owner_of(before_annotations);
                    if oos(&removed.key) && !release_may_end(truth, owner.as_deref()) {
                        return Err(format!(
                            "p{pid} removed its own out-of-service taint from {node} at {} while the fence still needs it (the release was undone)",
                            show(*at)
                        ));
                    }
                }
            }
            Record::PodDeleted { at, sent, pid, remediation, node } => {
                released_on_proof(truth, scenario, remediation, node, *sent)
                    .map_err(|e| format!("p{pid} force-deleted a pod of {node} at {}: {e}", show(*at)))?;
            }
            Record::Reset { at, pid, remediation, node, machine, on, intent, proven_path, path, guard } => {
                let what = if *on { "On" } else { "ForceOff" };
                let Some((instance, attempt, decided)) = intent else {
                    return Err(format!("p{pid} sent {what} to {path} at {} with no persisted intent", show(*at)));
                };
                let key = (*pid, remediation.clone(), format!("{instance}/{attempt}/{decided}/{what}"));
                let sent = self.mutations.entry(key).or_insert(0);
                *sent += 1;
                if *sent > 1 {
                    return Err(format!(
                        "p{pid} sent {what} twice for one persisted intent ({instance}, attempt {attempt}) of {remediation}"
                    ));
                }
                let owner = truth.machine_of_node(node);
                if owner != Some(*machine) {
                    return Err(format!(
                        "p{pid} sent {what} at {} to {}, which is not node {node}'s machine",
                        show(*at),
                        truth.machines[*machine].name
                    ));
                }
                if proven_path.as_deref() != Some(path.as_str()) {
                    return Err(format!(
                        "p{pid} sent {what} to {path}, whose identity this fence did not prove ({proven_path:?})"
                    ));
                }
                // An approval counts once the guard could have read it: at its last Node read before the
                // ForceOff (it reads the Node again right before sending).
                let seen = seen_until(truth, (*pid, node, remediation), *at, intent);
                let approved_by_then = truth
                    .life
                    .get(node)
                    .is_some_and(|l| l.iter().any(|(t, life)| *life == Life::Approved && *t <= seen));
                if *guard
                    && approved_by_then
                    && let Some(approval) = truth
                        .nodes
                        .get(node)
                        .and_then(|n| n.annotations().get(crate::guard::APPROVAL_ANNOTATION).cloned())
                {
                    return Err(format!(
                        "p{pid}'s guard switched {node} off at {} although its return was approved ({approval:?})",
                        show(*at)
                    ));
                }
                // The guard switches a released machine that came back off again: by design.
                if !*on
                    && !*guard
                    && let Some(life) = shows_life(truth, (*pid, node, remediation), *at, intent, scenario)
                {
                    return Err(format!("p{pid} sent ForceOff to {node} at {}, which showed life: {life}", show(*at)));
                }
                // coroner acts on its last read of the Node: a taint added after it it could not see.
                let seen = seen_until(truth, (*pid, node, remediation), *at, intent);
                if *on
                    && let Some(n) = truth.nodes.get(node)
                    && let Some(t) = super::world::taints_of(n).iter().find(|t| {
                        oos(&t.key) && truth.taint_added.get(&taint_key(t)).is_none_or(|added| *added <= seen)
                    })
                {
                    return Err(format!("p{pid} sent On to {node} at {} while {} is on it", show(*at), taint_key(t)));
                }
                let others: Vec<String> = truth
                    .remediations
                    .values()
                    .filter(|r| r.name_any() != *remediation && contract::node_name(&r.metadata) == Some(node.as_str()))
                    .filter(|r| !Phase::of(r).is_terminal())
                    .filter(|r| {
                        r.metadata.creation_timestamp
                            < truth.remediations.get(remediation).and_then(|m| m.metadata.creation_timestamp.clone())
                    })
                    .map(|r| r.name_any())
                    .collect();
                if !others.is_empty() {
                    return Err(format!(
                        "p{pid} sent {what} for {remediation} at {} while {others:?} already fences node {node}",
                        show(*at)
                    ));
                }
            }
            Record::Status { at, remediation, before, after, .. } => match (before.as_deref(), after.as_deref()) {
                (Some(conditions::TRUE), a) | (Some(conditions::FALSE), a) if a != before.as_deref() => {
                    return Err(format!("{remediation}: Succeeded went from {before:?} to {after:?} at {}", show(*at)));
                }
                _ => {}
            },
            Record::Read { .. } | Record::Proof { .. } | Record::Event { .. } => {}
        }
        Ok(())
    }

    /// At the end: the liveness oracle, and no slot held for ever.
    pub fn finish(&self, truth: &Truth, scenario: &Scenario) -> Result<(), String> {
        let spec = &scenario.spec;
        let retries = i64::from(spec.retry.count);
        let bound = micros(spec.lease_freshness.get())
            + retries * (micros(spec.power_off_timeout.get()) + 2 * micros(spec.retry.interval.get()))
            + 40 * SECOND;
        // The clock restarts with every new leader: its Lease sightings start afresh.
        let start = truth.processes.values().filter(|p| p.term > 0).map(|p| p.started).max().unwrap_or(0);
        let decided = |want: &str| {
            truth.log.iter().find_map(|r| match r {
                Record::Status { at, after, .. } if after.as_deref() == Some(want) => Some(*at),
                _ => None,
            })
        };
        let released = truth.log.iter().any(|r| match r {
            Record::NodeWrite { before, after, .. } => {
                after.iter().any(|t| oos(&t.key) && !before.iter().any(|b| taint_key(b) == taint_key(t)))
            }
            Record::PodDeleted { .. } => true,
            _ => false,
        });
        match scenario.expect {
            Expect::Release => match decided(conditions::TRUE) {
                Some(at) if at <= start + bound => {}
                Some(at) => return Err(format!("released at {}, after the bound {}", show(at), show(start + bound))),
                None => return Err(format!("never released (bound {})", show(start + bound))),
            },
            Expect::Refuse => {
                if released {
                    return Err("released although the answers allow no proof".into());
                }
                match decided(conditions::FALSE) {
                    Some(at) if at <= start + bound => {}
                    Some(at) => {
                        return Err(format!("refused at {}, after the bound {}", show(at), show(start + bound)));
                    }
                    None => return Err(format!("never ended Succeeded=False (bound {})", show(start + bound))),
                }
            }
            Expect::Any => {}
        }
        for r in truth.remediations.values() {
            let since = r.status.as_ref().and_then(|s| s.phase_since.as_ref()).map(|t| t.0);
            if Phase::of(r).holds_power_slot()
                && let Some(since) = since
                && truth.wall(truth.now).duration_since(since).as_micros() as i64 > bound
            {
                return Err(format!(
                    "{} holds a power-action slot in {} since {since}, past the bound",
                    r.name_any(),
                    Phase::of(r).as_str()
                ));
            }
        }
        Ok(())
    }
}

/// The remediation UID the out-of-service owner annotation names.
fn owner_of(annotations: &BTreeMap<String, String>) -> Option<String> {
    let record = annotations.get(CoronerTaint::OutOfService.owner_annotation())?;
    serde_json::from_str::<crate::taints::Ownership>(record).ok().map(|o| o.uid)
}

fn show(at: Micros) -> String {
    format!("t={:.3}s", at as f64 / SECOND as f64)
}

/// A release of `node` by `remediation`, sent at `sent`, rests on the proof coroner persisted: the
/// readings that made it (and every reading the same process took since, which keeps it fresh) must
/// really have found the node's machine off, the machine must have stayed off throughout the span
/// they claim (the first answer to the last request), and the last of them must have been fresh when
/// the release was sent (`pollInterval` + the request timeout, from its request). A power-on after the last reading is the guard's to catch: no reading
/// can see what happens after it.
fn released_on_proof(
    truth: &Truth,
    scenario: &Scenario,
    remediation: &str,
    node: &str,
    sent: Micros,
) -> Result<(), String> {
    let machine = truth.machine_of_node(node).ok_or("the node has no machine")?;
    let m = &truth.machines[machine];
    let proof = truth.log.iter().rev().find_map(|r| match r {
        Record::Proof { at: proven, remediation: of, pid, count } if of == remediation && *proven <= sent => {
            Some((*proven, *pid, *count))
        }
        _ => None,
    });
    let (proven, pid, count) = proof.ok_or_else(|| format!("{remediation} has no power-off proof"))?;
    let reads: Vec<(Micros, Micros, usize, bool)> = truth
        .log
        .iter()
        .filter_map(|r| match r {
            Record::Read { pid: by, remediation: of, machine, start, answer, off }
                if *by == pid && of == remediation && *answer <= sent =>
            {
                Some((*start, *answer, *machine, *off))
            }
            _ => None,
        })
        .collect();
    let before_proof = reads.iter().filter(|(_, answer, _, _)| *answer <= proven).count();
    let run = &reads[before_proof.saturating_sub(count as usize)..];
    let (Some(&(_, first_answer, _, _)), Some(&(last_start, _, _, _))) = (run.first(), run.last()) else {
        return Err(format!("no reading by p{pid} behind the proof of {remediation}"));
    };
    if let Some((start, _, read, _)) = run.iter().find(|(_, _, read, off)| *read != machine || !off)
        && scenario.bmc != super::scenario::BmcKind::LiesOff
    {
        return Err(format!(
            "the proof's reading at {} was of {} and did not find {} off",
            show(*start),
            truth.machines[*read].name,
            m.name
        ));
    }
    // The span the proof claims: from the first reading's answer to the last one's request (each value
    // was sampled somewhere between its request and its answer). A BMC that lies Off fools every
    // reading: what must catch it comes after the release.
    if scenario.bmc != super::scenario::BmcKind::LiesOff && !m.off_throughout(first_answer, last_start) {
        return Err(format!(
            "{} was on at some time between the proof's first answer ({}) and its last request ({})",
            m.name,
            show(first_answer),
            show(last_start)
        ));
    }
    let freshness = micros(scenario.spec.poll_interval.get()) + super::REQUEST_TIMEOUT;
    if sent - last_start > freshness {
        return Err(format!(
            "the proof's last reading ({}) was older than pollInterval + the request timeout when the release was sent",
            show(last_start)
        ));
    }
    Ok(())
}

/// Whether the node showed life before the power action at `at`, early enough for coroner to have
/// known: its kubelet renewed its Lease in the freshness window (not in the last moment, which the
/// watch may not have brought yet), or reported `Ready=True` in that window, or a person labelled it
/// excluded — those two before the process last read the Node (a power action rests on that read;
/// one taken before the intent was persisted does not count as a re-check, and then everything up to
/// the action counts); or the Node is another than the one admitted.
fn shows_life(
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
    if admitted.is_some_and(|uid| current.uid().as_ref() != Some(&uid)) {
        return Some("it is another Node than the one admitted (a new UID)".into());
    }
    let seen_until = seen_until(truth, (pid, node, remediation), at, intent);
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
        })
        .map(|(t, kind)| match kind {
            Life::Excluded => format!("it was labelled {} at {}", contract::EXCLUDE_LABEL, show(*t)),
            _ => format!("its kubelet reported ({kind:?}) at {}", show(*t)),
        })
}

/// Until when the process that acted at `at` had seen the Node: its last read of it, if that came
/// after the intent was persisted (the re-check right before acting); else everything up to `at`.
fn seen_until(
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
fn release_may_end(truth: &Truth, owner: Option<&str>) -> bool {
    let Some(r) = truth.remediations.values().find(|r| r.uid().as_deref() == owner) else { return true };
    let phase = Phase::of(r);
    r.metadata.deletion_timestamp.is_some()
        || matches!(phase, Phase::PoweringOn | Phase::WaitingForNode)
        || (phase == Phase::Done && r.spec.action == FenceAction::Reboot)
}
