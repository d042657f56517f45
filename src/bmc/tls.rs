//! How coroner trusts a BMC's certificate. Never the public web PKI: only the CA bundle the binding
//! names, or the pinned SHA-256 of the BMC's own certificate, or (explicitly) nothing.
//!
//! A certificate that fails is explained in the operator's words (what was expected, what was
//! seen), not in rustls' (`UnknownIssuer`, `ApplicationVerificationFailure`): the verifiers below
//! wrap webpki's and turn each failure into an [`Untrusted`] message.

use std::{fmt::Write as _, net::IpAddr, sync::Arc};

use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, OtherError, RootCertStore, SignatureScheme,
    client::WebPkiServerVerifier,
    client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier},
    crypto::{CryptoProvider, WebPkiSupportedAlgorithms},
};
use rustls_pki_types::{CertificateDer, ServerName, UnixTime, pem::PemObject};
use sha2::{Digest, Sha256};

use crate::api::{CaBundleRef, TlsPolicy};

/// The crypto provider coroner uses everywhere (kube's client too): ring.
pub fn crypto_provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

#[derive(Clone, Debug, Default)]
pub struct Trust {
    /// PEM CA certificates; when set, only these anchor the chain.
    pub ca_bundle_pem: Option<Vec<u8>>,
    /// Where the CA bundle came from (`ConfigMap bmc-ca, key ca.crt`), for error messages.
    pub ca_bundle_source: Option<String>,
    /// SHA-256 of the leaf certificate's DER encoding.
    pub pin_sha256: Option<[u8; 32]>,
    /// Name to verify instead of the endpoint's host.
    pub server_name: Option<String>,
    pub insecure_skip_verify: bool,
}

impl Trust {
    /// The trust a binding's `tls` policy describes, given the CA bundle it names (already read).
    pub fn from_policy(policy: &TlsPolicy, ca_bundle_pem: Option<Vec<u8>>) -> Result<Self, TlsConfigError> {
        Ok(Self {
            ca_bundle_pem,
            ca_bundle_source: policy.ca_bundle_ref.as_ref().map(describe_source),
            pin_sha256: policy.certificate_sha256.as_deref().map(parse_pin).transpose()?,
            server_name: policy.server_name.clone(),
            insecure_skip_verify: policy.insecure_skip_verify,
        })
    }
}

/// `ConfigMap bmc-ca (key ca.crt)`.
pub fn describe_source(reference: &CaBundleRef) -> String {
    format!("{:?} {} (key {})", reference.kind, reference.name, reference.key)
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TlsConfigError {
    #[error("the CA bundle holds no usable PEM certificate")]
    EmptyCaBundle,
    #[error("the CA bundle is not valid PEM: {0}")]
    BadCaBundle(String),
    #[error(
        "certificateSHA256 must be the certificate's SHA-256: 64 hex digits, colons allowed, or openssl's `sha256 Fingerprint=AB:CD:…` line"
    )]
    BadPin,
    #[error("serverName {0:?} is not a valid DNS name or IP address")]
    BadServerName(String),
    #[error("no trust configured: set tls.caBundleRef or tls.certificateSHA256")]
    NoTrust,
    #[error("TLS setup failed: {0}")]
    Rustls(String),
}

/// Parses a pin written as 64 hex digits, with or without colons, in either case, or as openssl
/// prints it (`sha256 Fingerprint=AB:CD:…`, `SHA256 Fingerprint=…`).
pub fn parse_pin(text: &str) -> Result<[u8; 32], TlsConfigError> {
    let text = text.trim();
    let value = match text.split_once('=') {
        Some((label, value)) if label.trim().eq_ignore_ascii_case("sha256 fingerprint") => value,
        Some(_) => return Err(TlsConfigError::BadPin),
        None => text,
    };
    let digits: String = value.trim().chars().filter(|c| *c != ':').collect();
    let bytes = hex::decode(digits).map_err(|_| TlsConfigError::BadPin)?;
    bytes.try_into().map_err(|_| TlsConfigError::BadPin)
}

/// A SHA-256 as openssl and most BMC consoles print it: `AB:63:…`.
pub fn format_fingerprint(sha256: &[u8; 32]) -> String {
    sha256.iter().map(|b| format!("{b:02X}")).collect::<Vec<_>>().join(":")
}

pub fn client_config(trust: &Trust) -> Result<ClientConfig, TlsConfigError> {
    let provider = crypto_provider();
    let verifier: Arc<dyn ServerCertVerifier> = if trust.insecure_skip_verify {
        Arc::new(LeafVerifier { pin: None, algorithms: provider.signature_verification_algorithms, seen: None })
    } else {
        let server_name = trust
            .server_name
            .as_deref()
            .map(|name| {
                ServerName::try_from(name.to_owned()).map_err(|_| TlsConfigError::BadServerName(name.to_owned()))
            })
            .transpose()?;
        match (&trust.ca_bundle_pem, trust.pin_sha256) {
            (Some(pem), pin) => {
                let roots = roots(pem)?;
                let anchors = roots.roots.iter().map(|a| name_text(a.subject.as_ref())).collect();
                let chain = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                    .build()
                    .map_err(|e| TlsConfigError::Rustls(e.to_string()))?;
                let source = trust.ca_bundle_source.clone().unwrap_or_else(|| "the CA bundle".into());
                Arc::new(ChainVerifier { chain, source, anchors, server_name, pin })
            }
            (None, Some(pin)) => Arc::new(LeafVerifier {
                pin: Some(pin),
                algorithms: provider.signature_verification_algorithms,
                seen: None,
            }),
            (None, None) => return Err(TlsConfigError::NoTrust),
        }
    };
    let mut config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsConfigError::Rustls(e.to_string()))?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    // A config serves one device's client, which follows no redirect: one server's sessions, not
    // rustls' default 256 (32 servers, their cache allocated up front: 0.7 MiB of the live heap
    // after a 50-node storm).
    config.resumption = rustls::client::Resumption::in_memory_sessions(SESSIONS_OF_ONE_SERVER);
    Ok(config)
}

/// rustls keeps up to 8 TLS 1.3 tickets per server and sizes its session cache in sessions: 8 are
/// one server's.
const SESSIONS_OF_ONE_SERVER: usize = 8;

fn roots(pem: &[u8]) -> Result<RootCertStore, TlsConfigError> {
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(pem) {
        let cert = cert.map_err(|e| TlsConfigError::BadCaBundle(e.to_string()))?;
        roots.add(cert).map_err(|e| TlsConfigError::BadCaBundle(e.to_string()))?;
    }
    if roots.is_empty() {
        return Err(TlsConfigError::EmptyCaBundle);
    }
    Ok(roots)
}

/// Why a BMC's certificate was refused, in the operator's words. Carried through rustls inside
/// `CertificateError::Other`; [`describe`] takes it out again.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Untrusted(pub String);

fn untrusted(message: String) -> rustls::Error {
    rustls::Error::InvalidCertificate(CertificateError::Other(OtherError(Arc::new(Untrusted(message)))))
}

/// A rustls error from a BMC connection as a sentence for status, Events and logs.
pub fn describe(error: &rustls::Error) -> String {
    use rustls::Error as E;
    match error {
        E::InvalidCertificate(CertificateError::Other(other)) if other.0.downcast_ref::<Untrusted>().is_some() => {
            other.0.to_string()
        }
        E::AlertReceived(alert) => format!(
            "the BMC ended the TLS handshake with alert {alert:?} (it may accept only TLS versions or ciphers coroner does not offer: TLS 1.2 or 1.3 with forward secrecy)"
        ),
        E::PeerIncompatible(why) => format!("the BMC's TLS is incompatible with coroner's: {why:?}"),
        E::InvalidMessage(why) => format!("the BMC sent a malformed TLS message ({why:?}): is this port TLS at all?"),
        other => format!("TLS failed: {other}"),
    }
}

fn fingerprint(cert: &CertificateDer<'_>) -> [u8; 32] {
    Sha256::digest(cert.as_ref()).into()
}

fn pin_mismatch(cert: &CertificateDer<'_>, pin: &[u8; 32]) -> rustls::Error {
    untrusted(format!(
        "the certificate's SHA-256 is {}, the binding pins {} (tls.certificateSHA256); if the BMC's certificate was replaced, check the new one and update the pin",
        format_fingerprint(&fingerprint(cert)),
        format_fingerprint(pin)
    ))
}

/// Verifies the chain against the configured CAs, for the configured name when one is set, and the
/// pin when one is set too (both must hold).
#[derive(Debug)]
struct ChainVerifier {
    chain: Arc<WebPkiServerVerifier>,
    /// `ConfigMap bmc-ca (key ca.crt)`.
    source: String,
    /// The subjects of the bundle's CAs.
    anchors: Vec<String>,
    server_name: Option<ServerName<'static>>,
    pin: Option<[u8; 32]>,
}

impl ChainVerifier {
    /// What webpki's refusal means for this certificate and this binding.
    fn explain(&self, error: rustls::Error, cert: &CertificateDer<'_>, name: &ServerName<'_>) -> String {
        let parsed = webpki::EndEntityCert::try_from(cert).ok();
        let subject = parsed.as_ref().map_or_else(|| "unparsable".into(), |c| name_text(c.subject()));
        let issuer = parsed.as_ref().map_or_else(|| "unparsable".into(), |c| name_text(c.issuer()));
        let pin_it = format!(
            "pin it instead (tls.certificateSHA256: \"{}\") after checking it on the BMC's console",
            format_fingerprint(&fingerprint(cert))
        );
        let name_field = if self.server_name.is_some() { "tls.serverName " } else { "name " };
        match error {
            rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer) if subject == issuer => {
                format!("the certificate ({subject}) is self-signed and is not a CA in {}: {pin_it}", self.source)
            }
            rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer) => format!(
                "the certificate ({subject}) is issued by {issuer}, which is not a CA in {} (it holds {})",
                self.source,
                self.anchors.join("; ")
            ),
            rustls::Error::InvalidCertificate(CertificateError::NotValidForNameContext { expected, presented }) => {
                let names: Vec<String> = presented.iter().map(|p| presented_name(p)).collect();
                format!(
                    "{name_field}{} is not in the certificate (it has {}); set tls.serverName to one of its names",
                    server_name_text(&expected),
                    if names.is_empty() { "no subjectAltName".into() } else { names.join(", ") }
                )
            }
            rustls::Error::InvalidCertificate(CertificateError::NotValidForName) => format!(
                "{name_field}{} is not in the certificate ({subject}); set tls.serverName to one of its names",
                server_name_text(name)
            ),
            rustls::Error::InvalidCertificate(CertificateError::ExpiredContext { time, not_after }) => format!(
                "the certificate ({subject}) expired at {} (it is now {})",
                unix_text(not_after),
                unix_text(time)
            ),
            rustls::Error::InvalidCertificate(CertificateError::NotValidYetContext { time, not_before }) => format!(
                "the certificate ({subject}) is valid only from {} (it is now {}): check the BMC's clock",
                unix_text(not_before),
                unix_text(time)
            ),
            rustls::Error::InvalidCertificate(CertificateError::Other(other))
                if other.0.downcast_ref::<webpki::Error>() == Some(&webpki::Error::CaUsedAsEndEntity) =>
            {
                format!(
                    "the BMC presents a CA certificate ({subject}) as its own, as factory self-signed BMC certificates often are; a CA bundle cannot vouch for it: {pin_it}"
                )
            }
            other => format!("the certificate ({subject}, issued by {issuer}) was refused: {other}"),
        }
    }
}

impl ServerCertVerifier for ChainVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let name = self.server_name.as_ref().unwrap_or(server_name);
        self.chain
            .verify_server_cert(end_entity, intermediates, name, ocsp_response, now)
            .map_err(|error| untrusted(self.explain(error, end_entity, name)))?;
        match self.pin {
            Some(pin) if fingerprint(end_entity) != pin => Err(pin_mismatch(end_entity, &pin)),
            _ => Ok(ServerCertVerified::assertion()),
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.chain.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.chain.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.chain.supported_verify_schemes()
    }
}

/// Trusts the leaf certificate by its SHA-256 alone, whoever issued it and whatever name it carries:
/// how to trust a factory self-signed BMC certificate without turning verification off. Without a
/// pin (`insecureSkipVerify: true`) it trusts any certificate. Either way the handshake signature is
/// checked, which proves the peer holds the key of the certificate it showed.
#[derive(Debug)]
struct LeafVerifier {
    pin: Option<[u8; 32]>,
    algorithms: WebPkiSupportedAlgorithms,
    /// At first contact ([`first_contact`]): where the leaf's SHA-256 is kept.
    seen: Option<Arc<std::sync::Mutex<Option<[u8; 32]>>>>,
}

impl ServerCertVerifier for LeafVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if let Some(seen) = &self.seen {
            *seen.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(fingerprint(end_entity));
        }
        match self.pin {
            Some(pin) if fingerprint(end_entity) != pin => Err(pin_mismatch(end_entity, &pin)),
            _ => Ok(ServerCertVerified::assertion()),
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// The SHA-256 of the certificate an https endpoint shows, read at first contact: a TLS handshake
/// (whose signature proves the peer holds the certificate's key) and nothing after it — no HTTP
/// request, no credential. Trust on first use: a pin read this way must be checked out of band.
pub async fn first_contact(endpoint: &str, timeout: std::time::Duration) -> Result<[u8; 32], String> {
    let url = reqwest::Url::parse(endpoint).map_err(|e| format!("{endpoint} is not a URL: {e}"))?;
    if url.scheme() != "https" || !url.username().is_empty() || url.password().is_some() {
        return Err(format!("{endpoint}: only an https URL without credentials"));
    }
    let host = url.host_str().ok_or_else(|| format!("{endpoint} has no host"))?.trim_matches(['[', ']']).to_owned();
    let port = url.port().unwrap_or(443);
    let name = ServerName::try_from(host.clone()).map_err(|e| format!("{host}: {e}"))?;
    let seen = Arc::new(std::sync::Mutex::new(None));
    let provider = crypto_provider();
    let verifier =
        LeafVerifier { pin: None, algorithms: provider.signature_verification_algorithms, seen: Some(seen.clone()) };
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verifier))
        .with_no_client_auth();
    let handshake = async {
        let tcp =
            tokio::net::TcpStream::connect((host.as_str(), port)).await.map_err(|e| format!("{host}:{port}: {e}"))?;
        tokio_rustls::TlsConnector::from(Arc::new(config))
            .connect(name, tcp)
            .await
            .map_err(|e| format!("{host}:{port}: TLS handshake: {e}"))
    };
    tokio::time::timeout(timeout, handshake)
        .await
        .map_err(|_| format!("{host}:{port}: no TLS handshake within {timeout:?}"))??;
    let found = *seen.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    found.ok_or_else(|| format!("{host}:{port} showed no certificate"))
}

fn server_name_text(name: &ServerName<'_>) -> String {
    match name {
        ServerName::DnsName(dns) => dns.as_ref().to_owned(),
        ServerName::IpAddress(ip) => IpAddr::from(*ip).to_string(),
        other => format!("{other:?}"),
    }
}

/// webpki's `DnsName("bmc.example")` / `IpAddress(10.0.0.1)` as `DNS:bmc.example` / `IP:10.0.0.1`,
/// as openssl prints subjectAltNames.
fn presented_name(presented: &str) -> String {
    let strip = |prefix: &str| presented.strip_prefix(prefix).and_then(|s| s.strip_suffix(')'));
    match (strip("DnsName("), strip("IpAddress(")) {
        (Some(dns), _) => format!("DNS:{}", dns.trim_matches('"')),
        (_, Some(ip)) => format!("IP:{ip}"),
        _ => presented.to_owned(),
    }
}

fn unix_text(time: UnixTime) -> String {
    i64::try_from(time.as_secs())
        .ok()
        .and_then(|secs| jiff::Timestamp::from_second(secs).ok())
        .map_or_else(|| format!("{}s after the epoch", time.as_secs()), |t| t.to_string())
}

/// One DER TLV: (tag, value, rest).
fn tlv(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = match first {
        short if short < 0x80 => (usize::from(short), rest),
        0x81 => rest.split_first().map(|(&n, rest)| (usize::from(n), rest))?,
        0x82 => rest.split_at_checked(2).map(|(n, rest)| ((usize::from(n[0]) << 8) | usize::from(n[1]), rest))?,
        _ => return None,
    };
    let (value, rest) = rest.split_at_checked(len)?;
    Some((tag, value, rest))
}

/// An X.509 Name (the content of its SEQUENCE, as webpki hands it out) as `CN=…, O=…`, in the order
/// the certificate lists it (openssl's). Bounded: the text comes from the BMC.
fn name_text(der: &[u8]) -> String {
    const SET: u8 = 0x31;
    const SEQUENCE: u8 = 0x30;
    const OID: u8 = 0x06;
    let mut parts = Vec::new();
    let mut rdns = der;
    while let Some((SET, mut set, rest)) = tlv(rdns) {
        while let Some((SEQUENCE, attribute, next)) = tlv(set) {
            if let Some((OID, oid, value)) = tlv(attribute)
                && let Some((_, value, _)) = tlv(value)
            {
                parts.push(format!("{}={}", attribute_name(oid), String::from_utf8_lossy(value)));
            }
            set = next;
        }
        rdns = rest;
    }
    let text = if parts.is_empty() { "an empty name".to_owned() } else { parts.join(", ") };
    text.chars().take(200).collect()
}

fn attribute_name(oid: &[u8]) -> String {
    match oid {
        [0x55, 0x04, 0x03] => "CN".into(),
        [0x55, 0x04, 0x06] => "C".into(),
        [0x55, 0x04, 0x07] => "L".into(),
        [0x55, 0x04, 0x08] => "ST".into(),
        [0x55, 0x04, 0x0a] => "O".into(),
        [0x55, 0x04, 0x0b] => "OU".into(),
        [0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x09, 0x01] => "emailAddress".into(),
        other => dotted_oid(other),
    }
}

fn dotted_oid(oid: &[u8]) -> String {
    let Some((&first, rest)) = oid.split_first() else { return "?".into() };
    let mut text = format!("{}.{}", first / 40, first % 40);
    let mut arc: u64 = 0;
    for &byte in rest {
        arc = (arc << 7) | u64::from(byte & 0x7f);
        if byte & 0x80 == 0 {
            let _ = write!(text, ".{arc}");
            arc = 0;
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pins_parse_with_or_without_colons() {
        let hex = "a1".repeat(32);
        let colons = vec!["A1"; 32].join(":");
        assert_eq!(parse_pin(&hex).unwrap(), [0xa1; 32]);
        assert_eq!(parse_pin(&colons).unwrap(), [0xa1; 32]);
        assert!(parse_pin("a1").is_err());
        assert!(parse_pin(&"zz".repeat(32)).is_err());
    }

    #[test]
    fn pins_parse_as_openssl_prints_them() {
        let colons = vec!["A1"; 32].join(":");
        for line in [format!("sha256 Fingerprint={colons}"), format!("SHA256 Fingerprint={colons}\n")] {
            assert_eq!(parse_pin(&line).unwrap(), [0xa1; 32], "{line}");
        }
        assert!(parse_pin(&format!("sha1 Fingerprint={colons}")).is_err(), "another digest is refused");
        assert!(parse_pin(&format!("SHA1 Fingerprint={}", vec!["A1"; 20].join(":"))).is_err());
    }

    #[test]
    fn fingerprints_print_as_openssl_does_and_parse_back() {
        let mut sha = [0u8; 32];
        sha[0] = 0xab;
        sha[31] = 0x0f;
        let text = format_fingerprint(&sha);
        assert!(text.starts_with("AB:00:") && text.ends_with(":0F") && text.len() == 95, "{text}");
        assert_eq!(parse_pin(&text).unwrap(), sha);
    }

    #[test]
    fn trust_must_be_named() {
        assert!(matches!(client_config(&Trust::default()), Err(TlsConfigError::NoTrust)));
        assert!(client_config(&Trust { pin_sha256: Some([0; 32]), ..Trust::default() }).is_ok());
        assert!(client_config(&Trust { insecure_skip_verify: true, ..Trust::default() }).is_ok());
    }

    #[test]
    fn a_ca_bundle_without_certificates_is_rejected() {
        let trust = Trust { ca_bundle_pem: Some(b"not pem".to_vec()), ..Trust::default() };
        assert!(matches!(client_config(&trust), Err(TlsConfigError::EmptyCaBundle)));
    }

    #[test]
    fn a_bad_server_name_is_rejected() {
        let trust = Trust { pin_sha256: Some([0; 32]), server_name: Some("bad name!".into()), ..Trust::default() };
        assert!(matches!(client_config(&trust), Err(TlsConfigError::BadServerName(_))));
    }

    #[test]
    fn the_policy_names_where_the_ca_bundle_comes_from() {
        let policy = TlsPolicy {
            ca_bundle_ref: Some(CaBundleRef {
                kind: crate::api::CaBundleKind::ConfigMap,
                name: "bmc-ca".into(),
                key: "ca.crt".into(),
            }),
            certificate_sha256: Some(format!("sha256 Fingerprint={}", vec!["0B"; 32].join(":"))),
            ..TlsPolicy::default()
        };
        let trust = Trust::from_policy(&policy, None).unwrap();
        assert_eq!(trust.ca_bundle_source.as_deref(), Some("ConfigMap bmc-ca (key ca.crt)"));
        assert_eq!(trust.pin_sha256, Some([0x0b; 32]));
        let bad = TlsPolicy { certificate_sha256: Some("4f:8e".into()), ..TlsPolicy::default() };
        assert!(matches!(Trust::from_policy(&bad, None), Err(TlsConfigError::BadPin)));
    }

    /// SEQUENCE { OID, UTF8String } wrapped in a SET: one RDN.
    fn rdn(oid: &[u8], value: &str) -> Vec<u8> {
        let mut attribute = vec![0x06, u8::try_from(oid.len()).unwrap()];
        attribute.extend_from_slice(oid);
        attribute.extend([0x0c, u8::try_from(value.len()).unwrap()]);
        attribute.extend_from_slice(value.as_bytes());
        let mut sequence = vec![0x30, u8::try_from(attribute.len()).unwrap()];
        sequence.extend(attribute);
        let mut set = vec![0x31, u8::try_from(sequence.len()).unwrap()];
        set.extend(sequence);
        set
    }

    #[test]
    fn names_read_as_openssl_prints_them() {
        let mut name = rdn(&[0x55, 0x04, 0x06], "DE");
        name.extend(rdn(&[0x55, 0x04, 0x0a], "Example"));
        name.extend(rdn(&[0x55, 0x04, 0x03], "bmc-ca"));
        assert_eq!(name_text(&name), "C=DE, O=Example, CN=bmc-ca");
        assert_eq!(name_text(&rdn(&[0x2b, 0x06, 0x01, 0x04, 0x01, 0x82, 0x37], "x")), "1.3.6.1.4.1.311=x");
        assert_eq!(name_text(&[]), "an empty name");
        assert_eq!(name_text(&[0x31, 0x7f, 0x00]), "an empty name", "a truncated name reads as nothing");
        let long = rdn(&[0x55, 0x04, 0x03], &"x".repeat(100));
        assert_eq!(name_text(&[long.clone(), long].concat()).chars().count(), 200, "bounded");
    }

    #[test]
    fn presented_names_read_as_subject_alt_names() {
        assert_eq!(presented_name("DnsName(\"bmc.coroner.test\")"), "DNS:bmc.coroner.test");
        assert_eq!(presented_name("IpAddress(127.0.0.1)"), "IP:127.0.0.1");
        assert_eq!(presented_name("DirectoryName"), "DirectoryName");
    }

    #[test]
    fn coroner_s_own_words_survive_rustls() {
        let error = untrusted("the certificate's SHA-256 is AB, the binding pins CD".into());
        assert_eq!(describe(&error), "the certificate's SHA-256 is AB, the binding pins CD");
        let plain = rustls::Error::InvalidCertificate(CertificateError::BadEncoding);
        assert!(describe(&plain).starts_with("TLS failed: "), "{}", describe(&plain));
    }
}
