//! Why a binding cannot be used: what it refers to (its Secret, its CA bundle, its pin, its levels)
//! is missing or cannot make a client. Nothing was asked of the BMC.

use kube::ResourceExt;

use crate::{
    api::{BmcBinding, CaBundleKind},
    words::reason::Reason,
};

/// Why what a binding refers to cannot be used. Nothing was asked of the BMC.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Cause {
    #[error("credentials Secret {namespace}/{name} does not exist")]
    SecretMissing { namespace: String, name: String },
    #[error("credentials Secret {namespace}/{name} has no non-empty UTF-8 key {key:?}")]
    KeyMissing { namespace: String, name: String, key: &'static str },
    #[error("CA bundle {kind:?} {namespace}/{name} does not exist")]
    CaBundleMissing { kind: CaBundleKind, namespace: String, name: String },
    #[error("{kind:?} {namespace}/{name} has no key {key:?}")]
    CaBundleKeyMissing { kind: CaBundleKind, namespace: String, name: String, key: String },
    /// `tls.certificateSHA256` is not a SHA-256 (the TLS configuration's words).
    #[error("{0}")]
    BadPin(String),
    /// A bad endpoint, a CA bundle that is not PEM, a bad serverName, no trust at all (the client
    /// setup's words).
    #[error("{0}")]
    Setup(String),
    /// An IPMI binding that cannot be spoken (a cipher suite, a key, a name IPMI cannot carry).
    #[error("{0}")]
    Ipmi(String),
    #[error("credentials Secret {namespace}/{name}: key kg is not hex")]
    BmcKeyNotHex { namespace: String, name: String },
    /// The binding has no such PDU level (it was edited since the fence moved to it).
    #[error("it has no PDU level {level} (levels are numbered from 2)")]
    NoSuchLevel { level: u32 },
    /// A PDU outlet that cannot be spoken to as configured (an id, an SNMP setup).
    #[error("PDU outlet {outlet}: {problem}")]
    Pdu { outlet: String, problem: String },
    /// More than one of the above: each is named, so that one edit can fix them all.
    #[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    Several(Vec<Cause>),
}

/// The causes found (at least one), as one: the only one, or all of them ([`Cause::Several`]).
pub fn together(mut causes: Vec<Cause>) -> Cause {
    match (causes.pop(), causes.is_empty()) {
        (Some(only), true) => only,
        (last, _) => Cause::Several(causes.into_iter().chain(last).collect()),
    }
}

/// A binding that cannot be used, and why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("BmcBinding {binding}: {cause}")]
pub struct Unusable {
    pub binding: String,
    pub cause: Cause,
}

impl Unusable {
    pub fn new(binding: &BmcBinding, cause: impl Into<Cause>) -> Self {
        Self { binding: binding.name_any(), cause: cause.into() }
    }

    /// The condition reason it gives: the binding is what must change.
    pub fn reason(&self) -> Reason {
        match self.cause {
            Cause::SecretMissing { .. }
            | Cause::KeyMissing { .. }
            | Cause::CaBundleMissing { .. }
            | Cause::CaBundleKeyMissing { .. }
            | Cause::BadPin(_)
            | Cause::Setup(_)
            | Cause::Ipmi(_)
            | Cause::BmcKeyNotHex { .. }
            | Cause::NoSuchLevel { .. }
            | Cause::Pdu { .. }
            | Cause::Several(_) => Reason::BindingInvalid,
        }
    }
}
