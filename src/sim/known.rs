//! Seeds that break an invariant, with the rule of docs/safety.md behind each (R, A, P: "Beyond the
//! proof"; earlier, the classes of issue 10). `sim_every_seed_keeps_the_invariants` runs them too: each must
//! still fail until its fix lands; then it moves to `REGRESSIONS`, where it must pass for ever.
//! Seeds of 0..1000 are the budget's own; the few above it cover classes the budget hits rarely.
//! Each names the shape of schedule it was kept for ([`Kept`], docs/simulation.md, "Seeds that keep
//! their meaning"): the budget asserts that a seed marked `Reaches` still reaches it.

use super::reach::Shape;

/// What a kept seed was kept for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kept {
    /// The seed's run reaches this shape, and the budget fails it once it does not.
    Reaches(Shape),
    /// Kept for this shape, which the loop's timings have already moved its world off: a regression
    /// must still pass (a known failure still fail), and the shape is carried by an entry that
    /// `Reaches` it.
    Moved(Shape),
}

pub const KNOWN_FAILURES: &[(u64, Kept, &str)] = &[
    (
        820935,
        Kept::Moved(Shape::GuardSawPowerOn),
        "R2 (soak 813000-832999, on 133d892), not yet classified: a released IPMI machine glitched on while Node writes were denied; the guard saw it (ReleasedMachinePoweredOn) but held its ForceOff (GuardHeld) as the binding's system id was edited 1 s before, and the glitch ended before a round through the edited binding; whether the oracle's sight of the device after a SystemId edit is stricter than R2 is the question. Fails the same without the binding verifier",
    ),
    (
        828138,
        Kept::Moved(Shape::GuardSawPowerOn),
        "R2 (soak 813000-832999, on 133d892): the class of 776567 under Enforce — a ResourceDeletion release began (a pod deleted), a status write's answer was lost, a 14.6 s glitch switched the released machine on, and the fence's own reading of it ended the fence Failed PowerOffNotConfirmed; that reading of life after a begun release reached no guard ForceOff within the bound. Fails the same without the binding verifier",
    ),
    (
        829641,
        Kept::Moved(Shape::GuardSawPowerOn),
        "R2 (soak 813000-832999, on 133d892): a 1.4 s glitch of a released IPMI machine began as the guard's round came due, and the leader died 77 ms later, before it recorded or acted on what it read; the next leader came after the glitch ended: the class of 725773 (a guard reading lost with its process). Passes without the binding verifier, which moved the schedule",
    ),
    (
        803732,
        Kept::Moved(Shape::GuardSawPowerOn),
        "R2 (soak 803000-812999, the first with the binding verifier in the world): a 17 s power glitch of the released machine began 1.6 s after the guard's round; 0.6 s later the leader died in a verification's call, and no leader existed until after the glitch ended, so no guard ever read the machine on: no ReleasedMachinePoweredOn. The class of 725773 and 741845 (a glitch hidden by a leader's death); passes without the verifier, whose call drew the crash",
    ),
    (
        808062,
        Kept::Moved(Shape::GuardSawPowerOn),
        "R2 (soak 803000-812999): the released machine glitched on for 17 s while Node writes were denied; the leader died in its guard round's call 6.5 s in, and the next leader's first round came after the glitch ended: no ForceOff. The class of 725773 (a guard reading lost with its process); passes without the verifier, which moved the schedule",
    ),
    (
        725773,
        Kept::Moved(Shape::GuardSawPowerOn),
        "R2 (soak 718000-727999, on the oracle of issue 46): the guard's reading found the released machine On and its process died 7 ms later, before it could record or act on it; the glitch was over before the next leader's first reading, so nothing sent a ForceOff. The class of 4768, which no longer reproduced; the restarted bound hid it. Closing it needs the guard to name itself reader before it reads, as the fence does (ReadingUnrecorded), and the next leader to act on an unrecorded guard reading",
    ),
    (
        732950,
        Kept::Moved(Shape::GuardSawPowerOn),
        "R2 (soak 728000-737999): the class of 725773: the guard's reading found the released machine On as its process died, and the glitch was over before the next leader's first reading",
    ),
    (
        741845,
        Kept::Moved(Shape::GuardSawPowerOn),
        "R2 (soak 738000-747999): the class of 725773: the guard's reading found the released machine On as its process died, and the glitch was over before the next leader's first reading",
    ),
    (
        767866,
        Kept::Reaches(Shape::CrashAfterReleaseWrite),
        "R1 (soak 758000-777999; fails the same on 3de12a8, before issue 47's moves): the new leader wrote the release (the out-of-service taint) and died; the deposed leader, not yet aware, wrote its ConfirmingOff over the new leader's Releasing, and the fence ended Failed PowerOffNotConfirmed saying nothing was released while the taint stayed on the Node (its Node writes denied by a webhook for 35 s): no guard watched the machine a power glitch switched on. A release on the Node that status does not record must be found by the fence that ends (fence::release_unrecorded) in this order of writes too",
    ),
    (
        776567,
        Kept::Reaches(Shape::PowerOnAfterDeletionRelease),
        "R2 under guard: Alert (soak 758000-777999; fails the same on 3de12a8): the fence of a ResourceDeletion release read the machine On after its deletion began (a power glitch) and ended Failed PowerOffNotConfirmed, recording the begun release; no ReleasedMachinePoweredOn was published, since the guard's first reading came after the glitch (MachineOff). The fence's own reading of life after a begun release must raise the guard's alarm at once",
    ),
    (
        791322,
        Kept::Reaches(Shape::MeterFellSilent),
        "Liveness (soak 788000-797999; fails the same on 3de12a8), not yet classified: a dead machine behind a level whose meter falls silent once off is never proven (L4); likely the scenario expecting a release that L4 forbids (the oracle stricter than the rule)",
    ),
    (
        791141,
        Kept::Reaches(Shape::LevelRelease),
        "LevelProof (soak 788000-797999; fails the same on 3de12a8), not yet classified: a release through level 2 while the machine, powered on by a scripted PowerOn with its BMC down, ran",
    ),
];

/// Seeds that failed once and pass since their fix: they must pass for ever. Most failed on the
/// port; those marked "(soak)" failed in a 10 000-seed soak of the fixed loop (seeds 1000..11000),
/// some on a coroner defect, some on an oracle that judged more strictly than the rule.
pub const REGRESSIONS: &[(u64, Kept, &str)] = &[
    (
        17,
        Kept::Reaches(Shape::ClonedUuidDiscovered),
        "class 3: discovery takes the first system whose UUID names the node (a cloned UUID on the same BMC)",
    ),
    (
        18,
        Kept::Moved(Shape::SecondFenceWhileFirstRuns),
        "class 12: a second remediation for a node being fenced sends its own reset",
    ),
    (
        33,
        Kept::Reaches(Shape::SecondFenceWhileFirstRuns),
        "class 12: a second remediation for a node being fenced sends its own reset",
    ),
    (
        51,
        Kept::Reaches(Shape::SecondFenceWhileFirstRuns),
        "class 12: a second remediation for a node being fenced sends its own reset",
    ),
    (
        70,
        Kept::Reaches(Shape::SecondFenceWhileFirstRuns),
        "class 12: a second remediation for a node being fenced sends its own reset",
    ),
    (
        75,
        Kept::Moved(Shape::ClonedUuidDiscovered),
        "class 3: discovery takes the first system whose UUID names the node (a cloned UUID on the same BMC)",
    ),
    (
        79,
        Kept::Reaches(Shape::ClonedUuidDiscovered),
        "class 3: discovery takes the first system whose UUID names the node (a cloned UUID on the same BMC)",
    ),
    (
        81,
        Kept::Reaches(Shape::ReleasedOnUnevenReadings),
        "class 2: gaps between readings are unbounded (a stalled process keeps its run)",
    ),
    (
        90,
        Kept::Reaches(Shape::ClonedUuidDiscovered),
        "class 3: discovery takes the first system whose UUID names the node (a cloned UUID on the same BMC)",
    ),
    (
        126,
        Kept::Reaches(Shape::SecondFenceWhileFirstRuns),
        "class 12: a second remediation for a node being fenced sends its own reset",
    ),
    (
        158,
        Kept::Reaches(Shape::ClonedUuidDiscovered),
        "class 3: discovery takes the first system whose UUID names the node (a cloned UUID on the same BMC)",
    ),
    (165, Kept::Reaches(Shape::ExcludedMidFence), "class 5: the exclusion label is checked only at admission"),
    (180, Kept::Reaches(Shape::ExcludedMidFence), "class 5: the exclusion label is checked only at admission"),
    (183, Kept::Reaches(Shape::CredentialsChangedMidFence), "class 10: a credentials change mid-fence fails the fence"),
    (
        190,
        Kept::Reaches(Shape::CrashAfterReleaseWrite),
        "class 8: a crash between the release write and its status write undoes the release",
    ),
    (
        191,
        Kept::Reaches(Shape::ClonedUuidDiscovered),
        "class 3: discovery takes the first system whose UUID names the node (a cloned UUID on the same BMC)",
    ),
    (
        192,
        Kept::Moved(Shape::SecondFenceWhileFirstRuns),
        "class 12: a second remediation for a node being fenced sends its own reset",
    ),
    (
        193,
        Kept::Moved(Shape::ForeignTaintAtPowerOn),
        "class 4: power-on ignores an out-of-service taint coroner does not own",
    ),
    (196, Kept::Reaches(Shape::NodeReplacedMidFence), "class 5: a replaced Node is checked only at admission"),
    (
        200,
        Kept::Moved(Shape::SecondFenceWhileFirstRuns),
        "class 12: a second remediation for a node being fenced sends its own reset",
    ),
    (
        203,
        Kept::Reaches(Shape::ForeignTaintAtPowerOn),
        "class 4: power-on ignores an out-of-service taint coroner does not own",
    ),
    (
        212,
        Kept::Reaches(Shape::ClonedUuidDiscovered),
        "class 3: discovery takes the first system whose UUID names the node (a cloned UUID on the same BMC)",
    ),
    (
        214,
        Kept::Reaches(Shape::SecondFenceWhileFirstRuns),
        "class 12: a second remediation for a node being fenced sends its own reset",
    ),
    (
        226,
        Kept::Reaches(Shape::SecondFenceWhileFirstRuns),
        "class 12: a second remediation for a node being fenced sends its own reset",
    ),
    (
        241,
        Kept::Reaches(Shape::ClonedUuidDiscovered),
        "class 3: discovery takes the first system whose UUID names the node (a cloned UUID on the same BMC)",
    ),
    (
        255,
        Kept::Moved(Shape::PowerOnAfterDeletionRelease),
        "R1: a ResourceDeletion release has no guard (wave 3, fixed)",
    ),
    (
        257,
        Kept::Reaches(Shape::ClonedUuidDiscovered),
        "class 3: discovery takes the first system whose UUID names the node (a cloned UUID on the same BMC)",
    ),
    (
        264,
        Kept::Reaches(Shape::ClonedUuidDiscovered),
        "class 3: discovery takes the first system whose UUID names the node (a cloned UUID on the same BMC)",
    ),
    (266, Kept::Reaches(Shape::CrashLoop), "class 9: a phase holding a power-action slot has no deadline"),
    (281, Kept::Moved(Shape::ReadyMidFence), "class 5: Ready=True is checked only at admission"),
    (
        282,
        Kept::Moved(Shape::CrashAfterReleaseWrite),
        "class 8: a crash between the release write and its status write undoes the release",
    ),
    (
        302,
        Kept::Reaches(Shape::SecondFenceWhileFirstRuns),
        "class 12: a second remediation for a node being fenced sends its own reset",
    ),
    (
        313,
        Kept::Reaches(Shape::ClonedUuidDiscovered),
        "class 3: discovery takes the first system whose UUID names the node (a cloned UUID on the same BMC)",
    ),
    (
        316,
        Kept::Moved(Shape::ForeignTaintOverRecord),
        "class 7: taint ownership by annotation alone claims someone else's taint",
    ),
    (
        324,
        Kept::Moved(Shape::ForeignTaintOverRecord),
        "class 7: taint ownership by annotation alone claims someone else's taint",
    ),
    (
        330,
        Kept::Reaches(Shape::ReleasedOnUnevenReadings),
        "class 2: gaps between readings are unbounded (a stalled process keeps its run)",
    ),
    (
        340,
        Kept::Reaches(Shape::ClonedUuidDiscovered),
        "class 3: discovery takes the first system whose UUID names the node (a cloned UUID on the same BMC)",
    ),
    (
        373,
        Kept::Reaches(Shape::ClonedUuidDiscovered),
        "class 3: discovery takes the first system whose UUID names the node (a cloned UUID on the same BMC)",
    ),
    (
        385,
        Kept::Reaches(Shape::ClonedUuidDiscovered),
        "class 3: discovery takes the first system whose UUID names the node (a cloned UUID on the same BMC)",
    ),
    (
        388,
        Kept::Moved(Shape::GuardSawPowerOn),
        "R1/R4: the guard follows coroner's taint on the Node, not the release (removed, rewritten, someone else's) (wave 3, fixed)",
    ),
    (
        392,
        Kept::Moved(Shape::AttestedAfterLife),
        "A1: an attestation is accepted although the fence's last reading of the machine was not Off (a regression of class 3 before its world changed) (wave 3, fixed)",
    ),
    (
        421,
        Kept::Moved(Shape::ProofReadAgain),
        "class 1: a proof never expires (the release write is retried without a fresh reading)",
    ),
    (
        422,
        Kept::Reaches(Shape::ForeignTaintOverRecord),
        "class 7: taint ownership by annotation alone claims someone else's taint",
    ),
    (
        423,
        Kept::Reaches(Shape::ClonedUuidDiscovered),
        "class 3: discovery takes the first system whose UUID names the node (a cloned UUID on the same BMC)",
    ),
    (
        431,
        Kept::Reaches(Shape::AttestedAfterLife),
        "A1: an attestation is accepted although the fence's last reading of the machine was not Off (wave 3, fixed)",
    ),
    (
        433,
        Kept::Reaches(Shape::ForeignTaintAtPowerOn),
        "class 4: power-on ignores an out-of-service taint coroner does not own",
    ),
    (
        435,
        Kept::Moved(Shape::ClonedUuidDiscovered),
        "class 3: discovery takes the first system whose UUID names the node (a cloned UUID on the same BMC)",
    ),
    (
        439,
        Kept::Moved(Shape::ClonedUuidDiscovered),
        "class 3: discovery takes the first system whose UUID names the node (a cloned UUID on the same BMC)",
    ),
    (
        454,
        Kept::Moved(Shape::ForeignTaintAtPowerOn),
        "class 4: power-on ignores an out-of-service taint coroner does not own",
    ),
    (
        460,
        Kept::Moved(Shape::ClonedUuidDiscovered),
        "class 3: discovery takes the first system whose UUID names the node (a cloned UUID on the same BMC)",
    ),
    (
        464,
        Kept::Reaches(Shape::ClonedUuidDiscovered),
        "class 3: discovery takes the first system whose UUID names the node (a cloned UUID on the same BMC)",
    ),
    (471, Kept::Moved(Shape::ProofReadAgain), "class 1: a proof never expires (a slow release outlives it)"),
    (
        477,
        Kept::Reaches(Shape::SecondFenceWhileFirstRuns),
        "class 12: a second remediation for a node being fenced sends its own reset",
    ),
    (
        483,
        Kept::Moved(Shape::ClonedUuidDiscovered),
        "class 3: discovery takes the first system whose UUID names the node (a cloned UUID on the same BMC)",
    ),
    (
        491,
        Kept::Reaches(Shape::ClonedUuidDiscovered),
        "class 3: discovery takes the first system whose UUID names the node (a cloned UUID on the same BMC)",
    ),
    (
        495,
        Kept::Reaches(Shape::ClonedUuidDiscovered),
        "class 3: discovery takes the first system whose UUID names the node (a cloned UUID on the same BMC)",
    ),
    (
        505,
        Kept::Reaches(Shape::ClonedUuidDiscovered),
        "class 3: discovery takes the first system whose UUID names the node (a cloned UUID on the same BMC)",
    ),
    (
        507,
        Kept::Reaches(Shape::ClonedUuidDiscovered),
        "class 3: discovery takes the first system whose UUID names the node (a cloned UUID on the same BMC)",
    ),
    (514, Kept::Moved(Shape::ExcludedMidFence), "class 5: the exclusion label is checked only at admission"),
    (515, Kept::Moved(Shape::ReadyMidFence), "class 5: Ready=True is checked only at admission"),
    (
        518,
        Kept::Reaches(Shape::ClonedUuidDiscovered),
        "class 3: discovery takes the first system whose UUID names the node (a cloned UUID on the same BMC)",
    ),
    (
        519,
        Kept::Reaches(Shape::SecondFenceWhileFirstRuns),
        "class 12: a second remediation for a node being fenced sends its own reset",
    ),
    (
        520,
        Kept::Reaches(Shape::SecondFenceWhileFirstRuns),
        "class 12: a second remediation for a node being fenced sends its own reset",
    ),
    (
        531,
        Kept::Reaches(Shape::ForeignTaintOverRecord),
        "class 7: taint ownership by annotation alone claims someone else's taint",
    ),
    (
        539,
        Kept::Reaches(Shape::ProofReadAgain),
        "class 1: a proof never expires (the release write is retried without a fresh reading)",
    ),
    (
        549,
        Kept::Reaches(Shape::ClonedUuidDiscovered),
        "class 3: discovery takes the first system whose UUID names the node (a cloned UUID on the same BMC)",
    ),
    (
        552,
        Kept::Reaches(Shape::ForeignTaintAtPowerOn),
        "class 4: power-on ignores an out-of-service taint coroner does not own",
    ),
    (
        556,
        Kept::Moved(Shape::PowerOnAfterDeletionRelease),
        "R1: a ResourceDeletion release has no guard (wave 3, fixed)",
    ),
    (
        558,
        Kept::Reaches(Shape::PowerOnAfterDeletionRelease),
        "R1: a ResourceDeletion release has no guard (wave 3, fixed)",
    ),
    (
        561,
        Kept::Reaches(Shape::ClonedUuidDiscovered),
        "class 3: discovery takes the first system whose UUID names the node (a cloned UUID on the same BMC)",
    ),
    (
        563,
        Kept::Moved(Shape::ForeignTaintOverRecord),
        "class 7: taint ownership by annotation alone claims someone else's taint",
    ),
    (
        574,
        Kept::Moved(Shape::ClonedUuidDiscovered),
        "class 3: discovery takes the first system whose UUID names the node (a cloned UUID on the same BMC)",
    ),
    (
        585,
        Kept::Moved(Shape::ForeignTaintAtPowerOn),
        "class 4: power-on ignores an out-of-service taint coroner does not own",
    ),
    (
        592,
        Kept::Reaches(Shape::SecondFenceWhileFirstRuns),
        "class 12: a second remediation for a node being fenced sends its own reset",
    ),
    (
        594,
        Kept::Moved(Shape::ForeignTaintOverRecord),
        "class 7: taint ownership by annotation alone claims someone else's taint",
    ),
    (
        605,
        Kept::Reaches(Shape::ClonedUuidDiscovered),
        "class 3: discovery takes the first system whose UUID names the node (a cloned UUID on the same BMC)",
    ),
    (
        612,
        Kept::Reaches(Shape::ClonedUuidDiscovered),
        "class 3: discovery takes the first system whose UUID names the node (a cloned UUID on the same BMC)",
    ),
    (
        616,
        Kept::Moved(Shape::ClonedUuidDiscovered),
        "class 3: discovery takes the first system whose UUID names the node (a cloned UUID on the same BMC)",
    ),
    (
        621,
        Kept::Reaches(Shape::SecondFenceWhileFirstRuns),
        "class 12: a second remediation for a node being fenced sends its own reset",
    ),
    (
        628,
        Kept::Reaches(Shape::ClonedUuidDiscovered),
        "class 3: discovery takes the first system whose UUID names the node (a cloned UUID on the same BMC)",
    ),
    (
        631,
        Kept::Reaches(Shape::ForeignTaintOverRecord),
        "class 7: taint ownership by annotation alone claims someone else's taint",
    ),
    (
        645,
        Kept::Reaches(Shape::ClonedUuidDiscovered),
        "class 3: discovery takes the first system whose UUID names the node (a cloned UUID on the same BMC)",
    ),
    (
        646,
        Kept::Moved(Shape::ProofReadAgain),
        "class 1: a proof never expires (the release write is retried without a fresh reading)",
    ),
    (
        657,
        Kept::Moved(Shape::AttestedAfterLife),
        "A1: an attestation is accepted although the fence's last reading of the machine was not Off (a regression of class 3 before its world changed) (wave 3, fixed)",
    ),
    (
        659,
        Kept::Moved(Shape::ClonedUuidDiscovered),
        "class 3: discovery takes the first system whose UUID names the node (a cloned UUID on the same BMC)",
    ),
    (
        668,
        Kept::Reaches(Shape::SecondFenceWhileFirstRuns),
        "class 12: a second remediation for a node being fenced sends its own reset",
    ),
    (
        682,
        Kept::Reaches(Shape::ClonedUuidDiscovered),
        "class 3: discovery takes the first system whose UUID names the node (a cloned UUID on the same BMC)",
    ),
    (686, Kept::Reaches(Shape::NodeReplacedMidFence), "class 5: a replaced Node is checked only at admission"),
    (
        695,
        Kept::Reaches(Shape::AttestedAfterLife),
        "A1: an attestation is accepted although the fence's last reading of the machine was not Off (a regression of class 9 before its world changed) (wave 3, fixed)",
    ),
    (
        702,
        Kept::Moved(Shape::ForeignTaintAtPowerOn),
        "class 4: power-on ignores an out-of-service taint coroner does not own",
    ),
    (
        711,
        Kept::Moved(Shape::ClonedUuidDiscovered),
        "class 3: discovery takes the first system whose UUID names the node (a cloned UUID on the same BMC)",
    ),
    (
        736,
        Kept::Moved(Shape::ClonedUuidDiscovered),
        "class 3: discovery takes the first system whose UUID names the node (a cloned UUID on the same BMC)",
    ),
    (
        764,
        Kept::Reaches(Shape::ForeignTaintOverRecord),
        "class 7: taint ownership by annotation alone claims someone else's taint",
    ),
    (
        771,
        Kept::Reaches(Shape::ClonedUuidDiscovered),
        "class 3: discovery takes the first system whose UUID names the node (a cloned UUID on the same BMC)",
    ),
    (
        779,
        Kept::Moved(Shape::ClonedUuidDiscovered),
        "class 3: discovery takes the first system whose UUID names the node (a cloned UUID on the same BMC)",
    ),
    (788, Kept::Reaches(Shape::CrashLoop), "class 9: a phase holding a power-action slot has no deadline"),
    (
        790,
        Kept::Moved(Shape::ClonedUuidDiscovered),
        "class 3: discovery takes the first system whose UUID names the node (a cloned UUID on the same BMC)",
    ),
    (
        794,
        Kept::Moved(Shape::ClonedUuidDiscovered),
        "class 3: discovery takes the first system whose UUID names the node (a cloned UUID on the same BMC)",
    ),
    (803, Kept::Moved(Shape::ReadyMidFence), "class 5: Ready=True is checked only at admission"),
    (
        828,
        Kept::Reaches(Shape::CrashAfterReleaseWrite),
        "class 8: a crash between the release write and its status write undoes the release",
    ),
    (
        839,
        Kept::Reaches(Shape::ClonedUuidDiscovered),
        "class 3: discovery takes the first system whose UUID names the node (a cloned UUID on the same BMC)",
    ),
    (
        863,
        Kept::Moved(Shape::SecondFenceWhileFirstRuns),
        "class 12: a second remediation for a node being fenced sends its own reset",
    ),
    (
        878,
        Kept::Reaches(Shape::ClonedUuidDiscovered),
        "class 3: discovery takes the first system whose UUID names the node (a cloned UUID on the same BMC)",
    ),
    (879, Kept::Moved(Shape::ExcludedMidFence), "class 5: the exclusion label is checked only at admission"),
    (895, Kept::Reaches(Shape::CredentialsChangedMidFence), "class 10: a credentials change mid-fence fails the fence"),
    (
        907,
        Kept::Reaches(Shape::ClonedUuidDiscovered),
        "class 3: discovery takes the first system whose UUID names the node (a cloned UUID on the same BMC)",
    ),
    (
        911,
        Kept::Moved(Shape::ClonedUuidDiscovered),
        "class 3: discovery takes the first system whose UUID names the node (a cloned UUID on the same BMC)",
    ),
    (
        965,
        Kept::Reaches(Shape::ClonedUuidDiscovered),
        "class 3: discovery takes the first system whose UUID names the node (a cloned UUID on the same BMC)",
    ),
    (
        977,
        Kept::Reaches(Shape::ClonedUuidDiscovered),
        "class 3: discovery takes the first system whose UUID names the node (a cloned UUID on the same BMC)",
    ),
    (
        980,
        Kept::Moved(Shape::ForeignTaintAtPowerOn),
        "class 4: power-on ignores an out-of-service taint coroner does not own",
    ),
    (
        996,
        Kept::Reaches(Shape::ForeignTaintAtPowerOn),
        "class 4: power-on ignores an out-of-service taint coroner does not own",
    ),
    (
        1023,
        Kept::Moved(Shape::PowerOnDuringReboot),
        "oracle (soak): an On was judged against a taint added after the process's last Node read",
    ),
    (1028, Kept::Reaches(Shape::NodeReplacedMidFence), "class 5: a replaced Node is checked only at admission"),
    (
        1040,
        Kept::Moved(Shape::ReleasedOnUnevenReadings),
        "class 2: gaps between readings are unbounded (a stalled process keeps its run)",
    ),
    (
        1117,
        Kept::Reaches(Shape::CredentialsChangedMidFence),
        "class 10: a credentials change mid-fence fails the fence",
    ),
    (
        1139,
        Kept::Reaches(Shape::ProofFromMidRequest),
        "oracle (soak): the proof's span was judged from the first request, not its answer (a ForceOff landing mid-request)",
    ),
    (
        1144,
        Kept::Reaches(Shape::ProofReadAgain),
        "class 1: a proof never expires (the release write is retried without a fresh reading)",
    ),
    (
        1263,
        Kept::Moved(Shape::GuardForceOff),
        "oracle (soak): the guard's ForceOff after the release was taken for a second one of the fence's intent",
    ),
    (
        1466,
        Kept::Moved(Shape::PowerOnDuringReboot),
        "R1: a Reboot takes a power-on it did not cause for its own while its taint still stands (wave 3, fixed)",
    ),
    (
        1476,
        Kept::Reaches(Shape::PowerOnAfterDeletionRelease),
        "R1: a ResourceDeletion release has no guard (wave 3, fixed)",
    ),
    (
        1514,
        Kept::Reaches(Shape::AttestedAfterLife),
        "A1: an attestation is accepted although the fence's last reading of the machine was not Off (wave 3, fixed)",
    ),
    (
        1592,
        Kept::Moved(Shape::ClockStepped),
        "class 2: Lease freshness is measured on the wall clock (a clock step ages every Lease)",
    ),
    (
        1692,
        Kept::Reaches(Shape::AttestedAfterLife),
        "A1: an attestation is accepted although the fence's last reading of the machine was not Off (wave 3, fixed)",
    ),
    (
        1749,
        Kept::Moved(Shape::PowerOnAfterDeletionRelease),
        "R1: a ResourceDeletion release has no guard (wave 3, fixed)",
    ),
    (1795, Kept::Moved(Shape::ProofReadAgain), "class 1: a proof never expires (a slow release outlives it)"),
    (
        2201,
        Kept::Moved(Shape::FailoverMidFence),
        "oracle (soak): a leader's failover ended the only attempt at its wall-clock deadline",
    ),
    (2258, Kept::Reaches(Shape::ProofReadAgain), "class 1: a proof never expires (a slow release outlives it)"),
    (
        2260,
        Kept::Moved(Shape::ClockStepped),
        "class 2: Lease freshness is measured on the wall clock (a clock step ages every Lease)",
    ),
    (
        2299,
        Kept::Reaches(Shape::PowerOnAfterDeletionRelease),
        "R1: a ResourceDeletion release has no guard (wave 3, fixed)",
    ),
    (
        2335,
        Kept::Moved(Shape::ProofFromMidRequest),
        "oracle (soak): the proof's span was judged from the first request, not its answer (a ForceOff landing mid-request)",
    ),
    (
        2369,
        Kept::Moved(Shape::LifeThenFailedWrite),
        "P3: a reading that breaks the run is forgotten when the status write after it fails; the run goes on (wave 3, fixed)",
    ),
    (
        2372,
        Kept::Moved(Shape::ApprovedPowerOn),
        "guard (soak): the guard switched a machine off on a 15-s-old Node read, ignoring the approval given since",
    ),
    (
        2379,
        Kept::Moved(Shape::PowerOnAfterDeletionRelease),
        "R1: a ResourceDeletion release has no guard (wave 3, fixed)",
    ),
    (2402, Kept::Moved(Shape::ReadyMidFence), "class 5: Ready=True is checked only at admission"),
    (
        2571,
        Kept::Reaches(Shape::FailoverMidFence),
        "class 2: an attempt's deadline runs on the wall clock across processes (a failover eats the attempt)",
    ),
    (
        2596,
        Kept::Reaches(Shape::PowerOnAfterDeletionRelease),
        "R1: a ResourceDeletion release has no guard (wave 3, fixed)",
    ),
    (
        2615,
        Kept::Reaches(Shape::PowerOnAfterDeletionRelease),
        "R1: a ResourceDeletion release has no guard (wave 3, fixed)",
    ),
    (
        2622,
        Kept::Reaches(Shape::LongSettleProven),
        "P2: a client rebuilt every minute restarts the run: a settle of a minute or more is never proven (wave 3, fixed)",
    ),
    (
        2698,
        Kept::Moved(Shape::PowerOnDuringReboot),
        "R1: a Reboot takes a power-on it did not cause for its own while its taint still stands (wave 3, fixed)",
    ),
    (
        2795,
        Kept::Moved(Shape::AttestedAfterLife),
        "A1: an attestation is accepted although the fence's last reading of the machine was not Off (wave 3, fixed)",
    ),
    (
        2799,
        Kept::Moved(Shape::GuardSawPowerOn),
        "R1/R4: the guard follows coroner's taint on the Node, not the release (wave 3, fixed)",
    ),
    (
        2813,
        Kept::Moved(Shape::AttestedAfterLife),
        "A1: an attestation is accepted although the fence's last reading of the machine was not Off (wave 3, fixed)",
    ),
    (
        2828,
        Kept::Moved(Shape::PowerOnAfterDeletionRelease),
        "R1: a ResourceDeletion release has no guard (wave 3, fixed)",
    ),
    (
        2886,
        Kept::Moved(Shape::PowerOnAfterDeletionRelease),
        "R1: a ResourceDeletion release has no guard (wave 3, fixed)",
    ),
    (
        2917,
        Kept::Reaches(Shape::PowerOnAfterDeletionRelease),
        "R1: a ResourceDeletion release has no guard (wave 3, fixed)",
    ),
    (2935, Kept::Moved(Shape::GuardOnSlowApi), "oracle (soak): the guard's report bound ignored a slow apiserver"),
    (
        2965,
        Kept::Moved(Shape::PowerOnAfterDeletionRelease),
        "R1: a ResourceDeletion release has no guard (wave 3, fixed)",
    ),
    (
        2978,
        Kept::Reaches(Shape::LifeThenFailedWrite),
        "P3: a reading that breaks the run is forgotten when the status write after it fails; the run goes on (wave 3, fixed)",
    ),
    (
        2993,
        Kept::Moved(Shape::ClockStepped),
        "class 2: Lease freshness is measured on the wall clock (a clock step ages every Lease)",
    ),
    (
        3009,
        Kept::Reaches(Shape::LongSettleProven),
        "P2: a client rebuilt every minute restarts the run: a settle of a minute or more is never proven (wave 3, fixed)",
    ),
    (
        3065,
        Kept::Reaches(Shape::LifeThenFailedWrite),
        "P3: a reading that breaks the run is forgotten when the status write after it fails; the run goes on (wave 3, fixed)",
    ),
    (
        3075,
        Kept::Moved(Shape::LifeThenFailedWrite),
        "P3: a reading that breaks the run is forgotten when the status write after it fails; the run goes on (wave 3, fixed)",
    ),
    (
        3100,
        Kept::Reaches(Shape::AttestedAfterLife),
        "A1: an attestation is accepted although the fence's last reading of the machine was not Off (wave 3, fixed)",
    ),
    (
        3120,
        Kept::Reaches(Shape::AttestedAfterLife),
        "A1: an attestation is accepted although the fence's last reading of the machine was not Off (wave 3, fixed)",
    ),
    (
        3122,
        Kept::Moved(Shape::PowerOnAfterDeletionRelease),
        "R1: a ResourceDeletion release has no guard (wave 3, fixed)",
    ),
    (
        3136,
        Kept::Reaches(Shape::PowerOnAfterDeletionRelease),
        "R1: a ResourceDeletion release has no guard (wave 3, fixed)",
    ),
    (
        3213,
        Kept::Moved(Shape::AttestedAfterLife),
        "A1: an attestation is accepted although the fence's last reading of the machine was not Off (wave 3, fixed)",
    ),
    (
        3251,
        Kept::Reaches(Shape::AttestedAfterLife),
        "A1: an attestation is accepted although the fence's last reading of the machine was not Off (wave 3, fixed)",
    ),
    (
        3318,
        Kept::Moved(Shape::LifeThenFailedWrite),
        "P3: a reading that breaks the run is forgotten when the status write after it fails; the run goes on (wave 3, fixed)",
    ),
    (
        3348,
        Kept::Reaches(Shape::AttestedAfterLife),
        "A1: an attestation is accepted although the fence's last reading of the machine was not Off (wave 3, fixed)",
    ),
    (
        3353,
        Kept::Moved(Shape::ProofFromMidRequest),
        "oracle (soak): the proof's span was judged from the first request, not its answer (a ForceOff landing mid-request)",
    ),
    (
        3435,
        Kept::Reaches(Shape::LongSettleProven),
        "P2: a client rebuilt every minute restarts the run: a settle of a minute or more is never proven (wave 3, fixed)",
    ),
    (
        3539,
        Kept::Reaches(Shape::AttestedAfterLife),
        "A1: an attestation is accepted although the fence's last reading of the machine was not Off (wave 3, fixed)",
    ),
    (
        3570,
        Kept::Reaches(Shape::AttestedAfterLife),
        "A1: an attestation is accepted although the fence's last reading of the machine was not Off (wave 3, fixed)",
    ),
    (
        3730,
        Kept::Moved(Shape::ProofFromMidRequest),
        "oracle (soak): the proof's span was judged from the first request, not its answer (a ForceOff landing mid-request)",
    ),
    (
        3845,
        Kept::Moved(Shape::AttestedAfterLife),
        "A1: an attestation is accepted although the fence's last reading of the machine was not Off (wave 3, fixed)",
    ),
    (
        3895,
        Kept::Moved(Shape::ApprovedPowerOn),
        "R3: an approval left from before the fence disarms the guard (wave 3, fixed)",
    ),
    (
        3929,
        Kept::Reaches(Shape::PowerOnAfterDeletionRelease),
        "R1: a ResourceDeletion release has no guard (wave 3, fixed)",
    ),
    (
        4047,
        Kept::Moved(Shape::ProofFromMidRequest),
        "oracle (soak): the proof's span was judged from the first request, not its answer (a ForceOff landing mid-request)",
    ),
    (
        4332,
        Kept::Moved(Shape::ProofFromMidRequest),
        "oracle (soak): the proof's span was judged from the first request, not its answer (a ForceOff landing mid-request)",
    ),
    (
        4853,
        Kept::Moved(Shape::ProofFromMidRequest),
        "oracle (soak): the proof's span was judged from the first request, not its answer (a ForceOff landing mid-request)",
    ),
    (
        5174,
        Kept::Moved(Shape::ApiFaultsMidProof),
        "error policy (soak): a 30 s backoff on API errors outlasted the fence's deadlines",
    ),
    (
        5283,
        Kept::Moved(Shape::ProofFromMidRequest),
        "oracle (soak): the proof's span was judged from the first request, not its answer (a ForceOff landing mid-request)",
    ),
    (
        5295,
        Kept::Moved(Shape::DidNotTakeEffectReported),
        "oracle (soak): a bootID report was owed while no replica led (up to 20 s after a death)",
    ),
    (
        5774,
        Kept::Moved(Shape::LifeAfterLastNodeRead),
        "oracle (soak): life after the process's last Node read before the action counted against it",
    ),
    (
        5804,
        Kept::Moved(Shape::ProofFromMidRequest),
        "oracle (soak): the proof's span was judged from the first request, not its answer (a ForceOff landing mid-request)",
    ),
    (
        6019,
        Kept::Moved(Shape::ProofFromMidRequest),
        "oracle (soak): the proof's span was judged from the first request, not its answer (a ForceOff landing mid-request)",
    ),
    (
        6262,
        Kept::Moved(Shape::GuardForceOff),
        "oracle (soak): the guard's ForceOff after the release was taken for a second one of the fence's intent",
    ),
    (
        6473,
        Kept::Moved(Shape::LifeAfterLastNodeRead),
        "oracle (soak): life after the process's last Node read before the action counted against it",
    ),
    (
        6483,
        Kept::Moved(Shape::LifeAfterLastNodeRead),
        "oracle (soak): life after the process's last Node read before the action counted against it",
    ),
    (
        6501,
        Kept::Moved(Shape::DidNotTakeEffectReported),
        "bootID (soak): a failing step hid the bootID check behind it (FenceDidNotTakeEffect never raised)",
    ),
    (7376, Kept::Moved(Shape::GuardOnSlowApi), "oracle (soak): the guard's report bound ignored a slow apiserver"),
    (
        7525,
        Kept::Reaches(Shape::PowerOnDuringReboot),
        "R1: a Reboot takes a power-on it did not cause for its own while its taint still stands (wave 3, fixed; earlier a regression of the error policy)",
    ),
    (
        7639,
        Kept::Moved(Shape::PowerOnDuringReboot),
        "oracle (soak): an On was judged against a taint added after the process's last Node read",
    ),
    (
        7891,
        Kept::Moved(Shape::ProofFromMidRequest),
        "oracle (soak): the proof's span was judged from the first request, not its answer (a ForceOff landing mid-request)",
    ),
    (7905, Kept::Reaches(Shape::GuardOnSlowApi), "oracle (soak): the guard's report bound ignored a slow apiserver"),
    (
        8006,
        Kept::Moved(Shape::ProofFromMidRequest),
        "oracle (soak): the proof's span was judged from the first request, not its answer (a ForceOff landing mid-request)",
    ),
    (
        8080,
        Kept::Moved(Shape::ProofFromMidRequest),
        "oracle (soak): the proof's span was judged from the first request, not its answer (a ForceOff landing mid-request)",
    ),
    (
        8241,
        Kept::Moved(Shape::ProofFromMidRequest),
        "oracle (soak): the proof's span was judged from the first request, not its answer (a ForceOff landing mid-request)",
    ),
    (
        8413,
        Kept::Moved(Shape::FailoverMidFence),
        "guard (soak): a replica's memory of a fence (proof, attempt clock) carried into its next leadership term",
    ),
    (8495, Kept::Moved(Shape::GuardOnSlowApi), "oracle (soak): the guard's report bound ignored a slow apiserver"),
    (
        8967,
        Kept::Moved(Shape::LifeAfterLastNodeRead),
        "oracle (soak): life after the process's last Node read before the action counted against it",
    ),
    (
        9556,
        Kept::Reaches(Shape::ApiFaultsMidProof),
        "error policy (soak): a 30 s backoff on API errors outlasted the fence's deadlines",
    ),
    (
        9766,
        Kept::Moved(Shape::DidNotTakeEffectReported),
        "oracle (soak): a bootID report was owed while no replica led (up to 20 s after a death)",
    ),
    (
        9907,
        Kept::Reaches(Shape::ApprovedPowerOn),
        "oracle (soak): an approval given after the guard's last Node read before its ForceOff counted",
    ),
    (
        10455,
        Kept::Moved(Shape::ProofFromMidRequest),
        "oracle (soak): the proof's span was judged from the first request, not its answer (a ForceOff landing mid-request)",
    ),
    (
        10545,
        Kept::Moved(Shape::ProofFromMidRequest),
        "oracle (soak): the proof's span was judged from the first request, not its answer (a ForceOff landing mid-request)",
    ),
    (
        10712,
        Kept::Moved(Shape::ProofFromMidRequest),
        "oracle (soak): the proof's span was judged from the first request, not its answer (a ForceOff landing mid-request)",
    ),
    (10757, Kept::Reaches(Shape::GuardOnSlowApi), "oracle (soak): the guard's report bound ignored a slow apiserver"),
    (
        3876,
        Kept::Moved(Shape::AttestedAfterLife),
        "A1: an On answer of the node's system inside an identity discovery that then failed (a member timed out) is not recorded: an attestation follows it (wave 3, fixed)",
    ),
    (
        4074,
        Kept::Reaches(Shape::PowerOnBetweenSamples),
        "oracle (P4): a power-on wholly between two proving samples, ended before the next, was judged; P4 says no sampling sees it and nothing runs elsewhere before the release (wave 3, fixed)",
    ),
    (
        881,
        Kept::Moved(Shape::PowerOnDuringReboot),
        "R2: a power-on the fence's PoweringOn read while its release stood was not handed to the guard; a glitch that ended before the guard's next reading was never switched off (wave 3, fixed)",
    ),
    (
        5437,
        Kept::Moved(Shape::GuardForceOff),
        "R2 (soak): a guard ForceOff decided and persisted by a process that died before sending it was dropped once the glitch ended; an unanswered guard intent is now a sighting (wave 3, fixed)",
    ),
    (
        3131,
        Kept::Moved(Shape::FailoverMidFence),
        "intents (soak): a deposed process's On answer, decided again on the new leader's status, marked the new leader's intent answered; its own On then went out with no persisted intent (wave 3, fixed)",
    ),
    (
        3581,
        Kept::Moved(Shape::NodeReplacedMidFence),
        "P1 (soak): the Node was read before the leader check's round trips; a Node replaced in between got the ForceOff (wave 3, fixed)",
    ),
    (
        3897,
        Kept::Moved(Shape::AttestedAfterLife),
        "A1 (soak): a guard reading of life between the attestation's checks and its Node write was not judged (wave 3, fixed)",
    ),
    (
        890,
        Kept::Reaches(Shape::PowerOnDuringReboot),
        "R1: an On decided but never sent (the apiserver failed before the request) made a glitch's power-on coroner's (wave 3, fixed)",
    ),
    (
        2799,
        Kept::Moved(Shape::PowerOnDuringReboot),
        "R1: an On decided but never sent (a failover before the request) made someone else's power-on coroner's (wave 3, fixed)",
    ),
    (
        643,
        Kept::Moved(Shape::PowerOnDuringReboot),
        "R1: a power-on while no leader read the released machine was taken for coroner's once its taint came off for the On (wave 3, fixed)",
    ),
    (
        8651,
        Kept::Reaches(Shape::PowerOnAfterDeletionRelease),
        "R1 (soak): a ResourceDeletion release whose process lost the apiserver between a pod deletion and its status write was forgotten and left unguarded; it is now recorded as begun before the first pod (wave 4, fixed)",
    ),
    (
        9375,
        Kept::Reaches(Shape::PowerOnAfterDeletionRelease),
        "R1 (soak): a ResourceDeletion release interrupted by apiserver errors ended PowerOffNotConfirmed, \"nothing released\", unguarded (wave 4, fixed)",
    ),
    (
        10649,
        Kept::Moved(Shape::PowerOnAfterDeletionRelease),
        "R1 (soak): a ResourceDeletion release lost across a leader crash left its machine unguarded (wave 4, fixed)",
    ),
    (
        6198,
        Kept::Moved(Shape::GuardSawPowerOn),
        "R1 (soak): the guard enforced an attested release whose Node update never came, after its record was withdrawn (wave 4, fixed)",
    ),
    (
        7499,
        Kept::Reaches(Shape::ApiFaultsMidProof),
        "error policy (soak): two failed reconciles in a row (1 s, then 2 s) broke a 70 s settle's gap bound every time (wave 4, fixed)",
    ),
    (
        8592,
        Kept::Moved(Shape::AttestedAfterLife),
        "A1 (soak): the oracle counted the fence's admission from t=0 when all its Node writes were denied (oracle stricter than the rule)",
    ),
    (
        7515,
        Kept::Moved(Shape::GuardSawPowerOn),
        "R2 (soak): the oracle asked for a second GuardBlind in a dark spell already reported (oracle stricter than the rule)",
    ),
    (
        5924,
        Kept::Moved(Shape::AttestedAfterLife),
        "A1 (soak): an On reading whose status write failed, in an attempt that ended with it, was forgotten (the step restored the reading before it), and NHC's timeout then wrote Off's record; an attestation followed life (wave 4, fixed)",
    ),
    (
        10930,
        Kept::Moved(Shape::AttestedAfterLife),
        "A1 (soak): the same, through a lying BMC's Unknown (wave 4, fixed); again once the reader record moved its schedule: a new leader's memory of an earlier Off replaced a deposed leader's recorded Unknown (fence::last_reading_kept)",
    ),
    (
        3224,
        Kept::Moved(Shape::ClockStepped),
        "class 9 (soak): a release time written by a clock an hour ahead held WaitingForRelease (and its slot) for every later leader (wave 4, fixed)",
    ),
    (
        10687,
        Kept::Moved(Shape::NodeReplacedMidFence),
        "P1 (soak): the oracle counted a Node replaced after the process's last read of it, with the request in flight (oracle stricter than the rule)",
    ),
    (
        13048,
        Kept::Reaches(Shape::FailoverMidFence),
        "P1 (soak): a deposed leader's status write withdrew the new leader's ForceOff intent between the new leader's remediation re-read and its request; the re-read now comes late, next to the Node (wave 4, fixed)",
    ),
    (
        15594,
        Kept::Reaches(Shape::PowerOnDuringReboot),
        "R1 (soak): a Reboot's On refused at connect (the BMC dark) counted as answered and ended the release; a connection that never came about now sends nothing (wave 4, fixed)",
    ),
    (
        15327,
        Kept::Moved(Shape::LyingBmcReleased),
        "R2 (soak): the oracle asked the guard to report a power-on its lying BMC showed as Off (oracle stricter than the rule: the device cannot see it)",
    ),
    (
        19051,
        Kept::Reaches(Shape::PowerOnAfterDeletionRelease),
        "R1/R2 (soak): after a ResourceDeletion release's deletion began, the fence's own re-proof switched the machine off under guard: Alert; a reading of life after the deletion began is now the guard's (wave 4, fixed)",
    ),
    (
        2910,
        Kept::Moved(Shape::FaultAfterPodDeleted),
        "liveness (soak): an API error after a pod's deletion ended the fence as an interrupted release (a first version of the begun-record fix); the record now stands and the deletion goes on (wave 4, fixed)",
    ),
    (
        5518,
        Kept::Moved(Shape::FaultAfterPodDeleted),
        "liveness (soak): an API error after a pod's deletion ended the fence as an interrupted release (a first version of the begun-record fix); the record now stands and the deletion goes on (wave 4, fixed)",
    ),
    (
        10492,
        Kept::Moved(Shape::FaultAfterPodDeleted),
        "liveness (soak): an API error after a pod's deletion ended the fence as an interrupted release (a first version of the begun-record fix); the record now stands and the deletion goes on (wave 4, fixed)",
    ),
    (
        9469,
        Kept::Moved(Shape::FaultAfterPodDeleted),
        "liveness (soak): an API error after a pod's deletion ended the fence as an interrupted release (a first version of the begun-record fix); the record now stands and the deletion goes on (wave 4, fixed)",
    ),
    (
        15453,
        Kept::Reaches(Shape::CrashLoop),
        "class 9 (soak): a crash loop's leaders, held by NodeLeaseFresh (each counts every Lease as just renewed), read the BMC at every wake-up their own status writes caused, and the slot bound was stricter than the rule (each attempt ends on the wall clock at twice powerOffTimeout)",
    ),
    (
        33266,
        Kept::Reaches(Shape::GuardForceOff),
        "R2 (soak, seeds 24000..34000): a guard ForceOff the BMC failed (a 503) counted as answered, so a glitch that ended by itself before the next guard round was never switched off; a failed ForceOff now stays unanswered and the guard reads again within a second",
    ),
    (
        31044,
        Kept::Reaches(Shape::AttestedAfterLife),
        "A1 (soak, seeds 24000..34000): a leader read the machine and died before it could record the reading; NHC's timeout, written by the next leader, ended the fence and an attestation followed a reading nobody had seen; the reading process is now named in status first (ReadingUnrecorded)",
    ),
    (
        39159,
        Kept::Moved(Shape::GuardSawPowerOn),
        "R2 (soak, seeds 34000..44000; the oracle): a binding edited to a dead endpoint after a release leaves the guard dark (GuardBlind), as a BMC without power does; the oracle took the BMC's own power for the guard's sight",
    ),
    (
        39803,
        Kept::Reaches(Shape::GuardSawPowerOn),
        "R2 (soak; the oracle): the same, a binding edited to a dead endpoint right after the release",
    ),
    (
        41943,
        Kept::Reaches(Shape::GuardSawPowerOn),
        "R2 (soak; the oracle): a BMC that lost power within the guard's bound makes the guard blind from then; the oracle asked for a ForceOff the dark BMC could not take",
    ),
    (
        48084,
        Kept::Moved(Shape::AttestedAfterLife),
        "A1 (soak, seeds 44000..54000): a deposed leader's read (a slow BMC's retry) saw the machine on and its status write lost to the new leader's; the new leader's fence failed and an attestation followed the lost reading; a reading of life whose write failed is now written on its own, and a process that knows it was deposed reads no more",
    ),
    (
        65552,
        Kept::Moved(Shape::LifeThenFailedWrite),
        "P3 (soak, seeds 64000..70000): a reading that was not Off after the proof, with a gate holding the ForceOff, left the run and the proof in memory; a single Off reading then released on it. The run now ends on every such reading",
    ),
    (
        64837,
        Kept::Moved(Shape::DidNotTakeEffectReported),
        "bootID (soak; the oracle): a slow apiserver answer (12.6 s) delayed the reconcile that reports FenceDidNotTakeEffect past 10 s; the bound now allows six slow answers, as the guard's does",
    ),
    (
        94669,
        Kept::Moved(Shape::DiscoveryReadMidRun),
        "oracle (soak 92000..99999, after W1): a discovery read of another system of the BMC (every member is read) between two Off readings of the node's system broke the oracle's run, not the fence's; such a read is no reading of the machine (docs/safety.md, When a reading was taken)",
    ),
    (
        92350,
        Kept::Reaches(Shape::LyingBmcReleased),
        "oracle (soak 92000..99999, after W1): a lying BMC's release taken back at once because the node's Lease was renewed right after it (docs/safety.md, After the release) was judged an undone release",
    ),
    (
        23535,
        Kept::Reaches(Shape::GuardForceOff),
        "R2 (soak): a guard ForceOff whose leader check failed on a 503 was tried again only at the next guard round; an unanswered guard ForceOff now makes the guard due at once",
    ),
    (
        96908,
        Kept::Reaches(Shape::SecondFenceWhileFirstRuns),
        "R1 (soak): a second remediation fenced (ForceOff) a machine whose ResourceDeletion release stood under guard: Alert; only a taint release was adopted",
    ),
    (
        113023,
        Kept::Reaches(Shape::PowerOnAfterDeletionRelease),
        "R1 (soak, the oracle): a ResourceDeletion release whose pod deletions were under way when its remediation's deletion began was judged as standing for ever; the deletion ends it as it takes effect",
    ),
    (
        124138,
        Kept::Moved(Shape::DidNotTakeEffectReported),
        "bootID (soak): a node back on its old boot after a release whose status write never landed (its taint on the Node) was not reported; the check now counts a release from its taint or its begun deletion",
    ),
    (
        125368,
        Kept::Moved(Shape::AttestedAfterLife),
        "A1 (soak): a leader died holding an unrecorded On reading; the next leader took over as reader, its reads failed, and an attestation followed; the predecessor now stays named (unrecorded_reader) until a reading is recorded",
    ),
    (
        134968,
        Kept::Reaches(Shape::PowerOnDuringReboot),
        "R1 (soak, the oracle): a Reboot's On that timed out before it reached the BMC ends the release as an On sent does (coroner records its failure); the world's record now logs such a lost reset",
    ),
    (
        129243,
        Kept::Moved(Shape::ApiFaultsMidProof),
        "P3 (soak): a status write that failed after a reading extended the run dropped that reading from the run, so the next reading was judged against the one before and broke the gap bound on an honest BMC (apiserver 503s and conflicts); an extension now stays in memory, as W1 keeps every Off reading",
    ),
    (
        146571,
        Kept::Reaches(Shape::PowerOnDuringReboot),
        "R2 (soak): the fence's PoweringOn read the released machine On and its process died after recording the reading but before its guard acted; the sighting lived in memory only, so the next leader read it Off (the glitch over) and sent nothing; the sighting is now recorded (guard.sightedAt) and acted on by whoever leads",
    ),
    (
        167739,
        Kept::Reaches(Shape::ApprovedPowerOn),
        "R3 (soak, the oracle): an approval of the release given 0.4 s after a power-on and standing when the guard read was honoured, as the rule says (the guard honours what the Node carries when it acts); the oracle exempted only an approval given before the power-on",
    ),
    (
        178221,
        Kept::Reaches(Shape::CredentialsChangedMidFence),
        "P7 (soak): credentials rotated between an honest IPMI BMC's reading and the only attempt's ForceOff, which the BMC rejected (401); the next readings, through the Secret read again, read On for the rest of the attempt without sending it again: PowerOffNotConfirmed",
    ),
    (
        190781,
        Kept::Reaches(Shape::SecondFenceWhileFirstRuns),
        "R1/one fence per node (soak): a sibling's release stood under guard: Alert with its taint rewritten by a webhook (its On blocked), so it could not be adopted; a second remediation fenced the machine someone had switched on, which Alert only reports",
    ),
    (
        210372,
        Kept::Moved(Shape::PowerOnAfterDeletionRelease),
        "R1 (soak): a ResourceDeletion release whose pods were all gone, its status write refused by a flaky apiserver until the proof went stale, was proven again before it was recorded; the re-proof broke the request bound and the only attempt ended PowerOffNotConfirmed",
    ),
    (
        211958,
        Kept::Moved(Shape::GuardSawPowerOn),
        "R2 (soak, the oracle): the guard (Alert) wrote ReleasedMachinePoweredOn within the bound but its Event was lost to an apiserver fault; the oracle counted only the Event, and the report is the condition (R2 now says so)",
    ),
    (
        253087,
        Kept::Reaches(Shape::CredentialsChangedMidFence),
        "liveness (soak, with reflector stores): the client was built at admission and the Secret rotated before the identity read, whose 401 failed the fence for good; the identity step now builds the client again from the Secret and asks once more, as a power reading does",
    ),
    (
        303833,
        Kept::Reaches(Shape::PowerOnDuringReboot),
        "R1 (soak, the oracle): a Reboot's On answered 503 by a flaky BMC ended the release (its failure recorded, as R1 says), and the world's later power-on was judged as if the release stood: the world logged no refused reset; it now does (ResetRefused), and an On refused ends the release as one lost does",
    ),
    (
        304647,
        Kept::Reaches(Shape::LevelRelease),
        "L9 (soak, the oracle): after a release through a level whose welded outlet let the world switch the machine on, the guard (Alert) saw its draw at the outlets and reported ReleasedMachinePoweredOn; the oracle took the dead BMC for the guard's only device and asked for GuardBlind: after a level release the outlets are its device too (L9), and its Off to them is its ForceOff",
    ),
    (
        324005,
        Kept::Reaches(Shape::WrongStatementSwitched),
        "L5 (soak, the oracle): a level stated wrongly (the spare's outlets) released a running machine whose BMC lies Off: L7 asked that BMC and it said Off. L7 catches a wrong statement only through a BMC that answers the truth (the rule's line now says so); a lying BMC's own proof is exempt from the truth likewise",
    ),
    (
        394054,
        Kept::Moved(Shape::GuardSawPowerOn),
        "R2 (soak 394000-403999, the oracle): a slow IPMI BMC answered the guard nothing for 9.5 s after the world switched a released machine on, then one On whose status write failed, then timed out (GuardBlind); the oracle counted the guard's bound from the power-on, R2 from when the device answers; it now restarts the bound at the device's first answer, and a window with none and GuardBlind reported was dark",
    ),
    (
        368355,
        Kept::Moved(Shape::ReleaseRanOut),
        "liveness (soak 364000-373999): the same as 343069 on the BMC path, one step earlier: the proof lapsed under apiserver faults 0.2 s before the attempt's end and was proven again, and the deadline then ended it PowerOffNotConfirmed; an attempt whose proof lapsed ends ReleaseNotWritten unless a reading of anything but Off came since (progress.proofLapsedIn)",
    ),
    (
        360010,
        Kept::Moved(Shape::PduTimeoutMidLevel),
        "L2 liveness (soak 354000-363999, the oracle): a level's only attempt lost 5.6 s to apiserver faults before its Off, then one outlet read timed out, the gap it left broke the run (P2), and settle 5.6 s no longer fit: PowerOffNotConfirmed, as L2 says a level may fail on timeouts; the world now logs PDU timeouts and the oracle excuses such a fence, as it excuses an unreliable BMC",
    ),
    (
        345248,
        Kept::Reaches(Shape::WrongStatementSwitched),
        "L5 (soak 344000-353999, the oracle): a level stated wrongly released a running machine while the node's binding led to an endpoint where nothing answers (L7 heard nothing: the rule's named risk); the oracle took that dead endpoint's BMC for alive, since the world set it dark without logging it",
    ),
    (
        343069,
        Kept::Moved(Shape::ReleaseRanOut),
        "liveness (soak 334000-343999): a level's proof stood with 1.4 s of its only attempt left; the release's leader checks failed (503, no answer), the proof lapsed, and once the attempt's time was up it was proven again and the fence ended PowerOffNotConfirmed; a proof that lapses in Releasing after the deadline now ends ReleaseNotWritten (the real cause, as the rule says), which the oracle excuses after API faults at the release (it had asked for a release the rule does not promise)",
    ),
    (
        462828,
        Kept::Reaches(Shape::LookFoundMachine),
        "A4 (soak 454000-463999, the oracle): a level failed PowerOffNotConfirmed, the BMC came back with its machine on, an attestation's look made the fence prove it off again through the BMC and release on that proof; the oracle judged the release as the level's (the process had read outlets) and found no outlet proof: a proof taken again goes through the BMC only, and is judged as a BMC proof",
    ),
    (
        511767,
        Kept::Reaches(Shape::DidNotTakeEffectReported),
        "bootID (soak 510000-512999): a lying BMC's Reboot was released; its remediation was deleted by hand in PoweringOn while the node was partitioned, and the finalizer, the last to check, ran before the node came back on its old bootID: no FenceDidNotTakeEffect. The finalizer now leaves the release's bootID on the Node and the Node sweep reports it",
    ),
    (
        559036,
        Kept::Reaches(Shape::LevelRelease),
        "oracle stricter than R2 (soak 553000-562999): after a level release the binding was edited to another node's BMC and the outlets switched on by hand; the guard's first blind round wrote Guard=GuardBlind but the status write's answer was lost, so its Event was never sent (Events are best effort, as for ReleasedMachinePoweredOn). The oracle now takes the condition written as the report, as R2 states",
    ),
    (
        571733,
        Kept::Moved(Shape::LevelRelease),
        "the L6 oracle of this stop (soak 563000-572999): it judged the switching fence's own remediation, deleted 22 ms before its level's checked Off, as a node losing a shared outlet; a deletion racing a power action's last read is that action's race (the remediation is read right before the request), and L6 concerns the other nodes fed",
    ),
    (
        580271,
        Kept::Reaches(Shape::LevelRelease),
        "liveness, P4 (soak 573000-582999): a PDU-level fence with settle 1.86 s and pollInterval 366 ms on an apiserver failing 5% of requests: the error policy's backoff (0.5 s, then 1 s) after failed reconciles put readings further apart than the request bound in every run of its one attempt (PowerOffNotConfirmed); a fence that reads the machine now retries a conflict or an unavailable API server after at most its pollInterval or 250 ms (fence::retry_within)",
    ),
    (
        700698,
        Kept::Moved(Shape::ReleaseRanOut),
        "R1 (soak 698000-707999, on the oracle of issue 46): a release written by a process that died before its status write was forgotten when the next process's look at the Node failed on the apiserver past the attempt's deadline: the attempt ended (PowerOffNotConfirmed, \"nothing released\") with the taint left on the Node, unguarded, and a second remediation fenced the machine under guard: Alert. A release on the Node that status does not record is now recorded whatever the deadline (fence::release_unrecorded)",
    ),
    (
        707405,
        Kept::Reaches(Shape::GuardSawPowerOn),
        "R2 (soak 698000-707999, on the oracle of issue 46): after the binding's systemId was edited, the guard found the released machine again through it, and that identity read answered On; the guard dropped it and read again an interval later, after the glitch had ended. The identity read is the guard's device answering: a machine it finds not Off is now a sighting (guard::identified_sighting)",
    ),
    (
        707667,
        Kept::Reaches(Shape::WrongStatementSwitched),
        "oracle stricter than L9 (soak 698000-707999): a release through a wrongly stated level, its BMC dead, was judged by R2 through that BMC and a GuardBlind asked for; while the BMC is dark the level's outlets reading Off are what L9 rests on (the guard cannot know the statement is wrong). R2 judges such a release once its BMC answers",
    ),
    (
        2415,
        Kept::Reaches(Shape::MeterFellSilent),
        "L4 (issue 46's draws): a level whose welded relay's meter fell silent once switched off released a running machine when the memory of that meter did not outlive an attempt; the outlets whose meter read are kept in status.progress.meteredOutlets",
    ),
    (
        1549,
        Kept::Reaches(Shape::ReleasedThroughRotation),
        "P7 (issue 46's draws): the BMC's password changed right after the fence's ForceOff, whose answer was lost to the apiserver, so no accepted ForceOff was recorded and the second 401 was final (BmcAuthenticationFailed); a persisted ForceOff with no answer recorded lets the rejection pass too",
    ),
    (
        2879,
        Kept::Reaches(Shape::LevelRelease),
        "oracle stricter than L9 (issue 46's draws): the binding was edited between a level's proof and its release; the guard judges the level on the generation its proof read through, and the oracle counted the edit only from the release",
    ),
    (
        718276,
        Kept::Moved(Shape::LevelRelease),
        "oracle (soak 718000-727999; moved off its shape by L4's meters_on_record): the other node's fence released through its level, whose one outlet it shares with the target's machine; the oracle judged its machine's power by the outlet's record, which tells the power of the machine the outlet feeds first (the target's, still on through its second outlet); each machine is now judged on its own power",
    ),
    (
        720607,
        Kept::Reaches(Shape::GuardForceOff),
        "R1 (soak 718000-727999): a release written by a process that died before its status write, and whose taint a webhook then rewrote, was not found on the Node (its exact taint gone), so the next process proved again and left it unguarded; the owner record the releasing update wrote now counts too (fence::release_unrecorded)",
    ),
    (
        730562,
        Kept::Reaches(Shape::LyingBmcReleased),
        "oracle stricter than R2 (soak 728000-737999): a machine switched on while its BMC lied Off was judged from the power-on, and the window reached the BMC's first truthful answer; the device shows nothing until the BMC tells the truth, which the world records as a power-on of its own",
    ),
    (
        740385,
        Kept::Reaches(Shape::WrongStatementSwitched),
        "oracle (soak 738000-747999): a level stated wrongly released while the node's slow BMC timed out L7's question; its proof was judged on the node's machine instead of the named outlets' (L5's named risk is judged on the outlets it names)",
    ),
    (
        742006,
        Kept::Moved(Shape::GuardSawPowerOn),
        "oracle stricter than R2 (soak 738000-747999): the target's binding, a mistyped copy of the other node's, leads to that node's BMC from the start; the oracle took the target's own BMC for the guard's device and asked for a ForceOff, where the guard, reading another machine, is blind",
    ),
    (
        742684,
        Kept::Moved(Shape::GuardSawPowerOn),
        "oracle stricter than R2 (soak 738000-747999): the same under guard: Alert (ReleasedMachinePoweredOn asked of a guard whose device reads another machine)",
    ),
    (
        754431,
        Kept::Reaches(Shape::MeterFellSilent),
        "L4 (soak 748000-757999): a process read both outlets metered and its write failed; the next process, outlet 1 unread and outlet 2 On, switched the level off, and outlet 1's meter, silent once off, was never on record: a welded relay released a running machine. Fixed: levels::meters_on_record, no Off before every outlet's meter is on record",
    ),
    (
        765772,
        Kept::Reaches(Shape::CredentialsChangedMidFence),
        "oracle stricter than L2 (soak 758000-777999): the BMC's password changed before its Secret and rejected the fence's reading before any ForceOff; L2 handed the fence to its PDU level, which L6 rightly refused for an outlet shared undeclared; the oracle excused a credentials rejection only when the fence ended BmcAuthenticationFailed. docs/simulation.md",
    ),
    (
        710896,
        Kept::Moved(Shape::AttestedAfterLife),
        "A1 (soak 708000-717999; fixed in issue 47): an attestation's look read the pinned system, the node's, On, then the Systems collection timed out, and the discovery's failure dropped the reading: the attestation released a running machine. Discovery now fails with what answered before (words::discovery::Interrupted), and the identity step takes the node's system seen alive as a sighting (IdentityProblem::SeenThenFailed)",
    ),
    (
        793958,
        Kept::Reaches(Shape::NodeReplacedMidFence),
        "oracle stricter than R1's silence at release (soak 788000-797999): a ResourceDeletion pod was deleted 5 ms after the Node was replaced, the replacement landing between the check before that pod and its delete; a pod's deletion is not conditioned on the Node (the rule runs the checks again before each pod), so the oracle now judges a replacement up to the last Node read before the delete. docs/simulation.md",
    ),
    (
        794043,
        Kept::Reaches(Shape::NodeReplacedMidFence),
        "oracle stricter than R1's silence at release (soak 788000-797999): the class of 793958 (31 ms between the replacement and the delete). docs/simulation.md",
    ),
    (
        800655,
        Kept::Reaches(Shape::GuardSawPowerOn),
        "R2 (soak 798000-802999; the same code on 3de12a8): NHC timed a Reboot out while an admission webhook denied its taint removal, and a power glitch switched the released machine on; every reconcile failed on the denied Node write before the guard's round, so no ForceOff went. The guard now runs whether the timed-out fence's end fails or not",
    ),
];

const GUARD_SHARED_OFF: &str = "L6/L9: the guard switches off a shared outlet, switched on by hand after the release, while the other node it feeds is fenced too";

/// Seeds that pass, run with the budget because they reach what its own seeds reach rarely (found by
/// soaks, which print them): the guard switching a shared outlet off after the release, which each
/// must still do (the budget fails a seed that no longer does).
pub const COVERAGE: &[(u64, Kept, &str)] = &[
    (
        5,
        Kept::Reaches(Shape::VerifierKept),
        "coverage (issue 47): the binding verifier keeps a verification it made during the run, which the world counts as true (A2)",
    ),
    (
        64,
        Kept::Reaches(Shape::LevelObserved),
        "coverage (issue 47): the binding verifier reads a level's outlets and records what their draws say of the mapping (L5)",
    ),
    (8591, Kept::Reaches(Shape::SharedOutletOffAfterRelease), GUARD_SHARED_OFF),
    (15694, Kept::Reaches(Shape::SharedOutletOffAfterRelease), GUARD_SHARED_OFF),
    (15781, Kept::Reaches(Shape::SharedOutletOffAfterRelease), GUARD_SHARED_OFF),
    (24557, Kept::Reaches(Shape::SharedOutletOffAfterRelease), GUARD_SHARED_OFF),
    (37258, Kept::Reaches(Shape::SharedOutletOffAfterRelease), GUARD_SHARED_OFF),
    (672604, Kept::Reaches(Shape::SharedOutletOffAfterRelease), GUARD_SHARED_OFF),
    (
        1004,
        Kept::Reaches(Shape::ClockStepped),
        "coverage (issue 46): reaches ClockStepped, which no regression seed reaches any more, or a new rule's shape",
    ),
    (
        1150,
        Kept::Reaches(Shape::DiscoveryReadMidRun),
        "coverage (issue 46): reaches DiscoveryReadMidRun, which no regression seed reaches any more, or a new rule's shape",
    ),
    (
        1011,
        Kept::Reaches(Shape::FaultAfterPodDeleted),
        "coverage (issue 46): reaches FaultAfterPodDeleted, which no regression seed reaches any more, or a new rule's shape",
    ),
    (
        1082,
        Kept::Reaches(Shape::LifeAfterLastNodeRead),
        "coverage (issue 46): reaches LifeAfterLastNodeRead, which no regression seed reaches any more, or a new rule's shape",
    ),
    (
        1033,
        Kept::Reaches(Shape::PduTimeoutMidLevel),
        "coverage (issue 46): reaches PduTimeoutMidLevel, which no regression seed reaches any more, or a new rule's shape",
    ),
    (
        1021,
        Kept::Reaches(Shape::ReadyMidFence),
        "coverage (issue 46): reaches ReadyMidFence, which no regression seed reaches any more, or a new rule's shape",
    ),
    (
        28,
        Kept::Reaches(Shape::ReleaseRanOut),
        "coverage (issue 47, for 1028 which the binding verifier moved off it): reaches ReleaseRanOut, which no regression seed reaches any more",
    ),
    (
        1084,
        Kept::Reaches(Shape::EndedHeld),
        "coverage (issue 46): reaches EndedHeld, which no regression seed reaches any more, or a new rule's shape",
    ),
    (
        4689,
        Kept::Reaches(Shape::ReleasedThroughRotation),
        "coverage (issue 46): reaches ReleasedThroughRotation, which no regression seed reaches any more, or a new rule's shape",
    ),
    (
        1060,
        Kept::Reaches(Shape::MeterFellSilent),
        "coverage (issue 46): reaches MeterFellSilent, which no regression seed reaches any more, or a new rule's shape",
    ),
];
