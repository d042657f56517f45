//! Digests as status shows them.

/// A device digest as a binding's status and a fence's admission record show it.
pub fn content_hex(digest: u64) -> String {
    format!("{digest:016x}")
}
