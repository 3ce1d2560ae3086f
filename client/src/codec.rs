//! Codecs turn application values into stored bytes and back, and name the
//! encoding stored with the entry.

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::error::LodeError;
use crate::protocol::Encoding;

/// A way to encode values; `encode_with` and `get_as` take any codec.
pub trait Codec {
    /// The encoding tag stored with entries this codec wrote.
    fn encoding(&self) -> Encoding;
    fn encode<T: Serialize + ?Sized>(&self, value: &T) -> Result<Vec<u8>, LodeError>;
    fn decode<T: DeserializeOwned>(&self, bytes: &[u8]) -> Result<T, LodeError>;
}

/// JSON (`serde_json`).
#[derive(Clone, Copy, Debug, Default)]
pub struct JsonCodec;

impl Codec for JsonCodec {
    fn encoding(&self) -> Encoding {
        Encoding::Json
    }

    fn encode<T: Serialize + ?Sized>(&self, value: &T) -> Result<Vec<u8>, LodeError> {
        serde_json::to_vec(value).map_err(|error| LodeError::Invalid(format!("value does not encode as JSON: {error}")))
    }

    fn decode<T: DeserializeOwned>(&self, bytes: &[u8]) -> Result<T, LodeError> {
        serde_json::from_slice(bytes)
            .map_err(|error| LodeError::Invalid(format!("value does not decode as JSON: {error}")))
    }
}

/// MessagePack with structs as named maps (`rmp-serde`).
#[derive(Clone, Copy, Debug, Default)]
pub struct MsgpackCodec;

impl Codec for MsgpackCodec {
    fn encoding(&self) -> Encoding {
        Encoding::Msgpack
    }

    fn encode<T: Serialize + ?Sized>(&self, value: &T) -> Result<Vec<u8>, LodeError> {
        rmp_serde::to_vec_named(value)
            .map_err(|error| LodeError::Invalid(format!("value does not encode as MessagePack: {error}")))
    }

    fn decode<T: DeserializeOwned>(&self, bytes: &[u8]) -> Result<T, LodeError> {
        rmp_serde::from_slice(bytes)
            .map_err(|error| LodeError::Invalid(format!("value does not decode as MessagePack: {error}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Serialize, serde::Deserialize, Debug, PartialEq)]
    struct Config {
        level: String,
        retries: u32,
    }

    #[test]
    fn codecs_round_trip_and_refuse_what_they_cannot_read() {
        let config = Config {
            level: "debug".to_owned(),
            retries: 3,
        };
        for (encoded, decoded) in [
            (
                JsonCodec.encode(&config),
                JsonCodec.decode::<Config>(&JsonCodec.encode(&config).expect("json")),
            ),
            (
                MsgpackCodec.encode(&config),
                MsgpackCodec.decode::<Config>(&MsgpackCodec.encode(&config).expect("msgpack")),
            ),
        ] {
            assert!(encoded.is_ok());
            assert_eq!(decoded.expect("decodes"), config);
        }
        // Named maps: the field names are in the bytes.
        let packed = MsgpackCodec.encode(&config).expect("msgpack");
        assert!(packed.windows(5).any(|window| window == b"level"));
        let refused = JsonCodec.decode::<Config>(b"\x81").expect_err("not JSON");
        assert!(refused.is_invalid());
        let refused = MsgpackCodec.decode::<Config>(b"{}").expect_err("not msgpack");
        assert!(refused.is_invalid());
    }
}
