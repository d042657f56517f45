//! The apiserver: what one call does to the stored objects (the processes add faults around it).

use super::*;

impl Truth {
    /// A2's ConfigMap: the node's entry and the ConfigMap's resourceVersion (`None`: none yet).
    pub fn kept_record(&self, node: &str) -> (Option<crate::verification::KeptVerification>, Option<String>) {
        let version = (!self.kept_verifications.is_empty()).then(|| self.kept_version.to_string());
        (self.kept_verifications.get(node).cloned(), version)
    }

    /// Writes the node's entry under the ConfigMap's `version` (`None`: a create).
    pub fn write_kept(
        &mut self,
        node: &str,
        kept: &crate::verification::KeptVerification,
        version: Option<&str>,
    ) -> ApiResult<()> {
        if self.kept_record(node).1.as_deref() != version {
            return Err(ApiError::Conflict(crate::verification::KEPT_VERIFICATIONS.into()));
        }
        self.kept_verifications.insert(node.to_owned(), kept.clone());
        self.kept_version += 1;
        Ok(())
    }

    /// The namespace's one template: NodeHealthCheck's (its remediations' spec).
    pub fn templates(&self) -> Vec<crate::api::CoronerRemediationTemplate> {
        let body = crate::api::RemediationTemplateBody { spec: self.nhc_spec.clone() };
        let spec = crate::api::CoronerRemediationTemplateSpec { template: body };
        let mut template = crate::api::CoronerRemediationTemplate::new("coroner", spec);
        template.metadata.namespace = Some(self.namespace.clone());
        vec![template]
    }

    pub fn remediation(&self, name: &str) -> Option<CoronerRemediation> {
        self.remediations.get(name).cloned()
    }

    pub fn remediation_list(&self) -> Vec<CoronerRemediation> {
        self.remediations.values().cloned().collect()
    }

    /// The status subresource, written under the resourceVersion `expected`.
    pub fn write_status(
        &mut self,
        name: &str,
        expected: Option<&str>,
        status: &CoronerRemediationStatus,
    ) -> ApiResult<CoronerRemediation> {
        let rv = self.next_rv();
        let now = self.now;
        let Some(stored) = self.remediations.get_mut(name) else { return Err(ApiError::NotFound(name.into())) };
        if stored.metadata.resource_version.as_deref() != expected {
            return Err(ApiError::Conflict(name.into()));
        }
        let succeeded = |s: Option<&CoronerRemediationStatus>| {
            s.and_then(|s| conditions::status_of(&s.conditions, contract::SUCCEEDED).map(str::to_owned))
        };
        let before = succeeded(stored.status.as_ref());
        let intents = |s: &CoronerRemediationStatus| {
            let fence = s.progress.as_ref().and_then(|p| p.intent.clone());
            let guard = s.guard.as_ref().and_then(|g| g.intent.clone());
            [fence, guard].into_iter().flatten().map(|i| format!("{}/{}/{}", i.instance, i.attempt, i.decided_at.0))
        };
        for key in intents(status) {
            self.intents.entry((name.to_owned(), key)).or_insert(now);
        }
        stored.status = Some(roundtrip(status));
        stored.metadata.resource_version = Some(rv);
        let after = succeeded(stored.status.as_ref());
        let phase = crate::fence::phase_of(stored.status.as_ref().unwrap_or(status)).as_str().to_owned();
        let guard = conditions::find(&status.conditions, crate::guard::GUARD).map(|c| c.reason.clone());
        let written = stored.clone();
        self.log.push(Record::Status { at: now, remediation: name.into(), before, after, phase, guard });
        self.changes.push(Change::Remediation(name.into()));
        Ok(written)
    }

    /// kube-runtime's finalizer helper, as it patches: JSON Patches whose `test` is on the finalizers
    /// only (never the resourceVersion), so a status written since `read` does not stop it. Adding:
    /// the list must still be the one read (none: absent). Removing: the finalizer must still be at
    /// the index it had in `read`. A failed `test` is refused (the API server answers 422; the
    /// controller tries again on the next event). A deleted remediation goes once its last
    /// finalizer does.
    pub fn set_finalizer(&mut self, name: &str, read: &[String], present: bool) -> ApiResult<()> {
        let rv = self.next_rv();
        let Some(stored) = self.remediations.get_mut(name) else { return Err(ApiError::NotFound(name.into())) };
        let now = stored.metadata.finalizers.clone().unwrap_or_default();
        let tested = if present {
            now == read
        } else {
            read.iter()
                .position(|f| f == contract::FINALIZER)
                .is_some_and(|i| now.get(i).map(String::as_str) == Some(contract::FINALIZER))
        };
        if !tested {
            return Err(ApiError::Conflict(format!(
                "{name}: the finalizers changed since they were read (JSON Patch test)"
            )));
        }
        let finalizers = stored.metadata.finalizers.get_or_insert_with(Vec::new);
        if present {
            finalizers.push(contract::FINALIZER.into());
        } else if let Some(i) = read.iter().position(|f| f == contract::FINALIZER) {
            finalizers.remove(i);
        }
        stored.metadata.resource_version = Some(rv);
        if !present && stored.metadata.deletion_timestamp.is_some() && finalizers.is_empty() {
            self.remediations.remove(name);
        }
        self.changes.push(Change::Remediation(name.into()));
        Ok(())
    }

    pub fn node(&self, name: &str) -> Option<Node> {
        self.nodes.get(name).cloned()
    }

    pub fn node_list(&self) -> Vec<Node> {
        self.nodes.values().cloned().collect()
    }

    /// coroner process `pid` replaces a Node under the resourceVersion in its metadata: refused while
    /// Node writes are denied; the taints it adds are coroner's (provenance), and the write is logged.
    /// A Node patch by coroner: `wanted`'s taints and annotations over the stored Node, under
    /// `current`'s resourceVersion.
    pub fn patch_node(&mut self, current: &Node, wanted: &Node) -> ApiResult<Node> {
        let name = current.metadata.name.clone().unwrap_or_default();
        if self.now < self.node_writes_denied_until {
            return Err(ApiError::Denied(format!("admission webhook denied the update of Node {name}")));
        }
        let rv = self.next_rv();
        let now = self.now;
        let Some(stored) = self.nodes.get(&name) else { return Err(ApiError::NotFound(name)) };
        if stored.metadata.resource_version != current.metadata.resource_version {
            return Err(ApiError::Conflict(name));
        }
        let before = taints_of(stored);
        if taints_of(wanted).iter().any(|t| t.key == CoronerTaint::OutOfService.key())
            && !before.iter().any(|t| t.key == CoronerTaint::OutOfService.key())
        {
            let boot = stored.status.as_ref().and_then(|s| s.node_info.as_ref()).map(|i| i.boot_id.clone());
            self.boot_at_release.insert(name.clone(), boot.unwrap_or_default());
        }
        let mut patched = stored.clone();
        patched.spec.get_or_insert_with(Default::default).taints = Some(taints_of(wanted));
        patched.metadata.annotations = wanted.metadata.annotations.clone();
        let mut written: Node = roundtrip(&patched);
        written.metadata.resource_version = Some(rv);
        let after = taints_of(&written);
        for taint in &after {
            if !before.iter().any(|b| taint_key(b) == taint_key(taint)) {
                self.provenance.entry(taint_key(taint)).or_insert(Adder::Coroner { pid: self.caller.pid });
            }
        }
        let before_annotations = stored.metadata.annotations.clone().unwrap_or_default();
        let after_annotations = written.metadata.annotations.clone().unwrap_or_default();
        self.log.push(Record::NodeWrite {
            at: now,
            sent: self.call_started,
            by: self.caller.clone(),
            node: name.clone(),
            before,
            after,
            before_annotations,
            after_annotations,
        });
        self.nodes.insert(name.clone(), written.clone());
        self.changes.push(Change::Node(name));
        Ok(written)
    }

    /// `None`: no Lease in kube-node-lease; `Some(renewTime)` otherwise.
    pub fn node_lease(&self, node: &str) -> Option<Option<Timestamp>> {
        self.leases.get(node).copied()
    }

    /// The leader Lease renewed by process `pid`, if it still holds it (the write carries the
    /// resourceVersion it read).
    pub fn renew_leader(&mut self, pid: u32) -> ApiResult<Lease> {
        if self.leader.holder != Some(pid) {
            return Err(ApiError::Conflict("the leader Lease was modified".into()));
        }
        self.leader.renewed = self.now;
        Ok(self.leader_lease())
    }

    /// The leader Lease as a process reads it: renewTime on the holder's clock.
    pub fn leader_lease(&self) -> Lease {
        let holder_offset = self.leader.holder.and_then(|h| self.processes.get(&h)).map_or(0, |p| p.clock_offset);
        Lease {
            spec: Some(LeaseSpec {
                holder_identity: self.leader.holder.map(|h| format!("p{h}")),
                renew_time: Some(MicroTime(self.wall(self.leader.renewed + holder_offset))),
                lease_duration_seconds: Some(i32::try_from(self.leader.duration / SECOND).unwrap_or(15)),
                ..LeaseSpec::default()
            }),
            // Every write renews it: its renewal time is its version.
            metadata: ObjectMeta { resource_version: Some(self.leader.renewed.to_string()), ..ObjectMeta::default() },
        }
    }

    pub fn binding(&self, name: &str) -> Option<BmcBinding> {
        self.bindings.get(name).cloned()
    }

    pub fn binding_list(&self) -> Vec<BmcBinding> {
        self.bindings.values().cloned().collect()
    }

    pub fn attestation(&self, name: &str) -> Option<CoronerAttestation> {
        self.attestations.get(name).cloned()
    }

    pub fn attestation_list(&self) -> Vec<CoronerAttestation> {
        self.attestations.values().cloned().collect()
    }

    /// An attestation's status subresource, written under the resourceVersion `expected`.
    pub fn write_attestation_status(
        &mut self,
        name: &str,
        expected: Option<&str>,
        status: &CoronerAttestationStatus,
    ) -> ApiResult<CoronerAttestation> {
        let rv = self.next_rv();
        let Some(stored) = self.attestations.get_mut(name) else { return Err(ApiError::NotFound(name.into())) };
        if stored.metadata.resource_version.as_deref() != expected {
            return Err(ApiError::Conflict(name.into()));
        }
        stored.status = Some(roundtrip(status));
        stored.metadata.resource_version = Some(rv);
        let written = stored.clone();
        self.changes.push(Change::Attestation(name.into()));
        Ok(written)
    }

    /// A person attests that `node` is dead (the admission policy checked the attester), naming the
    /// Node object as it is now.
    pub fn create_attestation(
        &mut self,
        name: &str,
        node: &str,
        attested_by: &str,
        reason: &str,
        acknowledge: Vec<crate::api::Acknowledgement>,
    ) {
        let Some(mut attestation) = self.attestation_draft(name, node, attested_by, reason, acknowledge) else {
            return;
        };
        attestation.metadata.uid = Some(self.next_uid("attestation"));
        attestation.metadata.resource_version = Some(self.next_rv());
        self.attestations.insert(name.into(), roundtrip(&attestation));
        self.log.push(Record::Attested { at: self.now, name: name.into(), node: node.into() });
        self.changes.push(Change::Attestation(name.into()));
    }

    fn attestation_draft(
        &self,
        name: &str,
        node: &str,
        attested_by: &str,
        reason: &str,
        acknowledge: Vec<crate::api::Acknowledgement>,
    ) -> Option<CoronerAttestation> {
        let node_uid = self.nodes.get(node).and_then(|n| n.metadata.uid.clone())?;
        let spec = CoronerAttestationSpec {
            node_name: node.into(),
            node_uid,
            reason: reason.into(),
            attested_by: attested_by.into(),
            valid_for: crate::api::Duration::from_secs(900),
            acknowledge,
        };
        let mut attestation = CoronerAttestation::new(name, spec);
        attestation.metadata.namespace = Some(self.namespace.clone());
        attestation.metadata.creation_timestamp = Some(Time(self.wall(self.now)));
        Some(attestation)
    }

    /// What a person who accepts every piece of evidence the preflight offers acknowledges: the
    /// preflight (`coroner attest`, run now) shows the first sign of life not yet acknowledged, so
    /// they run it again with what it printed, as long as it offers more.
    pub fn preflight_acknowledgements(&self, node: &str) -> Vec<crate::api::Acknowledgement> {
        use crate::attestation::{self, Inputs, Outcome};
        let mut acknowledged: Vec<crate::api::Acknowledgement> = Vec::new();
        let remediations: Vec<CoronerRemediation> = self.remediations.values().cloned().collect();
        for _ in 0..3 {
            let Some(draft) = self.attestation_draft("preflight", node, "alice", "preflight", acknowledged.clone())
            else {
                break;
            };
            let inputs = Inputs {
                attestation: &draft,
                now: self.wall(self.now),
                policies: None,
                remediations: &remediations,
                node: self.nodes.get(node),
                lease: self.leases.get(node).copied(),
                sighting: None,
                cluster: None,
            };
            let offered = attestation::evaluate(&inputs).checks.iter().find_map(|check| match &check.outcome {
                Outcome::Refused(refusal) => {
                    let at = refusal.evidence_at?;
                    let reason = crate::api::AcknowledgedReason::ALL
                        .into_iter()
                        .find(|r| r.as_str() == refusal.reason.as_str())?;
                    let ack = crate::api::Acknowledgement { reason, at: Time(at) };
                    (!acknowledged.contains(&ack)).then_some(ack)
                }
                _ => None,
            });
            match offered {
                Some(ack) => acknowledged.push(ack),
                None => break,
            }
        }
        acknowledged
    }

    pub fn write_binding_status(&mut self, name: &str, status: &BmcBindingStatus) -> ApiResult<()> {
        let rv = self.next_rv();
        let binding = self.bindings.get_mut(name).ok_or_else(|| ApiError::NotFound(name.into()))?;
        binding.status = Some(roundtrip(status));
        binding.metadata.resource_version = Some(rv);
        Ok(())
    }

    /// The version of a credentials Secret, if it exists.
    pub fn config_map(&self, name: &str) -> Option<u32> {
        self.config_maps.get(name).copied()
    }

    pub fn secret(&self, name: &str) -> Option<u32> {
        self.secrets.get(name).copied()
    }

    pub fn pods_on(&self, node: &str) -> Vec<Pod> {
        self.pods
            .iter()
            .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node))
            .cloned()
            .collect()
    }

    /// coroner force-deletes a pod (under its UID).
    pub fn delete_pod(&mut self, pod: &Pod) -> ApiResult<()> {
        let before = self.pods.len();
        self.pods.retain(|p| p.metadata.uid != pod.metadata.uid);
        if self.pods.len() == before {
            return Err(ApiError::NotFound(pod.metadata.name.clone().unwrap_or_default()));
        }
        let node = pod.spec.as_ref().and_then(|s| s.node_name.clone()).unwrap_or_default();
        self.log.push(Record::PodDeleted { at: self.now, sent: self.call_started, by: self.caller.clone(), node });
        Ok(())
    }

    pub fn attachments_on(&self, node: &str) -> usize {
        self.attachments.get(node).copied().unwrap_or(0)
    }
}
