//! The power readings and the power actions: the fence's ForceOff, the `Reboot`'s `On` and the
//! guard's ForceOff, each right after its persisted intent and the re-checks before the request.

use super::*;

impl<W: World> Fence<'_, W> {
    /// A1: what the node's machine answered is remembered as soon as it answers, before anything
    /// else this reconcile does can fail; an attestation in this process never follows life it saw.
    pub(super) fn remember_power(&self, system: &SystemReading) {
        let status = self.status();
        let node_uuid = status.evidence.as_ref().and_then(|e| e.node.as_ref()).map(|n| n.system_uuid.as_str());
        let names_node = node_uuid.is_some_and(|node| crate::identity::names_machine(node, &system.uuid));
        if names_node {
            let mut memory = self.remembered();
            memory.last_power = Some(system.power_state.to_string());
            self.remember(memory);
        }
    }

    /// One power reading of the verified system, stamped with when it was asked for and when it was
    /// answered, with what a power action right after it aims at. A rejection of the credentials is
    /// taken once as a sign that they changed: the client is built again from the Secret and read
    /// with once more; after an accepted ForceOff of this fence, a rejection that stays passes
    /// ([`fence::rejection_passes`]): the next reading reads the Secret again.
    pub(super) async fn read_power(&self, system_path: &str) -> Result<Result<(Aim, PowerReading), BmcFailure>, Error> {
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
                Err(BmcError::Unauthorized(401)) => break,
                Ok(system) => {
                    self.remember_power(&system);
                    let reading = PowerReading::of(&system, Sampled { requested, answered }, through);
                    return Ok(Ok((Aim { system, through, origin: device.origin() }, reading)));
                }
                Err(error) => return Ok(Err(BmcFailure::from(&error))),
            }
        }
        let passes = fence::rejection_passes(&self.status());
        if passes && let Some(binding) = self.world.binding(&binding).await? {
            self.world.forget_target(&binding);
        }
        let message = match passes {
            true => {
                "the BMC rejected the credentials, also after they were read again; after coroner's accepted ForceOff (a rotation under way?) they are read again at the next reading"
            }
            false => "the BMC rejected the credentials, also after they were read again",
        };
        Ok(Err(BmcFailure { transient: passes, reason: Reason::BmcAuthenticationFailed, message: message.into() }))
    }

    /// P1, the one checked power action: the checks right before every power request coroner sends
    /// — the fence's reset, the guard's reset, and the outlets' Off of the fence and the guard — in
    /// their order, the device's turn held by the caller (waiting for it must not age what follows).
    /// The device check first where it reads lists whose time is not bounded (a level's L6,
    /// [`DeviceCheck::BeforeLeader`]); the leader check, asking the Lease to outlast the checks
    /// that follow and the requests (`need`); the device check here otherwise (one object read); the
    /// remediation read again, which `wanted` judges against the one whose status carries the
    /// intent; then the node's Lease (where the caller judges it) and the Node, last, which `allows`
    /// judges. No apiserver round trip sits between the Node read and the request, and a request
    /// whose checks since the leader check took longer than [`CHECKS_ALLOWANCE`] is not sent.
    /// Returns the answer, or the caller's why-not.
    pub(super) async fn checked_power_action<D, R>(
        &self,
        checks: Checks<R, impl FnOnce(Option<&Node>, Option<Option<Timestamp>>) -> Result<(), R>>,
        device: impl AsyncFnOnce() -> Result<Result<D, R>, Error>,
        send: impl AsyncFnOnce(D) -> Result<Result<Result<u16, BmcFailure>, R>, Error>,
    ) -> Result<Result<Result<u16, BmcFailure>, R>, Error> {
        let Checks { need, device_check, wanted, not_wanted, reads_lease, allows } = checks;
        let (device, checked) = match device_check {
            DeviceCheck::BeforeLeader => {
                let found = match device().await? {
                    Ok(found) => found,
                    Err(why) => return Ok(Err(why)),
                };
                self.world.ensure_leader(need).await?;
                (found, self.world.mono())
            }
            DeviceCheck::AfterLeader => {
                self.world.ensure_leader(need).await?;
                let checked = self.world.mono();
                match device().await? {
                    Ok(found) => (found, checked),
                    Err(why) => return Ok(Err(why)),
                }
            }
        };
        // Late, next to the Node: a write by another process (a deposed one that has not noticed
        // yet) that withdrew the intent must not be missed while the other checks ran.
        let name = self.remediation.name_any();
        let current =
            self.world.remediation(&name).await?.ok_or_else(|| ApiError::NotFound(format!("remediation {name}")))?;
        if !wanted(&current, &self.remediation) {
            return Ok(Err(not_wanted));
        }
        let lease = match reads_lease {
            true => self.world.node_lease(&self.node_name).await?,
            false => None,
        };
        let node = self.world.node(&self.node_name).await?;
        if let Err(why) = allows(node.as_ref(), lease) {
            return Ok(Err(why));
        }
        let took = self.world.mono().saturating_sub(checked);
        if took > CHECKS_ALLOWANCE {
            return Err(Error::ChecksTooSlow { took, allowance: CHECKS_ALLOWANCE });
        }
        send(device).await
    }

    /// The fence's and the guard's reset through [`Self::checked_power_action`]: the origin's turn,
    /// the binding read fresh after the leader check, whose device must be the one the aimed-at
    /// reading was taken through ([`fence::DeviceMark`]: the binding's generation and the digest of
    /// its endpoint, TLS material and credential values), the node's Lease read with the Node.
    async fn checked_reset<R>(
        &self,
        aim: &Aim,
        reset: ResetType,
        wanted: fn(&CoronerRemediation, &CoronerRemediation) -> bool,
        allows: impl FnOnce(Option<&Node>, Option<Option<Timestamp>>) -> Result<(), R>,
    ) -> Result<Result<Result<u16, BmcFailure>, Unsent<R>>, Error> {
        let _turn = self.local.origins.turn(&aim.origin).await;
        let timeout = self.world.settings().request_timeout;
        let checks = Checks {
            need: timeout + CHECKS_ALLOWANCE,
            device_check: DeviceCheck::AfterLeader,
            wanted,
            not_wanted: Unsent::NotWanted,
            reads_lease: true,
            allows: |node: Option<&Node>, lease| allows(node, lease).map_err(Unsent::Refused),
        };
        let device = async || match self.device_for_fence().await? {
            Ok((device, now)) if now == aim.through => Ok(Ok(device)),
            Ok((_, now)) => Ok(Err(Unsent::DeviceChanged { proven: aim.through, now })),
            Err(failure) => Ok(Err(Unsent::NoDevice(failure))),
        };
        let send = async |device: W::Target| {
            info!(reset = reset.as_str(), system = %aim.system.path, "sending reset");
            let result = device.act(&aim.system, reset).await;
            let binding = self.binding_name();
            self.world.metrics().bmc(&binding, "reset", result.as_ref().map_or_else(BmcError::category, |_| "ok"));
            match result {
                Err(error) if error.sent_nothing() => Ok(Err(Unsent::NoDevice(BmcFailure::from(&error)))),
                // P7: a reset refused for its credentials (HTTP 401: rotated since the client was
                // built) did nothing and passes: the client is built again from the Secret, and the
                // next reading, through it, is followed by the reset again. A 403 (no power
                // privilege) does not pass.
                Err(error @ BmcError::Unauthorized(401)) => {
                    if let Some(binding) = self.world.binding(&binding).await? {
                        self.world.forget_target(&binding);
                    }
                    Ok(Ok(Err(BmcFailure { transient: true, ..BmcFailure::from(&error) })))
                }
                result => Ok(Ok(result.map_err(|e| BmcFailure::from(&e)))),
            }
        };
        self.checked_power_action(checks, device, send).await
    }

    /// Sends the reset the persisted decision asked for (its intent is already in status) through
    /// [`Self::checked_reset`]: the remediation unchanged ([`reset_still_wanted`]), the node still
    /// allowing the action ([`fence::may_power_off`], [`fence::may_power_on`]). Records the answer,
    /// or why nothing was sent. `true`: the BMC accepted it.
    pub(super) async fn send_reset(&mut self, reset: ResetType, aim: Option<Aim>, node: &Node) -> Result<bool, Error> {
        let Some(aim) = aim else {
            let failure = BmcFailure {
                transient: true,
                reason: Reason::BmcProtocolError,
                message: "no fresh reading to reset from".into(),
            };
            return self.commit_observation(Observation::ActionUnsent(failure), node).await.map(|()| false);
        };
        let (spec, status, uid, name) = (self.spec(), self.status(), self.uid.clone(), self.node_name.clone());
        let mut seen = None;
        #[cfg(test)]
        let sabotage = self.world.sabotage();
        let allows = |now: Option<&Node>, lease| {
            seen = now.cloned();
            let Some(now) = now else { return Err(NodeRefusal::Gone { node: name }) };
            #[allow(unused_mut)]
            let mut snapshot = NodeSnapshot::new(now, lease, &uid);
            #[cfg(test)]
            match sabotage {
                crate::sabotage::Sabotage::OnUnderTaint => snapshot.out_of_service = None,
                crate::sabotage::Sabotage::LeaseUnchecked => {
                    if let Some(admitted) = status.evidence.as_ref().and_then(|e| e.node.as_ref()) {
                        snapshot.lease_present = admitted.lease_present;
                        snapshot.lease_renew_time = admitted.lease_renew_time.as_ref().map(|t| t.0);
                    }
                }
                _ => {}
            }
            match reset {
                ResetType::ForceOff => fence::may_power_off(&spec, &status, &snapshot),
                ResetType::On => fence::may_power_on(&snapshot),
            }
        };
        let outcome = self.checked_reset(&aim, reset, reset_still_wanted, allows).await?;
        let node = seen.as_ref().unwrap_or(node);
        let accepted = matches!(outcome, Ok(Ok(_)));
        let observation = match outcome {
            Ok(result) => Observation::ResetAnswered { action: reset, result },
            Err(Unsent::NotWanted) => {
                info!(reset = reset.as_str(), "the remediation changed since the intent was written; not sending");
                return Ok(false);
            }
            Err(Unsent::Refused(refusal)) => {
                info!(reset = reset.as_str(), %refusal, "the node no longer allows the power action; not sending");
                Observation::ActionRefused(refusal)
            }
            Err(Unsent::DeviceChanged { proven, now }) => {
                info!(reset = reset.as_str(), "the binding changed since the reading; not sending");
                Observation::DeviceChanged { proven, now }
            }
            Err(Unsent::NoDevice(failure)) => {
                info!(reset = reset.as_str(), cause = %failure.message, "no device to send to; not sending");
                Observation::ActionUnsent(failure)
            }
        };
        // The answer must land: a reset left unanswered in status would be sent again.
        self.commit_observation(observation, node).await.map(|()| accepted)
    }

    /// The guard's ForceOff to a released machine that reads on again: its intent is persisted, then
    /// [`Self::checked_reset`] with the remediation unchanged ([`guard_reset_still_wanted`]) and the
    /// Node still calling for it ([`crate::guard::may_enforce`]); the reset goes to the system whose
    /// answer (its UUID re-checked) asked for it, through the device it was read through. It takes
    /// no storm-limit slot.
    pub(super) async fn send_guard_reset(&mut self, aim: Aim, node: &Node) -> Result<(), Error> {
        #[cfg(test)]
        if self.world.sabotage() == crate::sabotage::Sabotage::GuardSendsNothing {
            return Ok(());
        }
        let (status, uid) = (self.status(), self.uid.clone());
        #[cfg(test)]
        let unseen = sabotaged(self.world, crate::sabotage::Sabotage::ApprovalUnseen);
        let allows = |now: Option<&Node>, _lease| {
            #[cfg(test)]
            if unseen && let Some(node) = now {
                let mut without = node.clone();
                without.annotations_mut().remove(crate::guard::APPROVAL_ANNOTATION);
                return crate::guard::may_enforce(&status, Some(&without), &uid);
            }
            crate::guard::may_enforce(&status, now, &uid)
        };
        let result = match self.checked_reset(&aim, ResetType::ForceOff, guard_reset_still_wanted, allows).await? {
            Ok(result) => result,
            Err(Unsent::NotWanted) => {
                return self.guard_withheld(crate::guard::GuardHold::RemediationChanged, node).await;
            }
            Err(Unsent::Refused(hold)) => return self.guard_withheld(hold, node).await,
            Err(Unsent::DeviceChanged { .. }) => {
                return self.guard_withheld(crate::guard::GuardHold::DeviceChanged, node).await;
            }
            Err(Unsent::NoDevice(failure)) => {
                return self.guard_withheld(crate::guard::GuardHold::NoDevice(failure.message), node).await;
            }
        };
        let labels = NodeLabels { node: self.node_name.clone() };
        self.world.metrics().guard_force_offs.get_or_create(&labels).inc();
        let now = self.world.now();
        self.commit_retrying(node, |status, memory| crate::guard::answered(status, memory, &result, now)).await
    }

    pub(super) async fn guard_withheld(&mut self, hold: crate::guard::GuardHold, node: &Node) -> Result<(), Error> {
        info!(%hold, "the guard does not send ForceOff");
        let now = self.world.now();
        self.commit_retrying(node, |status, memory| crate::guard::withheld(status, memory, &hold, now)).await
    }
}

/// P1: what the checks after the leader check (the binding, the node's Lease, the Node) may take;
/// the leader check asks the Lease to outlast them and the request, and a request whose checks took
/// longer is not sent.
pub const CHECKS_ALLOWANCE: StdDuration = StdDuration::from_secs(2);

/// Where a checked power action checks its device (P1): right after the leader check, inside the
/// allowance, when it is one object read; before it when it reads lists whose time is not bounded
/// (a level's outlets with L6's look at every binding and remediation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum DeviceCheck {
    BeforeLeader,
    AfterLeader,
}

/// A caller's checks of [`Fence::checked_power_action`]: what the leader check asks the Lease to
/// outlast, where the device is checked, whether the remediation read again still wants the request
/// (and what to say when it does not), whether the node's Lease is read with the Node, and what the
/// Node (and Lease) must allow. `R`: the caller's why-not.
pub(super) struct Checks<R, A> {
    pub need: StdDuration,
    pub device_check: DeviceCheck,
    pub wanted: fn(&CoronerRemediation, &CoronerRemediation) -> bool,
    pub not_wanted: R,
    pub reads_lease: bool,
    pub allows: A,
}

/// What a power request aims at: the system a reading found, the device mark it was read through
/// and that device's origin.
#[derive(Clone, Debug)]
pub struct Aim {
    pub system: SystemReading,
    pub through: DeviceMark,
    pub origin: String,
}

/// Why a checked reset was not sent.
enum Unsent<R> {
    /// The remediation changed since the intent was written (or is being deleted, or timed out).
    NotWanted,
    /// The binding leads to no device (deleted, its Secret unusable), or the device proved another
    /// machine right before the request: nothing was sent.
    NoDevice(BmcFailure),
    /// The caller's check of the Node: the fence's ([`fence::may_power_off`],
    /// [`fence::may_power_on`]) or the guard's ([`crate::guard::may_enforce`]).
    Refused(R),
    /// The binding, read fresh, leads to another device than the reading's.
    DeviceChanged { proven: DeviceMark, now: DeviceMark },
}

/// Right before the guard's ForceOff: the remediation as read again must be the one whose status
/// carries the intent, not being deleted. `nhc-timed-out` stops the fence, never the guard of a
/// release already made (docs/safety.md R1).
pub fn guard_reset_still_wanted(current: &CoronerRemediation, intended: &CoronerRemediation) -> bool {
    current.resource_version() == intended.resource_version() && current.metadata.deletion_timestamp.is_none()
}

/// Right before a reset: the remediation as read again must be the one whose status carries the
/// intent (unchanged since), not timed out by NHC (but for a proof taken again on an attestation's
/// look, [`fence::runs_past_nhc_timeout`]) and not being deleted.
pub fn reset_still_wanted(current: &CoronerRemediation, intended: &CoronerRemediation) -> bool {
    let timed_out = contract::nhc_timed_out(&current.metadata);
    let status = current.status.clone().unwrap_or_default();
    current.resource_version() == intended.resource_version()
        && (timed_out.is_none() || crate::fence::runs_past_nhc_timeout(&status, timed_out))
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
    fn a_proof_taken_again_on_an_attestations_look_goes_on_under_the_timeout_value_recorded_with_the_ask() {
        use crate::api::{AttestationLook, CoronerRemediationStatus, Evidence, LookFound, Phase};
        let stamped = |value: &str| {
            let mut r = remediation("7");
            r.metadata.annotations = Some([(contract::TIMED_OUT_ANNOTATION.to_owned(), value.to_owned())].into());
            r.status = Some(CoronerRemediationStatus {
                phase: Some(Phase::ConfirmingOff),
                evidence: Some(Evidence {
                    attestation_look: Some(AttestationLook {
                        attestation: "worker-1-x7k2p".into(),
                        attestation_uid: "att".into(),
                        requested_at: k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(Timestamp::UNIX_EPOCH),
                        may_prove_again: true,
                        nhc_timed_out: Some("2026-12-01T10:00:00Z".into()),
                        looked_at: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(
                            Timestamp::UNIX_EPOCH,
                        )),
                        found: Some(LookFound::ProvingAgain),
                        message: None,
                    }),
                    ..Evidence::default()
                }),
                ..CoronerRemediationStatus::default()
            });
            r
        };
        let intended = remediation("7");
        assert!(reset_still_wanted(&stamped("2026-12-01T10:00:00Z"), &intended));
        assert!(!reset_still_wanted(&stamped("2026-12-01T10:30:00Z"), &intended), "NHC timed it out again since");
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
