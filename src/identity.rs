//! Proving that a BMC's system is the node: the UUID rules.
//!
//! The kubelet reports `/sys/class/dmi/id/product_uuid` as the node's `systemUUID`; a BMC reports
//! Redfish `ComputerSystem.UUID`. Since SMBIOS 2.6 the first three UUID fields are stored
//! little-endian and firmware disagrees on which form to print, so the same machine may show its UUID
//! with those fields byte-swapped. Both forms are accepted (and recorded), nothing looser is.

use uuid::Uuid;

use crate::{
    api::UuidMatch,
    bmc::{Discovery, SystemReading, bounded, paths},
    contract::Reason,
};

/// How many UUIDs or paths a refusal lists before it says "and N more".
const LISTED: usize = 8;

/// UUIDs that firmware ships on many machines at once; they identify nothing.
const KNOWN_PLACEHOLDERS: &[&str] = &[
    // "known default UID for several motherboards" (oshi #2417)
    "03000200-0400-0500-0006-000700080009",
    // HPE MicroServer Gen8 (rockstor #2143)
    "31393138-3538-5a43-3135-353130323750",
];

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum IdentityRefusal {
    #[error("the node's systemUUID {0:?} cannot identify a machine: {1}")]
    NodeUuidUnusable(String, &'static str),
    /// `bmc`: the value as reported, escaped (`{:?}`) and then bounded, so the message stays short.
    #[error("the BMC reported UUID {bmc}, which is not a valid UUID")]
    BmcUuidMalformed { bmc: String },
    #[error("the BMC system's UUID {bmc} is not the node's systemUUID {node}, in either byte order")]
    Mismatch { node: String, bmc: String },
    #[error("UUID {uuid} also belongs to {other}; coroner cannot tell which machine this BMC powers")]
    Ambiguous { uuid: String, other: String },
    #[error(
        "{} systems of this BMC report the node's systemUUID {uuid} (in either byte order): {}; coroner cannot tell which one is the node",
        systems.len(), listed(systems)
    )]
    SharedOnBmc {
        uuid: String,
        systems: Vec<String>,
        /// The first power state other than `Off` one of them reported.
        seen_on: Option<String>,
    },
    #[error(
        "member {member} of the BMC's Systems collection could not be read ({problem}); without it coroner cannot rule out a second system with the node's UUID{}",
        if *transient { "" } else { " (fix or remove that member on the BMC)" }
    )]
    MemberUnreadable { member: String, problem: String, transient: bool },
    /// No system that was read is the node's, and one that could not be read may be: its failure is
    /// the cause, and its reason the refusal's.
    #[error(
        "no system of this BMC that could be read reports the node's systemUUID, and member {member} could not be read: {problem}"
    )]
    Unread { member: String, problem: String, transient: bool, reason: Reason },
    #[error("none of the {} systems of this BMC reports the node's systemUUID {node} in either byte order (they report {})", reported.len(), listed(reported))]
    NoSystem { node: String, reported: Vec<String> },
    #[error("the BMC answered {path} as UUID {first} and as UUID {then} within one discovery")]
    Unstable { path: String, first: String, then: String },
}

fn listed(items: &[String]) -> String {
    let mut text = items.iter().take(LISTED).cloned().collect::<Vec<_>>().join(", ");
    if items.len() > LISTED {
        text.push_str(&format!(" and {} more", items.len() - LISTED));
    }
    if text.is_empty() { "nothing".into() } else { text }
}

impl IdentityRefusal {
    /// The condition reason for this refusal (all final: no power action is taken).
    pub fn reason(&self) -> Reason {
        match self {
            Self::NodeUuidUnusable(..) => Reason::NodeUuidUnusable,
            Self::BmcUuidMalformed { .. } => Reason::BmcProtocolError,
            Self::Mismatch { .. } => Reason::IdentityMismatch,
            Self::Ambiguous { .. } | Self::SharedOnBmc { .. } | Self::MemberUnreadable { .. } => {
                Reason::IdentityAmbiguous
            }
            Self::NoSystem { .. } => Reason::IdentityMismatch,
            Self::Unstable { .. } => Reason::IdentityChanged,
            Self::Unread { reason, .. } => *reason,
        }
    }

    /// A member that timed out or answered 5xx may answer the next attempt: the fence retries the
    /// identity within its budget instead of failing at once. Every other refusal is final.
    pub fn seen_on(&self) -> Option<String> {
        match self {
            Self::SharedOnBmc { seen_on, .. } => seen_on.clone(),
            _ => None,
        }
    }

    pub fn is_transient(&self) -> bool {
        matches!(self, Self::MemberUnreadable { transient: true, .. } | Self::Unread { transient: true, .. })
    }
}

/// Something else that claims a machine: another Node's `systemUUID`, or the system another
/// BmcBinding last verified.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Claim {
    /// Human-readable owner, e.g. `Node worker-2` or `BmcBinding coroner/worker-2`.
    pub owner: String,
    pub uuid: String,
}

pub use crate::words::uuid::parse;

/// The same UUID with the byte order of its first three fields swapped.
pub fn byte_swapped(uuid: Uuid) -> Uuid {
    Uuid::from_bytes_le(*uuid.as_bytes())
}

/// Whether a system reporting `system_uuid` is the machine a node reporting `node_uuid` names (in
/// any layout [`same_machine`] accepts); `false` when either is not a UUID.
pub fn names_machine(node_uuid: &str, system_uuid: &str) -> bool {
    parse(node_uuid).zip(parse(system_uuid)).is_some_and(|(node, bmc)| same_machine(node, bmc).is_some())
}

/// Whether two UUIDs name the same machine, and how.
pub fn same_machine(node: Uuid, bmc: Uuid) -> Option<UuidMatch> {
    if node == bmc {
        Some(UuidMatch::Exact)
    } else if byte_swapped(node) == bmc {
        Some(UuidMatch::ByteSwapped)
    } else {
        None
    }
}

/// Why a node UUID cannot identify a machine, if it cannot.
pub fn unusable(text: &str) -> Option<&'static str> {
    if text.trim().is_empty() {
        return Some("it is empty");
    }
    let Some(uuid) = parse(text) else {
        return Some("it is not a UUID");
    };
    if uuid.is_nil() {
        return Some("it is all zeros");
    }
    if uuid.is_max() {
        return Some("it is all F");
    }
    let placeholder = KNOWN_PLACEHOLDERS.iter().filter_map(|p| parse(p)).any(|p| same_machine(p, uuid).is_some());
    placeholder.then_some("it is a known firmware placeholder shared by many machines")
}

/// The identity proof: the BMC system's UUID must be the node's (exact or byte-swapped), the node's
/// UUID must be able to identify a machine, and nothing else may claim the same machine.
pub fn prove(node_uuid: &str, bmc_uuid: &str, others: &[Claim]) -> Result<UuidMatch, IdentityRefusal> {
    let node = usable_node_uuid(node_uuid)?;
    let bmc = parse(bmc_uuid)
        .ok_or_else(|| IdentityRefusal::BmcUuidMalformed { bmc: bounded(&format!("{bmc_uuid:?}"), 80) })?;
    let matched = same_machine(node, bmc)
        .ok_or_else(|| IdentityRefusal::Mismatch { node: node_uuid.to_owned(), bmc: bmc_uuid.to_owned() })?;
    if let Some(other) = others.iter().find(|c| parse(&c.uuid).is_some_and(|u| same_machine(node, u).is_some())) {
        return Err(IdentityRefusal::Ambiguous { uuid: node_uuid.to_owned(), other: other.owner.clone() });
    }
    Ok(matched)
}

/// IPMI: a System GUID is sixteen bytes firmware spells in three layouts. The spelling that names the
/// node is the proof ([`prove`]); no other spelling of the same bytes may name another Node or be a
/// placeholder, since either makes the bytes as likely another machine's.
pub fn other_spellings_clear(aliases: &[String], others: &[Claim]) -> Result<(), IdentityRefusal> {
    for alias in aliases {
        let Some(uuid) = parse(alias) else { continue };
        if let Some(why) = unusable(alias) {
            return Err(IdentityRefusal::NodeUuidUnusable(
                bounded(alias, 64),
                if why.contains("placeholder") {
                    "another layout of the BMC's GUID spells a known firmware placeholder"
                } else {
                    why
                },
            ));
        }
        if let Some(other) = others.iter().find(|c| parse(&c.uuid).is_some_and(|u| same_machine(uuid, u).is_some())) {
            return Err(IdentityRefusal::Ambiguous { uuid: alias.clone(), other: other.owner.clone() });
        }
    }
    Ok(())
}

fn usable_node_uuid(node_uuid: &str) -> Result<Uuid, IdentityRefusal> {
    let refuse = |why| IdentityRefusal::NodeUuidUnusable(bounded(node_uuid, 64), why);
    if let Some(why) = unusable(node_uuid) {
        return Err(refuse(why));
    }
    parse(node_uuid).ok_or_else(|| refuse("it is not a UUID"))
}

/// The system a fence goes through, and how its UUID matched the node's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Selected {
    pub system: SystemReading,
    pub matched: UuidMatch,
}

/// The identity rule on one BMC. The candidate is the pinned system, else the one system whose UUID
/// names the node's machine (either byte order). Refused when the node's UUID cannot identify a
/// machine; when the pinned system is another machine; when any other system of the BMC reports the
/// node's UUID, pinned or not (a pin is an operator's statement; a cloned UUID defeats it too); when
/// one path answered as two UUIDs; and when a member was not read, pinned or not (nothing read earlier
/// stands in for it: what another read recorded anywhere a user may write could be forged). Claims
/// from outside the BMC (other Nodes, other bindings) are [`prove`]'s.
pub fn select(discovery: &Discovery, node_uuid: &str) -> Result<Selected, IdentityRefusal> {
    let node = usable_node_uuid(node_uuid)?;
    let matches = |s: &SystemReading| parse(&s.uuid).and_then(|u| same_machine(node, u));
    let same_uuid = |a: &SystemReading, b: &SystemReading| parse(&a.uuid) == parse(&b.uuid);

    let mut distinct: Vec<&SystemReading> = Vec::new();
    for reading in discovery.readings() {
        match distinct.iter().find(|d| paths::same_resource(&d.path, &reading.path)) {
            Some(seen) if same_uuid(seen, reading) => {}
            Some(seen) => {
                return Err(IdentityRefusal::Unstable {
                    path: seen.path.clone(),
                    first: seen.uuid.clone(),
                    then: reading.uuid.clone(),
                });
            }
            None => distinct.push(reading),
        }
    }
    if let Some(pinned) = &discovery.pinned
        && matches(pinned).is_none()
    {
        return Err(IdentityRefusal::Mismatch { node: bounded(node_uuid, 64), bmc: pinned.uuid.clone() });
    }
    let matching: Vec<(&SystemReading, UuidMatch)> =
        distinct.iter().filter_map(|s| matches(s).map(|matched| (*s, matched))).collect();
    if matching.len() > 1 {
        let systems = matching.iter().map(|(s, _)| format!("{} ({})", s.path, s.uuid)).collect();
        let seen_on = matching.iter().map(|(s, _)| &s.power_state).find(|p| **p != crate::bmc::PowerState::Off);
        let seen_on = seen_on.map(|p| p.as_str().to_owned());
        return Err(IdentityRefusal::SharedOnBmc { uuid: bounded(node_uuid, 64), systems, seen_on });
    }

    let unexcused = discovery.unreadable.first();
    let tried = |member: &str| discovery.unreadable.iter().any(|u| paths::same_resource(&u.member, member));
    let unattempted = discovery.members.iter().find(|m| !discovery.answered(m) && !tried(m));

    match (matching.as_slice(), unexcused, unattempted) {
        ([], Some(unread), _) => Err(IdentityRefusal::Unread {
            member: bounded(&unread.member, 160),
            problem: unread.error.to_string(),
            transient: unread.error.is_transient(),
            reason: unread.error.reason(),
        }),
        (_, Some(unread), _) => Err(IdentityRefusal::MemberUnreadable {
            member: bounded(&unread.member, 160),
            problem: unread.error.to_string(),
            transient: unread.error.is_transient(),
        }),
        (_, None, Some(member)) => Err(IdentityRefusal::MemberUnreadable {
            member: bounded(member, 160),
            problem: "this discovery did not read it".into(),
            transient: false,
        }),
        ([(system, matched)], None, None) => Ok(Selected { system: (*system).clone(), matched: *matched }),
        _ => Err(IdentityRefusal::NoSystem {
            node: bounded(node_uuid, 64),
            reported: distinct.iter().map(|s| s.uuid.clone()).collect(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_system_names_the_nodes_machine_in_either_byte_order_and_never_without_a_uuid() {
        let node = "4c4c4544-0031-3510-8052-b4c04f4e3132";
        assert!(names_machine(node, node));
        assert!(names_machine(node, "44454c4c-3100-1035-8052-b4c04f4e3132"), "byte-swapped");
        assert!(!names_machine(node, "4c4c4544-0032-3510-8052-b4c04f4e3132"));
        assert!(!names_machine("", node) && !names_machine(node, "not a uuid"));
    }
    use crate::bmc::{Answer, BmcError, Unreadable};

    const NODE: &str = "7f3b0c1e-0000-4000-8000-000000000001";
    // The same machine printed with its first three fields little-endian.
    const NODE_SWAPPED: &str = "1e0c3b7f-0000-0040-8000-000000000001";

    #[test]
    fn exact_match_ignores_case() {
        assert_eq!(prove(NODE, &NODE.to_uppercase(), &[]), Ok(UuidMatch::Exact));
    }

    #[test]
    fn byte_swapped_first_three_fields_match() {
        assert_eq!(prove(NODE, NODE_SWAPPED, &[]), Ok(UuidMatch::ByteSwapped));
        assert_eq!(prove(NODE_SWAPPED, NODE, &[]), Ok(UuidMatch::ByteSwapped));
        // go-hal #57: Supermicro Redfish vs DMI on the same board.
        assert_eq!(
            prove("E7B45C00-8909-11EB-8000-7CC255106AFE", "005CB4E7-0989-EB11-8000-7CC255106AFE", &[]),
            Ok(UuidMatch::ByteSwapped)
        );
    }

    #[test]
    fn other_differences_are_a_mismatch() {
        // Swapping only some fields, or the last two, is not the SMBIOS rule.
        for bmc in [
            "7f3b0c1e-0000-4000-8000-000000000002",
            "1e0c3b7f-0000-4000-8000-000000000001",
            "7f3b0c1e-0000-4000-0080-000000000001",
        ] {
            assert!(matches!(prove(NODE, bmc, &[]), Err(IdentityRefusal::Mismatch { .. })), "{bmc}");
        }
    }

    #[test]
    fn unusable_node_uuids_are_refused_before_comparing() {
        for node in [
            "",
            "  ",
            "not-a-uuid",
            "00000000-0000-0000-0000-000000000000",
            "FFFFFFFF-FFFF-FFFF-FFFF-FFFFFFFFFFFF",
            "03000200-0400-0500-0006-000700080009",
            "00020003-0004-0005-0006-000700080009",
            "31393138-3538-5A43-3135-353130323750",
        ] {
            assert!(matches!(prove(node, node, &[]), Err(IdentityRefusal::NodeUuidUnusable(..))), "{node:?}");
        }
    }

    #[test]
    fn another_layout_of_an_ipmi_guid_that_names_another_node_or_a_placeholder_is_refused() {
        let guid = crate::ipmi::Guid::of(parse(NODE).unwrap(), crate::ipmi::GuidLayout::Smbios);
        let reversed = guid.spell(crate::ipmi::GuidLayout::Ipmi).to_string();
        let aliases = vec![reversed.clone()];
        assert_eq!(other_spellings_clear(&aliases, &[]), Ok(()));
        let claims = [Claim { owner: "Node worker-2".into(), uuid: reversed.clone() }];
        assert!(matches!(other_spellings_clear(&aliases, &claims), Err(IdentityRefusal::Ambiguous { .. })));
        let placeholder = vec!["03000200-0400-0500-0006-000700080009".to_owned()];
        assert!(matches!(other_spellings_clear(&placeholder, &[]), Err(IdentityRefusal::NodeUuidUnusable(..))));
    }

    #[test]
    fn a_malformed_bmc_uuid_is_an_error_never_a_default() {
        assert!(matches!(prove(NODE, "", &[]), Err(IdentityRefusal::BmcUuidMalformed { .. })));
        assert!(matches!(prove(NODE, "12345", &[]), Err(IdentityRefusal::BmcUuidMalformed { .. })));
    }

    #[test]
    fn a_uuid_claimed_elsewhere_in_either_order_is_ambiguous() {
        for other in [NODE, NODE_SWAPPED, &NODE.to_uppercase()] {
            let claims = [Claim { owner: "Node worker-2".into(), uuid: other.into() }];
            assert_eq!(
                prove(NODE, NODE, &claims),
                Err(IdentityRefusal::Ambiguous { uuid: NODE.into(), other: "Node worker-2".into() })
            );
        }
        let unrelated = [Claim { owner: "Node worker-3".into(), uuid: "7f3b0c1e-0000-4000-8000-000000000003".into() }];
        assert_eq!(prove(NODE, NODE, &unrelated), Ok(UuidMatch::Exact));
    }

    // The rule on one BMC -----------------------------------------------------------------------------

    const OTHER: &str = "7f3b0c1e-0000-4000-8000-000000000002";

    fn reading(id: &str, uuid: &str) -> SystemReading {
        SystemReading {
            id: id.into(),
            path: format!("/redfish/v1/Systems/{id}"),
            uuid: uuid.into(),
            power_state: crate::bmc::PowerState::On,
            reset_target: None,
            aliases: Vec::new(),
        }
    }

    fn discovery(pinned: Option<SystemReading>, members: &[(&str, &str)], unreadable: &[&str]) -> Discovery {
        let path = |id: &str| format!("/redfish/v1/Systems/{id}");
        let listed = members.iter().map(|(id, _)| path(id)).chain(unreadable.iter().map(|id| path(id)));
        let listed = listed.chain(pinned.iter().map(|p| p.path.clone()));
        Discovery {
            members: listed.collect(),
            systems: members.iter().map(|(id, uuid)| Answer { member: path(id), system: reading(id, uuid) }).collect(),
            unreadable: unreadable
                .iter()
                .map(|id| Unreadable {
                    member: path(id),
                    error: BmcError::Status { method: "GET", path: path(id), status: 404, detail: String::new() },
                })
                .collect(),
            pinned,
        }
    }

    #[test]
    fn discovery_picks_the_one_matching_system_in_either_order() {
        let found = select(&discovery(None, &[("a", OTHER), ("b", NODE_SWAPPED)], &[]), NODE).unwrap();
        assert_eq!((found.system.id.as_str(), found.matched), ("b", UuidMatch::ByteSwapped));
        let only = select(&discovery(None, &[("a", NODE)], &[]), NODE).unwrap();
        assert_eq!((only.system.id.as_str(), only.matched), ("a", UuidMatch::Exact));
    }

    #[test]
    fn no_matching_system_is_a_mismatch_that_lists_what_the_bmc_reports() {
        let refusal = select(&discovery(None, &[("a", OTHER)], &[]), NODE).unwrap_err();
        assert_eq!(refusal, IdentityRefusal::NoSystem { node: NODE.into(), reported: vec![OTHER.into()] });
        assert_eq!(refusal.reason(), Reason::IdentityMismatch);
        let many: Vec<(String, String)> =
            (0..20).map(|i| (format!("s{i}"), format!("7f3b0c1e-0000-4000-8000-0000000001{i:02}"))).collect();
        let many: Vec<(&str, &str)> = many.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
        let text = select(&discovery(None, &many, &[]), NODE).unwrap_err().to_string();
        assert!(text.contains("none of the 20 systems") && text.contains("and 12 more"), "{text}");
    }

    #[test]
    fn a_second_system_with_the_node_uuid_in_either_order_is_ambiguous_pinned_or_not() {
        for other in [NODE, NODE_SWAPPED] {
            let unpinned = discovery(None, &[("a", NODE), ("b", other)], &[]);
            let pinned = discovery(Some(reading("a", NODE)), &[("b", other)], &[]);
            for found in [unpinned, pinned] {
                let refusal = select(&found, NODE).unwrap_err();
                assert!(
                    matches!(&refusal, IdentityRefusal::SharedOnBmc { systems, .. } if systems.len() == 2),
                    "{refusal:?}"
                );
                assert_eq!(refusal.reason(), Reason::IdentityAmbiguous);
                assert!(!refusal.is_transient());
            }
        }
    }

    #[test]
    fn two_members_answering_as_one_system_are_one_system() {
        // `Systems/self` redirecting to `Systems/a`: the same resource, read twice.
        let mut found = discovery(None, &[("a", NODE)], &[]);
        found
            .systems
            .push(Answer { member: "/redfish/v1/Systems/self".into(), system: reading("a", &NODE.to_uppercase()) });
        found.members = ["/redfish/v1/Systems/a", "/redfish/v1/Systems/self"].into_iter().collect();
        assert_eq!(select(&found, NODE).unwrap().system.id, "a");
    }

    #[test]
    fn one_path_answering_as_two_uuids_is_refused() {
        let mut found = discovery(Some(reading("a", NODE)), &[], &[]);
        found.systems.push(Answer { member: "/redfish/v1/Systems/alias".into(), system: reading("a", OTHER) });
        found.members = ["/redfish/v1/Systems/alias"].into_iter().collect();
        let refusal = select(&found, NODE).unwrap_err();
        assert!(matches!(refusal, IdentityRefusal::Unstable { .. }), "{refusal:?}");
        assert_eq!(refusal.reason(), Reason::IdentityChanged);
    }

    #[test]
    fn a_pinned_system_that_is_another_machine_is_a_mismatch() {
        let refusal = select(&discovery(Some(reading("a", OTHER)), &[("b", NODE)], &[]), NODE).unwrap_err();
        assert_eq!(refusal, IdentityRefusal::Mismatch { node: NODE.into(), bmc: OTHER.into() });
    }

    #[test]
    fn an_unreadable_member_is_ambiguous_pinned_or_not() {
        let unpinned = discovery(None, &[("b", NODE)], &["c"]);
        let pinned = || discovery(Some(reading("b", NODE)), &[], &["c"]);
        let refusal = select(&unpinned, NODE).unwrap_err();
        assert!(
            matches!(&refusal, IdentityRefusal::MemberUnreadable { member, transient: false, .. } if member == "/redfish/v1/Systems/c")
        );
        assert_eq!(refusal.reason(), Reason::IdentityAmbiguous);
        assert!(refusal.to_string().contains("HTTP 404"), "{refusal}");
        assert!(select(&pinned(), NODE).is_err(), "a pin does not excuse an unread member");
    }

    #[test]
    fn with_no_matching_system_an_unreadable_members_failure_is_the_reason() {
        let refusal = select(&discovery(None, &[("a", OTHER)], &["c"]), NODE).unwrap_err();
        assert!(
            matches!(&refusal, IdentityRefusal::Unread { member, .. } if member == "/redfish/v1/Systems/c"),
            "{refusal:?}"
        );
        assert_eq!(refusal.reason(), Reason::BmcProtocolError, "HTTP 404 to a listed member");
        assert!(!refusal.is_transient());
    }

    #[test]
    fn a_member_that_timed_out_is_a_refusal_the_fence_may_retry() {
        let mut found = discovery(None, &[("b", NODE)], &[]);
        found.unreadable.push(Unreadable {
            member: "/redfish/v1/Systems/c".into(),
            error: BmcError::Unreachable("timeout".into()),
        });
        found.members = ["/redfish/v1/Systems/b", "/redfish/v1/Systems/c"].into_iter().collect();
        assert!(select(&found, NODE).unwrap_err().is_transient());
    }

    #[test]
    fn a_listed_member_this_discovery_did_not_read_is_ambiguous() {
        let mut found = discovery(None, &[("b", NODE)], &[]);
        found.members = ["/redfish/v1/Systems/a", "/redfish/v1/Systems/b"].into_iter().collect();
        assert!(matches!(select(&found, NODE), Err(IdentityRefusal::MemberUnreadable { .. })));
    }

    #[test]
    fn an_unusable_node_uuid_is_refused_before_any_system_is_looked_at() {
        let found = discovery(None, &[("a", "00000000-0000-0000-0000-000000000000")], &[]);
        assert!(matches!(
            select(&found, "00000000-0000-0000-0000-000000000000"),
            Err(IdentityRefusal::NodeUuidUnusable(..))
        ));
    }

    // Properties -----------------------------------------------------------------------------------------

    use proptest::prelude::*;

    fn any_uuid() -> impl Strategy<Value = Uuid> {
        any::<[u8; 16]>().prop_map(Uuid::from_bytes)
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        #[test]
        fn byte_swapping_is_an_involution(uuid in any_uuid()) {
            prop_assert_eq!(byte_swapped(byte_swapped(uuid)), uuid);
        }

        #[test]
        fn same_machine_is_symmetric_and_sees_both_orders(a in any_uuid(), b in any_uuid()) {
            prop_assert_eq!(same_machine(a, b), same_machine(b, a));
            prop_assert_eq!(same_machine(a, a), Some(UuidMatch::Exact));
            let swapped = if byte_swapped(a) == a { UuidMatch::Exact } else { UuidMatch::ByteSwapped };
            prop_assert_eq!(same_machine(a, byte_swapped(a)), Some(swapped));
            prop_assert_eq!(same_machine(a, b).is_some(), a == b || byte_swapped(a) == b);
        }

        #[test]
        fn every_spelling_of_a_uuid_parses_to_it(uuid in any_uuid(), upper in any::<bool>(), pad in "[ \t]{0,3}") {
            for text in [uuid.hyphenated().to_string(), uuid.simple().to_string(), uuid.braced().to_string(), uuid.urn().to_string()] {
                let text = if upper { text.to_uppercase().replace("URN:UUID:", "urn:uuid:") } else { text };
                prop_assert_eq!(parse(&format!("{pad}{text}{pad}")), Some(uuid));
            }
        }

        #[test]
        fn parsing_arbitrary_text_never_panics_and_proves_only_real_uuids(text in ".{0,64}", node in any_uuid()) {
            let node = node.hyphenated().to_string();
            match prove(&node, &text, &[]) {
                Ok(_) => prop_assert!(parse(&text).is_some_and(|u| same_machine(parse(&node).unwrap(), u).is_some())),
                Err(refusal) => prop_assert!(refusal.to_string().chars().count() < 300),
            }
        }

        #[test]
        fn select_never_picks_a_system_another_system_shares_the_uuid_with(
            uuids in prop::collection::vec(prop_oneof![Just(0u8), Just(1), Just(2), Just(3)], 1..6),
            pin in proptest::option::of(0usize..6),
        ) {
            // UUID 0 is the node's, 1 its byte-swapped spelling, 2 and 3 other machines.
            let spell = |k: u8| [NODE, NODE_SWAPPED, OTHER, "7f3b0c1e-0000-4000-8000-000000000003"][k as usize];
            let members: Vec<(String, &str)> = uuids.iter().enumerate().map(|(i, k)| (format!("s{i}"), spell(*k))).collect();
            let pin = pin.filter(|p| *p < members.len());
            let pinned = pin.map(|p| reading(&members[p].0, members[p].1));
            let rest: Vec<(&str, &str)> = members.iter().enumerate().filter(|(i, _)| Some(*i) != pin).map(|(_, (id, u))| (id.as_str(), *u)).collect();
            let found = discovery(pinned, &rest, &[]);
            let node_systems = uuids.iter().filter(|k| **k < 2).count();
            match select(&found, NODE) {
                Ok(selected) => {
                    prop_assert_eq!(node_systems, 1);
                    prop_assert!(same_machine(parse(NODE).unwrap(), parse(&selected.system.uuid).unwrap()).is_some());
                    if let Some(p) = pin { prop_assert_eq!(&selected.system.id, &members[p].0); }
                }
                Err(IdentityRefusal::SharedOnBmc { .. }) => prop_assert!(node_systems > 1),
                Err(IdentityRefusal::Mismatch { .. }) => prop_assert!(pin.is_some_and(|p| uuids[p] >= 2)),
                Err(IdentityRefusal::NoSystem { .. }) => prop_assert_eq!(node_systems, 0),
                Err(other) => prop_assert!(false, "unexpected {:?}", other),
            }
        }
    }
}
