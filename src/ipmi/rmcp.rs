//! RMCP+ packets (IPMI v2.0 table 13-8) and the IPMI LAN messages inside them (figure 13-4):
//! pure encoders, and decoders that take whatever a BMC (or anyone on the path) sends and return a
//! typed [`DecodeError`], never a panic.

use aes::{
    Aes128,
    cipher::{BlockDecryptMut, BlockEncryptMut, KeyIvInit, block_padding::NoPadding},
};
use hmac::{Hmac, Mac};
use sha1::Sha1;

/// RMCP version 1.0, reserved, sequence 0xFF (no RMCP ACK), class IPMI.
const RMCP_HEADER: [u8; 4] = [0x06, 0x00, 0xff, 0x07];
const AUTH_TYPE_RMCP_PLUS: u8 = 0x06;
/// IPMI 1.5 framing with no authentication: only for the sessionless Get Channel Authentication
/// Capabilities and its answer (Debian's ipmi_sim 2.0.33 answers that request in no other framing).
const AUTH_TYPE_NONE: u8 = 0x00;
const ENCRYPTED: u8 = 0x80;
const AUTHENTICATED: u8 = 0x40;
/// Table 13-8: the "next header" byte of the integrity trailer.
const NEXT_HEADER: u8 = 0x07;
/// HMAC-SHA1-96.
pub const AUTH_CODE_LEN: usize = 12;
const BLOCK: usize = 16;
/// RMCP (4), auth type, payload type, session ID (4), sequence (4), payload length (2).
const HEADER_LEN: usize = 16;
/// The BMC's responder address, and the remote console's software ID.
const BMC_ADDRESS: u8 = 0x20;
const CONSOLE_SWID: u8 = 0x81;

pub type HmacSha1 = Hmac<Sha1>;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PayloadType {
    Ipmi = 0x00,
    OpenSessionRequest = 0x10,
    OpenSessionResponse = 0x11,
    Rakp1 = 0x12,
    Rakp2 = 0x13,
    Rakp3 = 0x14,
    Rakp4 = 0x15,
}

/// Why bytes were not the packet or message expected.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("{what} is {len} bytes, expected {expected}")]
    Length { what: &'static str, len: usize, expected: usize },
    #[error("not an RMCP IPMI packet")]
    NotRmcpIpmi,
    #[error("authentication type {0:#04x} (only RMCP+ is spoken)")]
    AuthType(u8),
    #[error("payload type {0:#04x}")]
    PayloadType(u8),
    #[error("a sessionless IPMI 1.5 frame with a session ID or sequence number")]
    LegacySession,
    #[error("an unauthenticated or unencrypted packet inside the session")]
    Unprotected,
    #[error("a malformed integrity trailer")]
    Trailer,
    #[error("an integrity check value (AuthCode) that does not verify")]
    Integrity,
    #[error("an encrypted payload that is no whole number of AES blocks")]
    CipherLength,
    #[error("a malformed confidentiality pad")]
    Pad,
    #[error("an IPMI message whose checksum fails")]
    Checksum,
    #[error("an IPMI message that is no response from the BMC to this console")]
    NotAResponse,
}

/// One decoded datagram (not yet authenticated).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Packet<'a> {
    pub payload_type: u8,
    pub encrypted: bool,
    pub authenticated: bool,
    pub session_id: u32,
    pub sequence: u32,
    pub payload: &'a [u8],
    /// The integrity trailer (pad, pad length, next header, AuthCode), empty when unauthenticated.
    trailer: &'a [u8],
    /// From the authentication type to the end of the trailer's next header: what the AuthCode covers.
    covered: &'a [u8],
}

pub fn parse(bytes: &[u8]) -> Result<Packet<'_>, DecodeError> {
    let [rmcp @ .., auth] =
        bytes.get(..5).ok_or(DecodeError::Length { what: "packet", len: bytes.len(), expected: 5 })?
    else {
        return Err(DecodeError::NotRmcpIpmi);
    };
    if rmcp != RMCP_HEADER {
        return Err(DecodeError::NotRmcpIpmi);
    }
    match *auth {
        AUTH_TYPE_RMCP_PLUS => parse_rmcp_plus(bytes),
        AUTH_TYPE_NONE => parse_legacy(bytes),
        other => Err(DecodeError::AuthType(other)),
    }
}

fn parse_rmcp_plus(bytes: &[u8]) -> Result<Packet<'_>, DecodeError> {
    let header = bytes.get(..HEADER_LEN).ok_or(DecodeError::Length {
        what: "RMCP+ header",
        len: bytes.len(),
        expected: HEADER_LEN,
    })?;
    let declared = usize::from(u16::from_le_bytes([header[14], header[15]]));
    let rest = &bytes[HEADER_LEN..];
    let payload = rest.get(..declared).ok_or(DecodeError::Length {
        what: "RMCP+ payload",
        len: rest.len(),
        expected: declared,
    })?;
    let authenticated = header[5] & AUTHENTICATED != 0;
    let trailer = &rest[declared..];
    let covered_end = if authenticated { bytes.len().saturating_sub(AUTH_CODE_LEN) } else { bytes.len() };
    Ok(Packet {
        payload_type: header[5] & 0x3f,
        encrypted: header[5] & ENCRYPTED != 0,
        authenticated,
        session_id: u32::from_le_bytes([header[6], header[7], header[8], header[9]]),
        sequence: u32::from_le_bytes([header[10], header[11], header[12], header[13]]),
        payload,
        trailer,
        covered: bytes.get(4..covered_end).unwrap_or_default(),
    })
}

/// IPMI 1.5 framing: auth type, sequence (4), session ID (4), length (1), message.
fn parse_legacy(bytes: &[u8]) -> Result<Packet<'_>, DecodeError> {
    let header =
        bytes.get(..14).ok_or(DecodeError::Length { what: "IPMI 1.5 header", len: bytes.len(), expected: 14 })?;
    if header[5..13].iter().any(|b| *b != 0) {
        return Err(DecodeError::LegacySession);
    }
    let declared = usize::from(header[13]);
    let rest = &bytes[14..];
    let payload = rest.get(..declared).ok_or(DecodeError::Length {
        what: "IPMI 1.5 message",
        len: rest.len(),
        expected: declared,
    })?;
    Ok(Packet {
        payload_type: PayloadType::Ipmi as u8,
        encrypted: false,
        authenticated: false,
        session_id: 0,
        sequence: 0,
        payload,
        trailer: &[],
        covered: &[],
    })
}

/// A sessionless RMCP+ packet: session ID and sequence number 0, neither signed nor encrypted.
pub fn sessionless(payload_type: PayloadType, payload: &[u8]) -> Vec<u8> {
    let mut packet = header(payload_type as u8, 0, 0, payload.len());
    packet.extend_from_slice(payload);
    packet
}

/// A sessionless IPMI message in IPMI 1.5 framing: authentication type none, session sequence
/// number and ID 0.
pub fn legacy_sessionless(message: &[u8]) -> Vec<u8> {
    let mut packet = RMCP_HEADER.to_vec();
    packet.push(AUTH_TYPE_NONE);
    packet.extend_from_slice(&[0; 8]);
    // A sessionless request is a few bytes: the caller builds it.
    packet.push(message.len().min(usize::from(u8::MAX)) as u8);
    packet.extend_from_slice(message);
    packet
}

fn header(payload_type: u8, session_id: u32, sequence: u32, payload_len: usize) -> Vec<u8> {
    let mut packet = Vec::with_capacity(HEADER_LEN + payload_len + 64);
    packet.extend_from_slice(&RMCP_HEADER);
    packet.push(AUTH_TYPE_RMCP_PLUS);
    packet.push(payload_type);
    packet.extend_from_slice(&session_id.to_le_bytes());
    packet.extend_from_slice(&sequence.to_le_bytes());
    // An IPMI payload is at most a few hundred bytes: the caller builds it.
    packet.extend_from_slice(&(payload_len.min(usize::from(u16::MAX)) as u16).to_le_bytes());
    packet
}

/// The session's integrity key (K1, for HMAC-SHA1-96) and confidentiality key (the first 16 bytes
/// of K2, for AES-CBC-128). Never printed.
#[derive(Clone)]
pub struct SessionKeys {
    pub k1: [u8; 20],
    pub aes: [u8; 16],
}

impl std::fmt::Debug for SessionKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SessionKeys(<redacted>)")
    }
}

/// An IPMI payload inside the session, encrypted (AES-CBC-128 with a fresh IV, table 13-20 pad)
/// and signed (HMAC-SHA1-96 over everything from the authentication type, table 13-8).
pub fn seal(keys: &SessionKeys, session_id: u32, sequence: u32, message: &[u8], iv: [u8; 16]) -> Vec<u8> {
    // Pad bytes 1, 2, … N, then N, to a whole number of blocks.
    let pad = (BLOCK - (message.len() + 1) % BLOCK) % BLOCK;
    let mut body = Vec::with_capacity(message.len() + pad + 1);
    body.extend_from_slice(message);
    body.extend((1..=pad).map(|b| b as u8));
    body.push(pad as u8);
    let body_len = body.len();
    // NoPadding fails only on a partial block, which the pad above rules out.
    let encrypted = cbc::Encryptor::<Aes128>::new(&keys.aes.into(), &iv.into())
        .encrypt_padded_mut::<NoPadding>(&mut body, body_len)
        .map(<[u8]>::to_vec)
        .unwrap_or_default();

    let ipmi = PayloadType::Ipmi as u8 | ENCRYPTED | AUTHENTICATED;
    let mut packet = header(ipmi, session_id, sequence, iv.len() + encrypted.len());
    packet.extend_from_slice(&iv);
    packet.extend_from_slice(&encrypted);
    // Integrity pad: 0xFF until auth type … next header is a multiple of 4 bytes.
    let integrity_pad = (4 - (packet.len() - 4 + 2) % 4) % 4;
    packet.extend(std::iter::repeat_n(0xff, integrity_pad));
    packet.push(integrity_pad as u8);
    packet.push(NEXT_HEADER);
    let code = auth_code(&keys.k1, &packet[4..]);
    packet.extend_from_slice(&code);
    packet
}

fn auth_code(k1: &[u8; 20], covered: &[u8]) -> [u8; AUTH_CODE_LEN] {
    let mut mac = mac(k1);
    mac.update(covered);
    let full = mac.finalize().into_bytes();
    let mut code = [0; AUTH_CODE_LEN];
    code.copy_from_slice(&full[..AUTH_CODE_LEN]);
    code
}

/// HMAC-SHA1 keyed with any bytes (HMAC takes keys of any length).
pub fn mac(key: &[u8]) -> HmacSha1 {
    <HmacSha1 as Mac>::new_from_slice(key).unwrap_or_else(|_| unreachable!("HMAC takes keys of any length"))
}

/// The IPMI message inside an authenticated, encrypted session packet: the trailer's shape and
/// AuthCode are checked (in constant time) before anything is decrypted, then the pad.
pub fn open(keys: &SessionKeys, packet: &Packet<'_>) -> Result<Vec<u8>, DecodeError> {
    if !packet.authenticated || !packet.encrypted || packet.payload_type != PayloadType::Ipmi as u8 {
        return Err(DecodeError::Unprotected);
    }
    let [pad @ .., pad_len, next_header] =
        packet.trailer.get(..packet.trailer.len().saturating_sub(AUTH_CODE_LEN)).ok_or(DecodeError::Trailer)?
    else {
        return Err(DecodeError::Trailer);
    };
    let aligned = packet.covered.len().is_multiple_of(4);
    if *next_header != NEXT_HEADER || usize::from(*pad_len) != pad.len() || pad.iter().any(|b| *b != 0xff) || !aligned {
        return Err(DecodeError::Trailer);
    }
    let code = &packet.trailer[packet.trailer.len() - AUTH_CODE_LEN..];
    let mut mac = mac(&keys.k1);
    mac.update(packet.covered);
    mac.verify_truncated_left(code).map_err(|_| DecodeError::Integrity)?;
    decrypt(&keys.aes, packet.payload)
}

fn decrypt(key: &[u8; 16], payload: &[u8]) -> Result<Vec<u8>, DecodeError> {
    if payload.len() < 2 * BLOCK || !payload.len().is_multiple_of(BLOCK) {
        return Err(DecodeError::CipherLength);
    }
    let (iv, ciphertext) = payload.split_at(BLOCK);
    let mut iv_block = [0; BLOCK];
    iv_block.copy_from_slice(iv);
    let mut body = ciphertext.to_vec();
    let plain = cbc::Decryptor::<Aes128>::new(&(*key).into(), &iv_block.into())
        .decrypt_padded_mut::<NoPadding>(&mut body)
        .map_err(|_| DecodeError::CipherLength)?;
    let [rest @ .., pad_len] = plain else { return Err(DecodeError::Pad) };
    let pad_len = usize::from(*pad_len);
    if pad_len >= BLOCK || pad_len > rest.len() {
        return Err(DecodeError::Pad);
    }
    let (message, pad) = rest.split_at(rest.len() - pad_len);
    if pad.iter().zip(1u8..).any(|(byte, expected)| *byte != expected) {
        return Err(DecodeError::Pad);
    }
    Ok(message.to_vec())
}

/// A request to the BMC (LUN 0) from the remote console (LUN 0), figure 13-4.
pub fn request(netfn: u8, command: u8, rq_seq: u8, data: &[u8]) -> Vec<u8> {
    let mut message = vec![BMC_ADDRESS, netfn << 2];
    message.push(checksum(&message));
    message.extend_from_slice(&[CONSOLE_SWID, (rq_seq & 0x3f) << 2, command]);
    message.extend_from_slice(data);
    message.push(checksum(&message[3..]));
    message
}

/// Two's complement: the bytes and their checksum add up to 0.
fn checksum(bytes: &[u8]) -> u8 {
    bytes.iter().fold(0u8, |sum, b| sum.wrapping_add(*b)).wrapping_neg()
}

/// A BMC's response message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Response<'a> {
    /// The request's network function (the response's, minus one).
    pub netfn: u8,
    pub command: u8,
    pub rq_seq: u8,
    pub completion: u8,
    pub data: &'a [u8],
}

pub fn response(message: &[u8]) -> Result<Response<'_>, DecodeError> {
    let [rq_addr, netfn_lun, header_sum, rs_addr, seq_lun, command, completion, data @ .., _] = message else {
        return Err(DecodeError::Length { what: "IPMI response", len: message.len(), expected: 8 });
    };
    if checksum(&message[..2]) != *header_sum || checksum(&message[3..message.len() - 1]) != message[message.len() - 1]
    {
        return Err(DecodeError::Checksum);
    }
    let netfn = netfn_lun >> 2;
    if *rq_addr != CONSOLE_SWID || *rs_addr != BMC_ADDRESS || netfn.is_multiple_of(2) {
        return Err(DecodeError::NotAResponse);
    }
    Ok(Response { netfn: netfn - 1, command: *command, rq_seq: seq_lun >> 2, completion: *completion, data })
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn keys() -> SessionKeys {
        SessionKeys { k1: [7; 20], aes: [9; 16] }
    }

    /// A response message as a BMC builds it (the mirror of [`request`]).
    fn bmc_response(netfn: u8, command: u8, rq_seq: u8, completion: u8, data: &[u8]) -> Vec<u8> {
        let mut message = vec![CONSOLE_SWID, (netfn + 1) << 2];
        message.push(checksum(&message));
        message.extend_from_slice(&[BMC_ADDRESS, rq_seq << 2, command, completion]);
        message.extend_from_slice(data);
        message.push(checksum(&message[3..]));
        message
    }

    #[test]
    fn a_request_carries_both_checksums() {
        // Get Chassis Status, rqSeq 5: as ipmitool frames it.
        assert_eq!(request(0x00, 0x01, 5, &[]), [0x20, 0x00, 0xe0, 0x81, 0x14, 0x01, 0x6a]);
        let message = request(0x06, 0x3c, 1, &[1, 2, 3, 4]);
        assert_eq!(message[..3].iter().fold(0u8, |s, b| s.wrapping_add(*b)), 0);
        assert_eq!(message[3..].iter().fold(0u8, |s, b| s.wrapping_add(*b)), 0);
    }

    #[test]
    fn a_response_is_decoded_and_its_checksums_checked() {
        let message = bmc_response(0x00, 0x01, 5, 0x00, &[0x01, 0x00, 0x00]);
        let decoded = response(&message).unwrap();
        assert_eq!(
            decoded,
            Response { netfn: 0x00, command: 0x01, rq_seq: 5, completion: 0, data: &[0x01, 0x00, 0x00] }
        );
        let mut corrupt = message.clone();
        corrupt[7] ^= 1;
        assert_eq!(response(&corrupt), Err(DecodeError::Checksum));
        // A request echoed back is not a response.
        assert_eq!(response(&request(0x00, 0x01, 5, &[0])), Err(DecodeError::NotAResponse));
    }

    #[test]
    fn a_sealed_packet_opens_with_the_same_keys_only() {
        let message = request(0x06, 0x37, 3, &[]);
        let packet = seal(&keys(), 0x0102_0304, 9, &message, [3; 16]);
        let parsed = parse(&packet).unwrap();
        assert_eq!((parsed.session_id, parsed.sequence, parsed.payload_type), (0x0102_0304, 9, 0));
        assert!(parsed.authenticated && parsed.encrypted);
        assert_eq!(open(&keys(), &parsed).unwrap(), message);
        assert_eq!((packet.len() - 4 - AUTH_CODE_LEN) % 4, 0, "the covered part is 4-aligned");

        let other = SessionKeys { k1: [8; 20], aes: [9; 16] };
        assert_eq!(open(&other, &parsed), Err(DecodeError::Integrity));
        for at in [5, 10, 20, packet.len() - 1] {
            let mut flipped = packet.clone();
            flipped[at] ^= 0x10;
            let verdict = parse(&flipped).map(|p| open(&keys(), &p));
            assert!(!matches!(verdict, Ok(Ok(_))), "a flipped byte at {at} was accepted");
        }
    }

    #[test]
    fn every_message_length_pads_to_whole_blocks() {
        for len in 0..40 {
            let message: Vec<u8> = (0..len).map(|i| i as u8).collect();
            let packet = seal(&keys(), 1, 1, &message, [0; 16]);
            assert_eq!(open(&keys(), &parse(&packet).unwrap()).unwrap(), message, "length {len}");
        }
    }

    #[test]
    fn a_pad_that_is_not_one_two_three_is_refused() {
        let key = [9u8; 16];
        // The last byte says 3 pad bytes, which read 1, 3, 2 — not 1, 2, 3.
        let mut encrypted = vec![0u8; 12];
        encrypted.extend_from_slice(&[1, 3, 2, 3]);
        let len = encrypted.len();
        cbc::Encryptor::<Aes128>::new(&key.into(), &[0u8; 16].into())
            .encrypt_padded_mut::<NoPadding>(&mut encrypted, len)
            .unwrap();
        let mut payload = vec![0u8; 16];
        payload.extend_from_slice(&encrypted);
        assert_eq!(decrypt(&key, &payload), Err(DecodeError::Pad));
    }

    #[test]
    fn an_unsigned_packet_is_never_opened() {
        let packet = sessionless(PayloadType::Ipmi, &request(0x06, 0x37, 0, &[]));
        assert_eq!(open(&keys(), &parse(&packet).unwrap()), Err(DecodeError::Unprotected));
    }

    #[test]
    fn a_sessionless_ipmi_1_5_answer_is_read_but_not_one_with_a_session() {
        let request = request(0x06, 0x38, 0, &[0x8e, 0x03]);
        // As ipmi_sim logged ipmitool's request.
        assert_eq!(
            legacy_sessionless(&request),
            [6, 0, 0xff, 7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9, 0x20, 0x18, 0xc8, 0x81, 0, 0x38, 0x8e, 0x03, 0xb6]
        );
        let message = bmc_response(0x06, 0x38, 0, 0, &[1, 0x80, 0x04, 0x02, 0, 0, 0, 0]);
        let mut frame = legacy_sessionless(&message);
        let parsed = parse(&frame).unwrap();
        assert_eq!((parsed.payload, parsed.authenticated), (&message[..], false));
        frame[9] = 1;
        assert_eq!(parse(&frame), Err(DecodeError::LegacySession));
        frame[4] = 0x02; // MD5
        assert_eq!(parse(&frame), Err(DecodeError::AuthType(0x02)));
    }

    proptest! {
        #[test]
        fn no_bytes_make_a_decoder_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            if let Ok(packet) = parse(&bytes) {
                let _ = open(&keys(), &packet);
                let _ = response(packet.payload);
            }
            let _ = response(&bytes);
            let _ = decrypt(&[0; 16], &bytes);
        }

        #[test]
        fn a_valid_header_with_arbitrary_rest_never_panics(
            flags in any::<u8>(),
            rest in proptest::collection::vec(any::<u8>(), 0..120),
        ) {
            let mut bytes = vec![0x06, 0x00, 0xff, 0x07, 0x06, flags];
            bytes.extend_from_slice(&rest);
            if let Ok(packet) = parse(&bytes) {
                let _ = open(&keys(), &packet);
            }
        }

        #[test]
        fn sealed_messages_round_trip(
            message in proptest::collection::vec(any::<u8>(), 0..100),
            session_id in any::<u32>(),
            sequence in any::<u32>(),
            iv in any::<[u8; 16]>(),
        ) {
            let packet = seal(&keys(), session_id, sequence, &message, iv);
            let parsed = parse(&packet).unwrap();
            prop_assert_eq!((parsed.session_id, parsed.sequence), (session_id, sequence));
            prop_assert_eq!(open(&keys(), &parsed).unwrap(), message);
        }
    }
}
