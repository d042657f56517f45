//! One schedule from one seed: how the node died, how its BMC answers, what the apiserver and the
//! rest of the world do meanwhile, and which faults are on (swarm testing: each seed turns a random
//! subset on, so rare combinations come up in some seeds at full strength).

use super::{
    exec::{MS, Micros, SECOND},
    process::Faults,
};
use crate::{
    api::{CoronerRemediationSpec, Duration, FenceAction, GuardPolicy, Phase, RemediationStrategy, Retry},
    ipmi::GuidLayout,
};

/// How the node stopped reporting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Death {
    /// The machine lost power; its BMC still answers.
    PowerLoss,
    /// The machine lost power and its BMC with it: nothing answers.
    PowerLossWithBmc,
    /// The machine is on but its kernel hangs: no kubelet.
    KernelHang,
    /// The machine runs, its kubelet too, but the network to the apiserver is cut.
    Partition,
    /// Only the kubelet's Lease renewals get through: something on the node is alive.
    LeaseOnly,
}

/// What the binding leads to and how that BMC behaves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BmcKind {
    Honest,
    /// Reports the node's UUID with its first three fields byte-swapped.
    ByteSwapped,
    /// Slow: answers take up to the request timeout and beyond.
    Slow,
    /// Some answers are 5xx or time out.
    Flaky,
    /// `PoweringOff` between the reset and `Off`.
    Transitional,
    /// Sometimes an unknown power value.
    Unknowns,
    /// Several systems; the node's is not the first.
    MultiSystem,
    /// Another system of the same BMC reports the node's UUID too (a cloned UUID), and comes first.
    Clone,
    /// The binding leads to another node's BMC, which that node's own binding names too (a mistyped
    /// copy): the identity read refuses the target's binding (`BindingConflict`), not the other's.
    Mismatch,
    /// Accepts every reset, does nothing, and always reports `Off`: a lie no reading can catch. The
    /// checks after the release must (a Lease renewed, the node back with its old bootID).
    LiesOff,
}

/// Something the world does at a time.
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    /// The node's network comes back (its kubelet reports again, with the bootID it has).
    Heal,
    /// Something switches the node's machine on (a power-restore policy, a person) for a while.
    PowerGlitch { on_for: Micros },
    /// Something switches the node's machine on and leaves it on.
    PowerOn,
    /// Node writes are refused (an admission webhook, a policy) for a while.
    DenyNodeWrites { for_: Micros },
    /// A person adds an out-of-service taint of their own.
    ForeignOutOfService,
    /// A person removes the out-of-service taints by hand (leaving the annotations).
    RemoveOutOfServiceByHand,
    /// A person (or NHC) deletes the remediation.
    DeleteRemediation,
    /// NHC creates a second remediation for the same node (another template, a re-creation).
    SecondRemediation,
    /// The BMC loses power.
    BmcDown,
    /// The credentials are rotated: the Secret and the BMC change together.
    RotateCredentials,
    /// The BMC's password is changed first, and its Secret follows `lag` later (a secret-sync that
    /// trails the rotation): the BMC rejects the credentials meanwhile (P7).
    RotateBmcFirst { lag: Micros },
    /// The Secret catches up with the BMC's password ([`Event::RotateBmcFirst`]).
    SecretFollows,
    /// The leader's renewals stall; the standby takes over.
    LeaderMove,
    /// The leader process dies.
    CrashLeader,
    /// The leader's wall clock steps.
    ClockStep { by: Micros },
    /// A person labels the node `remediation.medik8s.io/exclude-from-remediation`.
    ExcludeNode,
    /// The Node object is deleted and registers again (a new UID).
    ReplaceNode,
    /// Every API call is slow for a while (an overloaded apiserver; a paused process).
    SlowApi { for_: Micros },
    /// The leader dies right after its next Node write takes effect, before it sees the answer.
    CrashAfterNextNodeWrite,
    /// A person approves the released machine's return: `coroner.dev/power-on-approved` on the Node.
    ApprovePowerOn,
    /// A person attests that the node is dead (true or not: people err); `acknowledge`: accepting
    /// every piece of evidence the preflight (`coroner attest`) offers to acknowledge, and coming
    /// back when it says the attestation must be created (`returning`: that second time).
    Attest { acknowledge: bool, returning: bool },
    /// A BMC that lied `Off` starts telling the truth.
    BmcTellsTruth,
    /// Someone edits the node's binding: its endpoint, its credentials Secret, or its systemId.
    EditBinding(BindingEdit),
    /// Someone deletes the node's binding and creates it again, identical (a new object, unverified).
    RecreateBinding,
    /// A person switches back on the outlets coroner switched off (taking it for a tripped breaker):
    /// the supply has power again, its BMC boots, and the machine starts (power-restore policy).
    OutletsOnByHand,
    /// The credentials Secret changes: its metadata only (a secret-sync operator), or its value
    /// together with the BMC's account. The binding verifier's status write follows either.
    SecretChange { value: bool },
    /// The CA bundle ConfigMap a Redfish binding names changes: its metadata only, or its content
    /// (the TLS material: P1 ends the attempt, the next one proves identity through it). The binding
    /// verifier's status write follows either.
    CaBundleChange { content: bool },
    /// An admission webhook or a person rewrites the out-of-service taint coroner added (its value).
    RewriteTaint,
    /// The Node object is deleted (a decommission): NHC deletes the orphaned remediation.
    DeleteNode,
    /// NodeHealthCheck stamps `nhc-timed-out` on the node's remediations.
    NhcTimesOut,
    /// The node's dead BMC answers again after its fence failed (its supply restored, its network
    /// mended), while an attestation may be pending (A4); with `machine_on`, its machine starts
    /// with it (a power-restore policy).
    BmcBack { machine_on: bool },
}

/// What an edit of a binding changes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BindingEdit {
    /// The endpoint now leads to another BMC (the other node's: the same system path).
    Endpoint,
    /// The endpoint leads nowhere (a typo).
    DeadEndpoint,
    /// The binding names another credentials Secret, with the same value.
    CredentialsSecret,
    /// The binding pins the system its BMC serves the node on.
    SystemId,
}

/// When an event happens: at a time, or a while after a remediation of the target node first enters
/// a phase (an adversary that strikes where it hurts; another node's fence triggers nothing).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum When {
    At(Micros),
    After(Phase, Micros),
}

/// What the run must end in, if the world lets it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expect {
    /// The machine is off and the answers allow a proof: released within the bound.
    Release,
    /// No proof is possible: `Succeeded=False` within the bound, nothing released.
    Refuse,
    /// Safety only, under the rules in `Scenario::excuses`.
    Any,
}

/// The node's machine on a rack PDU, and its binding's level 2 naming the outlets that feed it
/// (`mappingProof: OperatorStatement`, a right statement: the world never feeds it from others).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Levels {
    /// How many outlets feed the machine (two supplies: both).
    pub outlets: u32,
    /// The first outlet's relay is welded: it reads Off and keeps feeding (metered: it shows the draw).
    pub welded: bool,
    /// Chance an outlet request gets no answer.
    pub timeout_rate: f64,
    /// The BMC is dead from the start, whatever the machine does (its own failure): the level is
    /// what can fence a machine that still runs.
    pub bmc_dead: bool,
    /// The operator's statement is wrong: the level names the outlets of another machine (the
    /// spare's), while the node's machine runs on outlets the binding does not name (L5's risk).
    pub wrong_mapping: bool,
    /// Outlet 1 feeds the other node's machine too (a twin chassis), and that node's binding names it
    /// at its own level 2: declared shared by both bindings (`true`), or by neither (`false`, the
    /// conflict). The other node is never fenced, so L6 switches it for neither (never drawn with a
    /// wrong mapping).
    pub shared: Option<bool>,
    /// With outlet 1 declared shared: the other node dies too (partitioned, its machine running) and
    /// NodeHealthCheck remediates it, so L6 may switch the outlet while that fence runs or its release
    /// stands, and the guard's L6 check is reached.
    pub other_fenced: bool,
    /// The first outlet's meter gives no reading once it is switched off (L4): its `PowerWatts` sensor
    /// still reported (`Some(true)`), or dropped (`Some(false)`). Drawn with a welded relay only, where
    /// taking the silence for an idle outlet releases a running machine.
    pub silent_meter: Option<bool>,
}

#[derive(Clone, Debug)]
pub struct Scenario {
    pub seed: u64,
    pub spec: CoronerRemediationSpec,
    pub death: Death,
    pub bmc: BmcKind,
    /// The node's BMC (and the other node's) speaks IPMI, its firmware holding the System GUID in
    /// this layout; Redfish when `None`.
    pub ipmi: Option<GuidLayout>,
    pub faults: Faults,
    pub events: Vec<(When, Event)>,
    /// NHC stamps `nhc-timed-out` this long after creating the remediation.
    pub nhc_timeout: Option<Micros>,
    pub expect: Expect,
    /// The rules that excuse the seed from `expect` (judged on safety only while any applies).
    pub excuses: Vec<Excuse>,
    /// How far the reflector stores trail the truth (issue 23): none in a third of the seeds, a
    /// watch's usual few milliseconds in a third, up to 3 s (a loaded API server) in the rest.
    pub store_lag: Micros,
    /// How long the schedule runs.
    pub horizon: Micros,
    /// The node's machine fed by PDU outlets its binding names as level 2 (issue 21), in a quarter of
    /// the seeds.
    pub levels: Option<Levels>,
    /// How far the target's kubelet clock runs behind (A1: life is dated by coroner's first sight).
    pub kubelet_behind: Micros,
}

fn secs(rng: &mut fastrand::Rng, low: u64, high: u64) -> Duration {
    Duration::from_secs(rng.u64(low..=high))
}

impl Scenario {
    pub fn generate(seed: u64) -> Self {
        let mut rng = fastrand::Rng::with_seed(seed);
        let spec = CoronerRemediationSpec {
            action: if rng.bool() { FenceAction::Off } else { FenceAction::Reboot },
            remediation_strategy: if rng.u8(..4) == 0 {
                RemediationStrategy::ResourceDeletion
            } else {
                RemediationStrategy::OutOfServiceTaint
            },
            power_off_timeout: secs(&mut rng, 8, 20),
            retry: Retry { count: rng.u32(1..=3), interval: secs(&mut rng, 1, 5) },
            lease_freshness: secs(&mut rng, 25, 45),
            release_timeout: secs(&mut rng, 5, 20),
            ..CoronerRemediationSpec::default()
        };
        let death = *pick(
            &mut rng,
            &[
                Death::PowerLoss,
                Death::PowerLoss,
                Death::PowerLossWithBmc,
                Death::KernelHang,
                Death::Partition,
                Death::Partition,
                Death::LeaseOnly,
            ],
        );
        let bmc = *pick(
            &mut rng,
            &[
                BmcKind::Honest,
                BmcKind::Honest,
                BmcKind::Honest,
                BmcKind::ByteSwapped,
                BmcKind::Slow,
                BmcKind::Flaky,
                BmcKind::Transitional,
                BmcKind::Unknowns,
                BmcKind::MultiSystem,
                BmcKind::Clone,
                BmcKind::Mismatch,
            ],
        );
        // Swarm: each fault kind is on in about half the seeds, at a rate drawn for the seed.
        let mut rate = |max: f64| if rng.bool() { rng.f64() * max } else { 0.0 };
        let faults = Faults {
            crash_before: rate(0.01),
            crash_after: rate(0.01),
            api_error: rate(0.05),
            conflict: rate(0.05),
            lost_answer: rate(0.02),
            slow: rate(0.03),
            slow_latency: 0,
        };
        let faults = Faults { slow_latency: rng.i64(2 * SECOND..15 * SECOND), ..faults };
        let mut events = Vec::new();
        let glitch = spec.poll_interval.get().as_micros() as i64 + 12 * SECOND;
        // Half the events strike at a time, half a moment after the fence enters a phase.
        let mut maybe = |rng: &mut fastrand::Rng, p: f64, event: Event, (low, high): (i64, i64), phases: &[Phase]| {
            if rng.f64() < p {
                let when = if phases.is_empty() || rng.bool() {
                    When::At(rng.i64(low * SECOND..high * SECOND))
                } else {
                    When::After(*pick(rng, phases), rng.i64(0..3 * SECOND))
                };
                events.push((when, event));
            }
        };
        use Phase::*;
        if death == Death::Partition {
            maybe(&mut rng, 0.4, Event::Heal, (1, 60), &[VerifyingIdentity, PoweringOff]);
        }
        let on_for = glitch + rng.i64(0..10 * SECOND);
        maybe(&mut rng, 0.2, Event::PowerGlitch { on_for }, (1, 60), &[ConfirmingOff, Releasing]);
        maybe(&mut rng, 0.1, Event::PowerOn, (20, 120), &[Releasing, WaitingForRelease, Done]);
        let for_ = rng.i64(10 * SECOND..60 * SECOND);
        maybe(&mut rng, 0.15, Event::DenyNodeWrites { for_ }, (2, 40), &[ConfirmingOff, Releasing]);
        let foreign = rng.f64() < 0.1;
        if foreign {
            maybe(&mut rng, 1.0, Event::ForeignOutOfService, (5, 90), &[WaitingForRelease, Releasing]);
        }
        maybe(&mut rng, 0.1, Event::RemoveOutOfServiceByHand, (20, 90), &[WaitingForRelease, Done]);
        maybe(&mut rng, 0.08, Event::DeleteRemediation, (5, 90), &[ConfirmingOff, Releasing, Done]);
        maybe(&mut rng, 0.1, Event::SecondRemediation, (1, 60), &[VerifyingIdentity, ConfirmingOff, WaitingForNode]);
        maybe(&mut rng, 0.08, Event::BmcDown, (5, 90), &[WaitingForRelease, PoweringOn]);
        maybe(&mut rng, 0.15, Event::RotateCredentials, (1, 40), &[VerifyingIdentity, PoweringOff, ConfirmingOff]);
        maybe(&mut rng, 0.2, Event::LeaderMove, (1, 60), &[PoweringOff, ConfirmingOff, Releasing]);
        maybe(&mut rng, 0.15, Event::CrashLeader, (1, 60), &[ConfirmingOff, Releasing, WaitingForRelease]);
        let by = if rng.bool() { 3600 * SECOND } else { -30 * SECOND };
        maybe(&mut rng, 0.1, Event::ClockStep { by }, (1, 60), &[Pending, PoweringOff, ConfirmingOff]);
        if foreign && rng.bool() {
            // A person's taint with a stale owner annotation of coroner's: the classic mix-up.
            maybe(&mut rng, 1.0, Event::RemoveOutOfServiceByHand, (15, 40), &[]);
            maybe(&mut rng, 1.0, Event::DeleteRemediation, (90, 120), &[]);
        }
        maybe(&mut rng, 0.05, Event::ExcludeNode, (1, 60), &[VerifyingIdentity, PoweringOff, ConfirmingOff]);
        maybe(&mut rng, 0.05, Event::ReplaceNode, (1, 60), &[VerifyingIdentity, PoweringOff]);
        maybe(&mut rng, 0.08, Event::CrashAfterNextNodeWrite, (1, 60), &[Releasing]);
        // The proof goes stale while something holds the release up, and the machine comes back.
        if rng.f64() < 0.12 {
            let hold = if rng.bool() {
                Event::DenyNodeWrites { for_: rng.i64(20 * SECOND..60 * SECOND) }
            } else {
                Event::SlowApi { for_: rng.i64(20 * SECOND..40 * SECOND) }
            };
            let phase = if rng.bool() { ConfirmingOff } else { Releasing };
            events.push((When::After(phase, rng.i64(0..SECOND)), hold));
            let on_for = glitch + rng.i64(0..5 * SECOND);
            events.push((When::After(phase, rng.i64(SECOND..4 * SECOND)), Event::PowerGlitch { on_for }));
        }
        let nhc_timeout = (rng.u8(..3) == 0).then(|| rng.i64(30 * SECOND..180 * SECOND));
        // Drawn last, so the scenarios drawn before keep their seeds: the guard after the release.
        let mut bmc = bmc;
        if rng.f64() < 0.06 {
            bmc = BmcKind::LiesOff;
        }
        if rng.f64() < 0.15 {
            let phase = if rng.bool() { Phase::Done } else { Phase::WaitingForRelease };
            events.push((When::After(phase, rng.i64(SECOND..8 * SECOND)), Event::PowerOn));
            if rng.bool() {
                events.push((When::After(phase, rng.i64(0..SECOND)), Event::ApprovePowerOn));
            }
        }
        // The third wave's draws, from a stream of their own so the draws above keep their seeds.
        let mut more = fastrand::Rng::with_seed(seed ^ 0x16_0016);
        let mut spec = spec;
        Self::draw_timing(&mut more, &mut spec);
        spec.guard = if more.u8(..4) == 0 { GuardPolicy::Alert } else { GuardPolicy::Enforce };
        spec.remediate_ready_false = more.u8(..8) == 0;
        let mut strike = |rng: &mut fastrand::Rng, p: f64, event: Event, (low, high): (i64, i64), phases: &[Phase]| {
            if rng.f64() < p {
                let when = if phases.is_empty() || rng.bool() {
                    When::At(rng.i64(low * SECOND..high * SECOND))
                } else {
                    When::After(*pick(rng, phases), rng.i64(0..3 * SECOND))
                };
                events.push((when, event));
            }
        };
        let all = [VerifyingIdentity, PoweringOff, ConfirmingOff, Releasing, WaitingForRelease, PoweringOn, Done];
        let edit = *pick(
            &mut more,
            &[BindingEdit::Endpoint, BindingEdit::DeadEndpoint, BindingEdit::CredentialsSecret, BindingEdit::SystemId],
        );
        strike(&mut more, 0.1, Event::EditBinding(edit), (1, 90), &all);
        strike(&mut more, 0.1, Event::SecretChange { value: false }, (1, 60), &all);
        strike(&mut more, 0.05, Event::SecretChange { value: true }, (1, 60), &all);
        let glitch = more.i64(200 * MS..8 * SECOND);
        strike(&mut more, 0.08, Event::PowerGlitch { on_for: glitch }, (1, 90), &[ConfirmingOff, Releasing, Done]);
        strike(&mut more, 0.05, Event::RewriteTaint, (20, 120), &[WaitingForRelease, Done]);
        let gone = if more.bool() { Event::DeleteNode } else { Event::ReplaceNode };
        strike(&mut more, 0.04, gone, (30, 200), &[WaitingForRelease, Done]);
        strike(&mut more, 0.08, Event::NhcTimesOut, (1, 200), &all);
        strike(
            &mut more,
            0.12,
            Event::Attest { acknowledge: false, returning: false },
            (5, 300),
            &[ConfirmingOff, Failed, Done],
        );
        if bmc == BmcKind::LiesOff && more.bool() {
            strike(&mut more, 1.0, Event::BmcTellsTruth, (30, 200), &[Done, WaitingForRelease]);
        }
        // An approval left on the Node from before the fence.
        let approved_before = more.f64() < 0.04;
        // IPMI: one chassis per BMC, whose power is a bit (no transitional or unknown state); the
        // GUID's layouts are its byte orders (a GUID that spells the node in none is refused).
        let single =
            matches!(bmc, BmcKind::Honest | BmcKind::Slow | BmcKind::Flaky | BmcKind::LiesOff | BmcKind::Mismatch);
        let ipmi = (single && more.u8(..6) == 0).then(|| *pick(&mut more, &GuidLayout::ALL));
        if ipmi.is_none() {
            strike(&mut more, 0.06, Event::CaBundleChange { content: false }, (1, 60), &all);
            strike(&mut more, 0.04, Event::CaBundleChange { content: true }, (1, 60), &all);
        }
        if approved_before {
            events.push((When::At(0), Event::ApprovePowerOn));
        }
        let (expect, excuses) = Self::expectation(death, bmc, &events, &faults);
        let horizon = 600 * SECOND + 500 * MS;
        // The fourth wave's draws, from a stream of their own so every draw above keeps its seed.
        let mut fourth = fastrand::Rng::with_seed(seed ^ 0x23_0023);
        let store_lag = match fourth.u8(..3) {
            0 => 0,
            1 => fourth.i64(0..20 * MS),
            _ => fourth.i64(0..3 * SECOND),
        };
        // Issue 21's draws, from a stream of their own too.
        let mut fifth = fastrand::Rng::with_seed(seed ^ 0x21_0021);
        let levels = (fifth.u8(..4) == 0).then(|| Levels {
            outlets: fifth.u32(1..=2),
            welded: fifth.u8(..6) == 0,
            timeout_rate: if fifth.bool() { fifth.f64() * 0.1 } else { 0.0 },
            bmc_dead: fifth.u8(..3) == 0,
            wrong_mapping: fifth.u8(..6) == 0,
            shared: None,
            other_fenced: false,
            silent_meter: None,
        });
        // Issue 21's L6: in one level seed in four, outlet 1 is the other node's too (its own stream).
        let mut tenth = fastrand::Rng::with_seed(seed ^ 0x21_0221);
        let levels =
            levels.map(|l| Levels { shared: (!l.wrong_mapping && tenth.u8(..4) == 0).then(|| tenth.bool()), ..l });
        // In half of those declared shared, the other node dies too and is fenced (its own stream).
        let mut eleventh = fastrand::Rng::with_seed(seed ^ 0x21_0321);
        // Its BMC dead so that the level is what fences (the guard's L6 check needs a level's release).
        // With action Off: a Reboot is refused at admission for the level (L3).
        let off = spec.action == FenceAction::Off;
        let levels = levels.map(|l| match l.shared == Some(true) && off && eleventh.bool() {
            true => Levels { other_fenced: true, bmc_dead: true, ..l },
            false => l,
        });
        // Issue 46's L4: in half the seeds with a welded relay, its meter falls silent once the outlet
        // is switched off (its own stream).
        let mut twelfth = fastrand::Rng::with_seed(seed ^ 0x46_0046);
        let levels = levels.map(|l| Levels { silent_meter: (l.welded && twelfth.bool()).then(|| twelfth.bool()), ..l });
        // Issue 46's P7: in one seed in ten, the BMC's password changes a moment after the fence starts
        // confirming the power-off, and its Secret follows 1-8 s later (its own stream).
        if twelfth.u8(..10) == 0 {
            let lag = twelfth.i64(SECOND..8 * SECOND);
            events.push((When::After(Phase::ConfirmingOff, twelfth.i64(0..SECOND)), Event::RotateBmcFirst { lag }));
        }
        // Issue 18's: half the attesters acknowledge what the preflight offers (its own stream).
        let mut sixth = fastrand::Rng::with_seed(seed ^ 0x18_0018);
        for (_, event) in &mut events {
            if let Event::Attest { acknowledge, .. } = event {
                *acknowledge = sixth.bool();
            }
        }
        let mut excuses = excuses;
        // A binding re-created identically, mostly before the fence reads it (A2's kept verification);
        // a new object mid-fence may end an attempt as an edit does.
        let mut seventh = fastrand::Rng::with_seed(seed ^ 0x18_0118);
        if seventh.u8(..16) == 0 {
            events.push((When::At(seventh.i64(SECOND..40 * SECOND)), Event::RecreateBinding));
            excuses.push(Excuse::BindingEdited);
        }
        if levels.is_some_and(|l| l.wrong_mapping) {
            excuses.push(Excuse::WrongStatement);
        }
        if levels.is_some_and(|l| l.other_fenced) {
            excuses.push(Excuse::SharedWithAFencedNode);
        }
        // Issue 21's: a person switches the outlets coroner switched off back on, mid-fence or after
        // the release (the guard's, L9), in one level seed in four (a stream of its own).
        let mut eighth = fastrand::Rng::with_seed(seed ^ 0x21_0121);
        if let Some(level) = levels
            && eighth.u8(..4) == 0
        {
            // Mid-fence only where the level fences (its BMC silent); after the release always.
            let fences = level.bmc_dead || death == Death::PowerLossWithBmc;
            let phase = if fences && eighth.bool() { Phase::PoweringOffOutlets } else { Phase::Done };
            let when = When::After(phase, eighth.i64(0..20 * SECOND));
            if phase == Phase::PoweringOffOutlets {
                excuses.push(Excuse::SwitchedOnMidFence);
            }
            events.push((when, Event::OutletsOnByHand));
        }
        // And in half of those, a person switches the outlets on again after the release: the
        // guard's Off to the shared outlet (L9), which L6 allows only while the other node's fence
        // runs or its release stands.
        if levels.is_some_and(|l| l.other_fenced) && eleventh.bool() {
            events.push((When::After(Phase::Done, eleventh.i64(0..20 * SECOND)), Event::OutletsOnByHand));
        }
        // Issue 18's A4: in half the seeds with an attestation whose node's BMC is dead, the BMC
        // answers again after the fence failed, and a person who does not know attests after it
        // (a stream of its own).
        let mut ninth = fastrand::Rng::with_seed(seed ^ 0x18_0218);
        let attested = events.iter().any(|(_, e)| matches!(e, Event::Attest { .. }));
        let bmc_dead = death == Death::PowerLossWithBmc
            || levels.is_some_and(|l| l.bmc_dead)
            || events.iter().any(|(_, e)| matches!(e, Event::BmcDown));
        if attested && bmc_dead && ninth.bool() {
            let back = ninth.i64(0..30 * SECOND);
            events.push((When::After(Phase::Failed, back), Event::BmcBack { machine_on: ninth.bool() }));
            let attest = Event::Attest { acknowledge: ninth.bool(), returning: false };
            events.push((When::After(Phase::Failed, back + ninth.i64(0..20 * SECOND)), attest));
            excuses.push(Excuse::BmcBack);
        }
        let expect = if excuses.is_empty() { expect } else { Expect::Any };
        let expect = match (levels, expect) {
            (Some(_), Expect::Any) | (None, _) => expect,
            // L3: a Reboot whose node's binding has levels is refused at admission.
            (Some(_), _) if spec.action == FenceAction::Reboot => Expect::Refuse,
            // The BMC is silent: the outlets switch the machine off and prove it (L2), unless the
            // binding leads to another node's BMC (its answers show the mapping wrong), or a welded
            // relay keeps a running machine fed (its meter shows the draw: never Off).
            (Some(levels), _) if (death == Death::PowerLossWithBmc || levels.bmc_dead) && bmc != BmcKind::Mismatch => {
                let runs = matches!(death, Death::KernelHang | Death::Partition | Death::LeaseOnly);
                // L6: an outlet the other node (live, never fenced) shares is switched for no one.
                if (runs && levels.welded) || levels.shared.is_some() { Expect::Refuse } else { Expect::Release }
            }
            (Some(_), expect) => expect,
        };
        // Issue 46's A1: in one seed in five the target's kubelet clock runs up to three minutes behind
        // (its own stream).
        let mut thirteenth = fastrand::Rng::with_seed(seed ^ 0x46_0146);
        let kubelet_behind = if thirteenth.u8(..5) == 0 { thirteenth.i64(SECOND..180 * SECOND) } else { 0 };
        Self {
            seed,
            spec,
            death,
            bmc,
            ipmi,
            faults,
            events,
            nhc_timeout,
            expect,
            excuses,
            store_lag,
            horizon,
            levels,
            kubelet_behind,
        }
    }

    /// How long after the last leader started the fence must have ended: the Lease's freshness wait,
    /// then every attempt with its pauses, and 40 s for the rest.
    pub fn liveness_bound(&self) -> Micros {
        let micros = |d: Duration| d.get().as_micros() as Micros;
        let spec = &self.spec;
        let retries = i64::from(spec.retry.count);
        let attempts = retries * (micros(spec.power_off_timeout) + 2 * micros(spec.retry.interval));
        // A level has attempts of its own, and asks the BMC once after its proof.
        let level = if self.levels.is_some() { attempts + 20 * SECOND } else { 0 };
        micros(spec.lease_freshness) + attempts + level + 40 * SECOND
    }

    /// How long a crash loop may keep a power-action slot (docs/safety.md, Crash safety): no process
    /// lives to see a deadline on its own clock, so each attempt ends on the wall clock at twice
    /// `powerOffTimeout`, once a leader lives long enough to write it (the 40 s of slack, per attempt).
    pub fn crash_loop_slot_bound(&self) -> Micros {
        let micros = |d: Duration| d.get().as_micros() as Micros;
        let spec = &self.spec;
        i64::from(spec.retry.count)
            * (2 * micros(spec.power_off_timeout) + 2 * micros(spec.retry.interval) + 40 * SECOND)
    }

    /// `settle` and `pollInterval`: the defaults in most seeds, settles of a minute and more (longer
    /// than a client's life) in a few, with a `powerOffTimeout` that can hold them.
    fn draw_timing(rng: &mut fastrand::Rng, spec: &mut CoronerRemediationSpec) {
        match rng.u8(..20) {
            0 => {
                spec.settle = secs(rng, 60, 90);
                spec.poll_interval = secs(rng, 1, 5);
            }
            1..=5 => {
                spec.settle = Duration::from_millis(rng.u64(500..6000));
                spec.poll_interval = Duration::from_millis(rng.u64(200..3000));
            }
            _ => {}
        }
        let least = spec.settle.get() + 2 * spec.poll_interval.get() + std::time::Duration::from_secs(8);
        if spec.power_off_timeout.get() < least {
            spec.power_off_timeout = Duration::from(least);
        }
    }

    /// The liveness oracle: which outcome the answers allow, and every named rule that excuses a seed
    /// from it ([`Excuse`]: each is a product rule of docs/safety.md, listed in docs/simulation.md).
    /// A seed with an excuse is judged on safety only; every other seed must end as `expect` says
    /// within the bound.
    fn expectation(death: Death, bmc: BmcKind, events: &[(When, Event)], faults: &Faults) -> (Expect, Vec<Excuse>) {
        // An event that strikes once the outcome is decided cannot change it.
        let decided = |when: &When| {
            matches!(
                when,
                When::After(
                    Phase::WaitingForRelease | Phase::PoweringOn | Phase::WaitingForNode | Phase::Done | Phase::Failed,
                    _
                )
            )
        };
        let mut excuses: Vec<Excuse> =
            events.iter().filter(|(when, _)| !decided(when)).filter_map(|(_, event)| Excuse::of(event)).collect();
        if faults.slow > 0.0 {
            excuses.push(Excuse::SlowApi);
        }
        match (death, bmc) {
            (Death::LeaseOnly, _) => excuses.push(Excuse::LeaseRenews),
            (_, BmcKind::LiesOff) => excuses.push(Excuse::LyingBmc),
            (_, BmcKind::Slow | BmcKind::Flaky | BmcKind::Unknowns) => excuses.push(Excuse::UnreliableBmc),
            _ => {}
        }
        excuses.sort();
        excuses.dedup();
        let expect = match (death, bmc) {
            (Death::PowerLossWithBmc, _) | (_, BmcKind::Mismatch | BmcKind::Clone) => Expect::Refuse,
            _ => Expect::Release,
        };
        (if excuses.is_empty() { expect } else { Expect::Any }, excuses)
    }
}

/// Why a seed is judged on safety only: each is a product rule under which the world may keep a
/// fence from the outcome its answers would otherwise allow (docs/simulation.md, "Liveness").
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Excuse {
    /// A node that reports again (its partition heals) is not fenced (`NodeNotUnreachable`), and NHC
    /// deletes the remediation once it is Ready.
    NodeReports,
    /// A machine switched on during the fence breaks the proof's run; it may outlast the attempts
    /// (`PowerOffNotConfirmed`).
    SwitchedOnMidFence,
    /// Node writes refused by a webhook or a policy until the release's deadline (`ReleaseNotWritten`).
    NodeWritesDenied,
    /// An out-of-service taint coroner does not own is not claimed, and blocks a `Reboot`'s `On`.
    ForeignTaint,
    /// A person's deletion of the remediation ends its fence; NHC's next one starts over.
    RemediationDeleted,
    /// A second remediation of the node waits for, or adopts, the first's fence.
    SecondRemediation,
    /// A BMC that dies before the proof leaves none (`BmcUnreachable`).
    BmcDies,
    /// A wall-clock step forward ends a phase's attempt (deadlines also run on the wall clock, so a
    /// crash loop cannot hold a slot).
    ClockStep,
    /// The exclusion label set mid-fence stops the fence (`NodeExcluded`).
    Excluded,
    /// A replaced or deleted Node is not the one admitted (`NodeReplaced`), or has no remediation.
    NodeReplaced,
    /// A slow apiserver may outlast a proof's freshness at every try (`ReleaseNotWritten`).
    SlowApi,
    /// Something on the node renews its Lease: evidence of life, never fenced.
    LeaseRenews,
    /// A BMC that lies `Off` is caught after the release, if at all.
    LyingBmc,
    /// A slow, flaky or unknown-answering BMC may exhaust the attempts.
    UnreliableBmc,
    /// A binding edited to another BMC, or to an endpoint that does not answer, proves nothing.
    BindingMisdirected,
    /// A new generation of the binding ends the attempt it interrupts (the next proves identity
    /// through it): with no attempt left, the fence fails.
    BindingEdited,
    /// A level whose mapping an operator stated wrongly switches another machine's outlets: it
    /// releases on them while this machine's BMC is silent, or ends `OutletMappingWrong` (L5's risk).
    WrongStatement,
    /// A BMC that answers again after its fence failed lets an attestation's look make the fence
    /// prove again (A4): it may release on that proof, or fail it, whatever the death allowed.
    BmcBack,
    /// A shared outlet whose other node is fenced too: the level may switch it once that fence is
    /// admitted, or refuse it (`OutletShared`) when it comes first, whichever the race gives.
    SharedWithAFencedNode,
}

impl Excuse {
    fn of(event: &Event) -> Option<Self> {
        Some(match event {
            Event::Heal => Self::NodeReports,
            Event::PowerGlitch { .. } | Event::PowerOn | Event::OutletsOnByHand => Self::SwitchedOnMidFence,
            Event::DenyNodeWrites { .. } => Self::NodeWritesDenied,
            Event::ForeignOutOfService => Self::ForeignTaint,
            Event::DeleteRemediation => Self::RemediationDeleted,
            Event::SecondRemediation => Self::SecondRemediation,
            Event::BmcDown => Self::BmcDies,
            Event::ClockStep { .. } => Self::ClockStep,
            Event::ExcludeNode => Self::Excluded,
            Event::ReplaceNode | Event::DeleteNode => Self::NodeReplaced,
            Event::SlowApi { .. } => Self::SlowApi,
            Event::EditBinding(BindingEdit::Endpoint | BindingEdit::DeadEndpoint) => Self::BindingMisdirected,
            Event::EditBinding(BindingEdit::CredentialsSecret | BindingEdit::SystemId)
            | Event::RecreateBinding
            | Event::CaBundleChange { content: true } => Self::BindingEdited,
            // What changes nothing a fence may decide on: credentials rotated with the BMC, a Secret's
            // metadata, failovers and crashes (a failover must not turn an off machine into
            // PowerOffNotConfirmed; a crash loop is judged from the record, `finish`), taints and
            // approvals after the release, attestations, a lying BMC turning honest.
            Event::RotateCredentials
            | Event::SecretChange { .. }
            | Event::CaBundleChange { content: false }
            | Event::LeaderMove
            | Event::CrashLeader
            | Event::CrashAfterNextNodeWrite
            | Event::RemoveOutOfServiceByHand
            | Event::RewriteTaint
            | Event::ApprovePowerOn
            | Event::Attest { .. }
            | Event::BmcTellsTruth
            // Judged from the world's record: NHC's stamp before the outcome excuses (`finish`).
            | Event::NhcTimesOut => return None,
            Event::BmcBack { .. } => Self::BmcBack,
            // Judged from the world's record: a rejection before the fence's accepted ForceOff is
            // final (P7), one after it is read through (`finish`).
            Event::RotateBmcFirst { .. } | Event::SecretFollows => return None,
        })
    }
}

fn pick<'a, T>(rng: &mut fastrand::Rng, items: &'a [T]) -> &'a T {
    &items[rng.usize(..items.len())]
}
