//! The gates' turn: the look at the fence window and the admission of a fence (its verdict counted
//! in this process's history before its status write).

use super::*;
use crate::gates::Admission;

impl<W: World> Fence<'_, W> {
    /// A4: whether the look asked for may be taken now ([`fence::look_may_be_taken`]), on fresh
    /// reads: the attestation that asked, every remediation, and the storm limits as a fence's
    /// power action meets them (without the admission window).
    pub(super) async fn look_gate(&self, history: &Admissions) -> Result<fence::LookGate, Error> {
        let status = self.status();
        let asked = fence::look_pending(&status).map(|l| l.attestation.clone()).unwrap_or_default();
        let attestation = self.world.attestation(&asked).await?;
        // Counted as the admissions count them: a fence this process admitted or let a look
        // through for holds its slot before the list shows it.
        let remediations: Vec<CoronerRemediation> = self
            .world
            .remediations(Listing::Fresh)
            .await?
            .into_iter()
            .map(|r| fence::as_proving_again(gates::as_admitted(r, &history.times), &history.reproving))
            .collect();
        let bindings = self.world.bindings(Listing::Stored).await?;
        let settings = self.world.settings();
        let me = CoronerRemediation { status: Some(status), ..self.remediation.clone() };
        let node = self.world.node(&self.node_name).await?.unwrap_or_default();
        let storm = gates::storm(&GateInputs {
            remediation: &me,
            node: &node,
            namespace: &settings.namespace,
            now: self.world.now(),
            lease: gates::LeaseSighting::Missing,
            bindings: &bindings,
            nodes: &[],
            etcd_pods: &[],
            remediations: &remediations,
            // No new slot of the admission window: the fence took one at its admission.
            recent_admissions: &[],
            limits: settings.limits,
        });
        Ok(fence::look_may_be_taken(
            &me,
            &self.node_name,
            attestation.as_ref(),
            &remediations,
            self.world.own_node(),
            storm,
        ))
    }

    /// Runs the gates on fresh reads of everything they look at.
    pub(super) async fn admission(
        &self,
        node: &Node,
        snapshot: &NodeSnapshot,
        history: &mut Admissions,
    ) -> Result<Verdict, Error> {
        let bindings = self.world.bindings(Listing::Stored).await?;
        // The quorum gate reads the other control-plane Nodes' and etcd members' readiness, which
        // a store may show from before one of them went down: listed fresh for a control-plane node.
        let quorum = if gates::is_control_plane(node) { Listing::Fresh } else { Listing::Stored };
        let nodes = self.world.nodes(quorum).await?;
        let etcd_pods = self.world.etcd_pods(quorum).await?;
        let settings = self.world.settings();
        // The remediations from the store; a queue decision is taken again on a fresh list (a wake-up
        // by the queue moving may come before the store shows the move), so waiting costs reads only
        // when woken.
        let lease = self.lease_sighting();
        let mut listing = Listing::Stored;
        loop {
            #[allow(unused_mut)]
            let mut remediations = self.world.remediations(listing).await?;
            #[cfg(test)]
            if sabotaged(self.world, crate::sabotage::Sabotage::SiblingsUnseen) {
                let uid = self.uid.clone();
                remediations.retain(|r| r.uid().as_ref() == Some(&uid) || node_of(r).as_ref() != Some(&self.node_name));
            }
            // A store may not show this leader's last admissions yet.
            let remediations: Vec<CoronerRemediation> = remediations
                .into_iter()
                .map(|r| fence::as_proving_again(gates::as_admitted(r, &history.times), &history.reproving))
                .collect();
            let now = self.world.now();
            for r in &remediations {
                if let (Some(uid), Some(node)) =
                    (r.uid(), r.status.as_ref().and_then(|s| s.evidence.as_ref()?.node.as_ref()))
                {
                    history.times.insert(uid, node.admitted_at.0);
                }
            }
            let admitted: Vec<Timestamp> = history.times.values().copied().collect();
            let inputs = GateInputs {
                remediation: &self.remediation,
                node,
                namespace: &settings.namespace,
                now,
                lease,
                bindings: &bindings,
                nodes: &nodes,
                etcd_pods: &etcd_pods,
                remediations: &remediations,
                recent_admissions: &admitted,
                limits: settings.limits,
            };
            let gate = gates::evaluate(&inputs);
            if listing == Listing::Stored && matches!(gate, Gate::Wait(Reason::Queued, _)) {
                listing = Listing::Fresh;
                continue;
            }
            return Ok(match gates::verdict(gate, &inputs) {
                Admission::Refuse { reason, message } => Verdict::Refuse { reason, message },
                Admission::Adopt(adoptable) => Verdict::Adopt(adoptable),
                Admission::AdoptionWaits { reason, message } => Verdict::Wait { reason, message, recheck: None },
                Admission::Wait { reason, message, recheck, frees_at } => {
                    let frees = frees_at.map(|at| StdDuration::try_from(at.duration_since(now)).unwrap_or_default());
                    *self.window_frees_in.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = frees;
                    Verdict::Wait { reason, message, recheck }
                }
                Admission::Admit => {
                    let mut evidence = snapshot.evidence(now);
                    // A2: the binding as admission found it, for an attestation to judge.
                    let named: Vec<&BmcBinding> =
                        bindings.iter().filter(|b| b.spec.node_name == self.node_name).collect();
                    if let [named] = named.as_slice()
                        && let Some(binding) = self.world.binding(&named.name_any()).await?
                    {
                        // Read fresh (a store may trail an edit), with the client the identity step then
                        // goes through (built now, reused then).
                        let content = self.world.target(&binding).await?.ok().map(|(_, content)| content);
                        let own = verification::at_admission(&binding, content, None);
                        // A binding re-created since its last verification: the one kept for the node
                        // counts at exactly this content, under coroner's seal.
                        let kept = if own.content.is_some() && own.verified_content != own.content {
                            let kept = self.world.kept_verification(&self.node_name).await?;
                            kept.filter(|kept| self.world.seal_kept(&self.node_name, kept) == kept.seal)
                        } else {
                            None
                        };
                        evidence.binding = Some(match kept {
                            Some(kept) => verification::at_admission(&binding, content, Some(&kept)),
                            None => own,
                        });
                    }
                    Verdict::Admit(Box::new(evidence))
                }
            });
        }
    }
}
