//! Continuous BmcBinding verification: on every change and periodically (jittered, with bounded
//! concurrency), check reachability, TLS, credentials, identity (the fence's UUID rules) and power.
//! An early warning, not a substitute: every fence proves identity afresh. Never sends a mutation.

use std::{sync::Arc, time::Duration as StdDuration};

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Node;
use kube::{
    Api, Resource, ResourceExt,
    api::{ListParams, Patch, PatchParams},
    runtime::controller::Action,
};
use tracing::info;

use super::{Context, Error};
use crate::{
    api::BmcBinding,
    driver::{self, ports::Events},
    fence::IdentityProblem,
    gates, identity,
    verification::{self, Check},
};

pub async fn reconcile(binding: Arc<BmcBinding>, ctx: Arc<Context>) -> Result<Action, Error> {
    let interval = ctx.settings.verify.interval;
    if let Some(ago) =
        verification::fresh_check(binding.status.as_ref(), binding.metadata.generation, Timestamp::now(), interval)
    {
        return Ok(Action::requeue(jittered(interval).saturating_sub(ago)));
    }
    let name = binding.name_any();
    let api: Api<BmcBinding> = Api::namespaced(ctx.client.clone(), ctx.namespace());
    let all = api.list(&ListParams::default()).await?.items;
    let check = match gates::binding_conflicts(&all).remove(&name) {
        Some(why) => Check::Conflict(why),
        None => verify(&ctx, &binding).await?,
    };
    let mut status = binding.status.clone().unwrap_or_default();
    let notices = verification::record(&mut status, &check, &binding, Timestamp::now());
    if binding.status.as_ref() != Some(&status) {
        let patch = serde_json::json!({ "status": status });
        api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch)).await?;
    }
    for notice in &notices {
        info!(binding = %name, reason = %notice.reason, "{}", notice.message);
        ctx.publish(&binding.object_ref(&()), notice, "Verify").await;
    }
    Ok(Action::requeue(jittered(interval)))
}

async fn verify(ctx: &Context, binding: &BmcBinding) -> Result<Check, Error> {
    let client = match ctx.redfish_client(binding).await? {
        Ok(client) => client,
        Err(message) => return Ok(Check::Invalid(message)),
    };
    let node_name = &binding.spec.node_name;
    let node = Api::<Node>::all(ctx.client.clone()).get_opt(node_name).await?;
    let node_uuid = node.and_then(|n| n.status?.node_info).map(|i| i.system_uuid).unwrap_or_default();
    let system = match driver::node_system(ctx, binding, &client, &node_uuid, "verify").await {
        Ok(system) => system,
        Err(IdentityProblem::Binding { message, .. }) => return Ok(Check::NoNodeSystem(message)),
        Err(IdentityProblem::Bmc(failure)) => {
            return Ok(Check::Failed { reason: failure.reason, message: failure.message });
        }
    };
    let claims = driver::claims(ctx, node_name, binding).await?;
    let verdict =
        identity::prove(&node_uuid, &system.uuid, &claims).map_err(|refusal| (refusal.reason(), refusal.to_string()));
    Ok(Check::Read {
        system_id: system.id,
        uuid: system.uuid,
        power_state: system.power_state.to_string(),
        identity: verdict,
    })
}

/// The verification period ±10 %, so bindings created together do not hit their BMCs together.
fn jittered(interval: StdDuration) -> StdDuration {
    let random = uuid::Uuid::new_v4().as_u128() % 1000;
    let factor = 0.9 + 0.2 * (random as f64 / 1000.0);
    interval.mul_f64(factor)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jitter_stays_within_ten_percent() {
        for _ in 0..100 {
            let period = jittered(StdDuration::from_secs(600));
            assert!(period >= StdDuration::from_secs(540) && period <= StdDuration::from_secs(660), "{period:?}");
        }
    }
}
