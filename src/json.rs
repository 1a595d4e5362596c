//! Reading JSON strictly where a repeated key could change a decision: the client's answers to
//! pen's own requests (an approval above all), on every front end (`transport` for `pen serve`,
//! `acp::rpc` for `pen acp`).
//!
//! serde_json keeps the last of a repeated key, another reader the first: an answer
//! `{"decision": "deny", "decision": "allow"}` means what its reader chooses. RFC 8259 leaves
//! such an object's meaning open, so pen refuses it rather than pick one.

use serde::de::{DeserializeSeed, Error as _, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};
use std::fmt;

/// `bytes` as one JSON value, refused when any object in it repeats a key (naming the key).
/// Otherwise the same value `serde_json::from_slice` reads, with its recursion limit.
pub fn from_slice_unique_keys(bytes: &[u8]) -> Result<Value, serde_json::Error> {
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    let value = UniqueKeys.deserialize(&mut deserializer)?;
    deserializer.end()?;
    Ok(value)
}

/// Builds a [`Value`] as serde_json's own visitor does, but fails on a repeated object key.
struct UniqueKeys;

impl<'de> DeserializeSeed<'de> for UniqueKeys {
    type Value = Value;

    fn deserialize<D: serde::Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for UniqueKeys {
    type Value = Value;

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("a JSON value whose objects repeat no key")
    }

    fn visit_bool<E>(self, value: bool) -> Result<Value, E> {
        Ok(Value::Bool(value))
    }

    fn visit_i64<E>(self, value: i64) -> Result<Value, E> {
        Ok(Value::Number(value.into()))
    }

    fn visit_u64<E>(self, value: u64) -> Result<Value, E> {
        Ok(Value::Number(value.into()))
    }

    fn visit_f64<E>(self, value: f64) -> Result<Value, E> {
        // JSON has no NaN or infinity, so every parsed float is a number.
        Ok(Number::from_f64(value).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, value: &str) -> Result<Value, E> {
        Ok(Value::String(value.to_string()))
    }

    fn visit_string<E>(self, value: String) -> Result<Value, E> {
        Ok(Value::String(value))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(UniqueKeys)? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if object.contains_key(&key) {
                return Err(A::Error::custom(format!(
                    "the key {key:?} appears twice in one object"
                )));
            }
            let value = map.next_value_seed(UniqueKeys)?;
            object.insert(key, value);
        }
        Ok(Value::Object(object))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repeated_key_at_any_depth_is_refused_and_named() {
        for text in [
            r#"{"decision": "deny", "decision": "allow"}"#,
            r#"{"result": {"outcome": {"optionId": "reject_once", "optionId": "allow_once"}}}"#,
            r#"[1, {"a": [{"b": 1, "b": 2}]}]"#,
        ] {
            let error = from_slice_unique_keys(text.as_bytes()).unwrap_err();
            assert!(error.to_string().contains("appears twice"), "{error}");
        }
        let error = from_slice_unique_keys(br#"{"a": 1, "a": 1}"#).unwrap_err();
        assert!(error.to_string().contains("\"a\""), "{error}");
    }

    #[test]
    fn anything_else_reads_as_serde_json_reads_it() {
        for text in [
            r#"{"jsonrpc": "2.0", "id": 7, "result": {"decision": "allow", "reason": null}}"#,
            r#"{"a": {"x": 1}, "b": {"x": 2}, "n": [-1, 2.5, 18446744073709551615, 1e300]}"#,
            r#""text with \"escapes\" and \u00e9""#,
            "[]",
            "{}",
            "null",
        ] {
            let expected: Value = serde_json::from_str(text).unwrap();
            assert_eq!(from_slice_unique_keys(text.as_bytes()).unwrap(), expected);
        }
        assert!(from_slice_unique_keys(b"{} trailing").is_err());
        assert!(from_slice_unique_keys(b"{\"a\": ").is_err());
        let deep = "[".repeat(200) + &"]".repeat(200);
        assert!(
            from_slice_unique_keys(deep.as_bytes()).is_err(),
            "recursion limit"
        );
    }
}
