//! How coroner trusts a BMC's certificate. Never the public web PKI: only the CA bundle the binding
//! names, or the pinned SHA-256 of the BMC's own certificate, or (explicitly) nothing.

use std::sync::Arc;

use rustls::{
    ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
    client::WebPkiServerVerifier,
    client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier},
    crypto::{CryptoProvider, WebPkiSupportedAlgorithms},
};
use rustls_pki_types::{CertificateDer, ServerName, UnixTime, pem::PemObject};
use sha2::{Digest, Sha256};

/// The crypto provider coroner uses everywhere (kube's client too): ring.
pub fn crypto_provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

#[derive(Clone, Debug, Default)]
pub struct Trust {
    /// PEM CA certificates; when set, only these anchor the chain.
    pub ca_bundle_pem: Option<Vec<u8>>,
    /// SHA-256 of the leaf certificate's DER encoding.
    pub pin_sha256: Option<[u8; 32]>,
    /// Name to verify instead of the endpoint's host.
    pub server_name: Option<String>,
    pub insecure_skip_verify: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum TlsConfigError {
    #[error("the CA bundle holds no usable PEM certificate")]
    EmptyCaBundle,
    #[error("the CA bundle is not valid PEM: {0}")]
    BadCaBundle(String),
    #[error("certificateSHA256 must be 64 hex digits (colons allowed)")]
    BadPin,
    #[error("serverName {0:?} is not a valid DNS name or IP address")]
    BadServerName(String),
    #[error("no trust configured: set tls.caBundleRef or tls.certificateSHA256")]
    NoTrust,
    #[error("TLS setup failed: {0}")]
    Rustls(String),
}

/// Parses a pin written as 64 hex digits, with or without colons, in either case.
pub fn parse_pin(text: &str) -> Result<[u8; 32], TlsConfigError> {
    let digits: String = text.chars().filter(|c| *c != ':').collect();
    let bytes = hex::decode(digits).map_err(|_| TlsConfigError::BadPin)?;
    bytes.try_into().map_err(|_| TlsConfigError::BadPin)
}

pub fn client_config(trust: &Trust) -> Result<ClientConfig, TlsConfigError> {
    let provider = crypto_provider();
    let verifier: Arc<dyn ServerCertVerifier> = if trust.insecure_skip_verify {
        Arc::new(LeafVerifier { pin: None, algorithms: provider.signature_verification_algorithms })
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
                Arc::new(ChainVerifier { chain: chain_verifier(pem, provider.clone())?, server_name, pin })
            }
            (None, Some(pin)) => {
                Arc::new(LeafVerifier { pin: Some(pin), algorithms: provider.signature_verification_algorithms })
            }
            (None, None) => return Err(TlsConfigError::NoTrust),
        }
    };
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsConfigError::Rustls(e.to_string()))?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    Ok(config)
}

fn chain_verifier(pem: &[u8], provider: Arc<CryptoProvider>) -> Result<Arc<WebPkiServerVerifier>, TlsConfigError> {
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(pem) {
        let cert = cert.map_err(|e| TlsConfigError::BadCaBundle(e.to_string()))?;
        roots.add(cert).map_err(|e| TlsConfigError::BadCaBundle(e.to_string()))?;
    }
    if roots.is_empty() {
        return Err(TlsConfigError::EmptyCaBundle);
    }
    WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
        .build()
        .map_err(|e| TlsConfigError::Rustls(e.to_string()))
}

fn fingerprint(cert: &CertificateDer<'_>) -> [u8; 32] {
    Sha256::digest(cert.as_ref()).into()
}

fn pin_mismatch() -> rustls::Error {
    rustls::Error::InvalidCertificate(rustls::CertificateError::ApplicationVerificationFailure)
}

/// Verifies the chain against the configured CAs, for the configured name when one is set, and the
/// pin when one is set too (both must hold).
#[derive(Debug)]
struct ChainVerifier {
    chain: Arc<WebPkiServerVerifier>,
    server_name: Option<ServerName<'static>>,
    pin: Option<[u8; 32]>,
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
        self.chain.verify_server_cert(end_entity, intermediates, name, ocsp_response, now)?;
        match self.pin {
            Some(pin) if fingerprint(end_entity) != pin => Err(pin_mismatch()),
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
        match self.pin {
            Some(pin) if fingerprint(end_entity) != pin => Err(pin_mismatch()),
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
}
