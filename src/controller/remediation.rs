//! The remediation controller: kube-runtime's finalizer around the one fence loop ([`driver`]).

use std::sync::Arc;

use kube::{
    ResourceExt,
    runtime::{controller::Action, finalizer},
};
use tracing::{Instrument, info_span};

use super::{Context, Error};
use crate::{
    api::CoronerRemediation,
    contract,
    driver::{self, Next},
};

pub async fn reconcile(remediation: Arc<CoronerRemediation>, ctx: Arc<Context>) -> Result<Action, Error> {
    let api = ctx.remediations_api();
    let node = contract::node_name(&remediation.metadata).unwrap_or_default().to_owned();
    let span = info_span!("remediation", name = %remediation.name_any(), node = %node);
    finalizer::finalizer(&api, contract::FINALIZER, remediation, |event| async {
        let next = match event {
            finalizer::Event::Apply(remediation) => driver::apply(&*ctx, &ctx.local, &remediation).await?,
            finalizer::Event::Cleanup(remediation) => driver::cleanup(&*ctx, &ctx.local, &remediation).await?,
        };
        Ok(match next {
            Next::Requeue(after) => Action::requeue(after),
            Next::AwaitChange => Action::await_change(),
        })
    })
    .instrument(span)
    .await
    .map_err(|e| Error::Finalizer(Box::new(e)))
}
