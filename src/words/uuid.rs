//! A UUID as a device or a Node spells it.

use uuid::Uuid;

/// A UUID in any of its spellings (trimmed); `None` when it is not one.
pub fn parse(text: &str) -> Option<Uuid> {
    Uuid::try_parse(text.trim()).ok()
}
