//! What discovery read on one BMC: every system of its Systems collection, so that identity can be
//! judged on all of them (`crate::identity::select`).

use std::collections::BTreeSet;

use super::{
    paths,
    power::{BmcError, SystemReading},
};

/// The members of a Systems collection as a set of their paths, one spelling per resource.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemberSet(BTreeSet<String>);

impl MemberSet {
    pub fn contains(&self, path: &str) -> bool {
        self.0.contains(&key(path))
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(String::as_str)
    }
}

impl<S: AsRef<str>> FromIterator<S> for MemberSet {
    fn from_iter<I: IntoIterator<Item = S>>(paths: I) -> Self {
        Self(paths.into_iter().map(|p| key(p.as_ref())).collect())
    }
}

/// One spelling per resource: decoded segments without a trailing slash (the text as given when it
/// has none, which only makes two listings differ, never agree).
fn key(path: &str) -> String {
    paths::segments(path).map_or_else(|_| path.to_owned(), |segments| format!("/{}", segments.join("/")))
}

/// A search for the node's system that failed: the error, and every system that answered before
/// it (the pinned one, members read before another failed). What answered still tells whether the
/// machine is alive, whatever failed after it.
#[derive(Clone, Debug)]
pub struct Interrupted {
    pub error: BmcError,
    pub answered: Vec<SystemReading>,
}

impl From<BmcError> for Interrupted {
    fn from(error: BmcError) -> Self {
        Self { error, answered: Vec::new() }
    }
}

/// A member that did not answer with a usable system.
#[derive(Clone, Debug)]
pub struct Unreadable {
    pub member: String,
    pub error: BmcError,
}

/// A member that answered, as the system that answered (after same-origin redirects).
#[derive(Clone, Debug)]
pub struct Answer {
    pub member: String,
    pub system: SystemReading,
}

/// What discovery read on one BMC.
#[derive(Clone, Debug)]
pub struct Discovery {
    /// Every member of the Systems collection, all pages.
    pub members: MemberSet,
    /// The pinned system (`Systems/{systemId}`), as the system that answered; read first, and its
    /// failure fails the discovery.
    pub pinned: Option<SystemReading>,
    /// The members read (the pinned system is not read twice).
    pub systems: Vec<Answer>,
    /// The members that could not be read, and why.
    pub unreadable: Vec<Unreadable>,
}

impl Discovery {
    /// Whether `member` answered: read as a member, or the system the pin (or another member) answered as.
    pub fn answered(&self, member: &str) -> bool {
        let same = |path: &str| paths::same_resource(path, member);
        self.pinned.as_ref().is_some_and(|p| same(&p.path))
            || self.systems.iter().any(|a| same(&a.member) || same(&a.system.path))
    }

    /// Every system read, the pinned one first.
    pub fn readings(&self) -> impl Iterator<Item = &SystemReading> {
        self.pinned.iter().chain(self.systems.iter().map(|a| &a.system))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_member_set_ignores_order_duplicates_trailing_slashes_and_encoding() {
        let a: MemberSet =
            ["/redfish/v1/Systems/2", "/redfish/v1/Systems/1", "/redfish/v1/Systems/1/"].into_iter().collect();
        let b: MemberSet = ["/redfish/v1/Systems/%31", "/redfish/v1/Systems/2"].into_iter().collect();
        assert_eq!(a, b);
        assert_eq!(a.len(), 2);
        assert!(a.contains("/redfish/v1/Systems/1/"));
        let c: MemberSet = ["/redfish/v1/Systems/1", "/redfish/v1/Systems/3"].into_iter().collect();
        assert_ne!(a, c);
    }
}
