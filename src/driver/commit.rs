//! Persisting a decision: the status write under a resourceVersion precondition (or held for the
//! next write, W1), what the process keeps when it fails (P3), and the notices it publishes.

use super::*;

impl<W: World> Fence<'_, W> {
    /// Persists the decision's status (skipped when unchanged, held when it may wait for the next
    /// write: W1), keeps what it learnt in memory, and publishes its notices.
    pub(super) async fn commit(&mut self, decision: Decision, node: Option<&Node>) -> Result<(), Error> {
        // Boxed: its statuses (2.5 KiB each) are held only while it runs, not in the future of every
        // fence in flight (a third of that future's size; a storm's peak heap, P2).
        Box::pin(self.commit_as(decision, node, false)).await
    }

    /// [`Self::commit`]; `until_flushed`: the status is held for the next write of this reconcile, or
    /// for the [`Self::flush`] at its end, whatever it holds (the start of a fence, which the gates'
    /// decision right after it carries).
    pub(super) async fn commit_as(
        &mut self,
        decision: Decision,
        node: Option<&Node>,
        until_flushed: bool,
    ) -> Result<(), Error> {
        let old = self.status();
        let stored = self.remediation.status.clone().unwrap_or_default();
        let status = fence::with_reader(decision.status, &self.world.instance());
        let decision = Decision { status: crate::guard::with_release_id(status, &stored, &self.uid), ..decision };
        if decision.status == stored {
            self.stored(self.remediation.clone());
        } else if fence::may_wait_for_next_write(&stored, &decision.status) {
            // W1: kept by this process until the next write carries it.
            let version = self.remediation.metadata.resource_version.clone().unwrap_or_default();
            self.local.hold(&self.uid, Some((self.world.instance(), version, decision.status.clone())));
            self.held = Some(decision.status.clone());
        } else if until_flushed {
            self.held = Some(decision.status.clone());
        } else {
            match self.world.write_status(&self.remediation, decision.status).await {
                Ok(written) => self.stored(written),
                Err(error) => {
                    let memory = fence::memory_after_failed_write(&self.remembered(), &decision.memory);
                    // Boxed: a rare path, kept out of the size of every commit's future.
                    Box::pin(self.record_life(memory.last_power.as_deref())).await;
                    self.remember(memory);
                    return Err(error.into());
                }
            }
        }
        self.remember(decision.memory);
        self.count_transition(&old);
        let new = self.status();
        if let Some(finding) = verification::fence_finding(&old, &new) {
            self.record_on_binding(finding).await;
        }
        let phase = fence::phase_of(&new);
        // The release's id goes with its announcement: an approval must name it (docs/safety.md R3).
        let id = crate::guard::release_id(&self.uid, &new);
        let notices = decision.notices.iter().map(|notice| match &id {
            Some(id) if notice.reason == Reason::NodeFenced.as_str() => {
                fence::Notice { message: format!("{} (release {id})", notice.message), ..notice.clone() }
            }
            _ => notice.clone(),
        });
        for notice in &notices.collect::<Vec<_>>() {
            info!(reason = %notice.reason, warning = notice.warning, phase = phase.as_str(), "{}", notice.message);
            if notice.reason == fence::OUTLET_MAPPING_UNPROVEN {
                self.world.metrics().safety_override(fence::OUTLET_MAPPING_UNPROVEN);
            }
            self.world.publish(&self.remediation.object_ref(&()), notice, phase.as_str()).await;
            if let Some(node) = node
                && fence::for_the_node(notice)
            {
                self.world.publish(&node.object_ref(&()), notice, phase.as_str()).await;
            }
        }
        Ok(())
    }

    /// A1: a reading of life whose status write failed is written into the latest status on its own
    /// (`fence::recording_life`), a few times at most, whether this process still leads or not.
    pub(super) async fn record_life(&mut self, remembered: Option<&str>) {
        let name = self.remediation.name_any();
        for _ in 0..3 {
            let Ok(Some(latest)) = self.world.remediation(&name).await else { return };
            let Some(status) = fence::recording_life(&latest.status.clone().unwrap_or_default(), remembered) else {
                return;
            };
            if let Ok(written) = self.world.write_status(&latest, status).await {
                self.stored(written);
                return;
            }
        }
    }

    /// Commits an observation made outside the step loop (a reset's answer, a refused action): the
    /// decision is taken again on the latest status if another write came first.
    pub(super) async fn commit_observation(&mut self, observation: Observation, node: &Node) -> Result<(), Error> {
        let instance = self.world.instance();
        let lease = self.world.node_lease(&self.node_name).await?;
        let snapshot = NodeSnapshot::new(node, lease, &self.uid);
        let spec = self.remediation.spec.clone();
        let world = self.world;
        let level_binding = Box::pin(self.level_binding()).await?.map(Box::new);
        let level_binding_name = level_binding.as_ref().map(|b| b.name_any()).unwrap_or_default();
        let confirmed = level_binding.as_ref().map(|b| self.confirmed_levels(b)).unwrap_or_default();
        self.commit_retrying(node, |status, memory| {
            let context = fence::Context {
                now: world.now(),
                mono: world.mono(),
                instance: &instance,
                node: &snapshot,
                hold_power_action: None,
                memory,
                timing: timing(world),
                levels: level_binding.as_ref().map(|b| fence::LevelsView {
                    binding: &level_binding_name,
                    generation: b.metadata.generation,
                    levels: &b.spec.pdu_levels,
                    confirmed: &confirmed,
                }),
                #[cfg(test)]
                sabotage: world.sabotage(),
            };
            fence::next(&spec, status, observation.clone(), context)
        })
        .await
    }

    /// Commits `decide`'s decision on the latest status, deciding again after a conflict.
    pub(super) async fn commit_retrying(
        &mut self,
        node: &Node,
        decide: impl Fn(&CoronerRemediationStatus, &Memory) -> Decision,
    ) -> Result<(), Error> {
        let name = self.remediation.name_any();
        for _ in 0..3 {
            let memory = self.remembered();
            let decision = decide(&self.status(), &memory);
            match self.commit(decision, Some(node)).await {
                Err(Error::Api(ApiError::Conflict(_))) => {
                    let latest = self
                        .world
                        .remediation(&name)
                        .await?
                        .ok_or_else(|| ApiError::NotFound(format!("remediation {name}")))?;
                    self.stored(latest);
                }
                other => return other,
            }
        }
        Err(Error::StatusConflicts(3))
    }

    /// Metrics of what the last write changed: a start, the outcome, and the stages completed.
    pub(super) fn count_transition(&self, old: &CoronerRemediationStatus) {
        let new = self.status();
        let metrics = self.world.metrics();
        if old.phase.is_none() && new.phase.is_some() {
            metrics.remediations_started.inc();
        }
        if let Some(outcome) = telemetry::decided_outcome(old, &new) {
            metrics.remediations_finished.get_or_create(&outcome).inc();
        }
        if let Some(outcome) = telemetry::proven_again_outcome(old, &new) {
            metrics.proofs_taken_again.get_or_create(&outcome).inc();
        }
        for (stage, seconds) in telemetry::stage_durations(old, &new) {
            metrics.fence_stage_seconds.get_or_create(&StageLabels { stage: stage.into() }).observe(seconds);
        }
    }
}
