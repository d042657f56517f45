//! `CoronerRemediation` (created by NodeHealthCheck for one unhealthy node) and its template.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, MicroTime, Time};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::Duration;

/// The fencing policy. NodeHealthCheck copies it verbatim from the template's `spec.template.spec`.
// kube-derive takes one printcolumn(...) per column; clippy reads the repeated keys as duplicates.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "coroner.dev",
    version = "v1alpha1",
    kind = "CoronerRemediation",
    doc = "A request (normally from NodeHealthCheck) to fence one node: prove through its BMC that the machine is that node and is powered off, then release its workloads.",
    namespaced,
    status = "CoronerRemediationStatus",
    shortname = "crem",
    category = "medik8s",
    printcolumn(
        name = "Node",
        type_ = "string",
        json_path = r".metadata.annotations.remediation\.medik8s\.io/node-name"
    ),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(
        name = "Succeeded",
        type_ = "string",
        json_path = r#".status.conditions[?(@.type=="Succeeded")].status"#
    ),
    printcolumn(
        name = "Reason",
        type_ = "string",
        json_path = r#".status.conditions[?(@.type=="Processing")].reason"#
    ),
    printcolumn(
        name = "Released",
        type_ = "string",
        json_path = r#".status.conditions[?(@.type=="Released")].reason"#
    ),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("duration(self.settle) > duration('0s')").message("settle must be positive: the proof needs two Off readings at least settle apart"))]
#[x_kube(validation = Rule::new("duration(self.pollInterval) >= duration('100ms')").message("pollInterval must be at least 100ms"))]
#[x_kube(validation = Rule::new("duration(self.settle) <= duration('10m')").message("settle must be at most 10m"))]
#[x_kube(validation = Rule::new("duration(self.powerOffTimeout) > duration(self.settle)").message("powerOffTimeout must be longer than settle, or no attempt can ever prove the power is off"))]
#[x_kube(validation = Rule::new("duration(self.releaseTimeout) > duration('0s')").message("releaseTimeout must be positive"))]
pub struct CoronerRemediationSpec {
    /// What to do with the machine: `Off` leaves it powered off; `Reboot` powers it on again once its
    /// workloads have been released. Quote it in YAML: `action: "Off"`. A bare `Off` or `off` is the
    /// boolean false to YAML 1.1 readers such as kubectl and Helm, and the API server then rejects the
    /// object with a type error (`spec.action: Invalid value: "boolean": ... must be of type string`)
    /// before any rule could say this.
    #[serde(default)]
    pub action: FenceAction,

    /// How the workloads are released after the power-off is proven: `OutOfServiceTaint` adds
    /// `node.kubernetes.io/out-of-service=nodeshutdown:NoExecute`; `ResourceDeletion` (as in FAR)
    /// force-deletes the pods bound to the node instead, mirror pods excepted.
    #[serde(default)]
    pub remediation_strategy: RemediationStrategy,

    /// How long one power-off attempt may take to prove the power is off.
    #[serde(default = "defaults::power_off_timeout")]
    pub power_off_timeout: Duration,

    /// The proof is an unbroken run of `Off` readings whose first and last are at least this far apart
    /// (at most 10m). Readings of one run are requested at most settle apart (but always at least
    /// pollInterval + 1s, at most the gap bound) and answer within 2 × (pollInterval + 1s) of the
    /// previous request.
    #[serde(default = "defaults::settle")]
    pub settle: Duration,

    /// Time between two power readings.
    #[serde(default = "defaults::poll_interval")]
    pub poll_interval: Duration,

    /// With `Reboot`: how long to wait for the node's pods and volume attachments to be released
    /// before powering it on regardless (with a Warning).
    #[serde(default = "defaults::release_timeout")]
    pub release_timeout: Duration,

    /// Whole power-off attempts (identity checks of an unreachable BMC use the same budget).
    #[serde(default)]
    pub retry: Retry,

    /// Also fence nodes whose `Ready` condition is `False`. Off by default: `False` is reported by a
    /// kubelet that is still alive; only a silent node (`Unknown`) is a candidate.
    #[serde(default)]
    pub remediate_ready_false: bool,

    /// The node's Lease in kube-node-lease counts as fresh (and the fence waits) while coroner has seen
    /// its renewTime change within this window, on coroner's own clock. Keep it above the cluster's
    /// node-monitor-grace-period.
    #[serde(default = "defaults::lease_freshness")]
    pub lease_freshness: Duration,

    /// Control-plane nodes: `QuorumSafe` fences one only while quorum survives without it and no other
    /// control-plane node is being fenced; `Never` refuses them.
    #[serde(default)]
    pub control_plane: ControlPlanePolicy,

    /// After the release, while coroner's out-of-service taint is on the node, coroner keeps reading
    /// the machine's power. A reading of anything but `Off` that coroner did not cause is always a
    /// Warning (`ReleasedMachinePoweredOn`); `Enforce` also switches the machine off again, unless the
    /// Node carries `coroner.dev/power-on-approved`; `Alert` only reports.
    #[serde(default)]
    pub guard: GuardPolicy,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum GuardPolicy {
    #[default]
    Enforce,
    Alert,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum ControlPlanePolicy {
    #[default]
    QuorumSafe,
    Never,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum FenceAction {
    Off,
    #[default]
    Reboot,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum RemediationStrategy {
    #[default]
    OutOfServiceTaint,
    ResourceDeletion,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Retry {
    /// Number of whole power-off attempts, at least 1.
    #[serde(default = "defaults::retry_count")]
    #[schemars(range(min = 1))]
    #[schemars(extend("format" = "int32"))]
    pub count: u32,

    /// Pause between two attempts.
    #[serde(default = "defaults::retry_interval")]
    pub interval: Duration,
}

mod defaults {
    use super::Duration;

    pub fn power_off_timeout() -> Duration {
        Duration::from_secs(60)
    }
    pub fn settle() -> Duration {
        Duration::from_secs(2)
    }
    pub fn poll_interval() -> Duration {
        Duration::from_secs(1)
    }
    pub fn release_timeout() -> Duration {
        Duration::from_secs(300)
    }
    pub fn retry_count() -> u32 {
        2
    }
    pub fn retry_interval() -> Duration {
        Duration::from_secs(5)
    }
    pub fn lease_freshness() -> Duration {
        Duration::from_secs(60)
    }
}

impl Default for Retry {
    fn default() -> Self {
        Self { count: defaults::retry_count(), interval: defaults::retry_interval() }
    }
}

impl Default for CoronerRemediationSpec {
    fn default() -> Self {
        Self {
            action: FenceAction::default(),
            remediation_strategy: RemediationStrategy::default(),
            power_off_timeout: defaults::power_off_timeout(),
            settle: defaults::settle(),
            poll_interval: defaults::poll_interval(),
            release_timeout: defaults::release_timeout(),
            retry: Retry::default(),
            remediate_ready_false: false,
            lease_freshness: defaults::lease_freshness(),
            control_plane: ControlPlanePolicy::default(),
            guard: GuardPolicy::default(),
        }
    }
}

// Counters are u32 in Rust; the schema says int32, a format the API server knows (it warns on uint32).

/// Where a fence stands. Persisted so that a restarted coroner resumes instead of repeating or
/// skipping a step.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum Phase {
    /// Waiting for the safety gates to admit the fence.
    #[default]
    Pending,
    VerifyingIdentity,
    PoweringOff,
    ConfirmingOff,
    /// The BMC could not prove Off: switching the outlets of a PDU level off and proving them Off
    /// (`status.progress.level` says which).
    PoweringOffOutlets,
    Releasing,
    WaitingForRelease,
    PoweringOn,
    WaitingForNode,
    Done,
    Failed,
}

impl Phase {
    /// The phase a remediation's status records (`Pending` before the first write).
    pub fn of(remediation: &CoronerRemediation) -> Self {
        remediation.status.as_ref().and_then(|s| s.phase).unwrap_or_default()
    }

    pub fn is_terminal(self) -> bool {
        match self {
            Self::Done | Self::Failed => true,
            Self::Pending
            | Self::VerifyingIdentity
            | Self::PoweringOff
            | Self::ConfirmingOff
            | Self::PoweringOffOutlets
            | Self::Releasing
            | Self::WaitingForRelease
            | Self::PoweringOn
            | Self::WaitingForNode => false,
        }
    }

    /// Holding a power-action slot (the storm limits count it): from admission until the release
    /// (`Off`) or until the power-on is done (`Reboot`), so the power-on of an earlier fence counts too.
    /// Every such phase has a deadline that always elapses.
    pub fn holds_power_slot(self) -> bool {
        match self {
            Self::VerifyingIdentity
            | Self::PoweringOff
            | Self::ConfirmingOff
            | Self::PoweringOffOutlets
            | Self::Releasing
            | Self::WaitingForRelease
            | Self::PoweringOn => true,
            Self::Pending | Self::WaitingForNode | Self::Done | Self::Failed => false,
        }
    }

    /// Admitted and not finished: coroner is fencing the node (or bringing it back).
    pub fn being_fenced(self) -> bool {
        match self {
            Self::Pending | Self::Done | Self::Failed => false,
            Self::VerifyingIdentity
            | Self::PoweringOff
            | Self::ConfirmingOff
            | Self::PoweringOffOutlets
            | Self::Releasing
            | Self::WaitingForRelease
            | Self::PoweringOn
            | Self::WaitingForNode => true,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "Pending",
            Self::VerifyingIdentity => "VerifyingIdentity",
            Self::PoweringOff => "PoweringOff",
            Self::ConfirmingOff => "ConfirmingOff",
            Self::PoweringOffOutlets => "PoweringOffOutlets",
            Self::Releasing => "Releasing",
            Self::WaitingForRelease => "WaitingForRelease",
            Self::PoweringOn => "PoweringOn",
            Self::WaitingForNode => "WaitingForNode",
            Self::Done => "Done",
            Self::Failed => "Failed",
        }
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CoronerRemediationStatus {
    /// `Processing` and `Succeeded` (read by NodeHealthCheck), plus `PoweredOn`, `WorkloadsReleased`
    /// and `TLSVerified` where they apply.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,

    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<Phase>,

    /// When the remediation entered its current phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase_since: Option<MicroTime>,

    /// The spec as it was when the fence was admitted: the fence follows it to the end (an edit of the
    /// remediation's spec mid-fence changes nothing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admitted_spec: Option<CoronerRemediationSpec>,

    /// The state machine's working memory: attempts, the persisted intent of the next BMC mutation,
    /// the current run of Off readings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<Progress>,

    /// Why coroner did what it did: identity, the power readings that formed the proof, what was
    /// checked at release and what happened at power-on. Bounded in size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evidence: Option<Evidence>,

    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_update_time: Option<Time>,

    /// The guard after the release: what it last found that was worth a write, and a ForceOff it
    /// decided (persisted before it is sent, as every BMC mutation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guard: Option<GuardStatus>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GuardStatus {
    /// When the guard last read something other than `Off` (or could not read), and what.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_finding: Option<GuardFinding>,
    /// A ForceOff the guard decided: sent once the status carrying it is written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub intent: Option<Intent>,
    /// How many times the guard switched the released machine off again.
    #[serde(default)]
    #[schemars(extend("format" = "int32"))]
    pub enforced: u32,
    /// The Node's power-on approval that names another release, or none: it counts for nothing, and
    /// is reported once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ignored_approval: Option<String>,
    /// When the node reported `Ready=True` while the release stood, with no approval of it: the
    /// machine was brought back unapproved (reported once).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub returned_without_approval: Option<MicroTime>,
    /// How the release record and the Node disagree (R4), as last reported: the guard goes on
    /// against the machine of the admitted identity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub record_diverged: Option<String>,
    /// R2: when the fence read the released machine not Off while its release stood (its
    /// PoweringOn, before its On was answered). The guard acts on it as on its own reading, also in
    /// a process that takes over, until it has (a later guard finding or ForceOff decision).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sighted_at: Option<MicroTime>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GuardFinding {
    pub at: MicroTime,
    /// The power read (`On`, `PoweringOn`, …), or the error that made the guard blind.
    pub seen: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Progress {
    /// L4: the outlets whose meter gave a reading in this fence: one that later gives none proves
    /// nothing (a PDU that drops its sensor may hide a draw).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub metered_outlets: Vec<String>,
    /// The fencing level the fence is at: absent for the BMC (level 1), 2 for the binding's first
    /// `pduLevels` entry, and so on. Each level has its own `retry.count` attempts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("format" = "int32"))]
    pub level: Option<u32>,
    /// The binding's generation when the fence entered its level: an edit since is no silence (L2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub level_generation: Option<i64>,
    /// The running attempt (identity checks, then power-off attempts, then power-on), 1-based.
    #[serde(default)]
    #[schemars(extend("format" = "int32"))]
    pub attempt: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt_started_at: Option<MicroTime>,
    /// The start of the attempt whose proof lapsed in `Releasing` (its release not yet written): if
    /// that attempt ends without a reading of anything but `Off` (which starts a new one), the
    /// release's reason ends it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proof_lapsed_in: Option<MicroTime>,
    /// The next attempt starts no earlier than this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_attempt_at: Option<MicroTime>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_reading_at: Option<MicroTime>,
    /// When the BMC last answered a reading: a later `lastReadingAt` is a reading it did not answer
    /// (an attestation may then acknowledge an `On` it gave before it went dark, A1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_answer_at: Option<MicroTime>,
    /// What the fence's last reading of the verified system said (`Off`, `On`, …): an attestation
    /// never releases a machine its BMC last showed alive (docs/safety.md A1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_power_state: Option<String>,
    /// Written (with a resourceVersion precondition) before a BMC mutation is sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub intent: Option<Intent>,
    /// The current unbroken run of `Off` readings; only readings of the running coroner process count.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub off_run: Option<OffRun>,
    /// The node Lease's renewTime when the power-off began; a later renewal means the machine we
    /// switched off is not this node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_renew_time_at_power_off: Option<MicroTime>,
    /// The node Lease's renewTime when the fence failed (the epoch: no Lease). A CoronerAttestation
    /// may release the node only while the Lease is still exactly this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_renew_time_at_failure: Option<MicroTime>,
    /// A1: when this fence first saw the node's Lease other than admission recorded it, on
    /// coroner's clock (never the kubelet's renewTime: a kubelet's clock may be behind).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_change_seen_at: Option<MicroTime>,
    /// A1: when this fence first saw the Node report the bootID `bootSeen`, other than admission
    /// recorded, on coroner's clock (never the kubelet's heartbeat time).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot_change_seen_at: Option<MicroTime>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot_seen: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// The coroner process (instance) reading the machine for this fence, named before its first
    /// reading. A fence that ended while another process was its reader may have lost what that
    /// process last read (it stopped before it could record it): no attestation follows it
    /// (docs/safety.md A1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reader: Option<String>,
    /// A1: the reader another process took over from; what it last read may be lost with it, until
    /// a reading is recorded after the takeover. No attestation follows the fence meanwhile.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unrecorded_reader: Option<String>,
    /// `ResourceDeletion`: written before the first pod is force-deleted (docs/safety.md R1). From
    /// then on the pods deleted are a release, guarded like any other, whatever ends the fence: a
    /// crash, a lost answer, a timeout or a failure between a deletion and its record.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub release_begun: Option<ReleaseEvidence>,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum PowerAction {
    ForceOff,
    On,
}

impl PowerAction {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ForceOff => "ForceOff",
            Self::On => "On",
        }
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Intent {
    pub action: PowerAction,
    #[schemars(extend("format" = "int32"))]
    pub attempt: u32,
    pub decided_at: MicroTime,
    /// The coroner process that decided it.
    pub instance: String,
    /// What the BMC answered, once sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OffRun {
    /// The coroner process that took these readings: readings from before a restart never count.
    pub instance: String,
    #[schemars(extend("format" = "int32"))]
    pub count: u32,
    /// The first readings of the run (at most 3), then the latest ones after those (at most 5).
    pub first: Vec<Reading>,
    pub last: Vec<Reading>,
}

impl OffRun {
    /// The run's latest reading.
    pub fn latest(&self) -> Option<&Reading> {
        self.last.last().or(self.first.last())
    }
}

/// One reading, for people. The proof's span and gaps are measured on the monotonic clock of the
/// process that read, in its memory; these are wall-clock times.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Reading {
    /// When the answer came.
    pub at: MicroTime,
    pub power_state: String,
    /// When the request went out: the answer's time less the time the BMC took to answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requested_at: Option<MicroTime>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Evidence {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<NodeEvidence>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity: Option<IdentityEvidence>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power_off: Option<PowerOffEvidence>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub release: Option<ReleaseEvidence>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power_on: Option<PowerOnEvidence>,
    /// A4: the failed fence's look through its device once more, asked for by an attestation
    /// about to release (the latest one asked).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attestation_look: Option<AttestationLook>,
}

/// A4: an attestation about to release asked the failed fence to look through its device once
/// more; what that look found. The fence takes it as its identity step, and proves again when the
/// node's machine answers (`ProvingAgain`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AttestationLook {
    /// The attestation that asked.
    pub attestation: String,
    pub attestation_uid: String,
    pub requested_at: MicroTime,
    /// The attestation's release carried no acknowledgement: only then may the look's answer make
    /// the fence prove again (an acknowledged sign of life would fail that proof).
    pub may_prove_again: bool,
    /// NodeHealthCheck's `nhc-timed-out` value when the look was asked for: a proof taken again on
    /// this look goes on under exactly that value (a later timeout ends it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nhc_timed_out: Option<String>,
    /// When the look was taken; absent while it is asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub looked_at: Option<MicroTime>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub found: Option<LookFound>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// What a look through the failed fence's device found.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum LookFound {
    /// The device did not answer (or could not be asked): the attestation goes on.
    NoAnswer,
    /// The device answered, but not as a machine that is provably the node's: said in the message;
    /// a reading of a system with the node's UUID is recorded as the fence's reading (A1 judges it).
    NotTheNode,
    /// The node's machine answered to an attestation that acknowledged evidence: its reading is
    /// recorded, and the attestation's preconditions judge it (A1).
    NodeMachine,
    /// The node's machine answered: the fence proves it off again through it (one more attempt,
    /// through the BMC), and only that proof releases; the attestation is superseded.
    ProvingAgain,
}

/// The node as coroner found it when it admitted the fence.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeEvidence {
    pub name: String,
    pub uid: String,
    #[serde(rename = "systemUUID")]
    pub system_uuid: String,
    #[serde(rename = "bootID", default)]
    pub boot_id: String,
    /// The node's `Ready` condition status at admission.
    pub ready: String,
    /// Whether the node's Lease in kube-node-lease existed at admission.
    pub lease_present: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_renew_time: Option<MicroTime>,
    pub admitted_at: MicroTime,
    /// A2: the node's BmcBinding as admission found it, for an attestation to judge whether the
    /// device messages of this fence came from a binding verified at its content.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub binding: Option<BindingAtAdmission>,
}

/// A2: a BmcBinding at admission: its generation and content, and its last successful verification
/// before then.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BindingAtAdmission {
    pub name: String,
    pub generation: i64,
    /// When the binding was last verified (`IdentityVerified=True`), if it ever was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verified_at: Option<Time>,
    /// The generation that verification was of.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verified_generation: Option<i64>,
    /// The content (keyed digest: the spec, the credential and CA values) that verification was
    /// made with, as the binding's `verifiedContent` said at admission.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verified_content: Option<String>,
    /// The content the fence's client was made of at admission; absent when the binding could not
    /// be used (its Secret or CA bundle missing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    /// When the verification is an earlier BmcBinding object's of the node (deleted since, at the
    /// same content, kept in the ConfigMap `coroner-verified-bindings`): that object's UID.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verified_by_earlier_object: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum UuidMatch {
    /// The BMC's UUID equals the node's systemUUID.
    Exact,
    /// Equal after swapping the byte order of the first three fields (SMBIOS 2.6+ mixed endian).
    ByteSwapped,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IdentityEvidence {
    pub binding: String,
    pub endpoint: String,
    pub system_id: String,
    /// The system's resource path; every later reading reads this one resource.
    pub system_path: String,
    #[serde(rename = "bmcUUID")]
    pub bmc_uuid: String,
    #[serde(rename = "nodeUUID")]
    pub node_uuid: String,
    #[serde(rename = "match")]
    pub match_kind: UuidMatch,
    pub verified_at: MicroTime,
    /// `false` when the binding explicitly set `insecureSkipVerify`, or its BMC speaks no TLS (IPMI).
    pub tls_verified: bool,
    /// P1: the binding's generation the identity was proven through; a reading or a power action
    /// through another generation is not this proof's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub binding_generation: Option<i64>,
    /// A2: the content (keyed digest of the spec, credential and CA values) of the client the
    /// identity was read through.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub binding_content: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PowerOffEvidence {
    #[schemars(extend("format" = "int32"))]
    pub attempts: u32,
    /// When each ForceOff was sent and what the BMC answered: one per attempt, up to 3 when the ones
    /// before it failed in a way that passes (docs/safety.md P7).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resets: Vec<ResetRecord>,
    /// The power was already Off at the fresh read, so no reset was sent.
    #[serde(default)]
    pub already_off: bool,
    /// The proving run: its first and latest readings and how many Off readings it had.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proof: Option<OffRun>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proven_at: Option<MicroTime>,
    /// With a proof through a PDU level: which level, its outlets and what the mapping rests on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub level: Option<LevelProof>,
}

/// A proof through a fencing level of PDU outlets (docs/safety.md L1–L7).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LevelProof {
    /// 2 for the binding's first `pduLevels` entry.
    #[schemars(extend("format" = "int32"))]
    pub level: u32,
    /// The binding and its generation the level was read from.
    pub binding: String,
    pub binding_generation: i64,
    /// `Confirmed` (by the machine) or `OperatorStatement` (unproven: `OutletMappingUnproven`).
    pub mapping: String,
    /// Each outlet's last reading of the proof.
    pub outlets: Vec<OutletProof>,
    /// What the node's BMC showed once every outlet read Off: `no answer` or its power state.
    pub bmc_after: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OutletProof {
    /// The outlet (`snmp:host:port|N` or `redfish:endpoint|rackPdu|outlet`).
    pub outlet: String,
    pub state: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub watts: Option<f64>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResetRecord {
    #[schemars(extend("format" = "int32"))]
    pub attempt: u32,
    pub sent_at: MicroTime,
    pub result: String,
    /// The PDU level whose outlets the Off went to; none: the BMC's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("format" = "int32"))]
    pub level: Option<u32>,
    /// The device accepted it (P7: a rejection of the credentials after an accepted ForceOff passes).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub accepted: bool,
}

/// What a release rests on.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum ReleaseKind {
    /// coroner proved through the BMC that the machine is this node and that its power reads Off.
    #[default]
    BmcProof,
    /// The BMC could not prove it: coroner switched off the PDU outlets a fencing level maps to the
    /// machine and proved them Off (`evidence.powerOff.level`).
    LevelProof,
    /// No proof: a person attested that the node is dead (a CoronerAttestation), and coroner checked
    /// that the node stayed silent since its fence failed. `Succeeded` stays `False`.
    OperatorAttested,
    /// Another remediation of the same node proved it off and released it; this one stands on that
    /// release (`adoptedFrom`) and sent no reset of its own.
    Adopted,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReleaseEvidence {
    #[serde(default)]
    pub kind: ReleaseKind,
    /// This release's id, as an approval names it: `<remediation UID>@<releasedAt, Unix seconds>`.
    /// Absent on a record an earlier version wrote, until this version's guard first reads it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub release_id: Option<String>,
    /// With `OperatorAttested`: who attested what, verbatim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attestation: Option<AttestationEvidence>,
    /// With `Adopted`: the remediation whose release this one stands on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adopted_from: Option<String>,
    pub strategy: RemediationStrategy,
    /// The node's `Ready` status and Lease renewTime checked in the releasing update.
    pub node_ready: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_renew_time: Option<MicroTime>,
    pub released_at: MicroTime,
    /// Whether coroner added (and so owns) the out-of-service taint; false when it was already there.
    #[serde(default)]
    pub taint_owned: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("format" = "int32"))]
    pub pods_deleted: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub taint_removed_at: Option<MicroTime>,
    /// With `Reboot`: true when releaseTimeout passed before the pods and volumes were released.
    #[serde(default)]
    pub release_timed_out: bool,
}

/// The attestation a release rests on, copied verbatim from its spec.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AttestationEvidence {
    /// The CoronerAttestation, in the remediation's namespace.
    pub name: String,
    pub uid: String,
    pub attested_by: String,
    pub reason: String,
    /// When the attestation was created.
    pub attested_at: Time,
    /// `Releasing` while the Node update is in flight; `Released` once it is done. A `Releasing`
    /// record whose attestation is gone and whose taint is not on the node is withdrawn.
    pub state: AttestedReleaseState,
    /// The evidence the attester accepted, each of which cleared a refusal (docs/safety.md A1, A2).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub acknowledged: Vec<super::Acknowledgement>,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum AttestedReleaseState {
    Releasing,
    Released,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PowerOnEvidence {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sent_at: Option<MicroTime>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confirmed_at: Option<MicroTime>,
    #[serde(rename = "newBootID", default, skip_serializing_if = "Option::is_none")]
    pub new_boot_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_ready_at: Option<MicroTime>,
}

/// A template NodeHealthCheck references; `spec.template.spec` is copied into each remediation.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "coroner.dev",
    version = "v1alpha1",
    kind = "CoronerRemediationTemplate",
    doc = "The fencing policy NodeHealthCheck copies into each CoronerRemediation it creates.",
    namespaced,
    status = "CoronerRemediationTemplateStatus",
    shortname = "cremt",
    category = "medik8s"
)]
#[serde(rename_all = "camelCase")]
pub struct CoronerRemediationTemplateSpec {
    pub template: RemediationTemplateBody,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct RemediationTemplateBody {
    /// Required (may be `{}`): NodeHealthCheck creates remediations with `spec: null` without it.
    pub spec: CoronerRemediationSpec,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CoronerRemediationTemplateStatus {
    /// `MultipleTemplatesSupport`: whether the template carries the annotation NodeHealthCheck needs to
    /// use it next to another coroner template in one escalation chain.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}
