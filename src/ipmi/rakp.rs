//! Session activation for cipher suite 3 (IPMI v2.0 §13.17–13.33): the Open Session and RAKP
//! messages and the key exchange's HMACs (RAKP-HMAC-SHA1), as pure functions.

use hmac::Mac;

use super::rmcp::{DecodeError, SessionKeys, mac};

/// RAKP-HMAC-SHA1, HMAC-SHA1-96 and AES-CBC-128 (table 13-17, 13-18, 13-19): cipher suite 3.
pub const SUITE_3: Algorithms = Algorithms { authentication: 0x01, integrity: 0x01, confidentiality: 0x01 };
const RAKP_HMAC_SHA1_LEN: usize = 20;
const HMAC_SHA1_96_LEN: usize = 12;
/// RAKP 1's role byte: bit 4 set asks for a name-only user lookup (as ipmitool does by default).
const NAME_ONLY_LOOKUP: u8 = 0x10;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Algorithms {
    pub authentication: u8,
    pub integrity: u8,
    pub confidentiality: u8,
}

/// An RMCP+ status code (table 13-15), as a BMC answered a session-activation message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RmcpStatus(pub u8);

impl RmcpStatus {
    pub fn meaning(self) -> &'static str {
        match self.0 {
            0x00 => "no errors",
            0x01 => "insufficient resources to create a session",
            0x02 => "invalid session ID",
            0x03 => "invalid payload type",
            0x04 => "invalid authentication algorithm",
            0x05 => "invalid integrity algorithm",
            0x06 => "no matching authentication payload",
            0x07 => "no matching integrity payload",
            0x08 => "inactive session ID",
            0x09 => "invalid role",
            0x0a => "unauthorized role or privilege level requested",
            0x0b => "insufficient resources to create a session at the requested role",
            0x0c => "invalid name length",
            0x0d => "unauthorized name",
            0x0e => "unauthorized GUID",
            0x0f => "invalid integrity check value",
            0x10 => "invalid confidentiality algorithm",
            0x11 => "no cipher suite match with proposed security algorithms",
            0x12 => "illegal or unrecognized parameter",
            _ => "reserved status code",
        }
    }
}

impl std::fmt::Display for RmcpStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RMCP+ status {:#04x} ({})", self.0, self.meaning())
    }
}

/// Open Session Request proposing exactly cipher suite 3: no "any" wildcard, so a
/// BMC cannot pick weaker algorithms.
pub fn open_session_request(tag: u8, privilege: u8, console_id: u32) -> Vec<u8> {
    let mut message = vec![tag, privilege, 0, 0];
    message.extend_from_slice(&console_id.to_le_bytes());
    for (payload, algorithm) in [(0, SUITE_3.authentication), (1, SUITE_3.integrity), (2, SUITE_3.confidentiality)] {
        message.extend_from_slice(&[payload, 0, 0, 8, algorithm, 0, 0, 0]);
    }
    message
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpenSessionResponse {
    pub tag: u8,
    pub status: RmcpStatus,
    /// Present when the status is 0.
    pub accepted: Option<Accepted>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Accepted {
    pub privilege: u8,
    pub console_id: u32,
    pub bmc_id: u32,
    pub algorithms: Algorithms,
}

/// Table 13-17. An error answer may be as short as tag and status (ipmi_sim sends just those).
pub fn open_session_response(message: &[u8]) -> Result<OpenSessionResponse, DecodeError> {
    let [tag, status, ..] = *message else {
        return Err(DecodeError::Length { what: "Open Session Response", len: message.len(), expected: 36 });
    };
    if status != 0 {
        return Ok(OpenSessionResponse { tag, status: RmcpStatus(status), accepted: None });
    }
    let Ok::<&[u8; 36], _>(bytes) = message.try_into() else {
        return Err(DecodeError::Length { what: "Open Session Response", len: message.len(), expected: 36 });
    };
    let algorithm = |at: usize, payload: u8| {
        (bytes[at] == payload && bytes[at + 3] == 8)
            .then_some(bytes[at + 4] & 0x3f)
            .ok_or(DecodeError::PayloadType(payload))
    };
    Ok(OpenSessionResponse {
        tag,
        status: RmcpStatus(0),
        accepted: Some(Accepted {
            privilege: bytes[2] & 0x0f,
            console_id: u32_le(&bytes[4..8]),
            bmc_id: u32_le(&bytes[8..12]),
            algorithms: Algorithms {
                authentication: algorithm(12, 0)?,
                integrity: algorithm(20, 1)?,
                confidentiality: algorithm(28, 2)?,
            },
        }),
    })
}

fn u32_le(bytes: &[u8]) -> u32 {
    let mut word = [0; 4];
    word.copy_from_slice(&bytes[..4]);
    u32::from_le_bytes(word)
}

/// What both sides know once RAKP 2 arrived: the inputs of every HMAC of the exchange.
#[derive(Clone)]
pub struct Exchange {
    pub console_id: u32,
    pub bmc_id: u32,
    pub console_random: [u8; 16],
    pub bmc_random: [u8; 16],
    pub guid: [u8; 16],
    /// RAKP 1's role byte as sent (privilege and lookup bit): every HMAC covers it.
    pub role: u8,
    pub username: Vec<u8>,
}

pub fn role(privilege: u8) -> u8 {
    privilege | NAME_ONLY_LOOKUP
}

/// RAKP Message 1.
pub fn rakp1(tag: u8, bmc_id: u32, console_random: &[u8; 16], role: u8, username: &[u8]) -> Vec<u8> {
    let mut message = vec![tag, 0, 0, 0];
    message.extend_from_slice(&bmc_id.to_le_bytes());
    message.extend_from_slice(console_random);
    message.extend_from_slice(&[role, 0, 0, username.len() as u8]);
    message.extend_from_slice(username);
    message
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rakp2 {
    pub tag: u8,
    pub status: RmcpStatus,
    pub console_id: u32,
    /// Present when the status is 0.
    pub keyed: Option<Rakp2Keyed>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rakp2Keyed {
    pub bmc_random: [u8; 16],
    pub guid: [u8; 16],
    pub auth_code: [u8; RAKP_HMAC_SHA1_LEN],
}

/// RAKP Message 2.
pub fn rakp2(message: &[u8]) -> Result<Rakp2, DecodeError> {
    let short = DecodeError::Length { what: "RAKP Message 2", len: message.len(), expected: 60 };
    let [tag, status, ..] = *message else { return Err(short) };
    let console_id = message.get(4..8).map(u32_le).unwrap_or_default();
    if status != 0 {
        return Ok(Rakp2 { tag, status: RmcpStatus(status), console_id, keyed: None });
    }
    let Ok::<&[u8; 60], _>(bytes) = message.try_into() else { return Err(short) };
    let mut keyed = Rakp2Keyed { bmc_random: [0; 16], guid: [0; 16], auth_code: [0; RAKP_HMAC_SHA1_LEN] };
    keyed.bmc_random.copy_from_slice(&bytes[8..24]);
    keyed.guid.copy_from_slice(&bytes[24..40]);
    keyed.auth_code.copy_from_slice(&bytes[40..60]);
    Ok(Rakp2 { tag, status: RmcpStatus(0), console_id, keyed: Some(keyed) })
}

/// RAKP Message 3. A non-zero status tells the BMC to drop the session.
pub fn rakp3(tag: u8, status: u8, bmc_id: u32, auth_code: &[u8]) -> Vec<u8> {
    let mut message = vec![tag, status, 0, 0];
    message.extend_from_slice(&bmc_id.to_le_bytes());
    message.extend_from_slice(auth_code);
    message
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rakp4 {
    pub tag: u8,
    pub status: RmcpStatus,
    pub console_id: u32,
    /// Present when the status is 0.
    pub integrity_check: Option<[u8; HMAC_SHA1_96_LEN]>,
}

/// RAKP Message 4.
pub fn rakp4(message: &[u8]) -> Result<Rakp4, DecodeError> {
    let short = DecodeError::Length { what: "RAKP Message 4", len: message.len(), expected: 20 };
    let [tag, status, ..] = *message else { return Err(short) };
    let console_id = message.get(4..8).map(u32_le).unwrap_or_default();
    if status != 0 {
        return Ok(Rakp4 { tag, status: RmcpStatus(status), console_id, integrity_check: None });
    }
    let Ok::<&[u8; 20], _>(bytes) = message.try_into() else { return Err(short) };
    let mut check = [0; HMAC_SHA1_96_LEN];
    check.copy_from_slice(&bytes[8..20]);
    Ok(Rakp4 { tag, status: RmcpStatus(0), console_id, integrity_check: Some(check) })
}

impl Exchange {
    fn role_and_name(&self) -> Vec<u8> {
        let mut bytes = vec![self.role, self.username.len() as u8];
        bytes.extend_from_slice(&self.username);
        bytes
    }

    /// RAKP 2's Key Exchange Authentication Code, HMAC_Kuid(SIDm, SIDc, Rm, Rc, GUIDc, ROLEm,
    /// ULENGTHm, UNAMEm), checked in constant time: only a BMC that knows the password computes it.
    pub fn rakp2_verifies(&self, password: &[u8], auth_code: &[u8]) -> bool {
        let mut mac = mac(password);
        mac.update(&self.console_id.to_le_bytes());
        mac.update(&self.bmc_id.to_le_bytes());
        mac.update(&self.console_random);
        mac.update(&self.bmc_random);
        mac.update(&self.guid);
        mac.update(&self.role_and_name());
        mac.verify_slice(auth_code).is_ok()
    }

    /// RAKP 3's code, HMAC_Kuid(Rc, SIDm, ROLEm, ULENGTHm, UNAMEm).
    pub fn rakp3_code(&self, password: &[u8]) -> [u8; RAKP_HMAC_SHA1_LEN] {
        let mut mac = mac(password);
        mac.update(&self.bmc_random);
        mac.update(&self.console_id.to_le_bytes());
        mac.update(&self.role_and_name());
        mac.finalize().into_bytes().into()
    }

    /// The Session Integrity Key, HMAC_KG(Rm, Rc, ROLEm, ULENGTHm, UNAMEm); K_G is the password
    /// unless the BMC has a key of its own.
    pub fn sik(&self, kg: &[u8]) -> [u8; 20] {
        let mut mac = mac(kg);
        mac.update(&self.console_random);
        mac.update(&self.bmc_random);
        mac.update(&self.role_and_name());
        mac.finalize().into_bytes().into()
    }

    /// RAKP 4's Integrity Check Value, HMAC_SIK(Rm, SIDc, GUIDc) cut to 96 bits: only a BMC that
    /// derived the same SIK (the same K_G) computes it.
    pub fn rakp4_verifies(&self, sik: &[u8; 20], check: &[u8]) -> bool {
        let mut mac = mac(sik);
        mac.update(&self.console_random);
        mac.update(&self.bmc_id.to_le_bytes());
        mac.update(&self.guid);
        check.len() == HMAC_SHA1_96_LEN && mac.verify_truncated_left(check).is_ok()
    }
}

/// K1 = HMAC_SIK(0x01 × 20) signs the session's packets; K2 = HMAC_SIK(0x02 × 20), cut to 128 bits,
/// encrypts them (§13.32).
pub fn session_keys(sik: &[u8; 20]) -> SessionKeys {
    let derive = |constant: u8| -> [u8; 20] {
        let mut mac = mac(sik);
        mac.update(&[constant; 20]);
        mac.finalize().into_bytes().into()
    };
    let k2 = derive(0x02);
    let mut aes = [0; 16];
    aes.copy_from_slice(&k2[..16]);
    SessionKeys { k1: derive(0x01), aes }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn exchange() -> Exchange {
        Exchange {
            console_id: 0x0a0b_0c0d,
            bmc_id: 0x0102_0304,
            console_random: std::array::from_fn(|i| i as u8),
            bmc_random: std::array::from_fn(|i| 0x10 + i as u8),
            guid: std::array::from_fn(|i| 0xa0 + i as u8),
            role: role(0x03),
            username: b"admin".to_vec(),
        }
    }

    // The expected values come from Python's hmac/hashlib (an independent implementation) over the
    // fields in the order IPMI v2.0 §13.31–13.32 gives, e.g. RAKP 2's as
    // hmac.new(b"password", sidm + sidc + rm + rc + guid + bytes([0x13, 5]) + b"admin", sha1).
    #[test]
    fn the_exchange_hmacs_match_an_independent_implementation() {
        let exchange = exchange();
        let rakp2 = hex::decode("b6078b1781aa3b2621d861090811987c82e27905").unwrap();
        assert!(exchange.rakp2_verifies(b"password", &rakp2));
        let sik = exchange.sik(b"password");
        assert_eq!(hex::encode(sik), "b50d378a7556b74f5a5ad8a8b06010363a561f94");
        assert_eq!(hex::encode(exchange.rakp3_code(b"password")), "e26d2953d67e593f9d547275d8b883280cdab1bb");
        assert!(exchange.rakp4_verifies(&sik, &hex::decode("b89aa2c7006ab732aaa6c9d8").unwrap()));
        let keys = session_keys(&sik);
        assert_eq!(hex::encode(keys.k1), "16d604559776e2ba1aea09e417fa0f31650bbe2f");
        assert_eq!(hex::encode(keys.aes), "9296653482e08618ffe9497d50a1aed3");
    }

    #[test]
    fn a_rakp2_code_from_another_password_does_not_verify() {
        let exchange = exchange();
        let mut good = mac(b"password");
        for part in [
            &exchange.console_id.to_le_bytes()[..],
            &exchange.bmc_id.to_le_bytes(),
            &exchange.console_random,
            &exchange.bmc_random,
            &exchange.guid,
            &[exchange.role, 5],
            b"admin",
        ] {
            good.update(part);
        }
        let code = good.finalize().into_bytes();
        assert!(exchange.rakp2_verifies(b"password", &code));
        assert!(!exchange.rakp2_verifies(b"Password", &code));
        assert!(!exchange.rakp2_verifies(b"password", &code[..12]));
        let other_guid = Exchange { guid: [0; 16], ..exchange };
        assert!(!other_guid.rakp2_verifies(b"password", &code), "the GUID is covered");
    }

    #[test]
    fn a_rakp4_check_from_another_kg_does_not_verify() {
        let exchange = exchange();
        let sik = exchange.sik(b"password");
        let mut check = mac(&sik);
        check.update(&exchange.console_random);
        check.update(&exchange.bmc_id.to_le_bytes());
        check.update(&exchange.guid);
        let check = check.finalize().into_bytes();
        assert!(exchange.rakp4_verifies(&sik, &check[..12]));
        assert!(!exchange.rakp4_verifies(&exchange.sik(b"bmc-key"), &check[..12]));
        assert!(!exchange.rakp4_verifies(&sik, &check[..11]));
    }

    #[test]
    fn the_open_session_request_proposes_exactly_suite_3() {
        let request = open_session_request(7, 0x03, 0x1122_3344);
        assert_eq!(
            request,
            [
                7, 3, 0, 0, 0x44, 0x33, 0x22, 0x11, 0, 0, 0, 8, 1, 0, 0, 0, 1, 0, 0, 8, 1, 0, 0, 0, 2, 0, 0, 8, 1, 0,
                0, 0
            ]
        );
    }

    #[test]
    fn an_open_session_error_may_be_two_bytes() {
        let answer = open_session_response(&[7, 0x01]).unwrap();
        assert_eq!(answer, OpenSessionResponse { tag: 7, status: RmcpStatus(0x01), accepted: None });
        assert!(open_session_response(&[7]).is_err());
        assert!(open_session_response(&[7, 0, 4]).is_err(), "a success needs all 36 bytes");
    }

    #[test]
    fn an_accepted_open_session_names_its_algorithms() {
        let mut answer = vec![7, 0, 3, 0, 0x44, 0x33, 0x22, 0x11, 4, 3, 2, 1];
        for (payload, algorithm) in [(0, 1), (1, 1), (2, 0)] {
            answer.extend_from_slice(&[payload, 0, 0, 8, algorithm, 0, 0, 0]);
        }
        let accepted = open_session_response(&answer).unwrap().accepted.unwrap();
        assert_eq!((accepted.console_id, accepted.bmc_id), (0x1122_3344, 0x0102_0304));
        assert_eq!(accepted.algorithms, Algorithms { authentication: 1, integrity: 1, confidentiality: 0 });
    }

    proptest! {
        #[test]
        fn no_bytes_make_a_session_decoder_panic(bytes in proptest::collection::vec(any::<u8>(), 0..80)) {
            let _ = open_session_response(&bytes);
            let _ = rakp2(&bytes);
            let _ = rakp4(&bytes);
        }

        #[test]
        fn answers_of_the_right_length_always_decode(mut bytes in proptest::collection::vec(any::<u8>(), 60)) {
            bytes[1] = 0;
            prop_assert!(rakp2(&bytes).unwrap().keyed.is_some());
            prop_assert!(rakp4(&bytes[..20]).unwrap().integrity_check.is_some());
        }
    }
}
