//! Deno KV: KV Connect's protobuf requests as the gateway maps them onto
//! Lode operations, the tuple key encoding whose byte order Lode's key
//! order relies on, and the V8 numbers a `sum` adds.

use denokv_proto::datapath as pb;
use lode_node::http::deno;
use lode_types::v8_number::V8Number;
use prost::Message;

/// A request body of `snapshot_read`, `atomic_write` or `watch` (chosen
/// by the first byte), decoded and mapped as the gateway does: a mapped
/// write passes or fails Lode's own checks, and never panics in them.
pub fn kv_connect_requests(data: &[u8]) {
    let Some((kind, body)) = data.split_first() else {
        return;
    };
    match kind % 3 {
        0 => {
            if let Ok(read) = pb::SnapshotRead::decode(body) {
                if let Ok(ranges) = deno::read_ranges(&read) {
                    assert_eq!(ranges.len(), read.ranges.len(), "one range read per range asked");
                }
            }
        }
        1 => {
            if let Ok(write) = pb::AtomicWrite::decode(body) {
                if let Ok(operations) = deno::write_operations(&write) {
                    let _ = lode_types::validate_client_write(&operations);
                }
            }
        }
        _ => {
            let _ = pb::Watch::decode(body);
        }
    }
}

/// A Deno KV key: when it decodes, encoding the key and decoding that
/// gives the same key, and encoding is deterministic.
pub fn deno_keys(data: &[u8]) {
    let Ok(key) = denokv_proto::decode_key(data) else {
        return;
    };
    let Ok(encoded) = denokv_proto::encode_key(&key) else {
        return;
    };
    let again = denokv_proto::decode_key(&encoded).expect("an encoded key decodes");
    let encoded_again = denokv_proto::encode_key(&again).expect("a decoded key encodes");
    assert_eq!(encoded, encoded_again, "a key's encoding is stable");
}

/// A V8-serialized number or bigint: when it decodes, its encoding decodes
/// to the same number (NaN to NaN).
pub fn v8_numbers(data: &[u8]) {
    let Ok(number) = V8Number::decode(data) else {
        return;
    };
    let again = V8Number::decode(&number.encode()).expect("an encoded number decodes");
    match (number, again) {
        (V8Number::Number(first), V8Number::Number(second)) => {
            assert!(
                first == second || (first.is_nan() && second.is_nan()),
                "{first} became {second}"
            );
        }
        (V8Number::BigInt(first), V8Number::BigInt(second)) => assert_eq!(first, second),
        (first, second) => panic!("{first:?} became {second:?}"),
    }
}
