//! The guard after the release: a machine that reads anything but `Off` again while its workloads run
//! elsewhere is exactly the double run coroner exists to prevent. While this remediation's release
//! stands ([`release_stands`], docs/safety.md R1), coroner keeps reading the system that proved it
//! off, and a node that reports back with the bootID it had before the fence never went down at all.
//! Pure decisions; the loop ([`crate::driver`]) reads, writes and sends.

use std::time::Duration as StdDuration;

use jiff::Timestamp;
use k8s_openapi::{
    api::{
        admissionregistration::v1::{ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding},
        core::v1::Node,
    },
    apimachinery::pkg::apis::meta::v1::MicroTime,
};
use kube::ResourceExt;

use crate::{
    api::{
        CoronerRemediationStatus, GuardFinding, GuardPolicy, GuardStatus, IdentityEvidence, Intent, PowerAction,
        conditions,
    },
    bmc::{PowerState, ResetType},
    fence::{BmcFailure, Decision, IdentityFound, IdentityProblem, Memory, Mono, NodeSnapshot, Notice, PowerReading},
    identity,
};

/// `False` (`FenceDidNotTakeEffect`) when the node reported back with its pre-fence bootID.
pub const FENCE_TOOK_EFFECT: &str = "FenceTookEffect";

pub const POWERED_ON: &str = Event::ReleasedMachinePoweredOn.as_str();
pub const BLIND: &str = Event::GuardBlind.as_str();
pub const DID_NOT_TAKE_EFFECT: &str = "FenceDidNotTakeEffect";
pub const APPROVAL_NOT_FOR_THIS_RELEASE: &str = Event::ApprovalNotForThisRelease.as_str();
pub const RECORD_DIVERGED: &str = Event::ReleaseRecordDiverged.as_str();
/// The remediation's condition that says whether approvals are guarded by an admission policy.
pub const APPROVAL_POLICY: &str = "ApprovalPolicy";
pub const APPROVAL_POLICY_MISSING: &str = Event::ApprovalPolicyMissing.as_str();
pub const UNGUARDED_NODE_DELETED: &str = Event::ReleaseUnguardedNodeDeleted.as_str();
pub const RETURNED_WITHOUT_APPROVAL: &str = Event::ReturnedWithoutApproval.as_str();

pub use crate::release::{
    APPROVAL_ANNOTATION, Approval, approval, release_id, release_id_at, release_stands, with_release_id,
};
use crate::words::event::Event;
pub use crate::words::guard::{GUARD, GUARD_HELD, MACHINE_OFF, MACHINE_OFF_MESSAGE, armed_at_release};
use crate::{
    node::replaced,
    release::{power_on_answered, release_made},
};

mod approval;
mod record;
mod returned;
mod rounds;

pub use approval::*;
pub use record::*;
pub use returned::*;
pub use rounds::*;

#[cfg(test)]
mod tests;
