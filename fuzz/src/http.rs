//! Bodies the HTTP port parses before any call is made: the KV JSON API's
//! write and read bodies, the State API's calls and KV Connect's metadata
//! exchange. serde_json is the reference: a body that decodes is JSON, and
//! the same JSON rewritten by serde_json (other spacing, escapes and number
//! spellings) decodes to the same request. What decodes is then checked
//! against the limits as the member checks it, which must not panic.

use lode_node::http::{kv_api, kv_connect, state_api};
use serde_json::Value;

/// The clock a write body's relative expiries are taken from.
const NOW_MICROS: u64 = 1_800_000_000_000_000;

/// The State API's functions, chosen by the input's first byte.
const STATE_FUNCTIONS: [&str; 7] = ["set", "update", "get", "delete", "list", "list_groups", "other"];

/// `body` as serde_json writes it again, when it is JSON.
fn rewritten(body: &[u8]) -> Option<Vec<u8>> {
    let value: Value = serde_json::from_slice(body).ok()?;
    Some(serde_json::to_vec(&value).expect("a JSON value encodes"))
}

/// Asserts that a body `decode` accepted is JSON and decodes the same when
/// rewritten.
fn agrees<T: PartialEq + std::fmt::Debug, E>(body: &[u8], decoded: &T, decode: impl Fn(&[u8]) -> Result<T, E>) {
    let again = rewritten(body).expect("a body that decodes is JSON");
    match decode(&again) {
        Ok(value) => assert_eq!(&value, decoded, "the rewritten body decodes differently"),
        Err(_) => panic!("the rewritten body does not decode"),
    }
}

pub fn http_bodies(data: &[u8]) {
    let Some((selector, body)) = data.split_first() else {
        return;
    };
    match selector % 4 {
        0 => {
            let decode = |body: &[u8]| kv_api::decode_write(body, NOW_MICROS);
            if let Ok(decoded) = decode(body) {
                agrees(body, &decoded, decode);
                let _ = lode_types::validate_client_write(&decoded.1);
            }
        }
        1 => {
            if let Ok(decoded) = kv_api::decode_read(body) {
                agrees(body, &decoded, kv_api::decode_read);
                let _ = decoded.query.validate();
            }
        }
        2 => {
            let function = STATE_FUNCTIONS[usize::from(*selector / 4) % STATE_FUNCTIONS.len()];
            let decode = |body: &[u8]| state_api::decode_call(function, body);
            if let Ok(decoded) = decode(body) {
                // `list_groups` reads no body at all.
                if function != "list_groups" {
                    agrees(body, &decoded, decode);
                }
            }
        }
        _ => {
            if let Ok(version) = kv_connect::negotiate(body) {
                assert!((1..=3).contains(&version), "negotiated version {version}");
                if !body.iter().all(u8::is_ascii_whitespace) {
                    agrees(body, &version, kv_connect::negotiate);
                }
            }
        }
    }
}
