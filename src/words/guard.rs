//! The guard's condition and the reasons both the fence (at its release) and the guard write.

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

use crate::api::conditions;

/// The guard's condition: `True` (reads Off), `False` (`ReleasedMachinePoweredOn`), `Unknown`
/// (`GuardBlind`).
pub const GUARD: &str = "Guard";
/// A ForceOff the guard decided and then did not send, with the typed cause.
pub const GUARD_HELD: &str = super::event::Event::GuardHeld.as_str();
pub const MACHINE_OFF: &str = super::event::Event::MachineOff.as_str();
pub const MACHINE_OFF_MESSAGE: &str = "the released machine reads Off";

/// W1: a release that rests on the proof's readings starts guarded with what they showed: the
/// machine reads Off (the proof's last reading, taken right before the release). The guard's first
/// reading then writes and announces only what differs from it.
pub fn armed_at_release(conditions: &mut Vec<Condition>, now: Timestamp) {
    conditions::set(conditions, GUARD, conditions::TRUE, MACHINE_OFF, MACHINE_OFF_MESSAGE, now);
}
