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
    let adds_finalizer = remediation.metadata.deletion_timestamp.is_none()
        && !remediation.finalizers().iter().any(|f| f == contract::FINALIZER);
    let action = finalizer::finalizer(&api, contract::FINALIZER, remediation.clone(), |event| async {
        Ok(action_of(match event {
            finalizer::Event::Apply(remediation) => driver::apply(&*ctx, &ctx.local, &remediation).await?,
            finalizer::Event::Cleanup(remediation) => driver::cleanup(&*ctx, &ctx.local, &remediation).await?,
        }))
    })
    .instrument(span.clone())
    .await
    .map_err(|e| Error::Finalizer(Box::new(e)))?;
    if !adds_finalizer {
        return Ok(action);
    }
    // The helper's success here is the finalizer added, and it leaves the fence to that patch's watch
    // event; the fence begins now instead (`driver::apply` reads the remediation afresh).
    Ok(action_of(driver::apply(&*ctx, &ctx.local, &remediation).instrument(span).await?))
}

fn action_of(next: Next) -> Action {
    match next {
        Next::Requeue(after) => Action::requeue(after),
        Next::AwaitChange => Action::await_change(),
    }
}

#[cfg(test)]
mod tests {
    use http::{Request, Response};
    use kube::{Client, client::Body};
    use serde_json::json;

    use super::*;

    fn remediation(finalizers: &[&str]) -> serde_json::Value {
        json!({
            "apiVersion": "coroner.dev/v1alpha1", "kind": "CoronerRemediation",
            "metadata": {"name": "worker-1", "namespace": "coroner-system", "uid": "u1",
                         "resourceVersion": "7", "finalizers": finalizers},
            "spec": {},
        })
    }

    /// Runs a reconcile of a new remediation against a mock API server that answers the finalizer's
    /// patch and fails the request after it; what was sent, method and path.
    async fn first_reconcile() -> (Result<Action, Error>, Vec<String>) {
        let (mock, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let ctx = Arc::new(super::super::world::tests::context(Client::new(mock, "default")));
        let server = tokio::spawn(async move {
            let mut sent = Vec::new();
            while let Some((request, respond)) = handle.next_request().await {
                sent.push(format!("{} {}", request.method(), request.uri().path()));
                let response = match sent.len() {
                    1 => Response::builder()
                        .body(Body::from(serde_json::to_vec(&remediation(&[contract::FINALIZER])).unwrap())),
                    _ => Response::builder().status(500).body(Body::from(b"{}".to_vec())),
                };
                respond.send_response(response.unwrap());
            }
            sent
        });
        let new: CoronerRemediation = serde_json::from_value(remediation(&[])).unwrap();
        let result = reconcile(Arc::new(new), ctx).await;
        (result, server.await.unwrap())
    }

    #[tokio::test]
    async fn a_new_remediation_is_fenced_in_the_reconcile_that_adds_its_finalizer() {
        let (result, sent) = first_reconcile().await;
        // The request after the patch is the fence's first (the queue look's list: this context has
        // no stores); failed here, it fails the reconcile, and nothing follows it.
        assert!(result.is_err());
        let remediations = "/apis/coroner.dev/v1alpha1/namespaces/coroner-system/coronerremediations";
        assert_eq!(sent, [format!("PATCH {remediations}/worker-1"), format!("GET {remediations}")]);
    }
}
