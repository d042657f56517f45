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
    api::{BmcBinding, CaBundleKind, IpmiPrivilege, IpmiTarget, SnmpAuthProtocol, SnmpPrivProtocol, SnmpVersion},
    bmc::{BmcError, Credentials, Password, RedfishClient, RedfishConfig, ResetType, SetupError, SystemReading, tls},
    driver::ports::{Level, Target},
    ipmi::{BmcKey, IpmiClient, IpmiConfig, Privilege},
    pdu::{self, OutletCommand, OutletReading, Outlets, PduError, redfish::RedfishPdu, snmp::SnmpPdu},
};

/// Settings for talking to BMCs.
#[derive(Clone, Copy, Debug)]
pub struct BmcSettings {
    pub request_timeout: StdDuration,
    pub read_retries: u32,
    pub retry_backoff: StdDuration,
}

pub use crate::words::binding::{Cause, Unusable, together};

/// A client that could not be built for a binding: the binding is what must change.
impl From<SetupError> for Cause {
    fn from(error: SetupError) -> Self {
        Self::Setup(error.to_string())
    }
}

/// An IPMI binding that cannot be spoken (a cipher suite, a key, a name IPMI cannot carry).
impl From<crate::ipmi::IpmiError> for Cause {
    fn from(error: crate::ipmi::IpmiError) -> Self {
        Self::Ipmi(error.to_string())
    }
}

/// The credentials in the binding's Secret (`None`: it does not exist). The password goes only into
/// the BMC client, never into a message.
pub fn credentials_in(secret: Option<&Secret>, namespace: &str, name: &str) -> Result<Credentials, Cause> {
    let secret =
        secret.ok_or_else(|| Cause::SecretMissing { namespace: namespace.to_owned(), name: name.to_owned() })?;
    let field = |key: &'static str| secret_field(secret, namespace, name, key);
    match (field("username"), field("password")) {
        (Ok(username), Ok(password)) => Ok(Credentials { username, password: Password::new(password) }),
        (username, password) => Err(together([username.err(), password.err()].into_iter().flatten().collect())),
    }
}

/// A non-empty UTF-8 value of a Secret.
fn secret_field(secret: &Secret, namespace: &str, name: &str, key: &'static str) -> Result<String, Cause> {
    secret
        .data
        .as_ref()
        .and_then(|d| d.get(key))
        .and_then(|v| String::from_utf8(v.0.clone()).ok())
        .filter(|v| !v.is_empty())
        .ok_or_else(|| Cause::KeyMissing { namespace: namespace.to_owned(), name: name.to_owned(), key })
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

/// An IPMI BMC key in the credentials Secret (key `kg`, hex), if there is one.
pub fn bmc_key_in(secret: Option<&Secret>, namespace: &str, name: &str) -> Result<Option<BmcKey>, Cause> {
    let Some(value) = secret.and_then(|s| s.data.as_ref()?.get("kg")) else { return Ok(None) };
    let not_hex = || Cause::BmcKeyNotHex { namespace: namespace.to_owned(), name: name.to_owned() };
    let text = String::from_utf8(value.0.clone()).map_err(|_| not_hex())?;
    if text.trim().is_empty() {
        return Err(not_hex());
    }
    BmcKey::from_hex(text.trim()).map(Some).map_err(|_| not_hex())
}

/// Reads the credentials the binding names (and an IPMI BMC key, when it has one).
async fn credentials(
    client: &Client,
    binding: &BmcBinding,
) -> Result<Result<(Credentials, Option<BmcKey>), Cause>, kube::Error> {
    let namespace = binding.namespace().unwrap_or_default();
    let name = &binding.spec.credentials_secret_ref.name;
    let secret = Api::<Secret>::namespaced(client.clone(), &namespace).get_opt(name).await?;
    let credentials = credentials_in(secret.as_ref(), &namespace, name);
    Ok(credentials.and_then(|c| Ok((c, bmc_key_in(secret.as_ref(), &namespace, name)?))))
}

/// Reads the trust the binding configures, with its CA bundle from the ConfigMap or Secret.
async fn trust(client: &Client, binding: &BmcBinding) -> Result<Result<(tls::Trust, Vec<u8>), Cause>, kube::Error> {
    trust_of(client, &binding.namespace().unwrap_or_default(), &binding.spec.tls_policy()).await
}

/// Reads the trust `policy` configures in `namespace`, with its CA bundle.
async fn trust_of(
    client: &Client,
    namespace: &str,
    policy: &crate::api::TlsPolicy,
) -> Result<Result<(tls::Trust, Vec<u8>), Cause>, kube::Error> {
    let namespace = namespace.to_owned();
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
    Ok(tls::Trust::from_policy(policy, ca_bundle).map(|trust| (trust, bytes)).map_err(|e| Cause::BadPin(e.to_string())))
}

/// The key coroner's device digests are keyed with. Only coroner holds it (a Secret in its own
/// namespace, `cluster::content_key`), so a digest published in a binding's status
/// (`verifiedContent`) tells its readers nothing of the credentials it covers: an unkeyed digest of
/// a password can be guessed against offline. Never printed.
#[derive(Clone)]
pub struct ContentKey(std::sync::Arc<[u8]>);

impl ContentKey {
    /// The length of a key coroner makes.
    pub const LEN: usize = 32;

    pub fn new(bytes: &[u8]) -> Self {
        Self(bytes.into())
    }

    /// A key from the operating system's random source (the first replica's).
    pub fn random() -> Result<Self, getrandom::Error> {
        let mut bytes = [0_u8; Self::LEN];
        getrandom::fill(&mut bytes)?;
        Ok(Self::new(&bytes))
    }

    /// The key's bytes, to be stored in its Secret.
    pub fn bytes(&self) -> &[u8] {
        &self.0
    }
}

impl std::fmt::Debug for ContentKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ContentKey(<redacted>)")
    }
}

/// P2 and A2: what a client talks to and with — the binding's spec, the CA bundle bytes, the
/// credential values and the IPMI key — as one number, keyed with coroner's [`ContentKey`]. A client
/// rebuilt from the same values is the same device, so a fence's run of readings goes on through it;
/// any other value is a new device and a new run. The binding's metadata is not part of it, nor the
/// Secret's or the ConfigMap's: a binding re-labelled, or a Secret re-annotated, is the same content.
pub fn device_digest(
    key: &ContentKey,
    spec: &crate::api::BmcBindingSpec,
    ca_bundle: &[u8],
    credentials: &Credentials,
    kg: Option<&BmcKey>,
) -> u64 {
    let spec = serde_json::to_string(spec).unwrap_or_default();
    let kg = kg.map(BmcKey::digest_hex).unwrap_or_default();
    let parts = [
        spec.as_bytes(),
        ca_bundle,
        credentials.username.as_bytes(),
        credentials.password.reveal().as_bytes(),
        kg.as_bytes(),
    ];
    keyed_digest(key, &parts)
}

/// HMAC-SHA256 of the length-prefixed `parts`, keyed with `key`, as 64 bits.
fn keyed_digest(key: &ContentKey, parts: &[impl AsRef<[u8]>]) -> u64 {
    use hmac::{Hmac, Mac};
    use sha2::Sha256;
    // HMAC takes a key of any length.
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(&key.0) else { return 0 };
    for part in parts {
        let part = part.as_ref();
        mac.update(&(part.len() as u64).to_le_bytes());
        mac.update(part);
    }
    let digest = mac.finalize().into_bytes();
    u64::from_le_bytes(digest[..8].try_into().unwrap_or_default())
}

pub use crate::words::digest::content_hex;

/// The power target a binding describes: a Redfish service or an IPMI BMC, behind the one trait
/// the fence loop uses.
#[derive(Clone, Debug)]
pub enum Device {
    Redfish(RedfishClient),
    /// An IPMI client, and the BMC request timeout that bounds a whole power action through it.
    Ipmi {
        client: IpmiClient,
        timeout: StdDuration,
    },
}

use crate::words::discovery::Interrupted;

impl Target for Device {
    fn origin(&self) -> String {
        match self {
            Self::Redfish(client) => Target::origin(client),
            Self::Ipmi { client, .. } => Target::origin(client),
        }
    }

    async fn find(
        &self,
        pinned: Option<&str>,
        node_uuid: &str,
    ) -> Result<Result<SystemReading, crate::identity::IdentityRefusal>, Interrupted> {
        match self {
            Self::Redfish(client) => client.find(pinned, node_uuid).await,
            Self::Ipmi { client, .. } => client.find(pinned, node_uuid).await,
        }
    }

    async fn read(&self, path: &str) -> Result<SystemReading, BmcError> {
        match self {
            Self::Redfish(client) => Target::read(client, path).await,
            Self::Ipmi { client, .. } => Target::read(client, path).await,
        }
    }

    /// An IPMI action (its session, the GUID check, the control, the close) gets what one Redfish
    /// request gets: the leader check asked the Lease to outlast no more.
    async fn act(&self, system: &SystemReading, reset: ResetType) -> Result<u16, BmcError> {
        match self {
            Self::Redfish(client) => Target::act(client, system, reset).await,
            Self::Ipmi { client, timeout } => client.act_checked(system, reset, Some(*timeout)).await.map(|()| 0),
        }
    }

    async fn heard(&self) -> crate::bmc::Heard {
        match self {
            Self::Redfish(client) => Target::heard(client).await,
            Self::Ipmi { client, .. } => Target::heard(client).await,
        }
    }
}

/// An IPMI BMC as the loop's power target: its chassis ([`IpmiClient::find_chassis`]); a power
/// action unbounded here ([`IpmiClient::act_checked`]). Returns 0, IPMI's normal completion code.
impl Target for IpmiClient {
    fn origin(&self) -> String {
        IpmiClient::origin(self)
    }

    async fn find(
        &self,
        pinned: Option<&str>,
        node_uuid: &str,
    ) -> Result<Result<SystemReading, crate::identity::IdentityRefusal>, Interrupted> {
        Ok(Ok(self.find_chassis(pinned, node_uuid).await?))
    }

    async fn read(&self, path: &str) -> Result<SystemReading, BmcError> {
        self.read_chassis(path).await
    }

    async fn act(&self, system: &SystemReading, reset: ResetType) -> Result<u16, BmcError> {
        self.act_checked(system, reset, None).await.map(|()| 0)
    }

    async fn heard(&self) -> crate::bmc::Heard {
        IpmiClient::heard(self).await
    }
}

/// How long a Redfish client (with the credentials and CA bundle it was built from) is reused: a fence
/// polling every second does not re-read its Secret every second, and a rotated Secret is picked up
/// within this time.
const CLIENT_TTL: StdDuration = StdDuration::from_secs(60);

/// Redfish clients by binding UID, with the binding resourceVersion they were built for and their
/// [`device_digest`].
#[derive(Default)]
struct ClientCache {
    entries: Mutex<HashMap<String, (String, Instant, Device, u64)>>,
}

impl ClientCache {
    fn get(&self, binding: &BmcBinding) -> Option<(Device, u64)> {
        let entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        let (version, built, client, serial) = entries.get(&binding.uid()?)?;
        (Some(version) == binding.resource_version().as_ref() && built.elapsed() < CLIENT_TTL)
            .then(|| (client.clone(), *serial))
    }

    fn forget(&self, uid: &str) {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner).remove(uid);
    }

    /// Keeps a new client with its device digest.
    fn put(&self, binding: &BmcBinding, client: &Device, serial: u64) -> u64 {
        self.put_at(binding, client, serial, Instant::now())
    }

    /// [`Self::put`] at `now`; clients past their time go (a deleted binding's, one a storm built):
    /// none would be reused, and each holds its connections.
    fn put_at(&self, binding: &BmcBinding, client: &Device, serial: u64, now: Instant) -> u64 {
        if let (Some(uid), Some(version)) = (binding.uid(), binding.resource_version()) {
            let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
            entries.retain(|_, (_, built, ..)| now.saturating_duration_since(*built) < CLIENT_TTL);
            entries.insert(uid, (version, now, client.clone(), serial));
        }
        serial
    }
}

/// The Redfish clients bindings describe, built on demand and reused ([`CLIENT_TTL`], same binding
/// version).
pub struct Clients {
    settings: BmcSettings,
    key: ContentKey,
    cache: ClientCache,
    /// PDU levels by (binding UID, level), as [`ClientCache`] keeps BMC clients.
    #[allow(clippy::type_complexity)]
    levels: Mutex<HashMap<(String, u32), (String, Instant, LevelDevices, u64)>>,
}

impl Clients {
    pub fn new(settings: BmcSettings, key: ContentKey) -> Self {
        Self { settings, key, cache: ClientCache::default(), levels: Mutex::default() }
    }

    /// The client the binding describes, with its [`device_digest`].
    pub async fn client(
        &self,
        kube: &Client,
        binding: &BmcBinding,
    ) -> Result<Result<(Device, u64), Unusable>, kube::Error> {
        if let Some(found) = self.cache.get(binding) {
            return Ok(Ok(found));
        }
        let found = credentials(kube, binding).await?;
        let built = match (&binding.spec.ipmi, found) {
            (Some(ipmi), Ok((credentials, kg))) => self.ipmi(binding, ipmi, credentials, kg),
            (Some(_), Err(cause)) => Err(cause),
            // Both read before either is judged: a binding missing its Secret and its CA bundle names both.
            (None, found) => match (found, trust(kube, binding).await?) {
                (Ok((credentials, _)), Ok((trust, ca_bundle))) => self.redfish(binding, trust, &ca_bundle, credentials),
                (found, trusted) => Err(together([found.err(), trusted.err()].into_iter().flatten().collect())),
            },
        };
        Ok(built
            .map(|(device, serial)| {
                self.cache.put(binding, &device, serial);
                (device, serial)
            })
            .map_err(|cause| Unusable::new(binding, cause)))
    }

    fn redfish(
        &self,
        binding: &BmcBinding,
        trust: tls::Trust,
        ca_bundle: &[u8],
        credentials: Credentials,
    ) -> Result<(Device, u64), Cause> {
        let endpoint = binding.spec.endpoint();
        let serial = device_digest(&self.key, &binding.spec, ca_bundle, &credentials, None);
        let config = RedfishConfig {
            endpoint,
            trust,
            credentials,
            request_timeout: self.settings.request_timeout,
            read_retries: self.settings.read_retries,
            retry_backoff: self.settings.retry_backoff,
        };
        Ok((Device::Redfish(RedfishClient::new(config)?), serial))
    }

    /// An IPMI client: each datagram waits 1 s and is sent at most twice, and a whole power action
    /// is bounded by the BMC request timeout ([`Device::act`]).
    fn ipmi(
        &self,
        binding: &BmcBinding,
        ipmi: &IpmiTarget,
        credentials: Credentials,
        kg: Option<BmcKey>,
    ) -> Result<(Device, u64), Cause> {
        let privilege = match ipmi.privilege {
            Some(IpmiPrivilege::Administrator) => Privilege::Administrator,
            Some(IpmiPrivilege::Operator) | None => Privilege::Operator,
        };
        let config = IpmiConfig {
            port: ipmi.port.unwrap_or(crate::ipmi::DEFAULT_PORT),
            cipher_suite: ipmi.cipher_suite.unwrap_or(3),
            privilege,
            kg: kg.clone(),
            retries: 1,
            ..IpmiConfig::new(ipmi.address.clone(), credentials.username.clone(), credentials.password.clone())
        };
        // The key counts as TLS material does: another key is another device (P2).
        let serial = device_digest(&self.key, &binding.spec, &[], &credentials, kg.as_ref());
        let client = IpmiClient::new(config)?;
        Ok((Device::Ipmi { client, timeout: self.settings.request_timeout }, serial))
    }

    /// Drops the binding's client: what it was built from (its Secret, its CA bundle) changed, and
    /// the next one is built from them as they are now.
    pub fn forget(&self, binding: &BmcBinding) {
        if let Some(uid) = binding.uid() {
            self.cache.forget(&uid);
            self.levels.lock().unwrap_or_else(PoisonError::into_inner).retain(|(of, _), _| *of != uid);
        }
    }
}

/// One outlet's client.
#[derive(Clone, Debug)]
enum OutletClient {
    Redfish(Box<RedfishPdu>, pdu::redfish::OutletId),
    Snmp(SnmpPdu, pdu::snmp::OutletNumber),
}

/// The outlets of one PDU level as a binding's `pduLevels` entry and their Secrets describe them.
#[derive(Clone, Debug)]
pub struct LevelDevices {
    outlets: Vec<(String, f64, OutletClient)>,
}

impl Level for LevelDevices {
    fn outlets(&self) -> Vec<(String, f64)> {
        self.outlets.iter().map(|(key, floor, _)| (key.clone(), *floor)).collect()
    }

    async fn read(&self, index: usize) -> Result<OutletReading, PduError> {
        match &self.outlets.get(index).ok_or_else(|| PduError::NoSuchOutlet(index.to_string()))?.2 {
            OutletClient::Redfish(pdu, outlet) => pdu.read(outlet).await,
            OutletClient::Snmp(pdu, outlet) => pdu.read(outlet).await,
        }
    }

    async fn switch_off(&self, index: usize) -> Result<(), PduError> {
        match &self.outlets.get(index).ok_or_else(|| PduError::NoSuchOutlet(index.to_string()))?.2 {
            OutletClient::Redfish(pdu, outlet) => pdu.switch(outlet, OutletCommand::Off).await,
            OutletClient::Snmp(pdu, outlet) => pdu.switch(outlet, OutletCommand::Off).await,
        }
    }
}

impl Clients {
    /// The outlets of the binding's PDU level `level` (2 for its first entry), with the keyed digest
    /// of the level's spec and of the credential and CA values its clients are made of (P2). Reused
    /// as a BMC client is ([`CLIENT_TTL`], same binding version): an SNMPv3 client keeps the engine
    /// it discovered.
    pub async fn level(
        &self,
        kube: &Client,
        binding: &BmcBinding,
        level: u32,
    ) -> Result<Result<(LevelDevices, u64), Unusable>, kube::Error> {
        let key = (binding.uid().unwrap_or_default(), level);
        let version = binding.resource_version().unwrap_or_default();
        if let Some((built_for, built, devices, serial)) =
            self.levels.lock().unwrap_or_else(PoisonError::into_inner).get(&key)
            && *built_for == version
            && built.elapsed() < CLIENT_TTL
        {
            return Ok(Ok((devices.clone(), *serial)));
        }
        let Some(spec) = level.checked_sub(2).and_then(|i| binding.spec.pdu_levels.get(i as usize)) else {
            return Ok(Err(Unusable::new(binding, Cause::NoSuchLevel { level })));
        };
        let namespace = binding.namespace().unwrap_or_default();
        let mut parts = vec![serde_json::to_vec(spec).unwrap_or_default()];
        let (mut outlets, mut causes) = (Vec::new(), Vec::new());
        for outlet in &spec.outlets {
            match self.outlet(kube, &namespace, outlet, &mut parts).await? {
                Ok(client) => outlets.push((outlet.key(), outlet.floor(), client)),
                Err(cause) => causes.push(cause),
            }
        }
        if !causes.is_empty() {
            return Ok(Err(Unusable::new(binding, together(causes))));
        }
        let serial = keyed_digest(&self.key, &parts);
        let devices = LevelDevices { outlets };
        let mut levels = self.levels.lock().unwrap_or_else(PoisonError::into_inner);
        levels.retain(|_, (_, built, ..)| built.elapsed() < CLIENT_TTL);
        levels.insert(key, (version, Instant::now(), devices.clone(), serial));
        Ok(Ok((devices, serial)))
    }

    /// L5: the seal of a level's confirmation: a digest of what it says, keyed with the content key,
    /// so that only coroner can write a confirmation that counts.
    pub fn seal(&self, binding_uid: &str, confirmation: &crate::api::LevelConfirmation) -> String {
        let time = |t: &Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>| {
            t.as_ref().map(|t| t.0.to_string()).unwrap_or_default()
        };
        let parts = [
            "level-confirmation".to_owned(),
            binding_uid.to_owned(),
            confirmation.level.to_string(),
            confirmation.generation.to_string(),
            time(&confirmation.on_seen_at),
            time(&confirmation.off_seen_at),
        ];
        self.seal_parts(&parts)
    }

    /// A digest of `parts` keyed with the content key: the seal of what only coroner may write.
    pub fn seal_parts(&self, parts: &[String]) -> String {
        content_hex(keyed_digest(&self.key, parts))
    }

    /// One outlet's client; what its Secret and CA bundle hold goes into `parts` (for the digest).
    async fn outlet(
        &self,
        kube: &Client,
        namespace: &str,
        outlet: &crate::api::PduOutlet,
        parts: &mut Vec<Vec<u8>>,
    ) -> Result<Result<OutletClient, Cause>, kube::Error> {
        let name = &outlet.credentials_secret_ref.name;
        let secret = Api::<Secret>::namespaced(kube.clone(), namespace).get_opt(name).await?;
        let Some(secret) = secret else {
            return Ok(Err(Cause::SecretMissing { namespace: namespace.to_owned(), name: name.clone() }));
        };
        let field = |key: &'static str| secret_field(&secret, namespace, name, key);
        let pdu_cause = |problem: String| Cause::Pdu { outlet: outlet.key(), problem };
        if let Some(redfish) = &outlet.redfish {
            let policy = outlet.tls.clone().unwrap_or_default();
            let credentials = credentials_in(Some(&secret), namespace, name);
            let trusted = trust_of(kube, namespace, &policy).await?;
            let (credentials, (trust, ca_bundle)) = match (credentials, trusted) {
                (Ok(credentials), Ok(trusted)) => (credentials, trusted),
                (credentials, trusted) => {
                    return Ok(Err(together([credentials.err(), trusted.err()].into_iter().flatten().collect())));
                }
            };
            parts.extend([
                ca_bundle,
                credentials.username.clone().into_bytes(),
                credentials.password.reveal().as_bytes().to_vec(),
            ]);
            let id = match pdu::redfish::OutletId::new(&redfish.rack_pdu, &redfish.outlet) {
                Ok(id) => id,
                Err(error) => return Ok(Err(pdu_cause(error.to_string()))),
            };
            let config = RedfishConfig {
                endpoint: redfish.endpoint.clone(),
                trust,
                credentials,
                request_timeout: self.settings.request_timeout,
                read_retries: self.settings.read_retries,
                retry_backoff: self.settings.retry_backoff,
            };
            return Ok(RedfishPdu::new(config)
                .map(|pdu| OutletClient::Redfish(Box::new(pdu), id))
                .map_err(Cause::from));
        }
        let Some(snmp) = &outlet.snmp else { return Ok(Err(pdu_cause("neither redfish nor snmp is set".into()))) };
        let security = match snmp.version {
            SnmpVersion::V3 => match (field("username"), field("authKey"), field("privKey")) {
                (Ok(username), Ok(auth_key), Ok(priv_key)) => {
                    parts.extend([
                        username.clone().into_bytes(),
                        auth_key.clone().into_bytes(),
                        priv_key.clone().into_bytes(),
                    ]);
                    pdu::snmp::SnmpSecurity::Usm(pdu::snmp::Usm {
                        username,
                        auth: auth_protocol(snmp.auth_protocol),
                        auth_key: Password::new(auth_key),
                        privacy: priv_protocol(snmp.priv_protocol),
                        priv_key: Password::new(priv_key),
                        context: snmp.context_name.clone().unwrap_or_default(),
                    })
                }
                (username, auth, privacy) => {
                    return Ok(Err(together(
                        [username.err(), auth.err(), privacy.err()].into_iter().flatten().collect(),
                    )));
                }
            },
            SnmpVersion::V2c | SnmpVersion::V1 => match field("community") {
                Ok(community) => {
                    parts.push(community.clone().into_bytes());
                    let version = if snmp.version == SnmpVersion::V1 {
                        pdu::snmp::CommunityVersion::V1
                    } else {
                        pdu::snmp::CommunityVersion::V2c
                    };
                    pdu::snmp::SnmpSecurity::Community { version, community: Password::new(community) }
                }
                Err(cause) => return Ok(Err(cause)),
            },
        };
        let number = match pdu::snmp::OutletNumber::new(snmp.outlet) {
            Ok(number) => number,
            Err(error) => return Ok(Err(pdu_cause(error.to_string()))),
        };
        let config = pdu::snmp::SnmpConfig {
            address: crate::api::host_port(&snmp.address, snmp.port.unwrap_or(161)),
            security,
            request_timeout: self.settings.request_timeout,
            retries: self.settings.read_retries,
        };
        Ok(match SnmpPdu::connect(config).await {
            Ok(pdu) => Ok(OutletClient::Snmp(pdu, number)),
            Err(error) => Err(pdu_cause(error.to_string())),
        })
    }
}

fn auth_protocol(protocol: Option<SnmpAuthProtocol>) -> pdu::snmp::AuthProtocol {
    use pdu::snmp::AuthProtocol as A;
    match protocol.unwrap_or(SnmpAuthProtocol::SHA256) {
        SnmpAuthProtocol::SHA1 => A::Sha1,
        SnmpAuthProtocol::SHA224 => A::Sha224,
        SnmpAuthProtocol::SHA256 => A::Sha256,
        SnmpAuthProtocol::SHA384 => A::Sha384,
        SnmpAuthProtocol::SHA512 => A::Sha512,
    }
}

fn priv_protocol(protocol: Option<SnmpPrivProtocol>) -> pdu::snmp::PrivProtocol {
    use pdu::snmp::PrivProtocol as P;
    match protocol.unwrap_or(SnmpPrivProtocol::AES128) {
        SnmpPrivProtocol::AES128 => P::Aes128,
        SnmpPrivProtocol::AES192 => P::Aes192,
        SnmpPrivProtocol::AES256 => P::Aes256,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::ByteString;

    use super::*;
    use crate::api::{BmcBindingSpec, RedfishTarget, SecretRef, TlsPolicy};
    use crate::contract::Reason;

    fn binding(version: &str) -> BmcBinding {
        let mut binding = BmcBinding::new(
            "b",
            BmcBindingSpec {
                node_name: "n".into(),
                redfish: Some(RedfishTarget { endpoint: "https://10.0.0.1".into(), system_id: None }),
                ipmi: None,
                credentials_secret_ref: SecretRef { name: "s".into() },
                tls: Some(TlsPolicy::default()),
                pdu_levels: Vec::new(),
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
    fn a_binding_that_misses_several_objects_names_every_one_at_once() {
        let empty = secret(&[]);
        let missing = credentials_in(Some(&empty), "ns", "s").unwrap_err();
        assert_eq!(
            missing.to_string(),
            r#"credentials Secret ns/s has no non-empty UTF-8 key "username"; credentials Secret ns/s has no non-empty UTF-8 key "password""#
        );
        let ca = Cause::CaBundleMissing { kind: CaBundleKind::ConfigMap, namespace: "ns".into(), name: "ca".into() };
        let secret = Cause::SecretMissing { namespace: "ns".into(), name: "s".into() };
        assert_eq!(together(vec![secret.clone()]), secret, "one cause is itself");
        let both = together(vec![secret, ca]);
        assert_eq!(
            Unusable { binding: "b".into(), cause: both.clone() }.to_string(),
            "BmcBinding b: credentials Secret ns/s does not exist; CA bundle ConfigMap ns/ca does not exist"
        );
        assert_eq!(Unusable { binding: "b".into(), cause: both }.reason(), Reason::BindingInvalid);
    }

    /// A Redfish device for the cache tests (never contacted).
    fn redfish_device() -> Device {
        Device::Redfish(
            RedfishClient::new(RedfishConfig {
                endpoint: "https://10.0.0.1".into(),
                trust: tls::Trust { insecure_skip_verify: true, ..tls::Trust::default() },
                credentials: Credentials { username: "u".into(), password: Password::new("p".into()) },
                request_timeout: StdDuration::from_secs(1),
                read_retries: 0,
                retry_backoff: StdDuration::from_millis(1),
            })
            .unwrap(),
        )
    }

    #[test]
    fn a_client_is_reused_only_for_the_binding_version_it_was_built_for() {
        let cache = ClientCache::default();
        assert!(cache.get(&binding("1")).is_none());
        cache.put(&binding("1"), &redfish_device(), 7);
        assert!(cache.get(&binding("1")).is_some());
        assert!(cache.get(&binding("2")).is_none(), "a changed binding builds a new client");
        cache.forget("uid-b");
        assert!(cache.get(&binding("1")).is_none(), "a changed Secret or CA bundle builds a new client");
    }

    #[test]
    fn a_client_past_its_time_is_dropped_when_another_is_kept() {
        let client = redfish_device();
        let cache = ClientCache::default();
        let start = Instant::now();
        let mut other = binding("1");
        other.metadata.uid = Some("uid-c".into());
        cache.put_at(&binding("1"), &client, 7, start);
        cache.put_at(&other, &client, 8, start + StdDuration::from_secs(30));
        let kept = |cache: &ClientCache| {
            let mut uids: Vec<String> =
                cache.entries.lock().unwrap_or_else(PoisonError::into_inner).keys().cloned().collect();
            uids.sort();
            uids
        };
        assert_eq!(kept(&cache), ["uid-b", "uid-c"], "both within their time");
        cache.put_at(&other, &client, 9, start + CLIENT_TTL + StdDuration::from_secs(1));
        assert_eq!(kept(&cache), ["uid-c"], "the one nobody reused since its time ran out is gone");
    }

    #[test]
    fn a_client_rebuilt_from_the_same_values_is_the_same_device() {
        let key = ContentKey::new(b"coroner's key");
        let credentials =
            |password: &str| Credentials { username: "u".into(), password: Password::new(password.into()) };
        let digest = |spec: &BmcBindingSpec, ca: &[u8], password: &str| {
            device_digest(&key, spec, ca, &credentials(password), None)
        };
        let spec = binding("1").spec;
        let base = digest(&spec, b"PEM", "p");
        assert_eq!(base, digest(&binding("2").spec, b"PEM", "p"), "the binding's metadata is not its content");
        let mut moved = spec.clone();
        moved.redfish.as_mut().unwrap().endpoint = "https://10.0.0.2".into();
        assert_ne!(base, digest(&moved, b"PEM", "p"), "another endpoint");
        let mut pinned = spec.clone();
        pinned.tls.as_mut().unwrap().certificate_sha256 = Some("ab".repeat(32));
        assert_ne!(base, digest(&pinned, b"PEM", "p"), "another TLS policy");
        assert_ne!(base, digest(&spec, b"PEM2", "p"), "another CA bundle");
        assert_ne!(base, digest(&spec, b"PEM", "q"), "another password");
        assert_ne!(digest(&spec, b"PE", "Mp"), base, "fields do not run into each other");
        let kg = BmcKey::new(b"kg".to_vec());
        assert_ne!(base, device_digest(&key, &spec, b"PEM", &credentials("p"), Some(&kg)), "another IPMI key");
    }

    #[test]
    fn a_digest_is_keyed_so_its_readers_cannot_guess_the_password_it_covers() {
        let credentials = Credentials { username: "u".into(), password: Password::new("calvin".into()) };
        let spec = binding("1").spec;
        let ours = device_digest(&ContentKey::new(b"coroner's key"), &spec, b"", &credentials, None);
        let guess = device_digest(&ContentKey::new(b"a reader's guess"), &spec, b"", &credentials, None);
        assert_ne!(ours, guess, "without coroner's key the same values give another digest");
        assert_eq!(content_hex(ours).len(), 16);
        assert_eq!(format!("{:?}", ContentKey::new(b"coroner's key")), "ContentKey(<redacted>)");
        assert_ne!(ContentKey::random().unwrap().0, ContentKey::random().unwrap().0);
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
        let pin = Unusable::new(&binding("1"), Cause::BadPin(tls::parse_pin("zz").unwrap_err().to_string()));
        assert!(pin.to_string().starts_with("BmcBinding b: certificateSHA256 must be"), "{pin}");
        assert_eq!(pin.reason(), Reason::BindingInvalid);
    }

    #[test]
    fn an_ipmi_binding_builds_an_ipmi_device_whose_key_is_part_of_what_it_is() {
        let clients = Clients::new(
            BmcSettings {
                request_timeout: StdDuration::from_secs(5),
                read_retries: 1,
                retry_backoff: StdDuration::from_millis(1),
            },
            ContentKey::random().unwrap(),
        );
        let binding = binding("1");
        let target = IpmiTarget { address: "10.0.0.13".into(), port: None, cipher_suite: None, privilege: None };
        let credentials = || Credentials { username: "admin".into(), password: Password::new("pw".into()) };
        let (device, plain) = clients.ipmi(&binding, &target, credentials(), None).unwrap();
        assert!(matches!(&device, Device::Ipmi { .. }));
        assert_eq!(Target::origin(&device), "ipmi://10.0.0.13:623");
        let (_, keyed) = clients.ipmi(&binding, &target, credentials(), Some(BmcKey::new(b"kg".to_vec()))).unwrap();
        assert_ne!(plain, keyed, "another BMC key is another device");
        let suite = IpmiTarget { cipher_suite: Some(17), ..target };
        assert!(matches!(clients.ipmi(&binding, &suite, credentials(), None), Err(Cause::Ipmi(_))));
    }

    #[test]
    fn an_ipmi_key_in_the_secret_is_hex_or_refused() {
        assert!(matches!(bmc_key_in(Some(&secret(&[("username", b"u")])), "ns", "s"), Ok(None)));
        assert!(bmc_key_in(Some(&secret(&[("kg", b"6b67")])), "ns", "s").unwrap().is_some());
        assert!(matches!(
            bmc_key_in(Some(&secret(&[("kg", b"not hex")])), "ns", "s"),
            Err(Cause::BmcKeyNotHex { namespace, name }) if namespace == "ns" && name == "s"
        ));
    }
}
