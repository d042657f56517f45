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
mod tests {
    use super::*;

    fn binding(insecure: bool) -> BmcBinding {
        let mut binding = BmcBinding::new(
            "b",
            crate::api::BmcBindingSpec {
                node_name: "n".into(),
                redfish: Some(crate::api::RedfishTarget { endpoint: "https://bmc".into(), system_id: None }),
                ipmi: None,
                credentials_secret_ref: crate::api::SecretRef { name: "s".into() },
                tls: Some(crate::api::TlsPolicy { insecure_skip_verify: insecure, ..Default::default() }),
                pdu_levels: Vec::new(),
            },
        );
        binding.metadata.generation = Some(3);
        binding
    }

    fn with_level(mut binding: BmcBinding, level: serde_json::Value) -> BmcBinding {
        binding.spec.pdu_levels.push(serde_json::from_value(level).unwrap());
        binding
    }

    fn snmp_level(address: &str, version: &str, statement: bool) -> serde_json::Value {
        let mut level = serde_json::json!({
            "outlets": [{
                "snmp": {"address": address, "outlet": 3, "version": version},
                "credentialsSecretRef": {"name": "pdu"},
            }],
        });
        if statement {
            level["mappingProof"] = "OperatorStatement".into();
        }
        level
    }

    fn condition<'a>(status: &'a BmcBindingStatus, type_: &str) -> (&'a str, &'a str) {
        let c = conditions::find(&status.conditions, type_).unwrap();
        (c.status.as_str(), c.reason.as_str())
    }

    #[test]
    fn a_level_without_a_confirmation_or_a_statement_is_reported_unusable() {
        let binding = with_level(binding(false), snmp_level("pdu-1", "V3", false));
        let mut status = BmcBindingStatus::default();
        let notices = record_levels(&mut status, &binding, std::slice::from_ref(&binding), &[], Timestamp::UNIX_EPOCH);
        assert_eq!(condition(&status, OUTLET_MAPPING_PROVEN), ("False", "OutletMappingUnproven"));
        let message = &conditions::find(&status.conditions, OUTLET_MAPPING_PROVEN).unwrap().message;
        assert!(message.starts_with("level 2: unusable: nothing confirmed"), "{message}");
        assert_eq!(condition(&status, OUTLETS_EXCLUSIVE), ("True", "NotShared"));
        assert_eq!(condition(&status, PDU_TRANSPORT_SECURE), ("True", "Secure"));
        assert_eq!(notices.iter().map(|n| n.reason.as_str()).collect::<Vec<_>>(), ["OutletMappingUnproven"]);
        // Once said, not said again at every check.
        let again = record_levels(&mut status, &binding, std::slice::from_ref(&binding), &[], Timestamp::UNIX_EPOCH);
        assert!(again.is_empty(), "{again:?}");
    }

    #[test]
    fn a_level_the_machine_confirmed_is_reported_not_usable_yet_and_why() {
        let binding = with_level(binding(false), snmp_level("pdu-1", "V3", false));
        let mut status = BmcBindingStatus::default();
        record_levels(&mut status, &binding, std::slice::from_ref(&binding), &[Some(3)], Timestamp::UNIX_EPOCH);
        assert_eq!(condition(&status, OUTLET_MAPPING_PROVEN), ("False", "OutletMappingUnproven"));
        let message = &conditions::find(&status.conditions, OUTLET_MAPPING_PROVEN).unwrap().message;
        assert!(message.contains("no level rests on a passive confirmation"), "{message}");
    }

    #[test]
    fn an_operator_statement_is_a_standing_warning_not_a_proof() {
        let binding = with_level(binding(false), snmp_level("pdu-1", "V3", true));
        let mut status = BmcBindingStatus::default();
        record_levels(&mut status, &binding, std::slice::from_ref(&binding), &[], Timestamp::UNIX_EPOCH);
        assert_eq!(condition(&status, OUTLET_MAPPING_PROVEN), ("False", "OutletMappingUnproven"));
        let message = &conditions::find(&status.conditions, OUTLET_MAPPING_PROVEN).unwrap().message;
        assert!(message.contains("stated by an operator"), "{message}");
    }

    #[test]
    fn a_community_in_clear_text_and_an_undeclared_shared_outlet_are_warnings() {
        let mine = with_level(binding(false), snmp_level("pdu-1", "V2c", true));
        let mut other = with_level(binding(false), snmp_level("PDU-1", "V3", true));
        other.metadata.name = Some("other".into());
        other.spec.node_name = "m".into();
        let all = [mine.clone(), other];
        let mut status = BmcBindingStatus::default();
        let notices = record_levels(&mut status, &mine, &all, &[], Timestamp::UNIX_EPOCH);
        assert_eq!(condition(&status, OUTLETS_EXCLUSIVE), ("False", "OutletShared"));
        assert_eq!(condition(&status, PDU_TRANSPORT_SECURE), ("False", "InsecurePduTransport"));
        let reasons: Vec<_> = notices.iter().map(|n| n.reason.as_str()).collect();
        assert_eq!(reasons, ["OutletMappingUnproven", "OutletShared", "InsecurePduTransport"]);
    }

    #[test]
    fn a_binding_whose_levels_were_removed_loses_their_conditions() {
        let with = with_level(binding(false), snmp_level("pdu-1", "V3", false));
        let mut status = BmcBindingStatus::default();
        record_levels(&mut status, &with, std::slice::from_ref(&with), &[], Timestamp::UNIX_EPOCH);
        let without = binding(false);
        record_levels(&mut status, &without, std::slice::from_ref(&without), &[], Timestamp::UNIX_EPOCH);
        assert!(status.conditions.is_empty(), "{:?}", status.conditions);
    }

    #[test]
    fn an_ipmi_binding_pins_the_guid_layout_its_verification_proved_at_its_current_generation() {
        let mut redfish = binding(false);
        assert_eq!(pinned_system(&redfish), None);
        redfish.spec.redfish.as_mut().unwrap().system_id = Some("2".into());
        assert_eq!(pinned_system(&redfish), Some("2"));
        let mut ipmi = binding(false);
        ipmi.spec.redfish = None;
        ipmi.spec.ipmi =
            Some(crate::api::IpmiTarget { address: "bmc".into(), port: None, cipher_suite: None, privilege: None });
        assert_eq!(pinned_system(&ipmi), None, "never verified: discovery finds the layout");
        let path = format!("{}smbios", crate::ipmi::PATH_PREFIX);
        ipmi.status = Some(BmcBindingStatus {
            system_id: Some(path.clone()),
            uuid: Some("u".into()),
            observed_generation: Some(3),
            ..Default::default()
        });
        assert_eq!(pinned_system(&ipmi), Some(path.as_str()));
        ipmi.metadata.generation = Some(4);
        assert_eq!(pinned_system(&ipmi), None, "verified at another generation: found again");
    }

    fn read(identity: Result<UuidMatch, (Reason, String)>) -> Check {
        Check::Read { system_id: "1".into(), uuid: "u".into(), power_state: "On".into(), identity }
    }

    fn mismatch() -> Check {
        read(Err((Reason::IdentityMismatch, "the BMC system's UUID is not the node's".into())))
    }

    #[test]
    fn a_first_good_check_is_announced_once() {
        let mut status = BmcBindingStatus::default();
        let notices = record(&mut status, &read(Ok(UuidMatch::Exact)), &binding(false), None, Timestamp::UNIX_EPOCH);
        assert_eq!(notices.iter().map(|n| n.reason.as_str()).collect::<Vec<_>>(), ["BindingVerified"]);
        assert_eq!(
            (status.system_id.as_deref(), status.uuid.as_deref(), status.power_state.as_deref()),
            (Some("1"), Some("u"), Some("On"))
        );
        assert!(
            record(&mut status, &read(Ok(UuidMatch::Exact)), &binding(false), None, Timestamp::UNIX_EPOCH).is_empty()
        );
        assert_eq!(state(Some(&status)), "verified");
    }

    #[test]
    fn turning_bad_is_a_warning_and_keeps_the_last_good_uuid() {
        let mut status = BmcBindingStatus::default();
        record(&mut status, &read(Ok(UuidMatch::Exact)), &binding(false), None, Timestamp::UNIX_EPOCH);
        let notices = record(&mut status, &mismatch(), &binding(false), None, Timestamp::UNIX_EPOCH);
        assert_eq!(notices.len(), 1);
        assert!(
            notices[0].warning
                && notices[0].reason == "IdentityMismatch"
                && notices[0].message.starts_with("IdentityMismatch")
        );
        assert_eq!(status.uuid.as_deref(), Some("u"));
        assert_eq!(state(Some(&status)), "unverified");
    }

    #[test]
    fn a_bmc_that_did_not_answer_is_asked_again_soon_and_anything_else_at_the_interval() {
        let interval = StdDuration::from_secs(600);
        let unreachable = Check::Failed { reason: Reason::BmcUnreachable, message: "refused".into() };
        assert_eq!(next_check(&unreachable, interval), RECHECK_UNANSWERED, "an outage ends within 30 s of the answer");
        assert_eq!(next_check(&unreachable, StdDuration::from_secs(10)), StdDuration::from_secs(10));
        assert_eq!(next_check(&Check::Invalid("Secret s does not exist".into()), interval), interval);
        assert_eq!(next_check(&Check::Conflict("two bindings".into()), interval), interval);
    }

    #[test]
    fn an_unreachable_bmc_turns_both_conditions_false() {
        let mut status = BmcBindingStatus::default();
        record(&mut status, &read(Ok(UuidMatch::Exact)), &binding(false), None, Timestamp::UNIX_EPOCH);
        let down = Check::Failed { reason: Reason::BmcUnreachable, message: "connection refused".into() };
        let notices = record(&mut status, &down, &binding(false), None, Timestamp::UNIX_EPOCH);
        let reasons: Vec<_> = notices.iter().map(|n| n.reason.as_str()).collect();
        assert_eq!(reasons, ["BmcUnreachable", "BmcUnreachable"]);
        assert_eq!(conditions::status_of(&status.conditions, REACHABLE), Some("False"));
    }

    #[test]
    fn a_bmc_without_the_node_s_system_is_reachable_but_unverified() {
        let mut status = BmcBindingStatus::default();
        let none = Check::NoNodeSystem("none of the 2 systems at https://bmc is the node's".into());
        let notices = record(&mut status, &none, &binding(false), None, Timestamp::UNIX_EPOCH);
        assert_eq!(conditions::status_of(&status.conditions, REACHABLE), Some("True"));
        let verified = conditions::find(&status.conditions, IDENTITY_VERIFIED).unwrap();
        assert_eq!((verified.status.as_str(), verified.reason.as_str()), ("False", "IdentityMismatch"));
        assert_eq!(notices.iter().map(|n| n.reason.as_str()).collect::<Vec<_>>(), ["IdentityMismatch"]);
        assert_eq!(state(Some(&status)), "unverified");
    }

    #[test]
    fn only_a_recent_good_check_of_the_same_generation_spares_the_bmc() {
        let period = StdDuration::from_secs(600);
        let at = |secs: i64| Timestamp::UNIX_EPOCH + jiff::SignedDuration::from_secs(secs);
        let mut status = BmcBindingStatus::default();
        record(&mut status, &read(Ok(UuidMatch::Exact)), &binding(false), None, at(0));
        assert_eq!(fresh_check(Some(&status), Some(3), at(2), period), None, "no content recorded (A2): due");
        record(&mut status, &read(Ok(UuidMatch::Exact)), &binding(false), Some(0xc5), at(0));
        assert_eq!(status.verified_content.as_deref(), Some("00000000000000c5"));
        assert_eq!(fresh_check(Some(&status), Some(3), at(2), period), Some(StdDuration::from_secs(2)));
        assert_eq!(fresh_check(Some(&status), Some(3), at(300), period), None, "half a period on: due");
        assert_eq!(fresh_check(Some(&status), Some(4), at(2), period), None, "the spec changed");
        assert_eq!(fresh_check(None, Some(3), at(2), period), None, "never checked");
        let mut failing = BmcBindingStatus::default();
        record(&mut failing, &mismatch(), &binding(false), Some(0xc5), at(0));
        assert_eq!(fresh_check(Some(&failing), Some(3), at(2), period), None, "no good check yet");
        assert_eq!(failing.verified_content, None, "a failed check verified no content");
        // A fence's proof knows no content: the last verification's stays.
        record(&mut status, &read(Ok(UuidMatch::Exact)), &binding(false), None, at(5));
        assert_eq!(status.verified_content.as_deref(), Some("00000000000000c5"));
    }

    #[test]
    fn conflicts_and_bad_references_are_invalid() {
        let mut status = BmcBindingStatus::default();
        record(
            &mut status,
            &Check::Conflict("conflicts with BmcBinding b".into()),
            &binding(false),
            None,
            Timestamp::UNIX_EPOCH,
        );
        assert_eq!(state(Some(&status)), "invalid");
        let mut status = BmcBindingStatus::default();
        record(&mut status, &Check::Invalid("Secret missing".into()), &binding(false), None, Timestamp::UNIX_EPOCH);
        assert_eq!(state(Some(&status)), "invalid");
        assert_eq!(state(None), "unverified");
    }

    #[test]
    fn insecure_tls_is_a_false_condition_and_a_warning() {
        let mut status = BmcBindingStatus::default();
        let notices = record(&mut status, &read(Ok(UuidMatch::Exact)), &binding(true), None, Timestamp::UNIX_EPOCH);
        assert_eq!(conditions::status_of(&status.conditions, TLS_VERIFIED), Some("False"));
        assert!(notices.iter().any(|n| n.warning && n.reason == "InsecureSkipVerify"), "{notices:?}");
    }

    fn tls(status: &BmcBindingStatus) -> (String, String) {
        let c = conditions::find(&status.conditions, TLS_VERIFIED).unwrap();
        (c.status.clone(), c.reason.clone())
    }

    fn failed(reason: Reason, message: &str) -> Check {
        Check::Failed { reason, message: message.into() }
    }

    #[test]
    fn tls_is_verified_only_after_a_verified_handshake() {
        let at = Timestamp::UNIX_EPOCH;
        let cases = [
            (read(Ok(UuidMatch::Exact)), ("True", "Verified")),
            (mismatch(), ("True", "Verified")),
            (failed(Reason::BmcAuthenticationFailed, "HTTP 401"), ("True", "Verified")),
            (failed(Reason::BmcTlsVerificationFailed, "the binding pins 4F:8E"), ("False", "BmcTlsVerificationFailed")),
            (failed(Reason::BmcUnreachable, "connection refused"), ("Unknown", "NoHandshake")),
            (Check::Invalid("Secret s does not exist".into()), ("Unknown", "NoHandshake")),
            (Check::Conflict("conflicts with b2".into()), ("Unknown", "NoHandshake")),
        ];
        for (check, (state, reason)) in cases {
            let mut status = BmcBindingStatus::default();
            record(&mut status, &read(Ok(UuidMatch::Exact)), &binding(false), None, at);
            record(&mut status, &check, &binding(false), None, at);
            assert_eq!(tls(&status), (state.to_owned(), reason.to_owned()), "{check:?}");
        }
        let mut status = BmcBindingStatus::default();
        record(
            &mut status,
            &failed(Reason::BmcTlsVerificationFailed, "the binding pins 4F:8E"),
            &binding(false),
            None,
            at,
        );
        assert_eq!(conditions::find(&status.conditions, TLS_VERIFIED).unwrap().message, "the binding pins 4F:8E");
    }

    #[test]
    fn a_fence_s_read_was_verified_only_if_it_was_answered_with_verification_on() {
        let policy = |insecure| TlsPolicy { insecure_skip_verify: insecure, ..TlsPolicy::default() };
        assert!(request_tls_verified(&policy(false), true));
        assert!(!request_tls_verified(&policy(true), true));
        assert!(!request_tls_verified(&policy(false), false));
    }

    #[test]
    fn every_condition_describes_the_current_spec() {
        let mut status = BmcBindingStatus::default();
        let down = failed(Reason::BmcUnreachable, "connection refused");
        record(&mut status, &down, &binding(false), None, Timestamp::UNIX_EPOCH);
        let mut edited = binding(false);
        edited.metadata.generation = Some(4);
        record(&mut status, &Check::Invalid("Secret s2 does not exist".into()), &edited, None, Timestamp::UNIX_EPOCH);
        let reachable = conditions::find(&status.conditions, REACHABLE).unwrap();
        assert_eq!((reachable.status.as_str(), reachable.reason.as_str()), ("Unknown", "NotContacted"));
        assert!(!reachable.message.contains("connection refused"), "{}", reachable.message);
        assert!(status.conditions.iter().all(|c| c.observed_generation == Some(4)), "{:?}", status.conditions);
    }

    #[test]
    fn a_change_of_reason_is_an_event_even_without_a_change_of_status() {
        let at = Timestamp::UNIX_EPOCH;
        let mut status = BmcBindingStatus::default();
        let steps = [
            (Check::Invalid("Secret s does not exist".into()), vec!["BindingInvalid"]),
            (failed(Reason::BmcUnreachable, "connection refused"), vec!["BmcUnreachable", "BmcUnreachable"]),
            (failed(Reason::BmcUnreachable, "timed out"), vec![]),
            (
                failed(Reason::BmcTlsVerificationFailed, "pins differ"),
                vec!["BmcTlsVerificationFailed", "BmcUnreachable"],
            ),
            (read(Ok(UuidMatch::Exact)), vec!["BindingVerified", "BmcReachable"]),
        ];
        for (check, expected) in steps {
            let notices = record(&mut status, &check, &binding(false), None, at);
            assert_eq!(notices.iter().map(|n| n.reason.as_str()).collect::<Vec<_>>(), expected, "{check:?}");
        }
    }

    #[test]
    fn power_shows_only_from_a_verified_identity() {
        let at = |secs| Timestamp::UNIX_EPOCH + jiff::SignedDuration::from_secs(secs);
        let mut status = BmcBindingStatus::default();
        record(&mut status, &read(Ok(UuidMatch::Exact)), &binding(false), None, at(5));
        assert_eq!(status.power_state.as_deref(), Some("On"));
        assert_eq!(status.last_power_check_time, Some(Time(at(5))));
        for check in [mismatch(), failed(Reason::BmcUnreachable, "refused"), Check::NoNodeSystem("none".into())] {
            let mut status = status.clone();
            record(&mut status, &check, &binding(false), None, at(9));
            assert_eq!((status.power_state, status.last_power_check_time), (None, None), "{check:?}");
        }
    }

    #[test]
    fn a_cleared_field_is_cleared_by_the_status_patch() {
        let mut status = BmcBindingStatus::default();
        record(&mut status, &read(Ok(UuidMatch::Exact)), &binding(false), None, Timestamp::UNIX_EPOCH);
        let old = status.clone();
        record(
            &mut status,
            &Check::Invalid("Secret s does not exist".into()),
            &binding(false),
            None,
            Timestamp::UNIX_EPOCH,
        );
        let patch = status_patch(Some(&old), &status);
        assert_eq!(patch["status"]["powerState"], serde_json::Value::Null);
        assert!(patch["status"].as_object().unwrap().contains_key("lastPowerCheckTime"));
        assert_eq!(patch["status"]["uuid"], "u", "what the status keeps is sent as it is");
        assert!(!status_patch(None, &status)["status"].as_object().unwrap().contains_key("powerState"));
    }

    #[test]
    fn a_fence_records_its_proof_and_its_refusal_on_the_binding() {
        let at = |secs| Timestamp::UNIX_EPOCH + jiff::SignedDuration::from_secs(secs);
        let mut status = BmcBindingStatus::default();
        record(&mut status, &read(Ok(UuidMatch::Exact)), &binding(false), None, at(0));
        let proof = FenceFinding::Proven { system_id: "1", uuid: "u", matched: UuidMatch::Exact, power_state: "Off" };
        let (changed, _) = record_fence(&mut status, proof, &binding(false), None, at(30));
        assert!(changed);
        assert_eq!(status.power_state.as_deref(), Some("Off"));
        assert_eq!(status.last_power_check_time, Some(Time(at(30))));

        let message = contract::final_message(Reason::IdentityChanged, "system 1 now reports UUID v");
        let refusal = FenceFinding::Refused { reason: Reason::IdentityChanged, message: &message };
        let (changed, notices) = record_fence(&mut status, refusal, &binding(false), None, at(40));
        let verified = conditions::find(&status.conditions, IDENTITY_VERIFIED).unwrap();
        assert!(changed && verified.reason == "IdentityChanged");
        assert_eq!(verified.message, "system 1 now reports UUID v", "no NHC retry lever on a binding");
        assert_eq!(notices.iter().map(|n| n.reason.as_str()).collect::<Vec<_>>(), ["IdentityChanged"]);
        assert_eq!(status.power_state, None);

        let gate = FenceFinding::Refused { reason: Reason::NodeNotUnreachable, message: "Ready=True" };
        let before = status.clone();
        assert_eq!(record_fence(&mut status, gate, &binding(false), None, at(50)), (false, vec![]));
        assert_eq!(status, before, "a gate's refusal says nothing about the binding");
    }

    #[test]
    fn a_fence_tells_its_binding_at_the_transition_into_releasing_and_when_it_fails_only() {
        use crate::api::{Evidence, IdentityEvidence};
        let at = Timestamp::UNIX_EPOCH;
        let status = |phase: Phase, reason: Reason| {
            let mut status = CoronerRemediationStatus { phase: Some(phase), ..Default::default() };
            contract::record(&mut status.conditions, reason, &contract::final_message(reason, "why"), at);
            status.evidence = Some(Evidence {
                identity: Some(IdentityEvidence {
                    binding: "b".into(),
                    endpoint: "https://bmc".into(),
                    system_id: "1".into(),
                    system_path: "/redfish/v1/Systems/1".into(),
                    bmc_uuid: "u".into(),
                    node_uuid: "u".into(),
                    match_kind: UuidMatch::ByteSwapped,
                    verified_at: k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(at),
                    tls_verified: true,
                    binding_generation: None,
                    binding_content: None,
                }),
                ..Evidence::default()
            });
            status
        };
        let confirming = status(Phase::ConfirmingOff, Reason::ConfirmingOff);
        let releasing = status(Phase::Releasing, Reason::Releasing);
        assert_eq!(
            fence_finding(&confirming, &releasing),
            Some(FenceFinding::Proven {
                system_id: "1",
                uuid: "u",
                matched: UuidMatch::ByteSwapped,
                power_state: "Off"
            })
        );
        assert_eq!(fence_finding(&releasing, &releasing), None, "a proof kept fresh in Releasing is the same proof");
        let done = status(Phase::Done, Reason::NodeFenced);
        assert_eq!(fence_finding(&releasing, &done), None, "a release says nothing new about the binding");

        let failed = status(Phase::Failed, Reason::IdentityChanged);
        let Some(FenceFinding::Refused { reason, message }) = fence_finding(&confirming, &failed) else {
            panic!("{:?}", fence_finding(&confirming, &failed))
        };
        assert_eq!(reason, Reason::IdentityChanged);
        assert!(message.starts_with("why"));
        assert_eq!(fence_finding(&failed, &failed), None, "once: Succeeded never leaves False");
        assert_eq!(fence_finding(&confirming, &confirming), None);
    }

    #[test]
    fn a_failed_check_since_the_last_good_one_makes_the_binding_due() {
        let period = StdDuration::from_secs(600);
        let mut status = BmcBindingStatus::default();
        record(&mut status, &read(Ok(UuidMatch::Exact)), &binding(false), None, Timestamp::UNIX_EPOCH);
        record(
            &mut status,
            &Check::Invalid("Secret s does not exist".into()),
            &binding(false),
            None,
            Timestamp::UNIX_EPOCH,
        );
        let later = Timestamp::UNIX_EPOCH + jiff::SignedDuration::from_secs(2);
        assert_eq!(fresh_check(Some(&status), Some(3), later, period), None);
    }

    #[test]
    fn a_bmc_too_slow_for_the_poll_interval_is_reported_before_any_outage_once() {
        let (binding, now) = (binding(false), Timestamp::UNIX_EPOCH);
        let mut status = BmcBindingStatus::default();
        let second = StdDuration::from_secs(1);
        let slow = record_latency(&mut status, &binding, StdDuration::from_millis(2500), second, now).unwrap();
        assert_eq!(slow.reason, SETTLE_TOO_SHORT);
        assert!(slow.warning && slow.message.contains("2.5s") && slow.message.contains("raise pollInterval"));
        let condition = conditions::find(&status.conditions, READS_FIT).unwrap();
        assert_eq!((condition.status.as_str(), condition.observed_generation), ("False", Some(3)));
        assert_eq!(record_latency(&mut status, &binding, StdDuration::from_millis(2600), second, now), None, "once");
        assert_eq!(record_latency(&mut status, &binding, StdDuration::from_millis(1700), second, now), None);
        assert_eq!(conditions::status_of(&status.conditions, READS_FIT), Some("True"));
        let longer = StdDuration::from_secs(2);
        assert_eq!(record_latency(&mut status, &binding, StdDuration::from_millis(2500), longer, now), None);
    }

    fn kept(content: &str, uid: &str) -> KeptVerification {
        KeptVerification {
            content: content.into(),
            at: Timestamp::UNIX_EPOCH + jiff::SignedDuration::from_secs(1_800_000_000),
            uid: uid.into(),
            seal: "5ea1".into(),
        }
    }

    /// The binding `b` as the verifier left it: verified at `content` (or never).
    fn verified_at(content: Option<&str>, uid: &str) -> BmcBinding {
        let mut binding = binding(false);
        binding.metadata.uid = Some(uid.into());
        binding.status = content.map(|content| BmcBindingStatus {
            last_verification_time: Some(Time(Timestamp::UNIX_EPOCH + jiff::SignedDuration::from_secs(1_700_000_000))),
            observed_generation: Some(3),
            verified_content: Some(content.into()),
            ..BmcBindingStatus::default()
        });
        binding
    }

    #[test]
    fn a_re_created_binding_counts_as_verified_by_the_earlier_object_s_kept_verification_at_its_content() {
        let recreated = verified_at(None, "uid-new");
        let earlier = kept("00000000000000c5", "uid-old");
        let admitted = at_admission(&recreated, Some(0xc5), Some(&earlier));
        assert_eq!(admitted.verified_by_earlier_object.as_deref(), Some("uid-old"));
        assert_eq!(admitted.verified_content, admitted.content);
        assert_eq!(admitted.verified_at.map(|t| t.0), Some(earlier.at));
        assert_eq!(admitted.verified_generation, None, "another object's generation says nothing of this one");
    }

    #[test]
    fn a_kept_verification_of_another_content_or_of_the_same_object_counts_for_nothing() {
        let recreated = verified_at(None, "uid-new");
        let other = at_admission(&recreated, Some(0xd5), Some(&kept("00000000000000c5", "uid-old")));
        assert_eq!((other.verified_at, other.verified_by_earlier_object), (None, None));
        let unusable = at_admission(&recreated, None, Some(&kept("00000000000000c5", "uid-old")));
        assert_eq!(unusable.verified_by_earlier_object, None, "no content at admission matches nothing");
        // The object's own status is what it says of itself.
        let same = at_admission(
            &verified_at(Some("00000000000000a1"), "uid-old"),
            Some(0xc5),
            Some(&kept("00000000000000c5", "uid-old")),
        );
        assert_eq!(
            (same.verified_content.as_deref(), same.verified_by_earlier_object),
            (Some("00000000000000a1"), None)
        );
    }

    #[test]
    fn only_the_node_s_last_verification_counts_and_only_a_later_one_replaces_it() {
        // The object's own verification (at another content) is later than the kept one: the kept one
        // is no longer the node's last verified content.
        let mut moved_on = verified_at(Some("00000000000000d5"), "uid-new");
        let own_at = Timestamp::UNIX_EPOCH + jiff::SignedDuration::from_secs(1_900_000_000);
        moved_on.status.as_mut().unwrap().last_verification_time = Some(Time(own_at));
        let admitted = at_admission(&moved_on, Some(0xc5), Some(&kept("00000000000000c5", "uid-old")));
        assert_eq!(admitted.verified_by_earlier_object, None);
        assert_eq!(admitted.verified_content.as_deref(), Some("00000000000000d5"));
        let later = KeptVerification { at: own_at, ..kept("00000000000000d5", "uid-new") };
        let earlier = kept("00000000000000c5", "uid-old");
        assert!(replaces_kept(Some(&earlier), true, &later));
        assert!(!replaces_kept(Some(&later), true, &earlier), "an older verification never replaces a later one");
        assert!(replaces_kept(Some(&later), false, &earlier), "an entry whose seal does not hold counts as none");
        assert!(replaces_kept(None, false, &earlier));
    }

    #[test]
    fn the_binding_s_own_verification_at_its_content_wins_over_a_kept_one() {
        let own = verified_at(Some("00000000000000c5"), "uid-new");
        let admitted = at_admission(&own, Some(0xc5), Some(&kept("00000000000000c5", "uid-old")));
        assert_eq!((admitted.verified_generation, admitted.verified_by_earlier_object), (Some(3), None));
    }

    #[test]
    fn the_verifier_keeps_the_content_and_time_of_the_last_verification_by_its_object() {
        let binding = verified_at(Some("00000000000000c5"), "uid-b");
        let keep = to_keep(&binding, binding.status.as_ref().unwrap()).unwrap();
        assert_eq!((keep.content.as_str(), keep.uid.as_str()), ("00000000000000c5", "uid-b"));
        assert_eq!(to_keep(&binding, &BmcBindingStatus::default()), None, "no verification, nothing to keep");
    }

    #[test]
    fn a_kept_verification_reads_back_from_its_value_and_a_damaged_value_is_none() {
        let value = kept("00000000000000c5", "uid-b").to_value();
        assert_eq!(KeptVerification::parse(&value), Some(kept("00000000000000c5", "uid-b")));
        for damaged in
            ["", "c5", "c5 not-a-time uid 5ea1", "zz 2027-01-15T08:00:00Z uid 5ea1", &format!("{value} more")]
        {
            assert_eq!(KeptVerification::parse(damaged), None, "{damaged:?}");
        }
    }

    proptest::proptest! {
        #[test]
        fn any_kept_verification_round_trips_and_no_value_panics(
            content in "[0-9a-f]{1,16}",
            uid in "[a-z0-9-]{1,36}",
            seal in "[0-9a-f]{1,16}",
            secs in 0_i64..4_000_000_000,
            junk in ".{0,80}",
        ) {
            let kept = KeptVerification {
                content,
                at: Timestamp::UNIX_EPOCH + jiff::SignedDuration::from_secs(secs),
                uid,
                seal,
            };
            proptest::prop_assert_eq!(KeptVerification::parse(&kept.to_value()), Some(kept));
            let _ = KeptVerification::parse(&junk);
        }
    }
}
