//! PDU outlets: the fencing level for a machine whose BMC died with it. When the BMC cannot prove
//! Off, the outlets feeding the machine can, by reading Off after coroner switched them off.
//!
//! Two kinds, one small API ([`Outlets`]): a Redfish PowerDistribution outlet ([`redfish`]) and an
//! APC rPDU outlet over SNMP ([`snmp`]). Only immediate On and Off are ever sent: never a reboot, a
//! power cycle or a delayed command, whose end state or timing the fence cannot read back.
//!
//! [`proves_off`] is the pure rule that decides whether a reading is an Off a fence may rely on: it
//! reads Off, no command is pending, and where the outlet is metered its draw is at most the floor
//! (a welded relay reads Off and still feeds the machine). A machine with two supplies is Off only
//! when every outlet feeding it proves Off: that is the level's rule, not this module's.

pub mod redfish;
pub mod snmp;

use std::{fmt, future::Future};

pub use crate::words::outlet::{NotOff, OutletCommand, OutletReading, OutletState, PduError};

/// What the level device adapter needs from a PDU: one outlet's reading, and one command to it. A
/// command's answer proves nothing; only a later [`Outlets::read`] does.
pub trait Outlets: Send + Sync {
    /// How this kind of PDU names an outlet.
    type Outlet: fmt::Display + Send + Sync;

    fn read(&self, outlet: &Self::Outlet) -> impl Future<Output = Result<OutletReading, PduError>> + Send;
    fn switch(
        &self,
        outlet: &Self::Outlet,
        command: OutletCommand,
    ) -> impl Future<Output = Result<(), PduError>> + Send;
}
