//! One schedule from one seed: how the node died, how its BMC answers, what the apiserver and the
//! rest of the world do meanwhile, and which faults are on (swarm testing: each seed turns a random
//! subset on, so rare combinations come up in some seeds at full strength).

use super::{
    exec::{MS, Micros, SECOND},
    process::Faults,
};
use crate::api::{CoronerRemediationSpec, Duration, FenceAction, Phase, RemediationStrategy, Retry};

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
}

/// When an event happens: at a time, or a while after the first remediation first enters a phase
/// (an adversary that strikes where it hurts).
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
    /// Safety only.
    Any,
}

#[derive(Clone, Debug)]
pub struct Scenario {
    pub seed: u64,
    pub spec: CoronerRemediationSpec,
    pub death: Death,
    pub bmc: BmcKind,
    pub faults: Faults,
    pub events: Vec<(When, Event)>,
    /// NHC stamps `nhc-timed-out` this long after creating the remediation.
    pub nhc_timeout: Option<Micros>,
    pub expect: Expect,
    /// How long the schedule runs.
    pub horizon: Micros,
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
        let expect = Self::expectation(&spec, death, bmc, &events, nhc_timeout, &faults);
        Self { seed, spec, death, bmc, faults, events, nhc_timeout, expect, horizon: 600 * SECOND + 500 * MS }
    }

    /// The liveness oracle: which outcome the answers allow, when the world does nothing that
    /// changes it (a person's delete, a power-on, a partition healing, NHC's timeout, denied writes
    /// and dying BMCs make it safety-only).
    fn expectation(
        spec: &CoronerRemediationSpec,
        death: Death,
        bmc: BmcKind,
        events: &[(When, Event)],
        nhc_timeout: Option<Micros>,
        faults: &Faults,
    ) -> Expect {
        let disturbed = nhc_timeout.is_some()
            || events.iter().any(|(_, e)| {
                !matches!(
                    e,
                    Event::RotateCredentials | Event::LeaderMove | Event::CrashLeader | Event::CrashAfterNextNodeWrite
                )
            });
        // Crashes only restart the clock (the bound runs from the last leader's start). A slow
        // apiserver ages every proof before its release can be written: safety holds, the budget may
        // not, so such seeds are judged on safety only.
        let calm = faults.slow == 0.0 && faults.crash_before + faults.crash_after < 0.002;
        // A leader's death costs up to the leader Lease (15 s) before another acts, and a phase's
        // deadline also runs on the wall clock (twice powerOffTimeout since the phase began): with a
        // powerOffTimeout under the Lease, a death a few seconds into the only attempt ends it. Such
        // seeds are judged on safety only.
        let may_die = faults.crash_before + faults.crash_after > 0.0
            || events.iter().any(|(_, e)| matches!(e, Event::CrashLeader | Event::CrashAfterNextNodeWrite));
        let failover_can_end_the_attempt =
            spec.retry.count == 1 && spec.power_off_timeout.get() < std::time::Duration::from_secs(15);
        if disturbed || !calm || (may_die && failover_can_end_the_attempt) {
            return Expect::Any;
        }
        match (death, bmc) {
            (Death::LeaseOnly, _) => Expect::Any,
            (_, BmcKind::LiesOff) => Expect::Any,
            (Death::PowerLossWithBmc, _) | (_, BmcKind::Mismatch | BmcKind::Clone) => Expect::Refuse,
            (_, BmcKind::Slow | BmcKind::Flaky | BmcKind::Unknowns) => Expect::Any,
            _ => Expect::Release,
        }
    }
}

fn pick<'a, T>(rng: &mut fastrand::Rng, items: &'a [T]) -> &'a T {
    &items[rng.usize(..items.len())]
}
