//! The preconditions of an attested release, each a named pure function that passes with what it
//! saw or refuses with its reason: the fence ended without proof, no sign of life, the binding and the
//! node as admitted, the Lease, the taints, and what an acknowledgement may clear.

use super::*;

pub(super) fn succeeded_condition(
    r: &CoronerRemediation,
) -> Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
    conditions::find(&r.status.as_ref()?.conditions, contract::SUCCEEDED)
}

pub(super) fn release_of(r: &CoronerRemediation) -> Option<&ReleaseEvidence> {
    r.status.as_ref()?.evidence.as_ref()?.release.as_ref()
}

/// The record of `attestation_uid`'s release on the remediation, if it has one.
pub fn attested_record<'r>(r: &'r CoronerRemediation, attestation_uid: &str) -> Option<&'r AttestationEvidence> {
    release_of(r)
        .filter(|release| release.kind == ReleaseKind::OperatorAttested)
        .and_then(|release| release.attestation.as_ref())
        .filter(|a| a.uid == attestation_uid)
}

/// The remediation whose fence the attestation completes: one for the node (its UID, where the
/// remediation recorded one) that ended with `Succeeded=False` (nhc-timed-out or not), the latest to
/// fail. No fence of the node may still run, none may have released it already (unless by this very
/// attestation: a release being resumed), and none may have ended on evidence of life.
pub fn fence_ended_without_proof<'r>(
    attestation: &CoronerAttestation,
    remediations: &'r [CoronerRemediation],
) -> Result<&'r CoronerRemediation, Refusal> {
    let spec = &attestation.spec;
    let uid = attestation.uid().unwrap_or_default();
    let for_node: Vec<&CoronerRemediation> = remediations
        .iter()
        .filter(|r| contract::node_name(&r.metadata) == Some(spec.node_name.as_str()))
        .filter(|r| r.metadata.deletion_timestamp.is_none())
        .filter(|r| {
            let admitted = r.status.as_ref().and_then(|s| s.evidence.as_ref()?.node.as_ref()).map(|n| n.uid.as_str());
            admitted.is_none_or(|admitted| admitted == spec.node_uid)
        })
        .collect();
    // A4: this attestation's look found the machine, before anything else (a crash between the
    // fence's reopening and this attestation's own status write leaves it live until now).
    if let Some(proving) =
        for_node.iter().find(|r| look_of(r).is_some_and(|l| l.attestation_uid == uid && proves_again(l)))
    {
        return Err(Refusal::new(
            AttestationReason::Superseded,
            format!(
                "remediation {}'s device answered this attestation's look as the node's machine ({}): its fence proves it off again, and only that proof releases",
                proving.name_any(),
                look_of(proving).and_then(|l| l.message.clone()).unwrap_or_default()
            ),
        ));
    }
    if let Some(ours) = for_node.iter().find(|r| !uid.is_empty() && attested_record(r, &uid).is_some()) {
        return Ok(ours);
    }
    if let Some(released) = for_node.iter().find(|r| release_of(r).is_some()) {
        let how = match release_of(released).and_then(|r| r.attestation.as_ref()) {
            Some(a) => format!("on attestation {} by {}", a.name, a.attested_by),
            None => "with a BMC proof".to_owned(),
        };
        return Err(Refusal::new(
            AttestationReason::AlreadyReleased,
            format!("remediation {} already released node {} {how}", released.name_any(), spec.node_name),
        ));
    }
    if let Some(running) =
        for_node.iter().find(|r| !r.status.as_ref().and_then(|s| s.phase).is_some_and(Phase::is_terminal))
    {
        let phase = running.status.as_ref().and_then(|s| s.phase).unwrap_or_default();
        return Err(Refusal::new(
            AttestationReason::FenceInProgress,
            format!(
                "remediation {} is still fencing node {} (phase {})",
                running.name_any(),
                spec.node_name,
                phase.as_str()
            ),
        ));
    }
    let failed: Vec<&CoronerRemediation> = for_node
        .iter()
        .copied()
        .filter(|r| succeeded_condition(r).is_some_and(|c| c.status == conditions::FALSE))
        .collect();
    // OutletMappingWrong: the node's BMC still answered for its machine with a level's outlets Off.
    let life = [Reason::NodeNotUnreachable, Reason::NodeAliveAfterPowerOff, Reason::OutletMappingWrong];
    if let Some(alive) =
        failed.iter().find(|r| succeeded_condition(r).is_some_and(|c| life.iter().any(|l| l.as_str() == c.reason)))
    {
        let reason = succeeded_condition(alive).map(|c| c.reason.clone()).unwrap_or_default();
        return Err(Refusal::new(
            AttestationReason::FenceSawLife,
            format!("remediation {} ended with {reason}: the node showed life", alive.name_any()),
        ));
    }
    if let Some(again) = failed.iter().find(|r| look_of(r).is_some_and(proves_again)) {
        let look = look_of(again).map(|l| l.attestation.clone()).unwrap_or_default();
        let ended = again
            .status
            .as_ref()
            .and_then(|s| conditions::find(&s.conditions, contract::PROCESSING))
            .map(|c| c.reason.clone())
            .unwrap_or_default();
        return Err(Refusal::new(
            AttestationReason::ProvenAgain,
            format!(
                "remediation {} proved the machine off again on attestation {look}'s look and that proof ended {ended}: only the fence's own proof releases node {}",
                again.name_any(),
                spec.node_name
            ),
        ));
    }
    failed.into_iter().max_by_key(|r| succeeded_condition(r).map(|c| c.last_transition_time.0)).ok_or_else(|| {
        Refusal::new(
            AttestationReason::NoFailedFence,
            format!(
                "no remediation for node {} (UID {}) has ended with Succeeded=False; an attestation is for a node whose fence could not prove it dead",
                spec.node_name, spec.node_uid
            ),
        )
    })
}

pub(super) fn look_of(remediation: &CoronerRemediation) -> Option<&AttestationLook> {
    remediation.status.as_ref()?.evidence.as_ref()?.attestation_look.as_ref()
}

pub(super) fn proves_again(look: &AttestationLook) -> bool {
    look.found == Some(LookFound::ProvingAgain)
}

/// How long a look stands for the attestation that asked: the fence's `leaseFreshness`, the time
/// within which a sign of life counts as now. A look not taken never stands.
pub(super) fn look_stands(look: &AttestationLook, remediation: &CoronerRemediation, now: Timestamp) -> bool {
    let freshness = admitted_spec(remediation).lease_freshness.get();
    look.found.is_some()
        && look
            .looked_at
            .as_ref()
            .is_some_and(|at| StdDuration::try_from(now.duration_since(at.0)).unwrap_or_default() <= freshness)
}

/// A4: the failed fence looked through its device once more for this attestation, within the
/// fence's `leaseFreshness`, and its device did not answer as the node's machine (what it showed is
/// recorded, and A1 judges it). Until then the attestation waits (`AwaitingDeviceLook`), and
/// coroner asks for the look ([`look_asked`]).
pub fn device_looked(
    remediation: &CoronerRemediation,
    attestation_uid: &str,
    now: Timestamp,
) -> Result<String, Refusal> {
    match look_of(remediation) {
        Some(look)
            if look.attestation_uid == attestation_uid
                && !proves_again(look)
                && look_stands(look, remediation, now) =>
        {
            let at = look.looked_at.as_ref().map(|t| t.0.to_string()).unwrap_or_default();
            let found = look.found.map(|f| format!("{f:?}")).unwrap_or_default();
            Ok(format!(
                "the fence's device was asked again at {at}: {found} ({})",
                look.message.clone().unwrap_or_default()
            ))
        }
        _ => Err(Refusal::new(
            AttestationReason::AwaitingDeviceLook,
            format!("remediation {} looks through its device once more before the release", remediation.name_any()),
        )),
    }
}

/// A4: the remediation's status with this attestation's look asked for, when it must be: the fence
/// failed, released nothing and proves nothing again, no ask is pending (this attestation's or
/// another's), and this attestation has no look that stands or was not taken.
pub fn look_asked(
    remediation: &CoronerRemediation,
    attestation: &CoronerAttestation,
    plan: &ReleasePlan,
    now: Timestamp,
) -> Option<CoronerRemediationStatus> {
    let status = remediation.status.as_ref()?;
    let uid = attestation.uid()?;
    let released = status.evidence.as_ref().is_some_and(|e| e.release.is_some())
        || status.progress.as_ref().is_some_and(|p| p.release_begun.is_some());
    if status.phase != Some(Phase::Failed) || released {
        return None;
    }
    // An ask still pending is answered first, whoever asked (two attestations never take turns
    // overwriting each other's); a look not taken is not asked for again by the same attestation.
    if let Some(look) = look_of(remediation)
        && (proves_again(look)
            || look.looked_at.is_none()
            || (look.attestation_uid == uid && (look.found.is_none() || look_stands(look, remediation, now))))
    {
        return None;
    }
    let mut asked = status.clone();
    asked.evidence.get_or_insert_with(Default::default).attestation_look = Some(AttestationLook {
        attestation: attestation.name_any(),
        attestation_uid: uid,
        requested_at: MicroTime(now),
        may_prove_again: plan.acknowledged.is_empty(),
        nhc_timed_out: contract::nhc_timed_out(&remediation.metadata).map(str::to_owned),
        looked_at: None,
        found: None,
        message: None,
    });
    Some(asked)
}

/// A1: nothing the failed fence recorded showed the machine alive — judged from what it recorded,
/// never from a baseline it updated: its last reading of the verified system was `Off` (or there was
/// none), and the node's Lease stayed as it was at admission until the fence failed. Every sign of
/// life it finds, in order: an attester may acknowledge some ([`acknowledgement_clears`]), and an
/// acknowledgement clears only the one it names, never the others.
/// `remembered`: what this process's fence last read, when its status write failed.
pub fn no_life_in_fence(remediation: &CoronerRemediation, remembered: Option<&str>) -> Result<String, Vec<Refusal>> {
    let status = remediation.status.as_ref();
    let progress = status.and_then(|s| s.progress.as_ref());
    let recorded = progress.and_then(|p| p.last_power_state.as_deref());
    let mut refusals = Vec::new();
    if let Some(power) =
        [recorded, remembered].into_iter().flatten().find(|p| crate::bmc::PowerState::recorded_shows_life(p))
    {
        // An `On` the fence recorded from a BMC that has not answered since may be acknowledged
        // (its moment: that answer); one from a BMC that still answers, or one only this process
        // remembers, may not.
        let answered = progress.and_then(|p| p.last_answer_at.as_ref()).map(|t| t.0);
        let tried = progress.and_then(|p| p.last_reading_at.as_ref()).map(|t| t.0);
        // Life after coroner's own ForceOff has no override, however dark the BMC went since.
        let resets = status.and_then(|s| s.evidence.as_ref()?.power_off.as_ref()).map(|p| p.resets.as_slice());
        let after_force_off = |at: Timestamp| resets.unwrap_or_default().iter().any(|r| r.sent_at.0 < at);
        let dark_since = answered.filter(|answered| {
            recorded == Some(power) && tried.is_some_and(|t| t > *answered) && !after_force_off(*answered)
        });
        let no_override =
            "there is no override (fix the mapping, or switch the machine off at its console so its BMC reads Off)";
        let why = match (dark_since, answered) {
            (Some(at), _) => format!("its BMC has not answered since {at}"),
            (None, Some(at)) if after_force_off(at) => format!("read after coroner's ForceOff: {no_override}"),
            _ => no_override.to_owned(),
        };
        refusals.push(
            Refusal::new(
                AttestationReason::BmcReportedOn,
                format!(
                    "the last reading of remediation {} found the machine's power {power}, not Off: its BMC showed it alive; {why}",
                    remediation.name_any()
                ),
            )
            .acknowledgeable(dark_since),
        );
    }
    // A4: while a look is asked for, its reader is named and its reading not yet recorded; the
    // attestation waits for the look (DeviceLooked), and is judged on what it recorded.
    let looking = status.is_some_and(|s| crate::fence::look_pending(s).is_some());
    if let Some(reader) =
        progress.filter(|_| !looking).and_then(|p| p.reader.as_deref().or(p.unrecorded_reader.as_deref()))
    {
        refusals.push(Refusal::new(
            AttestationReason::ReadingUnrecorded,
            format!(
                "coroner process {reader} was reading remediation {}'s machine and stopped before it could record what it last read, and the fence ended without another reading: that reading may have shown the machine alive. A fence that reads again records it: delete the remediation (NodeHealthCheck creates a new one) and attest once that one fails",
                remediation.name_any()
            ),
        ));
    }
    // The guard's readings are readings of the verified system too: its last one must not show life.
    let guard = status.and_then(|s| conditions::find(&s.conditions, crate::guard::GUARD));
    if let Some(guard) = guard.filter(|c| c.reason == crate::guard::POWERED_ON) {
        let seen = status.and_then(|s| s.guard.as_ref()?.last_finding.as_ref()).map_or("not Off", |f| f.seen.as_str());
        refusals.push(Refusal::new(
            AttestationReason::BmcReportedOn,
            format!(
                "the guard's last reading of remediation {}'s released machine found its power {seen} ({}): its BMC showed it alive; there is no override",
                remediation.name_any(),
                guard.message
            ),
        ));
    }
    let admitted = status.and_then(|s| s.evidence.as_ref()?.node.as_ref()).map(|n| {
        if n.lease_present { lease_mark(Some(n.lease_renew_time.as_ref().map(|t| t.0))) } else { Timestamp::UNIX_EPOCH }
    });
    let failed = progress.and_then(|p| p.lease_renew_time_at_failure.as_ref()).map(|t| t.0);
    if let (Some(admitted), Some(failed)) = (admitted, failed)
        && admitted != failed
    {
        // Life after coroner's power action has no override (the binding may reach another machine).
        // It is dated by when the fence first saw the Lease change (coroner's clock), never by the
        // kubelet's renewTime: a kubelet clock behind would move a renewal after the power action
        // before it. A change no step of the fence saw is after it.
        let power_action = first_power_action(remediation);
        let seen = progress.and_then(|p| p.lease_change_seen_at.as_ref()).map(|t| t.0);
        let before =
            failed != Timestamp::UNIX_EPOCH && seen.is_some_and(|seen| before_power_action(seen, power_action));
        let after = match power_action.filter(|_| !before) {
            Some(at) => format!(
                "; it changed after coroner's first power action ({at}): the machine switched off may not be this node, and there is no override"
            ),
            None => String::new(),
        };
        refusals.push(
            Refusal::new(
                AttestationReason::FenceSawLife,
                format!(
                    "the node's Lease changed while remediation {} ran ({} at admission, {} when it failed): something on the node was alive{after}",
                    remediation.name_any(),
                    describe_mark(admitted),
                    describe_mark(failed)
                ),
            )
            .acknowledgeable(seen.filter(|_| before)),
        );
    }
    if !refusals.is_empty() {
        return Err(refusals);
    }
    let last = progress.and_then(|p| p.last_power_state.as_deref()).unwrap_or("no reading");
    Ok(format!("the fence's last reading: {last}; the Lease unchanged while it ran"))
}

/// A2: the failed fence's BmcBinding was verified, before the fence was admitted, at the content the
/// fence's client was made of then (a keyed digest of the spec and of the credential and CA values:
/// `verification::at_admission`): a binding edited since its last verification (a mistyped
/// endpoint, a wrong password, another CA bundle) reaches no BMC and fails exactly like a dead one.
/// Judged from the record taken at admission, so a verification after it does not count; the
/// binding's metadata, or its Secret's, is not its content. The identity's own client, when it was
/// built again during the fence, must be that content too. A record taken before contents were
/// recorded is refused (acknowledgeable). A fence that found no binding contacted no device.
pub fn binding_verified_at_admission(remediation: &CoronerRemediation) -> Result<String, Refusal> {
    let status = remediation.status.as_ref();
    let node = status.and_then(|s| s.evidence.as_ref()?.node.as_ref());
    let failed_on =
        status.and_then(|s| conditions::find(&s.conditions, contract::SUCCEEDED)).map(|c| c.reason.as_str());
    if failed_on == Some(Reason::NoBmcBinding.as_str()) {
        return Ok("no BmcBinding named the node: the fence contacted no device".into());
    }
    let name = remediation.name_any();
    let Some(binding) = node.and_then(|n| n.binding.as_ref()) else {
        return Err(Refusal::new(
            AttestationReason::BindingUnverified,
            format!(
                "remediation {name} recorded no single BmcBinding at admission (several named the node, or it predates that record): nothing shows the binding it used was verified"
            ),
        ));
    };
    let history = binding_history(binding);
    // The client the identity was then read through, when the fence got that far: built again from
    // the Secret after a rejection, it may be another content than the admission's.
    let identity = status.and_then(|s| s.evidence.as_ref()?.identity.as_ref()?.binding_content.as_ref());
    let verified = binding.verified_at.is_some()
        && binding.content.as_ref().is_some_and(|content| binding.verified_content.as_ref() == Some(content));
    if verified && identity.is_some_and(|used| binding.verified_content.as_ref() != Some(used)) {
        let admitted = node.map(|n| n.admitted_at.0);
        return Err(Refusal::new(
            AttestationReason::BindingUnverified,
            format!(
                "BmcBinding {} was {history}, but remediation {name} read the identity with other credentials or CA bundle than the ones verified (read again from the Secret during the fence): fix the binding so that it verifies (the guard and the next fence read through it)",
                binding.name
            ),
        )
        .acknowledgeable(admitted));
    }
    if verified {
        return Ok(format!("BmcBinding {} {history}, at the content its client had at admission", binding.name));
    }
    let admitted = node.map(|n| n.admitted_at.0);
    Err(Refusal::new(
        AttestationReason::BindingUnverified,
        format!(
            "BmcBinding {} was {history}; when remediation {name} was admitted it had generation {} and {}: a binding that reaches no BMC fails like a dead one; fix the binding so that it verifies (the guard and the next fence read through it)",
            binding.name,
            binding.generation,
            unverified_because(binding)
        ),
    )
    .acknowledgeable(admitted))
}

/// Why an admission record does not show its binding verified at its content.
pub(super) fn unverified_because(binding: &crate::api::BindingAtAdmission) -> String {
    match (&binding.content, &binding.verified_content, &binding.verified_at) {
        (_, _, None) => "no verification before it".to_owned(),
        (None, _, _) => {
            "no content recorded (its Secret or CA bundle could not be read, or the record predates contents)"
                .to_owned()
        }
        (Some(_), None, _) => {
            "no content recorded for that verification (made by an earlier coroner version)".to_owned()
        }
        (Some(_), Some(_), _) if binding.verified_generation == Some(binding.generation) => {
            "another content at the same generation: its credentials or CA bundle changed since".to_owned()
        }
        (Some(_), Some(_), _) => {
            "another content: its spec changed since (and maybe its credentials or CA bundle)".to_owned()
        }
    }
}

/// "last verified <time> at generation <n>", or "never verified".
pub(super) fn binding_history(binding: &crate::api::BindingAtAdmission) -> String {
    if let (Some(at), Some(uid)) = (&binding.verified_at, &binding.verified_by_earlier_object) {
        return format!(
            "last verified {} as an earlier BmcBinding object of the node (UID {uid}, no longer its binding)",
            at.0
        );
    }
    match (&binding.verified_at, binding.verified_generation) {
        (Some(at), Some(generation)) => format!("last verified {} at generation {generation}", at.0),
        (Some(at), None) => format!("last verified {}", at.0),
        _ => "never verified".to_owned(),
    }
}

/// The node exists and is the Node object attested (same UID).
pub fn node_is_the_attested_one(node: Option<&Node>, name: &str, uid: &str) -> Result<String, Refusal> {
    let Some(node) = node else {
        return Err(Refusal::new(AttestationReason::NodeNotFound, format!("Node {name} does not exist")));
    };
    let actual = node.metadata.uid.as_deref().unwrap_or_default();
    if actual == uid {
        Ok(format!("Node {name} has UID {uid}"))
    } else {
        Err(Refusal::new(
            AttestationReason::NodeUidMismatch,
            format!("Node {name} has UID {actual}, the attestation names {uid}: it is another Node object now"),
        ))
    }
}

/// The node is `Ready=Unknown`: no kubelet reports for it. Never `False`, whatever the template says:
/// a kubelet that reports NotReady is alive.
pub fn node_unreachable(node: &Node) -> Result<String, Refusal> {
    match crate::fence::ready_status(node) {
        Some(conditions::UNKNOWN) => Ok("Ready=Unknown".into()),
        other => Err(Refusal::new(
            AttestationReason::NodeNotUnreachable,
            format!("node is Ready={}: a kubelet is reporting, so the node is not dead", other.unwrap_or("absent")),
        )),
    }
}

/// The bootID the failed fence's admission recorded (empty: none recorded).
pub fn admitted_boot_id(remediation: &CoronerRemediation) -> &str {
    remediation.status.as_ref().and_then(|s| s.evidence.as_ref()?.node.as_ref()).map_or("", |n| n.boot_id.as_str())
}

/// A1: the last new bootID the failed fence saw the node report, and when it first saw it, on
/// coroner's clock ([`crate::fence::note_life_seen`]); none when no step of the fence saw one.
pub fn boot_seen(remediation: &CoronerRemediation) -> Option<(String, Timestamp)> {
    let progress = remediation.status.as_ref()?.progress.as_ref()?;
    Some((progress.boot_seen.clone()?, progress.boot_change_seen_at.as_ref()?.0))
}

/// A1: a Node whose kubelet reported a bootID other than the one the fence admitted the node with
/// booted since: something ran on that machine, whatever it reads now (`FenceSawLife`). It is dated
/// by when the fence first saw that boot (`seen`: the bootID and when, coroner's clock), never by the
/// kubelet's heartbeat time: a boot the fence never saw is first seen now, after the power action,
/// and has no override.
pub fn no_new_boot(
    admitted: &str,
    node: &Node,
    power_action: Option<Timestamp>,
    seen: Option<(String, Timestamp)>,
) -> Result<String, Refusal> {
    let now = node.status.as_ref().and_then(|s| s.node_info.as_ref()).map_or("", |i| i.boot_id.as_str());
    if admitted.is_empty() || now == admitted {
        return Ok(if admitted.is_empty() {
            "no bootID recorded at admission".into()
        } else {
            format!("bootID {now} as at admission")
        });
    }
    let seen = seen.filter(|(boot, _)| boot == now).map(|(_, at)| at);
    // A boot first seen after coroner's power action (or never seen by the fence) has no override.
    let before = seen.is_some_and(|at| before_power_action(at, power_action));
    let after = if before {
        ""
    } else {
        "; first seen after coroner's first power action (or never by the fence): no override"
    };
    Err(Refusal::new(
        AttestationReason::FenceSawLife,
        format!(
            "the node reports bootID {now}, not {admitted} as when its fence was admitted: the machine booted since, and its kubelet ran{after}"
        ),
    )
    .acknowledgeable(seen.filter(|_| before)))
}

/// How far a kubelet's clock may be from coroner's when a sign of life is placed before or after
/// the power action: life this close to it counts as after (no override).
pub const CLOCK_MARGIN: SignedDuration = SignedDuration::from_secs(5);

/// A1: when the fence's power action may first have reached a device: its first recorded reset (to
/// the BMC or a level's outlets), or a ForceOff decided and not answered (it may have gone out).
pub fn first_power_action(remediation: &CoronerRemediation) -> Option<Timestamp> {
    let status = remediation.status.as_ref()?;
    let power_off = status.evidence.as_ref().and_then(|e| e.power_off.as_ref());
    let resets = power_off.into_iter().flat_map(|p| p.resets.iter().map(|r| r.sent_at.0));
    let intent = status.progress.as_ref().and_then(|p| p.intent.as_ref());
    let decided = intent.filter(|i| i.action == crate::api::PowerAction::ForceOff).map(|i| i.decided_at.0);
    resets.chain(decided).min()
}

/// Whether a sign of life at `at` came before the power action (with [`CLOCK_MARGIN`]): only then
/// may an attester acknowledge it.
pub(super) fn before_power_action(at: Timestamp, power_action: Option<Timestamp>) -> bool {
    power_action.is_none_or(|action| at + CLOCK_MARGIN < action)
}

/// A node Lease as one mark to compare: its renewTime, the epoch when it has none or does not exist
/// (as the fence records it).
pub fn lease_mark(lease: Option<Option<Timestamp>>) -> Timestamp {
    lease.flatten().unwrap_or(Timestamp::UNIX_EPOCH)
}

pub(super) fn describe_mark(mark: Timestamp) -> String {
    if mark == Timestamp::UNIX_EPOCH { "no renewTime (no Lease)".into() } else { format!("renewTime {mark}") }
}

/// The Lease mark the remediation recorded when its fence failed; a remediation NHC timed out before
/// it failed recorded none, and then the mark at admission (earlier, so stricter) is used.
pub fn lease_at_fence_end(remediation: &CoronerRemediation) -> Option<Timestamp> {
    let status = remediation.status.as_ref()?;
    let at_failure = status.progress.as_ref().and_then(|p| p.lease_renew_time_at_failure.as_ref()).map(|t| t.0);
    let at_admission = || {
        let node = status.evidence.as_ref()?.node.as_ref()?;
        Some(if node.lease_present {
            lease_mark(Some(node.lease_renew_time.as_ref().map(|t| t.0)))
        } else {
            Timestamp::UNIX_EPOCH
        })
    };
    at_failure.or_else(at_admission)
}

/// The node's Lease is exactly as it was when the fence ended: a renewal, a new Lease or a deleted one
/// since then refuses, and nothing overrides that.
pub fn lease_unchanged_since_fence(
    baseline: Option<Timestamp>,
    current: Option<Option<Timestamp>>,
) -> Result<String, Refusal> {
    let Some(baseline) = baseline else {
        return Err(Refusal::new(
            AttestationReason::LeaseNotRecorded,
            "the remediation recorded no Lease when its fence ended (a coroner before attestations, or no admission); nothing to compare with",
        ));
    };
    let now = lease_mark(current);
    if now == baseline {
        Ok(format!("{} as when the fence ended", describe_mark(now)))
    } else {
        Err(Refusal::new(
            AttestationReason::LeaseChangedSinceFence,
            format!(
                "the node's Lease changed since the fence ended ({} then, {} now): something on the node is alive; there is no override",
                describe_mark(baseline),
                describe_mark(now)
            ),
        ))
    }
}

/// coroner has not seen the Lease renewed within the remediation's leaseFreshness (its own clock).
pub fn lease_stale(sighting: LeaseSighting, freshness: StdDuration) -> Result<String, Refusal> {
    from_gate(gates::lease_stale(sighting, freshness), &format!("not renewed within {}s", freshness.as_secs()))
}

/// The Node carries this remediation's owner record of the out-of-service taint: its releasing update
/// was made, whatever became of the taint since (a webhook may rewrite it on the way in, R4).
pub fn release_recorded(node: &Node, remediation_uid: &str) -> bool {
    taints::ownership(node, CoronerTaint::OutOfService).is_some_and(|o| o.uid == remediation_uid)
}

/// No out-of-service taint on the node other than this remediation's own.
pub fn no_foreign_out_of_service_taint(node: &Node, remediation_uid: &str) -> Result<String, Refusal> {
    if release_recorded(node, remediation_uid) {
        return Ok("the out-of-service taint is already this remediation's".into());
    }
    let key = CoronerTaint::OutOfService.key();
    let foreign = node.spec.as_ref().and_then(|s| s.taints.as_ref()).is_some_and(|t| t.iter().any(|t| t.key == key));
    if foreign {
        Err(Refusal::new(
            AttestationReason::OutOfServiceTaintPresent,
            format!(
                "node already carries a {key} taint coroner did not add: its workloads are released already, by someone else"
            ),
        ))
    } else {
        Ok(format!("no {key} taint yet"))
    }
}

// The evaluation --------------------------------------------------------------------------------------

/// A1/A2: whether the attestation acknowledges the evidence behind `refusal`: an acknowledgement of
/// the same reason naming the same moment (to the second), on an attestation created after that
/// moment plus the template's leaseFreshness (the node then had time to show any life it had, and
/// the Lease is judged unchanged since the fence by its own precondition, which has no override).
/// `None`: no override for this refusal; `Some(Err(hint))`: not acknowledged, and how it could be.
pub fn acknowledgement_clears(
    refusal: &Refusal,
    acknowledge: &[Acknowledgement],
    created: Timestamp,
    freshness: StdDuration,
) -> Option<Result<Acknowledgement, String>> {
    let at = refusal.evidence_at?;
    let reason = AcknowledgedReason::ALL.into_iter().find(|r| r.as_str() == refusal.reason.as_str())?;
    let wanted = Acknowledgement { reason, at: Time(at) };
    let earliest = at + freshness;
    let named = acknowledge.iter().any(|a| a.reason == reason && a.at.0.as_second() == at.as_second());
    Some(match (named, created > earliest) {
        (true, true) => Ok(wanted),
        (true, false) => Err(format!(
            "; acknowledged, but by an attestation created at {created}, before {earliest} (the evidence plus leaseFreshness): create a new one"
        )),
        (false, _) => Err(format!(
            "; an attester who accepts this evidence may say so: coroner attest --acknowledge {wanted}, in an attestation created after {earliest}"
        )),
    })
}

/// A refusal met again right before the Node write that the evaluation found acknowledged: the same
/// reason and moment, in the plan's list (checked then against the attestation's creation).
pub fn acknowledged_in(plan: &ReleasePlan, refusal: &Refusal) -> bool {
    let Some(at) = refusal.evidence_at else { return false };
    plan.acknowledged
        .iter()
        .any(|a| a.reason.as_str() == refusal.reason.as_str() && a.at.0.as_second() == at.as_second())
}
