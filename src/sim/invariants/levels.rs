//! L1-L9 on the world's truth: a level's proof through the outlets it names, and L6's shared outlet.

use super::*;

/// L6 on the world: why an outlet Off by `by` at `at` may not take the power of `node`'s machine, if
/// it may not. A power action is permitted on a node only while it is silent — no Lease renewal
/// within `leaseFreshness` (but the last moment, which the watch may not have brought), `Ready` not
/// `True` (nor anything but `Unknown`, unless `remediateReadyFalse`) when the switching task last read
/// it — not excluded, and fenced: a remediation of it admitted and not being deleted whose release is
/// not yet written, or one whose release stands and nobody approved to power on. The switching fence's
/// own remediation, deleted after that task last read it before the Off (right before the request,
/// P1), is the power action's race, not L6's. As R3, an approval counts when it names that release and
/// stands on the Node, given before the task last read that Node; any written release counts as
/// standing (looser than L6, which judges it on the Node it reads).
pub(super) fn shared_off_refused(
    truth: &Truth,
    scenario: &Scenario,
    by: &Caller,
    node: &str,
    at: Micros,
) -> Option<String> {
    let read = truth
        .node_reads
        .get(&(by.pid, by.task.clone(), node.to_owned()))
        .and_then(|reads| reads.iter().rev().find(|read| **read <= at).copied());
    // What the switching task last read of the Node; one it did not read, as it was at the Off and
    // for the moment before it (a change in the last moment it could not have seen).
    let seen = read.unwrap_or(at);
    let freshness = micros(scenario.spec.lease_freshness.get());
    let life = truth.life.get(node).map(Vec::as_slice).unwrap_or_default();
    if let Some((renewed, _)) =
        life.iter().find(|(t, kind)| *kind == Life::Lease && *t >= at - freshness && *t <= at - UNSEEN_LEASE)
    {
        return Some(format!("its kubelet renewed its Lease at {}", show(*renewed)));
    }
    let ready_at = |t: Micros| truth.ready_history.get(node).and_then(|h| h.iter().rev().find(|(at, _)| *at <= t));
    let silent = |status: &str| match scenario.spec.remediate_ready_false {
        true => status != conditions::TRUE,
        false => status == conditions::UNKNOWN,
    };
    let showed = match read {
        Some(read) => ready_at(read).map(|(_, s)| s.clone()),
        None => ready_at(at)
            .zip(ready_at(at - UNSEEN_LEASE))
            .and_then(|((_, now), (_, before))| (!silent(now) && !silent(before)).then(|| now.clone())),
    };
    if let Some(status) = showed.filter(|s| !silent(s)) {
        let when = if read.is_some() { "when the switching task last read it" } else { "at the Off" };
        return Some(format!("it showed Ready={status} {when}"));
    }
    if let Some((excluded, _)) = life.iter().find(|(t, kind)| *kind == Life::Excluded && *t <= seen) {
        return Some(format!("it was labelled {} at {}", contract::EXCLUDE_LABEL, show(*excluded)));
    }
    let current = truth.nodes.get(node).and_then(|n| n.annotations().get(crate::guard::APPROVAL_ANNOTATION).cloned());
    let approved = |uid: &str| {
        truth.log.iter().any(|r| {
            matches!(r, Record::Approved { at: given, node: of, value } if of == node && *given <= seen
                && names_release(value, uid) && current.as_deref() == Some(value.as_str()))
        })
    };
    let last_read = truth
        .remediation_reads
        .get(&(by.pid, by.task.clone(), by.task.clone()))
        .and_then(|reads| reads.iter().rev().find(|read| **read <= at).copied());
    let racing = |uid: &str| {
        truth.log.iter().any(|r| {
            matches!(r, Record::Deleted { at: deleted, uid: of, .. }
                if of == uid && last_read.is_some_and(|read| *deleted > read))
        })
    };
    let fenced = truth.remediations.values().filter(|r| contract::node_name(&r.metadata) == Some(node)).any(|r| {
        let uid = r.uid().unwrap_or_default();
        let own = r.metadata.name.as_deref() == Some(by.task.as_str());
        if r.metadata.deletion_timestamp.is_some() && !(own && racing(&uid)) {
            return false;
        }
        let released = r.status.as_ref().and_then(|s| s.evidence.as_ref()).is_some_and(|e| e.release.is_some());
        match Phase::of(r) {
            Phase::VerifyingIdentity
            | Phase::PoweringOff
            | Phase::ConfirmingOff
            | Phase::PoweringOffOutlets
            | Phase::Releasing => true,
            Phase::Done | Phase::Failed => released && !approved(&uid),
            Phase::Pending | Phase::WaitingForRelease | Phase::PoweringOn | Phase::WaitingForNode => false,
        }
    });
    (!fenced).then(|| "neither being fenced nor released by a fence whose power-on nobody approved".to_owned())
}

/// A release through a PDU level (docs/safety.md L1–L7), judged from the outlet answers the releasing
/// process received in its term and from the rack's truth: every outlet that truly feeds the machine
/// was read by it, its last readings proving Off (L4), the last one fresh when the release was sent;
/// from the moment the last of them began to read Off (when the PDU looked) the readings span settle,
/// and the machine was truly off from then until the release took effect — unless the world switched
/// it on after the last proving request (the guard's to catch).
pub(super) fn level_proof_holds(
    truth: &Truth,
    scenario: &Scenario,
    by: &Caller,
    node: &str,
    sent: Micros,
    at: Micros,
) -> Result<(), String> {
    let machine = truth.machine_of_node(node).ok_or("the node has no machine")?;
    let m = &truth.machines[machine];
    let spec = &scenario.spec;
    // L5's named risk: a level whose mapping an operator stated wrongly proves another machine off,
    // which L7 catches only while this machine's BMC answers: judged on the outlets the level names.
    let stated_wrongly = scenario.levels.is_some_and(|l| l.wrong_mapping);
    let feeders: Vec<usize> = match stated_wrongly {
        false => (0..truth.outlets.len()).filter(|o| truth.outlets[*o].feeds_machine(machine)).collect(),
        true => named_outlets(truth, node),
    };
    if feeders.is_empty() {
        return Err(format!("released through PDU outlets, and no outlet feeds {}", m.name));
    }
    let fresh = micros(fence::freshness(spec, timing()));
    // (requested, sampled, answered, proves off, truly on) of each feeder's readings by this process.
    let mut runs = Vec::new();
    for outlet in feeders {
        let answers: Vec<(Micros, Micros, Micros, bool, bool)> = truth
            .log
            .iter()
            .filter_map(|r| match r {
                Record::OutletAnswer { by: who, outlet: o, requested, sampled, answered, proves_off, truly_on }
                    if who == by && *o == outlet && *answered <= sent =>
                {
                    Some((*requested, *sampled, *answered, *proves_off, *truly_on))
                }
                _ => None,
            })
            .collect();
        let trailing = answers.iter().rev().take_while(|a| a.3).count();
        let run = answers[answers.len() - trailing..].to_vec();
        let Some(last) = run.last() else {
            return Err(format!(
                "outlet {outlet} feeds {} and p{}/{}'s last reading of it did not prove Off",
                m.name, by.pid, by.term
            ));
        };
        if sent - last.0 > fresh {
            return Err(format!(
                "outlet {outlet}'s last reading ({}) was stale when the release was sent",
                show(last.0)
            ));
        }
        runs.push(run);
    }
    // The level reads Off from when the last of its outlets began to (its answer), to the last request.
    let began = runs.iter().filter_map(|run| run.first().map(|a| a.2)).max().unwrap_or_default();
    let last_requested = runs.iter().filter_map(|run| run.last().map(|a| a.0)).max().unwrap_or_default();
    let last_sampled = runs.iter().filter_map(|run| run.last().map(|a| a.1)).max().unwrap_or_default();
    let settle = micros(spec.settle.get());
    if last_requested - began < settle {
        return Err(format!(
            "the outlets feeding {} read Off together from {} only, short of settle {}",
            m.name,
            show(began),
            show(settle)
        ));
    }
    // Exempt from the truth only while L7 could not catch it: the BMC silent when it was asked, or
    // lying Off (L5: L7 catches a wrong statement only through a BMC that answers the truth; a lying
    // BMC's own proof is exempt from the truth in the same way, `proof_holds`).
    if stated_wrongly && scenario.bmc == BmcKind::LiesOff {
        return Ok(());
    }
    if stated_wrongly {
        let silent = bound_bmc(truth, node, machine, sent).is_none_or(|b| {
            std::iter::once(last_requested)
                .chain(truth.log.iter().filter_map(|r| match r {
                    Record::BmcPower { at, bmc, .. } if *bmc == b && *at > last_requested && *at <= sent => Some(*at),
                    _ => None,
                }))
                .any(|at| !bmc_alive_at(truth, b, at))
        });
        if silent {
            return Ok(());
        }
    }
    // P4: the machine truly off at every proving sample, and from the last one until the release took
    // effect, unless the world switched it on after the last proving request (the guard's).
    // Judged on this machine's own power when the PDU looked (an outlet's record tells the power of the
    // machine it feeds first, and a shared outlet feeds another too); a wrong statement's outlets on
    // the power of the machine they feed (L5's named risk, judged on the outlets it names).
    let proving = runs.iter().flatten().filter(|a| a.2 >= began);
    if let Some(on) = proving.clone().find(|a| if stated_wrongly { a.4 } else { m.on_at(a.1) }) {
        return Err(format!("{} was on when its PDU sampled a proving outlet reading at {}", m.name, show(on.1)));
    }
    let until = before_injected_power_on(truth, machine, last_requested, at);
    if !m.off_throughout(last_sampled, until) {
        return Err(format!(
            "{} was on at some time between its outlets' last proving sample ({}) and the release taking effect ({})",
            m.name,
            show(last_sampled),
            show(at)
        ));
    }
    Ok(())
}

/// The world's outlets the node's binding names as its level 2.
pub(super) fn named_outlets(truth: &Truth, node: &str) -> Vec<usize> {
    let Some(level) =
        truth.bindings.values().find(|b| b.spec.node_name == node).and_then(|b| b.spec.pdu_levels.first())
    else {
        return Vec::new();
    };
    level
        .outlets
        .iter()
        .filter_map(|o| {
            let snmp = o.snmp.as_ref()?;
            let pdu = crate::api::host_port(&snmp.address, snmp.port.unwrap_or(161));
            truth.outlets.iter().position(|w| w.pdu == pdu && w.number == snmp.outlet)
        })
        .collect()
}
