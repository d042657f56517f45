//! The power readings and the power actions: the fence's ForceOff, the `Reboot`'s `On` and the
//! guard's ForceOff, each right after its persisted intent and the re-checks before the request.

use super::*;

impl<W: World> Fence<'_, W> {
    /// A1: what the node's machine answered is remembered as soon as it answers, before anything
    /// else this reconcile does can fail; an attestation in this process never follows life it saw.
    pub(super) fn remember_power(&self, system: &SystemReading) {
        let status = self.status();
        let node_uuid = status.evidence.as_ref().and_then(|e| e.node.as_ref()).map(|n| n.system_uuid.as_str());
        let names_node = node_uuid
            .and_then(crate::identity::parse)
            .zip(crate::identity::parse(&system.uuid))
            .is_some_and(|(node, bmc)| crate::identity::same_machine(node, bmc).is_some());
        if names_node {
            let mut memory = self.remembered();
            memory.last_power = Some(system.power_state.to_string());
            self.remember(memory);
        }
    }

    /// One power reading of the verified system, stamped with when it was asked for and when it was
    /// answered. A rejection of the credentials is taken once as a sign that they changed: the client
    /// is built again from the Secret and read with once more.
    pub(super) async fn read_power(
        &self,
        system_path: &str,
    ) -> Result<Result<(SystemReading, PowerReading), BmcFailure>, Error> {
        let binding = self.binding_name();
        for fresh in [false, true] {
            let (device, through) = match self.device_for_fence().await? {
                Ok(found) => found,
                Err(failure) => return Ok(Err(failure)),
            };
            let read = {
                let _turn = self.local.origins.turn(&device.origin()).await;
                let requested = self.world.mono();
                let read = device.read(system_path).await;
                (requested, read, self.world.mono())
            };
            let (requested, read, answered) = read;
            self.world.metrics().bmc(&binding, "read", read.as_ref().map_or_else(BmcError::category, |_| "ok"));
            match read {
                Err(BmcError::Unauthorized(_)) if !fresh => {
                    if let Some(binding) = self.world.binding(&binding).await? {
                        self.world.forget_target(&binding);
                    }
                }
                Ok(system) => {
                    self.remember_power(&system);
                    let reading = PowerReading::of(&system, Sampled { requested, answered }, through);
                    return Ok(Ok((system, reading)));
                }
                Err(error) => return Ok(Err(BmcFailure::from(&error))),
            }
        }
        Ok(Err(BmcFailure {
            transient: false,
            reason: Reason::BmcAuthenticationFailed,
            message: "the BMC rejected the credentials, also after they were read again".into(),
        }))
    }

    /// Sends the reset the persisted decision asked for (its intent is already in status), and
    /// records the answer. Everything that takes time comes first; right before the POST the
    /// remediation is read again ([`reset_still_wanted`]), the BMC origin's turn is taken, the node
    /// and its Lease are read again and must still allow the action ([`fence::may_power_off`],
    /// [`fence::may_power_on`]), and the leader Lease must outlast the request.
    pub(super) async fn send_reset(
        &mut self,
        reset: ResetType,
        system: Option<SystemReading>,
        node: &Node,
    ) -> Result<(), Error> {
        let binding = self.binding_name();
        let device = self.device_for_fence().await?;
        let name = self.remediation.name_any();
        let current =
            self.world.remediation(&name).await?.ok_or_else(|| ApiError::NotFound(format!("remediation {name}")))?;
        if !reset_still_wanted(&current, &self.remediation) {
            info!(reset = reset.as_str(), "the remediation changed since the intent was written; not sending");
            return Ok(());
        }
        // The origin's turn first: waiting for it must not age the checks that follow.
        let turn = match &device {
            Ok((device, _)) => Some(self.local.origins.turn(&device.origin()).await),
            Err(_) => None,
        };
        let now_node = self.world.node(&self.node_name).await?;
        let refusal = match &now_node {
            None => Some(NodeRefusal::Gone { node: self.node_name.clone() }),
            Some(now_node) => {
                let lease = self.world.node_lease(&self.node_name).await?;
                let snapshot = NodeSnapshot::new(now_node, lease, &self.uid);
                match reset {
                    ResetType::ForceOff => fence::may_power_off(&self.spec(), &self.status(), &snapshot).err(),
                    ResetType::On => fence::may_power_on(&snapshot).err(),
                }
            }
        };
        if let Some(refusal) = refusal {
            info!(reset = reset.as_str(), %refusal, "the node no longer allows the power action; not sending");
            return self
                .commit_observation(Observation::ActionRefused(refusal), now_node.as_ref().unwrap_or(node))
                .await;
        }
        self.world.ensure_leader(self.world.settings().request_timeout).await?;
        let result = match (device, system) {
            (Ok((device, _)), Some(system)) => {
                info!(reset = reset.as_str(), system = %system.path, "sending reset");
                let result = device.act(&system, reset).await;
                self.world.metrics().bmc(&binding, "reset", result.as_ref().map_or_else(BmcError::category, |_| "ok"));
                result.map_err(|e| BmcFailure::from(&e))
            }
            (Err(failure), _) => Err(failure),
            (Ok(_), None) => Err(BmcFailure {
                transient: true,
                reason: Reason::BmcProtocolError,
                message: "no fresh reading to reset from".into(),
            }),
        };
        drop(turn);
        // The answer must land: a reset left unanswered in status would be sent again.
        self.commit_observation(Observation::ResetAnswered { action: reset, result }, node).await
    }

    /// The guard's ForceOff to a released machine that reads on again: its intent is persisted, the
    /// remediation read again unchanged, the Node read again still calling for it
    /// ([`crate::guard::may_enforce`]), the leader Lease outlasting the request; the reset goes to the
    /// system whose answer (its UUID re-checked) asked for it. It takes no storm-limit slot.
    pub(super) async fn send_guard_reset(&mut self, system: SystemReading, node: &Node) -> Result<(), Error> {
        let name = self.remediation.name_any();
        let current =
            self.world.remediation(&name).await?.ok_or_else(|| ApiError::NotFound(format!("remediation {name}")))?;
        if !guard_reset_still_wanted(&current, &self.remediation) {
            let now = self.world.now();
            let hold = crate::guard::GuardHold::RemediationChanged;
            info!(%hold, "the guard does not send ForceOff");
            return self
                .commit_retrying(node, |status, memory| crate::guard::withheld(status, memory, &hold, now))
                .await;
        }
        let device = self.device_for_fence().await?;
        // The origin's turn first: waiting for it must not age the checks that follow.
        let turn = match &device {
            Ok((device, _)) => Some(self.local.origins.turn(&device.origin()).await),
            Err(_) => None,
        };
        let now_node = self.world.node(&self.node_name).await?;
        if let Err(hold) = crate::guard::may_enforce(&self.status(), now_node.as_ref(), &self.uid) {
            drop(turn);
            info!(%hold, "the guard does not send ForceOff");
            let now = self.world.now();
            return self
                .commit_retrying(node, |status, memory| crate::guard::withheld(status, memory, &hold, now))
                .await;
        }
        self.world.ensure_leader(self.world.settings().request_timeout).await?;
        let result = match device {
            Ok((device, _)) => {
                info!(system = %system.path, "the guard sends ForceOff to the released machine");
                let result = device.act(&system, ResetType::ForceOff).await;
                let binding = self.binding_name();
                self.world.metrics().bmc(&binding, "reset", result.as_ref().map_or_else(BmcError::category, |_| "ok"));
                result.map_err(|e| BmcFailure::from(&e))
            }
            Err(failure) => Err(failure),
        };
        drop(turn);
        let labels = NodeLabels { node: self.node_name.clone() };
        self.world.metrics().guard_force_offs.get_or_create(&labels).inc();
        let now = self.world.now();
        self.commit_retrying(node, |status, memory| crate::guard::answered(status, memory, &result, now)).await
    }
}

/// Right before the guard's ForceOff: the remediation as read again must be the one whose status
/// carries the intent, not being deleted. `nhc-timed-out` stops the fence, never the guard of a
/// release already made (docs/safety.md R1).
pub fn guard_reset_still_wanted(current: &CoronerRemediation, intended: &CoronerRemediation) -> bool {
    current.resource_version() == intended.resource_version() && current.metadata.deletion_timestamp.is_none()
}

/// Right before a reset: the remediation as read again must be the one whose status carries the
/// intent (unchanged since), not timed out by NHC and not being deleted.
pub fn reset_still_wanted(current: &CoronerRemediation, intended: &CoronerRemediation) -> bool {
    current.resource_version() == intended.resource_version()
        && !contract::timed_out_by_nhc(&current.metadata)
        && current.metadata.deletion_timestamp.is_none()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn remediation(version: &str) -> CoronerRemediation {
        let mut r = CoronerRemediation::new("worker-1-abcde", Default::default());
        r.metadata.resource_version = Some(version.into());
        r
    }

    #[test]
    fn a_reset_is_still_wanted_only_by_the_unchanged_remediation_neither_timed_out_nor_deleted() {
        let intended = remediation("7");
        assert!(reset_still_wanted(&remediation("7"), &intended));
        assert!(!reset_still_wanted(&remediation("8"), &intended), "changed since the intent was persisted");
        let mut timed_out = remediation("7");
        timed_out.metadata.annotations =
            Some([(contract::TIMED_OUT_ANNOTATION.to_owned(), "2026-12-01T10:00:00Z".to_owned())].into());
        assert!(!reset_still_wanted(&timed_out, &intended), "NHC gave up on it");
        let mut deleted = remediation("7");
        deleted.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Timestamp::UNIX_EPOCH));
        assert!(!reset_still_wanted(&deleted, &intended), "being deleted");
    }

    #[test]
    fn nhc_timed_out_stops_the_fence_but_never_the_guards_force_off() {
        let intended = remediation("7");
        let mut timed_out = remediation("7");
        timed_out.metadata.annotations =
            Some([(contract::TIMED_OUT_ANNOTATION.to_owned(), "2026-12-01T10:00:00Z".to_owned())].into());
        assert!(guard_reset_still_wanted(&timed_out, &intended), "the release NHC gave up on is still guarded");
        assert!(!guard_reset_still_wanted(&remediation("8"), &intended), "changed since the intent was persisted");
        let mut deleted = remediation("7");
        deleted.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Timestamp::UNIX_EPOCH));
        assert!(!guard_reset_still_wanted(&deleted, &intended), "being deleted: the release ends with it");
    }
}
