//! Durations as Kubernetes users write them (`60s`, `5m`, `1m30s`, `500ms`), as in metav1.Duration.

use std::{borrow::Cow, fmt, str::FromStr, time::Duration as StdDuration};

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A non-negative duration written in Go's notation with the units `h`, `m`, `s` and `ms`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Duration(StdDuration);

/// The schema's pattern: one or more `<number><unit>` groups.
pub const PATTERN: &str = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$";

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("invalid duration {0:?}: expected e.g. 500ms, 2s, 5m or 1h30m")]
pub struct ParseDurationError(String);

impl Duration {
    pub const fn from_secs(secs: u64) -> Self {
        Self(StdDuration::from_secs(secs))
    }

    pub const fn from_millis(millis: u64) -> Self {
        Self(StdDuration::from_millis(millis))
    }

    pub const fn get(self) -> StdDuration {
        self.0
    }
}

impl From<StdDuration> for Duration {
    fn from(value: StdDuration) -> Self {
        Self(value)
    }
}

impl From<Duration> for StdDuration {
    fn from(value: Duration) -> Self {
        value.0
    }
}

impl FromStr for Duration {
    type Err = ParseDurationError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let invalid = || ParseDurationError(text.to_owned());
        if text.is_empty() {
            return Err(invalid());
        }
        let mut total = StdDuration::ZERO;
        let mut rest = text;
        while !rest.is_empty() {
            let number_len = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).ok_or_else(invalid)?;
            let (number, tail) = rest.split_at(number_len);
            let unit_len = tail.find(|c: char| c.is_ascii_digit()).unwrap_or(tail.len());
            let (unit, tail) = tail.split_at(unit_len);
            let value: f64 = number.parse().map_err(|_| invalid())?;
            let unit_secs = match unit {
                "h" => 3600.0,
                "m" => 60.0,
                "s" => 1.0,
                "ms" => 0.001,
                _ => return Err(invalid()),
            };
            total += StdDuration::try_from_secs_f64(value * unit_secs).map_err(|_| invalid())?;
            rest = tail;
        }
        Ok(Self(total))
    }
}

impl fmt::Display for Duration {
    /// Prints the shortest exact form users would write: `500ms`, `2s`, `90s`, `5m`, `2h`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let millis = self.0.as_millis();
        if !millis.is_multiple_of(1000) {
            write!(f, "{millis}ms")
        } else {
            let secs = millis / 1000;
            if secs >= 3600 && secs.is_multiple_of(3600) {
                write!(f, "{}h", secs / 3600)
            } else if secs >= 300 && secs.is_multiple_of(60) {
                write!(f, "{}m", secs / 60)
            } else {
                write!(f, "{secs}s")
            }
        }
    }
}

impl Serialize for Duration {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Duration {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = Cow::<str>::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

impl JsonSchema for Duration {
    fn schema_name() -> Cow<'static, str> {
        "Duration".into()
    }

    fn inline_schema() -> bool {
        true
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        // maxLength bounds the cost the API server estimates for the CEL rules that parse durations.
        json_schema!({
            "type": "string",
            "pattern": PATTERN,
            "maxLength": 32,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_go_style_durations() {
        let cases = [
            ("60s", 60_000),
            ("5m", 300_000),
            ("1m30s", 90_000),
            ("500ms", 500),
            ("1.5s", 1_500),
            ("1h", 3_600_000),
            ("0s", 0),
        ];
        for (text, millis) in cases {
            assert_eq!(text.parse::<Duration>(), Ok(Duration::from_millis(millis)), "{text}");
        }
    }

    #[test]
    fn rejects_malformed_durations() {
        for text in ["", "5", "s", "-1s", "5d", "1s2", "1..5s", "ms"] {
            assert!(text.parse::<Duration>().is_err(), "{text:?} should be rejected");
        }
    }

    #[test]
    fn prints_what_users_write_and_round_trips() {
        let cases =
            [(500, "500ms"), (2_000, "2s"), (60_000, "60s"), (90_000, "90s"), (300_000, "5m"), (7_200_000, "2h")];
        for (millis, text) in cases {
            let duration = Duration::from_millis(millis);
            assert_eq!(duration.to_string(), text);
            assert_eq!(text.parse::<Duration>(), Ok(duration));
        }
    }
}
