//! What the JSON APIs and apply read from callers inside a write: State
//! API update ops, JSON merge patches, and tokens.

use serde_json::Value;

/// The first JSON value of `data` and the bytes after it.
fn first_value(data: &[u8]) -> Option<(Value, &[u8])> {
    let mut values = serde_json::Deserializer::from_slice(data).into_iter::<Value>();
    let value = values.next()?.ok()?;
    Some((value, &data[values.byte_offset()..]))
}

/// A current value, then an update's ops: what applies does not depend
/// on where the list is cut (a failed op changes nothing), and the ops
/// read back as sent.
pub fn state_update_ops(data: &[u8]) {
    let (current, ops_json) = first_value(data).unwrap_or((Value::Null, data));
    let Ok(ops) = lode_types::state_update::parse_ops(ops_json) else {
        return;
    };
    let whole = lode_types::state_update::apply(Some(&current), &ops);
    let cut = data.len() % ops.len();
    let head = lode_types::state_update::apply(Some(&current), &ops[..cut]);
    let tail = lode_types::state_update::apply(Some(&head.new_value), &ops[cut..]);
    assert_eq!(whole.new_value, tail.new_value, "ops cut at {cut} applied differently");
    assert_eq!(whole.errors.len(), head.errors.len() + tail.errors.len());
    let sent = serde_json::to_vec(&ops).expect("ops encode");
    let again = lode_types::state_update::parse_ops(&sent).expect("encoded ops parse");
    assert_eq!(ops, again, "ops read back as sent");
}

/// RFC 7386 as its section 2 writes it, independently of Lode's.
fn reference_merge(target: &Value, patch: &Value) -> Value {
    let Value::Object(members) = patch else {
        return patch.clone();
    };
    let mut result = match target {
        Value::Object(target_members) => target_members.clone(),
        _ => serde_json::Map::new(),
    };
    for (name, value) in members {
        if value.is_null() {
            result.remove(name);
        } else {
            let merged = reference_merge(result.get(name).unwrap_or(&Value::Null), value);
            result.insert(name.clone(), merged);
        }
    }
    Value::Object(result)
}

/// A target, then a patch: Lode's merge agrees with the reference, and a
/// patch applied twice changes nothing more (merge patches are
/// idempotent).
pub fn merge_patches(data: &[u8]) {
    let Some((target, rest)) = first_value(data) else {
        return;
    };
    let Some((patch, _)) = first_value(rest) else {
        return;
    };
    let mut merged = target.clone();
    lode_raft_store::merge_patch::merge(&mut merged, &patch);
    assert_eq!(merged, reference_merge(&target, &patch), "disagrees with RFC 7386");
    let mut twice = merged.clone();
    lode_raft_store::merge_patch::merge(&mut twice, &patch);
    assert_eq!(twice, merged, "a merge patch applied twice changed more");
    let stored = serde_json::to_vec(&target).expect("target encodes");
    let patch_bytes = serde_json::to_vec(&patch).expect("patch encodes");
    let encoding = lode_client::protocol::Encoding::Json;
    if let Ok(patched) = lode_raft_store::merge_patch::apply(&encoding, &stored, &patch_bytes) {
        let patched: Value = serde_json::from_slice(&patched).expect("a patched value is JSON");
        assert_eq!(patched, merged);
    }
}

/// A token's text as a caller presents it: one that parses prints as text
/// that parses to the same token; grants parse or are refused.
pub fn tokens(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(token) = lode_types::auth::TokenParts::parse(text) {
        let again = lode_types::auth::TokenParts::parse(&token.to_text()).expect("a printed token parses");
        assert_eq!(token, again);
    }
    if let Ok(grant) = lode_types::auth::Grant::parse(text) {
        let _ = grant.validate();
    }
}
