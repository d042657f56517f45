//! The 16 bytes of an IPMI GUID (RAKP 2's managed-system GUID, `Get System GUID`) spelled as a UUID.
//!
//! Firmware disagrees on the byte order, so the same bytes are spelled the three ways `ipmitool mc
//! guid ipmi|smbios|rfc4122` prints them (ipmitool `lib/ipmi_mc.c`, `ipmi_parse_guid`):
//! - IPMI (IPMI v2.0 §20.8): every field least-significant byte first, the node field too, so the
//!   UUID is the 16 bytes reversed;
//! - SMBIOS (SMBIOS 3.0 §7.2.1): time_low, time_mid and time_hi_and_version little-endian, the clock
//!   sequence and node as sent (the order the kernel's `product_uuid`, hence a kubelet's
//!   `systemUUID`, is read in);
//! - RFC 4122: every byte as sent.

use std::fmt;

use uuid::Uuid;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GuidLayout {
    Ipmi,
    Smbios,
    Rfc4122,
}

impl GuidLayout {
    pub const ALL: [GuidLayout; 3] = [Self::Ipmi, Self::Smbios, Self::Rfc4122];

    /// ipmitool's name for the layout (`mc guid <name>`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ipmi => "ipmi",
            Self::Smbios => "smbios",
            Self::Rfc4122 => "rfc4122",
        }
    }
}

impl fmt::Display for GuidLayout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A GUID's bytes exactly as the BMC sent them.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Guid([u8; 16]);

/// One spelling of a GUID.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Spelling {
    pub layout: GuidLayout,
    pub uuid: Uuid,
}

impl Guid {
    pub fn from_bytes(bytes: [u8; 16]) -> Self {
        Self(bytes)
    }

    pub fn as_bytes(&self) -> &[u8; 16] {
        &self.0
    }

    /// The UUID these bytes spell in one layout.
    pub fn spell(&self, layout: GuidLayout) -> Uuid {
        match layout {
            GuidLayout::Ipmi => {
                let mut reversed = self.0;
                reversed.reverse();
                Uuid::from_bytes(reversed)
            }
            GuidLayout::Smbios => Uuid::from_bytes_le(self.0),
            GuidLayout::Rfc4122 => Uuid::from_bytes(self.0),
        }
    }

    /// The three spellings, in [`GuidLayout::ALL`] order (two may coincide).
    pub fn spellings(&self) -> [Spelling; 3] {
        GuidLayout::ALL.map(|layout| Spelling { layout, uuid: self.spell(layout) })
    }

    /// The layouts in which these bytes spell the node's `systemUUID` (any case, surrounding
    /// whitespace ignored); empty when none does or the text is no UUID. Whether that UUID can
    /// identify a machine at all (placeholders, all zeros) is [`crate::identity::prove`]'s rule.
    pub fn matches(&self, node_uuid: &str) -> Vec<GuidLayout> {
        let Some(node) = crate::words::uuid::parse(node_uuid) else { return Vec::new() };
        self.spellings().into_iter().filter(|s| s.uuid == node).map(|s| s.layout).collect()
    }

    /// The bytes a BMC sends when it spells `uuid` in `layout` (the inverse of [`Guid::spell`]).
    pub fn of(uuid: Uuid, layout: GuidLayout) -> Self {
        match layout {
            GuidLayout::Ipmi => {
                let mut bytes = *uuid.as_bytes();
                bytes.reverse();
                Self(bytes)
            }
            GuidLayout::Smbios => Self(uuid.to_bytes_le()),
            GuidLayout::Rfc4122 => Self(*uuid.as_bytes()),
        }
    }
}

/// The bytes in hex, as sent: a GUID is shown so nobody mistakes it for one spelling.
impl fmt::Display for Guid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&hex::encode(self.0))
    }
}

impl fmt::Debug for Guid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Guid({self})")
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn counting() -> Guid {
        Guid::from_bytes(std::array::from_fn(|i| i as u8))
    }

    // Vectors worked through ipmi_parse_guid by hand: IPMI reads time_low as ipmi32toh(bytes 12..16),
    // time_mid/time_hi/clock as ipmi16toh of bytes 10..12, 8..10, 6..8 and the node as bytes 0..6
    // reversed; SMBIOS reads the first three fields little-endian from the front and the rest as is.
    #[test]
    fn counting_bytes_spell_as_ipmitool_prints_them() {
        let guid = counting();
        assert_eq!(guid.spell(GuidLayout::Ipmi).to_string(), "0f0e0d0c-0b0a-0908-0706-050403020100");
        assert_eq!(guid.spell(GuidLayout::Smbios).to_string(), "03020100-0504-0706-0809-0a0b0c0d0e0f");
        assert_eq!(guid.spell(GuidLayout::Rfc4122).to_string(), "00010203-0405-0607-0809-0a0b0c0d0e0f");
    }

    #[test]
    fn ipmi_sims_configured_guid_spells_as_ipmitool_mc_guid_printed_it() {
        // ipmi_sim with `guid a123456789abcdefa123456789abcdef`: `ipmitool mc guid` (auto → IPMI)
        // printed efcdab89-6745-23a1-efcd-ab89674523a1.
        let guid = Guid::from_bytes(hex::decode("a123456789abcdefa123456789abcdef").unwrap().try_into().unwrap());
        assert_eq!(guid.spell(GuidLayout::Ipmi).to_string(), "efcdab89-6745-23a1-efcd-ab89674523a1");
        assert_eq!(guid.spell(GuidLayout::Smbios).to_string(), "674523a1-ab89-efcd-a123-456789abcdef");
        assert_eq!(guid.spell(GuidLayout::Rfc4122).to_string(), "a1234567-89ab-cdef-a123-456789abcdef");
    }

    #[test]
    fn a_node_uuid_matches_the_layout_that_spells_it_in_any_case() {
        let guid = counting();
        assert_eq!(guid.matches("0F0E0D0C-0B0A-0908-0706-050403020100"), [GuidLayout::Ipmi]);
        assert_eq!(guid.matches(" 03020100-0504-0706-0809-0a0b0c0d0e0f\n"), [GuidLayout::Smbios]);
        assert_eq!(guid.matches("00010203-0405-0607-0809-0a0b0c0d0e0f"), [GuidLayout::Rfc4122]);
        assert!(guid.matches("00010203-0405-0607-0809-0a0b0c0d0e10").is_empty());
        assert!(guid.matches("not a uuid").is_empty());
    }

    #[test]
    fn layouts_that_coincide_all_match() {
        // Palindromic in its first eight bytes' field order: SMBIOS and RFC 4122 agree.
        let bytes = [1, 1, 1, 1, 2, 2, 3, 3, 4, 5, 6, 7, 8, 9, 10, 11];
        let guid = Guid::from_bytes(bytes);
        let rfc = guid.spell(GuidLayout::Rfc4122).to_string();
        assert_eq!(guid.matches(&rfc), [GuidLayout::Smbios, GuidLayout::Rfc4122]);
        assert_eq!(Guid::from_bytes([0; 16]).matches("00000000-0000-0000-0000-000000000000"), GuidLayout::ALL);
    }

    #[test]
    fn a_guid_shows_its_bytes_as_sent() {
        assert_eq!(format!("{:?}", counting()), "Guid(000102030405060708090a0b0c0d0e0f)");
    }

    proptest! {
        #[test]
        fn every_layout_round_trips(bytes in any::<[u8; 16]>()) {
            let guid = Guid::from_bytes(bytes);
            for spelling in guid.spellings() {
                prop_assert_eq!(Guid::of(spelling.uuid, spelling.layout), guid);
                prop_assert!(guid.matches(&spelling.uuid.to_string()).contains(&spelling.layout));
            }
        }
    }
}
