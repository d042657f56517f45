//! JSON from a BMC, refused when an object carries a key twice at any depth. `serde_json` keeps the
//! last of two values silently, so `"PowerState": "On", …, "PowerState": "Off"` would read `Off` while
//! another client reads `On`: a body that says two things proves nothing. No maintained crate does
//! this for `serde_json::Value`, so this is a small `Deserialize` that builds the same `Value`;
//! `serde_json`'s own recursion limit (128 levels) still bounds nesting.

use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

use super::bounded;

/// Parses `bytes` as one JSON document in which no object repeats a key.
pub fn parse(bytes: &[u8]) -> Result<Value, serde_json::Error> {
    serde_json::from_slice::<Strict>(bytes).map(|strict| strict.0)
}

struct Strict(Value);

impl<'de> Deserialize<'de> for Strict {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(StrictVisitor).map(Strict)
    }
}

struct StrictVisitor;

impl<'de> Visitor<'de> for StrictVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        Number::from_f64(v).map(Value::Number).ok_or_else(|| E::custom("a number that is not finite"))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(Strict(item)) = seq.next_element()? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let Strict(value) = map.next_value()?;
            if object.contains_key(&key) {
                return Err(de::Error::custom(format!("the key {:?} appears twice in one object", bounded(&key, 64))));
            }
            object.insert(key, value);
        }
        Ok(Value::Object(object))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_body_with_distinct_keys_reads_as_serde_json_reads_it() {
        let text = br#"{"Id": "1", "UUID": "u", "n": [1, -2, 3.5, null, true], "Oem": {"a": {"b": "c"}}}"#;
        assert_eq!(parse(text).unwrap(), serde_json::from_slice::<Value>(text).unwrap());
        assert_eq!(parse(br#"{"a": {"x": 1}, "b": {"x": 2}}"#).unwrap(), json!({"a": {"x": 1}, "b": {"x": 2}}));
    }

    #[test]
    fn a_key_given_twice_at_any_depth_is_refused() {
        for text in [
            &br#"{"PowerState": "On", "PowerState": "Off"}"#[..],
            br##"{"Actions": {"#ComputerSystem.Reset": {"target": "/a", "target": "/b"}}}"##,
            br#"{"Members": [{"@odata.id": "/1"}, {"@odata.id": "/2", "@odata.id": "/3"}]}"#,
            br#"{"a": 1, "\u0061": 2}"#,
        ] {
            let error = parse(text).unwrap_err();
            assert!(error.to_string().contains("appears twice"), "{error}");
        }
    }

    #[test]
    fn deep_nesting_is_an_error_not_a_stack_overflow() {
        let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        assert!(parse(deep.as_bytes()).is_err());
        let objects = format!("{}1{}", r#"{"a":"#.repeat(100_000), "}".repeat(100_000));
        assert!(parse(objects.as_bytes()).is_err());
    }

    #[test]
    fn trailing_data_and_invalid_utf8_are_refused() {
        assert!(parse(br#"{"a": 1} {"a": 2}"#).is_err());
        assert!(parse(b"{\"a\": \"\xff\"}").is_err());
    }
}
