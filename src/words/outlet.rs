//! A PDU outlet's words: what it reports of its relay and its meter, the commands coroner sends, why a
//! reading is not an Off, and a PDU's errors by class. Every text from a device is [`bounded`].

use std::{fmt, time::Duration};

use super::power::{BmcError, MAX_VALUE_CHARS, bounded};

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
    use super::*;

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
}
