//! Reading every system a BMC serves, so that identity can be judged on all of them
//! ([`crate::identity::select`]): a UUID is the node's only if no other system of the same BMC reports it.

use super::{Answer, Bmc, Discovery, MemberSet, Unreadable};
use crate::words::discovery::Interrupted;

/// Reads the pinned system (if any), lists every member, and reads each member. `Err` only when the
/// pinned system or the collection cannot be read (with the pinned system, when it answered); a
/// member that cannot be read is recorded in [`Discovery::unreadable`], for
/// [`crate::identity::select`] to judge.
pub async fn discover<B: Bmc>(bmc: &B, pinned: Option<&str>) -> Result<Discovery, Interrupted> {
    let pinned = match pinned {
        Some(id) => Some(bmc.discover_system(id).await?),
        None => None,
    };
    let listed = match bmc.systems().await {
        Ok(listed) => listed,
        Err(error) => return Err(Interrupted { error, answered: pinned.into_iter().collect() }),
    };
    let members: MemberSet = listed.iter().collect();
    let mut discovery = Discovery { members, pinned, systems: Vec::new(), unreadable: Vec::new() };
    for member in listed.iter().map(String::as_str) {
        if discovery.answered(member) {
            continue;
        }
        match bmc.discover_system(member).await {
            Ok(system) => discovery.systems.push(Answer { member: member.to_owned(), system }),
            Err(error) => discovery.unreadable.push(Unreadable { member: member.to_owned(), error }),
        }
    }
    Ok(discovery)
}
