//! R1-R4 and the guard: the bound within which a power-on after a release must be switched off, the
//! guard's verdict, and what the guard can see of a machine (its BMC alive, bound, in sight).

use super::*;

impl Checker {
    /// How long after the guard's device can see a powered-on released machine the guard has, at
    /// most, to switch it off (`guard: Enforce`) or report it (`Alert`): two guard intervals and one
    /// guard round ([`GUARD_SLACK`]); a slow apiserver slows each of a round's calls, and each time a
    /// seed killed the leader or moved leadership around then adds the time to elect a new one.
    pub(super) fn guard_bound(truth: &Truth, scenario: &Scenario, from: Micros) -> Micros {
        let bound = 2 * micros(crate::sim::GUARD_INTERVAL) + GUARD_SLACK + Self::slowdown(scenario);
        // Each election the window holds lengthens it, and may bring another death into it.
        let mut elections = 0;
        loop {
            let until = from + bound + (elections + 1) * LEADERLESS;
            let held = truth.disruptions.iter().filter(|at| **at >= from - LEADERLESS && **at <= until).count() as i64;
            if held <= elections {
                return bound + elections * LEADERLESS;
            }
            elections = held;
        }
    }

    /// What a slow apiserver adds to a bound that waits on a reconcile: six slow answers, when the
    /// seed slows it.
    pub(super) fn slowdown(scenario: &Scenario) -> Micros {
        let slow_api = scenario.faults.slow > 0.0
            || scenario.events.iter().any(|(_, event)| matches!(event, crate::sim::scenario::Event::SlowApi { .. }));
        if slow_api { 6 * scenario.faults.slow_latency } else { 0 }
    }

    /// Until when a release stands (docs/safety.md, "After the release"): coroner ends it to power the
    /// machine on (its out-of-service taint taken off, or its `On` sent), the remediation is deleted,
    /// or the node reports `Ready=True`. A taint removed by someone else does not end it. (A release
    /// that took effect after its remediation's deletion began ends at once.)
    pub(super) fn release_end(truth: &Truth, release: &Release) -> Micros {
        let mut end = Micros::MAX;
        for record in &truth.log {
            let at = match record {
                Record::NodeWrite { at, by, before, after, before_annotations, node, .. }
                    if *at > release.at
                        && *node == release.node
                        && by.task == release.remediation
                        && owner_of(before_annotations).as_deref() == Some(release.uid.as_str())
                        && before.iter().any(|t| {
                            oos(&t.key)
                                && !after.iter().any(|a| taint_key(a) == taint_key(t))
                                && matches!(truth.provenance.get(&taint_key(t)), Some(Adder::Coroner { .. }))
                        }) =>
                {
                    *at
                }
                // An `On` sent ends it, whether it reached the BMC, was refused by it or was lost on the
                // way: coroner records the answer or the failure, and the rule counts an On answered
                // (docs/safety.md R1: "once its On is answered — sent, its answer or its failure recorded").
                Record::Reset { at, by, on: true, .. }
                | Record::ResetLost { at, by, on: true }
                | Record::ResetRefused { at, by, on: true }
                    if *at > release.at && by.task == release.remediation =>
                {
                    *at
                }
                // A deletion that began before the release took effect (a pod deletion already under
                // way) ends it as it takes effect: no guard follows a remediation being deleted.
                Record::Deleted { at, uid, .. } if *uid == release.uid => (*at).max(release.at),
                _ => continue,
            };
            end = end.min(at);
        }
        let ready = truth
            .life
            .get(&release.node)
            .into_iter()
            .flatten()
            .find(|(t, kind)| *kind == Life::Ready && *t > release.at);
        ready.map_or(end, |(t, _)| end.min(*t))
    }

    /// The guard judged by the machine: after a release under `guard: Enforce`, a machine the world
    /// switched on (a person, a power-restore policy, a glitch the guard's reads can see, a lying BMC
    /// that starts telling the truth) is switched off again by a ForceOff within the guard's bound,
    /// counted from when its BMC answers; while its BMC is dark, `GuardBlind` within the bound (or
    /// one already published in the same dark spell, before the power-on). Under
    /// `Alert`: `ReleasedMachinePoweredOn` within the bound, and no power-off. Exempt: an approval
    /// given after the release and before the bound ran out; the release ending before the bound.
    pub(super) fn guard_enforced(&mut self, truth: &Truth, scenario: &Scenario) -> Result<(), Violation> {
        self.pending = false;
        for (index, record) in truth.log.iter().enumerate() {
            let Record::PoweredOn { at: on, machine, .. } = record else { continue };
            if self.judged.contains(&index) {
                continue;
            }
            let (on, machine) = (*on, *machine);
            let node = truth.machines[machine].node.clone();
            let Some(release) =
                self.releases.iter().find(|r| r.node == node && r.at <= on && Self::release_end(truth, r) > on)
            else {
                if self.releases.iter().all(|r| r.node != node || r.at > on) && truth.now > on + 600 * SECOND {
                    self.judged.insert(index);
                }
                continue;
            };
            match Self::guard_verdict(truth, scenario, release, &node, machine, on) {
                None => self.pending = true,
                Some(verdict) => {
                    self.judged.insert(index);
                    verdict?;
                }
            }
        }
        Ok(())
    }

    /// R2 for one power-on while `release` stands, judged spell by spell of the guard's sight: while
    /// its device sees the machine, a ForceOff (`Enforce`) or `ReleasedMachinePoweredOn` (`Alert`)
    /// within the bound of the moment it began to see; while it is dark, `GuardBlind` within the
    /// bound of the moment the dark spell began (or one already reported in it), and the bound starts
    /// again when the device sees again. `None` while a bound has not run out yet.
    pub(super) fn guard_verdict(
        truth: &Truth,
        scenario: &Scenario,
        release: &Release,
        node: &str,
        machine: usize,
        on: Micros,
    ) -> Option<Result<(), Violation>> {
        // R3: the guard honours the approval the Node carries when it acts, also one given after the
        // power-on; one given after the guard's bound ran out excuses nothing.
        let by = on + Self::guard_bound(truth, scenario, on);
        let approved = truth.log.iter().any(|r| {
            matches!(r, Record::Approved { at, node: of, value } if of == node && *at >= release.at && *at <= by
                && names_release(value, &release.uid))
        });
        if approved {
            return Some(Ok(()));
        }
        let end = Self::release_end(truth, release);
        // L9: after a level release, the guard's Off to the level's outlets is its ForceOff when it
        // takes the machine's power, or when the BMC cannot see the machine (a welded relay: nothing
        // else can be sent); otherwise its BMC's ForceOff is asked for.
        let reset_off = |from: Micros, until: Micros| {
            truth.log.iter().any(|r| match r {
                Record::Reset { at, machine: m, on: false, .. } => *m == machine && *at >= from && *at <= until,
                Record::OutletSwitched { at, by, outlet, on: false } => {
                    by.task == release.remediation
                        && truth.outlets[*outlet].feeds_machine(machine)
                        && *at >= from
                        && *at <= until
                        && (!truth.machines[machine].on_at(until) || !guard_sees(truth, node, machine, *at, false))
                }
                _ => false,
            })
        };
        // A fence's level release (not an attested one) whose statement is right: its outlets are the
        // guard's device too, while the binding is as it was at the release (an edit leaves the level
        // unknown to the guard).
        // A level whose mapping was stated wrongly (L5's named risk) names another machine's outlets:
        // they are no device of this machine's guard; its BMC is, and R2 judges the guard once the BMC
        // answers. While the BMC is dark, those outlets reading Off are what L9 rests on: no
        // `GuardBlind` is owed (the guard cannot know the statement is wrong).
        let stated_wrongly = scenario.levels.is_some_and(|l| l.wrong_mapping);
        let wrong_level = released_through_level(truth, release) && !release.attested && stated_wrongly;
        let level_release = released_through_level(truth, release) && !release.attested && !stated_wrongly;
        // L9: an edit of the binding since the level's proof (its last outlet reading before the
        // release) leaves the level unknown to the guard, as the guard judges it on the generation
        // its proof read through.
        let proven = truth
            .log
            .iter()
            .filter_map(|r| match r {
                Record::OutletAnswer { by, requested, .. }
                    if by.task == release.remediation && *requested <= release.at =>
                {
                    Some(*requested)
                }
                _ => None,
            })
            .max()
            .unwrap_or(release.at);
        let edited = truth.log.iter().any(
            |r| matches!(r, Record::BindingEdited { at, node: of, .. } if of == node && *at > proven && *at <= on),
        );
        let outlets = level_release && !edited;
        // R2 asks for what the device can see: a BMC that lies `Off` shows the guard nothing of a
        // power-on until it tells the truth, which the world records as a power-on of its own.
        let lying = scenario.bmc == BmcKind::LiesOff && truth.bmc_truthful_at.is_none_or(|at| at > on);
        if lying && !outlets {
            return Some(Ok(()));
        }
        let event = |reason: &str, from: Micros, until: Micros| {
            truth.log.iter().any(
                |r| matches!(r, Record::Event { at, reason: said, .. } if *at >= from && *at <= until && said == reason),
            )
        };
        // R2's report: the guard's condition written (its Event goes with it, best effort: an Event
        // the apiserver drops is not sent again, and a process that takes over sees the condition).
        let reported = |from: Micros, until: Micros| {
            event(crate::guard::POWERED_ON, from, until)
                || truth.log.iter().any(|r| {
                    matches!(r, Record::Status { at, remediation, guard: Some(said), .. }
                        if *at >= from && *at <= until && *remediation == release.remediation && said == crate::guard::POWERED_ON)
                })
        };
        let mut start = on;
        loop {
            let bound = Self::guard_bound(truth, scenario, start);
            let Some(from) = guard_sees_from(truth, node, machine, start, start + bound, outlets) else {
                let deadline = start + bound;
                if truth.now < deadline {
                    return None;
                }
                // A later dark spell is judged only if the machine still runs when it begins.
                if end <= deadline || (start != on && !truth.machines[machine].on_at(start)) {
                    return Some(Ok(()));
                }
                if wrong_level {
                    let still_on = truth.machines[machine].on_at(truth.now) && end > truth.now;
                    return match guard_sees_from(truth, node, machine, deadline, truth.now, outlets) {
                        Some(again) if still_on || again < end => {
                            start = again;
                            continue;
                        }
                        None if still_on => None,
                        _ => Some(Ok(())),
                    };
                }
                // A GuardBlind already reported for this dark spell of the guard's device stands (R2).
                // As `ReleasedMachinePoweredOn`, the report is the Guard condition written to the status;
                // its Event is best effort (one whose status write's answer was lost is not sent again).
                let dark = guard_dark_since(truth, node, machine, start, outlets).unwrap_or(start);
                let blind = |from: Micros, until: Micros, any_task: bool| {
                    truth.log.iter().any(|r| match r {
                        Record::Event { at, by, reason, .. } => {
                            *at >= from
                                && *at <= until
                                && (any_task || by.task == release.remediation)
                                && reason == crate::guard::BLIND
                        }
                        Record::Status { at, remediation, guard: Some(said), .. } => {
                            *at >= from
                                && *at <= until
                                && *remediation == release.remediation
                                && said == crate::guard::BLIND
                        }
                        _ => false,
                    })
                };
                let reported_in_spell = blind(dark.max(release.at), start, false);
                if !reported_in_spell && !blind(start, deadline, true) {
                    return Some(Err(Invariant::Guard.says(format!(
                        "the released machine of {node} was on at {} while the guard's device was dark; no GuardBlind by {}",
                        show(start),
                        show(deadline)
                    ))));
                }
                // The device may see again later: its bound starts then.
                let still_on = truth.machines[machine].on_at(truth.now) && end > truth.now;
                return match guard_sees_from(truth, node, machine, deadline, truth.now, outlets) {
                    Some(again) if still_on || again < end => {
                        start = again;
                        continue;
                    }
                    None if still_on => None,
                    _ => Some(Ok(())),
                };
            };
            let deadline = from + bound;
            let darkened = sight_changes(truth, node)
                .filter(|at| *at > from && *at <= deadline)
                .find(|at| !guard_sees(truth, node, machine, *at, outlets));
            if darkened.is_none() && truth.now < deadline {
                return None;
            }
            let until = darkened.unwrap_or(deadline);
            if end <= until {
                return Some(Ok(()));
            }
            let seen_on = truth.log.iter().any(|r| {
                matches!(r, Record::Answer { machine: Some(m), sampled, truly_on: true, said: Answered::System { reported_off: false, .. }, .. }
                    if *m == machine && *sampled >= from && *sampled <= until)
            });
            // R2 asks for what the device can see: answers in the window that all said Off (a BMC
            // that lies) showed the guard nothing; no answer at all is the guard not reading.
            let answered_off = |off: bool| {
                truth.log.iter().any(|r| {
                    matches!(r, Record::Answer { machine: Some(m), sampled, said: Answered::System { reported_off, .. }, .. }
                        if *m == machine && *sampled >= from && *sampled <= until && *reported_off == off)
                })
            };
            let device_blind = answered_off(true) && !answered_off(false);
            if !seen_on && (!truth.machines[machine].on_at(until) || device_blind) {
                return Some(Ok(()));
            }
            let switched_off = reset_off(on, until);
            // R2 counts from when the device answers: one that answered nothing of the machine since
            // it went on (a slow or flaky BMC timing out) sees it from its first answer, and the bound
            // starts then; none in the window, and the guard reported itself blind: it was dark.
            // An answer that sampled the machine since `a`: its BMC's, or after a level release its
            // outlets' (L9).
            let answered_from =
                |a: Micros| {
                    truth.log.iter().find_map(|r| match r {
                        Record::Answer {
                            machine: Some(m), answered, sampled, said: Answered::System { .. }, ..
                        } if *m == machine && *sampled >= a => Some(*answered),
                        Record::OutletAnswer { outlet, answered, sampled, .. }
                            if outlets && truth.outlets[*outlet].feeds_machine(machine) && *sampled >= a =>
                        {
                            Some(*answered)
                        }
                        _ => None,
                    })
                };
            // Dark in fact: the guard asked the BMC and it timed out, and the guard said so.
            let blind = |a: Micros, b: Micros| {
                let asked = truth.log.iter().any(|r| {
                    matches!(r, Record::BmcTimeout { at, by, .. } if *at >= a && *at <= b && by.task == release.remediation)
                });
                let said = truth.log.iter().any(|r| {
                    matches!(r, Record::Event { at, by, reason, .. }
                        if *at >= a && *at <= b && by.task == release.remediation && reason == crate::guard::BLIND)
                });
                asked && said
            };
            // R2's bound counts from the power-on (or from when the device could see it); it starts
            // again at the device's first answer only when the device was unreachable for the guard
            // before it: a guard request in between timed out or failed. The guard's own reading is
            // always a later answer, and must never move the bound.
            let unreachable = |a: Micros, b: Micros| {
                truth.log.iter().any(|r| match r {
                    Record::BmcTimeout { at, by, .. } => *at >= a && *at < b && by.task == release.remediation,
                    Record::Answer { by, requested, said: Answered::Error, .. } => {
                        *requested >= a && *requested < b && by.task == release.remediation
                    }
                    _ => false,
                })
            };
            if !switched_off {
                match answered_from(from) {
                    Some(first)
                        if first > from && unreachable(from, first) && (first <= until || blind(from, until)) =>
                    {
                        start = first;
                        continue;
                    }
                    // Dark so far: judged again once the device answers, while the release stands.
                    None if blind(from, until) => {
                        let still_on = truth.machines[machine].on_at(truth.now) && end > truth.now;
                        return if still_on { None } else { Some(Ok(())) };
                    }
                    _ => {}
                }
            }
            match (scenario.spec.guard, darkened) {
                (GuardPolicy::Alert, _) if switched_off => {
                    return Some(Err(Invariant::Guard.says(format!(
                        "the guard (Alert) switched the released machine of {node} off after {}",
                        show(on)
                    ))));
                }
                (GuardPolicy::Enforce, _) if switched_off => return Some(Ok(())),
                (GuardPolicy::Alert, _) if reported(on, until) => return Some(Ok(())),
                // Its device went dark before the bound ran out: the guard is judged as blind from then.
                (_, Some(dark)) => start = dark,
                (GuardPolicy::Enforce, None) => {
                    return Some(Err(Invariant::Guard.says(format!(
                        "the world switched the released machine of {node} on at {} (its guard's device seeing it from {}); no ForceOff by {}",
                        show(on),
                        show(from),
                        show(deadline)
                    ))));
                }
                (GuardPolicy::Alert, None) => {
                    return Some(Err(Invariant::Guard.says(format!(
                        "the world switched the released machine of {node} on at {}; no ReleasedMachinePoweredOn by {}",
                        show(on),
                        show(deadline)
                    ))));
                }
            }
        }
    }

    /// A lying BMC's release cannot be caught by a reading; the node coming back with its pre-fence
    /// bootID must be: a `FenceDidNotTakeEffect` Event within 10 s of its kubelet's `Ready=True` (and
    /// six slow answers, when the seed slows the apiserver).
    pub(super) fn fence_did_not_take_effect_reported(
        &self,
        truth: &Truth,
        scenario: &Scenario,
    ) -> Result<(), Violation> {
        if scenario.bmc != crate::sim::scenario::BmcKind::LiesOff {
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
        let Some(machine) = truth.machine_of_node(crate::sim::TARGET) else { return Ok(()) };
        // Never switched off since the release, and its kubelet reported Ready afterwards.
        if !truth.machines[machine].on_at(released)
            || truth.machines[machine].history.iter().any(|(at, on)| *at > released && !on)
        {
            return Ok(());
        }
        let back = truth
            .life
            .get(crate::sim::TARGET)
            .and_then(|life| life.iter().find(|(at, kind)| *at > released && *kind == Life::Ready).map(|(at, _)| *at));
        let Some(back) = back else { return Ok(()) };
        // What coroner can know: the node back with the very bootID its Node showed at the release.
        let boot_now = truth
            .nodes
            .get(crate::sim::TARGET)
            .and_then(|n| n.status.as_ref()?.node_info.as_ref())
            .map(|i| i.boot_id.as_str());
        if boot_now != truth.boot_at_release.get(crate::sim::TARGET).map(String::as_str) {
            return Ok(());
        }
        // The check runs first in every reconcile, which a slow apiserver delays as it does the guard's.
        let bound = 10 * SECOND + Self::slowdown(scenario);
        if truth.now < back + bound
            || truth.disruptions.iter().any(|at| *at >= back - LEADERLESS && *at <= back + bound)
        {
            return Ok(());
        }
        let reported = truth.log.iter().any(|r| {
            matches!(r, Record::Event { at, reason, .. } if *at >= back && reason == crate::guard::DID_NOT_TAKE_EFFECT)
        });
        if reported {
            Ok(())
        } else {
            Err(Invariant::FenceDidNotTakeEffect.says(format!(
                "node {} came back at {} with the bootID it had before a fence that never took effect; no FenceDidNotTakeEffect",
                crate::sim::TARGET,
                show(back)
            )))
        }
    }
}

/// Whether BMC `bmc` was powered and answering at `at`.
pub(super) fn bmc_alive_at(truth: &Truth, bmc: usize, at: Micros) -> bool {
    truth
        .log
        .iter()
        .rev()
        .find_map(|r| match r {
            Record::BmcPower { at: when, bmc: which, alive } if *which == bmc && *when <= at => Some(*alive),
            _ => None,
        })
        .unwrap_or(true)
}

/// The BMC `node`'s binding leads to at `at`: where its last edit led, else the BMC of its machine.
pub(super) fn bound_bmc(truth: &Truth, node: &str, machine: usize, at: Micros) -> Option<usize> {
    truth
        .log
        .iter()
        .rev()
        .find_map(|r| match r {
            Record::BindingEdited { at: when, node: of, bmc } if of == node && *when <= at => Some(*bmc),
            _ => None,
        })
        .unwrap_or_else(|| truth.bound_at_start.get(node).copied().or_else(|| bmc_of(truth, machine)))
}

/// R2: the guard's device sees `machine` at `at` when the node's binding, as it is then, leads to a
/// BMC that serves the machine and has power. A binding edited to an endpoint where nothing answers,
/// or to another machine's BMC, leaves the guard dark until it is fixed. After a release through a
/// level whose outlets feed the machine (`outlets`), those outlets are the guard's device too (L9):
/// the world's PDU always answers, and a metered outlet shows a running machine's draw.
pub(super) fn guard_sees(truth: &Truth, node: &str, machine: usize, at: Micros, outlets: bool) -> bool {
    outlets
        || bound_bmc(truth, node, machine, at)
            .is_some_and(|b| truth.bmcs[b].systems.iter().any(|s| s.machine == machine) && bmc_alive_at(truth, b, at))
}

/// When the guard's device may change its sight: BMC power changes and binding edits.
pub(super) fn sight_changes(truth: &Truth, node: &str) -> impl Iterator<Item = Micros> {
    truth.log.iter().filter_map(move |r| match r {
        Record::BmcPower { at, .. } => Some(*at),
        Record::BindingEdited { at, node: of, .. } if of == node => Some(*at),
        _ => None,
    })
}

/// The first moment in `from..=until` when the guard's device sees `machine`.
pub(super) fn guard_sees_from(
    truth: &Truth,
    node: &str,
    machine: usize,
    from: Micros,
    until: Micros,
    outlets: bool,
) -> Option<Micros> {
    std::iter::once(from)
        .chain(sight_changes(truth, node).filter(|at| *at > from && *at <= until))
        .find(|at| guard_sees(truth, node, machine, *at, outlets))
}

/// The start of the guard's dark spell that holds `at` (none if its device sees the machine then).
pub(super) fn guard_dark_since(truth: &Truth, node: &str, machine: usize, at: Micros, outlets: bool) -> Option<Micros> {
    if guard_sees(truth, node, machine, at, outlets) {
        return None;
    }
    let changes: Vec<Micros> = sight_changes(truth, node).filter(|when| *when <= at).collect();
    let since =
        changes.into_iter().rev().find(|when| *when > 0 && guard_sees(truth, node, machine, *when - 1, outlets));
    Some(since.unwrap_or(0))
}

/// The BMC that serves `machine` (its first system of it).
pub(super) fn bmc_of(truth: &Truth, machine: usize) -> Option<usize> {
    truth.bmcs.iter().position(|b| b.systems.iter().any(|s| s.machine == machine))
}
