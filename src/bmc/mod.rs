//! Talking to a node's BMC. `Bmc` is the small seam the fence uses; `RedfishClient` is the real one.

mod discovery;
pub(crate) mod json;
mod redfish;
pub mod tls;

use std::{fmt, future::Future};

pub use crate::words::discovery::{Answer, Discovery, MemberSet, Unreadable};
pub use crate::words::paths;
pub use discovery::discover;
pub use redfish::{RedfishClient, RedfishConfig};

pub use crate::words::power::{
    BmcError, Heard, IpmiFailure, MAX_MESSAGE_CHARS, MAX_VALUE_CHARS, PowerState, ResetType, SystemReading, bounded,
    off_known,
};

/// Why no client could be built for a BMC: nothing was sent. Every message names the endpoint
/// without its userinfo.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SetupError {
    /// Not an https URL, or one carrying credentials.
    #[error("{0}")]
    Endpoint(String),
    /// The trust (CA bundle, pin, serverName) cannot make a TLS configuration.
    #[error(transparent)]
    Tls(#[from] tls::TlsConfigError),
    /// The HTTP client itself could not be built.
    #[error("BMC client setup failed: {0}")]
    Http(String),
}

/// What the fence needs from a BMC.
pub trait Bmc: Send + Sync {
    /// scheme://host:port: one power action per origin at a time.
    fn origin(&self) -> String;
    /// Paths of every member of the Systems collection, following `Members@odata.nextLink` (bounded:
    /// a cycle, too many pages or too many members is a protocol error).
    fn systems(&self) -> impl Future<Output = Result<Vec<String>, BmcError>> + Send;
    /// Reads one system for discovery (by path, or by id under the Systems collection), following
    /// same-origin redirects: the reading is the system that answered.
    fn discover_system(&self, path_or_id: &str) -> impl Future<Output = Result<SystemReading, BmcError>> + Send;
    /// Reads one system during a fence: a redirect is a protocol error, and so is an answer that names
    /// another resource than the one asked for.
    fn system(&self, path_or_id: &str) -> impl Future<Output = Result<SystemReading, BmcError>> + Send;
    /// One `ComputerSystem.Reset` POST, never retried and never redirected. Returns the HTTP status.
    fn reset(&self, system: &SystemReading, reset: ResetType) -> impl Future<Output = Result<u16, BmcError>> + Send;
    /// L7: one fresh connection to the BMC's address, no retry, no pooled connection.
    fn heard(&self) -> impl Future<Output = Heard> + Send;
}

/// A password that never prints.
#[derive(Clone)]
pub struct Password(String);

impl Password {
    pub fn new(text: String) -> Self {
        Self(text)
    }

    pub(crate) fn reveal(&self) -> &str {
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
    fn passwords_never_print() {
        let credentials = Credentials { username: "admin".into(), password: Password::new("s3cret".into()) };
        assert!(!format!("{credentials:?}").contains("s3cret"));
    }
}
