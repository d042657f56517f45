//! A device's words: power states, one reading of a system, the resets coroner sends, and a device's
//! errors by class (what the loop does about them). Every text that came from a device is [`bounded`].

use std::fmt;

use crate::{api::PowerAction, words::reason::Reason};

/// The longest BMC-supplied value (an unknown power state, a bad UUID) shown as it was sent.
pub const MAX_VALUE_CHARS: usize = 64;
/// The longest BMC-supplied message (a Redfish error's text) shown.
pub const MAX_MESSAGE_CHARS: usize = 200;

/// A BMC-controlled string made fit for status, conditions, Events and logs: control characters and
/// bidirectional-text overrides become U+FFFD, and the text is cut to `limit` characters (`…` marks
/// the cut). A BMC decides what it sends; it must not decide what an operator's terminal does.
pub fn bounded(text: &str, limit: usize) -> String {
    let mut chars = text.chars().map(|c| if c.is_control() || is_bidi_control(c) { '\u{fffd}' } else { c });
    let mut shown: String = chars.by_ref().take(limit).collect();
    if chars.next().is_some() {
        shown.pop();
        shown.push('…');
    }
    shown
}

fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// A Redfish `PowerState`. Only `Off` counts as off: everything else, a missing value or an error
/// means not off (Ironic's mapping of `PoweringOff` to off is unsafe for fencing).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PowerState {
    On,
    Off,
    PoweringOn,
    PoweringOff,
    Paused,
    /// `Off`, from a BMC whose `Status.State` (the value kept, bounded) says it does not know the
    /// system (`Absent`, `UnavailableOffline`, `Updating`, …): never treated as off (P4b).
    OffUnknown(String),
    /// A value this coroner does not know; never treated as off.
    Other(String),
}

impl PowerState {
    /// An unknown value is kept [`bounded`]: it is shown in status and Events.
    pub fn parse(text: &str) -> Self {
        match text {
            "On" => Self::On,
            "Off" => Self::Off,
            "PoweringOn" => Self::PoweringOn,
            "PoweringOff" => Self::PoweringOff,
            "Paused" => Self::Paused,
            other => Self::Other(bounded(other, MAX_VALUE_CHARS)),
        }
    }

    /// A `PowerState` with the system's `Status.State`: `Off` counts only where the BMC knows
    /// ([`off_known`]).
    pub fn with_state(text: &str, state: Option<&str>) -> Self {
        match Self::parse(text) {
            Self::Off if !off_known(state) => Self::OffUnknown(bounded(state.unwrap_or_default(), MAX_VALUE_CHARS)),
            power => power,
        }
    }

    /// Whether a power state as recorded in status (its [`Display`](fmt::Display)) showed the machine
    /// running or starting: `Off` did not, and neither did an `Off` the BMC did not vouch for.
    pub fn recorded_shows_life(recorded: &str) -> bool {
        recorded != "Off" && !recorded.starts_with(OFF_UNKNOWN_PREFIX)
    }

    pub fn as_str(&self) -> &str {
        match self {
            Self::On => "On",
            Self::Off => "Off",
            Self::PoweringOn => "PoweringOn",
            Self::PoweringOff => "PoweringOff",
            Self::Paused => "Paused",
            Self::OffUnknown(_) => "OffUnknown",
            Self::Other(other) => other,
        }
    }
}

const OFF_UNKNOWN_PREFIX: &str = "Off with Status.State ";

impl fmt::Display for PowerState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::OffUnknown(state) => write!(f, "{OFF_UNKNOWN_PREFIX}{state}"),
            other => f.write_str(other.as_str()),
        }
    }
}

/// P4b: a `PowerState: Off` counts only when the system's `Status.State` is absent or one a
/// powered-off system legitimately reports: `Enabled`, `Disabled` (OpenBMC reports it for a host that
/// is off), `StandbyOffline`, `StandbySpare`. `Absent`, `UnavailableOffline`, `Starting`, `InTest`,
/// `Updating`, `Deferring`, `Quiesced` and any value this coroner does not know mean the BMC does not
/// vouch for the power it shows.
pub fn off_known(state: Option<&str>) -> bool {
    matches!(state, None | Some("Enabled" | "Disabled" | "StandbyOffline" | "StandbySpare"))
}

/// One read of a `ComputerSystem`: who it says it is and its power. Every string in it passed the
/// parser's bounds: it may go into status and Events as it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SystemReading {
    /// The system's `Id`.
    pub id: String,
    /// The system that answered: its `@odata.id`, which must be where it answered (after the
    /// same-origin redirects discovery follows). This path is what is pinned, proven and reset.
    pub path: String,
    /// The `UUID` as reported (trimmed), a valid UUID in one of its spellings.
    pub uuid: String,
    pub power_state: PowerState,
    /// `Actions["#ComputerSystem.Reset"].target`, when advertised.
    pub reset_target: Option<String>,
    /// The same identity in the other spellings its protocol allows: an IPMI System GUID in its two
    /// other layouts ([`crate::identity::other_spellings_clear`]); empty for a Redfish UUID.
    pub aliases: Vec<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResetType {
    /// The only reset coroner uses to power off: immediate, and it ends Off.
    ForceOff,
    On,
}

impl ResetType {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ForceOff => "ForceOff",
            Self::On => "On",
        }
    }
}

impl From<PowerAction> for ResetType {
    fn from(action: PowerAction) -> Self {
        match action {
            PowerAction::ForceOff => Self::ForceOff,
            PowerAction::On => Self::On,
        }
    }
}

impl From<ResetType> for PowerAction {
    fn from(reset: ResetType) -> Self {
        match reset {
            ResetType::ForceOff => Self::ForceOff,
            ResetType::On => Self::On,
        }
    }
}

/// An IPMI BMC's failure as the loop sees it: its class and its own words (`crate::ipmi` converts).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IpmiFailure {
    /// Event reason suffix and metric label.
    pub category: &'static str,
    /// The condition reason a fence that ends on it gives.
    pub reason: Reason,
    pub transient: bool,
    /// No Chassis Control went out: the session proved another machine (or none) before it, or
    /// none was sent in time.
    pub sent_nothing: bool,
    pub message: String,
}

impl fmt::Display for IpmiFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// Every text in a `BmcError` that came from the BMC is [`bounded`], and no URL in one carries userinfo.
#[derive(Clone, Debug, thiserror::Error)]
pub enum BmcError {
    #[error("BMC unreachable: {0}")]
    Unreachable(String),
    /// No connection came about (refused, no route, no TLS session): the request never left.
    #[error("BMC unreachable: {0}")]
    Unconnected(String),
    #[error("BMC certificate not trusted: {0}")]
    Tls(String),
    #[error("BMC rejected the credentials (HTTP {0})")]
    Unauthorized(u16),
    #[error("BMC answered HTTP {status} to {method} {path}{detail}")]
    Status { method: &'static str, path: String, status: u16, detail: String },
    #[error("BMC answered {path} with an unusable resource: {problem}")]
    Protocol { path: String, problem: String },
    #[error("BMC redirected to another host ({0}); refused")]
    CrossHostRedirect(String),
    #[error("BMC client setup failed: {0}")]
    Setup(String),
    /// An IPMI BMC's failure, by class and in its own words.
    #[error("{0}")]
    Ipmi(IpmiFailure),
}

impl BmcError {
    /// Used as Event reason suffix and metric label.
    pub fn category(&self) -> &'static str {
        match self {
            Self::Unreachable(_) | Self::Unconnected(_) => "unreachable",
            Self::Tls(_) => "tls",
            Self::Unauthorized(_) => "unauthorized",
            Self::Status { .. } => "http-status",
            Self::Protocol { .. } => "protocol",
            Self::CrossHostRedirect(_) => "redirect",
            Self::Setup(_) => "setup",
            Self::Ipmi(failure) => failure.category,
        }
    }

    /// The condition reason a fence that ends on this error gives.
    pub fn reason(&self) -> Reason {
        match self {
            Self::Unreachable(_) | Self::Unconnected(_) => Reason::BmcUnreachable,
            Self::Tls(_) => Reason::BmcTlsVerificationFailed,
            Self::Unauthorized(_) => Reason::BmcAuthenticationFailed,
            Self::Status { .. } if self.is_transient() => Reason::BmcUnreachable,
            Self::Status { .. } | Self::Protocol { .. } | Self::CrossHostRedirect(_) => Reason::BmcProtocolError,
            Self::Setup(_) => Reason::BindingInvalid,
            Self::Ipmi(failure) => failure.reason,
        }
    }

    /// A power action that failed this way was never sent: no connection came about, or the IPMI
    /// session proved another machine (or none) before its Chassis Control.
    pub fn sent_nothing(&self) -> bool {
        match self {
            Self::Unconnected(_) => true,
            Self::Ipmi(failure) => failure.sent_nothing,
            _ => false,
        }
    }

    /// Transport trouble and 5xx answers may clear by themselves; everything else needs a human.
    pub fn is_transient(&self) -> bool {
        match self {
            Self::Unreachable(_) | Self::Unconnected(_) => true,
            // 408 and 429 (a BMC polled every second may rate-limit) clear by themselves too.
            Self::Status { status, .. } => *status >= 500 || *status == 408 || *status == 429,
            Self::Ipmi(failure) => failure.transient,
            _ => false,
        }
    }
}

/// L7: what a fresh connection to a BMC's address heard, once a level's outlets read Off.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Heard {
    /// Something at the address answered (a refused connection is an answer): the BMC has power.
    Answered,
    /// No route, or no answer within the request timeout: what a BMC without power gives.
    Silent,
    /// The question could not be put (the name does not resolve, this process's own session is
    /// busy, a local error): no sign either way.
    NotAsked(String),
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::PowerAction;

    #[test]
    fn only_off_is_off() {
        assert_eq!(PowerState::parse("Off"), PowerState::Off);
        for text in ["On", "PoweringOff", "PoweringOn", "Paused", "off", "OFF", "", "Standby"] {
            assert_ne!(PowerState::parse(text), PowerState::Off, "{text:?}");
        }
    }

    #[test]
    fn off_counts_only_when_status_state_says_the_bmc_knows_the_system() {
        for state in [None, Some("Enabled"), Some("Disabled"), Some("StandbyOffline"), Some("StandbySpare")] {
            assert_eq!(PowerState::with_state("Off", state), PowerState::Off, "{state:?}");
        }
        for state in
            ["Absent", "UnavailableOffline", "Starting", "InTest", "Updating", "Deferring", "Quiesced", "enabled", ""]
        {
            let power = PowerState::with_state("Off", Some(state));
            assert_eq!(power, PowerState::OffUnknown(state.to_owned()));
            assert_eq!(power.to_string(), format!("Off with Status.State {state}"));
        }
        // The state never makes anything else Off.
        assert_eq!(PowerState::with_state("On", Some("Absent")), PowerState::On);
        assert_eq!(PowerState::with_state("On", Some("Enabled")), PowerState::On);
    }

    #[test]
    fn an_off_the_bmc_did_not_vouch_for_is_no_sign_of_life_in_a_record() {
        assert!(!PowerState::recorded_shows_life("Off"));
        assert!(!PowerState::recorded_shows_life(&PowerState::OffUnknown("Absent".into()).to_string()));
        for life in ["On", "PoweringOn", "PoweringOff", "Paused", "Unknown", "OffUnknown"] {
            assert!(PowerState::recorded_shows_life(life), "{life}");
        }
    }

    #[test]
    fn power_actions_and_reset_types_convert_both_ways() {
        for (action, reset) in [(PowerAction::ForceOff, ResetType::ForceOff), (PowerAction::On, ResetType::On)] {
            assert_eq!(ResetType::from(action), reset);
            assert_eq!(PowerAction::from(reset), action);
            assert_eq!(action.as_str(), reset.as_str());
        }
    }

    #[test]
    fn an_unknown_power_value_is_kept_bounded() {
        let hostile = format!("\u{1b}[2J{}", "x".repeat(10_000));
        let PowerState::Other(shown) = PowerState::parse(&hostile) else { panic!("not Other") };
        assert_eq!(shown.chars().count(), MAX_VALUE_CHARS);
        assert!(shown.starts_with("\u{fffd}[2J") && shown.ends_with('…'));
    }

    #[test]
    fn bounded_text_has_no_control_characters_and_a_marked_cut() {
        assert_eq!(bounded("System.Embedded.1", 64), "System.Embedded.1");
        assert_eq!(bounded("a\nb\r\u{7}c\u{202e}d", 64), "a\u{fffd}b\u{fffd}\u{fffd}c\u{fffd}d");
        assert_eq!(bounded("abcdef", 4), "abc…");
        assert_eq!(bounded("abcd", 4), "abcd");
        assert_eq!(bounded("", 4), "");
    }
}
