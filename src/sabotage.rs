//! Test builds only: the one way each `sabotage_*` test of the simulator breaks the product, to show
//! that the oracle reports the invariant that exists to catch it (docs/simulation.md, "Sabotage").
//! Carried in the simulated world's settings ([`crate::driver::World::sabotage`]), never a global
//! (the budget runs seeds on several threads) and never a cargo feature (no binary can carry one).

/// What one sabotaged build gets wrong.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Sabotage {
    /// The product as it is.
    #[default]
    None,
    /// R2: the guard returns before its checked ForceOff: it never switches a released machine off.
    GuardSendsNothing,
}

impl Sabotage {
    /// Every sabotage, by name for `SIM_SABOTAGE` (docs/simulation.md).
    pub const ALL: &[Sabotage] = &[Sabotage::GuardSendsNothing];
}
