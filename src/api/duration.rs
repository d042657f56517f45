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

    /// Exactly what [`PATTERN`] accepts, computed in exact decimal arithmetic (to the nanosecond,
    /// digits below it dropped): `0.3s` is 300 ms, not the nearest float.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let invalid = || ParseDurationError(text.to_owned());
        if text.is_empty() {
            return Err(invalid());
        }
        let digits = |rest: &str| rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
        let mut total: u128 = 0;
        let mut rest = text;
        while !rest.is_empty() {
            let whole_len = digits(rest);
            if whole_len == 0 {
                return Err(invalid());
            }
            let (whole, tail) = rest.split_at(whole_len);
            let (fraction, tail) = match tail.strip_prefix('.') {
                Some(tail) => match digits(tail) {
                    0 => return Err(invalid()),
                    len => tail.split_at(len),
                },
                None => ("", tail),
            };
            let (unit_nanos, tail) = if let Some(tail) = tail.strip_prefix("ms") {
                (1_000_000, tail)
            } else if let Some(tail) = tail.strip_prefix('s') {
                (1_000_000_000, tail)
            } else if let Some(tail) = tail.strip_prefix('m') {
                (60_000_000_000, tail)
            } else if let Some(tail) = tail.strip_prefix('h') {
                (3_600_000_000_000, tail)
            } else {
                return Err(invalid());
            };
            let whole = whole.trim_start_matches('0');
            // Beyond 18 fraction digits every unit is below a nanosecond; `whole` of 40 digits
            // overflows anyway.
            let fraction = &fraction[..fraction.len().min(18)];
            if whole.len() > 38 {
                return Err(invalid());
            }
            let whole: u128 = if whole.is_empty() { 0 } else { whole.parse().map_err(|_| invalid())? };
            let fraction_nanos = if fraction.is_empty() {
                0
            } else {
                let scale = 10u128.pow(fraction.len() as u32);
                fraction.parse::<u128>().map_err(|_| invalid())? * unit_nanos / scale
            };
            total = whole
                .checked_mul(unit_nanos)
                .and_then(|n| n.checked_add(fraction_nanos))
                .and_then(|n| n.checked_add(total))
                .ok_or_else(invalid)?;
            rest = tail;
        }
        let secs = u64::try_from(total / 1_000_000_000).map_err(|_| invalid())?;
        Ok(Self(StdDuration::new(secs, (total % 1_000_000_000) as u32)))
    }
}

impl fmt::Display for Duration {
    /// Prints the shortest exact form users would write: `500ms`, `2s`, `90s`, `5m`, `2h`; a duration
    /// finer than a millisecond keeps its digits (`0.25ms`), so printing and parsing give it back.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let millis = self.0.as_millis();
        let sub_milli = self.0.subsec_nanos() % 1_000_000;
        if sub_milli != 0 {
            let fraction = format!("{sub_milli:06}");
            write!(f, "{millis}.{}ms", fraction.trim_end_matches('0'))
        } else if !millis.is_multiple_of(1000) {
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
    fn decimals_are_exact() {
        for (text, nanos) in
            [("0.3s", 300_000_000), ("1.1h", 3_960_000_000_000), ("0.0001s", 100_000), ("2.5ms", 2_500_000)]
        {
            assert_eq!(text.parse::<Duration>().map(|d| d.get().as_nanos()), Ok(nanos), "{text}");
        }
        assert_eq!("1.0000000000000000000009s".parse::<Duration>(), Ok(Duration::from_secs(1)), "below a nanosecond");
    }

    #[test]
    fn rejects_malformed_durations() {
        for text in
            ["", "5", "s", "-1s", "+1s", "5d", "1s2", "1..5s", "ms", "1.s", ".5s", "1.5.5s", "1 s", "1S", "1e3s", "5µs"]
        {
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
        assert_eq!(Duration::from(StdDuration::from_micros(250)).to_string(), "0.25ms");
        assert_eq!(Duration::from(StdDuration::new(1, 1)).to_string(), "1000.000001ms");
    }

    #[test]
    fn rejects_what_overflows() {
        for text in ["99999999999999999999999h", &format!("{}s", "9".repeat(50)), "5124095576030431h1h"] {
            assert!(text.parse::<Duration>().is_err(), "{text}");
        }
    }

    /// The schema's `PATTERN`, by hand: one or more `<digits>[.<digits>](ms|s|m|h)`.
    fn matches_pattern(text: &str) -> bool {
        let mut rest = text;
        let digits = |r: &str| r.len() - r.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        while !rest.is_empty() {
            let whole = digits(rest);
            if whole == 0 {
                return false;
            }
            rest = &rest[whole..];
            if let Some(tail) = rest.strip_prefix('.') {
                let fraction = digits(tail);
                if fraction == 0 {
                    return false;
                }
                rest = &tail[fraction..];
            }
            match ["ms", "s", "m", "h"].iter().find(|u| rest.starts_with(**u)) {
                Some(unit) => rest = &rest[unit.len()..],
                None => return false,
            }
        }
        !text.is_empty()
    }

    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        #[test]
        fn printing_then_parsing_gives_the_duration_back(secs in 0u64..10_000_000_000, nanos in 0u32..1_000_000_000, whole_millis in any::<bool>()) {
            let nanos = if whole_millis { nanos - nanos % 1_000_000 } else { nanos };
            let duration = Duration::from(StdDuration::new(secs, nanos));
            prop_assert_eq!(duration.to_string().parse::<Duration>(), Ok(duration));
        }

        #[test]
        fn arbitrary_text_never_panics_and_parses_only_what_the_schema_allows(text in "[0-9.mhs \\-+eµa]{0,16}|.{0,24}") {
            if let Ok(duration) = text.parse::<Duration>() {
                prop_assert!(matches_pattern(&text), "{:?} parsed but the schema refuses it", text);
                prop_assert_eq!(duration.to_string().parse::<Duration>(), Ok(duration));
            }
        }

        #[test]
        fn what_the_schema_allows_parses_unless_it_overflows(text in "([0-9]{1,6}(\\.[0-9]{1,12})?(ms|s|m|h)){1,5}") {
            prop_assert!(matches_pattern(&text));
            prop_assert!(text.parse::<Duration>().is_ok(), "{}", text);
        }
    }
}
