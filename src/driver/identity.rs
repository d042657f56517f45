//! The identity step: the binding that names the node, the target its device answers as the node's
//! machine, and every other claim on that machine ([`crate::identity`] judges them); what the fence
//! found is recorded on the binding.

use super::*;
use crate::identity::Claim;

impl<W: World> Fence<'_, W> {
    pub(super) async fn bindings_for_node(&self) -> Result<Vec<BmcBinding>, Error> {
        let all = self.world.bindings(Listing::Stored).await?;
        Ok(all.into_iter().filter(|b| b.spec.node_name == self.node_name).collect())
    }

    pub(super) fn binding_name(&self) -> String {
        self.status().evidence.and_then(|e| e.identity).map(|i| i.binding).unwrap_or_default()
    }

    /// The device for the binding the identity was proven through, and which client it is.
    pub(super) async fn device_for_fence(&self) -> Result<Result<(W::Target, DeviceMark), BmcFailure>, Error> {
        let status = self.status();
        let Some(name) = status.evidence.as_ref().and_then(|e| e.identity.as_ref()).map(|i| i.binding.clone()) else {
            return Ok(Err(BmcFailure {
                transient: false,
                reason: Reason::BindingInvalid,
                message: "no verified binding recorded".into(),
            }));
        };
        let Some(binding) = self.world.binding(&name).await? else {
            let message = format!("BmcBinding {name} was deleted during the fence");
            return Ok(Err(BmcFailure { transient: false, reason: Reason::BindingInvalid, message }));
        };
        Ok(match self.world.target(&binding).await? {
            Ok((device, serial)) => Ok((device, mark(&binding, serial))),
            Err(unusable) => {
                Err(BmcFailure { transient: false, reason: unusable.reason(), message: unusable.to_string() })
            }
        })
    }

    /// Resolves the binding, reads the BMC's system (pinned, the only one, or the one whose UUID names
    /// the node) and collects every other claim on a machine. Other BMCs are never asked.
    pub(super) async fn identity(
        &self,
        snapshot: &NodeSnapshot,
    ) -> Result<Result<IdentityFound, IdentityProblem>, Error> {
        let all = self.world.bindings(Listing::Stored).await?;
        let bindings: Vec<&BmcBinding> = all.iter().filter(|b| b.spec.node_name == self.node_name).collect();
        let binding = match bindings.as_slice() {
            [binding] => binding,
            [] => {
                let message = format!(
                    "no BmcBinding in namespace {} names node {}",
                    self.world.settings().namespace,
                    self.node_name
                );
                return Ok(Err(IdentityProblem::Binding { reason: Reason::NoBmcBinding, message, seen_on: None }));
            }
            _ => {
                let message = format!("several BmcBindings name node {}", self.node_name);
                return Ok(Err(IdentityProblem::Binding { reason: Reason::BindingConflict, message, seen_on: None }));
            }
        };
        let requested = self.world.mono();
        // A rejection of the credentials is taken once as a sign that they changed since the client
        // was built (at admission): it is built again from the Secret and asked once more when that
        // gives other credentials, as a power reading is.
        let mut rejected: Option<(W::Target, u64, Result<SystemReading, IdentityProblem>)> = None;
        let mut asked_again = false;
        let (device, serial, found) = loop {
            let (device, serial) = match self.world.target(binding).await? {
                Ok(found) => found,
                Err(unusable) => {
                    let (reason, message) = (unusable.reason(), unusable.to_string());
                    return Ok(Err(IdentityProblem::Binding { reason, message, seen_on: None }));
                }
            };
            match rejected.take() {
                Some(earlier) if earlier.1 == serial => break earlier,
                Some(_) | None => {}
            }
            let found = {
                let _turn = self.local.origins.turn(&device.origin()).await;
                node_system(self.world, binding, &device, &snapshot.system_uuid, "read").await
            };
            // A sighting of life before the rejection is kept as it is: asking again could lose it.
            let unauthorized =
                matches!(&found, Err(IdentityProblem::Bmc(f)) if f.reason == Reason::BmcAuthenticationFailed);
            if unauthorized && !asked_again {
                self.world.forget_target(binding);
                asked_again = true;
                rejected = Some((device, serial, found));
                continue;
            }
            break (device, serial, found);
        };
        let sampled = Sampled { requested, answered: self.world.mono() };
        let system = match found {
            Ok(system) => {
                self.remember_power(&system);
                system
            }
            Err(problem) => return Ok(Err(problem)),
        };
        // Another node's binding on the same BMC: what this read answered tells which is wrong.
        let peers = origin_peers(self.world, binding, &all).await?;
        let settled = gates::conflict_settled_by_identity(
            &binding.name_any(),
            &self.node_name,
            &snapshot.system_uuid,
            &system.uuid,
            &peers,
        );
        if let Err(message) = settled {
            // A1: a system reporting the node's UUID answered, whatever the conflict: its power is a
            // reading of the node's machine.
            let names_node = crate::identity::names_machine(&snapshot.system_uuid, &system.uuid);
            let seen_on = names_node.then(|| system.power_state.to_string());
            return Ok(Err(IdentityProblem::Binding { reason: Reason::BindingConflict, message, seen_on }));
        }
        Ok(Ok(IdentityFound {
            binding: binding.name_any(),
            endpoint: binding.spec.endpoint(),
            // The identity read was answered: its handshake was verified unless verification is off.
            tls_verified: binding
                .spec
                .ipmi
                .is_none()
                .then(|| verification::request_tls_verified(&binding.spec.tls_policy(), true)),
            system,
            claims: claims(self.world, &self.node_name, binding).await?,
            through: mark(binding, serial),
            sampled,
            origin: device.origin(),
        }))
    }

    /// Records what the fence found on its binding's status, once per fence ([`verification::fence_finding`]:
    /// the proof, or the final refusal), so `kubectl get bmcb` shows what the fence last saw. The
    /// binding is the one the identity was proven through, else the one binding naming the node.
    /// Best-effort: a failure is logged and never fails the fence.
    pub(super) async fn record_on_binding(&self, finding: FenceFinding<'_>) {
        if verification::fence_check(finding).is_none() {
            return;
        }
        let proven_through = self.status().evidence.and_then(|e| e.identity).map(|i| i.binding);
        let binding = match proven_through {
            Some(name) => self.world.binding(&name).await.map_err(Error::from),
            None => self.bindings_for_node().await.map(|bindings| match <[BmcBinding; 1]>::try_from(bindings) {
                Ok([binding]) => Some(binding),
                Err(_) => None,
            }),
        };
        let binding = match binding {
            Ok(Some(binding)) => binding,
            Ok(None) => return,
            Err(error) => {
                tracing::warn!(%error, "could not read the BmcBinding to record the fence's finding on it");
                return;
            }
        };
        let mut status = binding.status.clone().unwrap_or_default();
        // A proof verified the content the identity was read through, if the binding still has it.
        let content = self
            .status()
            .evidence
            .and_then(|e| e.identity?.binding_content)
            .and_then(|hex| u64::from_str_radix(&hex, 16).ok())
            .filter(|_| matches!(finding, FenceFinding::Proven { .. }));
        let (changed, notices) = verification::record_fence(&mut status, finding, &binding, content, self.world.now());
        if changed
            && let Err(error) =
                self.world.write_binding_status(&binding.name_any(), binding.status.as_ref(), &status).await
        {
            tracing::warn!(%error, binding = %binding.name_any(), "could not record the fence's finding on the BmcBinding");
        }
        for notice in &notices {
            self.world.publish(&binding.object_ref(&()), notice, "Verify").await;
        }
    }
}

/// Which client served an answer: the binding's generation and the client's serial.
pub(super) fn mark(binding: &BmcBinding, serial: u64) -> DeviceMark {
    DeviceMark { generation: binding.metadata.generation.unwrap_or_default(), serial }
}

/// The system on the binding's BMC that is the node's machine ([`Device::find`]: the pinned one,
/// the only one, or the one with the node's UUID), counted in the BMC metric under `operation`.
/// `IdentityProblem::Binding` (IdentityMismatch): several systems, none the node's.
pub async fn node_system<W: World>(
    world: &W,
    binding: &BmcBinding,
    device: &W::Target,
    node_uuid: &str,
    operation: &str,
) -> Result<SystemReading, IdentityProblem> {
    let pinned = crate::verification::pinned_system(binding);
    let found = device.find(pinned, node_uuid).await;
    let category = |interrupted: &crate::words::discovery::Interrupted| interrupted.error.category();
    world.metrics().bmc(&binding.name_any(), operation, found.as_ref().map_or_else(category, |_| "ok"));
    match found {
        Ok(Ok(system)) => Ok(system),
        Ok(Err(refusal)) => Err(IdentityProblem::Binding {
            reason: refusal.reason(),
            seen_on: refusal.seen_on(),
            message: format!("{refusal} (BMC {})", device.origin()),
        }),
        Err(interrupted) => {
            let failure = BmcFailure::from(&interrupted.error);
            let names_node = |system: &&SystemReading| crate::identity::names_machine(node_uuid, &system.uuid);
            // Life as the guard judges it (P4b: an Off the BMC does not vouch for is no sign of life).
            let alive =
                interrupted.answered.iter().filter(names_node).find(|s| crate::guard::shows_life(&s.power_state));
            Err(match alive {
                Some(system) => IdentityProblem::SeenThenFailed { failure, seen_on: system.power_state.to_string() },
                None => IdentityProblem::Bmc(failure),
            })
        }
    }
}

/// The bindings of other nodes that reach `binding`'s BMC without a distinct system
/// ([`gates::Conflict::SameOrigin`]), with their nodes' systemUUIDs as the Nodes report them now: what
/// [`gates::conflict_settled_by_identity`] judges the binding's identity read against.
pub async fn origin_peers<W: World>(
    world: &W,
    binding: &BmcBinding,
    all: &[BmcBinding],
) -> Result<Vec<gates::OriginPeer>, Error> {
    let conflicts = gates::binding_conflicts(all).remove(&binding.name_any()).unwrap_or_default();
    let peers: Vec<(String, String)> = conflicts
        .into_iter()
        .filter_map(|conflict| match conflict {
            gates::Conflict::SameOrigin { other, other_node, .. } => Some((other, other_node)),
            gates::Conflict::SameNode { .. } => None,
        })
        .collect();
    if peers.is_empty() {
        return Ok(Vec::new());
    }
    let nodes = world.system_uuids(Listing::Stored).await?;
    let uuid_of = |name: &str| nodes.iter().find(|(node, _)| node == name).map(|(_, uuid)| uuid.clone());
    Ok(peers
        .into_iter()
        .map(|(binding, node)| {
            let node_uuid = uuid_of(&node).unwrap_or_default();
            gates::OriginPeer { binding, node, node_uuid }
        })
        .collect())
}

/// Every other Node's systemUUID and every other binding's last verified UUID: what must not
/// match the node's machine. Never asks another BMC.
pub async fn claims<W: World>(world: &W, node_name: &str, binding: &BmcBinding) -> Result<Vec<Claim>, Error> {
    let nodes = world.system_uuids(Listing::Stored).await?;
    let node_claims = nodes
        .into_iter()
        .filter(|(name, uuid)| name != node_name && !uuid.is_empty())
        .map(|(name, uuid)| Claim { owner: format!("Node {name}"), uuid });
    let namespace = &world.settings().namespace;
    let bindings = world.bindings(Listing::Stored).await?;
    let binding_claims = bindings.into_iter().filter(|b| b.uid() != binding.uid()).filter_map(|b| {
        let uuid = b.status.as_ref().and_then(|s| s.uuid.clone())?;
        Some(Claim { owner: format!("BmcBinding {namespace}/{}", b.name_any()), uuid })
    });
    Ok(node_claims.chain(binding_claims).collect())
}
