//! Continuous BmcBinding verification: on every change, whenever a Secret or ConfigMap a binding
//! names appears, changes or goes, and periodically (jittered, with bounded concurrency), check
//! reachability, TLS, credentials, identity (the fence's UUID rules) and power. An early warning,
//! not a substitute: every fence proves identity afresh. Never sends a mutation.

use std::{
    collections::{HashMap, HashSet},
    sync::{Arc, Mutex, PoisonError},
    time::{Duration as StdDuration, Instant},
};

use futures::StreamExt;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Secret};
use kube::{
    Api, Resource, ResourceExt,
    api::{ListParams, Patch, PatchParams, PostParams},
    core::PartialObjectMeta,
    runtime::{
        Controller, WatchStreamExt,
        controller::{Action, Config as ControllerConfig},
        reflector::{ObjectRef, Store},
        watcher,
    },
};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::{Context, Error};
use crate::{
    api::{BmcBinding, CaBundleKind, CoronerRemediationSpec, CoronerRemediationTemplate},
    contract::Reason,
    driver::{
        self,
        ports::{Events, Target},
    },
    fence::IdentityProblem,
    gates, identity,
    verification::{self, Check},
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

async fn check(binding: &BmcBinding, ctx: &Context, referenced_changed: bool) -> Result<Action, Error> {
    let interval = ctx.settings.verify.interval;
    if !referenced_changed
        && let Some(ago) =
            verification::fresh_check(binding.status.as_ref(), binding.metadata.generation, Timestamp::now(), interval)
    {
        return Ok(Action::requeue(jittered(interval).saturating_sub(ago)));
    }
    let name = binding.name_any();
    let api: Api<BmcBinding> = Api::namespaced(ctx.client.clone(), ctx.namespace());
    let all = api.list(&ListParams::default()).await?.items;
    // Two bindings of one node: no reading tells which is meant. Two nodes' bindings on one BMC:
    // the identity read does ([`gates::conflict_settled_by_identity`]).
    let conflicts = gates::binding_conflicts(&all).remove(&name).unwrap_or_default();
    let (check, content, latency, asked) =
        match conflicts.iter().find(|c| matches!(c, gates::Conflict::SameNode { .. })) {
            Some(conflict) => (Check::Conflict(conflict.to_string()), None, None, None),
            None => verify(ctx, binding, &all).await?,
        };
    let next = verification::next_check(&check, interval);
    let mut status = binding.status.clone().unwrap_or_default();
    let mut notices = verification::record(&mut status, &check, binding, content, Timestamp::now());
    if let Some(latency) = latency {
        let (poll_interval, _) = shortest_timing(ctx).await?;
        notices.extend(verification::record_latency(&mut status, binding, latency, poll_interval, Timestamp::now()));
    }
    let asked = asked.unwrap_or_else(Instant::now);
    let confirmed = observe_levels(ctx, binding, &check, asked, &mut status).await?;
    notices.extend(verification::record_levels(&mut status, binding, &all, &confirmed, Timestamp::now()));
    if binding.status.as_ref() != Some(&status) {
        let patch = verification::status_patch(binding.status.as_ref(), &status);
        api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch)).await?;
    }
    // Only a verification this check made is kept (never a status carried over from before).
    if matches!(check, Check::Read { identity: Ok(_), .. })
        && let Some(kept) = verification::to_keep(binding, &status)
    {
        keep_verification(ctx, &binding.spec.node_name, kept).await;
    }
    for notice in &notices {
        info!(binding = %name, reason = %notice.reason, "{}", notice.message);
        ctx.publish(&binding.object_ref(&()), notice, "Verify").await;
    }
    Ok(Action::requeue(jittered(next)))
}

/// A2: keeps the binding's verification for its node beyond the binding object (the ConfigMap
/// [`verification::KEPT_VERIFICATIONS`], sealed), when it is not what this process last kept in this
/// leadership term. Read, compared and written under the ConfigMap's resourceVersion: only a later
/// verification replaces the node's entry ([`verification::replaces_kept`]). A failure is logged and
/// tried again at the next verification; until then the entry is the node's earlier verification.
async fn keep_verification(ctx: &Context, node: &str, mut kept: verification::KeptVerification) {
    let key = (kept.content.clone(), kept.uid.clone());
    let lock = || ctx.kept_verifications.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if lock().get(node) == Some(&key) {
        return;
    }
    kept.seal = ctx.clients.seal_parts(&kept.sealed_parts(node));
    let mut written = keep_once(ctx, node, &kept).await;
    if matches!(&written, Err(kube::Error::Api(e)) if e.code == 409) {
        written = keep_once(ctx, node, &kept).await;
    }
    match written {
        Ok(()) => {
            lock().insert(node.to_owned(), key);
        }
        Err(error) => warn!(%node, %error, "could not keep the binding's verification beyond its object (A2)"),
    }
}

/// One read-compare-write of the node's kept verification (a conflict: another writer came first).
async fn keep_once(ctx: &Context, node: &str, kept: &verification::KeptVerification) -> Result<(), kube::Error> {
    let api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), ctx.namespace());
    let name = verification::KEPT_VERIFICATIONS;
    let value = kept.to_value();
    let Some(map) = api.get_opt(name).await? else {
        let mut map = ConfigMap {
            data: Some(std::collections::BTreeMap::from([(node.to_owned(), value)])),
            ..ConfigMap::default()
        };
        map.metadata.name = Some(name.into());
        return api.create(&PostParams::default(), &map).await.map(drop);
    };
    let current = map.data.as_ref().and_then(|d| d.get(node)).and_then(|v| verification::KeptVerification::parse(v));
    let sealed = current.as_ref().is_some_and(|c| ctx.clients.seal_parts(&c.sealed_parts(node)) == c.seal);
    if !verification::replaces_kept(current.as_ref(), sealed, kept) {
        return Ok(());
    }
    let patch = serde_json::json!({
        "metadata": { "resourceVersion": map.metadata.resource_version },
        "data": { node: value },
    });
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch)).await.map(drop)
}

/// L5: with the machine's power just read through its verified system (the BMC asked at `asked`),
/// every level's outlets are read (never switched) and what their draws say of the mapping is
/// recorded, sealed with the content key; with the machine Off, an agreement counts only from a look
/// begun within settle of `asked`, and a level with an outlet still drawing is read again while the
/// next look begins within it ([`levels::look_again`]). Returns, per level, the generation a sealed
/// confirmation confirms it at.
async fn observe_levels(
    ctx: &Context,
    binding: &BmcBinding,
    check: &Check,
    asked: Instant,
    status: &mut crate::api::BmcBindingStatus,
) -> Result<Vec<Option<i64>>, Error> {
    use crate::{
        driver::ports::Level,
        levels::{self, MachineSeen, OutletDraw},
    };
    let generation = binding.metadata.generation.unwrap_or_default();
    let uid = binding.uid().unwrap_or_default();
    let seen = match check {
        Check::Read { identity: Ok(_), power_state, .. } if power_state == "Off" => Some(MachineSeen::Off),
        Check::Read { identity: Ok(_), power_state, .. } if power_state == "On" => {
            let node = Api::<Node>::all(ctx.client.clone()).get_opt(&binding.spec.node_name).await?;
            let ready =
                node.as_ref().and_then(|n| n.status.as_ref()?.conditions.as_ref()?.iter().find(|c| c.type_ == "Ready"));
            Some(MachineSeen::On { ready: ready.is_some_and(|c| c.status == "True") })
        }
        Check::Read { identity: Ok(_), .. } => Some(MachineSeen::Other),
        _ => None,
    };
    // The window of an Off agreement (None: the templates could not be listed, and no Off agreement
    // is taken).
    let timing = match seen {
        Some(MachineSeen::Off) if !binding.spec.pdu_levels.is_empty() => shortest_timing(ctx).await.ok(),
        _ => None,
    };
    let window = timing.map(|(_, settle)| levels::off_window(settle));
    for number in (2u32..).take(binding.spec.pdu_levels.len()) {
        let Some(seen) = seen else { break };
        let Ok((devices, _)) = ctx.clients.level(&ctx.client, binding, number).await? else { continue };
        let read = || async {
            let mut draws = Vec::new();
            for (index, (outlet, floor_watts)) in devices.outlets().into_iter().enumerate() {
                // An outlet not read now says nothing: the level is looked at again next time.
                let reading = devices.read(index).await.ok()?;
                draws.push(OutletDraw { outlet, floor_watts, watts: reading.watts });
            }
            Some(draws)
        };
        let begun = asked.elapsed();
        let Some(draws) = read().await else { continue };
        let mut observation = levels::within_window(levels::observe_mapping(seen, &draws), begun, window);
        if let (Some((poll, _)), Some(window)) = (timing, window) {
            while levels::look_again(seen, &observation, asked.elapsed() + poll, window) {
                tokio::time::sleep(poll).await;
                let begun = asked.elapsed();
                // A look again that cannot read every outlet leaves the contradiction seen standing.
                let Some(draws) = read().await else { break };
                observation = levels::within_window(levels::observe_mapping(seen, &draws), begun, Some(window));
            }
        }
        let old = status.level_confirmations.iter().find(|c| c.level == number).cloned();
        if let Some(mut next) =
            levels::next_confirmation(old.as_ref(), number, generation, &observation, Timestamp::now())
        {
            next.seal = Some(ctx.clients.seal(&uid, &next));
            status.level_confirmations.retain(|c| c.level != number);
            status.level_confirmations.push(next);
        }
    }
    let count = binding.spec.pdu_levels.len();
    status.level_confirmations.retain(|c| c.level >= 2 && ((c.level - 2) as usize) < count);
    status.level_confirmations.sort_by_key(|c| c.level);
    Ok((2u32..)
        .take(count)
        .map(|level| {
            status
                .level_confirmations
                .iter()
                .find(|c| c.level == level)
                .filter(|c| c.seal.as_deref() == Some(ctx.clients.seal(&uid, c).as_str()))
                .filter(|c| levels::confirms(c, binding.metadata.generation))
                .and(binding.metadata.generation)
        })
        .collect())
}

/// The shortest `pollInterval` and the shortest `settle` of the namespace's templates (the defaults
/// without one): what the binding's read latency must fit (docs/safety.md P4), and the window of an
/// Off agreement (L5).
async fn shortest_timing(ctx: &Context) -> Result<(StdDuration, StdDuration), Error> {
    let api: Api<CoronerRemediationTemplate> = Api::namespaced(ctx.client.clone(), ctx.namespace());
    let templates = api.list(&ListParams::default()).await?.items;
    let specs = || templates.iter().map(|t| &t.spec.template.spec);
    let defaults = CoronerRemediationSpec::default();
    let poll = specs().map(|s| s.poll_interval.get()).min().unwrap_or_else(|| defaults.poll_interval.get());
    let settle = specs().map(|s| s.settle.get()).min().unwrap_or_else(|| defaults.settle.get());
    Ok((poll, settle))
}

/// The identity check, the content it was made with (A2), how long one power reading of the
/// verified system took (P4: measured before any outage), and when the BMC was asked for the check's
/// reading.
async fn verify(
    ctx: &Context,
    binding: &BmcBinding,
    all: &[BmcBinding],
) -> Result<(Check, Option<u64>, Option<StdDuration>, Option<Instant>), Error> {
    let (check, path, content, asked) = identify(ctx, binding, all).await?;
    let (Check::Read { identity: Ok(_), .. }, Some(path)) = (&check, path) else {
        return Ok((check, content, None, asked));
    };
    let client = match ctx.clients.client(&ctx.client, binding).await? {
        Ok(client) => client,
        Err(_) => return Ok((check, content, None, asked)),
    };
    let started = Instant::now();
    let latency = client.0.read(&path).await.is_ok().then(|| started.elapsed());
    Ok((check, content, latency, asked))
}

/// What the BMC says of the binding's node, the verified system's path when it answered, the device
/// digest of the client it answered through, and when the BMC was asked (right before the reads that
/// find the system and its power).
pub(super) async fn identify(
    ctx: &Context,
    binding: &BmcBinding,
    all: &[BmcBinding],
) -> Result<(Check, Option<String>, Option<u64>, Option<Instant>), Error> {
    let client = match ctx.clients.client(&ctx.client, binding).await? {
        Ok(client) => client,
        Err(unusable) => return Ok((Check::Invalid(unusable.to_string()), None, None, None)),
    };
    let content = Some(client.1);
    let node_name = &binding.spec.node_name;
    let node = Api::<Node>::all(ctx.client.clone()).get_opt(node_name).await?;
    let node_uuid = node.and_then(|n| n.status?.node_info).map(|i| i.system_uuid).unwrap_or_default();
    let asked = Some(Instant::now());
    let system = match driver::node_system(ctx, binding, &client.0, &node_uuid, "verify").await {
        Ok(system) => system,
        Err(IdentityProblem::Binding { reason: Reason::IdentityMismatch, message, .. }) => {
            return Ok((Check::NoNodeSystem(message), None, content, asked));
        }
        Err(IdentityProblem::Binding { reason, message, .. }) => {
            return Ok((Check::Refused { reason, message }, None, content, asked));
        }
        Err(IdentityProblem::Bmc(failure)) => {
            return Ok((Check::Failed { reason: failure.reason, message: failure.message }, None, content, asked));
        }
    };
    let peers = driver::origin_peers(ctx, binding, all).await?;
    if let Err(message) =
        gates::conflict_settled_by_identity(&binding.name_any(), node_name, &node_uuid, &system.uuid, &peers)
    {
        return Ok((Check::Refused { reason: Reason::BindingConflict, message }, None, content, asked));
    }
    let claims = driver::claims(ctx, node_name, binding).await?;
    let verdict = identity::prove(&node_uuid, &system.uuid, &claims)
        .and_then(|matched| identity::other_spellings_clear(&system.aliases, &claims).map(|()| matched))
        .map_err(|refusal| (refusal.reason(), refusal.to_string()));
    let read = Check::Read {
        system_id: system.id,
        uuid: system.uuid,
        power_state: system.power_state.to_string(),
        identity: verdict,
    };
    Ok((read, Some(system.path), content, asked))
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
