//! How the KV JSON API spells what JSON cannot carry as is: bytes, 64-bit
//! integers, op ids and encodings.
//!
//! - Bytes (keys, values, patches, bounds) are a JSON string when they are
//!   UTF-8 text, else `{"base64": "…"}` (standard alphabet, padded). Either
//!   form is accepted on the way in; the way out picks the string whenever
//!   it can.
//! - 64-bit integers (versions, positions, tokens, micros) go out as decimal
//!   strings, so JavaScript never rounds them, and come in as decimal
//!   strings or JSON integers.
//! - An op id is 32 hexadecimal digits (128 bits).

use base64::Engine as _;
use lode_client::protocol::Encoding;
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::ser::{SerializeMap, Serializer};
use serde::{Deserialize, Serialize};

fn base64_engine() -> base64::engine::GeneralPurpose {
    base64::engine::general_purpose::STANDARD
}

/// Bytes as text or `{"base64": …}`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WireBytes(pub Vec<u8>);

impl Serialize for WireBytes {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match std::str::from_utf8(&self.0) {
            Ok(text) => serializer.serialize_str(text),
            Err(_) => {
                let mut map = serializer.serialize_map(Some(1))?;
                map.serialize_entry("base64", &base64_engine().encode(&self.0))?;
                map.end()
            }
        }
    }
}

struct WireBytesVisitor;

impl<'de> Visitor<'de> for WireBytesVisitor {
    type Value = WireBytes;

    fn expecting(&self, formatter: &mut std::fmt::Formatter) -> std::fmt::Result {
        formatter.write_str(r#"a UTF-8 string or {"base64": "<standard base64>"}"#)
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<WireBytes, E> {
        Ok(WireBytes(text.as_bytes().to_vec()))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<WireBytes, A::Error> {
        let mut decoded = None;
        while let Some(field) = map.next_key::<String>()? {
            if field != "base64" || decoded.is_some() {
                return Err(de::Error::custom(format!(
                    r#"bytes are a string or {{"base64": …}} alone; {field:?} is not allowed"#
                )));
            }
            let text: String = map.next_value()?;
            let bytes = base64_engine()
                .decode(text.as_bytes())
                .map_err(|error| de::Error::custom(format!("base64: {error}")))?;
            decoded = Some(bytes);
        }
        decoded
            .map(WireBytes)
            .ok_or_else(|| de::Error::custom(r#"bytes as an object need "base64""#))
    }
}

impl<'de> Deserialize<'de> for WireBytes {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(WireBytesVisitor)
    }
}

/// A 64-bit unsigned integer: a decimal string out, a decimal string or a
/// JSON integer in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WireU64(pub u64);

impl Serialize for WireU64 {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0.to_string())
    }
}

struct WireU64Visitor;

impl Visitor<'_> for WireU64Visitor {
    type Value = WireU64;

    fn expecting(&self, formatter: &mut std::fmt::Formatter) -> std::fmt::Result {
        formatter.write_str("an unsigned 64-bit integer as a decimal string (or a JSON integer)")
    }

    fn visit_u64<E: de::Error>(self, value: u64) -> Result<WireU64, E> {
        Ok(WireU64(value))
    }

    fn visit_i64<E: de::Error>(self, value: i64) -> Result<WireU64, E> {
        u64::try_from(value)
            .map(WireU64)
            .map_err(|_| de::Error::custom(format!("{value} is negative; expected an unsigned 64-bit integer")))
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<WireU64, E> {
        if text.is_empty() || !text.bytes().all(|byte| byte.is_ascii_digit()) {
            return Err(de::Error::custom(format!(
                "{text:?} is not a decimal unsigned 64-bit integer"
            )));
        }
        text.parse()
            .map(WireU64)
            .map_err(|_| de::Error::custom(format!("{text:?} is above 18446744073709551615")))
    }
}

impl<'de> Deserialize<'de> for WireU64 {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(WireU64Visitor)
    }
}

/// An op id: 32 hexadecimal digits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WireOpId(pub u128);

impl Serialize for WireOpId {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&format!("{:032x}", self.0))
    }
}

impl<'de> Deserialize<'de> for WireOpId {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        if text.len() != 32 || !text.bytes().all(|byte| byte.is_ascii_hexdigit()) {
            return Err(de::Error::custom(format!(
                "op_id {text:?} is not 32 hexadecimal digits"
            )));
        }
        u128::from_str_radix(&text, 16)
            .map(WireOpId)
            .map_err(|error| de::Error::custom(format!("op_id: {error}")))
    }
}

/// An object named by its `"op"` field, read as the externally tagged
/// enum `T` (`{"set": {…}}`), so that an error names the field by its path
/// (`.expires_at_micros: …`), which serde cannot do for internally tagged
/// enums.
pub fn untag<T: serde::de::DeserializeOwned>(mut value: serde_json::Value) -> Result<T, String> {
    use serde_path_to_error::Segment;
    let Some(object) = value.as_object_mut() else {
        return Err(r#": expected an object with "op""#.to_owned());
    };
    let op = match object.remove("op") {
        Some(serde_json::Value::String(op)) => op,
        Some(other) => return Err(format!(".op: expected a string, found {other}")),
        None => return Err(": missing field `op`".to_owned()),
    };
    let tagged = serde_json::Value::Object(serde_json::Map::from_iter([(op, value)]));
    serde_path_to_error::deserialize(tagged).map_err(|error| {
        let path: String = error
            .path()
            .iter()
            .filter_map(|segment| match segment {
                Segment::Map { key } => Some(format!(".{key}")),
                Segment::Seq { index } => Some(format!("[{index}]")),
                Segment::Enum { .. } | Segment::Unknown => None,
            })
            .collect();
        format!("{path}: {}", error.into_inner())
    })
}

/// The prefix of a custom encoding's name on the wire: `custom:<name>`.
const CUSTOM_ENCODING_PREFIX: &str = "custom:";

/// An encoding's name on the wire.
pub fn encoding_name(encoding: &Encoding) -> String {
    match encoding {
        Encoding::Bytes => "bytes".to_owned(),
        Encoding::Json => "json".to_owned(),
        Encoding::Msgpack => "msgpack".to_owned(),
        Encoding::V8 => "v8".to_owned(),
        Encoding::Le64 => "le64".to_owned(),
        Encoding::Custom(name) => format!("{CUSTOM_ENCODING_PREFIX}{name}"),
    }
}

/// The encoding a wire name names.
pub fn parse_encoding(name: &str) -> Result<Encoding, String> {
    Ok(match name {
        "bytes" => Encoding::Bytes,
        "json" => Encoding::Json,
        "msgpack" => Encoding::Msgpack,
        "v8" => Encoding::V8,
        "le64" => Encoding::Le64,
        other => match other.strip_prefix(CUSTOM_ENCODING_PREFIX) {
            Some(custom) => Encoding::Custom(custom.to_owned()),
            None => {
                return Err(format!(
                    "encoding {other:?} is none of bytes, json, msgpack, v8, le64, custom:<name>"
                ))
            }
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_travel_as_text_when_they_can_and_as_base64_otherwise() {
        let text = serde_json::to_string(&WireBytes(b"service:auth".to_vec())).expect("text");
        assert_eq!(text, r#""service:auth""#);
        let binary = serde_json::to_string(&WireBytes(vec![0, 0xff, 1])).expect("binary");
        assert_eq!(binary, r#"{"base64":"AP8B"}"#);
        for wire in [text, binary] {
            let back: WireBytes = serde_json::from_str(&wire).expect("back");
            assert_eq!(serde_json::to_string(&back).expect("again"), wire);
        }
        for refused in [
            r#"{"base64":"%%"}"#,
            r#"{"hex":"00"}"#,
            r#"{}"#,
            "12",
            r#"{"base64":"AA==","x":1}"#,
        ] {
            assert!(serde_json::from_str::<WireBytes>(refused).is_err(), "{refused}");
        }
    }

    #[test]
    fn integers_go_out_as_strings_and_come_in_either_way() {
        assert_eq!(
            serde_json::to_string(&WireU64(u64::MAX)).expect("out"),
            r#""18446744073709551615""#
        );
        let from_string: WireU64 = serde_json::from_str(r#""18446744073709551615""#).expect("string");
        let from_number: WireU64 = serde_json::from_str("42").expect("number");
        assert_eq!((from_string.0, from_number.0), (u64::MAX, 42));
        for refused in [
            r#""18446744073709551616""#,
            r#""-1""#,
            "-1",
            r#""1e3""#,
            r#""""#,
            "1.5",
            r#"" 1""#,
        ] {
            assert!(serde_json::from_str::<WireU64>(refused).is_err(), "{refused}");
        }
    }

    #[test]
    fn op_ids_are_32_hex_digits_and_encodings_round_trip() {
        let id: WireOpId = serde_json::from_str(r#""000000000000000000000000000000ff""#).expect("id");
        assert_eq!(id.0, 255);
        assert!(serde_json::from_str::<WireOpId>(r#""ff""#).is_err());
        for encoding in [
            Encoding::Bytes,
            Encoding::Json,
            Encoding::Msgpack,
            Encoding::V8,
            Encoding::Le64,
            Encoding::Custom("avro:v2".to_owned()),
        ] {
            assert_eq!(parse_encoding(&encoding_name(&encoding)), Ok(encoding));
        }
        assert!(parse_encoding("yaml").expect_err("unknown").contains("yaml"));
    }
}
