//! Test builds only: the one way each `sabotage_*` test of the simulator breaks the product, to show
//! that the oracle reports the invariant that exists to catch it (docs/simulation.md, "Sabotage").
//! Carried in the simulated world's settings ([`crate::driver::World::sabotage`], and the decision's
//! [`crate::fence::Context`]), never a global (the budget runs seeds on several threads) and never a
//! cargo feature (no binary can carry one).

/// What one sabotaged build gets wrong.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Sabotage {
    /// The product as it is.
    #[default]
    None,
    /// P4: a reading that breaks the run on the gap rule extends it instead.
    BrokenRunAccepted,
    /// The proof lives in one process: a new process resumes the run (and the proof) its status shows.
    ProofResumed,
    /// L1: a level reads only its first outlet.
    PartialLevel,
    /// Silence at release: the release writes on the Node without its checks.
    ReleaseUnchecked,
    /// A1: the attested release does not see the fence's last reading of life.
    AttestationIgnoresLife,
    /// No `On` under an out-of-service taint: the `On` skips its taint check.
    OnUnderTaint,
    /// Taints: coroner's finalizer removes every taint with its keys, whoever added it.
    TaintsByKey,
    /// Taints: coroner's out-of-service taint comes off as soon as its release is written.
    ReleaseUndone,
    /// Crash safety: the fence's reset goes out before its intent is written.
    ResetBeforeIntent,
    /// The client resets the BMC's first system, whatever system the fence proved.
    ResetToFirstSystem,
    /// P1: the power action does not look at the node's Lease (gates, hold, the last re-check).
    LeaseUnchecked,
    /// One fence per node: a remediation does not see its node's other remediations.
    SiblingsUnseen,
    /// R3: the guard does not see the approval of its release.
    ApprovalUnseen,
    /// `Succeeded` is set by every reason, also once `True` or `False`.
    SucceededFlips,
    /// R2: the guard returns before its checked ForceOff: it never switches a released machine off.
    GuardSendsNothing,
    /// The bootID check never reports `FenceDidNotTakeEffect`.
    BootIdUnchecked,
    /// Liveness: a proven fence never writes its release (the proof is taken as expired).
    ReleaseNeverWritten,
    /// Crash safety: a phase's deadline never passes.
    DeadlineNeverPasses,
    /// L4: the outlet client switches an outlet On when asked for Off.
    OutletSwitchedOn,
    /// L6: a shared outlet is switched without the co-fed check.
    SharedUnchecked,
}

impl Sabotage {
    /// Every sabotage, by name for `SIM_SABOTAGE` (docs/simulation.md).
    pub const ALL: &[Sabotage] = &[
        Sabotage::BrokenRunAccepted,
        Sabotage::ProofResumed,
        Sabotage::PartialLevel,
        Sabotage::ReleaseUnchecked,
        Sabotage::AttestationIgnoresLife,
        Sabotage::OnUnderTaint,
        Sabotage::TaintsByKey,
        Sabotage::ReleaseUndone,
        Sabotage::ResetBeforeIntent,
        Sabotage::ResetToFirstSystem,
        Sabotage::LeaseUnchecked,
        Sabotage::SiblingsUnseen,
        Sabotage::ApprovalUnseen,
        Sabotage::SucceededFlips,
        Sabotage::GuardSendsNothing,
        Sabotage::BootIdUnchecked,
        Sabotage::ReleaseNeverWritten,
        Sabotage::DeadlineNeverPasses,
        Sabotage::OutletSwitchedOn,
        Sabotage::SharedUnchecked,
    ];
}
