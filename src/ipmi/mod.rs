//! An IPMI v2.0 RMCP+ ("lanplus") client for the three things a fence needs from a BMC: who the
//! machine is, its power, and power down / power up.
//!
//! - **RMCP+ only, cipher suite 3 only.** The caller names the cipher suite; only 3 (RAKP-HMAC-SHA1,
//!   HMAC-SHA1-96, AES-CBC-128) is spoken, and [`IpmiClient::new`] refuses any other with
//!   [`SetupProblem::CipherSuite`] before anything is sent (suite 0, no authentication, above all).
//!   Suite 17 (SHA-256) is not shipped: no test peer speaks it (ipmi_sim refuses it, pyghmi answers
//!   suite 3), and an untested suite is no suite. The Open Session Request proposes exactly suite 3's
//!   algorithms and an answer naming any others is refused: a BMC cannot downgrade the session. No
//!   IPMI 1.5 session, no fallback, and no `Get Channel Cipher Suites` (ipmi_sim never answers it).
//!   The one sessionless query, `Get Channel Authentication Capabilities` with the IPMI v2.0
//!   extended-data bit, goes in IPMI 1.5 framing with authentication type none, as ipmitool sends
//!   it (Debian's ipmi_sim 2.0.33 drops it RMCP+-framed); its answer, unauthenticated either way, is
//!   read in either framing and decides only that the channel speaks IPMI v2.0 (and whether the BMC
//!   reports a K_G of its own).
//! - **Session.** Open Session, RAKP 1–4 with both the BMC's RAKP 2 HMAC (proof it knows the
//!   password) and its RAKP 4 integrity check (proof it derived the same session key, i.e. the same
//!   K_G) verified; then `Set Session Privilege Level` to [`Privilege::Operator`] (default) or
//!   Administrator. K_G defaults to the password (IPMI v2.0 §13.33). Every reply in the session is
//!   dropped unless its AuthCode verifies, its AES pad is well formed, its session ID is ours, its
//!   sequence number is new and within 16 of the highest seen, and it answers the request sent
//!   (network function, command, sequence).
//! - **Identity.** The RAKP 2 managed-system GUID is covered by the BMC's HMAC; [`Session::identity`]
//!   reads `Get System GUID` inside the authenticated session and returns the GUID only when both
//!   agree ([`IpmiError::GuidsDiffer`] otherwise; completion code 0xC1 is
//!   [`IpmiError::IdentityUnavailable`]). A sessionless GUID proves nothing and is never asked for.
//!   [`Guid`] spells the bytes in the three layouts firmware uses ([`guid`]).
//! - **Power.** `Get Chassis Status` (power-on bit) and `Chassis Control` with power down or power up
//!   only: the API takes [`ResetType`], so cycle, hard reset, pulse and soft shutdown cannot be asked.
//!   A Chassis Control whose answer was lost is sent again (both are idempotent).
//! - **One session per BMC at a time from this process**: every client to the same address shares a
//!   semaphore, held from Open Session to Close Session ([`IpmiError::Busy`] past the time an
//!   operation can take). A BMC has few session slots, and a session whose client died stays open
//!   on it until the BMC's idle timeout (ipmi_sim: 30 s; pyghmi: never). So Close Session is always
//!   attempted: [`Session::close`] waits for its answer once, and a session dropped unclosed (an
//!   error path, a cancelled future) sends it from `Drop` without waiting.
//! - **Bounded.** Each request is sent at most `retries + 1` times and each wait is
//!   `request_timeout`; a session for identity, power down and read back is [`MAX_REQUESTS`]
//!   requests (setup and close included), so [`IpmiConfig::operation_budget`] bounds it.
//!
//! [`IpmiClient`]'s `identity`, `power` and `act` each open, use and close one session. A fence
//! that wants its proof and its action on the same authenticated session takes a [`Session`]
//! ([`IpmiClient::session`]) and calls `identity`, `act` and `power` on it, then `close`.
//!
//! Errors are [`IpmiError`], with the `category()` / `reason()` / `is_transient()` of
//! [`crate::bmc::BmcError`], into which it converts losslessly ([`crate::bmc::BmcError::Ipmi`]):
//! the fence keeps one error type, and an IPMI failure keeps its own words (a RAKP refusal is no
//! "HTTP 401").

pub mod guid;
mod rakp;
mod rmcp;
mod session;

use std::{
    collections::HashMap,
    fmt,
    net::SocketAddr,
    sync::{Arc, Mutex, OnceLock},
    time::Duration,
};

pub use guid::{Guid, GuidLayout, Spelling};
pub use rakp::RmcpStatus;
pub use rmcp::DecodeError;
pub use session::Session;
use tokio::sync::Semaphore;

use crate::{
    bmc::{Password, PowerState, ResetType, SystemReading},
    contract::Reason,
};

/// The requests a session sends for a fence's cycle: Get Channel Authentication Capabilities, Open
/// Session, RAKP 1, RAKP 3, Set Session Privilege Level, Get System GUID, Chassis Control, Get
/// Chassis Status, Close Session. [`IpmiClient`]'s own operations send 7.
pub const MAX_REQUESTS: u32 = 9;
/// IPMI v2.0 limits (RAKP 1's user name field, the 20-byte Kuid and K_G).
const MAX_USERNAME: usize = 16;
const MAX_KEY: usize = 20;
pub const DEFAULT_PORT: u16 = 623;
const SUITE_3: u8 = 3;

/// The session privilege to ask for. Chassis Control needs Operator.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Privilege {
    #[default]
    Operator,
    Administrator,
}

impl Privilege {
    /// The privilege level code (Open Session Request's "Requested Maximum Privilege Level").
    fn code(self) -> u8 {
        match self {
            Self::Operator => 0x03,
            Self::Administrator => 0x04,
        }
    }
}

impl fmt::Display for Privilege {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Operator => "Operator",
            Self::Administrator => "Administrator",
        })
    }
}

/// The BMC key K_G (at most 20 bytes; IPMI zero-pads it, as HMAC does). Never printed.
#[derive(Clone)]
pub struct BmcKey(Vec<u8>);

impl BmcKey {
    pub fn new(bytes: Vec<u8>) -> Self {
        Self(bytes)
    }

    /// A key written in hex, as `ipmitool -y` takes it.
    pub fn from_hex(text: &str) -> Result<Self, SetupProblem> {
        hex::decode(text.trim()).map(Self).map_err(|_| SetupProblem::BmcKeyNotHex)
    }

    /// A SHA-256 of the key, in hex: what a device digest may carry without carrying the key.
    pub fn digest_hex(&self) -> String {
        use sha2::{Digest, Sha256};
        hex::encode(Sha256::digest(&self.0))
    }
}

impl fmt::Debug for BmcKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

#[derive(Clone, Debug)]
pub struct IpmiConfig {
    /// The BMC's host name or IP address.
    pub address: String,
    pub port: u16,
    /// The cipher suite ID asked for; only 3 is spoken.
    pub cipher_suite: u8,
    pub privilege: Privilege,
    pub username: String,
    pub password: Password,
    /// None: K_G is the password.
    pub kg: Option<BmcKey>,
    /// How long one datagram waits for its answer.
    pub request_timeout: Duration,
    /// How often a request is sent again when no answer came.
    pub retries: u32,
}

impl IpmiConfig {
    /// Port 623, cipher suite 3, Operator, no K_G, 1 s per attempt, 2 retries.
    pub fn new(address: impl Into<String>, username: impl Into<String>, password: Password) -> Self {
        Self {
            address: address.into(),
            port: DEFAULT_PORT,
            cipher_suite: SUITE_3,
            privilege: Privilege::Operator,
            username: username.into(),
            password,
            kg: None,
            request_timeout: Duration::from_secs(1),
            retries: 2,
        }
    }

    /// The longest a session of [`MAX_REQUESTS`] requests can take: every request sent every time,
    /// each waited out. Also how long a session waits for this process's other session to the BMC.
    pub fn operation_budget(&self) -> Duration {
        self.request_timeout.saturating_mul(self.attempts().saturating_mul(MAX_REQUESTS))
    }

    fn attempts(&self) -> u32 {
        self.retries.saturating_add(1)
    }
}

/// The GUID the BMC proved in RAKP 2 and repeated inside the authenticated session.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IpmiIdentity {
    /// As RAKP 2 carried it (covered by the BMC's HMAC).
    pub rakp2_guid: Guid,
    /// As `Get System GUID` answered inside the session: the same bytes.
    pub session_guid: Guid,
}

impl IpmiIdentity {
    pub fn spellings(&self) -> [Spelling; 3] {
        self.rakp2_guid.spellings()
    }

    /// The layouts in which the GUID spells the node's `systemUUID` ([`Guid::matches`]).
    pub fn matches(&self, node_uuid: &str) -> Vec<GuidLayout> {
        self.rakp2_guid.matches(node_uuid)
    }
}

/// Why no client could be built: nothing was sent.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SetupProblem {
    #[error("cipher suite {0} is not supported: coroner speaks IPMI v2.0 cipher suite 3 only")]
    CipherSuite(u8),
    #[error("the user name is {0} bytes; IPMI allows 16")]
    UsernameTooLong(usize),
    // No lengths of secrets in the message: it reaches status and Events.
    #[error("the password is longer than the 20 bytes IPMI v2.0 allows")]
    PasswordTooLong,
    #[error("the BMC key (K_G) is longer than the 20 bytes IPMI v2.0 allows")]
    BmcKeyTooLong,
    #[error("the BMC key (K_G) is not hex")]
    BmcKeyNotHex,
    #[error("the request timeout is zero")]
    ZeroTimeout,
    #[error("the system has no random numbers for the session nonces")]
    NoRandomness,
}

/// The request an error happened in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    AuthenticationCapabilities,
    OpenSession,
    Rakp1,
    Rakp3,
    SetPrivilege,
    GetSystemGuid,
    GetChassisStatus,
    ChassisControl,
    CloseSession,
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::AuthenticationCapabilities => "Get Channel Authentication Capabilities",
            Self::OpenSession => "Open Session",
            Self::Rakp1 => "RAKP Message 1",
            Self::Rakp3 => "RAKP Message 3",
            Self::SetPrivilege => "Set Session Privilege Level",
            Self::GetSystemGuid => "Get System GUID",
            Self::GetChassisStatus => "Get Chassis Status",
            Self::ChassisControl => "Chassis Control",
            Self::CloseSession => "Close Session",
        })
    }
}

/// Why an answer was not taken, or an attempt got none.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Discarded {
    #[error("{0}")]
    Malformed(#[from] DecodeError),
    #[error("an answer for another session")]
    OtherSession,
    #[error("a sequence number outside the window or seen before")]
    Sequence,
    #[error("an answer to another request")]
    Unmatched,
    #[error("the socket reported {0}")]
    Io(std::io::ErrorKind),
}

/// Why the BMC's credentials check failed. None of them carries the password.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AuthFailure {
    #[error("its RAKP 2 HMAC does not verify with the password (wrong password)")]
    Rakp2Mismatch,
    #[error("it answered {0}")]
    Refused(RmcpStatus),
}

/// Why the BMC will not speak cipher suite 3.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CipherRefusal {
    #[error("it answered {0}")]
    Refused(RmcpStatus),
    #[error(
        "it accepted with other algorithms (authentication {authentication:#04x}, integrity {integrity:#04x}, confidentiality {confidentiality:#04x}); refused"
    )]
    OtherAlgorithms { authentication: u8, integrity: u8, confidentiality: u8 },
}

/// How the BMC refused the privilege asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PrivilegeRefusal {
    #[error("Open Session answered {0}")]
    Status(RmcpStatus),
    #[error("Set Session Privilege Level answered {0}")]
    Completion(CompletionCode),
}

/// An answer that arrived, authenticated, and cannot be used.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ProtocolProblem {
    #[error("{0}")]
    Malformed(#[from] DecodeError),
    #[error("{0}")]
    Status(RmcpStatus),
    #[error("{len} data bytes (expected {expected})")]
    DataLength { len: usize, expected: usize },
    #[error("a session ID of 0")]
    ZeroSessionId,
    #[error("privilege level {0:#04x} instead of the one asked for")]
    OtherPrivilege(u8),
}

/// An IPMI completion code other than 0 (table 5-2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CompletionCode(pub u8);

impl CompletionCode {
    pub const INVALID_COMMAND: Self = Self(0xc1);

    pub fn meaning(self) -> &'static str {
        match self.0 {
            0xc0 => "node busy",
            0xc1 => "invalid command",
            0xc2 => "invalid for this LUN",
            0xc3 => "timeout while processing",
            0xc4 => "out of space",
            0xc5 => "reservation cancelled",
            0xc6 => "request data truncated",
            0xc7 => "request data length invalid",
            0xc8 => "request data field length limit exceeded",
            0xc9 => "parameter out of range",
            0xca => "cannot return the requested number of bytes",
            0xcb => "requested sensor, data or record not present",
            0xcc => "invalid data field in request",
            0xcd => "command illegal for this sensor or record type",
            0xce => "command response could not be provided",
            0xcf => "cannot execute a duplicated request",
            0xd0 => "SDR repository in update mode",
            0xd1 => "device in firmware update mode",
            0xd2 => "BMC initialization in progress",
            0xd3 => "destination unavailable",
            0xd4 => "insufficient privilege level",
            0xd5 => "not supported in the present state",
            0xd6 => "parameter is illegal because the sub-function is disabled or unavailable",
            0xff => "unspecified error",
            _ => "device- or command-specific code",
        }
    }

    /// Busy, timing out, initializing, or unable to answer now: the next attempt may succeed.
    fn is_transient(self) -> bool {
        matches!(self.0, 0xc0 | 0xc3 | 0xce | 0xd2)
    }
}

impl fmt::Display for CompletionCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "completion code {:#04x} ({})", self.0, self.meaning())
    }
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum IpmiError {
    #[error("IPMI client setup failed: {0}")]
    Setup(#[from] SetupProblem),
    #[error("the BMC address {address:?} does not resolve ({kind})")]
    Resolve { address: String, kind: std::io::ErrorKind },
    #[error("no UDP socket to the BMC at {bmc}: {kind}")]
    Socket { bmc: SocketAddr, kind: std::io::ErrorKind },
    #[error(
        "the BMC at {bmc} did not answer {step} ({attempts} attempts, {timeout:?} each, {discarded} answers discarded){}",
        last.map(|l| format!("; last: {l}")).unwrap_or_default()
    )]
    NoAnswer { bmc: SocketAddr, step: Step, attempts: u32, timeout: Duration, discarded: u32, last: Option<Discarded> },
    #[error("another session of this process to the BMC at {bmc} was still open after {waited:?}")]
    Busy { bmc: SocketAddr, waited: Duration },
    #[error("the BMC at {bmc} has no free session slot: {status}")]
    NoSessionSlot { bmc: SocketAddr, status: RmcpStatus },
    #[error("the BMC at {bmc} does not speak IPMI v2.0 (RMCP+) on this channel")]
    NotIpmiV2 { bmc: SocketAddr },
    #[error("the BMC at {bmc} refused cipher suite 3: {refusal}")]
    CipherSuite { bmc: SocketAddr, refusal: CipherRefusal },
    #[error("the BMC at {bmc} rejected the credentials of user {username:?}: {failure}")]
    Unauthorized { bmc: SocketAddr, username: String, failure: AuthFailure },
    #[error(
        "the BMC at {bmc} derived another session key (its RAKP 4 check does not verify): its BMC key K_G is not the one configured{}",
        if *bmc_reports_kg { " (it reports a K_G of its own)" } else { "" }
    )]
    BmcKeyMismatch { bmc: SocketAddr, bmc_reports_kg: bool },
    #[error("the BMC at {bmc} refused privilege {privilege}: {why}")]
    PrivilegeRefused { bmc: SocketAddr, privilege: Privilege, why: PrivilegeRefusal },
    #[error("the BMC at {bmc} answered {step} with {problem}")]
    Protocol { bmc: SocketAddr, step: Step, problem: ProtocolProblem },
    #[error("the BMC at {bmc} answered {step} with {code}")]
    Completion { bmc: SocketAddr, step: Step, code: CompletionCode },
    #[error(
        "the BMC at {bmc} does not implement Get System GUID (completion code 0xc1): it cannot say which machine it is"
    )]
    IdentityUnavailable { bmc: SocketAddr },
    #[error(
        "the BMC at {bmc} proved GUID {rakp2} in RAKP 2 but answered Get System GUID in the session with {session}"
    )]
    GuidsDiffer { bmc: SocketAddr, rakp2: Guid, session: Guid },
    /// Right before a power action, the session's GUID no longer spells the machine the reading
    /// that asked for the action came from: nothing was sent.
    #[error(
        "the BMC at {bmc} now proves GUID {now}, not {was} as the reading that asked for the action did; nothing sent"
    )]
    GuidChanged { bmc: SocketAddr, was: String, now: String },
    /// No session could be set up within the power action's budget: nothing was sent.
    #[error("no IPMI session within {waited:?}; nothing sent")]
    NotSent { waited: Duration },
}

/// An IPMI failure in the loop's words: its class, what the loop does about it, and its text.
impl From<IpmiError> for crate::bmc::BmcError {
    fn from(error: IpmiError) -> Self {
        let sent_nothing = matches!(
            error,
            IpmiError::GuidChanged { .. }
                | IpmiError::GuidsDiffer { .. }
                | IpmiError::IdentityUnavailable { .. }
                | IpmiError::NotSent { .. }
        );
        Self::Ipmi(crate::bmc::IpmiFailure {
            category: error.category(),
            reason: error.reason(),
            transient: error.is_transient(),
            sent_nothing,
            message: error.to_string(),
        })
    }
}

impl IpmiError {
    /// Used as Event reason suffix and metric label; the words Redfish's errors use where they mean
    /// the same.
    pub fn category(&self) -> &'static str {
        match self {
            Self::Setup(_) => "setup",
            Self::Resolve { .. } | Self::Socket { .. } | Self::NoAnswer { .. } => "unreachable",
            Self::Busy { .. } => "busy",
            Self::NoSessionSlot { .. } => "no-session-slot",
            Self::NotIpmiV2 { .. } => "not-ipmi-v2",
            Self::CipherSuite { .. } => "cipher-suite",
            Self::Unauthorized { .. } => "unauthorized",
            Self::BmcKeyMismatch { .. } => "bmc-key",
            Self::PrivilegeRefused { .. } => "privilege",
            Self::Protocol { .. } => "protocol",
            Self::Completion { .. } => "completion-code",
            Self::IdentityUnavailable { .. } => "identity-unavailable",
            Self::GuidsDiffer { .. } | Self::GuidChanged { .. } => "identity-changed",
            Self::NotSent { .. } => "unreachable",
        }
    }

    /// The condition reason a fence that ends on this error gives.
    pub fn reason(&self) -> Reason {
        match self {
            _ if self.is_transient() => Reason::BmcUnreachable,
            Self::Setup(_) => Reason::BindingInvalid,
            Self::Unauthorized { .. } | Self::BmcKeyMismatch { .. } | Self::PrivilegeRefused { .. } => {
                Reason::BmcAuthenticationFailed
            }
            Self::GuidsDiffer { .. } | Self::GuidChanged { .. } => Reason::IdentityChanged,
            _ => Reason::BmcProtocolError,
        }
    }

    /// L7: nothing came back to the first message of the exchange (every operation opens its own
    /// session), not even an answer discarded as unusable, nor a refusal (an ICMP port unreachable:
    /// the BMC's network stack answered).
    pub fn is_silence(&self) -> bool {
        matches!(
            self,
            Self::NoAnswer { step: Step::AuthenticationCapabilities, discarded: 0, last, .. }
                if !matches!(last, Some(Discarded::Io(std::io::ErrorKind::ConnectionRefused)))
        )
    }

    /// No answer, a busy slot or a busy BMC may clear by themselves; everything else needs a human.
    pub fn is_transient(&self) -> bool {
        match self {
            Self::Resolve { .. }
            | Self::Socket { .. }
            | Self::NoAnswer { .. }
            | Self::Busy { .. }
            | Self::NoSessionSlot { .. }
            | Self::NotSent { .. } => true,
            Self::Completion { code, .. } => code.is_transient(),
            _ => false,
        }
    }
}

/// A client for one BMC. Cheap to clone; every operation opens its own session.
#[derive(Clone, Debug)]
pub struct IpmiClient {
    config: Arc<IpmiConfig>,
}

impl IpmiClient {
    pub fn new(config: IpmiConfig) -> Result<Self, IpmiError> {
        if config.cipher_suite != SUITE_3 {
            return Err(SetupProblem::CipherSuite(config.cipher_suite).into());
        }
        if config.username.len() > MAX_USERNAME {
            return Err(SetupProblem::UsernameTooLong(config.username.len()).into());
        }
        if config.password.reveal().len() > MAX_KEY {
            return Err(SetupProblem::PasswordTooLong.into());
        }
        if let Some(kg) = &config.kg
            && kg.0.len() > MAX_KEY
        {
            return Err(SetupProblem::BmcKeyTooLong.into());
        }
        if config.request_timeout.is_zero() {
            return Err(SetupProblem::ZeroTimeout.into());
        }
        Ok(Self { config: Arc::new(config) })
    }

    /// An authenticated session at the configured privilege. Close it with [`Session::close`].
    pub async fn session(&self) -> Result<Session, IpmiError> {
        let config = &self.config;
        let resolve = |kind| IpmiError::Resolve { address: config.address.clone(), kind };
        // A resolver can hang: it gets what one request's attempts get.
        let lookup = tokio::net::lookup_host((config.address.as_str(), config.port));
        let bmc = tokio::time::timeout(config.request_timeout.saturating_mul(config.attempts()), lookup)
            .await
            .map_err(|_| resolve(std::io::ErrorKind::TimedOut))?
            .map_err(|e| resolve(e.kind()))?
            .next()
            .ok_or_else(|| resolve(std::io::ErrorKind::NotFound))?;
        let waited = config.operation_budget();
        let permit = tokio::time::timeout(waited, slot(bmc).acquire_owned())
            .await
            .map_err(|_| IpmiError::Busy { bmc, waited })?
            .map_err(|_| IpmiError::Busy { bmc, waited })?;
        Session::establish(config, bmc, permit).await
    }

    /// The GUID the BMC proved in RAKP 2 and repeated in the session ([`Session::identity`]).
    pub async fn identity(&self) -> Result<IpmiIdentity, IpmiError> {
        let mut session = self.session().await?;
        let identity = session.identity().await;
        session.close().await;
        identity
    }

    pub async fn power(&self) -> Result<PowerState, IpmiError> {
        let mut session = self.session().await?;
        let power = session.power().await;
        session.close().await;
        power
    }

    pub async fn act(&self, reset: ResetType) -> Result<(), IpmiError> {
        let mut session = self.session().await?;
        let acted = session.act(reset).await;
        session.close().await;
        acted
    }
}

/// The prefix of an IPMI target's path; what follows names the GUID layout ([`GuidLayout::as_str`]).
pub const PATH_PREFIX: &str = "ipmi:chassis/guid-";

/// The layout an IPMI target's path names, if it is one.
pub fn layout_of_path(path: &str) -> Option<GuidLayout> {
    let name = path.strip_prefix(PATH_PREFIX)?;
    GuidLayout::ALL.into_iter().find(|layout| layout.as_str() == name)
}

/// One reading of the chassis: its GUID spelled in `layout`, and its power.
fn chassis_reading(identity: IpmiIdentity, power: PowerState, layout: GuidLayout) -> SystemReading {
    chassis_system(identity.rakp2_guid, power, layout)
}

/// A chassis whose GUID is `guid` as the fence sees it: spelled in `layout`, at the path that names
/// the layout.
pub fn chassis_system(guid: Guid, power: PowerState, layout: GuidLayout) -> SystemReading {
    let uuid = guid.spell(layout);
    let aliases = guid.spellings().into_iter().filter(|s| s.uuid != uuid).map(|s| s.uuid.to_string()).collect();
    // The path names the layout: recorded at verification, it is the one the fence reads in.
    let path = format!("{PATH_PREFIX}{layout}");
    SystemReading { id: path.clone(), path, uuid: uuid.to_string(), power_state: power, reset_target: None, aliases }
}

/// The layout discovery reads a chassis in: the pinned path's, else the first in which the GUID
/// spells the node's systemUUID. When none does, any spelling is refused by the UUID rule as a
/// mismatch.
pub fn discovery_layout(guid: &Guid, pinned: Option<&str>, node_uuid: &str) -> GuidLayout {
    match pinned.and_then(layout_of_path) {
        Some(layout) => layout,
        None => guid.matches(node_uuid).first().copied().unwrap_or(GuidLayout::Rfc4122),
    }
}

impl IpmiClient {
    /// The GUID and the power, from one authenticated session.
    async fn identity_and_power(&self) -> Result<(IpmiIdentity, PowerState), IpmiError> {
        let mut session = self.session().await?;
        let read = async {
            let identity = session.identity().await?;
            Ok((identity, session.power().await?))
        }
        .await;
        session.close().await;
        read
    }
}

impl IpmiClient {
    /// A power action, in a session whose GUID, spelled in the layout of `system`'s path, is still
    /// `system`'s UUID: a session opened again (a new address behind the name, another machine at
    /// the old address) proves it is the same machine before it acts. `budget` bounds the session's
    /// setup, the check and the control (a setup that runs out sent nothing: [`IpmiError::NotSent`]);
    /// Close Session comes after, outside it.
    pub async fn act_checked(
        &self,
        system: &SystemReading,
        reset: ResetType,
        budget: Option<Duration>,
    ) -> Result<(), crate::bmc::BmcError> {
        let Some(layout) = layout_of_path(&system.path) else {
            let problem = "not an IPMI chassis path".to_owned();
            return Err(crate::bmc::BmcError::Protocol { path: system.path.clone(), problem });
        };
        let started = std::time::Instant::now();
        let budget = budget.unwrap_or(Duration::MAX);
        let mut session = match tokio::time::timeout(budget, self.session()).await {
            Ok(session) => session?,
            Err(_) => return Err(IpmiError::NotSent { waited: budget }.into()),
        };
        let acted = tokio::time::timeout(budget.saturating_sub(started.elapsed()), async {
            let identity = session.identity().await?;
            let now = identity.rakp2_guid.spell(layout).to_string();
            let same = crate::words::uuid::parse(&now)
                .zip(crate::words::uuid::parse(&system.uuid))
                .is_some_and(|(a, b)| a == b);
            if !same {
                return Err(IpmiError::GuidChanged { bmc: session.bmc(), was: system.uuid.clone(), now });
            }
            session.act(reset).await
        })
        .await;
        session.close().await;
        match acted {
            Ok(acted) => Ok(acted?),
            // The control may have gone out: no answer is no proof of either.
            Err(_) => Err(crate::bmc::BmcError::Unreachable(format!("no IPMI answer within {budget:?}"))),
        }
    }
}

/// An IPMI BMC as the fence's power target: one chassis, whose identity is the System GUID proved in
/// RAKP 2 and repeated in the session. Its path names the layout in which the GUID spells the node's
/// systemUUID at discovery, and every later reading spells it in that layout: a GUID that changed, or
/// that matches only in another layout, reads as another UUID (a changed identity). The loop's port
/// over these is the adapters' (`crate::access`).
impl IpmiClient {
    /// `ipmi://address:port`: one power action per origin at a time.
    pub fn origin(&self) -> String {
        crate::api::ipmi_origin(&self.config.address, self.config.port)
    }

    /// The chassis, spelled in the layout that names the node's systemUUID (or the pinned one).
    pub async fn find_chassis(
        &self,
        pinned: Option<&str>,
        node_uuid: &str,
    ) -> Result<SystemReading, crate::bmc::BmcError> {
        let (identity, power) = self.identity_and_power().await?;
        let layout = discovery_layout(&identity.rakp2_guid, pinned, node_uuid);
        Ok(chassis_reading(identity, power, layout))
    }

    /// One reading of the chassis at `path` (its layout named in it).
    pub async fn read_chassis(&self, path: &str) -> Result<SystemReading, crate::bmc::BmcError> {
        let Some(layout) = layout_of_path(path) else {
            let problem = "not an IPMI chassis path".to_owned();
            return Err(crate::bmc::BmcError::Protocol { path: path.to_owned(), problem });
        };
        let (identity, power) = self.identity_and_power().await?;
        Ok(chassis_reading(identity, power, layout))
    }

    /// A fresh session (every operation opens its own): any answer to its first message is an
    /// answer; none at all is silence ([`IpmiError::is_silence`]). A name that does not resolve, no
    /// socket, or this process's own session still open asked nothing.
    pub async fn heard(&self) -> crate::bmc::Heard {
        use crate::bmc::Heard;
        match self.session().await {
            Ok(session) => {
                session.close().await;
                Heard::Answered
            }
            Err(error) if error.is_silence() => Heard::Silent,
            Err(
                error @ (IpmiError::Setup(_)
                | IpmiError::Resolve { .. }
                | IpmiError::Socket { .. }
                | IpmiError::Busy { .. }),
            ) => Heard::NotAsked(error.to_string()),
            Err(_) => Heard::Answered,
        }
    }
}

/// The semaphore every session to `bmc` from this process holds. Entries stay for the process's
/// life: one per BMC address ever used.
fn slot(bmc: SocketAddr) -> Arc<Semaphore> {
    static SLOTS: OnceLock<Mutex<HashMap<SocketAddr, Arc<Semaphore>>>> = OnceLock::new();
    let slots = SLOTS.get_or_init(Mutex::default);
    let mut slots = slots.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    slots.entry(bmc).or_insert_with(|| Arc::new(Semaphore::new(1))).clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> IpmiConfig {
        IpmiConfig::new("127.0.0.1", "admin", Password::new("s3cret-pw".into()))
    }

    #[test]
    fn discovery_reads_the_pinned_layout_else_the_first_that_spells_the_node() {
        let node = "4c4c4544-0042-3510-8058-b4c04f4e3232";
        let uuid = uuid::Uuid::parse_str(node).unwrap();
        let held = Guid::of(uuid, GuidLayout::Smbios);
        assert_eq!(discovery_layout(&held, None, node), GuidLayout::Smbios);
        let pinned = format!("{PATH_PREFIX}ipmi");
        assert_eq!(discovery_layout(&held, Some(&pinned), node), GuidLayout::Ipmi, "the recorded layout, always");
        let other = "11111111-2222-3333-4444-555555555555";
        assert_eq!(discovery_layout(&held, None, other), GuidLayout::Rfc4122, "none spells it: refused later");
        let reading = chassis_system(held, PowerState::On, GuidLayout::Smbios);
        assert_eq!((reading.uuid.as_str(), reading.path), (node, format!("{PATH_PREFIX}smbios")));
    }

    #[test]
    fn every_cipher_suite_but_3_is_refused_before_anything_is_sent() {
        for suite in [0, 1, 2, 17, 255] {
            let refused = IpmiClient::new(IpmiConfig { cipher_suite: suite, ..config() }).unwrap_err();
            assert_eq!(refused, IpmiError::Setup(SetupProblem::CipherSuite(suite)));
            assert_eq!((refused.category(), refused.reason()), ("setup", Reason::BindingInvalid));
        }
        assert!(IpmiClient::new(config()).is_ok());
    }

    #[test]
    fn keys_and_names_longer_than_ipmi_allows_are_refused() {
        let long = Password::new("x".repeat(21));
        assert!(matches!(
            IpmiClient::new(IpmiConfig { password: long, ..config() }),
            Err(IpmiError::Setup(SetupProblem::PasswordTooLong))
        ));
        let user = IpmiConfig { username: "u".repeat(17), ..config() };
        assert!(matches!(IpmiClient::new(user), Err(IpmiError::Setup(SetupProblem::UsernameTooLong(17)))));
        let kg = IpmiConfig { kg: Some(BmcKey::new(vec![1; 21])), ..config() };
        assert!(matches!(IpmiClient::new(kg), Err(IpmiError::Setup(SetupProblem::BmcKeyTooLong))));
        assert_eq!(BmcKey::from_hex("zz").unwrap_err(), SetupProblem::BmcKeyNotHex);
    }

    #[test]
    fn neither_the_password_nor_the_bmc_key_ever_prints() {
        let config = IpmiConfig { kg: Some(BmcKey::new(b"kg-s3cret".to_vec())), ..config() };
        let shown = format!("{:?}", IpmiClient::new(config).unwrap());
        assert!(!shown.contains("s3cret"), "{shown}");
    }

    #[test]
    fn transport_trouble_is_transient_and_refusals_are_final() {
        let bmc: SocketAddr = "127.0.0.1:623".parse().unwrap();
        let no_answer = IpmiError::NoAnswer {
            bmc,
            step: Step::OpenSession,
            attempts: 3,
            timeout: Duration::from_secs(1),
            discarded: 0,
            last: None,
        };
        assert!(no_answer.is_transient());
        assert_eq!((no_answer.category(), no_answer.reason()), ("unreachable", Reason::BmcUnreachable));
        let wrong = IpmiError::Unauthorized { bmc, username: "admin".into(), failure: AuthFailure::Rakp2Mismatch };
        assert!(!wrong.is_transient());
        assert_eq!((wrong.category(), wrong.reason()), ("unauthorized", Reason::BmcAuthenticationFailed));
        let busy = IpmiError::Completion { bmc, step: Step::ChassisControl, code: CompletionCode(0xc0) };
        assert!(busy.is_transient());
        let invalid = IpmiError::Completion { bmc, step: Step::ChassisControl, code: CompletionCode(0xcc) };
        assert_eq!((invalid.is_transient(), invalid.reason()), (false, Reason::BmcProtocolError));
        let differ =
            IpmiError::GuidsDiffer { bmc, rakp2: Guid::from_bytes([1; 16]), session: Guid::from_bytes([2; 16]) };
        assert_eq!((differ.category(), differ.reason()), ("identity-changed", Reason::IdentityChanged));
    }

    #[test]
    fn an_ipmi_error_keeps_its_words_and_class_as_a_bmc_error() {
        let bmc: SocketAddr = "127.0.0.1:623".parse().unwrap();
        for error in [
            IpmiError::NoSessionSlot { bmc, status: RmcpStatus(0x01) },
            IpmiError::BmcKeyMismatch { bmc, bmc_reports_kg: true },
            IpmiError::IdentityUnavailable { bmc },
        ] {
            let converted = crate::bmc::BmcError::from(error.clone());
            assert_eq!(converted.to_string(), error.to_string());
            assert_eq!(
                (converted.category(), converted.reason(), converted.is_transient()),
                (error.category(), error.reason(), error.is_transient())
            );
        }
    }

    #[test]
    fn the_operation_budget_counts_every_attempt_of_every_request() {
        let config = IpmiConfig { request_timeout: Duration::from_millis(500), retries: 2, ..config() };
        assert_eq!(config.operation_budget(), Duration::from_millis(500 * 3 * u64::from(MAX_REQUESTS)));
    }
}
