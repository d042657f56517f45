//! From a BmcBinding to a usable BMC client: what the binding refers to (its credentials Secret, its
//! CA bundle, its pin and endpoint) read and checked, the Redfish client built from them and cached
//! by binding version, and — typed — why a binding cannot be used. The fence (`Devices` on
//! `controller::Context`) and the binding verifier both go through [`Clients`].
//!
//! Reads follow the fence loop's convention: the outer `Result` is the Kubernetes API, the inner one
//! what the binding refers to.

use std::{
    collections::HashMap,
    sync::{Mutex, PoisonError},
    time::{Duration as StdDuration, Instant},
};

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::{Api, Client, ResourceExt};

use crate::{
    api::{BmcBinding, CaBundleKind},
    bmc::{Credentials, Password, RedfishClient, RedfishConfig, SetupError, tls},
    contract::Reason,
};

/// Settings for talking to BMCs.
#[derive(Clone, Copy, Debug)]
pub struct BmcSettings {
    pub request_timeout: StdDuration,
    pub read_retries: u32,
    pub retry_backoff: StdDuration,
}

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
    /// `tls.certificateSHA256` is not a SHA-256.
    #[error(transparent)]
    BadPin(tls::TlsConfigError),
    /// A bad endpoint, a CA bundle that is not PEM, a bad serverName, no trust at all.
    #[error(transparent)]
    Setup(#[from] SetupError),
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
            | Cause::Setup(_) => Reason::BindingInvalid,
        }
    }
}

/// The credentials in the binding's Secret (`None`: it does not exist). The password goes only into
/// the BMC client, never into a message.
pub fn credentials_in(secret: Option<&Secret>, namespace: &str, name: &str) -> Result<Credentials, Cause> {
    let secret =
        secret.ok_or_else(|| Cause::SecretMissing { namespace: namespace.to_owned(), name: name.to_owned() })?;
    let field = |key: &'static str| {
        secret
            .data
            .as_ref()
            .and_then(|d| d.get(key))
            .and_then(|v| String::from_utf8(v.0.clone()).ok())
            .filter(|v| !v.is_empty())
            .ok_or_else(|| Cause::KeyMissing { namespace: namespace.to_owned(), name: name.to_owned(), key })
    };
    Ok(Credentials { username: field("username")?, password: Password::new(field("password")?) })
}

/// Where a CA bundle was found, as read.
pub enum CaSource {
    ConfigMap(Option<ConfigMap>),
    Secret(Option<Secret>),
}

/// The CA bundle's bytes under `key` (a ConfigMap's `data` or `binaryData`, a Secret's `data`).
pub fn ca_bundle_in(source: CaSource, namespace: &str, name: &str, key: &str) -> Result<Vec<u8>, Cause> {
    let kind = match source {
        CaSource::ConfigMap(_) => CaBundleKind::ConfigMap,
        CaSource::Secret(_) => CaBundleKind::Secret,
    };
    let missing = || Cause::CaBundleMissing { kind, namespace: namespace.to_owned(), name: name.to_owned() };
    let found = match source {
        CaSource::ConfigMap(map) => {
            let map = map.ok_or_else(missing)?;
            map.data
                .and_then(|d| d.get(key).map(|v| v.as_bytes().to_vec()))
                .or_else(|| map.binary_data.and_then(|d| d.get(key).map(|v| v.0.clone())))
        }
        CaSource::Secret(secret) => secret.ok_or_else(missing)?.data.and_then(|d| d.get(key).map(|v| v.0.clone())),
    };
    found.ok_or_else(|| Cause::CaBundleKeyMissing {
        kind,
        namespace: namespace.to_owned(),
        name: name.to_owned(),
        key: key.to_owned(),
    })
}

/// Reads the credentials the binding names.
async fn credentials(client: &Client, binding: &BmcBinding) -> Result<Result<Credentials, Cause>, kube::Error> {
    let namespace = binding.namespace().unwrap_or_default();
    let name = &binding.spec.credentials_secret_ref.name;
    let secret = Api::<Secret>::namespaced(client.clone(), &namespace).get_opt(name).await?;
    Ok(credentials_in(secret.as_ref(), &namespace, name))
}

/// Reads the trust the binding configures, with its CA bundle from the ConfigMap or Secret.
async fn trust(client: &Client, binding: &BmcBinding) -> Result<Result<(tls::Trust, Vec<u8>), Cause>, kube::Error> {
    let namespace = binding.namespace().unwrap_or_default();
    let policy = &binding.spec.tls;
    let ca_bundle = match &policy.ca_bundle_ref {
        None => None,
        Some(reference) => {
            let source = match reference.kind {
                CaBundleKind::ConfigMap => CaSource::ConfigMap(
                    Api::<ConfigMap>::namespaced(client.clone(), &namespace).get_opt(&reference.name).await?,
                ),
                CaBundleKind::Secret => CaSource::Secret(
                    Api::<Secret>::namespaced(client.clone(), &namespace).get_opt(&reference.name).await?,
                ),
            };
            match ca_bundle_in(source, &namespace, &reference.name, &reference.key) {
                Ok(bytes) => Some(bytes),
                Err(cause) => return Ok(Err(cause)),
            }
        }
    };
    let bytes = ca_bundle.clone().unwrap_or_default();
    Ok(tls::Trust::from_policy(policy, ca_bundle).map(|trust| (trust, bytes)).map_err(Cause::BadPin))
}

/// P2: what a client talks to and with — the endpoint, the TLS policy and CA bundle bytes, the
/// credential values — as one number. A client rebuilt from the same values is the same device, so
/// a fence's run of readings goes on through it; any other value is a new device and a new run.
pub fn device_digest(endpoint: &str, tls: &str, ca_bundle: &[u8], credentials: &Credentials) -> u64 {
    use sha2::{Digest, Sha256};
    let mut hash = Sha256::new();
    for part in [endpoint.as_bytes(), tls.as_bytes(), ca_bundle, credentials.username.as_bytes()] {
        hash.update((part.len() as u64).to_le_bytes());
        hash.update(part);
    }
    hash.update(credentials.password.reveal().as_bytes());
    let digest = hash.finalize();
    u64::from_le_bytes(digest[..8].try_into().unwrap_or_default())
}

/// How long a Redfish client (with the credentials and CA bundle it was built from) is reused: a fence
/// polling every second does not re-read its Secret every second, and a rotated Secret is picked up
/// within this time.
const CLIENT_TTL: StdDuration = StdDuration::from_secs(60);

/// Redfish clients by binding UID, with the binding resourceVersion they were built for and their
/// [`device_digest`].
#[derive(Default)]
struct ClientCache {
    entries: Mutex<HashMap<String, (String, Instant, RedfishClient, u64)>>,
}

impl ClientCache {
    fn get(&self, binding: &BmcBinding) -> Option<(RedfishClient, u64)> {
        let entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        let (version, built, client, serial) = entries.get(&binding.uid()?)?;
        (Some(version) == binding.resource_version().as_ref() && built.elapsed() < CLIENT_TTL)
            .then(|| (client.clone(), *serial))
    }

    fn forget(&self, uid: &str) {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner).remove(uid);
    }

    /// Keeps a new client with its device digest.
    fn put(&self, binding: &BmcBinding, client: &RedfishClient, serial: u64) -> u64 {
        if let (Some(uid), Some(version)) = (binding.uid(), binding.resource_version()) {
            let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
            entries.insert(uid, (version, Instant::now(), client.clone(), serial));
        }
        serial
    }
}

/// The Redfish clients bindings describe, built on demand and reused ([`CLIENT_TTL`], same binding
/// version).
pub struct Clients {
    settings: BmcSettings,
    cache: ClientCache,
}

impl Clients {
    pub fn new(settings: BmcSettings) -> Self {
        Self { settings, cache: ClientCache::default() }
    }

    /// The client the binding describes, with its [`device_digest`].
    pub async fn client(
        &self,
        kube: &Client,
        binding: &BmcBinding,
    ) -> Result<Result<(RedfishClient, u64), Unusable>, kube::Error> {
        if let Some(found) = self.cache.get(binding) {
            return Ok(Ok(found));
        }
        let (credentials, trust) = match (credentials(kube, binding).await?, trust(kube, binding).await?) {
            (Ok(credentials), Ok(trust)) => (credentials, trust),
            (Err(cause), _) | (_, Err(cause)) => return Ok(Err(Unusable::new(binding, cause))),
        };
        let (trust, ca_bundle) = trust;
        let tls = serde_json::to_string(&binding.spec.tls).unwrap_or_default();
        let serial = device_digest(&binding.spec.redfish.endpoint, &tls, &ca_bundle, &credentials);
        let config = RedfishConfig {
            endpoint: binding.spec.redfish.endpoint.clone(),
            trust,
            credentials,
            request_timeout: self.settings.request_timeout,
            read_retries: self.settings.read_retries,
            retry_backoff: self.settings.retry_backoff,
        };
        Ok(RedfishClient::new(config)
            .map(|client| {
                self.cache.put(binding, &client, serial);
                (client, serial)
            })
            .map_err(|e| Unusable::new(binding, e)))
    }

    /// Drops the binding's client: what it was built from (its Secret, its CA bundle) changed, and
    /// the next one is built from them as they are now.
    pub fn forget(&self, binding: &BmcBinding) {
        if let Some(uid) = binding.uid() {
            self.cache.forget(&uid);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::ByteString;

    use super::*;
    use crate::api::{BmcBindingSpec, RedfishTarget, SecretRef, TlsPolicy};

    fn binding(version: &str) -> BmcBinding {
        let mut binding = BmcBinding::new(
            "b",
            BmcBindingSpec {
                node_name: "n".into(),
                redfish: RedfishTarget { endpoint: "https://10.0.0.1".into(), system_id: None },
                credentials_secret_ref: SecretRef { name: "s".into() },
                tls: TlsPolicy::default(),
            },
        );
        binding.metadata.uid = Some("uid-b".into());
        binding.metadata.resource_version = Some(version.into());
        binding
    }

    fn secret(data: &[(&str, &[u8])]) -> Secret {
        let data: BTreeMap<String, ByteString> =
            data.iter().map(|(k, v)| ((*k).to_owned(), ByteString(v.to_vec()))).collect();
        Secret { data: Some(data), ..Secret::default() }
    }

    #[test]
    fn a_client_is_reused_only_for_the_binding_version_it_was_built_for() {
        let client = RedfishClient::new(RedfishConfig {
            endpoint: "https://10.0.0.1".into(),
            trust: tls::Trust { insecure_skip_verify: true, ..tls::Trust::default() },
            credentials: Credentials { username: "u".into(), password: Password::new("p".into()) },
            request_timeout: StdDuration::from_secs(1),
            read_retries: 0,
            retry_backoff: StdDuration::from_millis(1),
        })
        .unwrap();
        let cache = ClientCache::default();
        assert!(cache.get(&binding("1")).is_none());
        cache.put(&binding("1"), &client, 7);
        assert!(cache.get(&binding("1")).is_some());
        assert!(cache.get(&binding("2")).is_none(), "a changed binding builds a new client");
        cache.forget("uid-b");
        assert!(cache.get(&binding("1")).is_none(), "a changed Secret or CA bundle builds a new client");
    }

    #[test]
    fn a_client_rebuilt_from_the_same_values_is_the_same_device() {
        let credentials =
            |password: &str| Credentials { username: "u".into(), password: Password::new(password.into()) };
        let digest = |endpoint: &str, tls: &str, ca: &[u8], password: &str| {
            device_digest(endpoint, tls, ca, &credentials(password))
        };
        let base = digest("https://10.0.0.1", "{}", b"PEM", "p");
        assert_eq!(base, digest("https://10.0.0.1", "{}", b"PEM", "p"));
        assert_ne!(base, digest("https://10.0.0.2", "{}", b"PEM", "p"), "another endpoint");
        assert_ne!(base, digest("https://10.0.0.1", "{\"pin\":1}", b"PEM", "p"), "another TLS policy");
        assert_ne!(base, digest("https://10.0.0.1", "{}", b"PEM2", "p"), "another CA bundle");
        assert_ne!(base, digest("https://10.0.0.1", "{}", b"PEM", "q"), "another password");
        assert_ne!(digest("https://10.0.0.1", "{}", b"PE", "Mp"), base, "fields do not run into each other");
    }

    #[test]
    fn credentials_need_the_secret_and_both_keys_non_empty_and_utf8() {
        let good = secret(&[("username", b"admin"), ("password", b"pw")]);
        assert_eq!(credentials_in(Some(&good), "ns", "s").unwrap().username, "admin");
        let missing = credentials_in(None, "ns", "s").unwrap_err();
        assert_eq!(missing, Cause::SecretMissing { namespace: "ns".into(), name: "s".into() });
        assert_eq!(missing.to_string(), "credentials Secret ns/s does not exist");
        for (data, key) in [
            (secret(&[("username", b"admin")]), "password"),
            (secret(&[("username", b""), ("password", b"pw")]), "username"),
            (secret(&[("username", b"admin"), ("password", &[0xff, 0xfe])]), "password"),
        ] {
            let cause = credentials_in(Some(&data), "ns", "s").unwrap_err();
            assert_eq!(cause, Cause::KeyMissing { namespace: "ns".into(), name: "s".into(), key });
            assert_eq!(cause.to_string(), format!("credentials Secret ns/s has no non-empty UTF-8 key {key:?}"));
        }
    }

    #[test]
    fn a_ca_bundle_is_read_from_its_key_or_named_as_missing() {
        let map = |data: Option<(&str, &str)>, binary: Option<(&str, &[u8])>| ConfigMap {
            data: data.map(|(k, v)| BTreeMap::from([(k.to_owned(), v.to_owned())])),
            binary_data: binary.map(|(k, v)| BTreeMap::from([(k.to_owned(), ByteString(v.to_vec()))])),
            ..ConfigMap::default()
        };
        let read = |source| ca_bundle_in(source, "ns", "bmc-ca", "ca.crt");
        assert_eq!(read(CaSource::ConfigMap(Some(map(Some(("ca.crt", "PEM")), None)))).unwrap(), b"PEM");
        assert_eq!(read(CaSource::ConfigMap(Some(map(None, Some(("ca.crt", b"DER")))))).unwrap(), b"DER");
        assert_eq!(read(CaSource::Secret(Some(secret(&[("ca.crt", b"PEM")])))).unwrap(), b"PEM");
        assert_eq!(
            read(CaSource::ConfigMap(None)).unwrap_err().to_string(),
            "CA bundle ConfigMap ns/bmc-ca does not exist"
        );
        assert_eq!(read(CaSource::Secret(None)).unwrap_err().to_string(), "CA bundle Secret ns/bmc-ca does not exist");
        assert_eq!(
            read(CaSource::ConfigMap(Some(map(Some(("other", "PEM")), None)))).unwrap_err().to_string(),
            "ConfigMap ns/bmc-ca has no key \"ca.crt\""
        );
    }

    #[test]
    fn an_unusable_binding_names_itself_and_its_cause_and_is_binding_invalid() {
        let unusable = Unusable::new(&binding("1"), Cause::SecretMissing { namespace: "ns".into(), name: "s".into() });
        assert_eq!(unusable.to_string(), "BmcBinding b: credentials Secret ns/s does not exist");
        assert_eq!(unusable.reason(), Reason::BindingInvalid);
        let endpoint =
            Unusable::new(&binding("1"), SetupError::Endpoint("endpoint \"http://x\" must be an https URL".into()));
        assert_eq!(endpoint.to_string(), "BmcBinding b: endpoint \"http://x\" must be an https URL");
        let pin = Unusable::new(&binding("1"), Cause::BadPin(tls::parse_pin("zz").unwrap_err()));
        assert!(pin.to_string().starts_with("BmcBinding b: certificateSHA256 must be"), "{pin}");
        assert_eq!(pin.reason(), Reason::BindingInvalid);
    }
}
