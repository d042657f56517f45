//! Talking to a node's BMC. `Bmc` is the small seam the fence uses; `RedfishClient` is the real one.

mod redfish;
pub mod tls;

use std::{fmt, future::Future};

pub use redfish::{RedfishClient, RedfishConfig};

/// A Redfish `PowerState`. Only `Off` counts as off: everything else, a missing value or an error
/// means not off (Ironic's mapping of `PoweringOff` to off is unsafe for fencing).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PowerState {
    On,
    Off,
    PoweringOn,
    PoweringOff,
    Paused,
    /// A value this coroner does not know; never treated as off.
    Other(String),
}

impl PowerState {
    pub fn parse(text: &str) -> Self {
        match text {
            "On" => Self::On,
            "Off" => Self::Off,
            "PoweringOn" => Self::PoweringOn,
            "PoweringOff" => Self::PoweringOff,
            "Paused" => Self::Paused,
            other => Self::Other(other.to_owned()),
        }
    }

    pub fn as_str(&self) -> &str {
        match self {
            Self::On => "On",
            Self::Off => "Off",
            Self::PoweringOn => "PoweringOn",
            Self::PoweringOff => "PoweringOff",
            Self::Paused => "Paused",
            Self::Other(other) => other,
        }
    }
}

impl fmt::Display for PowerState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One read of a `ComputerSystem`: who it says it is and its power.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SystemReading {
    /// The system's `Id`.
    pub id: String,
    /// The resource path it was read from (after same-host redirects).
    pub path: String,
    pub uuid: String,
    pub power_state: PowerState,
    /// `Actions["#ComputerSystem.Reset"].target`, when advertised.
    pub reset_target: Option<String>,
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

#[derive(Debug, thiserror::Error)]
pub enum BmcError {
    #[error("BMC unreachable: {0}")]
    Unreachable(String),
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
}

impl BmcError {
    /// Used as Event reason suffix and metric label.
    pub fn category(&self) -> &'static str {
        match self {
            Self::Unreachable(_) => "unreachable",
            Self::Tls(_) => "tls",
            Self::Unauthorized(_) => "unauthorized",
            Self::Status { .. } => "http-status",
            Self::Protocol { .. } => "protocol",
            Self::CrossHostRedirect(_) => "redirect",
            Self::Setup(_) => "setup",
        }
    }

    /// Transport trouble and 5xx answers may clear by themselves; everything else needs a human.
    pub fn is_transient(&self) -> bool {
        match self {
            Self::Unreachable(_) => true,
            // 408 and 429 (a BMC polled every second may rate-limit) clear by themselves too.
            Self::Status { status, .. } => *status >= 500 || *status == 408 || *status == 429,
            _ => false,
        }
    }
}

/// What the fence needs from a BMC.
pub trait Bmc: Send + Sync {
    /// Paths of the members of the Systems collection.
    fn systems(&self) -> impl Future<Output = Result<Vec<String>, BmcError>> + Send;
    /// Reads one system (by path, or by id under the Systems collection).
    fn system(&self, path_or_id: &str) -> impl Future<Output = Result<SystemReading, BmcError>> + Send;
    /// One `ComputerSystem.Reset` POST, never retried. Returns the HTTP status.
    fn reset(&self, system: &SystemReading, reset: ResetType) -> impl Future<Output = Result<u16, BmcError>> + Send;
}

/// The system a BMC's fence goes through: the pinned `Systems/{id}`, else the only system, else the one
/// whose UUID names the node (either byte order). `Ok(Err(uuids))` when several systems exist and none
/// matches; `uuids` lists what they reported.
pub async fn find_system<B: Bmc>(
    bmc: &B,
    pinned: Option<&str>,
    node_uuid: &str,
) -> Result<Result<SystemReading, Vec<String>>, BmcError> {
    if let Some(id) = pinned {
        return bmc.system(id).await.map(Ok);
    }
    let members = bmc.systems().await?;
    if let [only] = members.as_slice() {
        return bmc.system(only).await.map(Ok);
    }
    let mut systems = Vec::with_capacity(members.len());
    for member in &members {
        systems.push(bmc.system(member).await?);
    }
    Ok(crate::identity::select_system(&systems, |s| s.uuid.as_str(), node_uuid)
        .cloned()
        .ok_or_else(|| systems.into_iter().map(|s| s.uuid).collect()))
}

/// A password that never prints.
#[derive(Clone)]
pub struct Password(String);

impl Password {
    pub fn new(text: String) -> Self {
        Self(text)
    }

    fn reveal(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Password {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

#[derive(Clone, Debug)]
pub struct Credentials {
    pub username: String,
    pub password: Password,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_off_is_off() {
        assert_eq!(PowerState::parse("Off"), PowerState::Off);
        for text in ["On", "PoweringOff", "PoweringOn", "Paused", "off", "OFF", "", "Standby"] {
            assert_ne!(PowerState::parse(text), PowerState::Off, "{text:?}");
        }
    }

    #[test]
    fn passwords_never_print() {
        let credentials = Credentials { username: "admin".into(), password: Password::new("s3cret".into()) };
        assert!(!format!("{credentials:?}").contains("s3cret"));
    }
}
