//! The world's objects as people and controllers change them: machines, bindings, Nodes, pods,
//! remediations, attestations, edits.

use super::*;

impl Truth {
    pub fn add_machine(&mut self, node: &str, uuid: &str, on: bool, reach: Reach) -> usize {
        let machine = Machine {
            name: format!("machine-{node}"),
            uuid: uuid.into(),
            on,
            boot_id: format!("{node}-boot-1"),
            boots: 1,
            history: vec![(0, on)],
            pending: None,
            booted_at: on.then_some(0),
            node: node.into(),
            reach,
        };
        self.machines.push(machine);
        self.machines.len() - 1
    }

    /// The node of `machine`, silent for a while: `ready`, its Lease last renewed long ago.
    pub fn add_node(&mut self, name: &str, machine: usize, ready: &str, labels: &[(&str, &str)]) {
        let (uuid, boot_id) = (self.machines[machine].uuid.clone(), self.machines[machine].boot_id.clone());
        self.add_node_as(name, &uuid, &boot_id, ready, labels);
    }

    /// A Node whose kubelet reported `system_uuid` and `boot_id`, then `ready`; its Lease last renewed
    /// long ago.
    pub fn add_node_as(&mut self, name: &str, system_uuid: &str, boot_id: &str, ready: &str, labels: &[(&str, &str)]) {
        let uid = self.next_uid("node");
        let rv = self.next_rv();
        let stale = self.wall(-600 * SECOND);
        let node = Node {
            metadata: ObjectMeta {
                name: Some(name.into()),
                uid: Some(uid),
                resource_version: Some(rv),
                labels: Some(labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()),
                ..ObjectMeta::default()
            },
            spec: Some(NodeSpec { taints: Some(Vec::new()), ..NodeSpec::default() }),
            status: Some(NodeStatus {
                conditions: Some(vec![NodeCondition {
                    type_: "Ready".into(),
                    status: ready.into(),
                    last_heartbeat_time: Some(Time(stale)),
                    ..NodeCondition::default()
                }]),
                node_info: Some(NodeSystemInfo {
                    boot_id: boot_id.into(),
                    system_uuid: system_uuid.into(),
                    ..NodeSystemInfo::default()
                }),
                ..NodeStatus::default()
            }),
        };
        self.nodes.insert(name.into(), roundtrip(&node));
        self.leases.insert(name.into(), Some(stale));
        self.ready_history.entry(name.into()).or_default().push((self.now, ready.into()));
    }

    /// A binding of `node` to the BMC at `origin`: an IPMI one for an `ipmi://host:port` origin, a
    /// Redfish one otherwise.
    pub fn add_binding(&mut self, name: &str, node: &str, origin: &str, system_id: Option<&str>) {
        let credentials_secret_ref = SecretRef { name: format!("{name}-credentials") };
        let spec = match ipmi_address(origin) {
            Some((address, port)) => BmcBindingSpec {
                node_name: node.into(),
                redfish: None,
                ipmi: Some(IpmiTarget { address, port, cipher_suite: None, privilege: None }),
                credentials_secret_ref,
                tls: None,
                pdu_levels: Vec::new(),
            },
            None => BmcBindingSpec {
                node_name: node.into(),
                redfish: Some(RedfishTarget {
                    endpoint: format!("{origin}/redfish/v1"),
                    system_id: system_id.map(str::to_owned),
                }),
                ipmi: None,
                credentials_secret_ref,
                tls: Some(TlsPolicy {
                    ca_bundle_ref: Some(CaBundleRef {
                        kind: CaBundleKind::ConfigMap,
                        name: format!("{name}-ca"),
                        key: "ca.crt".into(),
                    }),
                    ..TlsPolicy::default()
                }),
                pdu_levels: Vec::new(),
            },
        };
        let mut binding = BmcBinding::new(name, spec);
        binding.metadata.namespace = Some(self.namespace.clone());
        binding.metadata.uid = Some(self.next_uid("binding"));
        binding.metadata.resource_version = Some(self.next_rv());
        binding.metadata.generation = Some(1);
        self.secrets.insert(format!("{name}-credentials"), 1);
        let mut ca_bundle = Vec::new();
        if binding.spec.redfish.is_some() {
            self.config_maps.insert(format!("{name}-ca"), 1);
            ca_bundle = ca_bundle_bytes(1);
        }
        // Verified before the outage at its content, as the binding verifier does (an attestation
        // judges it, A2).
        binding.status = Some(BmcBindingStatus {
            last_verification_time: Some(Time(self.wall(self.now - SECOND))),
            observed_generation: Some(1),
            verified_content: Some(crate::words::digest::content_hex(content_of(&binding.spec, 1, &ca_bundle))),
            ..BmcBindingStatus::default()
        });
        self.bindings.insert(name.into(), roundtrip(&binding));
        self.note_binding_content(name);
        self.note_verified(name);
    }

    /// The world's binding verifier verified binding `name` at its content now.
    pub fn note_verified(&mut self, name: &str) {
        if let Some(content) = self.binding_content(name) {
            self.binding_verifications.push((self.now, name.into(), content));
            // The verifier keeps it beyond the binding object too (A2).
            if let Some(binding) = self.bindings.get(name) {
                let node = binding.spec.node_name.clone();
                let mut kept = crate::verification::KeptVerification {
                    content: crate::words::digest::content_hex(content),
                    at: self.wall(self.now),
                    uid: binding.metadata.uid.clone().unwrap_or_default(),
                    seal: String::new(),
                };
                kept.seal = seal_kept(&node, &kept);
                self.kept_verifications.insert(node, kept);
                self.kept_version += 1;
            }
        }
    }

    /// A verification coroner's verifier made of binding `name` (for `node`, by task `task` of
    /// process `pid`, begun at `began` when the binding was made of `content`), proving the node's
    /// system through a client of digest `through`, counts as the world's when the truth agrees: the
    /// client was made of what the binding was made of, the binding stayed so throughout, and the BMC
    /// answered that task from the node's own machine.
    pub fn note_verification_if_true(
        &mut self,
        name: &str,
        node: &str,
        task: &str,
        (pid, began): (u32, Micros),
        content: Option<u64>,
        through: u64,
    ) {
        let Some(content) = content.filter(|c| *c == through && self.binding_content(name) == Some(*c)) else {
            return;
        };
        let changed = self.binding_contents.iter().any(|(at, of, _)| of == name && *at > began);
        let machine = self.machine_of_node(node);
        let answered = self.log.iter().any(|r| {
            matches!(r, Record::Answer { by, machine: m, answered, .. }
                if by.pid == pid && by.task == task && *answered >= began && m.is_some() && *m == machine)
        });
        if answered && !changed {
            self.binding_verifications.push((began, name.into(), content));
        }
    }

    /// What binding `name` is made of now: its spec, its Secret's value and its CA bundle's content.
    pub fn binding_content(&self, name: &str) -> Option<u64> {
        let spec = &self.bindings.get(name)?.spec;
        let secret = self.secrets.get(&spec.credentials_secret_ref.name).copied().unwrap_or_default();
        let ca = spec.tls.as_ref().and_then(|t| t.ca_bundle_ref.as_ref());
        let ca_bundle = ca.and_then(|r| self.config_maps.get(&r.name)).map(|v| ca_bundle_bytes(*v)).unwrap_or_default();
        Some(content_of(spec, secret, &ca_bundle))
    }

    /// Logs binding `name`'s content from now on, when it changed.
    pub fn note_binding_content(&mut self, name: &str) {
        let Some(content) = self.binding_content(name) else { return };
        let last = self.binding_contents.iter().rev().find(|(_, of, _)| of == name).map(|(_, _, c)| *c);
        if last != Some(content) {
            self.binding_contents.push((self.now, name.into(), content));
        }
    }

    /// Binding `name`'s content at `at`.
    pub fn binding_content_at(&self, name: &str, at: Micros) -> Option<u64> {
        self.binding_contents.iter().rev().find(|(since, of, _)| of == name && *since <= at).map(|(_, _, c)| *c)
    }

    pub fn add_pod(&mut self, node: &str, name: &str, tolerates: bool) {
        let mut pod = Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("default".into()),
                uid: Some(self.next_uid("pod")),
                resource_version: Some(self.next_rv()),
                ..ObjectMeta::default()
            },
            spec: Some(PodSpec { node_name: Some(node.into()), ..PodSpec::default() }),
            status: Some(PodStatus { phase: Some("Running".into()), ..PodStatus::default() }),
        };
        if tolerates && let Some(spec) = pod.spec.as_mut() {
            spec.tolerations = Some(vec![k8s_openapi::api::core::v1::Toleration {
                operator: Some("Exists".into()),
                ..Default::default()
            }]);
        }
        self.pods.push(pod);
    }

    /// NHC creates a remediation for `node` from the template.
    pub fn create_remediation(&mut self, name: &str, node: &str, spec: &CoronerRemediationSpec) {
        let mut remediation = CoronerRemediation::new(name, spec.clone());
        remediation.metadata.namespace = Some(self.namespace.clone());
        remediation.metadata.uid = Some(self.next_uid("remediation"));
        remediation.metadata.resource_version = Some(self.next_rv());
        remediation.metadata.generation = Some(1);
        remediation.metadata.creation_timestamp = Some(Time(self.wall(self.now)));
        remediation.metadata.annotations =
            Some([(contract::NODE_NAME_ANNOTATION.to_owned(), node.to_owned())].into_iter().collect());
        self.remediations.insert(name.into(), roundtrip(&remediation));
        self.changes.push(Change::Remediation(name.into()));
        self.created.push((name.into(), node.into(), self.now));
    }

    /// The node a remediation (alive or deleted) fences.
    pub fn remediation_node(&self, name: &str) -> Option<String> {
        self.created.iter().rev().find(|(of, ..)| of == name).map(|(_, node, _)| node.clone())
    }

    /// Whether remediation `older` was first created before `younger`.
    pub fn created_before(&self, older: &str, younger: &str) -> bool {
        let first = |name: &str| self.created.iter().find(|(of, ..)| of == name).map(|(.., at)| *at);
        matches!((first(older), first(younger)), (Some(a), Some(b)) if a < b)
    }

    /// NHC's or a person's delete: the object goes once no finalizer holds it.
    pub fn delete_remediation(&mut self, name: &str) {
        let now = self.wall(self.now);
        let Some(r) = self.remediations.get_mut(name) else { return };
        if r.metadata.deletion_timestamp.is_none() {
            let uid = r.metadata.uid.clone().unwrap_or_default();
            self.log.push(Record::Deleted { at: self.now, remediation: name.into(), uid });
        }
        if r.metadata.finalizers.as_ref().is_none_or(Vec::is_empty) {
            self.remediations.remove(name);
        } else if r.metadata.deletion_timestamp.is_none() {
            r.metadata.deletion_timestamp = Some(Time(now));
            self.rv += 1;
            r.metadata.resource_version = Some(self.rv.to_string());
        }
        self.changes.push(Change::Remediation(name.into()));
    }

    pub fn annotate_remediation(&mut self, name: &str, key: &str, value: &str) {
        let rv = self.next_rv();
        let Some(r) = self.remediations.get_mut(name) else { return };
        if key == contract::TIMED_OUT_ANNOTATION && !contract::timed_out_by_nhc(&r.metadata) {
            self.log.push(Record::TimedOut { at: self.now, remediation: name.into() });
        }
        r.metadata.annotations.get_or_insert_with(Default::default).insert(key.into(), value.into());
        r.metadata.resource_version = Some(rv);
        self.changes.push(Change::Remediation(name.into()));
    }

    /// Someone else (a person, another remediator) adds a taint by hand.
    pub fn add_foreign_taint(&mut self, node: &str, key: &str, value: Option<&str>, effect: &str, who: &str) {
        let at = Time(self.wall(self.now));
        let rv = self.next_rv();
        let Some(n) = self.nodes.get_mut(node) else { return };
        let taint =
            Taint { key: key.into(), value: value.map(str::to_owned), effect: effect.into(), time_added: Some(at) };
        let stored: Taint = roundtrip(&taint);
        self.provenance.insert(taint_key(&stored), Adder::Someone(who.into()));
        self.taint_added.insert(taint_key(&stored), self.now);
        n.spec.get_or_insert_with(Default::default).taints.get_or_insert_with(Vec::new).push(stored);
        n.metadata.resource_version = Some(rv);
        self.changes.push(Change::Node(node.into()));
    }

    /// Whether a remediation's exact out-of-service taint is on the node and its release recorded.
    pub fn released_by_coroner(&self, node: &str) -> bool {
        let Some(n) = self.nodes.get(node) else { return false };
        self.remediations.values().any(|r| {
            let released = r.status.as_ref().and_then(|s| s.evidence.as_ref()?.release.as_ref()).is_some();
            released && r.metadata.uid.as_deref().is_some_and(|uid| crate::taints::release_on_node(n, uid).is_some())
        })
    }

    /// A person annotates the Node.
    pub fn annotate_node(&mut self, node: &str, key: &str, value: &str) {
        let rv = self.next_rv();
        let Some(n) = self.nodes.get_mut(node) else { return };
        n.metadata.annotations.get_or_insert_with(Default::default).insert(key.into(), value.into());
        n.metadata.resource_version = Some(rv);
        self.changes.push(Change::Node(node.into()));
    }

    /// Someone deletes `name`'s binding and creates it again, identical (a GitOps sync that replaces
    /// it): a new object (UID, generation 1) without a status. The world's verifier verified the first
    /// one before the outage and does not verify again: A2 keeps that verification beyond the object.
    pub fn recreate_binding(&mut self, name: &str) {
        let Some(old) = self.bindings.get(name) else { return };
        let mut binding = BmcBinding::new(name, old.spec.clone());
        binding.metadata.namespace = old.metadata.namespace.clone();
        binding.metadata.uid = Some(self.next_uid("binding"));
        binding.metadata.resource_version = Some(self.next_rv());
        binding.metadata.generation = Some(1);
        self.bindings.insert(name.into(), roundtrip(&binding));
    }

    /// Someone edits `name`'s binding (a new generation).
    pub fn edit_binding(&mut self, name: &str, edit: crate::sim::scenario::BindingEdit) {
        use crate::sim::scenario::BindingEdit;
        let rv = self.next_rv();
        let Some(binding) = self.bindings.get(name) else { return };
        let mut binding = binding.clone();
        if let Some(ipmi) = binding.spec.ipmi.as_mut() {
            match edit {
                BindingEdit::Endpoint => ipmi.address = "bmc-2.example".into(),
                BindingEdit::DeadEndpoint => {
                    (ipmi.address, ipmi.port) = ipmi_address(&ipmi_origin_of(NOWHERE)).unwrap_or_default();
                }
                BindingEdit::CredentialsSecret => {
                    let old = binding.spec.credentials_secret_ref.name.clone();
                    let value = self.secrets.get(&old).copied().unwrap_or(1);
                    let renamed = format!("{old}-copy");
                    self.secrets.insert(renamed.clone(), value);
                    binding.spec.credentials_secret_ref.name = renamed;
                }
                // An IPMI BMC has one chassis, nothing to pin: an edit that leads where it did.
                BindingEdit::SystemId => ipmi.privilege = Some(IpmiPrivilege::Operator),
            }
            binding.metadata.generation = Some(binding.metadata.generation.unwrap_or(1) + 1);
            binding.metadata.resource_version = Some(rv);
            self.record_binding_edit(&binding);
            self.bindings.insert(name.into(), roundtrip(&binding));
            self.note_binding_content(name);
            return;
        }
        let Some(redfish) = binding.spec.redfish.as_mut() else { return };
        match edit {
            BindingEdit::Endpoint => redfish.endpoint = "https://bmc-2.example:443/redfish/v1".into(),
            BindingEdit::DeadEndpoint => redfish.endpoint = format!("{NOWHERE}/redfish/v1"),
            BindingEdit::CredentialsSecret => {
                let old = binding.spec.credentials_secret_ref.name.clone();
                let value = self.secrets.get(&old).copied().unwrap_or(1);
                let renamed = format!("{old}-copy");
                self.secrets.insert(renamed.clone(), value);
                binding.spec.credentials_secret_ref.name = renamed;
            }
            BindingEdit::SystemId => {
                let origin = redfish.endpoint.clone();
                let node_uuid = self
                    .nodes
                    .get(&binding.spec.node_name)
                    .and_then(|n| n.status.as_ref()?.node_info.as_ref().map(|i| i.system_uuid.clone()));
                let bmc = self.bmcs.iter().find(|b| origin.starts_with(b.origin.as_str()));
                let id = bmc.and_then(|b| {
                    b.systems.iter().rev().find(|s| Some(&self.machines[s.machine].uuid) == node_uuid.as_ref())
                });
                redfish.system_id = id.map(|s| s.id.clone());
            }
        }
        binding.metadata.generation = Some(binding.metadata.generation.unwrap_or(1) + 1);
        binding.metadata.resource_version = Some(rv);
        self.record_binding_edit(&binding);
        self.bindings.insert(name.into(), roundtrip(&binding));
        self.note_binding_content(name);
    }

    /// Logs where an edited binding leads now, as a client built from it finds its BMC.
    fn record_binding_edit(&mut self, binding: &BmcBinding) {
        let endpoint = binding.spec.endpoint();
        let bmc = self.bmcs.iter().position(|b| endpoint.starts_with(&b.origin));
        self.log.push(Record::BindingEdited { at: self.now, node: binding.spec.node_name.clone(), bmc });
    }

    /// Something wrote `name`'s binding without changing its spec (its status): a new
    /// resourceVersion.
    pub fn touch_binding(&mut self, name: &str) {
        let rv = self.next_rv();
        if let Some(binding) = self.bindings.get_mut(name) {
            binding.metadata.resource_version = Some(rv);
        }
    }

    /// An admission webhook (or a person) rewrites the value of the out-of-service taint on the node;
    /// it stays the same taint of coroner's, as coroner recorded it no longer.
    pub fn rewrite_out_of_service(&mut self, node: &str) {
        let rv = self.next_rv();
        let Some(n) = self.nodes.get_mut(node) else { return };
        let Some(taints) = n.spec.as_mut().and_then(|s| s.taints.as_mut()) else { return };
        for taint in taints.iter_mut().filter(|t| t.key == CoronerTaint::OutOfService.key()) {
            let old = taint_key(taint);
            taint.value = Some("rewritten".into());
            if let Some(adder) = self.provenance.get(&old).cloned() {
                self.provenance.insert(taint_key(taint), adder);
            }
        }
        n.metadata.resource_version = Some(rv);
        self.changes.push(Change::Node(node.into()));
    }

    /// The Node object is deleted (a decommission).
    pub fn delete_node(&mut self, node: &str) {
        if self.nodes.remove(node).is_some() {
            self.changes.push(Change::Node(node.into()));
        }
    }

    /// A person labels the node to keep remediators off it.
    pub fn exclude_node(&mut self, node: &str) {
        let rv = self.next_rv();
        let Some(n) = self.nodes.get_mut(node) else { return };
        n.metadata.labels.get_or_insert_with(Default::default).insert(contract::EXCLUDE_LABEL.into(), "true".into());
        n.metadata.resource_version = Some(rv);
        self.life.entry(node.into()).or_default().push((self.now, Life::Excluded));
        self.changes.push(Change::Node(node.into()));
    }

    /// The Node object is deleted and the kubelet registers it again: a new UID.
    pub fn replace_node(&mut self, node: &str) {
        let uid = self.next_uid("node");
        let rv = self.next_rv();
        let Some(n) = self.nodes.get_mut(node) else { return };
        n.metadata.uid = Some(uid);
        n.metadata.resource_version = Some(rv);
        n.spec = Some(NodeSpec { taints: Some(Vec::new()), ..NodeSpec::default() });
        n.metadata.annotations = None;
        self.changes.push(Change::Node(node.into()));
        self.life.entry(node.into()).or_default().push((self.now, Life::Replaced));
    }

    /// Someone removes taints by key, leaving the annotations as they are.
    pub fn remove_taints_by_hand(&mut self, node: &str, key: &str) {
        let rv = self.next_rv();
        let Some(n) = self.nodes.get_mut(node) else { return };
        if let Some(taints) = n.spec.as_mut().and_then(|s| s.taints.as_mut()) {
            taints.retain(|t| t.key != key);
        }
        n.metadata.resource_version = Some(rv);
        self.changes.push(Change::Node(node.into()));
    }

    /// The node's kubelet reports `Ready=status` (and a new bootID, if given).
    pub fn set_ready(&mut self, node: &str, status: &str, boot_id: Option<&str>) {
        let now = Time(self.wall(self.now));
        let rv = self.next_rv();
        let Some(n) = self.nodes.get_mut(node) else { return };
        let Some(s) = n.status.as_mut() else { return };
        if let Some(condition) = s.conditions.as_mut().and_then(|c| c.iter_mut().find(|c| c.type_ == "Ready")) {
            let unchanged = condition.status == status;
            let boot_unchanged = boot_id.is_none_or(|b| s.node_info.as_ref().is_some_and(|i| i.boot_id == b));
            if unchanged && boot_unchanged {
                return;
            }
            condition.status = status.into();
            condition.last_heartbeat_time = Some(now);
            self.ready_history.entry(node.into()).or_default().push((self.now, status.into()));
        }
        if let (Some(boot), Some(info)) = (boot_id, s.node_info.as_mut()) {
            info.boot_id = boot.into();
        }
        if status == conditions::TRUE {
            self.life.entry(node.into()).or_default().push((self.now, Life::Ready));
        }
        n.metadata.resource_version = Some(rv);
        self.changes.push(Change::Node(node.into()));
    }

    pub fn renew_lease(&mut self, node: &str, wall: Timestamp) {
        // A kubelet whose clock runs behind writes a renewTime from its past (A1: coroner dates life
        // by its own first sight of it).
        let behind = self.kubelet_behind.get(node).copied().unwrap_or(0);
        let wall = wall.checked_sub(jiff::SignedDuration::from_micros(behind)).unwrap_or(wall);
        self.leases.insert(node.into(), Some(wall));
        self.lease_changes.push(node.into());
        self.life.entry(node.into()).or_default().push((self.now, Life::Lease));
    }

    pub fn ready_of(&self, node: &str) -> Option<String> {
        self.nodes.get(node).and_then(|n| crate::fence::ready_status(n)).map(str::to_owned)
    }
}
