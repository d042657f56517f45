//! The one table of condition reasons: every reason coroner writes into `Processing`/`Succeeded`,
//! with its disposition and retry budget (`contract::reason_table` prints it for docs/safety.md).

/// What a reason means for the two conditions NHC and humans read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Disposition {
    /// Work in progress: `Processing=True`, `Succeeded=Unknown`.
    Progress,
    /// Blocked by something that may clear by itself: `Processing=True`, `Succeeded=Unknown`, requeued.
    Waiting,
    /// The node is proven fenced and its workloads released; follow-up work remains:
    /// `Processing=True`, `Succeeded=True`.
    Fenced,
    /// Nothing left to do: `Processing=False`, `Succeeded=True`.
    Complete,
    /// Refused or failed for good: `Processing=False`, `Succeeded=False`; nothing is released.
    Final,
}

/// Which limit ends a wait or a run of retries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Budget {
    /// Not retried.
    None,
    /// `spec.retry.count` attempts, `spec.retry.interval` apart.
    RetryCount,
    /// `spec.powerOffTimeout` per attempt, within the `spec.retry.count` attempts.
    PowerOffTimeout,
    /// `spec.releaseTimeout`, then the step goes ahead with a Warning.
    ReleaseTimeout,
    /// One `On`, read back within `spec.powerOffTimeout`; then a Warning, the fence stands.
    PowerOn,
    /// Waits until the condition clears or NHC times the remediation out.
    NhcTimeout,
}

macro_rules! reasons {
    ($($name:ident => $disposition:ident, $budget:ident, $meaning:literal;)+) => {
        /// Every reason coroner writes into `Processing`/`Succeeded`, with its disposition and retry
        /// budget. `docs/safety.md` carries the same table (a test compares them).
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum Reason { $($name,)+ }

        impl Reason {
            pub const ALL: &'static [Reason] = &[$(Reason::$name,)+];

            pub fn as_str(self) -> &'static str {
                match self { $(Reason::$name => stringify!($name),)+ }
            }

            pub fn disposition(self) -> Disposition {
                match self { $(Reason::$name => Disposition::$disposition,)+ }
            }

            pub fn budget(self) -> Budget {
                match self { $(Reason::$name => Budget::$budget,)+ }
            }

            /// One line for the docs and for humans.
            pub fn meaning(self) -> &'static str {
                match self { $(Reason::$name => $meaning,)+ }
            }
        }
    };
}

reasons! {
    RemediationStarted => Progress, None, "coroner accepted the remediation and is checking its gates";
    VerifyingIdentity => Progress, RetryCount, "proving that the BMC's system is this node (UUID)";
    PoweringOff => Progress, PowerOffTimeout, "reading the power state and sending ForceOff unless it reads Off";
    ConfirmingOff => Progress, PowerOffTimeout, "collecting an unbroken run of Off readings spanning settle";
    AttemptFailed => Waiting, RetryCount, "an attempt failed (BMC unreachable or no proof in time); the next one is scheduled";
    PoweringOffOutlets => Progress, PowerOffTimeout, "the BMC could not prove Off: switching off the outlets of the binding's next PDU level and collecting an unbroken run of readings in which every outlet proves Off, spanning settle (docs/safety.md L1-L7)";
    Releasing => Progress, None, "power proven Off; re-checking the node and releasing its workloads";
    NodeFenced => Fenced, None, "power proven Off and workloads released (out-of-service taint or pod deletion)";
    WaitingForRelease => Fenced, ReleaseTimeout, "Reboot: waiting until no pod is terminating and no VolumeAttachment names the node";
    PoweringOn => Fenced, PowerOn, "Reboot: out-of-service taint removed; sending On and reading On back";
    OutOfServiceTaintPresent => Fenced, PowerOn, "Reboot: an out-of-service taint (anyone's, any value or effect) is on the node: no On until it is gone, PoweredOn=False at the deadline";
    WaitingForNode => Fenced, NhcTimeout, "Reboot: waiting for the node to come back Ready with a new bootID";
    PowerOnExcluded => Complete, None, "Reboot: the exclusion label was set before the On: no power-on; it ends as an Off release does (the machine stays off, the out-of-service taint stays while it still stands)";
    PowerOnBlocked => Complete, None, "Reboot: no On could be sent by the power-on deadline (an out-of-service taint coroner does not own, a BMC that did not answer, the machine read on by someone else; the message names it): it ends as an Off release does (the machine stays off)";
    PowerOnNotOwned => Complete, None, "Reboot: this remediation adopted the release another remediation made and left off; it proved no identity to send On through and sends none: it ends as an Off release does (the machine stays off)";
    RemediationComplete => Complete, None, "nothing left to do; NHC deletes the remediation once the node is healthy";
    TimedOutByNHC => Final, None, "NHC stamped nhc-timed-out before success; no further BMC mutation is sent";
    NodeNotFound => Final, None, "the node named by the remediation does not exist";
    NodeExcluded => Final, None, "the node carries remediation.medik8s.io/exclude-from-remediation";
    NodeNotUnreachable => Final, None, "the node's Ready condition is True (or False without remediateReadyFalse): a kubelet is still reporting";
    ControlPlaneNever => Final, None, "the node is a control-plane node and the template says controlPlane: Never";
    NodeLeaseFresh => Waiting, NhcTimeout, "coroner saw the node's Lease renewed within leaseFreshness: something on the node may still be alive";
    NodeAlreadyBeingFenced => Waiting, NhcTimeout, "another remediation of this node is fencing it (or powered it on lately): this one sends no reset of its own and takes over that release once it is done";
    ControlPlaneQuorumGuard => Waiting, NhcTimeout, "fencing this control-plane node now could cost etcd quorum, or another control-plane node is being fenced";
    LeaderOnTargetNode => Waiting, NhcTimeout, "coroner's leader runs on the node to fence: it hands leadership to another ready replica, or waits";
    Queued => Waiting, NhcTimeout, "a storm limit is reached (concurrent fences, fences per window, or one action per BMC); the message gives the place in the queue";
    NoBmcBinding => Final, None, "no BmcBinding names this node";
    BindingConflict => Final, None, "more than one BmcBinding claims this node, or this node's binding shares a BMC with another node's binding and the system it reached is not this node's machine (or is the other node's)";
    RebootWithPduLevels => Final, None, "the node's BmcBinding has pduLevels and the remediation's action is Reboot: a fence that may end at a PDU level is admitted only with action Off (docs/safety.md L3)";
    BindingInvalid => Final, None, "the BmcBinding cannot be used (missing Secret or CA bundle, bad key, bad pin)";
    BmcAuthenticationFailed => Final, None, "the BMC rejected the credentials (401/403)";
    BmcTlsVerificationFailed => Final, None, "the BMC's certificate did not verify against the CA bundle, pin or name";
    ApiUnavailable => Final, RetryCount, "what the identity check reads from the API server (the bindings, a Secret) kept failing until powerOffTimeout in the last of the retry.count attempts; no power action taken";
    BmcUnreachable => Final, RetryCount, "the BMC did not answer in any of the retry.count identity attempts";
    BmcProtocolError => Final, None, "the BMC answered, but not with a usable Redfish ComputerSystem (e.g. no UUID or PowerState)";
    NodeUuidUnusable => Final, None, "the node's systemUUID is empty, all-zero, all-F or a known placeholder: identity cannot be proven";
    IdentityMismatch => Final, None, "the BMC's system UUID is not the node's systemUUID (in either byte order): the pinned system's, or none of the BMC's systems'";
    IdentityAmbiguous => Final, None, "the UUID also belongs to another Node, another BmcBinding's verified system or another system of the same BMC, or a member of the BMC's Systems collection could not be read";
    IdentityChanged => Final, None, "a later response of the pinned system carried a different UUID, or one path answered as two UUIDs within one discovery";
    PowerOffNotConfirmed => Final, PowerOffTimeout, "no attempt proved the power Off within powerOffTimeout; nothing released, unless the message names pods a ResourceDeletion release force-deleted before it stopped (those stay released and guarded)";
    PowerActionHeld => Final, PowerOffTimeout, "a gate held the power action (NodeLeaseFresh: something on the node renewed its Lease; the message names it) until the last attempt ran out; nothing released, and no PDU level is tried: a hold is not silence (docs/safety.md L2)";
    NodeAliveAfterPowerOff => Final, None, "after the proven power-off the node renewed its Lease: the machine switched off is not this node";
    NodeReplaced => Final, None, "the Node object was replaced (a new UID) since admission: the node coroner was asked to fence is gone";
    NodeLeaseChanged => Final, None, "right before a power action the node's Lease was no longer as admission saw it (renewed, created or deleted): something on the node is alive";
    ReleaseNotWritten => Final, PowerOffTimeout, "the machine was proven Off but the Node update was refused or failed in every attempt; nothing released, unless the message names pods a ResourceDeletion release force-deleted before it stopped (those stay released and guarded)";
    OutletMappingWrong => Final, None, "every outlet of a PDU level read Off and the node's BMC still answered without reading its machine Off: those outlets do not feed this machine; nothing released (docs/safety.md L7)";
    OutletShared => Final, None, "an outlet of the PDU level is named by another node's binding undeclared, or feeds a node that is neither being fenced nor released with its fence ended: it is not switched (docs/safety.md L6)";
    FenceDidNotTakeEffect => Final, None, "right after the release the node's Lease read renewed since the power-off: the out-of-service taint was taken back at once";
}

impl Disposition {
    pub fn describe(self) -> &'static str {
        match self {
            Self::Progress => "progress: Processing=True, Succeeded=Unknown",
            Self::Waiting => "waiting: Processing=True, Succeeded=Unknown, requeued",
            Self::Fenced => "fenced: Processing=True, Succeeded=True",
            Self::Complete => "complete: Processing=False, Succeeded=True",
            Self::Final => "final: Processing=False, Succeeded=False",
        }
    }
}

impl Budget {
    pub fn describe(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::RetryCount => "`retry.count` attempts, `retry.interval` apart",
            Self::PowerOffTimeout => "`powerOffTimeout` per attempt, within `retry.count`",
            Self::ReleaseTimeout => "`releaseTimeout`, then goes ahead with a Warning",
            Self::PowerOn => "one On, read back within `powerOffTimeout`; then a Warning",
            Self::NhcTimeout => "until it clears or NHC times out",
        }
    }
}
