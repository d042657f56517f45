//! The one table of Event reasons that are not condition reasons: every Event coroner publishes has a
//! reason from this table, the condition reasons' table (`words::reason`) or the attestation's
//! (`attestation::reason_table`). Each row says its type, whether it goes to the Node as well, and
//! what it means; docs/operations.md carries [`table`] (a test compares them). What goes to the Node
//! is read from here (`fence::for_the_node`): a renamed reason keeps reaching it.

/// An Event's type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Normal,
    Warning,
    /// Normal, or Warning when what it tells failed (a request the device rejected).
    Either,
}

/// Where an Event goes besides the object it regards.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Also {
    /// The Node too: its operator must see it. (Every Warning goes to the Node too.)
    Node,
    /// The regarded object alone: every Event is an apiserver write.
    Alone,
}

macro_rules! events {
    ($($name:ident => $kind:ident, $also:ident, $meaning:literal;)+) => {
        /// Every Event reason coroner publishes that is not a condition reason.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum Event { $($name,)+ }

        impl Event {
            pub const ALL: &'static [Event] = &[$(Event::$name,)+];

            pub const fn as_str(self) -> &'static str {
                match self { $(Event::$name => stringify!($name),)+ }
            }

            pub fn kind(self) -> Kind {
                match self { $(Event::$name => Kind::$kind,)+ }
            }

            pub fn also(self) -> Also {
                match self { $(Event::$name => Also::$also,)+ }
            }

            /// One line for the docs and for humans.
            pub fn meaning(self) -> &'static str {
                match self { $(Event::$name => $meaning,)+ }
            }
        }
    };
}

events! {
    IdentityVerified => Normal, Alone, "the fence proved the BMC's system is the node (its UUID)";
    InsecureSkipVerify => Warning, Alone, "the binding turned BMC certificate verification off (`tls.insecureSkipVerify`)";
    BindingChanged => Warning, Alone, "the binding was edited under the fence: identity is proven again through it";
    ForceOffSent => Either, Alone, "the fence's ForceOff was sent (Warning: the BMC rejected it); only readings prove anything";
    OutletsOffSent => Either, Alone, "the fence's Off was sent to a level's outlets (Warning: a PDU rejected it)";
    PowerOffProven => Normal, Alone, "an unbroken run of Off readings spanning settle proved the machine off";
    OutletMappingUnproven => Warning, Alone, "a level is used on a person's statement that its outlets feed the machine (or the binding's levels are not all confirmed)";
    StaleTaintAdopted => Normal, Node, "the release took over an out-of-service taint whose remediation is gone (R4)";
    ReleaseTimeout => Warning, Alone, "Reboot: the node's pods or volume attachments were still there at releaseTimeout; the power-on goes ahead";
    PowerOnSent => Either, Node, "Reboot: On was sent (Warning: the BMC rejected it)";
    PoweredOn => Normal, Node, "Reboot: the machine read On after the On";
    PowerOnNotConfirmed => Warning, Alone, "Reboot: the machine did not read On by the power-on deadline; the fence stands";
    NodeRecovered => Normal, Node, "Reboot: the node came back Ready with a new bootID";
    SpecEditIgnored => Warning, Alone, "the spec was edited after admission: the fence follows the spec it was admitted with (once per generation)";
    ProvingAgainOnAnswer => Normal, Alone, "an attestation's look found the failed fence's machine: the fence proves it off again (A4)";
    ReleasedMachinePoweredOn => Warning, Node, "the guard read the released machine (or an outlet of its level) not Off";
    GuardBlind => Warning, Node, "the guard cannot read the released machine";
    MachineOff => Normal, Node, "the released machine reads Off again";
    GuardForceOffSent => Warning, Node, "the guard sent ForceOff (or Off to the level's outlets) to the released machine";
    GuardHeld => Normal, Node, "a ForceOff the guard decided was not sent, and why (a check right before it held it)";
    PowerOnApproved => Normal, Node, "the Node carries an approval of this release: the guard leaves the machine on";
    GuardIdentityVerified => Normal, Alone, "the guard found the released node's system by its UUID (a release whose proof named no system)";
    ApprovalNotForThisRelease => Warning, Node, "the Node's approval does not name this release: it counts for nothing";
    ReleaseRecordDiverged => Warning, Node, "the Node no longer shows coroner's release (someone rewrote or removed its taint): the release still stands";
    ApprovalPolicyMissing => Warning, Node, "an approval is honoured but no admission policy keeps it to the approvers";
    ReleaseUnguardedNodeDeleted => Warning, Node, "the Node was deleted while its release stood: nothing guards its machine any more";
    ReturnedWithoutApproval => Warning, Node, "the node reported Ready while its release stood and nobody approved it";
    StaleTaintRemoved => Normal, Alone, "on the Node: the sweep removed a taint whose remediation is gone";
    StaleReleaseHeld => Warning, Alone, "on the Node: the sweep keeps an out-of-service taint whose remediation is gone, and says why";
    OperatorAttested => Warning, Node, "a person's attestation released the node (no proof of power-off)";
    Released => Normal, Alone, "on the attestation: the node was released through its remediation";
    BindingVerified => Normal, Alone, "the binding's BMC is the node's (its UUID) and answers";
    BmcReachable => Normal, Alone, "the binding's BMC answers again";
    SettleTooShortForBmc => Warning, Alone, "one power reading took longer than the shortest template pollInterval allows (P4)";
    InsecurePduTransport => Warning, Alone, "an outlet is reached over SNMP without authPriv or unverified TLS";
    MultipleTemplatesSupportMissing => Warning, Alone, "a template lacks NHC's multiple-templates-support annotation";
}

impl Event {
    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|e| e.as_str() == text)
    }
}

/// The table as Markdown; docs/operations.md carries exactly this (a test checks).
pub fn table() -> String {
    let mut table = String::from("| Reason | Type | Also on the Node | Meaning |\n|---|---|---|---|\n");
    for event in Event::ALL {
        let kind = match event.kind() {
            Kind::Normal => "Normal",
            Kind::Warning => "Warning",
            Kind::Either => "Normal, or Warning when it failed",
        };
        let node = match (event.also(), event.kind()) {
            (Also::Node, _) | (_, Kind::Warning) => "yes",
            (Also::Alone, Kind::Either) => "when a Warning",
            (Also::Alone, Kind::Normal) => "no",
        };
        table.push_str(&format!("| `{}` | {kind} | {node} | {} |\n", event.as_str(), event.meaning()));
    }
    table
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_event_reason_is_also_a_condition_reason() {
        for event in Event::ALL {
            let clash = crate::words::reason::Reason::ALL.iter().find(|r| r.as_str() == event.as_str());
            assert!(clash.is_none(), "{event:?} is a condition reason: it belongs to that table alone");
        }
    }

    #[test]
    fn every_reason_parses_back() {
        for event in Event::ALL {
            assert_eq!(Event::parse(event.as_str()), Some(*event));
        }
        assert_eq!(Event::parse("PowerOnAproved"), None);
    }
}
