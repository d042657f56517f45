//! metav1.Condition list helpers shared by every status in this API.

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

pub const TRUE: &str = "True";
pub const FALSE: &str = "False";
pub const UNKNOWN: &str = "Unknown";

/// Sets (or adds) the condition `type_`. `lastTransitionTime` moves only when the status changes, as
/// the Kubernetes API conventions require; reason and message always take the new values.
/// Returns whether anything changed.
pub fn set(
    conditions: &mut Vec<Condition>,
    type_: &str,
    status: &str,
    reason: &str,
    message: &str,
    now: Timestamp,
) -> bool {
    match conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(existing) => {
            if existing.status == status && existing.reason == reason && existing.message == message {
                return false;
            }
            if existing.status != status {
                existing.last_transition_time = Time(now);
            }
            existing.status = status.to_owned();
            existing.reason = reason.to_owned();
            existing.message = message.to_owned();
            true
        }
        None => {
            conditions.push(Condition {
                type_: type_.to_owned(),
                status: status.to_owned(),
                reason: reason.to_owned(),
                message: message.to_owned(),
                last_transition_time: Time(now),
                observed_generation: None,
            });
            true
        }
    }
}

/// [`set`], and stamps the condition with the generation of the spec it describes
/// (`observedGeneration`): a condition written for an older spec is visibly stale.
pub fn set_observed(
    conditions: &mut Vec<Condition>,
    type_: &str,
    status: &str,
    reason: &str,
    message: &str,
    generation: Option<i64>,
    now: Timestamp,
) -> bool {
    let mut changed = set(conditions, type_, status, reason, message, now);
    if let Some(condition) = conditions.iter_mut().find(|c| c.type_ == type_)
        && condition.observed_generation != generation
    {
        condition.observed_generation = generation;
        changed = true;
    }
    changed
}

pub fn find<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// The status of condition `type_`, if present.
pub fn status_of<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a str> {
    find(conditions, type_).map(|c| c.status.as_str())
}

pub fn is_true(conditions: &[Condition], type_: &str) -> bool {
    status_of(conditions, type_) == Some(TRUE)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(secs).unwrap_or(Timestamp::UNIX_EPOCH)
    }

    #[test]
    fn transition_time_moves_only_on_status_change() {
        let mut conditions = Vec::new();
        assert!(set(&mut conditions, "Processing", TRUE, "A", "a", at(10)));
        assert!(set(&mut conditions, "Processing", TRUE, "B", "b", at(20)));
        assert_eq!(conditions[0].last_transition_time, Time(at(10)));
        assert_eq!(conditions[0].reason, "B");
        assert!(set(&mut conditions, "Processing", FALSE, "C", "c", at(30)));
        assert_eq!(conditions[0].last_transition_time, Time(at(30)));
        assert!(!set(&mut conditions, "Processing", FALSE, "C", "c", at(40)));
        assert_eq!(conditions.len(), 1);
    }

    #[test]
    fn a_condition_names_the_generation_it_describes() {
        let mut conditions = Vec::new();
        assert!(set_observed(&mut conditions, "Reachable", TRUE, "A", "a", Some(1), at(10)));
        assert_eq!(conditions[0].observed_generation, Some(1));
        assert!(!set_observed(&mut conditions, "Reachable", TRUE, "A", "a", Some(1), at(20)));
        assert!(
            set_observed(&mut conditions, "Reachable", TRUE, "A", "a", Some(2), at(30)),
            "a new spec, same verdict"
        );
        assert_eq!((conditions[0].observed_generation, &conditions[0].last_transition_time), (Some(2), &Time(at(10))));
    }
}
