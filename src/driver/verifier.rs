//! The binding verifier's loop: one verification of a BmcBinding over the same ports as the fence —
//! reachability, TLS, credentials, identity (the fence's UUID rules), power, the read latency (P4),
//! the levels' outlet observations (L5) and the verification kept beyond the object (A2). An early
//! warning, not a substitute: every fence proves identity afresh. Never sends a mutation to a device.
//! Production's controller (`controller::binding`) decides when to run it; the lab and the simulator
//! run it as it does.

use std::time::Duration as StdDuration;

use kube::{Resource, ResourceExt};
use tracing::{info, warn};

use super::{
    Error, Local, Mono, World,
    identity::{claims, node_system, origin_peers},
    ports::{Level, Listing, Target},
};
use crate::{
    api::{BmcBinding, BmcBindingStatus},
    contract::Reason,
    fence::IdentityProblem,
    gates, identity,
    levels::{self, MachineSeen, OutletDraw},
    verification::{self, Check, KeptVerification},
    words::api_error::ApiError,
};

/// What one run of the verifier came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verified {
    /// A good check of the binding's generation less than half a period ago (a wake-up by a status
    /// write): not asked again; it was this long ago.
    Fresh { ago: StdDuration },
    /// Checked now: the next check is due after this (before any jitter); `verified`: the device
    /// digest of the client through which the node's system was proven, when it was.
    Checked { next: StdDuration, verified: Option<u64> },
}

/// One verification of `binding` (as the store or the API server gave it). `referenced_changed`:
/// what it refers to (its Secret, its CA bundle) changed since its last verification, so no recent
/// good check can skip this one.
pub async fn verify<W: World>(
    world: &W,
    local: &Local,
    binding: &BmcBinding,
    referenced_changed: bool,
    interval: StdDuration,
) -> Result<Verified, Error> {
    if !referenced_changed
        && let Some(ago) =
            verification::fresh_check(binding.status.as_ref(), binding.metadata.generation, world.now(), interval)
    {
        return Ok(Verified::Fresh { ago });
    }
    let name = binding.name_any();
    let all = world.bindings(Listing::Fresh).await?;
    // Two bindings of one node: no reading tells which is meant. Two nodes' bindings on one BMC:
    // the identity read does ([`gates::conflict_settled_by_identity`]).
    let conflicts = gates::binding_conflicts(&all).remove(&name).unwrap_or_default();
    let (check, content, latency, asked) =
        match conflicts.iter().find(|c| matches!(c, gates::Conflict::SameNode { .. })) {
            Some(conflict) => (Check::Conflict(conflict.to_string()), None, None, None),
            None => read(world, binding, &all).await?,
        };
    let next = verification::next_check(&check, interval);
    let mut status = binding.status.clone().unwrap_or_default();
    let mut notices = verification::record(&mut status, &check, binding, content, world.now());
    if let Some(latency) = latency {
        let (poll_interval, _) = verification::shortest_timing(&world.templates().await?);
        notices.extend(verification::record_latency(&mut status, binding, latency, poll_interval, world.now()));
    }
    let asked = asked.unwrap_or_else(|| world.mono());
    let confirmed = observe_levels(world, binding, &check, asked, &mut status).await?;
    notices.extend(verification::record_levels(&mut status, binding, &all, &confirmed, world.now()));
    if binding.status.as_ref() != Some(&status) {
        world.write_binding_status(&name, binding.status.as_ref(), &status).await?;
    }
    // Only a verification this check made is kept (never a status carried over from before).
    if matches!(check, Check::Read { identity: Ok(_), .. })
        && let Some(kept) = verification::to_keep(binding, &status)
    {
        keep(world, local, &binding.spec.node_name, kept).await;
    }
    for notice in &notices {
        info!(binding = %name, reason = %notice.reason, "{}", notice.message);
        world.publish(&binding.object_ref(&()), notice, "Verify").await;
    }
    let verified = content.filter(|_| matches!(check, Check::Read { identity: Ok(_), .. }));
    Ok(Verified::Checked { next, verified })
}

/// A2: keeps the binding's verification for its node beyond the binding object (the ConfigMap
/// [`verification::KEPT_VERIFICATIONS`], sealed), when it is not what this process last kept in this
/// leadership term. Read, compared and written under the ConfigMap's resourceVersion: only a later
/// verification replaces the node's entry ([`verification::replaces_kept`]). A failure is logged and
/// tried again at the next verification; until then the entry is the node's earlier verification.
async fn keep<W: World>(world: &W, local: &Local, node: &str, mut kept: KeptVerification) {
    let instance = world.instance();
    if local.kept(node, &instance).as_ref() == Some(&kept.id()) {
        return;
    }
    kept.seal = world.seal_kept(node, &kept);
    let mut written = keep_once(world, node, &kept).await;
    if matches!(&written, Err(ApiError::Conflict(_))) {
        written = keep_once(world, node, &kept).await;
    }
    match written {
        Ok(()) => local.remember_kept(node, &instance, kept.id()),
        Err(error) => warn!(%node, %error, "could not keep the binding's verification beyond its object (A2)"),
    }
}

/// One read-compare-write of the node's kept verification (a conflict: another writer came first).
async fn keep_once<W: World>(world: &W, node: &str, kept: &KeptVerification) -> Result<(), ApiError> {
    let (current, version) = world.kept_record(node).await?;
    let sealed = current.as_ref().is_some_and(|c| world.seal_kept(node, c) == c.seal);
    if version.is_some() && !verification::replaces_kept(current.as_ref(), sealed, kept) {
        return Ok(());
    }
    world.write_kept(node, kept, version.as_deref()).await
}

/// L5: with the machine's power just read through its verified system (the BMC asked at `asked`),
/// every level's outlets are read (never switched) and what their draws say of the mapping is
/// recorded, sealed with the content key; with the machine Off, an agreement counts only from a look
/// begun within settle of `asked`, and a level with an outlet still drawing is read again while the
/// next look begins within it ([`levels::look_again`]). Returns, per level, the generation a sealed
/// confirmation confirms it at.
async fn observe_levels<W: World>(
    world: &W,
    binding: &BmcBinding,
    check: &Check,
    asked: Mono,
    status: &mut BmcBindingStatus,
) -> Result<Vec<Option<i64>>, Error> {
    let generation = binding.metadata.generation.unwrap_or_default();
    let seen = match check {
        Check::Read { identity: Ok(_), power_state, .. } if power_state == "Off" => Some(MachineSeen::Off),
        Check::Read { identity: Ok(_), power_state, .. } if power_state == "On" => {
            let node = world.node(&binding.spec.node_name).await?;
            Some(MachineSeen::On { ready: node.as_ref().and_then(crate::node::ready_status) == Some("True") })
        }
        Check::Read { identity: Ok(_), .. } => Some(MachineSeen::Other),
        _ => None,
    };
    // The window of an Off agreement (None: the templates could not be listed, and no Off agreement
    // is taken).
    let timing = match seen {
        Some(MachineSeen::Off) if !binding.spec.pdu_levels.is_empty() => {
            world.templates().await.ok().map(|t| verification::shortest_timing(&t))
        }
        _ => None,
    };
    let window = timing.map(|(_, settle)| levels::off_window(settle));
    let since = |world: &W| world.mono().saturating_sub(asked);
    for number in (2u32..).take(binding.spec.pdu_levels.len()) {
        let Some(seen) = seen else { break };
        let Ok((devices, _)) = world.level(binding, number).await? else { continue };
        let read = || async {
            let mut draws = Vec::new();
            for (index, (outlet, floor_watts)) in devices.outlets().into_iter().enumerate() {
                // An outlet not read now says nothing: the level is looked at again next time.
                let reading = devices.read(index).await.ok()?;
                draws.push(OutletDraw { outlet, floor_watts, watts: reading.watts });
            }
            Some(draws)
        };
        let begun = since(world);
        let Some(draws) = read().await else { continue };
        let mut observation = levels::within_window(levels::observe_mapping(seen, &draws), begun, window);
        if let (Some((poll, _)), Some(window)) = (timing, window) {
            while levels::look_again(seen, &observation, since(world) + poll, window) {
                world.sleep(poll).await;
                let begun = since(world);
                // A look again that cannot read every outlet leaves the contradiction seen standing.
                let Some(draws) = read().await else { break };
                observation = levels::within_window(levels::observe_mapping(seen, &draws), begun, Some(window));
            }
        }
        let old = status.level_confirmations.iter().find(|c| c.level == number).cloned();
        if let Some(mut next) = levels::next_confirmation(old.as_ref(), number, generation, &observation, world.now()) {
            next.seal = Some(world.seal(binding, &next));
            status.level_confirmations.retain(|c| c.level != number);
            status.level_confirmations.push(next);
        }
    }
    let count = binding.spec.pdu_levels.len();
    status.level_confirmations.retain(|c| c.level >= 2 && ((c.level - 2) as usize) < count);
    status.level_confirmations.sort_by_key(|c| c.level);
    Ok((2u32..)
        .take(count)
        .map(|level| {
            status
                .level_confirmations
                .iter()
                .find(|c| c.level == level)
                .filter(|c| c.seal.as_deref() == Some(world.seal(binding, c).as_str()))
                .filter(|c| levels::confirms(c, binding.metadata.generation))
                .and(binding.metadata.generation)
        })
        .collect())
}

/// The identity check, the content it was made with (A2), how long one power reading of the
/// verified system took (P4: measured before any outage), and when the BMC was asked for the check's
/// reading.
async fn read<W: World>(
    world: &W,
    binding: &BmcBinding,
    all: &[BmcBinding],
) -> Result<(Check, Option<u64>, Option<StdDuration>, Option<Mono>), Error> {
    let (check, path, content, asked) = identify(world, binding, all).await?;
    let (Check::Read { identity: Ok(_), .. }, Some(path)) = (&check, path) else {
        return Ok((check, content, None, asked));
    };
    let Ok((target, _)) = world.target(binding).await? else {
        return Ok((check, content, None, asked));
    };
    let started = world.mono();
    let latency = target.read(&path).await.is_ok().then(|| world.mono().saturating_sub(started));
    Ok((check, content, latency, asked))
}

/// What the BMC says of the binding's node, the verified system's path when it answered, the device
/// digest of the client it answered through, and when the BMC was asked (right before the reads that
/// find the system and its power).
pub async fn identify<W: World>(
    world: &W,
    binding: &BmcBinding,
    all: &[BmcBinding],
) -> Result<(Check, Option<String>, Option<u64>, Option<Mono>), Error> {
    let (target, digest) = match world.target(binding).await? {
        Ok(target) => target,
        Err(unusable) => return Ok((Check::Invalid(unusable.to_string()), None, None, None)),
    };
    let content = Some(digest);
    let node_name = &binding.spec.node_name;
    let node = world.node(node_name).await?;
    let node_uuid = node.and_then(|n| n.status?.node_info).map(|i| i.system_uuid).unwrap_or_default();
    let asked = Some(world.mono());
    let system = match node_system(world, binding, &target, &node_uuid, "verify").await {
        Ok(system) => system,
        Err(IdentityProblem::Binding { reason: Reason::IdentityMismatch, message, .. }) => {
            return Ok((Check::NoNodeSystem(message), None, content, asked));
        }
        Err(IdentityProblem::Binding { reason, message, .. }) => {
            return Ok((Check::Refused { reason, message }, None, content, asked));
        }
        Err(IdentityProblem::Bmc(failure) | IdentityProblem::SeenThenFailed { failure, .. }) => {
            return Ok((Check::Failed { reason: failure.reason, message: failure.message }, None, content, asked));
        }
    };
    let peers = origin_peers(world, binding, all).await?;
    if let Err(message) =
        gates::conflict_settled_by_identity(&binding.name_any(), node_name, &node_uuid, &system.uuid, &peers)
    {
        return Ok((Check::Refused { reason: Reason::BindingConflict, message }, None, content, asked));
    }
    let claims = claims(world, node_name, binding).await?;
    let verdict = identity::prove(&node_uuid, &system.uuid, &claims)
        .and_then(|matched| identity::other_spellings_clear(&system.aliases, &claims).map(|()| matched))
        .map_err(|refusal| (refusal.reason(), refusal.to_string()));
    let read = Check::Read {
        system_id: system.id,
        uuid: system.uuid,
        power_state: system.power_state.to_string(),
        identity: verdict,
    };
    Ok((read, Some(system.path), content, asked))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        api::CoronerRemediationSpec,
        sim::{
            lab::{Lab, Setup},
            script::Script,
        },
    };

    const UUID: &str = "7f3b0c1e-0000-4000-8000-000000000001";
    const PERIOD: StdDuration = StdDuration::from_secs(600);

    fn unverified(lab: &Lab<crate::sim::script::Scripted>) -> BmcBinding {
        lab.world(|t| {
            t.kept_verifications.clear();
            let binding = t.bindings.get_mut("worker-1").unwrap();
            binding.status = None;
            binding.clone()
        })
    }

    fn verify_now(lab: &Lab<crate::sim::script::Scripted>, binding: &BmcBinding) -> Verified {
        futures::executor::block_on(verify(lab, lab.local(), binding, false, PERIOD)).unwrap()
    }

    /// A2, through the ports the fence uses: the verifier proves the binding's BMC is the node's
    /// machine, records it on the binding, and keeps it, sealed, beyond the binding object.
    #[test]
    fn the_verifier_proves_the_binding_and_keeps_its_verification_beyond_the_object() {
        let lab = Lab::scripted(&Setup::new(UUID, CoronerRemediationSpec::default()), Script::machine(UUID, true));
        let binding = unverified(&lab);
        assert!(matches!(verify_now(&lab, &binding), Verified::Checked { next: PERIOD, verified: Some(_) }));
        let status = lab.world(|t| t.bindings["worker-1"].status.clone()).unwrap();
        let verified = crate::api::conditions::find(&status.conditions, verification::IDENTITY_VERIFIED);
        assert_eq!(verified.map(|c| c.status.as_str()), Some("True"), "{status:?}");
        assert_eq!(status.uuid.as_deref(), Some(UUID));
        let kept = lab.world(|t| t.kept_verifications.get("worker-1").cloned()).expect("kept beyond the object");
        assert_eq!(Some(&kept.content), status.verified_content.as_ref());
        assert_eq!(kept.seal, crate::sim::world::seal_kept("worker-1", &kept), "sealed");
    }

    /// A1 (soak seed 710896): what answered before a BMC failed travels with the failure. The pinned
    /// system, the node's, answered On and the Systems collection then failed: the identity step
    /// reads that as the machine seen alive, not as a BMC that said nothing.
    #[test]
    fn the_nodes_system_seen_on_before_the_collection_failed_is_a_sighting_not_silence() {
        let script = Script::machine(UUID, true).list_fails(crate::bmc::BmcError::Unreachable("timed out".into()));
        let lab = Lab::scripted(&Setup::new(UUID, CoronerRemediationSpec::default()), script);
        let mut binding = lab.world(|t| t.bindings["worker-1"].clone());
        binding.spec.redfish.as_mut().unwrap().system_id = Some("1".into());
        let found = futures::executor::block_on(async {
            let (target, _) = super::super::ports::Devices::target(&lab, &binding).await.unwrap().unwrap();
            node_system(&lab, &binding, &target, UUID, "read").await
        });
        match found {
            Err(IdentityProblem::SeenThenFailed { failure, seen_on }) => {
                assert_eq!((failure.reason, seen_on.as_str()), (Reason::BmcUnreachable, "On"));
            }
            other => panic!("the sighting was lost: {other:?}"),
        }
        let off = Script::machine(UUID, false).list_fails(crate::bmc::BmcError::Unreachable("timed out".into()));
        let lab = Lab::scripted(&Setup::new(UUID, CoronerRemediationSpec::default()), off);
        let found = futures::executor::block_on(async {
            let (target, _) = super::super::ports::Devices::target(&lab, &binding).await.unwrap().unwrap();
            node_system(&lab, &binding, &target, UUID, "read").await
        });
        assert!(matches!(found, Err(IdentityProblem::Bmc(_))), "Off is no sighting: {found:?}");
    }

    /// A good check less than half a period ago is not asked again; a change of what the binding
    /// refers to is.
    #[test]
    fn a_fresh_verification_is_not_repeated_unless_what_the_binding_refers_to_changed() {
        let lab = Lab::scripted(&Setup::new(UUID, CoronerRemediationSpec::default()), Script::machine(UUID, true));
        verify_now(&lab, &unverified(&lab));
        let binding = lab.world(|t| t.bindings["worker-1"].clone());
        let asked = lab.device().requests().len();
        assert!(matches!(verify_now(&lab, &binding), Verified::Fresh { .. }));
        assert_eq!(lab.device().requests().len(), asked, "the BMC was not asked");
        let changed = futures::executor::block_on(verify(&lab, lab.local(), &binding, true, PERIOD)).unwrap();
        assert!(matches!(changed, Verified::Checked { next: PERIOD, .. }));
        assert!(lab.device().requests().len() > asked, "asked again");
    }

    /// A2: the kept entry is the node's last verification: a verification older than the one kept
    /// (another replica's, later) does not replace it; one this process kept is written again only in
    /// a new leadership term.
    #[test]
    fn a_kept_verification_is_replaced_only_by_a_later_one() {
        let lab = Lab::scripted(&Setup::new(UUID, CoronerRemediationSpec::default()), Script::machine(UUID, true));
        verify_now(&lab, &unverified(&lab));
        let mine = lab.world(|t| t.kept_verifications["worker-1"].clone());
        let mut later = KeptVerification { at: mine.at + jiff::SignedDuration::from_secs(60), ..mine.clone() };
        later.seal = crate::sim::world::seal_kept("worker-1", &later);
        lab.world(|t| t.kept_verifications.insert("worker-1".into(), later.clone()));
        lab.restart();
        let binding = lab.world(|t| t.bindings["worker-1"].clone());
        futures::executor::block_on(verify(&lab, lab.local(), &binding, true, PERIOD)).unwrap();
        let kept = lab.world(|t| t.kept_verifications["worker-1"].clone());
        assert!(kept.at > later.at || kept == later, "never an older one over a later: {kept:?}");
        let mut forged = KeptVerification { at: kept.at + jiff::SignedDuration::from_secs(3600), ..kept };
        forged.seal = "00".into();
        lab.world(|t| t.kept_verifications.insert("worker-1".into(), forged.clone()));
        lab.restart();
        futures::executor::block_on(verify(&lab, lab.local(), &binding, true, PERIOD)).unwrap();
        let kept = lab.world(|t| t.kept_verifications["worker-1"].clone());
        assert_ne!(kept, forged, "an entry whose seal does not hold counts as none");
    }
}
