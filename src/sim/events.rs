//! A scenario's events striking the world: a partition healing, a BMC lying or dying, a leader moving,
//! a binding edited, a person attesting or approving, outlets switched by hand.

use super::*;

impl Run {
    pub(super) fn scenario_event(&mut self, event: Event) {
        let now = self.now();
        let leader = self.leader();
        match event {
            Event::Heal => self.shared.with(|t| {
                if let Some(m) = t.machine_of_node(TARGET) {
                    t.machines[m].reach = Reach::Connected;
                }
            }),
            Event::PowerGlitch { on_for } => {
                self.shared.with(|t| {
                    if let Some(m) = t.machine_of_node(TARGET) {
                        t.power_on_by_world(m, Some(now + on_for));
                    }
                });
                self.at(now + on_for, Happening::GlitchEnd);
            }
            // A BMC whose supply coroner's outlets cut stays dark: only a supply that came back wakes it.
            Event::BmcBack { machine_on } => self.shared.with(|t| {
                if !t.bmcs[0].alive && !t.unpowered_bmcs.contains(&0) {
                    t.set_bmc_alive(0, true);
                    if machine_on && let Some(m) = t.machine_of_node(TARGET) {
                        t.power_on_by_world(m, None);
                    }
                }
            }),
            Event::PowerOn => self.shared.with(|t| {
                if let Some(m) = t.machine_of_node(TARGET) {
                    t.power_on_by_world(m, None);
                }
            }),
            Event::ApprovePowerOn => self.shared.with(|t| {
                // What `coroner approve` writes: the release id it reads from the remediation's status
                // (before any release, there is none to name).
                let released = t.remediations.values().find_map(|r| {
                    let uid = r.uid()?;
                    crate::guard::release_id(&uid, r.status.as_ref()?)
                });
                let why = "alice: back to service after the PDU repair";
                let value = released.map_or_else(|| why.to_owned(), |id| format!("{id} {why}"));
                t.annotate_node(TARGET, crate::guard::APPROVAL_ANNOTATION, &value);
                t.life.entry(TARGET.into()).or_default().push((now, world::Life::Approved));
                t.log.push(world::Record::Approved { at: now, node: TARGET.into(), value });
            }),
            Event::DenyNodeWrites { for_ } => self.shared.with(|t| t.node_writes_denied_until = now + for_),
            Event::ForeignOutOfService => self.shared.with(|t| {
                t.add_foreign_taint(TARGET, CoronerTaint::OutOfService.key(), Some("manual"), "NoExecute", "an admin")
            }),
            Event::RemoveOutOfServiceByHand => {
                self.shared.with(|t| t.remove_taints_by_hand(TARGET, CoronerTaint::OutOfService.key()))
            }
            Event::DeleteRemediation => self.shared.with(|t| {
                let first = t
                    .remediations
                    .values()
                    .find(|r| contract::node_name(&r.metadata) == Some(TARGET))
                    .map(ResourceExt::name_any);
                if let Some(name) = first {
                    t.delete_remediation(&name);
                }
            }),
            Event::SecondRemediation => self.shared.with(|t| {
                let spec = t.nhc_spec.clone();
                t.create_remediation(&format!("{TARGET}-second"), TARGET, &spec);
            }),
            Event::BmcDown => self.shared.with(|t| t.set_bmc_alive(0, false)),
            Event::RotateBmcFirst { lag } => {
                self.shared.with(|t| {
                    let secret =
                        t.bindings.get(TARGET).map(|b| b.spec.credentials_secret_ref.name.clone()).unwrap_or_default();
                    t.bmcs[0].credentials = t.secrets.get(&secret).copied().unwrap_or(1) + 1;
                });
                self.at(now + lag, Happening::Scenario(Event::SecretFollows));
            }
            Event::SecretFollows => self.shared.with(|t| {
                let secret =
                    t.bindings.get(TARGET).map(|b| b.spec.credentials_secret_ref.name.clone()).unwrap_or_default();
                let version = t.bmcs[0].credentials;
                t.secrets.insert(secret, version);
            }),
            Event::RotateCredentials => self.shared.with(|t| {
                let secret =
                    t.bindings.get(TARGET).map(|b| b.spec.credentials_secret_ref.name.clone()).unwrap_or_default();
                let version = t.secrets.get(&secret).copied().unwrap_or(1) + 1;
                t.secrets.insert(secret, version);
                t.bmcs[0].credentials = version;
            }),
            Event::LeaderMove => {
                let standby = self.shared.with(|t| {
                    t.processes
                        .iter()
                        .find(|(pid, p)| p.alive && !p.leading && Some(**pid) != leader)
                        .map(|(pid, _)| *pid)
                });
                if let (Some(old), Some(new)) = (leader, standby) {
                    self.become_leader(new);
                    let noticed = now + self.rng.i64(0..5 * SECOND);
                    self.at(noticed, Happening::StopLeading(old));
                }
            }
            Event::CrashLeader => {
                if let Some(pid) = leader {
                    self.shared.with(|t| {
                        if let Some(p) = t.processes.get_mut(&pid) {
                            p.alive = false;
                        }
                    });
                }
            }
            Event::ExcludeNode => self.shared.with(|t| t.exclude_node(TARGET)),
            Event::ReplaceNode => self.shared.with(|t| t.replace_node(TARGET)),
            Event::Attest { acknowledge, returning } => {
                let acknowledged =
                    if acknowledge { self.shared.with(|t| t.preflight_acknowledgements(TARGET)) } else { Vec::new() };
                // The preflight says an acknowledgement counts only in an attestation created after
                // the evidence plus leaseFreshness: the person comes back then, once.
                let freshness = self.scenario.spec.lease_freshness.get();
                let earliest = acknowledged.iter().map(|a| a.at.0 + freshness).max().map(|at| {
                    let epoch = self.shared.with(|t| t.wall(0));
                    at.duration_since(epoch).as_micros() as Micros + SECOND
                });
                match earliest {
                    Some(later) if later > now && !returning => {
                        self.at(later, Happening::Scenario(Event::Attest { acknowledge, returning: true }));
                    }
                    _ => self.shared.with(|t| {
                        let name = format!("{TARGET}-{}", t.attestations.len() + 1);
                        t.create_attestation(
                            &name,
                            TARGET,
                            "alice",
                            "rack 4 lost its power; I pulled both plugs of worker-1",
                            acknowledged,
                        );
                    }),
                }
            }
            Event::BmcTellsTruth => self.shared.with(|t| {
                t.bmcs[0].answers = world::PowerAnswers::Honest;
                t.bmc_truthful_at = Some(t.now);
                if let Some(m) = t.machine_of_node(TARGET)
                    && t.machines[m].on
                {
                    // On all along, and visible as such from now on.
                    let at = t.now;
                    t.log.push(world::Record::PoweredOn { at, machine: m, until: None });
                }
            }),
            Event::EditBinding(edit) => self.shared.with(|t| t.edit_binding(TARGET, edit)),
            Event::RecreateBinding => self.shared.with(|t| t.recreate_binding(TARGET)),
            Event::OutletsOnByHand => self.shared.with(Truth::outlets_on_by_hand),
            Event::SecretChange { value } => self.shared.with(|t| {
                let secret =
                    t.bindings.get(TARGET).map(|b| b.spec.credentials_secret_ref.name.clone()).unwrap_or_default();
                if value {
                    let version = t.secrets.get(&secret).copied().unwrap_or(1) + 1;
                    t.secrets.insert(secret, version);
                    t.bmcs[0].credentials = version;
                }
                // The binding verifier re-checks the binding and writes its status.
                t.touch_binding(TARGET);
                t.note_binding_content(TARGET);
            }),
            Event::CaBundleChange { content } => self.shared.with(|t| {
                let tls = t.bindings.get(TARGET).and_then(|b| b.spec.tls.clone());
                if let Some(reference) = tls.and_then(|t| t.ca_bundle_ref)
                    && content
                {
                    *t.config_maps.entry(reference.name).or_insert(1) += 1;
                }
                // The binding verifier re-checks the binding and writes its status.
                t.touch_binding(TARGET);
                t.note_binding_content(TARGET);
            }),
            Event::RewriteTaint => self.shared.with(|t| t.rewrite_out_of_service(TARGET)),
            Event::DeleteNode => self.shared.with(|t| t.delete_node(TARGET)),
            Event::NhcTimesOut => self.shared.with(|t| {
                let stamp = t.wall(t.now).to_string();
                let names: Vec<String> = t
                    .remediations
                    .values()
                    .filter(|r| contract::node_name(&r.metadata) == Some(TARGET))
                    .map(ResourceExt::name_any)
                    .collect();
                for name in names {
                    t.annotate_remediation(&name, contract::TIMED_OUT_ANNOTATION, &stamp);
                }
            }),
            Event::SlowApi { for_ } => self.shared.with(|t| t.api_slow_until = now + for_),
            Event::CrashAfterNextNodeWrite => self.shared.with(|t| t.crash_after_node_write = leader),
            Event::ClockStep { by } => {
                if let Some(pid) = leader {
                    self.shared.with(|t| {
                        if let Some(p) = t.processes.get_mut(&pid) {
                            p.clock_offset += by;
                        }
                    });
                }
            }
        }
    }
}
