//! The fence loop's traits on the real cluster (kube) and the real BMCs (reqwest).

use std::time::Duration as StdDuration;

use jiff::Timestamp;
use k8s_openapi::api::{
    admissionregistration::v1::{ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding},
    core::v1::{ConfigMap, Node, ObjectReference, Pod},
    storage::v1::VolumeAttachment,
};
use kube::{
    Api, ResourceExt,
    api::{DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions},
    runtime::events::{Event, EventType},
};
use tracing::warn;

use super::Context;
use crate::{
    access::{Device, LevelDevices, Unusable},
    api::{
        BmcBinding, BmcBindingStatus, CoronerAttestation, CoronerAttestationStatus, CoronerRemediation,
        CoronerRemediationStatus, CoronerRemediationTemplate,
    },
    cluster,
    driver::{
        ApiResult, LoopSettings, World,
        ports::{Attestations, Clock, Cluster, Devices, Events, Leadership, Listing, NodeLeases, Nodes, Remediations},
    },
    fence::{Mono, Notice},
    gates::LeaseSighting,
    leader,
    telemetry::Metrics,
    verification,
};

/// A JSON merge patch that writes `wanted`'s taints and annotations over `current`'s, under
/// `current`'s resourceVersion (the API server refuses it with a conflict if the Node changed since).
pub fn node_patch(current: &Node, wanted: &Node) -> serde_json::Value {
    let before = current.metadata.annotations.clone().unwrap_or_default();
    let after = wanted.metadata.annotations.clone().unwrap_or_default();
    let mut annotations = serde_json::Map::new();
    for key in before.keys().filter(|k| !after.contains_key(*k)) {
        annotations.insert(key.clone(), serde_json::Value::Null);
    }
    for (key, value) in after.iter().filter(|(k, v)| before.get(*k) != Some(*v)) {
        annotations.insert(key.clone(), serde_json::Value::String(value.clone()));
    }
    let taints = wanted.spec.as_ref().and_then(|s| s.taints.clone()).unwrap_or_default();
    serde_json::json!({
        "metadata": { "resourceVersion": current.resource_version(), "annotations": annotations },
        "spec": { "taints": taints },
    })
}

impl Clock for Context {
    fn now(&self) -> Timestamp {
        Timestamp::now()
    }

    fn mono(&self) -> Mono {
        self.started.elapsed()
    }

    async fn sleep(&self, duration: StdDuration) {
        tokio::time::sleep(duration).await;
    }
}

impl Remediations for Context {
    async fn remediation(&self, name: &str) -> ApiResult<Option<CoronerRemediation>> {
        Ok(self.remediations_api().get_opt(name).await?)
    }

    async fn remediations(&self, from: Listing) -> ApiResult<Vec<CoronerRemediation>> {
        let stored = if from == Listing::Stored { self.stores.remediations.read().await } else { None };
        match stored {
            Some(stored) => stored,
            None => Ok(self.remediations_api().list(&ListParams::default()).await?.items),
        }
    }

    async fn write_status(
        &self,
        current: &CoronerRemediation,
        status: CoronerRemediationStatus,
    ) -> ApiResult<CoronerRemediation> {
        Ok(cluster::persist_status(&self.remediations_api(), current, status).await?)
    }
}

impl Nodes for Context {
    async fn node(&self, name: &str) -> ApiResult<Option<Node>> {
        Ok(Api::<Node>::all(self.client.clone()).get_opt(name).await?)
    }

    async fn nodes(&self, from: Listing) -> ApiResult<Vec<Node>> {
        let stored = if from == Listing::Stored { self.stores.nodes.read().await } else { None };
        match stored {
            Some(stored) => stored,
            None => Ok(Api::<Node>::all(self.client.clone()).list(&ListParams::default()).await?.items),
        }
    }

    async fn system_uuids(&self, from: Listing) -> ApiResult<Vec<(String, String)>> {
        let stored = if from == Listing::Stored {
            self.stores.nodes.project(crate::driver::ports::system_uuid_of).await
        } else {
            None
        };
        match stored {
            Some(stored) => stored,
            None => Ok(Api::<Node>::all(self.client.clone())
                .list(&ListParams::default())
                .await?
                .items
                .iter()
                .map(crate::driver::ports::system_uuid_of)
                .collect()),
        }
    }

    async fn patch_node(&self, current: &Node, wanted: &Node) -> ApiResult<Node> {
        let patch = node_patch(current, wanted);
        Ok(Api::<Node>::all(self.client.clone())
            .patch(&current.name_any(), &PatchParams::default(), &Patch::Merge(&patch))
            .await?)
    }
}

impl NodeLeases for Context {
    async fn node_lease(&self, node: &str) -> ApiResult<Option<Option<Timestamp>>> {
        Ok(cluster::node_lease(&self.client, node).await?)
    }

    fn lease_sighting(&self, node: &str, now: Mono) -> LeaseSighting {
        self.leases.sighting(node, now)
    }
}

impl Leadership for Context {
    fn instance(&self) -> String {
        self.instance()
    }

    fn own_node(&self) -> Option<&str> {
        self.settings.node_name.as_deref()
    }

    fn leading(&self) -> bool {
        self.leading.load(std::sync::atomic::Ordering::Acquire)
    }

    async fn ensure_leader(&self, need: StdDuration) -> Result<(), leader::Refusal> {
        match &self.settings.election {
            Some(election) => election.ensure_leader(&self.client, need).await,
            None => Ok(()),
        }
    }

    async fn hand_over(&self, node_to_fence: &str) -> ApiResult<bool> {
        super::leader::hand_over(self, node_to_fence).await
    }
}

impl Cluster for Context {
    async fn bindings(&self, from: Listing) -> ApiResult<Vec<BmcBinding>> {
        let stored = if from == Listing::Stored { self.stores.bindings.read().await } else { None };
        match stored {
            Some(stored) => stored,
            None => Ok(self.bindings_api().list(&ListParams::default()).await?.items),
        }
    }

    async fn binding(&self, name: &str) -> ApiResult<Option<BmcBinding>> {
        Ok(self.bindings_api().get_opt(name).await?)
    }

    async fn stored_binding(&self, name: &str) -> ApiResult<Option<BmcBinding>> {
        match self.stores.bindings.get(name, self.namespace()).await {
            Some(stored) => stored,
            None => self.binding(name).await,
        }
    }

    async fn kept_verification(&self, node: &str) -> ApiResult<Option<verification::KeptVerification>> {
        let api: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(self.client.clone(), self.namespace());
        let kept = api.get_opt(verification::KEPT_VERIFICATIONS).await?;
        Ok(kept.and_then(|c| c.data?.get(node).and_then(|v| verification::KeptVerification::parse(v))))
    }

    async fn kept_record(&self, node: &str) -> ApiResult<(Option<verification::KeptVerification>, Option<String>)> {
        let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), self.namespace());
        let Some(map) = api.get_opt(verification::KEPT_VERIFICATIONS).await? else { return Ok((None, None)) };
        let kept = map.data.as_ref().and_then(|d| d.get(node)).and_then(|v| verification::KeptVerification::parse(v));
        Ok((kept, map.metadata.resource_version))
    }

    async fn write_kept(
        &self,
        node: &str,
        kept: &verification::KeptVerification,
        version: Option<&str>,
    ) -> ApiResult<()> {
        let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), self.namespace());
        let name = verification::KEPT_VERIFICATIONS;
        let value = kept.to_value();
        let Some(version) = version else {
            let mut map = ConfigMap {
                data: Some(std::collections::BTreeMap::from([(node.to_owned(), value)])),
                ..ConfigMap::default()
            };
            map.metadata.name = Some(name.into());
            return Ok(api.create(&PostParams::default(), &map).await.map(drop)?);
        };
        let patch = serde_json::json!({ "metadata": { "resourceVersion": version }, "data": { node: value } });
        Ok(api.patch(name, &PatchParams::default(), &Patch::Merge(&patch)).await.map(drop)?)
    }

    async fn templates(&self) -> ApiResult<Vec<CoronerRemediationTemplate>> {
        let api: Api<CoronerRemediationTemplate> = Api::namespaced(self.client.clone(), self.namespace());
        Ok(api.list(&ListParams::default()).await?.items)
    }

    async fn write_binding_status(
        &self,
        name: &str,
        old: Option<&BmcBindingStatus>,
        new: &BmcBindingStatus,
    ) -> ApiResult<()> {
        let patch = verification::status_patch(old, new);
        self.bindings_api().patch_status(name, &PatchParams::default(), &Patch::Merge(&patch)).await?;
        Ok(())
    }

    async fn etcd_pods(&self, from: Listing) -> ApiResult<Vec<Pod>> {
        let stored = if from == Listing::Stored { self.stores.etcd_pods.read().await } else { None };
        if let Some(stored) = stored {
            return Ok(stored?
                .into_iter()
                .filter(|p| p.metadata.namespace.as_deref() == Some("kube-system"))
                .collect());
        }
        let pods = Api::<Pod>::namespaced(self.client.clone(), "kube-system");
        Ok(pods.list(&ListParams::default().labels("component=etcd")).await?.items)
    }

    async fn pods_on(&self, node: &str) -> ApiResult<Vec<Pod>> {
        Ok(cluster::pods_on(&self.client, node).await?)
    }

    async fn delete_pod(&self, pod: &Pod) -> ApiResult<()> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &pod.namespace().unwrap_or_default());
        let params = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions { uid: pod.metadata.uid.clone(), resource_version: None }),
            ..DeleteParams::default()
        };
        api.delete(&pod.name_any(), &params).await?;
        Ok(())
    }

    async fn volume_attachments_on(&self, node: &str) -> ApiResult<usize> {
        let attachments: Api<VolumeAttachment> = Api::all(self.client.clone());
        let all = attachments.list(&ListParams::default()).await?.items;
        Ok(all.iter().filter(|va| va.spec.node_name == node).count())
    }
}

impl Attestations for Context {
    async fn attestation(&self, name: &str) -> ApiResult<Option<CoronerAttestation>> {
        Ok(self.attestations_api().get_opt(name).await?)
    }

    async fn attestations(&self) -> ApiResult<Vec<CoronerAttestation>> {
        Ok(self.attestations_api().list(&ListParams::default()).await?.items)
    }

    async fn write_attestation_status(
        &self,
        current: &CoronerAttestation,
        status: CoronerAttestationStatus,
    ) -> ApiResult<CoronerAttestation> {
        let mut updated = current.clone();
        updated.status = Some(status);
        Ok(self.attestations_api().replace_status(&current.name_any(), &PostParams::default(), &updated).await?)
    }

    async fn admission_policies(
        &self,
    ) -> ApiResult<(Vec<ValidatingAdmissionPolicy>, Vec<ValidatingAdmissionPolicyBinding>)> {
        let hidden = |e: &kube::Error| matches!(e, kube::Error::Api(s) if s.code == 403 || s.code == 404);
        let policies =
            match Api::<ValidatingAdmissionPolicy>::all(self.client.clone()).list(&ListParams::default()).await {
                Ok(list) => list.items,
                Err(e) if hidden(&e) => {
                    warn!(error = %e, "cannot list ValidatingAdmissionPolicies: attestations are ignored");
                    Vec::new()
                }
                Err(e) => return Err(e.into()),
            };
        let bindings = match Api::<ValidatingAdmissionPolicyBinding>::all(self.client.clone())
            .list(&ListParams::default())
            .await
        {
            Ok(list) => list.items,
            Err(e) if hidden(&e) => Vec::new(),
            Err(e) => return Err(e.into()),
        };
        Ok((policies, bindings))
    }
}

impl Events for Context {
    async fn publish(&self, regarding: &ObjectReference, notice: &Notice, action: &str) {
        let event = Event {
            type_: if notice.warning { EventType::Warning } else { EventType::Normal },
            reason: notice.reason.clone(),
            note: Some(notice.message.chars().take(1000).collect()),
            action: action.to_owned(),
            secondary: None,
        };
        self.events.tell(event, regarding.clone()).await;
    }
}

impl Devices for Context {
    type Target = Device;
    type Level = LevelDevices;

    async fn level(&self, binding: &BmcBinding, level: u32) -> ApiResult<Result<(LevelDevices, u64), Unusable>> {
        Ok(self.clients.level(&self.client, binding, level).await?)
    }

    async fn target(&self, binding: &BmcBinding) -> ApiResult<Result<(Device, u64), Unusable>> {
        Ok(self.clients.client(&self.client, binding).await?)
    }

    fn seal(&self, binding: &BmcBinding, confirmation: &crate::api::LevelConfirmation) -> String {
        self.clients.seal(&binding.uid().unwrap_or_default(), confirmation)
    }

    fn seal_kept(&self, node: &str, kept: &verification::KeptVerification) -> String {
        self.clients.seal_parts(&kept.sealed_parts(node))
    }

    fn forget_target(&self, binding: &BmcBinding) {
        self.clients.forget(binding);
    }
}

impl World for Context {
    fn settings(&self) -> &LoopSettings {
        &self.fence
    }

    fn metrics(&self) -> &Metrics {
        &self.metrics
    }
}

/// The requests as sent (kube-rs `controller-rs` style): a mock apiserver behind the real kube client
/// sees the method, the path, the content type and the body of what the production traits send.
#[cfg(test)]
pub(super) mod tests {
    use http::{Request, Response};
    use kube::{Client, client::Body};
    use serde_json::json;

    use super::*;
    use crate::{
        access::BmcSettings,
        controller::{Settings, VerifySettings},
        gates::StormLimits,
    };

    pub(in crate::controller) fn context(client: Client) -> Context {
        let settings = Settings {
            namespace: "coroner-system".into(),
            instance: "test".into(),
            content_key: crate::access::ContentKey::new(b"test"),
            bmc: BmcSettings {
                request_timeout: StdDuration::from_secs(5),
                read_retries: 1,
                retry_backoff: StdDuration::from_millis(1),
            },
            limits: StormLimits { max_concurrent: 1, max_per_window: 1, window: StdDuration::from_secs(60) },
            verify: VerifySettings { interval: StdDuration::from_secs(60), concurrency: 1 },
            guard_interval: StdDuration::from_secs(10),
            election: None,
            node_name: None,
            pod_name: None,
        };
        Context::new(client, settings, Metrics::new().0)
    }

    /// Runs `call` against a mock apiserver that answers its one request with `answer` and returns
    /// what was sent: method, path and query, content type, body.
    async fn sent<T>(
        answer: serde_json::Value,
        call: impl AsyncFnOnce(&Context) -> T,
    ) -> (T, (String, String, String, serde_json::Value)) {
        let (mock, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let ctx = context(Client::new(mock, "default"));
        let server = tokio::spawn(async move {
            let (request, respond) = handle.next_request().await.expect("one request");
            let method = request.method().to_string();
            let uri = request.uri().to_string();
            let kind =
                request.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
            let bytes = request.into_body().collect_bytes().await.expect("body");
            let body = if bytes.is_empty() { serde_json::Value::Null } else { serde_json::from_slice(&bytes).unwrap() };
            respond.send_response(Response::builder().body(Body::from(serde_json::to_vec(&answer).unwrap())).unwrap());
            (method, uri, kind, body)
        });
        let result = call(&ctx).await;
        (result, server.await.unwrap())
    }

    fn node(version: &str, taints: serde_json::Value, annotations: serde_json::Value) -> Node {
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "worker-1", "resourceVersion": version, "annotations": annotations},
            "spec": {"taints": taints},
        }))
        .unwrap()
    }

    #[tokio::test]
    async fn a_node_write_is_a_merge_patch_of_its_taints_and_annotations_under_the_version_it_was_read_at() {
        let current = node("41", json!([]), json!({"coroner.dev/power-on-approved": "x alice: ok", "keep": "1"}));
        let taint = json!({"key": "node.kubernetes.io/out-of-service", "value": "nodeshutdown", "effect": "NoExecute"});
        let wanted = node("41", json!([taint]), json!({"keep": "1"}));
        let answer = serde_json::to_value(&wanted).unwrap();
        let (written, (method, uri, kind, body)) =
            sent(answer, async |ctx| ctx.patch_node(&current, &wanted).await).await;
        assert!(written.is_ok(), "{written:?}");
        assert_eq!((method.as_str(), uri.as_str()), ("PATCH", "/api/v1/nodes/worker-1?"));
        assert_eq!(kind, "application/merge-patch+json");
        assert_eq!(
            body,
            json!({
                "metadata": {"resourceVersion": "41", "annotations": {"coroner.dev/power-on-approved": null}},
                "spec": {"taints": [taint]},
            }),
            "only what changes, with the version as precondition; an annotation removed is sent as null"
        );
    }

    #[tokio::test]
    async fn a_pod_deletion_is_immediate_and_only_of_the_pod_that_was_read() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "virt-launcher-a", "namespace": "vms", "uid": "pod-uid-7"},
        }))
        .unwrap();
        let status = json!({"kind": "Status", "apiVersion": "v1", "status": "Success"});
        let (deleted, (method, uri, _, body)) = sent(status, async |ctx| ctx.delete_pod(&pod).await).await;
        assert!(deleted.is_ok(), "{deleted:?}");
        assert_eq!((method.as_str(), uri.as_str()), ("DELETE", "/api/v1/namespaces/vms/pods/virt-launcher-a?"));
        assert_eq!(body["gracePeriodSeconds"], json!(0));
        assert_eq!(
            body["preconditions"],
            json!({"uid": "pod-uid-7"}),
            "a pod re-created under the name is not deleted"
        );
    }

    #[tokio::test]
    async fn a_status_write_replaces_the_status_subresource_under_the_version_it_was_read_at() {
        let mut remediation = CoronerRemediation::new("worker-1-abcde", Default::default());
        remediation.metadata.namespace = Some("coroner-system".into());
        remediation.metadata.resource_version = Some("77".into());
        let status = CoronerRemediationStatus { phase: Some(crate::api::Phase::Pending), ..Default::default() };
        let answer = serde_json::to_value(&remediation).unwrap();
        let (written, (method, uri, _, body)) =
            sent(answer, async |ctx| ctx.write_status(&remediation, status.clone()).await).await;
        assert!(written.is_ok(), "{written:?}");
        assert_eq!(
            (method.as_str(), uri.as_str()),
            ("PUT", "/apis/coroner.dev/v1alpha1/namespaces/coroner-system/coronerremediations/worker-1-abcde/status?")
        );
        assert_eq!(body["metadata"]["resourceVersion"], json!("77"), "a write on a stale read conflicts");
        assert_eq!(body["status"]["phase"], json!("Pending"));
    }
}
