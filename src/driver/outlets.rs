//! A fence at a PDU level (docs/safety.md L1–L9): the level's outlets read, and switched off through
//! the checked power action's checks (leader, the binding read fresh and its level's device
//! unchanged, the remediation unchanged, shared outlets, the node's Lease and the Node last).

use super::*;
use crate::{
    bmc::Heard,
    fence::{AskedAfterOutlets, BmcFailure, DeviceMark, LevelReading, Sampled},
    levels::{self as rules, OutletOutcome},
    pdu::PduError,
};
use ports::{Level, Target};
use power::{Checks, DeviceCheck, reset_still_wanted};

/// What a PDU's error means to the fence: a silent or unreachable PDU is read again; anything else
/// is the level's end, with the BMC's reason for the same class.
fn failure(error: &PduError) -> BmcFailure {
    let (transient, reason) = match error {
        PduError::Timeout { .. } | PduError::Unreachable(_) => (true, Reason::BmcUnreachable),
        PduError::Tls(_) => (false, Reason::BmcTlsVerificationFailed),
        PduError::Unauthorized(_) => (false, Reason::BmcAuthenticationFailed),
        PduError::Http { status, .. } if *status >= 500 => (true, Reason::BmcUnreachable),
        PduError::Http { .. }
        | PduError::Snmp { .. }
        | PduError::Protocol(_)
        | PduError::CrossHostRedirect(_)
        | PduError::UnsupportedModel(_)
        | PduError::NoSuchOutlet(_) => (false, Reason::BmcProtocolError),
        PduError::Setup(_) => (false, Reason::BindingInvalid),
    };
    BmcFailure { transient, reason, message: error.to_string() }
}

impl<W: World> Fence<'_, W> {
    /// The binding the fence's levels come from: the one admission recorded, else the one that
    /// names the node (from the store: no request).
    pub(super) async fn level_binding(&self) -> Result<Option<BmcBinding>, Error> {
        if !fence::may_end_in_a_level(fence::phase_of(&self.status())) {
            return Ok(None);
        }
        self.stored_level_binding().await
    }

    /// The binding of the fence's levels as the store holds it, in any phase: the one admission
    /// recorded, else the one that names the node.
    async fn stored_level_binding(&self) -> Result<Option<BmcBinding>, Error> {
        let status = self.status();
        let admitted = status.evidence.as_ref().and_then(|e| e.node.as_ref()).and_then(|n| n.binding.as_ref());
        if let Some(admitted) = admitted {
            return Ok(self.world.stored_binding(&admitted.name).await?);
        }
        // A fence admitted before admission recorded its binding.
        let all = self.world.bindings(Listing::Stored).await?;
        Ok(all.into_iter().find(|b| b.spec.node_name == self.node_name))
    }

    /// L5: per level of `binding` (index 0 is level 2), the generation at which the machine confirmed
    /// its mapping: only a confirmation this coroner sealed, at the binding's current generation.
    pub(super) fn confirmed_levels(&self, binding: &BmcBinding) -> Vec<Option<i64>> {
        let generation = binding.metadata.generation;
        let confirmations = binding.status.as_ref().map(|s| s.level_confirmations.as_slice()).unwrap_or_default();
        (2u32..)
            .take(binding.spec.pdu_levels.len())
            .map(|level| {
                confirmations
                    .iter()
                    .find(|c| c.level == level)
                    .filter(|c| c.seal.as_deref() == Some(self.world.seal(binding, c).as_str()))
                    .filter(|c| rules::confirms(c, generation))
                    .and(generation)
            })
            .collect()
    }

    /// The binding as the API server holds it now, and its level `level`'s devices.
    pub(super) async fn level_devices(&self, level: u32) -> Result<Result<(W::Level, DeviceMark), BmcFailure>, Error> {
        let name = self.stored_level_binding().await?.map(|b| b.name_any());
        let binding = match name {
            Some(name) => self.world.binding(&name).await?,
            None => None,
        };
        let Some(binding) = binding else {
            let message = "the BmcBinding of the node's PDU levels no longer exists".to_owned();
            return Ok(Err(BmcFailure { transient: false, reason: Reason::BindingInvalid, message }));
        };
        Ok(match self.world.level(&binding, level).await? {
            Ok((devices, serial)) => {
                Ok((devices, DeviceMark { generation: binding.metadata.generation.unwrap_or_default(), serial }))
            }
            Err(unusable) => {
                Err(BmcFailure { transient: false, reason: unusable.reason(), message: unusable.to_string() })
            }
        })
    }

    /// L7: the node's BMC asked once the level's outlets read Off for settle: one fresh connection to
    /// its address first (silence ends the question there), then, if anything answered, the identity
    /// read (a system of the node's UUID, no other claim).
    pub(super) async fn ask_bmc_after_outlets(&self, snapshot: &NodeSnapshot) -> Result<AskedAfterOutlets, Error> {
        let all = self.world.bindings(Listing::Stored).await?;
        let mut named = all.iter().filter(|b| b.spec.node_name == self.node_name);
        let (Some(binding), None) = (named.next(), named.next()) else {
            return Ok(AskedAfterOutlets::NotAsked(format!("not one BmcBinding names node {}", self.node_name)));
        };
        let device = match self.world.target(binding).await? {
            Ok((device, _)) => device,
            Err(unusable) => return Ok(AskedAfterOutlets::NotAsked(unusable.to_string())),
        };
        let heard = {
            let _turn = self.local.origins.turn(&device.origin()).await;
            device.heard().await
        };
        Ok(match heard {
            Heard::Silent => AskedAfterOutlets::Silent,
            Heard::NotAsked(why) => AskedAfterOutlets::NotAsked(why),
            Heard::Answered => AskedAfterOutlets::Answered(Box::new(self.identity(snapshot).await?)),
        })
    }

    /// One reading of every outlet of the level, one request per outlet at a time.
    pub(super) async fn read_outlets(&self, level: u32) -> Result<Result<LevelReading, BmcFailure>, Error> {
        let (devices, through) = match self.level_devices(level).await? {
            Ok(found) => found,
            Err(failure) => return Ok(Err(failure)),
        };
        let requested = self.world.mono();
        let mut outcomes = Vec::new();
        #[allow(unused_mut)]
        let mut outlets = devices.outlets();
        #[cfg(test)]
        if sabotaged(self.world, crate::sabotage::Sabotage::PartialLevel) {
            outlets.truncate(1);
        }
        for (index, (outlet, floor_watts)) in outlets.into_iter().enumerate() {
            let reading = {
                let _turn = self.local.origins.turn(crate::api::outlet_origin(&outlet)).await;
                devices.read(index).await
            };
            let binding = self.binding_label();
            self.world.metrics().bmc(
                &binding,
                "outlet-read",
                reading.as_ref().map_or_else(PduError::category, |_| "ok"),
            );
            outcomes.push(OutletOutcome { outlet, floor_watts, reading });
        }
        let sampled = Sampled { requested, answered: self.world.mono() };
        Ok(Ok(LevelReading { level, outcomes, sampled, through }))
    }

    fn binding_label(&self) -> String {
        let status = self.status();
        let admitted = status.evidence.as_ref().and_then(|e| e.node.as_ref()).and_then(|n| n.binding.as_ref());
        admitted.map(|b| b.name.clone()).unwrap_or_default()
    }

    /// Switches every outlet of the level off, the intent already persisted: every PDU's turn taken
    /// first, then [`Self::checked_outlets_off`]; the turns are given back before the answer is
    /// recorded.
    pub(super) async fn send_outlets_off(&mut self, node: &Node) -> Result<(), Error> {
        let level = self.status().progress.as_ref().and_then(|p| p.level).unwrap_or(2);
        let keys: Vec<String> = match self.level_devices(level).await? {
            Ok((devices, _)) => devices.outlets().into_iter().map(|(key, _)| key).collect(),
            Err(failure) => return self.commit_observation(Observation::ActionUnsent(failure), node).await,
        };
        let turns = self.pdu_turns(&keys).await;
        let checked = self.checked_outlets_off(level, &keys).await;
        drop(turns);
        match checked? {
            (Some(observation), fresh) => self.commit_observation(observation, fresh.as_ref().unwrap_or(node)).await,
            (None, _) => Ok(()),
        }
    }

    /// Under the PDUs' turns, through [`Self::checked_power_action`]: before the leader check, the
    /// binding's level must still be the device the readings came through, naming the same outlets,
    /// and no outlet may feed a live node (L6); then, right before the requests, this replica must
    /// lead for their time, the remediation must still want them, and the node's Lease and the Node
    /// must still allow a power-off. What to record (none: the remediation changed), and the Node as
    /// read fresh.
    async fn checked_outlets_off(
        &self,
        level: u32,
        keys: &[String],
    ) -> Result<(Option<Observation>, Option<Node>), Error> {
        let status = self.status();
        let memory = self.remembered();
        let spec = self.spec();
        let timeout = self.world.settings().request_timeout;
        let mut fresh = None;
        let checks = Checks {
            need: timeout * u32::try_from(keys.len()).unwrap_or(u32::MAX) + CHECKS_ALLOWANCE,
            device_check: DeviceCheck::BeforeLeader,
            wanted: reset_still_wanted,
            not_wanted: None,
            reads_lease: true,
            allows: |now: Option<&Node>, lease| {
                fresh = now.cloned();
                let allowed = match now {
                    None => Err(NodeRefusal::Gone { node: self.node_name.clone() }),
                    Some(now) => fence::may_power_off(&spec, &status, &NodeSnapshot::new(now, lease, &self.uid)),
                };
                allowed.map_err(|refusal| {
                    info!(%refusal, "the node no longer allows the outlets' Off; not sending");
                    Some(Box::new(Observation::ActionRefused(refusal)))
                })
            },
        };
        let device = async || {
            let unsent = |message: &str| {
                let failure =
                    BmcFailure { transient: true, reason: Reason::BmcUnreachable, message: message.to_owned() };
                Some(Box::new(Observation::ActionUnsent(failure)))
            };
            let (devices, now) = match self.level_devices(level).await? {
                Ok(found) => found,
                Err(failure) => return Ok(Err(Some(Box::new(Observation::ActionUnsent(failure))))),
            };
            let named: Vec<String> = devices.outlets().into_iter().map(|(key, _)| key).collect();
            if memory.through.is_some_and(|through| through != now) || named != keys {
                return Ok(Err(unsent("the BmcBinding's level changed since its outlets were read")));
            }
            // Two fresh lists: before the checks whose time is bounded (they read one object each).
            if let Err(message) = self.shared_outlets_allow(level, keys).await? {
                let refused = BmcFailure { transient: false, reason: Reason::OutletShared, message };
                return Ok(Err(Some(Box::new(Observation::Outlets(Err(refused))))));
            }
            Ok(Ok(devices))
        };
        let send = async |devices: W::Level| Ok(Ok(self.switch_outlets_off(&devices, level).await));
        match self.checked_power_action(checks, device, send).await? {
            Ok(result) => Ok((Some(Observation::ResetAnswered { action: ResetType::ForceOff, result }), fresh)),
            Err(None) => {
                info!("the remediation changed since the outlets' Off was written; not sending");
                Ok((None, None))
            }
            Err(Some(observation)) => match *observation {
                refused @ Observation::ActionRefused(_) => Ok((Some(refused), fresh)),
                observation => Ok((Some(observation), None)),
            },
        }
    }

    /// The turn of every PDU the outlets (keys) are on, in one order: taken before the checks that
    /// must hold right before the requests, so no wait for a turn comes between them.
    pub(super) async fn pdu_turns(&self, keys: &[String]) -> Vec<tokio::sync::OwnedMutexGuard<()>> {
        let origins: std::collections::BTreeSet<&str> = keys.iter().map(|k| crate::api::outlet_origin(k)).collect();
        let mut turns = Vec::with_capacity(origins.len());
        for origin in origins {
            turns.push(self.local.origins.turn(origin).await);
        }
        turns
    }

    /// Immediate Off to every outlet of the level, one request per outlet at a time, the PDUs'
    /// turns held by the caller ([`Self::pdu_turns`]); the first failure is the answer (the others
    /// are still switched: each outlet that goes off takes power away).
    pub(super) async fn switch_outlets_off(&self, devices: &W::Level, level: u32) -> Result<u16, BmcFailure> {
        let mut result = Ok(0);
        for (index, (outlet, _)) in devices.outlets().iter().enumerate() {
            info!(%outlet, level, "switching the outlet off");
            let sent = devices.switch_off(index).await;
            let binding = self.binding_label();
            self.world.metrics().bmc(&binding, "outlet-off", sent.as_ref().map_or_else(PduError::category, |_| "ok"));
            if let Err(error) = sent
                && result.is_ok()
            {
                result = Err(failure(&error));
            }
        }
        result
    }

    /// L6, right before the outlets are switched: none of them is named by another binding
    /// undeclared, and every node a declared shared outlet feeds is itself being fenced.
    pub(super) async fn shared_outlets_allow(
        &self,
        level: u32,
        outlets: &[String],
    ) -> Result<Result<(), String>, Error> {
        #[cfg(test)]
        if sabotaged(self.world, crate::sabotage::Sabotage::SharedUnchecked) {
            return Ok(Ok(()));
        }
        let bindings = self.world.bindings(Listing::Fresh).await?;
        let conflicts = rules::shared_outlets(&bindings);
        for conflict in conflicts.values().flatten() {
            if outlets.contains(&conflict.outlet) {
                return Ok(Err(format!("level {level}: {conflict}; no outlet is switched")));
            }
        }
        let feeds: Vec<String> = bindings
            .iter()
            .filter(|b| b.spec.node_name != self.node_name)
            .filter(|b| b.spec.pdu_levels.iter().flat_map(|l| &l.outlets).any(|o| outlets.contains(&o.key())))
            .map(|b| b.spec.node_name.clone())
            .collect();
        if feeds.is_empty() {
            return Ok(Ok(()));
        }
        // A released node counts only while its release stands and nobody approved its power-on,
        // judged on its Node read now (as its own guard would judge an Off).
        let mut fenced = std::collections::BTreeSet::new();
        for remediation in self.world.remediations(Listing::Fresh).await? {
            let Some(node) = node_of(&remediation).filter(|n| feeds.contains(n)) else { continue };
            let status = remediation.status.clone().unwrap_or_default();
            let released = match status.evidence.as_ref().is_some_and(|e| e.release.is_some()) {
                true => {
                    let fresh = self.world.node(&node).await?;
                    let uid = remediation.uid().unwrap_or_default();
                    crate::guard::may_enforce(&status, fresh.as_ref(), &uid).is_ok()
                }
                false => false,
            };
            let deleting = remediation.metadata.deletion_timestamp.is_some();
            if rules::may_lose_shared_outlet(Phase::of(&remediation), released, deleting) {
                fenced.insert(node);
            }
        }
        Ok(rules::may_switch_shared(&feeds, &fenced).map_err(|live| {
            format!(
                "level {level}: its outlets also feed nodes {} that are not being fenced; no outlet is switched",
                live.join(", ")
            )
        }))
    }
}
