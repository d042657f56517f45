//! Proving that a BMC's system is the node: the UUID rules.
//!
//! The kubelet reports `/sys/class/dmi/id/product_uuid` as the node's `systemUUID`; a BMC reports
//! Redfish `ComputerSystem.UUID`. Since SMBIOS 2.6 the first three UUID fields are stored
//! little-endian and firmware disagrees on which form to print, so the same machine may show its UUID
//! with those fields byte-swapped. Both forms are accepted (and recorded), nothing looser is.

use uuid::Uuid;

use crate::{api::UuidMatch, contract::Reason};

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
    #[error("the BMC reported UUID {bmc:?}, which is not a valid UUID")]
    BmcUuidMalformed { bmc: String },
    #[error("the BMC system's UUID {bmc} is not the node's systemUUID {node}, in either byte order")]
    Mismatch { node: String, bmc: String },
    #[error("UUID {uuid} also belongs to {other}; coroner cannot tell which machine this BMC powers")]
    Ambiguous { uuid: String, other: String },
}

impl IdentityRefusal {
    /// The condition reason for this refusal (all final: no power action is taken).
    pub fn reason(&self) -> Reason {
        match self {
            Self::NodeUuidUnusable(..) => Reason::NodeUuidUnusable,
            Self::BmcUuidMalformed { .. } => Reason::BmcProtocolError,
            Self::Mismatch { .. } => Reason::IdentityMismatch,
            Self::Ambiguous { .. } => Reason::IdentityAmbiguous,
        }
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

pub fn parse(text: &str) -> Option<Uuid> {
    Uuid::try_parse(text.trim()).ok()
}

/// The same UUID with the byte order of its first three fields swapped.
pub fn byte_swapped(uuid: Uuid) -> Uuid {
    Uuid::from_bytes_le(*uuid.as_bytes())
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
    if let Some(why) = unusable(node_uuid) {
        return Err(IdentityRefusal::NodeUuidUnusable(node_uuid.to_owned(), why));
    }
    let node =
        parse(node_uuid).ok_or_else(|| IdentityRefusal::NodeUuidUnusable(node_uuid.to_owned(), "it is not a UUID"))?;
    let bmc = parse(bmc_uuid).ok_or_else(|| IdentityRefusal::BmcUuidMalformed { bmc: bmc_uuid.to_owned() })?;
    let matched = same_machine(node, bmc)
        .ok_or_else(|| IdentityRefusal::Mismatch { node: node_uuid.to_owned(), bmc: bmc_uuid.to_owned() })?;
    if let Some(other) = others.iter().find(|c| parse(&c.uuid).is_some_and(|u| same_machine(node, u).is_some())) {
        return Err(IdentityRefusal::Ambiguous { uuid: node_uuid.to_owned(), other: other.owner.clone() });
    }
    Ok(matched)
}

/// Discovery on a service with several systems: the one whose UUID names the node's machine.
pub fn select_system<'a, T>(systems: &'a [T], uuid_of: impl Fn(&T) -> &str, node_uuid: &str) -> Option<&'a T> {
    let node = parse(node_uuid)?;
    systems.iter().find(|s| parse(uuid_of(s)).is_some_and(|u| same_machine(node, u).is_some()))
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn discovery_picks_the_matching_system_in_either_order() {
        let systems = [("a", "7f3b0c1e-0000-4000-8000-000000000002"), ("b", NODE_SWAPPED)];
        assert_eq!(select_system(&systems, |s| s.1, NODE).map(|s| s.0), Some("b"));
        assert_eq!(select_system(&systems, |s| s.1, "7f3b0c1e-0000-4000-8000-000000000009"), None);
    }
}
