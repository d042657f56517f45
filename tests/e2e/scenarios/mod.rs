//! The e2e scenarios, a file per area; each scenario is named by its behaviour (`make e2e ONLY=name,…`).

mod attestation;
mod bindings;
mod cli;
mod fence;
mod gates;
mod guard;
mod leadership;
mod levels;
mod whole_run;

pub(crate) use attestation::*;
pub(crate) use bindings::*;
pub(crate) use cli::*;
pub(crate) use fence::*;
pub(crate) use gates::*;
pub(crate) use guard::*;
pub(crate) use leadership::*;
pub(crate) use levels::*;
pub(crate) use whole_run::*;
