//! The world's record of what happened: who asked (a process, its term and task) and every event the
//! oracle judges.

use super::*;

/// Who added a taint: the invariants must know whether coroner may remove it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Adder {
    Coroner { pid: u32 },
    Someone(String),
}

/// Who sent an API call or a device request: the process, its leadership term, and the task it ran
/// (a remediation's name, `attestation/<name>`, …) — what an apiserver's audit log and a BMC's
/// session log would show.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Caller {
    pub pid: u32,
    pub term: u64,
    pub task: String,
}

/// What a device's answer said about the machine it looked at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answered {
    /// A system's reading: the UUID it reported and whether it reported `Off`.
    System { uuid: String, reported_off: bool },
    /// The collection of systems.
    Members,
    /// An error (a 5xx, a 404, a rejection of the credentials).
    Error,
}

/// The world's record: everything that happened that the invariants judge by — the answers devices
/// gave coroner, what coroner's writes did and when they took effect, what the world did to the
/// machines and the objects. It never holds coroner's beliefs (its status is an object like others:
/// only its `Succeeded` transitions are logged, for the liveness rules, and the guard's condition,
/// which is its report).
#[derive(Clone, Debug)]
pub enum Record {
    /// A power action reached a BMC and was executed on `machine` (or rejected).
    /// A reset that left coroner and timed out before it reached the BMC (nothing happened).
    ResetLost { at: Micros, by: Caller, on: bool },
    /// A reset that reached the BMC and was refused (an HTTP error, rejected credentials): nothing
    /// happened; coroner records the failure.
    ResetRefused { at: Micros, by: Caller, on: bool },
    Reset {
        at: Micros,
        by: Caller,
        node: String,
        machine: usize,
        on: bool,
        /// The persisted intent it was sent for: (instance, attempt, decidedAt).
        intent: Option<(String, u32, String)>,
        /// The system's path in the identity evidence at that moment.
        proven_path: Option<String>,
        path: String,
        /// Sent after the release (a ForceOff then is the guard's).
        guard: bool,
    },
    /// An Event coroner published: on what kind of object, with what reason.
    Event { at: Micros, by: Caller, kind: String, reason: String },
    /// A device answer that reached coroner: asked at `requested`, answered at `answered`; the
    /// device looked at `machine` (if it read a system) at `sampled`, when it was truly on or not.
    /// `read_from`: when the read this try belongs to began (its first try, before any retry).
    Answer {
        by: Caller,
        bmc: usize,
        path: String,
        machine: Option<usize>,
        requested: Micros,
        read_from: Micros,
        sampled: Micros,
        answered: Micros,
        truly_on: bool,
        said: Answered,
    },
    /// A Node write by coroner, sent at `sent`, took effect at `at`: the taints before and after.
    NodeWrite {
        at: Micros,
        sent: Micros,
        by: Caller,
        node: String,
        before: Vec<Taint>,
        after: Vec<Taint>,
        /// The Node's annotations before and after the write (which remediation owns what).
        before_annotations: BTreeMap<String, String>,
        after_annotations: BTreeMap<String, String>,
    },
    /// A pod force-deleted by coroner.
    PodDeleted { at: Micros, sent: Micros, by: Caller, node: String },
    /// A status write: the Succeeded condition before and after, the phase after, and the reason of
    /// the guard's condition after (what it reports of a released machine: R2's report).
    Status {
        at: Micros,
        remediation: String,
        before: Option<String>,
        after: Option<String>,
        phase: String,
        guard: Option<String>,
    },
    /// The world switched a machine on (a person, a power-restore policy, a glitch that ends by
    /// itself at `until`).
    PoweredOn { at: Micros, machine: usize, until: Option<Micros> },
    /// A remediation was deleted (by NHC or a person): its release ends with it.
    Deleted { at: Micros, remediation: String, uid: String },
    /// A person created an attestation.
    Attested { at: Micros, name: String, node: String },
    /// A BMC lost its power or got it back.
    BmcPower { at: Micros, bmc: usize, alive: bool },
    /// NodeHealthCheck stamped `nhc-timed-out` on a remediation.
    TimedOut { at: Micros, remediation: String },
    /// A person approved a released machine's power-on: the annotation's value.
    Approved { at: Micros, node: String, value: String },
    /// A person edited a node's binding: the BMC its endpoint leads to since (none: nowhere known).
    BindingEdited { at: Micros, node: String, bmc: Option<usize> },
    /// The world failed an apiserver request of coroner's (a 503, a conflict, an answer lost).
    ApiFault { at: Micros, by: Caller },
    /// A request to a BMC timed out (the world logs it: the oracle tells "asked, no answer" from
    /// "never asked").
    BmcTimeout { at: Micros, by: Caller, bmc: usize },
    /// A BMC rejected a request's credentials (the BMC's password changed before its Secret).
    CredentialsRejected { at: Micros, by: Caller },
    /// A request to a PDU outlet timed out (it may have reached the PDU).
    PduTimeout { at: Micros, by: Caller, outlet: usize },
    /// A person switched an outlet back on.
    OutletOnByHand { at: Micros, outlet: usize },
    /// An outlet was switched (by coroner: its Off reached the PDU).
    OutletSwitched { at: Micros, by: Caller, outlet: usize, on: bool },
    /// An outlet reading that reached coroner: when it was asked, when the PDU looked, when it
    /// answered; whether it proved Off as coroner judges it (docs/safety.md L4) and whether the machine
    /// the outlet feeds was truly on when the PDU looked.
    OutletAnswer {
        by: Caller,
        outlet: usize,
        requested: Micros,
        sampled: Micros,
        answered: Micros,
        proves_off: bool,
        truly_on: bool,
    },
}
