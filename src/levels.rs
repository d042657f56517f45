//! Fencing levels after the BMC (docs/safety.md, Fencing levels L1–L9): the pure rules. Level 1 is
//! the node's BMC; a binding's `pduLevels` are levels 2 and up, each the PDU outlets that feed the
//! machine. A level proves Off only when every outlet of it does; the next level is tried only when a
//! level stayed silent, never when its answers showed the mapping wrong.

use std::{
    cmp::Ordering,
    collections::{BTreeMap, BTreeSet},
};

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;

use crate::{
    api::{BmcBinding, BmcBindingSpec, FenceAction, LevelConfirmation, MappingProof, PduLevel, Phase},
    contract::Reason,
    words::outlet::{NotOff, OutletReading, OutletState, PduError},
};

/// L2: why a fence whose level ended with `reason` stops there instead of trying the next level.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LevelStop {
    /// The level's answers showed the mapping wrong (identity, ambiguity, a changed UUID, the node
    /// alive after an Off): the outlets come from the same inventory, and may be as wrong.
    #[error("the level's answers showed its mapping wrong ({}): the next level's outlets come from the same inventory", .0.as_str())]
    MappingShownWrong(Reason),
    /// The fence ended for a reason that is not a device staying silent (a gate, the API server, NHC,
    /// a refused release): no level is tried while such a reason holds.
    #[error("the fence ended for {}, not because the device stayed silent: no further level is tried", .0.as_str())]
    NotSilence(Reason),
}

/// L2: whether a fence whose level ended without a proof, for `reason`, may try its next level. Only
/// a device that could not prove Off within its attempts lets it: unreachable or timing out, TLS,
/// credentials, or a reset that never reached Off.
pub fn may_try_next_level(reason: Reason) -> Result<(), LevelStop> {
    match reason {
        Reason::BmcUnreachable
        | Reason::BmcTlsVerificationFailed
        | Reason::BmcAuthenticationFailed
        | Reason::PowerOffNotConfirmed => Ok(()),
        Reason::IdentityMismatch
        | Reason::IdentityAmbiguous
        | Reason::IdentityChanged
        | Reason::NodeUuidUnusable
        | Reason::NodeAliveAfterPowerOff
        | Reason::BindingConflict
        | Reason::OutletMappingWrong
        | Reason::OutletShared => Err(LevelStop::MappingShownWrong(reason)),
        other => Err(LevelStop::NotSilence(other)),
    }
}

/// One outlet of a level as the fence read it.
#[derive(Clone, Debug, PartialEq)]
pub struct OutletOutcome {
    /// The outlet, as [`crate::api::PduOutlet::key`] names it.
    pub outlet: String,
    pub floor_watts: f64,
    pub reading: Result<OutletReading, PduError>,
}

/// Why a level did not prove Off at one reading: its first outlet that does not prove Off, else its
/// first outlet that could not be read.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum LevelNotOff {
    #[error("outlet {outlet} could not be read: {error}")]
    Unread { outlet: String, error: PduError },
    #[error("outlet {outlet}: {cause}")]
    NotOff { outlet: String, cause: NotOff },
    #[error("the level has no outlet")]
    Empty,
}

/// L4, what counts as Off: `reading` proves the outlet Off when it reads Off, no command is pending,
/// and a metered draw is at most `floor_watts`. A draw or a floor that is not a number proves nothing, and neither does a
/// meter that gives no reading.
pub fn proves_off(reading: &OutletReading, floor_watts: f64) -> Result<(), NotOff> {
    if reading.state != OutletState::Off {
        return Err(NotOff::Reads(reading.state.clone()));
    }
    if reading.pending {
        return Err(NotOff::CommandPending);
    }
    if reading.metered && reading.watts.is_none() {
        return Err(NotOff::MeterSilent);
    }
    match reading.watts {
        // A floor or a draw that is not a number compares as neither: above the floor.
        Some(watts) if !matches!(watts.partial_cmp(&floor_watts), Some(Ordering::Less | Ordering::Equal)) => {
            Err(NotOff::Drawing { watts, floor: floor_watts })
        }
        _ => Ok(()),
    }
}

/// L1, L4: a level proves Off at one reading only when every outlet of it was read and proves Off
/// ([`proves_off`]): a machine with two supplies runs on the one left On. An outlet read not Off is
/// named before one that could not be read: it is switched off whatever the other answered.
pub fn level_proves_off(outlets: &[OutletOutcome]) -> Result<(), LevelNotOff> {
    if outlets.is_empty() {
        return Err(LevelNotOff::Empty);
    }
    let mut unread = None;
    for outcome in outlets {
        let outlet = outcome.outlet.clone();
        match &outcome.reading {
            Err(error) => {
                unread.get_or_insert(LevelNotOff::Unread { outlet, error: error.clone() });
            }
            Ok(reading) => {
                proves_off(reading, outcome.floor_watts).map_err(|cause| LevelNotOff::NotOff { outlet, cause })?
            }
        }
    }
    unread.map_or(Ok(()), Err)
}

/// L4 within one fence: [`level_proves_off`], and an outlet whose meter gave a reading earlier in
/// this fence (`metered`: the outlets that did, [`metered_now`], kept in the fence's
/// `status.progress.meteredOutlets`) proves nothing once it gives none:
/// a PDU that drops the sensor may hide a draw as a silent one does.
pub fn level_proves_off_since(outlets: &[OutletOutcome], metered: &[String]) -> Result<(), LevelNotOff> {
    let fell_silent = outlets.iter().find(|o| {
        metered.contains(&o.outlet)
            && o.reading.as_ref().is_ok_and(|r| r.state == OutletState::Off && r.watts.is_none())
    });
    match fell_silent {
        Some(outlet) => Err(LevelNotOff::NotOff { outlet: outlet.outlet.clone(), cause: NotOff::MeterSilent }),
        None => level_proves_off(outlets),
    }
}

/// L4: a level's outlets are switched off only when every outlet's meter is on record first: the
/// outlet answered at this reading (the intent's write then keeps its meter in `metered`), or its
/// meter is on record from an earlier reading. An outlet switched off before anyone on record read
/// it may have a meter that falls silent once it is off, and a silent meter proves Off only where
/// no meter was ever seen. Returns the first outlet that is neither.
pub fn meters_on_record(outlets: &[OutletOutcome], metered: &[String]) -> Result<(), LevelNotOff> {
    match outlets.iter().find(|o| o.reading.is_err() && !metered.contains(&o.outlet)) {
        Some(OutletOutcome { outlet, reading: Err(error), .. }) => {
            Err(LevelNotOff::Unread { outlet: outlet.clone(), error: error.clone() })
        }
        _ => Ok(()),
    }
}

/// The outlets whose meter has given a reading in this fence: `before`, and those that give one now.
pub fn metered_now(before: &[String], outlets: &[OutletOutcome]) -> Vec<String> {
    let mut metered = before.to_vec();
    for outcome in outlets {
        if outcome.reading.as_ref().is_ok_and(|r| r.watts.is_some()) && !metered.contains(&outcome.outlet) {
            metered.push(outcome.outlet.clone());
        }
    }
    metered
}

/// What a level's mapping rests on. (A confirmation by the machine's own observations is not relied
/// on yet: [`MappingRefusal::PassiveNotRelied`].)
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MappingBasis {
    /// A person stated it (`mappingProof: OperatorStatement`): usable, a Warning every time
    /// (`OutletMappingUnproven`), counted as a safety override.
    OperatorStatement,
}

/// L5: why a level's mapping may not be relied on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MappingRefusal {
    #[error(
        "nothing confirmed that these outlets feed this machine, and the level does not state it (mappingProof: OperatorStatement)"
    )]
    Unconfirmed,
    #[error(
        "the mapping was confirmed at generation {confirmed}, and the binding was edited since (generation {current}): unconfirmed until the machine confirms it again"
    )]
    EditedSince { confirmed: i64, current: i64 },
    /// L5: the binding verifier confirmed the mapping from what it saw (the machine running with every
    /// outlet drawing, then off with every outlet at its floor), and no level rests on that yet.
    #[error(
        "the machine's observations confirmed this mapping, but no level rests on a passive confirmation in this version: it cannot show these outlets are all of the machine's supplies, nor that two agreements were one machine's; state the mapping (mappingProof: OperatorStatement) to use the level"
    )]
    PassiveNotRelied,
}

/// L5: what a level's mapping rests on. `confirmed_at` is the binding generation at which the machine
/// confirmed it ([`confirms`], on a confirmation coroner sealed). Only an operator's statement makes a
/// level usable in this version; a passive confirmation is reported, and relied on by nothing.
pub fn mapping_basis(
    level: &PduLevel,
    confirmed_at: Option<i64>,
    generation: Option<i64>,
) -> Result<MappingBasis, MappingRefusal> {
    match (confirmed_at, generation) {
        _ if level.mapping_proof == Some(MappingProof::OperatorStatement) => Ok(MappingBasis::OperatorStatement),
        (Some(confirmed), Some(current)) if confirmed == current => Err(MappingRefusal::PassiveNotRelied),
        (Some(confirmed), Some(current)) => Err(MappingRefusal::EditedSince { confirmed, current }),
        _ => Err(MappingRefusal::Unconfirmed),
    }
}

/// What the binding verifier saw of the machine, through its BMC, as it read the level's outlets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MachineSeen {
    /// The verified system reads On; `ready`: the node reports `Ready=True`.
    On {
        ready: bool,
    },
    Off,
    /// Anything else (`PoweringOn`, an unknown value): no observation.
    Other,
}

/// One outlet as the verifier read it: its key, its floor, and its draw (`None`: unmetered or
/// unread).
#[derive(Clone, Debug, PartialEq)]
pub struct OutletDraw {
    pub outlet: String,
    pub floor_watts: f64,
    pub watts: Option<f64>,
}

/// L5: what one look at the machine and a level's outlets says of the mapping.
#[derive(Clone, Debug, PartialEq)]
pub enum MappingObservation {
    /// The machine runs (its node Ready) and every outlet draws above its floor.
    AgreesOn,
    /// The machine is off and every outlet draws at most its floor.
    AgreesOff,
    /// The draws contradict the mapping (the machine runs and an outlet draws nothing, or it is off
    /// and an outlet still draws).
    Contradicts(String),
    /// An outlet meters nothing (or could not be read): draws can never confirm this level.
    Unmetered(String),
    /// The machine was in no state that tells anything.
    Nothing,
}

/// L5: judges one look. Draws are compared with each outlet's floor; a draw that is not a number
/// proves nothing.
pub fn observe_mapping(seen: MachineSeen, outlets: &[OutletDraw]) -> MappingObservation {
    let mut draws = Vec::new();
    for outlet in outlets {
        match outlet.watts.filter(|w| w.is_finite()) {
            Some(watts) => draws.push((outlet, watts)),
            None => return MappingObservation::Unmetered(outlet.outlet.clone()),
        }
    }
    let shown = |draws: &[(&OutletDraw, f64)]| {
        draws.iter().map(|(o, w)| format!("{} {w} W", o.outlet)).collect::<Vec<_>>().join(", ")
    };
    match seen {
        MachineSeen::On { ready: true } => match draws.iter().find(|(o, w)| *w <= o.floor_watts) {
            None => MappingObservation::AgreesOn,
            Some((o, w)) => MappingObservation::Contradicts(format!(
                "the machine runs (node Ready) and outlet {} draws {w} W, at most its {} W floor ({})",
                o.outlet,
                o.floor_watts,
                shown(&draws)
            )),
        },
        MachineSeen::Off => match draws.iter().find(|(o, w)| *w > o.floor_watts) {
            None => MappingObservation::AgreesOff,
            Some((o, w)) => MappingObservation::Contradicts(format!(
                "the machine reads Off and outlet {} draws {w} W, above its {} W floor ({})",
                o.outlet,
                o.floor_watts,
                shown(&draws)
            )),
        },
        MachineSeen::On { ready: false } | MachineSeen::Other => MappingObservation::Nothing,
    }
}

/// L5: the longest window of an Off agreement (see [`off_window`]): a verifier's check is not held
/// for a long settle (up to 10m), nor past a handover's grace; a draw left after it contradicts the
/// mapping, which only confirms less.
pub const OFF_LOOK_LIMIT: std::time::Duration = std::time::Duration::from_secs(10);

/// L5: an Off agreement comes within settle of the BMC's Off reading, since an outlet takes a moment
/// to fall to its floor once its machine went off: the window, counted from right before the BMC was
/// asked, is `settle` (the shortest of the namespace's templates), at most [`OFF_LOOK_LIMIT`].
pub fn off_window(settle: std::time::Duration) -> std::time::Duration {
    settle.min(OFF_LOOK_LIMIT)
}

/// L5: what a look at the outlets says once its timing is known: an Off agreement only from a look
/// begun within the window (`None`: the window could not be known); anything else as it is.
pub fn within_window(
    observation: MappingObservation,
    begun: std::time::Duration,
    window: Option<std::time::Duration>,
) -> MappingObservation {
    match observation {
        MappingObservation::AgreesOff if window.is_none_or(|window| begun > window) => MappingObservation::Nothing,
        other => other,
    }
}

/// L5: a look that saw the machine Off while an outlet still drew is taken again (the whole level)
/// while the next look, `next_look` after the BMC was asked, begins within the window; a draw left
/// after that contradicts the mapping.
pub fn look_again(
    seen: MachineSeen,
    observation: &MappingObservation,
    next_look: std::time::Duration,
    window: std::time::Duration,
) -> bool {
    seen == MachineSeen::Off && matches!(observation, MappingObservation::Contradicts(_)) && next_look <= window
}

/// L5: the level's confirmation after one look (unsealed: the caller seals it). `None`: nothing to
/// record (no earlier confirmation and nothing seen).
pub fn next_confirmation(
    old: Option<&LevelConfirmation>,
    level: u32,
    generation: i64,
    observation: &MappingObservation,
    now: Timestamp,
) -> Option<LevelConfirmation> {
    let fresh = LevelConfirmation { level, generation, on_seen_at: None, off_seen_at: None, last: None, seal: None };
    // Observations of an earlier generation describe other outlets.
    let mut next = old.filter(|c| c.generation == generation).cloned().unwrap_or(fresh);
    next.seal = None;
    let at = Some(Time(now));
    match observation {
        MappingObservation::AgreesOn => {
            next.on_seen_at = at;
            next.last = Some("the machine ran with every outlet drawing above its floor".into());
        }
        MappingObservation::AgreesOff => {
            next.off_seen_at = at;
            next.last = Some("the machine was off with every outlet at most at its floor".into());
        }
        MappingObservation::Contradicts(why) => {
            next.on_seen_at = None;
            next.off_seen_at = None;
            next.last = Some(format!("contradicted: {why}"));
        }
        MappingObservation::Unmetered(outlet) => {
            next.on_seen_at = None;
            next.off_seen_at = None;
            next.last = Some(format!("outlet {outlet} meters no draw: this level can only be stated"));
        }
        MappingObservation::Nothing if old.is_none() => return None,
        MappingObservation::Nothing => {}
    }
    Some(next)
}

/// L5: whether `confirmation` (already checked to be coroner's own) confirms the level at the
/// binding's `generation`: both agreements seen, at this generation.
pub fn confirms(confirmation: &LevelConfirmation, generation: Option<i64>) -> bool {
    Some(confirmation.generation) == generation
        && confirmation.on_seen_at.is_some()
        && confirmation.off_seen_at.is_some()
}

/// L6: an outlet more than one node's binding names, where not every such node declares it shared
/// with every other (`sharedWith`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutletShared {
    /// The outlet, as [`crate::api::PduOutlet::key`] names it.
    pub outlet: String,
    /// Every node whose binding names it.
    pub nodes: Vec<String>,
}

impl std::fmt::Display for OutletShared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "outlet {} is named by the bindings of nodes {}, which do not all declare it shared (sharedWith) with each other",
            self.outlet,
            self.nodes.join(", ")
        )
    }
}

/// L6: for every binding (by name) that names a conflicting shared outlet, those outlets. An outlet
/// named by several nodes is no conflict only when each of them lists all the others in `sharedWith`.
pub fn shared_outlets(bindings: &[BmcBinding]) -> BTreeMap<String, Vec<OutletShared>> {
    // outlet → node → the nodes that node's binding declares it shared with.
    let mut named: BTreeMap<String, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for binding in bindings {
        for outlet in binding.spec.pdu_levels.iter().flat_map(|level| &level.outlets) {
            named
                .entry(outlet.key())
                .or_default()
                .entry(binding.spec.node_name.clone())
                .or_default()
                .extend(outlet.shared_with.iter().cloned());
        }
    }
    let mut conflicts: BTreeMap<String, Vec<OutletShared>> = BTreeMap::new();
    for (outlet, nodes) in named {
        let declared =
            nodes.iter().all(|(node, with)| nodes.keys().filter(|other| *other != node).all(|o| with.contains(o)));
        if nodes.len() < 2 || declared {
            continue;
        }
        let conflict = OutletShared { outlet: outlet.clone(), nodes: nodes.keys().cloned().collect() };
        for binding in bindings {
            let names = binding.spec.pdu_levels.iter().flat_map(|l| &l.outlets).any(|o| o.key() == outlet);
            if names {
                conflicts.entry(binding.name_any()).or_default().push(conflict.clone());
            }
        }
    }
    conflicts
}

/// L6: a declared shared outlet feeds other machines too; it is switched only while every node it
/// feeds is itself being fenced ([`may_lose_shared_outlet`]). The error names the nodes that are not.
pub fn may_switch_shared(feeds: &[String], admitted: &BTreeSet<String>) -> Result<(), Vec<String>> {
    let live: Vec<String> = feeds.iter().filter(|node| !admitted.contains(*node)).cloned().collect();
    if live.is_empty() { Ok(()) } else { Err(live) }
}

/// L6: a node whose remediation is in `phase` may lose a shared outlet: from its admission until its
/// release is written, and, its fence ended (`Done` or `Failed`), while a release of it stands that
/// nobody approved to power on (`released`: [`crate::guard::may_enforce`], on its Node read now);
/// never while coroner powers it on again or waits for it to come back, nor before admission, nor
/// after a fence that released nothing, nor while the remediation is being deleted (`deleting`: its
/// finalizer ends the fence and takes its taints back; NodeHealthCheck deletes it once the node is
/// healthy).
pub fn may_lose_shared_outlet(phase: Phase, released: bool, deleting: bool) -> bool {
    if deleting {
        return false;
    }
    match phase {
        Phase::VerifyingIdentity
        | Phase::PoweringOff
        | Phase::ConfirmingOff
        | Phase::PoweringOffOutlets
        | Phase::Releasing => true,
        Phase::Done | Phase::Failed => released,
        Phase::Pending | Phase::WaitingForRelease | Phase::PoweringOn | Phase::WaitingForNode => false,
    }
}

/// L7: what the node's BMC showed once every outlet of the level read Off, within settle.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BmcAfterOutletsOff {
    /// It stopped answering: it lost its power with the machine.
    Silent,
    /// It answered for the node's verified system with this power state.
    Reads(String),
}

/// L7: the outlets do not feed this machine.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "every outlet of the level reads Off and the node's BMC still reads its machine {0}: these outlets do not feed this machine (OutletMappingWrong); nothing released"
)]
pub struct OutletMappingWrong(pub String);

/// L7: with a BMC that still answers, a level proves Off only if, once its outlets read Off, the BMC
/// stops answering or reads the machine Off.
pub fn bmc_agrees(after: &BmcAfterOutletsOff) -> Result<(), OutletMappingWrong> {
    match after {
        BmcAfterOutletsOff::Silent => Ok(()),
        BmcAfterOutletsOff::Reads(state) if state == "Off" => Ok(()),
        BmcAfterOutletsOff::Reads(state) => Err(OutletMappingWrong(state.clone())),
    }
}

/// L3: this version proves Off through a level only for `action: Off`; a `Reboot` whose binding has
/// levels is refused at admission (an On after a level-2 release needs outlets switched On first).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "BmcBinding {binding} has {levels} PDU level(s) and this remediation's action is Reboot: a fence that may end at a PDU level is admitted only with action: \"Off\" (use an Off template for this node, or remove pduLevels)"
)]
pub struct RebootWithLevels {
    pub binding: String,
    pub levels: usize,
}

/// L3: whether a remediation with `action` may be admitted through a binding with `spec`.
pub fn action_allowed(action: FenceAction, binding: &str, spec: &BmcBindingSpec) -> Result<(), RebootWithLevels> {
    match action {
        FenceAction::Reboot if !spec.pdu_levels.is_empty() => {
            Err(RebootWithLevels { binding: binding.to_owned(), levels: spec.pdu_levels.len() })
        }
        FenceAction::Off | FenceAction::Reboot => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use kube::api::ObjectMeta;
    use proptest::prelude::*;

    use super::*;
    use crate::{
        api::{PduOutlet, SecretRef, SnmpOutlet, SnmpVersion},
        contract::Disposition,
    };

    fn outlet(address: &str, number: u32, shared_with: &[&str]) -> PduOutlet {
        PduOutlet {
            redfish: None,
            snmp: Some(SnmpOutlet {
                address: address.into(),
                port: None,
                outlet: number,
                version: SnmpVersion::V3,
                auth_protocol: None,
                priv_protocol: None,
                context_name: None,
            }),
            credentials_secret_ref: SecretRef { name: "pdu".into() },
            tls: None,
            floor_watts: None,
            shared_with: shared_with.iter().map(|s| (*s).to_owned()).collect(),
        }
    }

    fn binding(name: &str, node: &str, outlets: Vec<PduOutlet>) -> BmcBinding {
        let mut spec: BmcBindingSpec = serde_json::from_value(serde_json::json!({
            "nodeName": node,
            "ipmi": {"address": "10.0.0.1"},
            "credentialsSecretRef": {"name": "bmc"},
        }))
        .unwrap();
        spec.pdu_levels = vec![PduLevel { outlets, mapping_proof: None }];
        BmcBinding { metadata: ObjectMeta { name: Some(name.into()), ..ObjectMeta::default() }, spec, status: None }
    }

    fn off(watts: Option<f64>) -> OutletReading {
        OutletReading { state: OutletState::Off, pending: false, watts, metered: watts.is_some() }
    }

    fn outcome(outlet: &str, reading: Result<OutletReading, PduError>) -> OutletOutcome {
        OutletOutcome { outlet: outlet.into(), floor_watts: 5.0, reading }
    }

    #[test]
    fn only_a_device_that_stayed_silent_lets_the_fence_try_the_next_level() {
        for reason in [
            Reason::BmcUnreachable,
            Reason::BmcTlsVerificationFailed,
            Reason::BmcAuthenticationFailed,
            Reason::PowerOffNotConfirmed,
        ] {
            assert_eq!(may_try_next_level(reason), Ok(()), "{reason:?}");
        }
    }

    #[test]
    fn answers_that_showed_the_mapping_wrong_stop_the_fence() {
        for reason in [Reason::IdentityMismatch, Reason::IdentityAmbiguous, Reason::IdentityChanged] {
            assert_eq!(may_try_next_level(reason), Err(LevelStop::MappingShownWrong(reason)));
        }
        assert_eq!(
            may_try_next_level(Reason::NodeAliveAfterPowerOff),
            Err(LevelStop::MappingShownWrong(Reason::NodeAliveAfterPowerOff))
        );
    }

    #[test]
    fn no_level_is_tried_for_a_gate_the_api_server_or_nhc() {
        for reason in
            [Reason::NodeLeaseChanged, Reason::ApiUnavailable, Reason::TimedOutByNHC, Reason::ReleaseNotWritten]
        {
            assert_eq!(may_try_next_level(reason), Err(LevelStop::NotSilence(reason)));
        }
    }

    #[test]
    fn only_final_failures_can_lead_to_a_next_level() {
        // A reason that waits or progresses is not the end of a level.
        for reason in Reason::ALL.iter().copied().filter(|r| may_try_next_level(*r).is_ok()) {
            assert_eq!(reason.disposition(), Disposition::Final, "{reason:?}");
        }
    }

    #[test]
    fn a_level_proves_off_only_when_every_outlet_does() {
        let both = [outcome("a", Ok(off(Some(0.0)))), outcome("b", Ok(off(None)))];
        assert_eq!(level_proves_off(&both), Ok(()));
        let on = OutletReading { state: OutletState::On, pending: false, watts: None, metered: false };
        let one_on = [outcome("a", Ok(off(None))), outcome("b", Ok(on))];
        assert_eq!(
            level_proves_off(&one_on),
            Err(LevelNotOff::NotOff { outlet: "b".into(), cause: NotOff::Reads(OutletState::On) })
        );
    }

    #[test]
    fn an_outlet_that_could_not_be_read_proves_nothing() {
        let error = PduError::Unreachable("no route".into());
        let levels = [outcome("a", Ok(off(None))), outcome("b", Err(error.clone()))];
        assert_eq!(level_proves_off(&levels), Err(LevelNotOff::Unread { outlet: "b".into(), error }));
        assert_eq!(level_proves_off(&[]), Err(LevelNotOff::Empty));
    }

    #[test]
    fn an_outlet_read_on_is_named_before_one_that_could_not_be_read_so_it_is_switched_off() {
        let on = OutletReading { state: OutletState::On, pending: false, watts: None, metered: false };
        let levels = [outcome("a", Err(PduError::Unreachable("no route".into()))), outcome("b", Ok(on))];
        assert_eq!(
            level_proves_off(&levels),
            Err(LevelNotOff::NotOff { outlet: "b".into(), cause: NotOff::Reads(OutletState::On) })
        );
    }

    #[test]
    fn a_welded_relay_that_still_draws_is_not_off() {
        let levels = [outcome("a", Ok(off(Some(120.0))))];
        assert!(matches!(level_proves_off(&levels), Err(LevelNotOff::NotOff { cause: NotOff::Drawing { .. }, .. })));
    }

    #[test]
    fn an_outlet_whose_meter_read_earlier_in_the_fence_and_reads_nothing_now_proves_nothing() {
        let metered = metered_now(&[], &[outcome("a", Ok(off(Some(0.0)))), outcome("b", Ok(off(None)))]);
        assert_eq!(metered, ["a"], "only an outlet that gave a reading");
        // Its sensor dropped from the answer (no meter reported): the relay alone says Off.
        let dropped = OutletReading { state: OutletState::Off, pending: false, watts: None, metered: false };
        let now = [outcome("a", Ok(dropped)), outcome("b", Ok(off(None)))];
        assert_eq!(level_proves_off(&now), Ok(()), "on its own, this reading would prove Off");
        assert_eq!(
            level_proves_off_since(&now, &metered),
            Err(LevelNotOff::NotOff { outlet: "a".into(), cause: NotOff::MeterSilent })
        );
        // An outlet that never gave a reading in this fence is judged as it reads.
        assert_eq!(level_proves_off_since(&now, &["c".to_owned()]), Ok(()));
        assert_eq!(level_proves_off_since(&[outcome("a", Ok(off(Some(0.0))))], &metered), Ok(()));
    }

    #[test]
    fn a_level_is_switched_off_only_once_every_outlets_meter_is_on_record() {
        let timeout = || Err(PduError::Timeout { elapsed: std::time::Duration::from_secs(2), tries: 1 });
        let on = OutletReading { state: OutletState::On, pending: false, watts: Some(180.0), metered: true };
        // Outlet a unread, never read before: its meter might fall silent once it is off.
        let reading = [outcome("a", timeout()), outcome("b", Ok(on.clone()))];
        assert!(matches!(meters_on_record(&reading, &[]), Err(LevelNotOff::Unread { outlet, .. }) if outlet == "a"));
        // Its meter on record from an earlier reading of this fence: its silence will be seen.
        assert_eq!(meters_on_record(&reading, &["a".to_owned()]), Ok(()));
        // Every outlet answered: what they showed goes into the intent's write.
        assert_eq!(meters_on_record(&[outcome("a", Ok(on.clone())), outcome("b", Ok(on))], &[]), Ok(()));
    }

    #[test]
    fn a_passive_confirmation_makes_no_level_usable_yet_and_says_why() {
        let level = PduLevel { outlets: vec![outlet("pdu", 1, &[])], mapping_proof: None };
        assert_eq!(mapping_basis(&level, Some(3), Some(3)), Err(MappingRefusal::PassiveNotRelied));
        assert!(MappingRefusal::PassiveNotRelied.to_string().contains("OperatorStatement"));
        assert_eq!(
            mapping_basis(&level, Some(2), Some(3)),
            Err(MappingRefusal::EditedSince { confirmed: 2, current: 3 })
        );
        assert_eq!(mapping_basis(&level, None, Some(3)), Err(MappingRefusal::Unconfirmed));
    }

    #[test]
    fn an_operator_statement_makes_an_unconfirmed_mapping_usable_and_says_so() {
        let level =
            PduLevel { outlets: vec![outlet("pdu", 1, &[])], mapping_proof: Some(MappingProof::OperatorStatement) };
        assert_eq!(mapping_basis(&level, None, Some(3)), Ok(MappingBasis::OperatorStatement));
        assert_eq!(mapping_basis(&level, Some(2), Some(3)), Ok(MappingBasis::OperatorStatement));
        assert_eq!(mapping_basis(&level, Some(3), Some(3)), Ok(MappingBasis::OperatorStatement), "stated: as today");
    }

    #[test]
    fn an_outlet_two_nodes_name_undeclared_is_a_conflict_on_both_bindings() {
        let bindings = [
            binding("a", "worker-1", vec![outlet("pdu-1", 3, &[])]),
            binding("b", "worker-2", vec![outlet("PDU-1", 3, &[])]),
            binding("c", "worker-3", vec![outlet("pdu-1", 4, &[])]),
        ];
        let conflicts = shared_outlets(&bindings);
        assert_eq!(conflicts.keys().collect::<Vec<_>>(), ["a", "b"]);
        assert_eq!(conflicts["a"][0].nodes, ["worker-1", "worker-2"]);
        assert!(conflicts["a"][0].to_string().contains("snmp:pdu-1:161|3"), "{}", conflicts["a"][0]);
    }

    #[test]
    fn a_shared_outlet_every_node_declares_is_no_conflict() {
        let declared = [
            binding("a", "worker-1", vec![outlet("pdu-1", 3, &["worker-2"])]),
            binding("b", "worker-2", vec![outlet("pdu-1", 3, &["worker-1"])]),
        ];
        assert!(shared_outlets(&declared).is_empty());
        // One side declaring is not enough: the other binding's author may not know.
        let one_sided = [
            binding("a", "worker-1", vec![outlet("pdu-1", 3, &["worker-2"])]),
            binding("b", "worker-2", vec![outlet("pdu-1", 3, &[])]),
        ];
        assert_eq!(shared_outlets(&one_sided).len(), 2);
    }

    #[test]
    fn two_outlets_of_one_binding_are_no_conflict() {
        let dual = [binding("a", "worker-1", vec![outlet("pdu-1", 3, &[]), outlet("pdu-2", 3, &[])])];
        assert!(shared_outlets(&dual).is_empty());
    }

    #[test]
    fn a_shared_outlet_is_switched_only_while_every_node_it_feeds_is_admitted() {
        let feeds = vec!["worker-1".to_owned(), "worker-2".to_owned()];
        let admitted: BTreeSet<String> = ["worker-1".to_owned()].into();
        assert_eq!(may_switch_shared(&feeds, &admitted), Err(vec!["worker-2".to_owned()]));
        let both: BTreeSet<String> = feeds.iter().cloned().collect();
        assert_eq!(may_switch_shared(&feeds, &both), Ok(()));
    }

    #[test]
    fn a_shared_outlet_is_lost_only_by_a_node_being_fenced_or_whose_release_stands_ended() {
        let lose = |phase, released| may_lose_shared_outlet(phase, released, false);
        for phase in [Phase::VerifyingIdentity, Phase::PoweringOff, Phase::ConfirmingOff, Phase::Releasing] {
            assert!(lose(phase, false), "{phase:?}");
        }
        assert!(lose(Phase::PoweringOffOutlets, false));
        // Released and ended: its machine is off and guarded; the guard may switch the outlet again.
        assert!(lose(Phase::Done, true) && lose(Phase::Failed, true));
        assert!(!lose(Phase::Done, false) && !lose(Phase::Failed, false));
        for phase in [Phase::Pending, Phase::WaitingForRelease, Phase::PoweringOn, Phase::WaitingForNode] {
            for released in [false, true] {
                assert!(!lose(phase, released), "{phase:?}: coroner may power it on, or it is not fenced");
            }
        }
    }

    #[test]
    fn a_node_whose_remediation_is_being_deleted_keeps_its_shared_outlet() {
        for phase in [Phase::ConfirmingOff, Phase::PoweringOffOutlets, Phase::Done] {
            assert!(!may_lose_shared_outlet(phase, true, true), "{phase:?}: its finalizer ends the fence");
        }
    }

    #[test]
    fn a_bmc_still_reading_on_after_the_outlets_went_off_shows_the_mapping_wrong() {
        assert_eq!(bmc_agrees(&BmcAfterOutletsOff::Silent), Ok(()));
        assert_eq!(bmc_agrees(&BmcAfterOutletsOff::Reads("Off".into())), Ok(()));
        assert_eq!(bmc_agrees(&BmcAfterOutletsOff::Reads("On".into())), Err(OutletMappingWrong("On".into())));
        assert!(bmc_agrees(&BmcAfterOutletsOff::Reads("PoweringOff".into())).is_err());
    }

    #[test]
    fn a_reboot_through_a_binding_with_levels_is_refused_and_an_off_is_not() {
        let with = binding("a", "worker-1", vec![outlet("pdu-1", 3, &[])]);
        assert_eq!(action_allowed(FenceAction::Off, "a", &with.spec), Ok(()));
        let refused = action_allowed(FenceAction::Reboot, "a", &with.spec).unwrap_err();
        assert!(refused.to_string().contains("action: \"Off\""), "{refused}");
        let mut without = with.spec.clone();
        without.pdu_levels.clear();
        assert_eq!(action_allowed(FenceAction::Reboot, "a", &without), Ok(()));
    }

    fn draw(outlet: &str, watts: Option<f64>) -> OutletDraw {
        OutletDraw { outlet: outlet.into(), floor_watts: 5.0, watts }
    }

    #[test]
    fn a_running_machine_whose_outlets_draw_and_an_off_one_whose_outlets_do_not_agree_with_the_mapping() {
        let drawing = [draw("a", Some(180.0)), draw("b", Some(170.0))];
        assert_eq!(observe_mapping(MachineSeen::On { ready: true }, &drawing), MappingObservation::AgreesOn);
        let idle = [draw("a", Some(0.0)), draw("b", Some(4.0))];
        assert_eq!(observe_mapping(MachineSeen::Off, &idle), MappingObservation::AgreesOff);
    }

    #[test]
    fn an_outlet_that_draws_nothing_while_the_machine_runs_contradicts_the_mapping() {
        let one_idle = [draw("a", Some(180.0)), draw("b", Some(0.0))];
        let seen = observe_mapping(MachineSeen::On { ready: true }, &one_idle);
        assert!(
            matches!(&seen, MappingObservation::Contradicts(why) if why.contains("outlet b draws 0 W")),
            "{seen:?}"
        );
        let still = [draw("a", Some(120.0))];
        assert!(matches!(observe_mapping(MachineSeen::Off, &still), MappingObservation::Contradicts(_)));
    }

    #[test]
    fn an_off_machine_whose_outlet_still_draws_is_looked_at_again_within_settle_and_no_longer() {
        let secs = std::time::Duration::from_secs;
        assert_eq!(off_window(secs(2)), secs(2));
        assert_eq!(off_window(secs(600)), OFF_LOOK_LIMIT, "a long settle is not waited out");
        let still = observe_mapping(MachineSeen::Off, &[draw("a", Some(120.0))]);
        assert!(look_again(MachineSeen::Off, &still, secs(1), secs(2)));
        assert!(look_again(MachineSeen::Off, &still, secs(2), secs(2)), "a look begun at settle is within it");
        assert!(!look_again(MachineSeen::Off, &still, secs(3), secs(2)), "a draw left after settle contradicts");
        let idle = observe_mapping(MachineSeen::Off, &[draw("a", Some(0.0))]);
        assert!(!look_again(MachineSeen::Off, &idle, secs(1), secs(2)), "agreed: nothing to look at again");
        let running = [draw("a", Some(0.0))];
        let contradicted = observe_mapping(MachineSeen::On { ready: true }, &running);
        assert!(
            !look_again(MachineSeen::On { ready: true }, &contradicted, secs(1), secs(2)),
            "a running machine's idle outlet is not waited on"
        );
    }

    #[test]
    fn an_off_agreement_counts_only_from_a_look_begun_within_settle_of_the_bmc_reading() {
        let secs = std::time::Duration::from_secs;
        let idle = || observe_mapping(MachineSeen::Off, &[draw("a", Some(0.0))]);
        assert_eq!(within_window(idle(), secs(1), Some(secs(2))), MappingObservation::AgreesOff);
        assert_eq!(within_window(idle(), secs(3), Some(secs(2))), MappingObservation::Nothing, "too late");
        assert_eq!(within_window(idle(), secs(0), None), MappingObservation::Nothing, "the window unknown");
        let still = observe_mapping(MachineSeen::Off, &[draw("a", Some(120.0))]);
        assert_eq!(within_window(still.clone(), secs(3), Some(secs(2))), still, "a contradiction stands whenever");
        let running = observe_mapping(MachineSeen::On { ready: true }, &[draw("a", Some(120.0))]);
        assert_eq!(
            within_window(running, secs(3), None),
            MappingObservation::AgreesOn,
            "an On agreement has no window"
        );
    }

    #[test]
    fn an_unmetered_outlet_can_never_confirm_and_a_booting_machine_tells_nothing() {
        let unmetered = [draw("a", Some(180.0)), draw("b", None)];
        assert_eq!(observe_mapping(MachineSeen::Off, &unmetered), MappingObservation::Unmetered("b".into()));
        let nan = [draw("a", Some(f64::NAN))];
        assert!(matches!(observe_mapping(MachineSeen::Off, &nan), MappingObservation::Unmetered(_)));
        let drawing = [draw("a", Some(180.0))];
        assert_eq!(observe_mapping(MachineSeen::On { ready: false }, &drawing), MappingObservation::Nothing);
        assert_eq!(observe_mapping(MachineSeen::Other, &drawing), MappingObservation::Nothing);
    }

    #[test]
    fn a_level_is_confirmed_only_once_both_agreements_were_seen_at_the_current_generation() {
        let now = Timestamp::UNIX_EPOCH;
        let on = next_confirmation(None, 2, 7, &MappingObservation::AgreesOn, now).unwrap();
        assert!(!confirms(&on, Some(7)));
        let both = next_confirmation(Some(&on), 2, 7, &MappingObservation::AgreesOff, now).unwrap();
        assert!(confirms(&both, Some(7)));
        // The binding edited since: not this mapping's.
        assert!(!confirms(&both, Some(8)));
        // An edit starts over: an agreement of generation 7 does not count at 8.
        let edited = next_confirmation(Some(&both), 2, 8, &MappingObservation::AgreesOff, now).unwrap();
        assert!(!confirms(&edited, Some(8)) && edited.on_seen_at.is_none());
        // A contradiction clears both.
        let contradicted =
            next_confirmation(Some(&both), 2, 7, &MappingObservation::Contradicts("x".into()), now).unwrap();
        assert!(!confirms(&contradicted, Some(7)));
        assert!(contradicted.last.unwrap().starts_with("contradicted: x"));
        // Nothing seen and nothing recorded: nothing to write.
        assert_eq!(next_confirmation(None, 2, 7, &MappingObservation::Nothing, now), None);
    }

    fn reading() -> impl Strategy<Value = Result<OutletReading, PduError>> {
        let state = prop_oneof![Just(OutletState::On), Just(OutletState::Off)];
        let watts = proptest::option::of(prop_oneof![Just(0.0), Just(5.0), Just(300.0)]);
        prop_oneof![
            (state, any::<bool>(), watts, any::<bool>()).prop_map(|(state, pending, watts, metered)| {
                Ok(OutletReading { state, pending, watts, metered: metered || watts.is_some() })
            }),
            Just(Err(PduError::Unreachable("down".into()))),
        ]
    }

    proptest! {
        #[test]
        fn a_level_proves_off_exactly_when_each_of_its_outlets_does(
            readings in proptest::collection::vec(reading(), 0..4)
        ) {
            let outcomes: Vec<_> =
                readings.iter().enumerate().map(|(i, r)| outcome(&i.to_string(), r.clone())).collect();
            let each = !outcomes.is_empty()
                && outcomes.iter().all(|o| o.reading.as_ref().is_ok_and(|r| proves_off(r, 5.0).is_ok()));
            prop_assert_eq!(level_proves_off(&outcomes).is_ok(), each);
        }
    }

    fn settled(state: OutletState, pending: bool, watts: Option<f64>) -> OutletReading {
        OutletReading { state, pending, watts, metered: watts.is_some() }
    }

    #[test]
    fn a_metered_outlet_whose_meter_gives_no_reading_proves_nothing() {
        let silent = OutletReading { state: OutletState::Off, pending: false, watts: None, metered: true };
        assert_eq!(proves_off(&silent, 5.0), Err(NotOff::MeterSilent));
        // An outlet without a meter has no draw to give: the relay's state is all there is.
        let unmetered = OutletReading { metered: false, ..silent };
        assert_eq!(proves_off(&unmetered, 5.0), Ok(()));
    }

    #[test]
    fn only_a_settled_off_within_the_floor_proves_off() {
        assert_eq!(proves_off(&settled(OutletState::Off, false, None), 5.0), Ok(()));
        assert_eq!(proves_off(&settled(OutletState::Off, false, Some(5.0)), 5.0), Ok(()));
        assert_eq!(proves_off(&settled(OutletState::Off, false, Some(0.0)), 5.0), Ok(()));
        assert_eq!(proves_off(&settled(OutletState::On, false, None), 5.0), Err(NotOff::Reads(OutletState::On)));
        let unknown = OutletState::unknown("Standby");
        assert_eq!(proves_off(&settled(unknown.clone(), false, None), 5.0), Err(NotOff::Reads(unknown)));
        assert_eq!(proves_off(&settled(OutletState::Off, true, None), 5.0), Err(NotOff::CommandPending));
        assert_eq!(
            proves_off(&settled(OutletState::Off, false, Some(230.5)), 5.0),
            Err(NotOff::Drawing { watts: 230.5, floor: 5.0 })
        );
    }

    #[test]
    fn a_draw_or_a_floor_that_is_not_a_number_proves_nothing() {
        assert!(proves_off(&settled(OutletState::Off, false, Some(f64::NAN)), 5.0).is_err());
        assert!(proves_off(&settled(OutletState::Off, false, Some(1.0)), f64::NAN).is_err());
        assert!(proves_off(&settled(OutletState::Off, false, Some(f64::INFINITY)), 5.0).is_err());
        // Without a meter there is no draw to compare: the relay's state is all there is.
        assert_eq!(proves_off(&settled(OutletState::Off, false, None), f64::NAN), Ok(()));
    }

    fn outlet_state() -> impl Strategy<Value = OutletState> {
        prop_oneof![Just(OutletState::On), Just(OutletState::Off), "[ -~]{0,12}".prop_map(|t| OutletState::unknown(&t))]
    }

    fn number() -> impl Strategy<Value = f64> {
        prop_oneof![any::<f64>(), -10.0..1000.0f64, Just(f64::NAN), Just(0.0)]
    }

    proptest! {
        #[test]
        fn proves_off_accepts_exactly_a_settled_off_within_the_floor(
            state in outlet_state(), pending in any::<bool>(), watts in proptest::option::of(number()), floor in number(),
            metered in any::<bool>()
        ) {
            let reading = OutletReading { metered: metered || watts.is_some(), ..settled(state.clone(), pending, watts) };
            let expected = state == OutletState::Off
                && !pending
                && watts.map_or(!reading.metered, |w| w <= floor);
            prop_assert_eq!(proves_off(&reading, floor).is_ok(), expected);
        }
    }
}
