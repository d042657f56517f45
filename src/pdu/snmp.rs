//! APC rack PDU outlets over SNMP (PowerNet-MIB). SNMPv3 USM authPriv is the default; v1/v2c only when
//! configured explicitly, and then [`SnmpConfig::is_insecure`] says so (the caller warns: a community
//! crosses the network in clear text, and whoever sees it can switch the outlets).
//!
//! # The crate: `async-snmp`
//! [async-snmp](https://crates.io/crates/async-snmp) 0.18 over `snmp2` 0.5 (the other pure-Rust v3
//! client): both are pure Rust with SHA-1/SHA-2 and AES, but async-snmp is tokio-native with a timeout
//! per request and bounded retransmissions, correlates answers by request id (snmp2 hands a late reply
//! to the next request as an error), learns the engine by RFC 3414 discovery, trusts an engine time
//! only from an authenticated message and corrects one authenticated `notInTimeWindow` itself, keeps
//! its keys out of `Debug`, and denies `unsafe` outside its agent side (snmp2 writes through a pointer
//! cast from a shared slice while checking a digest). Its RustCrypto backend keeps the build free of C.
//!
//! # Which table
//! The table is chosen from `sysObjectID.0`, read before every operation (a PDU replaced at the same
//! address is noticed), and only the rPDU table is spoken: `masterSwitchrPDU`
//! (`1.3.6.1.4.1.318.1.3.4.5`, AP78xx/AP79xx), `rPDUOutletControlOutletCommand`
//! (`…318.1.1.12.3.3.1.1.4.N`: only immediateOn(1) and immediateOff(2) are sent),
//! `rPDUOutletStatusOutletState` (`…12.3.5.1.1.4.N`: on(1), off(2)) and
//! `rPDUOutletStatusCommandPending` (`…12.3.5.1.1.5.N`: pending(1), none(2)). Anything else is refused
//! ([`PduError::UnsupportedModel`]), `masterSwitchrPDU2` (`…318.1.3.4.6`, AP8xxx) too: its
//! `rPDU2OutletSwitchedStatusState` encodes off(1) and on(2), the reverse of rPDU, and its rows are
//! indexed across daisy-chained units, so it needs its own table and its own peer tests. rPDU meters
//! no outlet in watts (outlet-monitored models report tenths of amps), so its readings carry no draw.
//!
//! # A PDU that rebooted
//! Its engine boots counter moved on (or its engine ID changed): it answers with a `notInTimeWindow` or
//! `unknownEngineID` report, or an answer whose time fails authentication. The client rediscovers the
//! engine once and repeats the request once; a second failure is the error.

use std::{fmt, time::Duration};

use async_snmp::{
    Auth, Client, Error as SnmpError, ErrorStatus, Oid, ResponseShapePolicy, Retry, UdpHandle, UsmConfig, Value,
    VarBind, v3::ReportStatus,
};

use super::{OutletCommand, OutletReading, OutletState, Outlets, PduError};
use crate::bmc::{MAX_MESSAGE_CHARS, MAX_VALUE_CHARS, Password, bounded};

const SYS_OBJECT_ID: &[u32] = &[1, 3, 6, 1, 2, 1, 1, 2, 0];

/// One APC outlet table: where an outlet's command, state and pending flag live, and what they mean.
#[derive(Debug, PartialEq, Eq)]
struct Table {
    name: &'static str,
    sys_object_id: &'static [u32],
    command: &'static [u32],
    state: &'static [u32],
    pending: &'static [u32],
}

/// PowerNet-MIB's rPDU table (AP78xx/AP79xx).
const RPDU: Table = Table {
    name: "APC rPDU",
    sys_object_id: &[1, 3, 6, 1, 4, 1, 318, 1, 3, 4, 5],
    command: &[1, 3, 6, 1, 4, 1, 318, 1, 1, 12, 3, 3, 1, 1, 4],
    state: &[1, 3, 6, 1, 4, 1, 318, 1, 1, 12, 3, 5, 1, 1, 4],
    pending: &[1, 3, 6, 1, 4, 1, 318, 1, 1, 12, 3, 5, 1, 1, 5],
};

/// rPDUOutletControlOutletCommand: immediateOn(1), immediateOff(2); the other commands (reboot, delayed
/// ones, cancel) are never sent.
fn command_value(command: OutletCommand) -> i32 {
    match command {
        OutletCommand::On => 1,
        OutletCommand::Off => 2,
    }
}

impl Table {
    fn column(&self, column: &[u32], outlet: OutletNumber) -> Oid {
        let mut arcs = column.to_vec();
        arcs.push(outlet.0);
        Oid::from_slice(&arcs)
    }
}

/// An outlet's row in the table: 1 and up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OutletNumber(u32);

impl OutletNumber {
    pub fn new(number: u32) -> Result<Self, PduError> {
        if number == 0 {
            return Err(PduError::Setup("APC outlets are numbered from 1".into()));
        }
        Ok(Self(number))
    }
}

impl fmt::Display for OutletNumber {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "outlet {}", self.0)
    }
}

/// SNMPv3 USM authentication. MD5 is not offered: its HMAC is no longer trusted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AuthProtocol {
    Sha1,
    Sha224,
    Sha256,
    Sha384,
    Sha512,
}

/// SNMPv3 USM privacy. DES is not offered: 56-bit keys are brute-forceable. AES-192/256 keys are
/// localized with Blumenthal's extension (as net-snmp does).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PrivProtocol {
    Aes128,
    Aes192,
    Aes256,
}

/// An SNMPv3 user with authentication and privacy (authPriv).
#[derive(Clone, Debug)]
pub struct Usm {
    pub username: String,
    pub auth: AuthProtocol,
    /// At least 8 characters (RFC 3414).
    pub auth_key: Password,
    pub privacy: PrivProtocol,
    /// At least 8 characters.
    pub priv_key: Password,
    /// The SNMPv3 contextName; APC PDUs use the empty one.
    pub context: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CommunityVersion {
    V1,
    V2c,
}

#[derive(Clone, Debug)]
pub enum SnmpSecurity {
    /// SNMPv3 USM authPriv: the default.
    Usm(Usm),
    /// SNMPv1/v2c with a community, configured explicitly: insecure.
    Community { version: CommunityVersion, community: Password },
}

#[derive(Clone, Debug)]
pub struct SnmpConfig {
    /// `host:port` (or `host`: port 161).
    pub address: String,
    pub security: SnmpSecurity,
    /// The wait for one answer.
    pub request_timeout: Duration,
    /// Retransmissions of a request that got no answer (at most 16).
    pub retries: u32,
}

impl SnmpConfig {
    /// SNMPv3 authPriv, the default security.
    pub fn new(address: impl Into<String>, usm: Usm) -> Self {
        Self {
            address: address.into(),
            security: SnmpSecurity::Usm(usm),
            request_timeout: Duration::from_secs(2),
            retries: 2,
        }
    }

    /// Whether the caller must warn: v1/v2c sends the community in clear text and authenticates nothing.
    pub fn is_insecure(&self) -> bool {
        matches!(self.security, SnmpSecurity::Community { .. })
    }
}

/// An APC PDU's outlets over SNMP.
#[derive(Clone)]
pub struct SnmpPdu {
    client: Client<UdpHandle>,
    address: String,
    insecure: bool,
}

impl fmt::Debug for SnmpPdu {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SnmpPdu").field("address", &self.address).field("insecure", &self.insecure).finish()
    }
}

impl SnmpPdu {
    /// Resolves the address and opens a UDP socket; nothing is sent yet.
    pub async fn connect(config: SnmpConfig) -> Result<Self, PduError> {
        let auth = match &config.security {
            SnmpSecurity::Usm(usm) => Auth::from(usm_config(usm)?),
            SnmpSecurity::Community { version: CommunityVersion::V1, community } => Auth::v1(community.reveal()),
            SnmpSecurity::Community { version: CommunityVersion::V2c, community } => Auth::v2c(community.reveal()),
        };
        let retry = Retry::fixed(config.retries, Duration::ZERO).map_err(|e| PduError::Setup(e.to_string()))?;
        let client = Client::builder(config.address.as_str(), auth)
            .request_timeout(config.request_timeout)
            .construction_timeout(config.request_timeout)
            .retry(retry)
            // An answer that is not exactly the bindings asked for, or that comes from another address,
            // is refused rather than interpreted.
            .response_shape_policy(ResponseShapePolicy::Strict)
            .strict_source(true)
            .connect()
            .await
            .map_err(|e| classify(&e))?;
        Ok(Self { client, address: bounded(&config.address, 128), insecure: config.is_insecure() })
    }

    pub fn is_insecure(&self) -> bool {
        self.insecure
    }

    /// The table the PDU's `sysObjectID.0` names.
    async fn table(&self) -> Result<&'static Table, PduError> {
        let oid = Oid::from_slice(SYS_OBJECT_ID);
        let answer = self.exchange(|| self.client.get(&oid)).await?;
        identify(&answer.varbinds)
    }

    /// One request, repeated once after rediscovering an engine that looks rebooted or replaced.
    async fn exchange<F, Fut>(&self, request: F) -> Result<async_snmp::FixedCardinalityResponse, PduError>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = async_snmp::Result<async_snmp::FixedCardinalityResponse>>,
    {
        let before = self.datagrams();
        let answer = match request().await {
            Err(error) if !self.insecure && engine_moved(&error) => {
                tracing::debug!(pdu = %self.address, %error, "rediscovering the PDU's SNMP engine");
                self.client.rediscover_engine().await.map_err(|e| classify(&e))?;
                request().await
            }
            other => other,
        };
        answer.map_err(|error| match classify(&error) {
            PduError::Timeout { .. } if self.datagrams() > before => unauthenticated(self.datagrams() - before),
            other => other,
        })
    }

    /// Datagrams the client's socket received, usable or not.
    fn datagrams(&self) -> u64 {
        let stats = self.client.stats();
        stats.correlated_datagrams + stats.discarded_datagrams + stats.malformed_datagrams
    }
}

impl Outlets for SnmpPdu {
    type Outlet = OutletNumber;

    async fn read(&self, outlet: &OutletNumber) -> Result<OutletReading, PduError> {
        let table = self.table().await?;
        let oids = [table.column(table.state, *outlet), table.column(table.pending, *outlet)];
        let answer = self.exchange(|| self.client.get_many(&oids)).await?;
        decode_reading(table, *outlet, &answer.varbinds)
    }

    async fn switch(&self, outlet: &OutletNumber, command: OutletCommand) -> Result<(), PduError> {
        let table = self.table().await?;
        let oid = table.column(table.command, *outlet);
        let value = command_value(command);
        let answer = self.exchange(|| self.client.set(&oid, Value::Integer(value))).await?;
        check_echo(&oid, value, *outlet, &answer.varbinds)
    }
}

fn usm_config(usm: &Usm) -> Result<UsmConfig, PduError> {
    use async_snmp::{AuthProtocol as A, PrivProtocol as P};
    let auth = match usm.auth {
        AuthProtocol::Sha1 => A::Sha1,
        AuthProtocol::Sha224 => A::Sha224,
        AuthProtocol::Sha256 => A::Sha256,
        AuthProtocol::Sha384 => A::Sha384,
        AuthProtocol::Sha512 => A::Sha512,
    };
    let privacy = match usm.privacy {
        PrivProtocol::Aes128 => P::Aes128,
        PrivProtocol::Aes192 => P::Aes192Blumenthal,
        PrivProtocol::Aes256 => P::Aes256Blumenthal,
    };
    for (what, key) in [("authentication", &usm.auth_key), ("privacy", &usm.priv_key)] {
        // RFC 3414's minimum, checked here so the error names the key without echoing it.
        if key.reveal().len() < 8 {
            return Err(PduError::Setup(format!("the SNMPv3 {what} key must be at least 8 characters")));
        }
    }
    UsmConfig::new(usm.username.clone().into_bytes())
        .auth_priv(auth, usm.auth_key.reveal(), privacy, usm.priv_key.reveal())
        .map(|config| config.context_name(usm.context.clone().into_bytes()))
        .map_err(|e| PduError::Setup(format!("SNMPv3 user {:?}: {e}", bounded(&usm.username, 64))))
}

/// An answer that means the engine the client knows is not the one answering any more.
fn engine_moved(error: &SnmpError) -> bool {
    match error.exchange_source() {
        SnmpError::Report { status, .. } => {
            matches!(**status, ReportStatus::NotInTimeWindow { .. } | ReportStatus::UnknownEngineId { .. })
        }
        SnmpError::Auth { .. } => true,
        _ => false,
    }
}

/// The client's error in this module's classes. async-snmp's texts name the target and the failure,
/// never a key or a community; device-supplied parts are bounded anyway.
fn classify(error: &SnmpError) -> PduError {
    let text = || bounded(&error.to_string(), MAX_MESSAGE_CHARS);
    match error.exchange_source() {
        SnmpError::Timeout { elapsed, retries, .. } => {
            PduError::Timeout { elapsed: *elapsed, tries: retries.saturating_add(1) }
        }
        SnmpError::ConstructionTimeout { .. } | SnmpError::Network { .. } | SnmpError::Closed { .. } => {
            PduError::Unreachable(text())
        }
        SnmpError::Auth { .. } => PduError::Unauthorized(
            "its answer failed SNMPv3 authentication (wrong keys, or another agent at the address)".into(),
        ),
        SnmpError::Report { status, .. } => match **status {
            ReportStatus::UnknownUserName { .. }
            | ReportStatus::WrongDigest { .. }
            | ReportStatus::DecryptionError { .. }
            | ReportStatus::UnsupportedSecurityLevel { .. } => {
                PduError::Unauthorized(format!("SNMPv3 report: {}", bounded(&status.to_string(), MAX_VALUE_CHARS)))
            }
            _ => PduError::Protocol(format!("SNMPv3 report: {}", bounded(&status.to_string(), MAX_VALUE_CHARS))),
        },
        SnmpError::Snmp { status, .. } => match status {
            ErrorStatus::NoAccess
            | ErrorStatus::AuthorizationError
            | ErrorStatus::NotWritable
            | ErrorStatus::ReadOnly => {
                PduError::Unauthorized(format!("SNMP {status}: this user or community may not do that"))
            }
            status => PduError::Snmp { status: bounded(&status.to_string(), MAX_VALUE_CHARS) },
        },
        SnmpError::Config(_) | SnmpError::InvalidOid(_) | SnmpError::InvalidMessage(_) => PduError::Setup(text()),
        _ => PduError::Protocol(text()),
    }
}

/// A request that timed out although the PDU answered: the client refused every answer, as it refuses
/// the unauthenticated `wrongDigest`/`decryptionError` reports snmpsim sends for wrong keys (net-snmp
/// shows them). Silence is a timeout; answers that prove nothing are a credentials problem.
fn unauthenticated(answers: u64) -> PduError {
    PduError::Unauthorized(format!(
        "the PDU answered {answers} time(s) with nothing that authenticates (wrong SNMPv3 user or keys?)"
    ))
}

/// The value at `oid` in an answer that must hold exactly the asked OIDs, in order.
fn value_at<'a>(varbinds: &'a [VarBind], index: usize, oid: &Oid) -> Result<&'a Value, PduError> {
    match varbinds.get(index) {
        Some(varbind) if varbind.oid == *oid => Ok(&varbind.value),
        Some(varbind) => Err(PduError::Protocol(format!(
            "answer: {} where {oid} was asked",
            bounded(&varbind.oid.to_string(), MAX_VALUE_CHARS)
        ))),
        None => Err(PduError::Protocol(format!("answer: nothing for {oid}"))),
    }
}

fn absent(value: &Value) -> bool {
    matches!(value, Value::NoSuchObject | Value::NoSuchInstance | Value::EndOfMibView)
}

fn shown(value: &Value) -> String {
    bounded(&format!("{value:?}"), MAX_VALUE_CHARS)
}

/// The table `sysObjectID.0` names; any other device is refused.
fn identify(varbinds: &[VarBind]) -> Result<&'static Table, PduError> {
    let oid = Oid::from_slice(SYS_OBJECT_ID);
    match value_at(varbinds, 0, &oid)? {
        Value::ObjectIdentifier(id) if id.arcs() == RPDU.sys_object_id => Ok(&RPDU),
        Value::ObjectIdentifier(id) => Err(PduError::UnsupportedModel(format!(
            "sysObjectID {} is not an {} ({}), the only outlet table this coroner speaks",
            bounded(&id.to_string(), MAX_VALUE_CHARS),
            RPDU.name,
            Oid::from_slice(RPDU.sys_object_id)
        ))),
        other => Err(PduError::Protocol(format!("answer: sysObjectID.0 is {}", shown(other)))),
    }
}

/// An outlet's state and pending flag from the answer to a GET of both.
fn decode_reading(table: &Table, outlet: OutletNumber, varbinds: &[VarBind]) -> Result<OutletReading, PduError> {
    let (state_oid, pending_oid) = (table.column(table.state, outlet), table.column(table.pending, outlet));
    if varbinds.len() != 2 {
        return Err(PduError::Protocol(format!("answer: {} bindings for 2 asked", varbinds.len())));
    }
    let state = match value_at(varbinds, 0, &state_oid)? {
        Value::Integer(1) => OutletState::On,
        Value::Integer(2) => OutletState::Off,
        Value::Integer(other) => OutletState::unknown(&other.to_string()),
        value if absent(value) => return Err(PduError::NoSuchOutlet(format!("{outlet} ({})", table.name))),
        other => return Err(PduError::Protocol(format!("answer: {outlet}'s state is {}", shown(other)))),
    };
    let pending = match value_at(varbinds, 1, &pending_oid)? {
        Value::Integer(1) => true,
        Value::Integer(2) => false,
        other => return Err(PduError::Protocol(format!("answer: {outlet}'s command pending is {}", shown(other)))),
    };
    Ok(OutletReading { state, pending, watts: None, metered: false })
}

/// The answer to a SET echoes the binding that was set; anything else is not that command taken.
fn check_echo(oid: &Oid, value: i32, outlet: OutletNumber, varbinds: &[VarBind]) -> Result<(), PduError> {
    if varbinds.len() != 1 {
        return Err(PduError::Protocol(format!("answer: {} bindings for 1 set", varbinds.len())));
    }
    match value_at(varbinds, 0, oid)? {
        Value::Integer(echo) if *echo == value => Ok(()),
        value if absent(value) => Err(PduError::NoSuchOutlet(outlet.to_string())),
        other => Err(PduError::Protocol(format!("answer: {outlet}'s command echoed as {}", shown(other)))),
    }
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;

    use async_snmp::{DecodeConfig, message::Message};
    use proptest::prelude::*;

    use super::*;

    fn one() -> OutletNumber {
        OutletNumber::new(1).unwrap()
    }

    fn bind(oid: Oid, value: Value) -> VarBind {
        VarBind { oid, value }
    }

    fn answer(state: Value, pending: Value) -> Vec<VarBind> {
        vec![bind(RPDU.column(RPDU.state, one()), state), bind(RPDU.column(RPDU.pending, one()), pending)]
    }

    #[test]
    fn the_rpdu_oids_are_powernet_mibs() {
        let outlet = OutletNumber::new(3).unwrap();
        assert_eq!(RPDU.column(RPDU.command, outlet).to_string(), "1.3.6.1.4.1.318.1.1.12.3.3.1.1.4.3");
        assert_eq!(RPDU.column(RPDU.state, outlet).to_string(), "1.3.6.1.4.1.318.1.1.12.3.5.1.1.4.3");
        assert_eq!(RPDU.column(RPDU.pending, outlet).to_string(), "1.3.6.1.4.1.318.1.1.12.3.5.1.1.5.3");
        assert_eq!(Oid::from_slice(RPDU.sys_object_id).to_string(), "1.3.6.1.4.1.318.1.3.4.5");
        assert_eq!((command_value(OutletCommand::On), command_value(OutletCommand::Off)), (1, 2));
        assert!(OutletNumber::new(0).is_err());
    }

    #[test]
    fn states_and_pending_flags_read_as_the_mib_defines_them() {
        let read = |state, pending| decode_reading(&RPDU, one(), &answer(state, pending));
        let settled = |state| OutletReading { state, pending: false, watts: None, metered: false };
        assert_eq!(read(Value::Integer(1), Value::Integer(2)).unwrap(), settled(OutletState::On));
        assert_eq!(read(Value::Integer(2), Value::Integer(2)).unwrap(), settled(OutletState::Off));
        assert!(read(Value::Integer(2), Value::Integer(1)).unwrap().pending);
        assert_eq!(read(Value::Integer(4), Value::Integer(2)).unwrap().state, OutletState::Unknown("4".into()));
        assert!(matches!(read(Value::NoSuchInstance, Value::NoSuchInstance), Err(PduError::NoSuchOutlet(_))));
        for (state, pending) in [
            (Value::OctetString("off".into()), Value::Integer(2)),
            (Value::Integer(2), Value::Integer(3)),
            (Value::Integer(2), Value::NoSuchInstance),
            (Value::Gauge32(2), Value::Integer(2)),
        ] {
            assert!(matches!(read(state, pending), Err(PduError::Protocol(_))));
        }
    }

    #[test]
    fn an_answer_for_other_oids_proves_nothing() {
        let other = OutletNumber::new(2).unwrap();
        let swapped = vec![
            bind(RPDU.column(RPDU.state, other), Value::Integer(2)),
            bind(RPDU.column(RPDU.pending, other), Value::Integer(2)),
        ];
        assert!(matches!(decode_reading(&RPDU, one(), &swapped), Err(PduError::Protocol(_))));
        let mut extra = answer(Value::Integer(2), Value::Integer(2));
        extra.push(bind(RPDU.column(RPDU.state, other), Value::Integer(2)));
        assert!(decode_reading(&RPDU, one(), &extra).is_err());
        assert!(decode_reading(&RPDU, one(), &[]).is_err());
    }

    #[test]
    fn only_an_apc_rpdu_is_spoken_to() {
        let sys = |value| vec![bind(Oid::from_slice(SYS_OBJECT_ID), value)];
        let rpdu = Value::ObjectIdentifier(Oid::from_slice(RPDU.sys_object_id));
        assert_eq!(identify(&sys(rpdu)).unwrap(), &RPDU);
        for other in ["1.3.6.1.4.1.318.1.3.4.6", "1.3.6.1.4.1.8072.3.2.10", "1.3.6.1.4.1.318.1.3.4.5.1"] {
            let error = identify(&sys(Value::ObjectIdentifier(Oid::parse(other).unwrap()))).unwrap_err();
            assert!(matches!(&error, PduError::UnsupportedModel(text) if text.contains(other)), "{error}");
            assert_eq!(error.category(), "unsupported-model");
        }
        assert!(matches!(identify(&sys(Value::OctetString("APC".into()))), Err(PduError::Protocol(_))));
        assert!(matches!(identify(&sys(Value::NoSuchObject)), Err(PduError::Protocol(_))));
    }

    #[test]
    fn a_set_is_taken_only_when_echoed() {
        let oid = RPDU.column(RPDU.command, one());
        assert!(check_echo(&oid, 2, one(), &[bind(oid.clone(), Value::Integer(2))]).is_ok());
        assert!(check_echo(&oid, 2, one(), &[bind(oid.clone(), Value::Integer(1))]).is_err());
        assert!(matches!(
            check_echo(&oid, 2, one(), &[bind(oid.clone(), Value::NoSuchInstance)]),
            Err(PduError::NoSuchOutlet(_))
        ));
        assert!(check_echo(&oid, 2, one(), &[]).is_err());
    }

    fn target() -> SocketAddr {
        "127.0.0.1:161".parse().unwrap()
    }

    #[test]
    fn client_errors_keep_their_class() {
        let timeout = SnmpError::Timeout { target: target(), elapsed: Duration::from_millis(900), retries: 2 };
        assert_eq!(classify(&timeout), PduError::Timeout { elapsed: Duration::from_millis(900), tries: 3 });
        assert_eq!(classify(&SnmpError::Auth { target: target() }).category(), "unauthorized");
        let report =
            |status| SnmpError::Report { target: target(), status: Box::new(status), metadata: Box::default() };
        for status in [
            ReportStatus::WrongDigest { counter: 1 },
            ReportStatus::UnknownUserName { counter: 1 },
            ReportStatus::DecryptionError { counter: 1 },
        ] {
            assert_eq!(classify(&report(status)).category(), "unauthorized");
        }
        let moved = report(ReportStatus::NotInTimeWindow { counter: 1 });
        assert!(engine_moved(&moved) && engine_moved(&SnmpError::Auth { target: target() }));
        assert!(!engine_moved(&report(ReportStatus::WrongDigest { counter: 1 })) && !engine_moved(&timeout));
        let snmp = |status| SnmpError::Snmp { target: target(), status, index: 1, oid: None, metadata: Box::default() };
        assert_eq!(classify(&snmp(ErrorStatus::NoAccess)).category(), "unauthorized");
        assert_eq!(classify(&snmp(ErrorStatus::WrongValue)).category(), "snmp-error");
        assert_eq!(unauthenticated(2).category(), "unauthorized");
    }

    #[test]
    fn v2c_is_insecure_and_v3_is_the_default() {
        let usm = Usm {
            username: "coroner".into(),
            auth: AuthProtocol::Sha256,
            auth_key: Password::new("authkey-s3cret".into()),
            privacy: PrivProtocol::Aes128,
            priv_key: Password::new("privkey-s3cret".into()),
            context: String::new(),
        };
        let v3 = SnmpConfig::new("127.0.0.1:161", usm.clone());
        assert!(!v3.is_insecure());
        let v2c = SnmpConfig {
            security: SnmpSecurity::Community {
                version: CommunityVersion::V2c,
                community: Password::new("c0mm".into()),
            },
            ..v3.clone()
        };
        assert!(v2c.is_insecure());
        let shown = format!("{v3:?} {v2c:?}");
        assert!(!shown.contains("s3cret") && !shown.contains("c0mm"), "{shown}");
        let short = Usm { priv_key: Password::new("short".into()), ..usm };
        let error = usm_config(&short).unwrap_err();
        assert!(matches!(&error, PduError::Setup(text) if !text.contains("short")), "{error}");
    }

    /// Runs the bytes a PDU may send through the client's decoder and this module's readers.
    fn decode_bytes(bytes: &[u8]) {
        let Ok(decoded) = Message::decode(bytes::Bytes::copy_from_slice(bytes), DecodeConfig::DEFAULT) else { return };
        if let Some(pdu) = decoded.value.pdu() {
            let varbinds = pdu.varbinds();
            let _ = identify(varbinds);
            let _ = decode_reading(&RPDU, one(), varbinds);
            let _ = check_echo(&RPDU.column(RPDU.command, one()), 2, one(), varbinds);
        }
    }

    /// A v2c Response carrying the given varbinds, BER-encoded by hand (so the generator controls every
    /// byte): SEQUENCE { version 1, community, [2] { request-id, 0, 0, SEQUENCE OF varbind } }.
    fn response(varbinds: &[(Vec<u32>, u8, Vec<u8>)]) -> Vec<u8> {
        fn tlv(tag: u8, content: &[u8]) -> Vec<u8> {
            let mut out = vec![tag];
            match content.len() {
                n if n < 0x80 => out.push(n as u8),
                n if n < 0x100 => out.extend([0x81, n as u8]),
                n => out.extend([0x82, (n >> 8) as u8, n as u8]),
            }
            out.extend_from_slice(content);
            out
        }
        fn oid(arcs: &[u32]) -> Vec<u8> {
            let mut out = vec![(arcs[0] * 40 + arcs[1]) as u8];
            for &arc in &arcs[2..] {
                let mut bytes = vec![(arc & 0x7f) as u8];
                let mut rest = arc >> 7;
                while rest > 0 {
                    bytes.push(0x80 | (rest & 0x7f) as u8);
                    rest >>= 7;
                }
                out.extend(bytes.iter().rev());
            }
            tlv(0x06, &out)
        }
        let list: Vec<u8> =
            varbinds.iter().flat_map(|(arcs, tag, value)| tlv(0x30, &[oid(arcs), tlv(*tag, value)].concat())).collect();
        let pdu = [tlv(0x02, &[7]), tlv(0x02, &[0]), tlv(0x02, &[0]), tlv(0x30, &list)].concat();
        tlv(0x30, &[tlv(0x02, &[1]), tlv(0x04, b"public"), tlv(0xa2, &pdu)].concat())
    }

    fn varbind() -> impl Strategy<Value = (Vec<u32>, u8, Vec<u8>)> {
        let oid = prop_oneof![
            Just(SYS_OBJECT_ID.to_vec()),
            Just(RPDU.column(RPDU.state, OutletNumber(1)).arcs().to_vec()),
            Just(RPDU.column(RPDU.pending, OutletNumber(1)).arcs().to_vec()),
            Just(RPDU.column(RPDU.command, OutletNumber(1)).arcs().to_vec()),
            prop::collection::vec(0u32..200, 2..12).prop_map(|mut arcs| {
                arcs[0] = 1;
                arcs[1] = 3;
                arcs
            }),
        ];
        // INTEGER, OCTET STRING, NULL, OID, Gauge32, noSuchObject, noSuchInstance, endOfMibView, junk.
        let tag = prop_oneof![
            Just(0x02u8),
            Just(0x04),
            Just(0x05),
            Just(0x06),
            Just(0x42),
            Just(0x80),
            Just(0x81),
            Just(0x82),
            any::<u8>()
        ];
        (oid, tag, prop::collection::vec(any::<u8>(), 0..6))
    }

    proptest! {
        #[test]
        fn arbitrary_datagrams_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..300)) {
            decode_bytes(&bytes);
        }

        #[test]
        fn well_formed_answers_with_any_bindings_never_panic(varbinds in prop::collection::vec(varbind(), 0..4), cut in any::<prop::sample::Index>()) {
            let bytes = response(&varbinds);
            decode_bytes(&bytes);
            decode_bytes(&bytes[..cut.index(bytes.len() + 1)]);
        }

        #[test]
        fn a_reading_is_off_only_for_state_two_with_no_command_pending(state in any::<i32>(), pending in any::<i32>()) {
            match decode_reading(&RPDU, one(), &answer(Value::Integer(state), Value::Integer(pending))) {
                Ok(reading) => {
                    prop_assert!(pending == 1 || pending == 2);
                    prop_assert_eq!(reading.state == OutletState::Off, state == 2);
                    prop_assert_eq!(reading.pending, pending == 1);
                    prop_assert!(crate::levels::proves_off(&reading, 0.0).is_ok() == (state == 2 && pending == 2));
                }
                Err(_) => prop_assert!(pending != 1 && pending != 2),
            }
        }
    }
}
