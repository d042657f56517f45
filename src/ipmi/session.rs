//! The UDP exchange (bounded retries, every wait under a timeout), session activation, and the
//! authenticated session with its sequence numbers.

use std::{net::SocketAddr, time::Duration};

use tokio::{net::UdpSocket, sync::OwnedSemaphorePermit, time::Instant};
use tracing::debug;

use super::{
    AuthFailure, CipherRefusal, CompletionCode, Discarded, Guid, IpmiConfig, IpmiError, IpmiIdentity, PrivilegeRefusal,
    ProtocolProblem, SetupProblem, Step,
    rakp::{self, Exchange, RmcpStatus},
    rmcp::{self, PayloadType, SessionKeys},
};
use crate::bmc::{PowerState, ResetType};

const NETFN_CHASSIS: u8 = 0x00;
const NETFN_APP: u8 = 0x06;
const GET_CHASSIS_STATUS: u8 = 0x01;
const CHASSIS_CONTROL: u8 = 0x02;
const GET_CHANNEL_AUTH_CAPABILITIES: u8 = 0x38;
const GET_SYSTEM_GUID: u8 = 0x37;
const SET_SESSION_PRIVILEGE: u8 = 0x3b;
const CLOSE_SESSION: u8 = 0x3c;
/// Chassis Control's only two directives coroner sends.
const POWER_DOWN: u8 = 0x00;
const POWER_UP: u8 = 0x01;
/// Get Channel Authentication Capabilities: this channel (0x0E), with IPMI v2.0 extended data (0x80).
const THIS_CHANNEL_V2: u8 = 0x8e;
/// RAKP 3 status telling the BMC its RAKP 2 did not verify: it drops the half-open session.
const INVALID_INTEGRITY_CHECK: u8 = 0x0f;
/// An IPMI datagram is a few hundred bytes; anything longer is cut and then fails to decode.
const DATAGRAM: usize = 1024;

/// What one datagram turned out to be.
enum Verdict<T> {
    Accept(T),
    Discard(Discarded),
    Fail(IpmiError),
}

/// The socket to one BMC and its retry budget.
struct Link {
    socket: UdpSocket,
    bmc: SocketAddr,
    timeout: Duration,
    attempts: u32,
    sent: u32,
    discarded: u32,
}

impl Link {
    /// Sends `build()` up to `attempts` times, each time waiting `timeout` for a datagram `judge`
    /// accepts; discarded datagrams do not extend the wait.
    async fn exchange<T>(
        &mut self,
        step: Step,
        attempts: u32,
        mut build: impl FnMut() -> Result<Vec<u8>, IpmiError>,
        mut judge: impl FnMut(&[u8]) -> Verdict<T>,
    ) -> Result<T, IpmiError> {
        let mut buffer = [0u8; DATAGRAM];
        let (mut discarded, mut last) = (0, None);
        for _ in 0..attempts {
            let packet = build()?;
            self.sent = self.sent.saturating_add(1);
            if let Err(error) = self.socket.send(&packet).await {
                // A connected UDP socket reports an earlier ICMP refusal here or on receive.
                last = Some(Discarded::Io(error.kind()));
                continue;
            }
            let deadline = Instant::now() + self.timeout;
            loop {
                match tokio::time::timeout_at(deadline, self.socket.recv(&mut buffer)).await {
                    Err(_) => break,
                    Ok(Err(error)) => {
                        last = Some(Discarded::Io(error.kind()));
                        break;
                    }
                    Ok(Ok(len)) => match judge(&buffer[..len]) {
                        Verdict::Accept(value) => return Ok(value),
                        Verdict::Fail(error) => return Err(error),
                        Verdict::Discard(why) => {
                            debug!(bmc = %self.bmc, %step, %why, "discarded an IPMI datagram");
                            discarded += 1;
                            self.discarded = self.discarded.saturating_add(1);
                            last = Some(why);
                        }
                    },
                }
            }
        }
        Err(IpmiError::NoAnswer { bmc: self.bmc, step, attempts, timeout: self.timeout, discarded, last })
    }

    /// A sessionless RMCP+ exchange of one session-activation message.
    async fn activation<T>(
        &mut self,
        step: Step,
        request: (PayloadType, &[u8]),
        answer: PayloadType,
        mut judge: impl FnMut(&[u8]) -> Verdict<T>,
    ) -> Result<T, IpmiError> {
        let packet = rmcp::sessionless(request.0, request.1);
        let attempts = self.attempts;
        self.exchange(
            step,
            attempts,
            || Ok(packet.clone()),
            |bytes| match rmcp::parse(bytes) {
                Err(error) => Verdict::Discard(error.into()),
                Ok(p) if p.payload_type != answer as u8 || p.session_id != 0 || p.authenticated || p.encrypted => {
                    Verdict::Discard(Discarded::Unmatched)
                }
                Ok(p) => judge(p.payload),
            },
        )
        .await
    }
}

fn random<const N: usize>() -> Result<[u8; N], IpmiError> {
    let mut bytes = [0; N];
    getrandom::fill(&mut bytes).map_err(|_| IpmiError::Setup(SetupProblem::NoRandomness))?;
    Ok(bytes)
}

/// A session ID for our side: random and never 0 (0 means "no session").
fn console_id() -> Result<u32, IpmiError> {
    Ok(u32::from_le_bytes(random()?).max(1))
}

/// The session sequence numbers this console sends: from 1, skipping 0 when they wrap.
#[derive(Clone, Copy, Debug)]
struct Outbound(u32);

impl Outbound {
    fn next(&mut self) -> u32 {
        let current = self.0;
        self.0 = match current.wrapping_add(1) {
            0 => 1,
            next => next,
        };
        current
    }
}

/// The BMC's sequence numbers seen: a reply is taken once, and only within 15 ahead of or 16
/// behind the highest one authenticated so far (as ipmi_sim judges ours).
#[derive(Clone, Copy, Debug, Default)]
struct Window {
    highest: Option<u32>,
    /// Bit n: `highest - n` was seen.
    seen: u32,
}

const AHEAD: u32 = 15;
const BEHIND: u32 = 16;

impl Window {
    fn accept(&mut self, sequence: u32) -> bool {
        if sequence == 0 {
            return false;
        }
        let Some(highest) = self.highest else {
            (self.highest, self.seen) = (Some(sequence), 1);
            return true;
        };
        let ahead = sequence.wrapping_sub(highest);
        let behind = highest.wrapping_sub(sequence);
        if (1..=AHEAD).contains(&ahead) {
            (self.highest, self.seen) = (Some(sequence), (self.seen << ahead) | 1);
            true
        } else if behind < BEHIND && self.seen & (1 << behind) == 0 {
            self.seen |= 1 << behind;
            true
        } else {
            false
        }
    }
}

/// An authenticated RMCP+ session. Dropping it unclosed sends Close Session without waiting.
pub struct Session {
    link: Link,
    keys: SessionKeys,
    bmc_id: u32,
    console_id: u32,
    outbound: Outbound,
    window: Window,
    rq_seq: u8,
    rakp2_guid: Guid,
    closed: bool,
    _slot: OwnedSemaphorePermit,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session").field("bmc", &self.link.bmc).field("rakp2_guid", &self.rakp2_guid).finish()
    }
}

impl Session {
    pub(super) async fn establish(
        config: &IpmiConfig,
        bmc: SocketAddr,
        slot: OwnedSemaphorePermit,
    ) -> Result<Self, IpmiError> {
        let unspecified: SocketAddr = if bmc.is_ipv4() {
            (std::net::Ipv4Addr::UNSPECIFIED, 0).into()
        } else {
            (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
        };
        let socket = UdpSocket::bind(unspecified).await.map_err(|e| IpmiError::Socket { bmc, kind: e.kind() })?;
        // Connected: the kernel drops datagrams from anyone but the BMC's address and port.
        socket.connect(bmc).await.map_err(|e| IpmiError::Socket { bmc, kind: e.kind() })?;
        let mut link =
            Link { socket, bmc, timeout: config.request_timeout, attempts: config.attempts(), sent: 0, discarded: 0 };

        let kg_reported = capabilities(&mut link, config).await?;
        let privilege = config.privilege.code();
        let console_id = console_id()?;
        let tag = random::<1>()?[0];

        let open = rakp::open_session_request(tag, privilege, console_id);
        let accepted = link
            .activation(
                Step::OpenSession,
                (PayloadType::OpenSessionRequest, &open),
                PayloadType::OpenSessionResponse,
                |payload| match rakp::open_session_response(payload) {
                    Err(error) => Verdict::Discard(error.into()),
                    Ok(answer) if answer.tag != tag => Verdict::Discard(Discarded::Unmatched),
                    Ok(answer) => match answer.accepted {
                        None => Verdict::Fail(refusal(bmc, config, Step::OpenSession, answer.status)),
                        Some(accepted) if accepted.console_id != console_id => Verdict::Discard(Discarded::Unmatched),
                        Some(accepted) if accepted.algorithms != rakp::SUITE_3 => {
                            Verdict::Fail(IpmiError::CipherSuite {
                                bmc,
                                refusal: CipherRefusal::OtherAlgorithms {
                                    authentication: accepted.algorithms.authentication,
                                    integrity: accepted.algorithms.integrity,
                                    confidentiality: accepted.algorithms.confidentiality,
                                },
                            })
                        }
                        Some(accepted) if accepted.bmc_id == 0 => Verdict::Fail(IpmiError::Protocol {
                            bmc,
                            step: Step::OpenSession,
                            problem: ProtocolProblem::ZeroSessionId,
                        }),
                        Some(accepted) => Verdict::Accept(accepted),
                    },
                },
            )
            .await?;
        let bmc_id = accepted.bmc_id;

        let password = config.password.reveal().as_bytes();
        let role = rakp::role(privilege);
        let username = config.username.as_bytes();
        let console_random = random::<16>()?;
        let rakp1 = rakp::rakp1(tag, bmc_id, &console_random, role, username);
        let keyed = link
            .activation(Step::Rakp1, (PayloadType::Rakp1, &rakp1), PayloadType::Rakp2, |payload| {
                match rakp::rakp2(payload) {
                    Err(error) => Verdict::Discard(error.into()),
                    Ok(answer) if answer.tag != tag => Verdict::Discard(Discarded::Unmatched),
                    Ok(answer) => match answer.keyed {
                        None => Verdict::Fail(refusal(bmc, config, Step::Rakp1, answer.status)),
                        Some(_) if answer.console_id != console_id => Verdict::Discard(Discarded::OtherSession),
                        Some(keyed) => Verdict::Accept(keyed),
                    },
                }
            })
            .await?;
        let exchange = Exchange {
            console_id,
            bmc_id,
            console_random,
            bmc_random: keyed.bmc_random,
            guid: keyed.guid,
            role,
            username: username.to_vec(),
        };
        if !exchange.rakp2_verifies(password, &keyed.auth_code) {
            // Tell the BMC to drop the half-open session; no answer is awaited.
            let _ = link
                .socket
                .send(&rmcp::sessionless(PayloadType::Rakp3, &rakp::rakp3(tag, INVALID_INTEGRITY_CHECK, bmc_id, &[])))
                .await;
            return Err(IpmiError::Unauthorized {
                bmc,
                username: config.username.clone(),
                failure: AuthFailure::Rakp2Mismatch,
            });
        }

        let kg = config.kg.as_ref().map_or(password, |kg| kg.0.as_slice());
        let sik = exchange.sik(kg);
        let rakp3 = rakp::rakp3(tag, 0, bmc_id, &exchange.rakp3_code(password));
        let check = link
            .activation(Step::Rakp3, (PayloadType::Rakp3, &rakp3), PayloadType::Rakp4, |payload| {
                match rakp::rakp4(payload) {
                    Err(error) => Verdict::Discard(error.into()),
                    Ok(answer) if answer.tag != tag => Verdict::Discard(Discarded::Unmatched),
                    Ok(answer) => match answer.integrity_check {
                        None => Verdict::Fail(refusal(bmc, config, Step::Rakp3, answer.status)),
                        Some(_) if answer.console_id != console_id => Verdict::Discard(Discarded::OtherSession),
                        Some(check) => Verdict::Accept(check),
                    },
                }
            })
            .await?;
        if !exchange.rakp4_verifies(&sik, &check) {
            return Err(IpmiError::BmcKeyMismatch { bmc, bmc_reports_kg: kg_reported });
        }

        let mut session = Self {
            link,
            keys: rakp::session_keys(&sik),
            bmc_id,
            console_id,
            outbound: Outbound(1),
            window: Window::default(),
            rq_seq: 0,
            rakp2_guid: Guid::from_bytes(keyed.guid),
            closed: false,
            _slot: slot,
        };
        // Dropped on error, the session sends Close Session from here on.
        let granted = match session.request(Step::SetPrivilege, NETFN_APP, SET_SESSION_PRIVILEGE, &[privilege]).await {
            Err(IpmiError::Completion { code, .. }) => {
                return Err(IpmiError::PrivilegeRefused {
                    bmc,
                    privilege: config.privilege,
                    why: PrivilegeRefusal::Completion(code),
                });
            }
            other => other?,
        };
        match granted.first() {
            Some(level) if level & 0x0f == privilege => Ok(session),
            Some(level) => Err(session.protocol(Step::SetPrivilege, ProtocolProblem::OtherPrivilege(*level))),
            None => Err(session.protocol(Step::SetPrivilege, ProtocolProblem::DataLength { len: 0, expected: 1 })),
        }
    }

    /// The GUID RAKP 2 carried, covered by the BMC's HMAC.
    /// The BMC's address.
    pub fn bmc(&self) -> SocketAddr {
        self.link.bmc
    }

    pub fn rakp2_guid(&self) -> Guid {
        self.rakp2_guid
    }

    /// Datagrams sent in this session so far, its activation included.
    pub fn datagrams_sent(&self) -> u32 {
        self.link.sent
    }

    /// Datagrams received and discarded so far (malformed, forged, replayed, for another session
    /// or another request).
    pub fn datagrams_discarded(&self) -> u32 {
        self.link.discarded
    }

    /// `Get System GUID`, inside the session. 0xC1 is [`IpmiError::IdentityUnavailable`].
    pub async fn system_guid(&mut self) -> Result<Guid, IpmiError> {
        let data = match self.request(Step::GetSystemGuid, NETFN_APP, GET_SYSTEM_GUID, &[]).await {
            Err(IpmiError::Completion { bmc, code: CompletionCode::INVALID_COMMAND, .. }) => {
                return Err(IpmiError::IdentityUnavailable { bmc });
            }
            other => other?,
        };
        let bytes: [u8; 16] = data.as_slice().try_into().map_err(|_| {
            self.protocol(Step::GetSystemGuid, ProtocolProblem::DataLength { len: data.len(), expected: 16 })
        })?;
        Ok(Guid::from_bytes(bytes))
    }

    /// The GUID, only when `Get System GUID` in the session answers the bytes RAKP 2 proved.
    pub async fn identity(&mut self) -> Result<IpmiIdentity, IpmiError> {
        let session_guid = self.system_guid().await?;
        if session_guid != self.rakp2_guid {
            return Err(IpmiError::GuidsDiffer { bmc: self.link.bmc, rakp2: self.rakp2_guid, session: session_guid });
        }
        Ok(IpmiIdentity { rakp2_guid: self.rakp2_guid, session_guid })
    }

    /// `Get Chassis Status`: the power-on bit of "current power state".
    pub async fn power(&mut self) -> Result<PowerState, IpmiError> {
        let data = self.request(Step::GetChassisStatus, NETFN_CHASSIS, GET_CHASSIS_STATUS, &[]).await?;
        chassis_power(&data).ok_or_else(|| {
            self.protocol(Step::GetChassisStatus, ProtocolProblem::DataLength { len: data.len(), expected: 3 })
        })
    }

    /// `Chassis Control` power down (ForceOff) or power up (On); nothing else can be asked.
    pub async fn act(&mut self, reset: ResetType) -> Result<(), IpmiError> {
        let directive = match reset {
            ResetType::ForceOff => POWER_DOWN,
            ResetType::On => POWER_UP,
        };
        self.request(Step::ChassisControl, NETFN_CHASSIS, CHASSIS_CONTROL, &[directive]).await.map(drop)
    }

    /// Close Session, sent once and its answer awaited once: the BMC frees the slot at once rather
    /// than at its idle timeout. Best effort: a close that fails is logged and changes nothing else.
    pub async fn close(mut self) {
        self.closed = true;
        let id = self.bmc_id.to_le_bytes();
        if let Err(error) = self.request_with(Step::CloseSession, NETFN_APP, CLOSE_SESSION, &id, 1).await {
            debug!(bmc = %self.link.bmc, %error, "Close Session failed; the BMC ends the session at its idle timeout");
        }
    }

    fn protocol(&self, step: Step, problem: ProtocolProblem) -> IpmiError {
        IpmiError::Protocol { bmc: self.link.bmc, step, problem }
    }

    async fn request(&mut self, step: Step, netfn: u8, command: u8, data: &[u8]) -> Result<Vec<u8>, IpmiError> {
        let attempts = self.link.attempts;
        self.request_with(step, netfn, command, data, attempts).await
    }

    /// One request in the session. Every attempt gets a new session sequence number (the BMC
    /// refuses one it saw) and keeps the request's IPMI sequence, so a late answer to an earlier
    /// attempt still answers it.
    async fn request_with(
        &mut self,
        step: Step,
        netfn: u8,
        command: u8,
        data: &[u8],
        attempts: u32,
    ) -> Result<Vec<u8>, IpmiError> {
        self.rq_seq = (self.rq_seq + 1) & 0x3f;
        let rq_seq = self.rq_seq;
        let message = rmcp::request(netfn, command, rq_seq, data);
        let (keys, bmc_id, console_id, outbound, window) =
            (&self.keys, self.bmc_id, self.console_id, &mut self.outbound, &mut self.window);
        let build = || Ok(rmcp::seal(keys, bmc_id, outbound.next(), &message, random()?));
        let judge = |bytes: &[u8]| {
            let packet = match rmcp::parse(bytes) {
                Ok(packet) if packet.session_id == console_id => packet,
                Ok(_) => return Verdict::Discard(Discarded::OtherSession),
                Err(error) => return Verdict::Discard(error.into()),
            };
            let message = match rmcp::open(keys, &packet) {
                Ok(message) => message,
                Err(error) => return Verdict::Discard(error.into()),
            };
            // Only after the AuthCode verified: a forged number must not move the window.
            if !window.accept(packet.sequence) {
                return Verdict::Discard(Discarded::Sequence);
            }
            match rmcp::response(&message) {
                Err(error) => Verdict::Discard(error.into()),
                Ok(r) if r.netfn != netfn || r.command != command || r.rq_seq != rq_seq => {
                    Verdict::Discard(Discarded::Unmatched)
                }
                Ok(r) => Verdict::Accept((r.completion, r.data.to_vec())),
            }
        };
        let (completion, data) = self.link.exchange(step, attempts, build, judge).await?;
        match completion {
            0 => Ok(data),
            code => Err(IpmiError::Completion { bmc: self.link.bmc, step, code: CompletionCode(code) }),
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        if self.closed {
            return;
        }
        let Ok(iv) = random() else { return };
        self.rq_seq = (self.rq_seq + 1) & 0x3f;
        let message = rmcp::request(NETFN_APP, CLOSE_SESSION, self.rq_seq, &self.bmc_id.to_le_bytes());
        let packet = rmcp::seal(&self.keys, self.bmc_id, self.outbound.next(), &message, iv);
        // Fire and forget: a Drop cannot wait, and the BMC's idle timeout is the fallback.
        if let Err(error) = self.link.socket.try_send(&packet) {
            debug!(bmc = %self.link.bmc, %error, "Close Session from drop not sent");
        }
    }
}

/// The channel must speak IPMI v2.0. Returns whether the BMC reports a K_G of its own.
async fn capabilities(link: &mut Link, config: &IpmiConfig) -> Result<bool, IpmiError> {
    let bmc = link.bmc;
    let request =
        rmcp::request(NETFN_APP, GET_CHANNEL_AUTH_CAPABILITIES, 0, &[THIS_CHANNEL_V2, config.privilege.code()]);
    let packet = rmcp::legacy_sessionless(&request);
    let attempts = link.attempts;
    let data = link
        .exchange(
            Step::AuthenticationCapabilities,
            attempts,
            || Ok(packet.clone()),
            |bytes| {
                let payload = match rmcp::parse(bytes) {
                    Ok(p) if p.payload_type == PayloadType::Ipmi as u8 && p.session_id == 0 && !p.authenticated => {
                        p.payload
                    }
                    Ok(_) => return Verdict::Discard(Discarded::Unmatched),
                    Err(error) => return Verdict::Discard(error.into()),
                };
                match rmcp::response(payload) {
                    Err(error) => Verdict::Discard(error.into()),
                    Ok(r) if r.netfn != NETFN_APP || r.command != GET_CHANNEL_AUTH_CAPABILITIES || r.rq_seq != 0 => {
                        Verdict::Discard(Discarded::Unmatched)
                    }
                    Ok(r) if r.completion != 0 => Verdict::Fail(IpmiError::Completion {
                        bmc,
                        step: Step::AuthenticationCapabilities,
                        code: CompletionCode(r.completion),
                    }),
                    Ok(r) => Verdict::Accept(r.data.to_vec()),
                }
            },
        )
        .await?;
    match channel_capabilities(&data) {
        Some(Capabilities { ipmi_v2: true, kg_set }) => Ok(kg_set),
        Some(_) => Err(IpmiError::NotIpmiV2 { bmc }),
        None => Err(IpmiError::Protocol {
            bmc,
            step: Step::AuthenticationCapabilities,
            problem: ProtocolProblem::DataLength { len: data.len(), expected: 8 },
        }),
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Capabilities {
    ipmi_v2: bool,
    kg_set: bool,
}

/// Get Channel Authentication Capabilities' data: byte 2 bit 7 "IPMI v2.0+ extended
/// capabilities", byte 3 bit 5 "K_G set to a non-zero value", byte 4 bit 1 "IPMI v2.0 connections".
fn channel_capabilities(data: &[u8]) -> Option<Capabilities> {
    let [_channel, auth_types, status, extended, ..] = *data else { return None };
    Some(Capabilities { ipmi_v2: auth_types & 0x80 != 0 && extended & 0x02 != 0, kg_set: status & 0x20 != 0 })
}

/// Get Chassis Status' data: bit 0 of "current power state" is "power is on".
fn chassis_power(data: &[u8]) -> Option<PowerState> {
    let [current, _last_event, _misc, ..] = *data else { return None };
    Some(if current & 0x01 == 0x01 { PowerState::On } else { PowerState::Off })
}

/// What a non-zero RMCP+ status in session activation means.
fn refusal(bmc: SocketAddr, config: &IpmiConfig, step: Step, status: RmcpStatus) -> IpmiError {
    match status.0 {
        0x01 | 0x0b => IpmiError::NoSessionSlot { bmc, status },
        0x04..=0x07 | 0x10 | 0x11 => IpmiError::CipherSuite { bmc, refusal: CipherRefusal::Refused(status) },
        0x09 | 0x0a => {
            IpmiError::PrivilegeRefused { bmc, privilege: config.privilege, why: PrivilegeRefusal::Status(status) }
        }
        0x0c | 0x0d | 0x0f => {
            IpmiError::Unauthorized { bmc, username: config.username.clone(), failure: AuthFailure::Refused(status) }
        }
        _ => IpmiError::Protocol { bmc, step, problem: ProtocolProblem::Status(status) },
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn outbound_numbers_start_at_1_and_skip_0_when_they_wrap() {
        let mut outbound = Outbound(u32::MAX - 1);
        assert_eq!([outbound.next(), outbound.next(), outbound.next()], [u32::MAX - 1, u32::MAX, 1]);
        assert_eq!(Outbound(1).next(), 1);
    }

    #[test]
    fn a_reply_number_is_taken_once_and_only_inside_the_window() {
        let mut window = Window::default();
        assert!(!window.accept(0));
        assert!(window.accept(10));
        assert!(!window.accept(10), "a replay");
        assert!(window.accept(12));
        assert!(window.accept(11), "late but new");
        assert!(!window.accept(11));

        let mut window = Window::default();
        assert!(window.accept(100));
        assert!(!window.accept(100 - 16), "too far behind");
        assert!(window.accept(100 - 15));
        assert!(!window.accept(100 + 16), "too far ahead");
        assert!(window.accept(100 + 15));
    }

    #[test]
    fn the_window_follows_the_bmcs_numbers_across_the_wrap() {
        let mut window = Window::default();
        assert!(window.accept(u32::MAX - 1));
        assert!(window.accept(u32::MAX));
        assert!(window.accept(1), "0 skipped");
        assert!(window.accept(2));
        assert!(!window.accept(u32::MAX));
    }

    #[test]
    fn each_activation_refusal_says_what_it_means() {
        let bmc: SocketAddr = "127.0.0.1:623".parse().unwrap();
        let config = IpmiConfig::new("127.0.0.1", "admin", crate::bmc::Password::new("pw".into()));
        let category = |status| refusal(bmc, &config, Step::OpenSession, RmcpStatus(status)).category();
        for (status, expected) in [
            (0x01, "no-session-slot"),
            (0x0b, "no-session-slot"),
            (0x04, "cipher-suite"),
            (0x11, "cipher-suite"),
            (0x09, "privilege"),
            (0x0a, "privilege"),
            (0x0d, "unauthorized"),
            (0x0f, "unauthorized"),
            (0x02, "protocol"),
            (0x99, "protocol"),
        ] {
            assert_eq!(category(status), expected, "{status:#04x}");
        }
    }

    #[test]
    fn the_power_on_bit_alone_says_on() {
        assert_eq!(chassis_power(&[0x01, 0, 0]), Some(PowerState::On));
        // Power fault, interlock and overload bits with power off: still off.
        assert_eq!(chassis_power(&[0x1e, 0, 0, 0]), Some(PowerState::Off));
        assert_eq!(chassis_power(&[0x01, 0]), None);
    }

    #[test]
    fn a_channel_without_ipmi_v2_is_told_apart() {
        // As pyghmi answers: IPMI v2.0 only, no K_G bit.
        let pyghmi = [1, 0x80, 0x04, 0x02, 0, 0, 0, 0];
        assert_eq!(channel_capabilities(&pyghmi), Some(Capabilities { ipmi_v2: true, kg_set: false }));
        // An IPMI 1.5 channel (MD5 only, no extended data) with a K_G.
        let legacy = [1, 0x04, 0x24, 0x00, 0, 0, 0, 0];
        assert_eq!(channel_capabilities(&legacy), Some(Capabilities { ipmi_v2: false, kg_set: true }));
        assert_eq!(channel_capabilities(&[1, 0x80, 0x04]), None);
    }

    proptest! {
        #[test]
        fn no_bytes_make_a_command_decoder_panic(bytes in proptest::collection::vec(any::<u8>(), 0..40)) {
            let _ = channel_capabilities(&bytes);
            let _ = chassis_power(&bytes);
        }

        #[test]
        fn no_sequence_of_numbers_makes_the_window_panic_or_take_one_twice_in_a_row(
            numbers in proptest::collection::vec(any::<u32>(), 0..100),
        ) {
            let mut window = Window::default();
            for n in numbers {
                if window.accept(n) {
                    prop_assert!(!window.accept(n));
                }
            }
        }

        #[test]
        fn an_increasing_run_from_anywhere_is_always_taken(start in any::<u32>(), steps in proptest::collection::vec(1u32..=14, 1..50)) {
            let (mut window, mut outbound) = (Window::default(), Outbound(start.max(1)));
            for step in steps {
                let mut n = outbound.next();
                for _ in 1..step {
                    n = outbound.next();
                }
                prop_assert!(window.accept(n), "{n}");
            }
        }
    }
}
