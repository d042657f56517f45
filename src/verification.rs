//! What a BmcBinding's status says after a verification, and when that is worth an Event. The
//! continuous verification (and every fence's identity step) reads the BMC; these decisions are pure.
//!
//! Every check sets all three conditions for the binding's current spec (each carries its
//! `observedGeneration`), so nothing of an earlier spec lingers; a change of status or reason is an
//! Event.

use std::time::Duration as StdDuration;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use crate::{
    api::{BmcBinding, BmcBindingStatus, CoronerRemediationStatus, Phase, TlsPolicy, UuidMatch, conditions},
    bmc::tls,
    contract::{self, Reason},
    fence::Notice,
};

use crate::words::event::Event;

pub const REACHABLE: &str = "Reachable";
pub const IDENTITY_VERIFIED: &str = "IdentityVerified";
pub const TLS_VERIFIED: &str = "TLSVerified";
/// Whether the BMC answers a power reading fast enough for a dense proof (docs/safety.md P4).
pub const READS_FIT: &str = "ReadsFitPollInterval";
pub const SETTLE_TOO_SHORT: &str = Event::SettleTooShortForBmc.as_str();

/// The outcome of one look at a binding.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Check {
    /// Another binding claims the same node: nothing was asked of the BMC. (Two nodes' bindings on
    /// one BMC are settled by the identity read: `Refused` with `BindingConflict`.)
    Conflict(String),
    /// The binding's Secret, CA bundle or pin cannot be used: nothing was asked of the BMC.
    Invalid(String),
    /// The BMC did not answer usably (unreachable, TLS, credentials, protocol).
    Failed { reason: Reason, message: String },
    /// The BMC answered, but none of its several systems is the node's machine.
    NoNodeSystem(String),
    /// The BMC answered with a system, and a fence refused its identity for `reason`.
    Refused { reason: Reason, message: String },
    /// The BMC answered with a system; `identity` is the UUID rule's verdict for the node.
    Read { system_id: String, uuid: String, power_state: String, identity: Result<UuidMatch, (Reason, String)> },
}

/// What one check tells about the TLS handshake with the BMC.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Handshake {
    /// No handshake completed (the BMC was not contacted, or did not answer), or coroner cannot
    /// tell: `TLSVerified=Unknown`.
    None(String),
    /// A handshake completed and the BMC answered over it: verified unless `insecureSkipVerify`.
    Completed,
    /// The certificate did not verify: `TLSVerified=False` with the reason.
    Failed(String),
}

impl Handshake {
    /// The handshake behind a check's outcome. Only a failure that comes after the handshake (the
    /// BMC rejected the credentials or answered nonsense) proves one completed; an unreachable BMC
    /// (including 5xx answers, which read as unreachable) says nothing either way.
    pub fn of(check: &Check) -> Self {
        match check {
            Check::Conflict(_) | Check::Invalid(_) => Self::None("the BMC was not contacted".into()),
            Check::Failed { reason: Reason::BmcTlsVerificationFailed, message } => Self::Failed(message.clone()),
            Check::Failed { reason: Reason::BmcAuthenticationFailed | Reason::BmcProtocolError, .. } => Self::Completed,
            Check::Failed { message, .. } => Self::None(format!("no answer from the BMC: {message}")),
            Check::NoNodeSystem(_) | Check::Refused { .. } | Check::Read { .. } => Self::Completed,
        }
    }
}

/// Whether a request that got an answer through a client built from `policy` was sent over a
/// verified handshake: rustls completes no handshake whose certificate failed, so an answer proves
/// verification unless verification was turned off. What a fence records as `tlsVerified` for its
/// identity read (`IdentityFound::tls_verified`): `answered` is whether that very read got an answer.
pub fn request_tls_verified(policy: &TlsPolicy, answered: bool) -> bool {
    answered && !policy.insecure_skip_verify
}

/// What a verified handshake was verified against, in the condition's words.
fn verified_against(policy: &TlsPolicy) -> String {
    match (&policy.ca_bundle_ref, &policy.certificate_sha256) {
        (Some(ca), Some(_)) => format!(
            "the BMC's certificate verified against the CA bundle {} and matches tls.certificateSHA256",
            tls::describe_source(ca)
        ),
        (Some(ca), None) => {
            format!("the BMC's certificate verified against the CA bundle {}", tls::describe_source(ca))
        }
        (None, _) => "the BMC's certificate matches tls.certificateSHA256".into(),
    }
}

/// Applies a check to the status (conditions, observed system, power, time) and returns the Events
/// it is worth: one per condition whose status or reason changed (Unknown ones aside). `content` is
/// the device digest of the client the check went through, when known: a verified identity records
/// it as `verifiedContent` (A2); without it, the content of an earlier verification stays, which can
/// only make a later comparison fail.
pub fn record(
    status: &mut BmcBindingStatus,
    check: &Check,
    binding: &BmcBinding,
    content: Option<u64>,
    now: Timestamp,
) -> Vec<Notice> {
    let policy = &binding.spec.tls_policy();
    let node = binding.spec.node_name.as_str();
    let generation = binding.metadata.generation;
    let before = |status: &BmcBindingStatus, type_: &str| {
        conditions::find(&status.conditions, type_).map(|c| (c.status.clone(), c.reason.clone()))
    };
    let was = [REACHABLE, IDENTITY_VERIFIED, TLS_VERIFIED].map(|t| before(status, t));
    let set = |status: &mut BmcBindingStatus, type_: &str, state: &str, reason: &str, message: &str| {
        conditions::set_observed(&mut status.conditions, type_, state, reason, message, generation, now);
    };
    let (t, f, u) = (conditions::TRUE, conditions::FALSE, conditions::UNKNOWN);
    let answered = |status: &mut BmcBindingStatus, message: &str| set(status, REACHABLE, t, "Answered", message);
    let mut power = None;
    match check {
        Check::Conflict(message) | Check::Invalid(message) => {
            let reason =
                if matches!(check, Check::Conflict(_)) { Reason::BindingConflict } else { Reason::BindingInvalid };
            set(status, REACHABLE, u, "NotContacted", &format!("the BMC was not contacted: {message}"));
            set(status, IDENTITY_VERIFIED, f, reason.as_str(), message);
        }
        Check::Failed { reason, message } => {
            set(status, REACHABLE, f, reason.as_str(), message);
            set(status, IDENTITY_VERIFIED, f, reason.as_str(), &format!("identity unknown: {message}"));
        }
        Check::NoNodeSystem(message) => {
            answered(status, "the BMC answered");
            set(status, IDENTITY_VERIFIED, f, Reason::IdentityMismatch.as_str(), message);
        }
        Check::Refused { reason, message } => {
            answered(status, "the BMC answered");
            set(status, IDENTITY_VERIFIED, f, reason.as_str(), contract::cause(message));
        }
        Check::Read { system_id, uuid, power_state, identity } => {
            answered(status, &format!("system {system_id} answered"));
            match identity {
                Ok(matched) => {
                    let message = format!("{matched:?} match of system {system_id} with node {node}");
                    set(status, IDENTITY_VERIFIED, t, "UuidMatched", &message);
                    status.system_id = Some(system_id.clone());
                    status.uuid = Some(uuid.clone());
                    status.last_verification_time = Some(Time(now));
                    status.observed_generation = generation;
                    if let Some(content) = content {
                        status.verified_content = Some(crate::words::digest::content_hex(content));
                    }
                    power = Some(power_state.clone());
                }
                Err((reason, message)) => {
                    set(status, IDENTITY_VERIFIED, f, reason.as_str(), contract::cause(message));
                }
            }
        }
    }
    // Power only from a system whose identity this very check verified: anything else may be
    // another machine's, or an earlier spec's.
    status.last_power_check_time = power.as_ref().map(|_| Time(now));
    status.power_state = power;
    match Handshake::of(check) {
        // An IPMI BMC speaks no TLS: the condition is absent.
        _ if binding.spec.ipmi.is_some() => status.conditions.retain(|c| c.type_ != TLS_VERIFIED),
        Handshake::None(why) => {
            set(status, TLS_VERIFIED, u, "NoHandshake", &format!("no TLS handshake completed: {why}"))
        }
        Handshake::Failed(why) => set(status, TLS_VERIFIED, f, Reason::BmcTlsVerificationFailed.as_str(), &why),
        Handshake::Completed if policy.insecure_skip_verify => set(
            status,
            TLS_VERIFIED,
            f,
            "InsecureSkipVerify",
            "insecureSkipVerify is set: the BMC's certificate is not verified",
        ),
        Handshake::Completed => set(status, TLS_VERIFIED, t, "Verified", &verified_against(policy)),
    }
    let mut notices = Vec::new();
    let changed = |status: &BmcBindingStatus, index: usize, type_: &str| {
        let now = conditions::find(&status.conditions, type_)?.clone();
        let same = was[index].as_ref().is_some_and(|(s, r)| *s == now.status && *r == now.reason);
        (!same && now.status != conditions::UNKNOWN).then_some(now)
    };
    // A failing verdict's Event carries its cause as the reason: Events with one reason on one object
    // fold into one series (kube-runtime's Recorder), which would hide the second cause.
    if let Some(verified) = changed(status, 1, IDENTITY_VERIFIED) {
        let good = verified.status == conditions::TRUE;
        notices.push(Notice {
            warning: !good,
            reason: if good { Event::BindingVerified.as_str().into() } else { verified.reason.clone() },
            message: format!("{}: {}", verified.reason, verified.message),
        });
    }
    // Whether the BMC answers is news once known; the first verdict is in the identity Event.
    if let Some(reachable) = changed(status, 0, REACHABLE).filter(|_| was[0].is_some()) {
        let good = reachable.status == conditions::TRUE;
        notices.push(Notice {
            warning: !good,
            reason: if good { Event::BmcReachable.as_str().into() } else { Reason::BmcUnreachable.as_str().into() },
            message: format!("{}: {}", reachable.reason, reachable.message),
        });
    }
    // A failed verification is in the identity Event already; turning verification off is not.
    if let Some(tls) = changed(status, 2, TLS_VERIFIED).filter(|c| c.reason == "InsecureSkipVerify") {
        notices.push(Notice { warning: true, reason: tls.reason, message: tls.message });
    }
    notices
}

/// P4, before any outage: one power reading of the verified system took `latency`; with the
/// shortest `pollInterval` of the namespace's templates, could a fence through this binding prove
/// anything? Sets `ReadsFitPollInterval` and returns a Warning when it turns False
/// (`SettleTooShortForBmc`).
pub fn record_latency(
    status: &mut BmcBindingStatus,
    binding: &BmcBinding,
    latency: StdDuration,
    poll_interval: StdDuration,
    now: Timestamp,
) -> Option<Notice> {
    let was = conditions::find(&status.conditions, READS_FIT).map(|c| (c.status.clone(), c.reason.clone()));
    let (state, reason, message) = if crate::fence::read_fits(latency, poll_interval) {
        let message = format!(
            "a power reading took {:.1}s, which leaves the loop its time within pollInterval {} + {:.1}s",
            latency.as_secs_f64(),
            crate::api::Duration::from(poll_interval),
            crate::fence::READ_ALLOWANCE.as_secs_f64()
        );
        (conditions::TRUE, "Fits", message)
    } else {
        let message = format!(
            "a power reading took {:.1}s, more than pollInterval {} + {:.1}s leave once the loop has taken its time: readings this slow are never dense enough to prove power-off (docs/safety.md P4); raise pollInterval in the template, or make the BMC answer faster",
            latency.as_secs_f64(),
            crate::api::Duration::from(poll_interval),
            crate::fence::READ_ALLOWANCE.as_secs_f64()
        );
        (conditions::FALSE, SETTLE_TOO_SHORT, message)
    };
    conditions::set_observed(
        &mut status.conditions,
        READS_FIT,
        state,
        reason,
        &message,
        binding.metadata.generation,
        now,
    );
    let turned_false = state == conditions::FALSE && was.as_ref().is_none_or(|(s, r)| s != state || r != reason);
    turned_false.then(|| Notice { warning: true, reason: SETTLE_TOO_SHORT.into(), message })
}

/// L5: whether every PDU level's mapping is confirmed by the machine (docs/safety.md).
pub const OUTLET_MAPPING_PROVEN: &str = "OutletMappingProven";
/// L6: whether the binding's outlets are its own, or shared only as declared.
pub const OUTLETS_EXCLUSIVE: &str = "OutletsExclusive";
/// Whether every outlet is reached over an authenticated, encrypted transport (SNMPv3 authPriv,
/// verified TLS).
pub const PDU_TRANSPORT_SECURE: &str = "PduTransportSecure";

/// What the binding's PDU levels say before any outage: whether their mappings are proven (L5), their
/// outlets exclusive (L6) and their transports secure. Sets the three conditions (removes them from a
/// binding without levels) and returns a Warning for each that turned False. `all` is every binding
/// of the namespace; `confirmed`, per level, the generation a sealed confirmation confirms it at.
pub fn record_levels(
    status: &mut BmcBindingStatus,
    binding: &BmcBinding,
    all: &[BmcBinding],
    confirmed: &[Option<i64>],
    now: Timestamp,
) -> Vec<Notice> {
    use crate::levels::{self, MappingBasis};
    let types = [OUTLET_MAPPING_PROVEN, OUTLETS_EXCLUSIVE, PDU_TRANSPORT_SECURE];
    if binding.spec.pdu_levels.is_empty() {
        status.conditions.retain(|c| !types.contains(&c.type_.as_str()));
        return Vec::new();
    }
    let generation = binding.metadata.generation;
    let mut mapping = Vec::new();
    for (index, level) in binding.spec.pdu_levels.iter().enumerate() {
        match levels::mapping_basis(level, confirmed.get(index).copied().flatten(), generation) {
            Ok(MappingBasis::OperatorStatement) => mapping.push(format!(
                "level {}: stated by an operator (mappingProof: OperatorStatement), not confirmed by the machine",
                index + 2
            )),
            Err(refusal) => mapping.push(format!("level {}: unusable: {refusal}", index + 2)),
        }
    }
    let shared = levels::shared_outlets(all).remove(&kube::ResourceExt::name_any(binding)).unwrap_or_default();
    let insecure: Vec<String> = binding
        .spec
        .pdu_levels
        .iter()
        .flat_map(|l| &l.outlets)
        .filter(|o| o.is_insecure())
        .map(|o| match &o.snmp {
            Some(snmp) => format!("{}: SNMP {:?} sends its community in clear text", o.key(), snmp.version),
            None => format!("{}: tls.insecureSkipVerify is set", o.key()),
        })
        .collect();
    let verdicts = [
        (
            OUTLET_MAPPING_PROVEN,
            "Confirmed",
            Event::OutletMappingUnproven.as_str(),
            "every level's mapping is confirmed",
            mapping,
        ),
        (
            OUTLETS_EXCLUSIVE,
            "NotShared",
            "OutletShared",
            "no other binding names these outlets undeclared",
            shared.iter().map(ToString::to_string).collect(),
        ),
        (
            PDU_TRANSPORT_SECURE,
            "Secure",
            Event::InsecurePduTransport.as_str(),
            "every outlet is reached over SNMPv3 authPriv or verified TLS",
            insecure,
        ),
    ];
    let mut notices = Vec::new();
    for (type_, good, bad, fine, problems) in verdicts {
        let was = conditions::find(&status.conditions, type_).map(|c| (c.status.clone(), c.reason.clone()));
        let (state, reason, message) = if problems.is_empty() {
            (conditions::TRUE, good, fine.to_owned())
        } else {
            (conditions::FALSE, bad, problems.join("; "))
        };
        conditions::set_observed(&mut status.conditions, type_, state, reason, &message, generation, now);
        let turned_false = state == conditions::FALSE && was.is_none_or(|(s, r)| s != state || r != reason);
        if turned_false {
            notices.push(Notice { warning: true, reason: reason.into(), message });
        }
    }
    notices
}

/// The ConfigMap, in coroner's namespace, that keeps each node's last verified binding content
/// beyond the binding object (A2): a binding deleted and re-created at the same content keeps its
/// history.
pub const KEPT_VERIFICATIONS: &str = "coroner-verified-bindings";

/// A2: a verification kept beyond its binding object, under the node's name in
/// [`KEPT_VERIFICATIONS`]: the content verified, when, by which binding object, and a seal keyed with
/// the content key, so that only coroner can write one that counts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeptVerification {
    pub content: String,
    pub at: Timestamp,
    pub uid: String,
    pub seal: String,
}

impl KeptVerification {
    /// What the seal covers, for the node it is kept under.
    pub fn sealed_parts(&self, node: &str) -> [String; 5] {
        ["kept-verification".into(), node.into(), self.content.clone(), self.at.to_string(), self.uid.clone()]
    }

    /// Which verification this is: its content and binding object (what a process remembers having
    /// kept).
    pub fn id(&self) -> (String, String) {
        (self.content.clone(), self.uid.clone())
    }

    /// The ConfigMap value: `<content> <time> <binding UID> <seal>`.
    pub fn to_value(&self) -> String {
        format!("{} {} {} {}", self.content, self.at, self.uid, self.seal)
    }

    /// A value [`Self::to_value`] wrote; anything else is no kept verification.
    pub fn parse(value: &str) -> Option<Self> {
        let mut words = value.split(' ');
        let hex = |w: &str| !w.is_empty() && w.bytes().all(|b| b.is_ascii_hexdigit());
        let content = words.next().filter(|w| hex(w))?.to_owned();
        let at = words.next()?.parse().ok()?;
        let uid = words.next().filter(|w| !w.is_empty())?.to_owned();
        let seal = words.next().filter(|w| hex(w))?.to_owned();
        words.next().is_none().then_some(Self { content, at, uid, seal })
    }
}

/// Whether a verification replaces the one kept for its node: only a later one does (the entry is
/// the node's last verified content); a kept entry whose seal does not hold counts as none.
pub fn replaces_kept(kept: Option<&KeptVerification>, sealed: bool, new: &KeptVerification) -> bool {
    kept.filter(|_| sealed).is_none_or(|kept| kept.at < new.at)
}

/// What the verifier keeps of a binding it verified (unsealed): the content and time of its last
/// verification, by the binding object; `None` when no verification recorded a content.
pub fn to_keep(binding: &BmcBinding, status: &BmcBindingStatus) -> Option<KeptVerification> {
    Some(KeptVerification {
        content: status.verified_content.clone()?,
        at: status.last_verification_time.as_ref()?.0,
        uid: binding.metadata.uid.clone()?,
        seal: String::new(),
    })
}

/// A2: the binding as a fence's admission records it: its generation, the content of the client
/// the fence goes through (`content`: its device digest, `None` when the binding cannot be used), and
/// its last successful verification (when, of which generation, at which content). When the
/// binding's own status shows no verification at that content, a verification `kept` for the node
/// (its seal already checked) of exactly that content by an earlier object of the binding counts: a
/// binding deleted and re-created identically keeps its history.
pub fn at_admission(
    binding: &BmcBinding,
    content: Option<u64>,
    kept: Option<&KeptVerification>,
) -> crate::api::BindingAtAdmission {
    let status = binding.status.as_ref();
    let verified_at = status.and_then(|s| s.last_verification_time.clone());
    let content = content.map(crate::words::digest::content_hex);
    let own_content = verified_at.as_ref().and(status.and_then(|s| s.verified_content.clone()));
    // Only the node's last verified content counts, so never one older than this object's own.
    let own_at = verified_at.as_ref().map(|t| t.0);
    let earlier = kept.filter(|kept| {
        own_content.as_ref().is_none_or(|own| Some(own) != content.as_ref())
            && Some(&kept.content) == content.as_ref()
            && binding.metadata.uid.as_ref() != Some(&kept.uid)
            && own_at.is_none_or(|own| kept.at > own)
    });
    let name = kube::ResourceExt::name_any(binding);
    let generation = binding.metadata.generation.unwrap_or_default();
    match earlier {
        Some(kept) => crate::api::BindingAtAdmission {
            name,
            generation,
            verified_at: Some(Time(kept.at)),
            verified_generation: None,
            verified_content: Some(kept.content.clone()),
            content,
            verified_by_earlier_object: Some(kept.uid.clone()),
        },
        None => crate::api::BindingAtAdmission {
            name,
            generation,
            verified_generation: verified_at.as_ref().and(status.and_then(|s| s.observed_generation)),
            verified_content: own_content,
            content,
            verified_at,
            verified_by_earlier_object: None,
        },
    }
}

/// The merge patch that turns a binding's `old` status into `new`: every field `new` no longer has
/// is sent as `null` (a merge patch keeps what it does not mention, and the status omits absent
/// fields), so a cleared `powerState` is really cleared.
pub fn status_patch(old: Option<&BmcBindingStatus>, new: &BmcBindingStatus) -> serde_json::Value {
    let mut status = serde_json::to_value(new).unwrap_or_default();
    let old = old.and_then(|o| serde_json::to_value(o).ok());
    if let (Some(fields), Some(serde_json::Value::Object(before))) = (status.as_object_mut(), old) {
        for key in before.keys() {
            fields.entry(key.clone()).or_insert(serde_json::Value::Null);
        }
    }
    serde_json::json!({ "status": status })
}

/// The system a binding's reads go to when it names one: a Redfish binding's `systemId`; for an IPMI
/// binding, the GUID layout its verification proved the node in at the binding's current generation,
/// so a fence whose GUID spells the node only in another layout is refused as a changed identity.
pub fn pinned_system(binding: &BmcBinding) -> Option<&str> {
    if binding.spec.ipmi.is_none() {
        return binding.spec.system_id();
    }
    let status = binding.status.as_ref()?;
    let current = status.observed_generation.is_some() && status.observed_generation == binding.metadata.generation;
    status
        .system_id
        .as_deref()
        .filter(|id| current && status.uuid.is_some() && id.starts_with(crate::ipmi::PATH_PREFIX))
}

/// What a fence learned about its binding, for [`record_fence`]: recorded once per fence, at the
/// proof or at the final refusal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FenceFinding<'a> {
    /// The power of the system whose identity this fence proved was read `Off`, over and over.
    Proven { system_id: &'a str, uuid: &'a str, matched: UuidMatch, power_state: &'a str },
    /// The fence ended with this final reason (its Succeeded message, retry lever included).
    Refused { reason: Reason, message: &'a str },
}

/// The check a fence's finding amounts to for its binding; `None` when the refusal is not about the
/// binding (a gate, an NHC timeout, a power-off that was not confirmed, a node that came back).
pub fn fence_check(finding: FenceFinding<'_>) -> Option<Check> {
    match finding {
        FenceFinding::Proven { system_id, uuid, matched, power_state } => Some(Check::Read {
            system_id: system_id.to_owned(),
            uuid: uuid.to_owned(),
            power_state: power_state.to_owned(),
            identity: Ok(matched),
        }),
        FenceFinding::Refused { reason, message } => {
            let message = contract::cause(message).to_owned();
            match reason {
                // A fence refuses one binding for a conflict only after its BMC answered (the
                // identity read settles it); a node claimed by several bindings has none to record on.
                Reason::BindingConflict => Some(Check::Refused { reason, message }),
                Reason::BindingInvalid => Some(Check::Invalid(message)),
                Reason::BmcAuthenticationFailed
                | Reason::BmcTlsVerificationFailed
                | Reason::BmcUnreachable
                | Reason::BmcProtocolError => Some(Check::Failed { reason, message }),
                Reason::NodeUuidUnusable
                | Reason::IdentityMismatch
                | Reason::IdentityAmbiguous
                | Reason::IdentityChanged => Some(Check::Refused { reason, message }),
                _ => None,
            }
        }
    }
}

/// What a fence's status write tells its binding, once per fence: the transition into `Releasing`
/// is the proof (the identity it proved, its power read `Off`); `Succeeded` turning `False` is the
/// final refusal (its reason and message). Anything else tells the binding nothing; so does the
/// same status written again.
pub fn fence_finding<'a>(
    old: &CoronerRemediationStatus,
    new: &'a CoronerRemediationStatus,
) -> Option<FenceFinding<'a>> {
    let phase = |s: &CoronerRemediationStatus| s.phase.unwrap_or_default();
    fn failed(s: &CoronerRemediationStatus) -> Option<&Condition> {
        conditions::find(&s.conditions, contract::SUCCEEDED).filter(|c| c.status == conditions::FALSE)
    }
    if phase(new) == Phase::Releasing && phase(old) != Phase::Releasing {
        let identity = new.evidence.as_ref()?.identity.as_ref()?;
        return Some(FenceFinding::Proven {
            system_id: &identity.system_id,
            uuid: &identity.bmc_uuid,
            matched: identity.match_kind,
            power_state: "Off",
        });
    }
    match (failed(old), failed(new)) {
        (None, Some(refused)) => {
            let reason = Reason::ALL.iter().copied().find(|r| r.as_str() == refused.reason)?;
            Some(FenceFinding::Refused { reason, message: &refused.message })
        }
        _ => None,
    }
}

/// The fence-side update of a binding's status: the power read at the proof (with its time), or
/// the refusal, so `kubectl get bmcb` shows what the fence last saw. Returns the Events, and
/// whether anything changed (the caller patches the status only then).
pub fn record_fence(
    status: &mut BmcBindingStatus,
    finding: FenceFinding<'_>,
    binding: &BmcBinding,
    content: Option<u64>,
    now: Timestamp,
) -> (bool, Vec<Notice>) {
    let Some(check) = fence_check(finding) else { return (false, Vec::new()) };
    let before = status.clone();
    let notices = record(status, &check, binding, content, now);
    (*status != before, notices)
}

/// A good check of the binding's current generation less than half a period ago: a wake-up by a
/// status write (coroner's own, or a fence's identity check), not a reason to ask the BMC again.
/// Returns how long ago that check was.
pub fn fresh_check(
    status: Option<&BmcBindingStatus>,
    generation: Option<i64>,
    now: Timestamp,
    interval: StdDuration,
) -> Option<StdDuration> {
    let status = status.filter(|s| s.observed_generation.is_some() && s.observed_generation == generation)?;
    // The last check must have been good too: a binding that failed since is due at once.
    let verified = conditions::find(&status.conditions, IDENTITY_VERIFIED)?;
    if verified.status != conditions::TRUE || verified.observed_generation != generation {
        return None;
    }
    // A verification with no content recorded (a fence's, or an earlier coroner version's) leaves
    // A2 nothing to compare: verify again.
    status.verified_content.as_ref()?;
    let ago = StdDuration::try_from(now.duration_since(status.last_verification_time.as_ref()?.0)).ok()?;
    (ago < interval / 2).then_some(ago)
}

/// The shortest `pollInterval` and the shortest `settle` of the namespace's templates (the defaults
/// without one): what a binding's read latency must fit (docs/safety.md P4), and the window of an
/// Off agreement (L5).
pub fn shortest_timing(templates: &[crate::api::CoronerRemediationTemplate]) -> (StdDuration, StdDuration) {
    let specs = || templates.iter().map(|t| &t.spec.template.spec);
    let defaults = crate::api::CoronerRemediationSpec::default();
    let poll = specs().map(|s| s.poll_interval.get()).min().unwrap_or_else(|| defaults.poll_interval.get());
    let settle = specs().map(|s| s.settle.get()).min().unwrap_or_else(|| defaults.settle.get());
    (poll, settle)
}

/// How soon a BMC that did not answer is asked again: a binding that failed during an outage turns
/// Verified again within this of its BMC answering, not a whole verify interval later.
pub const RECHECK_UNANSWERED: StdDuration = StdDuration::from_secs(30);

/// When the binding is checked next after `check`: a BMC that did not answer (`Failed`: unreachable,
/// a timeout, TLS, credentials) soon again, since it may answer any moment; anything else at the
/// verify interval (what the binding refers to changing triggers a check at once).
pub fn next_check(check: &Check, interval: StdDuration) -> StdDuration {
    match check {
        Check::Failed { .. } => interval.min(RECHECK_UNANSWERED),
        _ => interval,
    }
}

/// The binding's state for the metric: verified, unverified (not yet, or failing) or invalid
/// (conflict, or unusable references).
pub fn state(status: Option<&BmcBindingStatus>) -> &'static str {
    let Some(verified) = status.and_then(|s| conditions::find(&s.conditions, IDENTITY_VERIFIED)) else {
        return "unverified";
    };
    match verified.reason.as_str() {
        _ if verified.status == conditions::TRUE => "verified",
        r if r == Reason::BindingConflict.as_str() || r == Reason::BindingInvalid.as_str() => "invalid",
        _ => "unverified",
    }
}

#[cfg(test)]
mod tests;
