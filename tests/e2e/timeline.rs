//! What happened to every node over the whole run, for the checks that span scenarios: when
//! out-of-service taints came and went and whether a Node was deleted (from the API server's audit
//! log: the server's own timestamps, in the order of the stored resourceVersions, never when a watch
//! happened to deliver it) and when power really changed (from each emulator's power log).

use std::collections::BTreeMap;

use jiff::Timestamp;
use serde_json::Value;

const OUT_OF_SERVICE: &str = "node.kubernetes.io/out-of-service";

/// One write to a Node that changed something these checks follow. A write takes effect somewhere
/// between the server receiving it and completing it; each check takes the bound that cannot
/// excuse a wrong order.
#[derive(Clone, Debug)]
pub enum NodeEvent {
    TaintAdded { received: Timestamp },
    TaintRemoved { completed: Timestamp },
    Deleted { completed: Timestamp },
}

fn has_out_of_service(node: &Value) -> bool {
    node["spec"]["taints"]
        .as_array()
        .is_some_and(|taints| taints.iter().any(|t| t["key"] == OUT_OF_SERVICE && t["effect"] == "NoExecute"))
}

/// Every node's taint and deletion events from kube-apiserver's JSON audit log (policy in
/// tests/harness/cluster.sh: writes to Node objects at RequestResponse).
pub fn node_events(audit_log: &str) -> BTreeMap<String, Vec<NodeEvent>> {
    struct Write {
        version: u64,
        received: Timestamp,
        completed: Timestamp,
        deleted: bool,
        tainted: bool,
    }
    let mut writes: BTreeMap<String, Vec<Write>> = BTreeMap::new();
    for entry in audit_log.lines().filter_map(|l| serde_json::from_str::<Value>(l).ok()) {
        let object = &entry["objectRef"];
        let response = &entry["responseObject"];
        let deleted = entry["verb"] == "delete";
        // A failed write answers with a Status, not the Node: it changed nothing.
        let succeeded = entry["responseStatus"]["code"].as_u64().is_none_or(|code| code < 300)
            && (deleted || response["kind"] == "Node");
        if object["resource"] != "nodes" || !object["subresource"].is_null() || !succeeded {
            continue;
        }
        let (Some(name), Some(received), Some(completed)) = (
            object["name"].as_str().or_else(|| entry["responseObject"]["metadata"]["name"].as_str()),
            entry["requestReceivedTimestamp"].as_str().and_then(|t| t.parse().ok()),
            entry["stageTimestamp"].as_str().and_then(|t| t.parse().ok()),
        ) else {
            continue;
        };
        let version = response["metadata"]["resourceVersion"].as_str().and_then(|v| v.parse().ok());
        writes.entry(name.to_owned()).or_default().push(Write {
            version: version.unwrap_or(u64::MAX),
            received,
            completed,
            deleted,
            tainted: !deleted && has_out_of_service(response),
        });
    }
    writes
        .into_iter()
        .map(|(name, mut writes)| {
            writes.sort_by_key(|w| w.version);
            let mut events = Vec::new();
            let mut tainted = false;
            for w in writes {
                if w.deleted {
                    events.push(NodeEvent::Deleted { completed: w.completed });
                    tainted = false;
                } else if w.tainted != tainted {
                    events.push(if w.tainted {
                        NodeEvent::TaintAdded { received: w.received }
                    } else {
                        NodeEvent::TaintRemoved { completed: w.completed }
                    });
                    tainted = w.tainted;
                }
            }
            (name, events)
        })
        .collect()
}

#[derive(Clone, Debug)]
pub struct PowerChange {
    pub at: Timestamp,
    pub to_off: bool,
    /// A power-on a person made through the BMC (announced in the log by a `by-hand` entry right
    /// before its request), not coroner.
    pub by_hand: bool,
}

/// The log entry a test writes right before it powers a machine on through its BMC itself.
pub const BY_HAND: &str = "by-hand";

pub fn power_changes(log: &[Value]) -> Vec<PowerChange> {
    // A reset's request is logged once answered; the change it causes comes after it (or, when a
    // read applies it first, just before): the change belongs to the last reset sent or announced.
    let mut announced = false;
    let mut last_reset_by_hand = false;
    let mut changes = Vec::new();
    for e in log {
        if e["event"] == BY_HAND {
            announced = true;
        } else if e["event"] == "request" && e["method"] == "POST" {
            last_reset_by_hand = std::mem::take(&mut announced);
        } else if e["event"] == "power"
            && let Some(at) = e["t"].as_str().and_then(|t| t.parse().ok())
        {
            let to_off = e["to"] == "Off";
            changes.push(PowerChange { at, to_off, by_hand: !to_off && (announced || last_reset_by_hand) });
        }
    }
    changes
}

/// Every out-of-service taint was added while the machine was off (coroner sends the write only
/// after the proof, so the machine reads Off when the server receives it), and the machine was not
/// powered on again before the write removing it had completed (coroner sends On only after that
/// write's answer). A power-on made by hand while the taint is on is not coroner's (the guard
/// answers it). Returns the violations.
pub fn taints_follow_power(node: &str, events: &[NodeEvent], power: &[PowerChange]) -> Vec<String> {
    let mut violations = Vec::new();
    let off_at = |at: Timestamp| power.iter().rfind(|p| p.at <= at).is_some_and(|p| p.to_off);
    let on_between = |from: Timestamp, to: Option<Timestamp>| {
        power.iter().find(|p| !p.to_off && !p.by_hand && p.at > from && to.is_none_or(|to| p.at < to)).map(|p| p.at)
    };
    let mut added: Option<Timestamp> = None;
    for event in events {
        match event {
            NodeEvent::TaintAdded { received } => {
                if !off_at(*received) {
                    violations.push(format!(
                        "{node}: out-of-service taint added (received {received}) while the machine was not off"
                    ));
                }
                added = Some(*received);
            }
            NodeEvent::TaintRemoved { completed } => {
                if let Some(from) = added.take()
                    && let Some(on) = on_between(from, Some(*completed))
                {
                    violations.push(format!(
                        "{node}: powered on at {on} while the out-of-service taint (removal completed {completed}) was still on"
                    ));
                }
            }
            NodeEvent::Deleted { completed } => violations.push(format!("{node}: Node object deleted at {completed}")),
        }
    }
    if let Some(from) = added
        && let Some(on) = on_between(from, None)
    {
        violations.push(format!("{node}: powered on at {on} with the out-of-service taint still on"));
    }
    violations
}
