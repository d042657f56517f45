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

use std::{cmp::Ordering, fmt, future::Future, time::Duration};

use crate::bmc::{BmcError, MAX_VALUE_CHARS, bounded};

/// What an outlet reports about its relay.
#[derive(Clone, Debug, PartialEq)]
pub enum OutletState {
    On,
    Off,
    /// A value this coroner does not know (kept [`bounded`]); never Off.
    Unknown(String),
}

impl OutletState {
    /// A value from a device, shown [`bounded`] when it is none of the known ones.
    pub fn unknown(text: &str) -> Self {
        Self::Unknown(bounded(text, MAX_VALUE_CHARS))
    }
}

impl fmt::Display for OutletState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::On => f.write_str("On"),
            Self::Off => f.write_str("Off"),
            Self::Unknown(text) => f.write_str(text),
        }
    }
}

/// One read of an outlet.
#[derive(Clone, Debug, PartialEq)]
pub struct OutletReading {
    pub state: OutletState,
    /// A command is pending (APC `commandPending`, Redfish `PowerStateInTransition`): the state may
    /// still change by itself, so it proves nothing.
    pub pending: bool,
    /// The outlet's power draw in watts, when it is metered and the meter answers.
    pub watts: Option<f64>,
    /// The outlet reports a meter (a Redfish `PowerWatts` sensor): one that gives no reading is
    /// silent, not idle.
    pub metered: bool,
}

/// The only commands coroner sends to an outlet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutletCommand {
    Off,
    On,
}

/// Why a reading is not an Off a fence may rely on.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum NotOff {
    #[error("the outlet reads {0}")]
    Reads(OutletState),
    #[error("the outlet reads Off with a command pending")]
    CommandPending,
    #[error("the outlet reads Off but draws {watts} W, above the {floor} W floor (a welded relay?)")]
    Drawing { watts: f64, floor: f64 },
    /// L4: a meter that gives no reading (or no longer gives one, [`crate::levels::level_proves_off_since`])
    /// may hide a draw.
    #[error("the outlet reads Off but its meter gives no reading (it may hide a draw)")]
    MeterSilent,
}

/// Whether `reading` proves the outlet Off: it reads Off, no command is pending, and a metered draw is
/// at most `floor_watts`. A draw or a floor that is not a number proves nothing, and neither does a
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

/// Every text in a `PduError` that came from the device is [`bounded`]; none carries a credential
/// (a password, a community, a USM key).
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum PduError {
    #[error("PDU did not answer within {elapsed:?} ({tries} tries)")]
    Timeout { elapsed: Duration, tries: u32 },
    #[error("PDU unreachable: {0}")]
    Unreachable(String),
    #[error("PDU certificate not trusted: {0}")]
    Tls(String),
    #[error("PDU rejected the credentials: {0}")]
    Unauthorized(String),
    #[error("PDU answered HTTP {status} to {method} {path}{detail}")]
    Http { method: &'static str, path: String, status: u16, detail: String },
    #[error("PDU answered SNMP error {status}")]
    Snmp { status: String },
    #[error("PDU answered with an unusable {0}")]
    Protocol(String),
    #[error("PDU redirected to another host ({0}); refused")]
    CrossHostRedirect(String),
    #[error("PDU model not supported: {0}")]
    UnsupportedModel(String),
    #[error("PDU has no outlet {0}")]
    NoSuchOutlet(String),
    #[error("PDU client setup failed: {0}")]
    Setup(String),
}

impl PduError {
    /// Used as Event reason suffix and metric label.
    pub fn category(&self) -> &'static str {
        match self {
            Self::Timeout { .. } => "timeout",
            Self::Unreachable(_) => "unreachable",
            Self::Tls(_) => "tls",
            Self::Unauthorized(_) => "unauthorized",
            Self::Http { .. } => "http-status",
            Self::Snmp { .. } => "snmp-error",
            Self::Protocol(_) => "protocol",
            Self::CrossHostRedirect(_) => "redirect",
            Self::UnsupportedModel(_) => "unsupported-model",
            Self::NoSuchOutlet(_) => "no-such-outlet",
            Self::Setup(_) => "setup",
        }
    }
}

/// The Redfish plumbing is the BMC client's; its errors keep their class and their (bounded) text.
impl From<BmcError> for PduError {
    fn from(error: BmcError) -> Self {
        match error {
            BmcError::Unreachable(text) | BmcError::Unconnected(text) => Self::Unreachable(text),
            BmcError::Tls(text) => Self::Tls(text),
            BmcError::Unauthorized(status) => Self::Unauthorized(format!("HTTP {status}")),
            BmcError::Status { method, path, status, detail } => Self::Http { method, path, status, detail },
            BmcError::Protocol { path, problem } => Self::Protocol(format!("answer at {path}: {problem}")),
            BmcError::CrossHostRedirect(origin) => Self::CrossHostRedirect(origin),
            BmcError::Setup(text) => Self::Setup(text),
            // The Redfish client never answers with an IPMI error; kept whole should it ever.
            BmcError::Ipmi(error) => Self::Protocol(error.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn reading(state: OutletState, pending: bool, watts: Option<f64>) -> OutletReading {
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
        assert_eq!(proves_off(&reading(OutletState::Off, false, None), 5.0), Ok(()));
        assert_eq!(proves_off(&reading(OutletState::Off, false, Some(5.0)), 5.0), Ok(()));
        assert_eq!(proves_off(&reading(OutletState::Off, false, Some(0.0)), 5.0), Ok(()));
        assert_eq!(proves_off(&reading(OutletState::On, false, None), 5.0), Err(NotOff::Reads(OutletState::On)));
        let unknown = OutletState::unknown("Standby");
        assert_eq!(proves_off(&reading(unknown.clone(), false, None), 5.0), Err(NotOff::Reads(unknown)));
        assert_eq!(proves_off(&reading(OutletState::Off, true, None), 5.0), Err(NotOff::CommandPending));
        assert_eq!(
            proves_off(&reading(OutletState::Off, false, Some(230.5)), 5.0),
            Err(NotOff::Drawing { watts: 230.5, floor: 5.0 })
        );
    }

    #[test]
    fn a_draw_or_a_floor_that_is_not_a_number_proves_nothing() {
        assert!(proves_off(&reading(OutletState::Off, false, Some(f64::NAN)), 5.0).is_err());
        assert!(proves_off(&reading(OutletState::Off, false, Some(1.0)), f64::NAN).is_err());
        assert!(proves_off(&reading(OutletState::Off, false, Some(f64::INFINITY)), 5.0).is_err());
        // Without a meter there is no draw to compare: the relay's state is all there is.
        assert_eq!(proves_off(&reading(OutletState::Off, false, None), f64::NAN), Ok(()));
    }

    #[test]
    fn reasons_read_as_sentences() {
        assert_eq!(NotOff::Reads(OutletState::On).to_string(), "the outlet reads On");
        let welded = NotOff::Drawing { watts: 180.0, floor: 5.0 };
        assert_eq!(welded.to_string(), "the outlet reads Off but draws 180 W, above the 5 W floor (a welded relay?)");
    }

    #[test]
    fn an_unknown_state_is_kept_bounded() {
        let OutletState::Unknown(shown) = OutletState::unknown(&format!("\u{1b}[2J{}", "x".repeat(500))) else {
            panic!("not Unknown")
        };
        assert_eq!(shown.chars().count(), MAX_VALUE_CHARS);
        assert!(!shown.chars().any(char::is_control));
    }

    #[test]
    fn bmc_errors_keep_their_class_as_pdu_errors() {
        let cases = [
            (BmcError::Unreachable("refused".into()), "unreachable"),
            (BmcError::Tls("self-signed".into()), "tls"),
            (BmcError::Unauthorized(401), "unauthorized"),
            (BmcError::Status { method: "POST", path: "/x".into(), status: 400, detail: String::new() }, "http-status"),
            (BmcError::Protocol { path: "/x".into(), problem: "no PowerState".into() }, "protocol"),
            (BmcError::CrossHostRedirect("https://other".into()), "redirect"),
            (BmcError::Setup("bad".into()), "setup"),
        ];
        for (bmc, category) in cases {
            let pdu = PduError::from(bmc.clone());
            assert_eq!(pdu.category(), category, "{bmc:?}");
            assert!(pdu.to_string().starts_with("PDU "), "{pdu}");
        }
    }

    fn state() -> impl Strategy<Value = OutletState> {
        prop_oneof![Just(OutletState::On), Just(OutletState::Off), "[ -~]{0,12}".prop_map(|t| OutletState::unknown(&t))]
    }

    fn number() -> impl Strategy<Value = f64> {
        prop_oneof![any::<f64>(), -10.0..1000.0f64, Just(f64::NAN), Just(0.0)]
    }

    proptest! {
        #[test]
        fn proves_off_accepts_exactly_a_settled_off_within_the_floor(
            state in state(), pending in any::<bool>(), watts in proptest::option::of(number()), floor in number(),
            metered in any::<bool>()
        ) {
            let reading = OutletReading { metered: metered || watts.is_some(), ..reading(state.clone(), pending, watts) };
            let expected = state == OutletState::Off
                && !pending
                && watts.map_or(!reading.metered, |w| w <= floor);
            prop_assert_eq!(proves_off(&reading, floor).is_ok(), expected);
        }
    }
}
