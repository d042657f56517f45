//! What happened to every node over the whole run, for the checks that span scenarios: when
//! out-of-service taints came and went (from a Node watch) and when power really changed (from each
//! emulator's power log).

use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex},
};

use futures::StreamExt;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Node;
use kube::{
    Api, Client, ResourceExt,
    runtime::{WatchStreamExt, watcher},
};
use serde_json::Value;

#[derive(Clone, Debug)]
pub enum NodeEvent {
    /// The out-of-service taint appeared; `time_added` is the taint's own `timeAdded`.
    TaintAdded {
        seen: Timestamp,
        time_added: Option<Timestamp>,
    },
    TaintRemoved {
        seen: Timestamp,
    },
    Deleted {
        seen: Timestamp,
    },
}

#[derive(Clone, Default)]
pub struct Timeline {
    events: Arc<Mutex<BTreeMap<String, Vec<NodeEvent>>>>,
}

fn out_of_service(node: &Node) -> Option<Option<Timestamp>> {
    node.spec
        .as_ref()?
        .taints
        .as_ref()?
        .iter()
        .find(|t| t.key == "node.kubernetes.io/out-of-service" && t.effect == "NoExecute")
        .map(|t| t.time_added.as_ref().map(|t| t.0))
}

impl Timeline {
    /// Watches every Node until the process ends.
    pub fn start(client: Client) -> Self {
        let timeline = Self::default();
        let events = timeline.events.clone();
        tokio::spawn(async move {
            let mut present: BTreeMap<String, bool> = BTreeMap::new();
            let mut stream = watcher(Api::<Node>::all(client), watcher::Config::default()).default_backoff().boxed();
            while let Some(event) = stream.next().await {
                let Ok(event) = event else { continue };
                let seen = Timestamp::now();
                let record =
                    |name: String, event: NodeEvent| events.lock().unwrap().entry(name).or_default().push(event);
                match event {
                    watcher::Event::Apply(node) | watcher::Event::InitApply(node) => {
                        let now = out_of_service(&node);
                        let before = present.insert(node.name_any(), now.is_some()).unwrap_or(false);
                        match (before, now) {
                            (false, Some(time_added)) => {
                                record(node.name_any(), NodeEvent::TaintAdded { seen, time_added })
                            }
                            (true, None) => record(node.name_any(), NodeEvent::TaintRemoved { seen }),
                            _ => {}
                        }
                    }
                    watcher::Event::Delete(node) => record(node.name_any(), NodeEvent::Deleted { seen }),
                    watcher::Event::Init | watcher::Event::InitDone => {}
                }
            }
        });
        timeline
    }

    pub fn events(&self) -> BTreeMap<String, Vec<NodeEvent>> {
        self.events.lock().unwrap().clone()
    }
}

#[derive(Clone, Debug)]
pub struct PowerChange {
    pub at: Timestamp,
    pub to_off: bool,
}

pub fn power_changes(log: &[Value]) -> Vec<PowerChange> {
    log.iter()
        .filter(|e| e["event"] == "power")
        .filter_map(|e| Some(PowerChange { at: e["t"].as_str()?.parse().ok()?, to_off: e["to"] == "Off" }))
        .collect()
}

/// Every out-of-service taint was added while the machine was off (after its last power change to
/// Off), and removed before the machine was powered on again. Returns the violations.
pub fn taints_follow_power(node: &str, events: &[NodeEvent], power: &[PowerChange]) -> Vec<String> {
    let mut violations = Vec::new();
    let state_at = |at: Timestamp| power.iter().rfind(|p| p.at <= at).map(|p| p.to_off);
    let mut added: Option<Timestamp> = None;
    for event in events {
        match event {
            NodeEvent::TaintAdded { seen, time_added } => {
                // timeAdded has second precision (floored): the proof's settle time keeps it after the Off.
                let at = time_added.unwrap_or(*seen);
                if state_at(at) != Some(true) && state_at(*seen) != Some(true) {
                    violations.push(format!(
                        "{node}: out-of-service taint added at {at} while the machine was not proven off"
                    ));
                }
                added = Some(*seen);
            }
            NodeEvent::TaintRemoved { seen } => {
                if let Some(from) = added.take()
                    && let Some(on) = power.iter().find(|p| !p.to_off && p.at > from && p.at < *seen)
                {
                    violations.push(format!(
                        "{node}: powered on at {} while the out-of-service taint (removed {seen}) was still on",
                        on.at
                    ));
                }
            }
            NodeEvent::Deleted { seen } => violations.push(format!("{node}: Node object deleted at {seen}")),
        }
    }
    if let Some(from) = added
        && let Some(on) = power.iter().find(|p| !p.to_off && p.at > from)
    {
        violations.push(format!("{node}: powered on at {} with the out-of-service taint still on", on.at));
    }
    violations
}
