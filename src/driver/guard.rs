//! After the release: the guard's readings of the released machine ([`crate::guard`] decides) and
//! the bootID check.

use super::*;
use ports::Level;

/// What a guard round found at a level's outlets (L9).
enum OutletsRound {
    /// Every outlet proves Off: a BMC that cannot be read is no blindness.
    Off,
    /// They could not all be read, or the binding's level was edited since the release: the BMC is
    /// asked as after any release.
    Unknown,
    /// An outlet may feed the machine again: the finding is recorded (under `Enforce` the level's
    /// Off sent, or withheld saying why); the BMC is still read, and acted on only if it sees the
    /// machine run; the guard reads again after this.
    NotOff(StdDuration),
}

impl<W: World> Fence<'_, W> {
    /// A guard record to commit: `status` and its notices, with nothing sent and no wake-up of its own.
    fn recording(&self, status: CoronerRemediationStatus, notices: Vec<fence::Notice>) -> Decision {
        Decision { status, memory: self.remembered(), reset: None, requeue: None, notices }
    }

    /// The bootID check, on every reconcile once the fence released the node: a node back with its
    /// pre-fence bootID never went down ([`crate::guard::fence_did_not_take_effect`]).
    pub(super) async fn check_boot_id(&mut self, node: &Node) -> Result<(), Error> {
        let status = self.status();
        let snapshot = NodeSnapshot::new(node, None, &self.uid);
        #[cfg(test)]
        if sabotaged(self.world, crate::sabotage::Sabotage::BootIdUnchecked) {
            return Ok(());
        }
        let Some(message) = crate::guard::fence_did_not_take_effect(&status, &snapshot) else { return Ok(()) };
        let memory = self.remembered();
        if let Some(decision) = crate::guard::record_did_not_take_effect(&status, &memory, &message, self.world.now()) {
            // Counted once it is recorded: a write that conflicts is decided, and counted, again.
            self.commit(decision, Some(node)).await?;
            let labels = NodeLabels { node: self.node_name.clone() };
            self.world.metrics().fence_did_not_take_effect.get_or_create(&labels).inc();
        }
        Ok(())
    }

    /// The guard after the release, on every reconcile while this fence's release stands
    /// ([`crate::guard::release_stands`]). Returns when the guard reads again.
    pub(super) async fn guard(&mut self, node: &Node) -> Result<Option<StdDuration>, Error> {
        let status = self.status();
        let Some(release) = status.evidence.as_ref().and_then(|e| e.release.as_ref()) else { return Ok(None) };
        let snapshot = NodeSnapshot::new(node, None, &self.uid);
        let labels = NodeLabels { node: self.node_name.clone() };
        let id = crate::guard::release_id(&self.uid, &status);
        let value = node.annotations().get(crate::guard::APPROVAL_ANNOTATION).map(String::as_str);
        #[cfg(test)]
        let value = value.filter(|_| !sabotaged(self.world, crate::sabotage::Sabotage::ApprovalUnseen));
        let approval = crate::guard::approval(id.as_deref(), value);
        if let Some(new) = crate::guard::returned_without_approval(&status, &snapshot, approval, self.world.now()) {
            let notice = crate::guard::returned_notice(&self.node_name, id.as_deref());
            let decision = self.recording(new, vec![notice]);
            self.commit(decision, Some(node)).await?;
            self.world.metrics().returned_without_approval.get_or_create(&labels).inc();
            self.world.metrics().safety_override("ReturnedWithoutApproval");
        }
        let status = self.status();
        if !crate::guard::release_stands(&status, &snapshot) {
            return Ok(None);
        }
        // Boxed: rare paths, kept out of the size of every guard round's future.
        Box::pin(self.say_how_the_release_stands(node, &snapshot, approval)).await?;
        let status = self.status();
        let sibling_guards = match &release.adopted_from {
            Some(sibling) => self.world.remediation(sibling).await?.is_some(),
            None => false,
        };
        let interval = self.world.settings().guard_interval;
        let memory = self.remembered();
        let timing = (self.world.mono(), interval, self.uid.as_str());
        let outlets = match crate::guard::plan(&status, &memory, sibling_guards, self.world.leading(), timing) {
            crate::guard::Plan::Nothing => return Ok(None),
            crate::guard::Plan::Wait(wait) => return Ok(Some(wait)),
            crate::guard::Plan::Round { outlets } => outlets,
        };
        // L9: an outlet that may feed the machine again is the finding, whatever its BMC says.
        let (outlets_off, outlet_finding) = match outlets {
            Some(level) => match Box::pin(self.guard_outlets(level, node, &memory, approval)).await? {
                OutletsRound::Off => (true, None),
                OutletsRound::Unknown => (false, None),
                OutletsRound::NotOff(next) => (false, Some(next)),
            },
            None => (false, None),
        };
        let mut status = self.status();
        let mut memory = self.remembered();
        // P1: judged on the binding itself, so a reading that fails through an edited binding does
        // not leave the guard blind for good.
        let generation_now = match status.evidence.as_ref().and_then(|e| e.identity.as_ref()) {
            Some(identity) => self.world.binding(&identity.binding).await?.and_then(|b| b.metadata.generation),
            None => None,
        };
        let read = match crate::guard::machine(&status, generation_now) {
            crate::guard::Machine::Read(path) => Some(self.read_power(&path).await?),
            crate::guard::Machine::Identify => None,
        };
        let (read, finding) = match read {
            Some(read) => {
                let reading = read.as_ref().map(|(_, reading)| reading.clone()).map_err(Clone::clone);
                let finding = crate::guard::assess(&status, &reading);
                (Some(read), finding)
            }
            // An attested release, or a binding edited since: the machine is found first, through
            // the binding, as a fence does.
            _ => {
                let mut sighted = memory.clone();
                let identified = match crate::guard::identity_target(&status, &snapshot) {
                    Ok(uuid) => {
                        let found = self.identity(&snapshot).await?;
                        sighted = crate::guard::identified_sighting(&memory, &found);
                        crate::guard::identify(&status, found, &uuid, self.world.now())
                    }
                    Err(why) => Err(why),
                };
                match identified {
                    Ok((status, notice)) => {
                        let memory = sighted;
                        let decision = Decision { status, memory, reset: None, requeue: None, notices: vec![notice] };
                        self.commit(decision, Some(node)).await?;
                        return Ok(Some(StdDuration::ZERO));
                    }
                    // A1/R2: what answered before the device failed may have seen the machine alive
                    // (`IdentityProblem::SeenThenFailed`): that sighting is the round's to act on.
                    Err(why) => {
                        if sighted.sighted_on.is_some() && memory.sighted_on.is_none() {
                            status = crate::guard::sighted(&status, self.world.now());
                        }
                        memory = sighted;
                        (None, crate::guard::Finding::Blind(why.to_string()))
                    }
                }
            }
        };
        // L9: a BMC that cannot be read says nothing against outlets that prove the machine off.
        let finding = match finding {
            crate::guard::Finding::Blind(_) if outlets_off => crate::guard::Finding::Off,
            finding => finding,
        };
        // L9: an outlet's finding stands as the round's, its Off sent or withheld, unless the BMC
        // itself sees the machine run (a welded relay, an Off withheld): then its ForceOff too.
        if let Some(next) = outlet_finding
            && !matches!(finding, crate::guard::Finding::NotOff(_))
        {
            return Ok(Some(next));
        }
        if matches!(finding, crate::guard::Finding::Blind(_)) {
            self.world.metrics().guard_blind_reads.get_or_create(&labels).inc();
        }
        let instance = self.world.instance();
        let decision = crate::guard::next(&status, &memory, &finding, self.watch(approval, &instance));
        if decision.notices.iter().any(|n| n.reason == crate::guard::POWERED_ON && n.warning)
            && matches!(finding, crate::guard::Finding::NotOff(_))
        {
            self.world.metrics().released_machine_powered_on.get_or_create(&labels).inc();
        }
        let reset = decision.reset;
        self.commit(decision, Some(node)).await?;
        if let (Some(ResetType::ForceOff), Some(Ok((system, _)))) = (reset, read) {
            self.send_guard_reset(system, node).await?;
        }
        let memory = self.remembered();
        let next = crate::guard::due(&self.status(), &memory, self.world.mono(), interval, &self.uid);
        Ok(Some(next.unwrap_or(StdDuration::ZERO)))
    }

    /// What a guard round judges with: the fence's policy, the approval, this process and its clocks.
    fn watch<'i>(&self, approval: crate::guard::Approval<'i>, instance: &'i str) -> crate::guard::Watch<'i> {
        crate::guard::Watch {
            policy: self.spec().guard,
            approval,
            instance,
            now: self.world.now(),
            mono: self.world.mono(),
        }
    }

    /// L9: one guard round over the outlets of the level that proved the release ([`OutletsRound`]):
    /// an outlet that may feed the machine again is the finding, recorded, and under `Enforce` every
    /// outlet of the level is switched off again, its intent persisted first.
    async fn guard_outlets(
        &mut self,
        level: u32,
        node: &Node,
        memory: &Memory,
        approval: crate::guard::Approval<'_>,
    ) -> Result<OutletsRound, Error> {
        // L4: a meter that read in the fence and reads nothing now proves nothing to the guard either.
        let metered = self.status().progress.map(|p| p.metered_outlets).unwrap_or_default();
        let proven_generation =
            self.status().evidence.and_then(|e| e.power_off).and_then(|p| p.level).map(|l| l.binding_generation);
        let (what, through) = match self.read_outlets(level).await? {
            // P1: a level edited since the release may name other outlets: they say nothing of this
            // machine, and are never switched for it.
            Ok(reading) if Some(reading.through.generation) != proven_generation => return Ok(OutletsRound::Unknown),
            Ok(reading) => match crate::levels::level_proves_off_since(&reading.outcomes, &metered) {
                Ok(()) => return Ok(OutletsRound::Off),
                Err(crate::levels::LevelNotOff::NotOff { outlet, cause }) => {
                    (format!("outlet {outlet} of level {level}: {cause}"), reading.through)
                }
                Err(_) => return Ok(OutletsRound::Unknown),
            },
            Err(_) => return Ok(OutletsRound::Unknown),
        };
        let finding = crate::guard::Finding::OutletNotOff(what);
        let instance = self.world.instance();
        let decision = crate::guard::next(&self.status(), memory, &finding, self.watch(approval, &instance));
        if decision.notices.iter().any(|n| n.reason == crate::guard::POWERED_ON && n.warning) {
            let labels = NodeLabels { node: self.node_name.clone() };
            self.world.metrics().released_machine_powered_on.get_or_create(&labels).inc();
        }
        let reset = decision.reset;
        self.commit(decision, Some(node)).await?;
        if reset == Some(ResetType::ForceOff) {
            self.send_guard_outlets_off(level, through, node).await?;
        }
        let interval = self.world.settings().guard_interval;
        let next = crate::guard::due(&self.status(), &self.remembered(), self.world.mono(), interval, &self.uid);
        Ok(OutletsRound::NotOff(next.unwrap_or(StdDuration::ZERO)))
    }

    /// L9: the guard's Off to every outlet of the level, its intent persisted: every PDU's turn
    /// taken, then the level still the device its reading came through (P1), naming the same outlets,
    /// no outlet another live node's (L6); right before, the remediation unchanged since
    /// ([`guard_reset_still_wanted`]), the Node still calling for it ([`crate::guard::may_enforce`]),
    /// this replica leading for the requests' time. The turns are given back before the answer is
    /// recorded; withheld, it says why.
    async fn send_guard_outlets_off(&mut self, level: u32, read: DeviceMark, node: &Node) -> Result<(), Error> {
        let keys: Vec<String> = match self.level_devices(level).await? {
            Ok((devices, _)) => devices.outlets().into_iter().map(|(key, _)| key).collect(),
            Err(failure) => {
                return self.guard_withheld(crate::guard::GuardHold::NoDevice(failure.message), node).await;
            }
        };
        let turns = self.pdu_turns(&keys).await;
        let checked = self.checked_guard_outlets_off(level, read, &keys).await;
        drop(turns);
        match checked? {
            Ok(result) => {
                let labels = NodeLabels { node: self.node_name.clone() };
                self.world.metrics().guard_force_offs.get_or_create(&labels).inc();
                let now = self.world.now();
                self.commit_retrying(node, |status, memory| {
                    crate::guard::outlets_answered(status, memory, &result, now, level)
                })
                .await
            }
            Err(hold) => self.guard_withheld(hold, node).await,
        }
    }

    /// Under the PDUs' turns, through [`Self::checked_power_action`]: the checks of
    /// [`Self::send_guard_outlets_off`], then the requests. `Err(hold)`: why nothing was sent.
    async fn checked_guard_outlets_off(
        &self,
        level: u32,
        read: DeviceMark,
        keys: &[String],
    ) -> Result<Result<Result<u16, crate::fence::BmcFailure>, crate::guard::GuardHold>, Error> {
        use crate::guard::GuardHold;
        let status = self.status();
        let timeout = self.world.settings().request_timeout;
        let checks = power::Checks {
            need: timeout * u32::try_from(keys.len()).unwrap_or(u32::MAX) + CHECKS_ALLOWANCE,
            device_check: power::DeviceCheck::BeforeLeader,
            wanted: power::guard_reset_still_wanted,
            not_wanted: GuardHold::RemediationChanged,
            reads_lease: false,
            allows: |now: Option<&Node>, _lease| crate::guard::may_enforce(&status, now, &self.uid),
        };
        let device = async || {
            let devices = match self.level_devices(level).await? {
                Ok((devices, now)) if now == read => devices,
                Ok(_) => return Ok(Err(GuardHold::DeviceChanged)),
                Err(failure) => return Ok(Err(GuardHold::NoDevice(failure.message))),
            };
            if devices.outlets().into_iter().map(|(key, _)| key).ne(keys.iter().cloned()) {
                return Ok(Err(GuardHold::DeviceChanged));
            }
            if let Err(message) = self.shared_outlets_allow(level, keys).await? {
                return Ok(Err(GuardHold::OutletShared(message)));
            }
            Ok(Ok(devices))
        };
        let send = async |devices: W::Level| Ok(Ok(self.switch_outlets_off(&devices, level).await));
        self.checked_power_action(checks, device, send).await
    }

    /// R3 and R4, said once each: an approval honoured with no admission policy guarding it, and a
    /// release record the Node disagrees with. A divergence is judged on a fresh read of the Node: the
    /// one this reconcile began with may predate its own release.
    async fn say_how_the_release_stands(
        &mut self,
        node: &Node,
        snapshot: &NodeSnapshot,
        approval: crate::guard::Approval<'_>,
    ) -> Result<(), Error> {
        if matches!(approval, crate::guard::Approval::ForThisRelease(_)) {
            let (policies, bindings) = self.world.admission_policies().await?;
            let problem = crate::guard::approval_policy_problem(&policies, &bindings);
            if let Some((new, notice)) =
                crate::guard::approval_policy_record(&self.status(), problem.as_deref(), self.world.now())
            {
                if notice.is_some() {
                    self.world.metrics().safety_override(crate::guard::APPROVAL_POLICY_MISSING);
                }
                let decision = self.recording(new, Vec::from_iter(notice));
                self.commit(decision, Some(node)).await?;
            }
        }
        let status = self.status();
        let recorded = status.guard.as_ref().and_then(|g| g.record_diverged.clone());
        if crate::guard::record_diverged(&status, snapshot) == recorded {
            return Ok(());
        }
        let Some(fresh) = self.world.node(&self.node_name).await? else { return Ok(()) };
        let fresh_snapshot = NodeSnapshot::new(&fresh, None, &self.uid);
        if let Some((new, notice)) = crate::guard::diverged_record(&status, &fresh_snapshot) {
            let decision = self.recording(new, Vec::from_iter(notice));
            self.commit(decision, Some(&fresh)).await?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        api::{
            CoronerRemediationSpec, FenceAction, MappingProof, PduLevel, PduOutlet, SecretRef, SnmpOutlet, SnmpVersion,
        },
        sim::{
            lab::{Lab, LabClock, LabOutlets, Setup},
            script::{Script, Scripted},
        },
    };

    const UUID: &str = "7f3b0c1e-0000-4000-8000-000000000001";
    const OUTLET: &str = "snmp:pdu-a:161|1";

    /// L9, P1: the guard's Off to a level's outlets is sent only when its checks since the leader
    /// check took no longer than [`CHECKS_ALLOWANCE`], as every other power request: otherwise the
    /// Lease the leader check asked for may no longer cover the requests.
    #[test]
    fn the_guards_outlets_off_whose_checks_outlast_their_allowance_is_not_sent() {
        let spec = CoronerRemediationSpec { action: FenceAction::Off, ..CoronerRemediationSpec::default() };
        let clock = LabClock::virtual_time();
        let device = Scripted::new(Script::machine(UUID, true), clock.clone());
        let outlets = LabOutlets::new(&[OUTLET]);
        let lab = Lab::with_level(&Setup::new(UUID, spec), clock, device, Some(outlets.clone()));
        let released = futures::executor::block_on(lab.run());
        assert!(released.evidence.as_ref().and_then(|e| e.release.as_ref()).is_some(), "{released:?}");
        let outlet = PduOutlet {
            redfish: None,
            snmp: Some(SnmpOutlet {
                address: "pdu-a".into(),
                port: None,
                outlet: 1,
                version: SnmpVersion::V3,
                auth_protocol: None,
                priv_protocol: None,
                context_name: None,
            }),
            credentials_secret_ref: SecretRef { name: "pdu-credentials".into() },
            tls: None,
            floor_watts: None,
            shared_with: Vec::new(),
        };
        assert_eq!(outlet.key(), OUTLET);
        let level = PduLevel { outlets: vec![outlet], mapping_proof: Some(MappingProof::OperatorStatement) };
        lab.world(|t| t.bindings.get_mut("worker-1").map(|b| b.spec.pdu_levels = vec![level]));
        let remediation = lab.world(|t| t.remediation("worker-1")).unwrap();
        let off = futures::executor::block_on(async {
            let fence = Fence::load(&lab, lab.local(), &remediation).await.unwrap();
            let (_, read) = fence.level_devices(2).await.unwrap().unwrap();
            lab.slow_checks_at_the_next_power_action(CHECKS_ALLOWANCE + StdDuration::from_secs(1));
            let slow = fence.checked_guard_outlets_off(2, read, &[OUTLET.to_owned()]).await;
            assert!(matches!(slow, Err(Error::ChecksTooSlow { .. })), "{slow:?}");
            assert!(outlets.is_on(0), "nothing was sent");
            fence.checked_guard_outlets_off(2, read, &[OUTLET.to_owned()]).await
        });
        assert!(matches!(off, Ok(Ok(Ok(_)))), "{off:?}");
        assert!(!outlets.is_on(0), "checks within their allowance: sent");
    }
}
