//! The one binary encoding of Lode: log entries, snapshots, stored records,
//! Raft messages and rpc frames are all bincode 1 with its default options
//! (fixed-width integers, little-endian, trailing bytes allowed), chosen
//! here once, so that every crate writes and reads the same bytes
//! (`raft-store/tests/golden_bytes.rs` pins them). Callers turn the error
//! text into their own error kind.
//!
//! Decoding reads under a byte limit, the input's own length: a length
//! prefix that claims more bytes than are left fails at once instead of
//! reserving memory for them.

use bincode::Options;
use serde::de::DeserializeOwned;
use serde::Serialize;

pub fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>, String> {
    bincode::serialize(value).map_err(|error| error.to_string())
}

/// The length of `value`'s encoding, computed without encoding it.
pub fn encoded_size<T: Serialize>(value: &T) -> Result<usize, String> {
    bincode::serialized_size(value)
        .map(|size| size as usize)
        .map_err(|error| error.to_string())
}

pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, String> {
    bincode::DefaultOptions::new()
        .with_fixint_encoding()
        .allow_trailing_bytes()
        .with_limit(bytes.len() as u64)
        .deserialize(bytes)
        .map_err(|error| error.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_length_prefix_past_the_input_fails_without_reserving_it() {
        // A Vec<u8> announcing 2^40 bytes, followed by three.
        let mut bytes = (1u64 << 40).to_le_bytes().to_vec();
        bytes.extend_from_slice(&[1, 2, 3]);
        assert!(
            decode::<serde_bytes::ByteBuf>(&bytes).is_err(),
            "claims more than it has"
        );
        // A sequence announcing 2^40 strings.
        assert!(decode::<Vec<String>>(&bytes).is_err(), "claims more than it has");
        let value = serde_bytes::ByteBuf::from(vec![7u8; 5]);
        assert_eq!(
            decode::<serde_bytes::ByteBuf>(&encode(&value).expect("encode")).expect("decode"),
            value
        );
    }
}
