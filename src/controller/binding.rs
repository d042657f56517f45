//! When bindings are verified ([`driver::verifier`] does it): on every change, whenever a Secret or
//! ConfigMap a binding names appears, changes or goes, and periodically (jittered, with bounded
//! concurrency).

use std::{
    collections::{HashMap, HashSet},
    sync::{Arc, Mutex, PoisonError},
    time::Duration as StdDuration,
};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::{
    Api, ResourceExt,
    core::PartialObjectMeta,
    runtime::{
        Controller, WatchStreamExt,
        controller::{Action, Config as ControllerConfig},
        reflector::{ObjectRef, Store},
        watcher,
    },
};
use tokio_util::sync::CancellationToken;
use tracing::info;

use super::{Context, Error};
use crate::{
    api::{BmcBinding, CaBundleKind},
    driver::{self, verifier::Verified},
};

/// The binding controller, until `stop`: it watches the bindings and, metadata only (no Secret data
/// is ever held in memory), the Secrets and ConfigMaps of coroner's namespace. A change of one that
/// bindings name re-verifies those bindings at once and drops their cached Redfish clients (built
/// from the old credentials or CA bundle).
pub async fn run(ctx: Arc<Context>, stop: CancellationToken) {
    let client = ctx.client.clone();
    let namespace = ctx.namespace().to_owned();
    // Its store stripped of managed fields, as the remediations' (super::stores).
    let (store, writer) = kube::runtime::reflector::store::<BmcBinding>();
    let own = watcher(Api::<BmcBinding>::namespaced(client.clone(), &namespace), watcher::Config::default())
        .modify(super::stores::strip_managed_fields)
        .reflect(writer)
        .applied_objects();
    let controller = Controller::for_stream(own, store)
        .with_config(ControllerConfig::default().concurrency(ctx.settings.verify.concurrency));
    ctx.stores.bindings.set(controller.store());
    let changes = Arc::new(ReferenceChanges::default());
    let secrets = mapper(controller.store(), changes.clone(), ctx.clone(), CaBundleKind::Secret);
    let config_maps = mapper(controller.store(), changes.clone(), ctx.clone(), CaBundleKind::ConfigMap);
    let reconcile_changes = changes;
    controller
        .watches(
            Api::<PartialObjectMeta<Secret>>::namespaced(client.clone(), &namespace),
            watcher::Config::default(),
            move |secret| secrets(secret.metadata),
        )
        .watches(
            Api::<PartialObjectMeta<ConfigMap>>::namespaced(client, &namespace),
            watcher::Config::default(),
            move |map| config_maps(map.metadata),
        )
        .graceful_shutdown_on(stop.cancelled_owned())
        .run(move |binding, ctx| reconcile(binding, ctx, reconcile_changes.clone()), super::error_policy, ctx.clone())
        .for_each(super::settle(&ctx))
        .await;
}

type ObjectMeta = k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

fn mapper(
    bindings: Store<BmcBinding>,
    changes: Arc<ReferenceChanges>,
    ctx: Arc<Context>,
    kind: CaBundleKind,
) -> impl Fn(ObjectMeta) -> Vec<ObjectRef<BmcBinding>> + Send + Sync + 'static {
    move |meta| referring(&bindings, &changes, &ctx, kind, &meta)
}

/// The bindings that name this Secret or ConfigMap. When it changed since last seen (not its first
/// sight: the initial list, or a creation, which a binding waiting for it verifies anyway), they are
/// marked for a verification that no recent good check can skip, and their clients are dropped.
fn referring(
    bindings: &Store<BmcBinding>,
    changes: &ReferenceChanges,
    ctx: &Context,
    kind: CaBundleKind,
    meta: &ObjectMeta,
) -> Vec<ObjectRef<BmcBinding>> {
    let name = meta.name.clone().unwrap_or_default();
    let changed = changes.observe(kind, &name, meta.resource_version.as_deref());
    let referring: Vec<_> = bindings.state().into_iter().filter(|b| b.spec.refers_to(kind, &name)).collect();
    for binding in referring.iter().filter(|_| changed) {
        changes.mark(&binding.name_any());
        ctx.clients.forget(binding);
        info!(binding = %binding.name_any(), "{kind:?} {name} changed: verifying the binding again");
    }
    referring.iter().map(|b| ObjectRef::from_obj(&**b)).collect()
}

/// The versions of the Secrets and ConfigMaps seen in the namespace, and the bindings whose
/// references changed since their last verification.
#[derive(Debug, Default)]
struct ReferenceChanges {
    seen: Mutex<HashMap<(CaBundleKind, String), String>>,
    due: Mutex<HashSet<String>>,
}

impl ReferenceChanges {
    /// Records `version` of the object; whether an earlier, different version was seen (a change or
    /// a deletion). A re-list after a watch restart repeats the same versions: no change.
    fn observe(&self, kind: CaBundleKind, name: &str, version: Option<&str>) -> bool {
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        let version = version.unwrap_or_default().to_owned();
        seen.insert((kind, name.to_owned()), version.clone()).is_some_and(|before| before != version)
    }

    fn mark(&self, binding: &str) {
        self.due.lock().unwrap_or_else(PoisonError::into_inner).insert(binding.to_owned());
    }

    /// Whether the binding is due because of a reference change (and clears the mark).
    fn take(&self, binding: &str) -> bool {
        self.due.lock().unwrap_or_else(PoisonError::into_inner).remove(binding)
    }
}

async fn reconcile(
    binding: Arc<BmcBinding>,
    ctx: Arc<Context>,
    changes: Arc<ReferenceChanges>,
) -> Result<Action, Error> {
    let name = binding.name_any();
    let referenced_changed = changes.take(&name);
    let result = check(&binding, &ctx, referenced_changed).await;
    if result.is_err() && referenced_changed {
        changes.mark(&name);
    }
    result
}

/// One verification ([`driver::verifier::verify`]), due again after the jittered period.
async fn check(binding: &BmcBinding, ctx: &Context, referenced_changed: bool) -> Result<Action, Error> {
    let interval = ctx.settings.verify.interval;
    Ok(match driver::verifier::verify(ctx, &ctx.local, binding, referenced_changed, interval).await? {
        Verified::Fresh { ago } => Action::requeue(jittered(interval).saturating_sub(ago)),
        Verified::Checked { next, .. } => Action::requeue(jittered(next)),
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
    fn only_a_new_version_of_a_known_object_is_a_change() {
        let changes = ReferenceChanges::default();
        assert!(!changes.observe(CaBundleKind::Secret, "s", Some("1")), "first sight: the initial list or a creation");
        assert!(!changes.observe(CaBundleKind::Secret, "s", Some("1")), "a re-list after a watch restart");
        assert!(!changes.observe(CaBundleKind::ConfigMap, "s", Some("7")), "another kind, another object");
        assert!(changes.observe(CaBundleKind::Secret, "s", Some("2")), "an update (or the deletion's version)");
        changes.mark("b");
        assert!(changes.take("b") && !changes.take("b"), "a mark is taken once");
    }

    #[test]
    fn jitter_stays_within_ten_percent() {
        for _ in 0..100 {
            let period = jittered(StdDuration::from_secs(600));
            assert!(period >= StdDuration::from_secs(540) && period <= StdDuration::from_secs(660), "{period:?}");
        }
    }
}
