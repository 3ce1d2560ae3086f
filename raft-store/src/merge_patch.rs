//! RFC 7386 JSON merge patch, the codec-specific patch of JSON entries.
//!
//! A patch object sets its members on the target object, recursively; a
//! `null` member removes the member; a patch that is not an object replaces
//! the target whole.

use serde_json::Value;

use crate::command::Encoding;
use crate::limits::check_value;

/// Merges `patch` into `target` in place.
pub fn merge(target: &mut Value, patch: &Value) {
    let Value::Object(patch_members) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(serde_json::Map::new());
    }
    if let Value::Object(target_members) = target {
        for (name, patch_value) in patch_members {
            if patch_value.is_null() {
                target_members.remove(name);
            } else {
                merge(target_members.entry(name.clone()).or_insert(Value::Null), patch_value);
            }
        }
    }
}

/// Patches a stored JSON value; the message of a refusal names the problem.
pub fn apply(encoding: &Encoding, value: &[u8], patch: &[u8]) -> Result<Vec<u8>, String> {
    if *encoding != Encoding::Json {
        return Err(format!(
            "patch needs a JSON entry; this entry's encoding is {encoding:?}"
        ));
    }
    let mut target: Value =
        serde_json::from_slice(value).map_err(|error| format!("the stored value is not JSON: {error}"))?;
    let patch: Value = serde_json::from_slice(patch).map_err(|error| format!("patch is not JSON: {error}"))?;
    merge(&mut target, &patch);
    let patched = serde_json::to_vec(&target).map_err(|error| format!("the patched value does not encode: {error}"))?;
    check_value(&patched).map_err(|message| format!("the patched {message}"))?;
    Ok(patched)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// The examples of RFC 7386, section 3.
    #[test]
    fn the_rfc_examples_hold() {
        let cases = [
            (json!({"a":"b"}), json!({"a":"c"}), json!({"a":"c"})),
            (json!({"a":"b"}), json!({"b":"c"}), json!({"a":"b","b":"c"})),
            (json!({"a":"b"}), json!({"a":null}), json!({})),
            (json!({"a":"b","b":"c"}), json!({"a":null}), json!({"b":"c"})),
            (json!({"a":["b"]}), json!({"a":"c"}), json!({"a":"c"})),
            (json!({"a":"c"}), json!({"a":["b"]}), json!({"a":["b"]})),
            (
                json!({"a":{"b":"c"}}),
                json!({"a":{"b":"d","c":null}}),
                json!({"a":{"b":"d"}}),
            ),
            (json!({"a":[{"b":"c"}]}), json!({"a":[1]}), json!({"a":[1]})),
            (json!(["a", "b"]), json!(["c", "d"]), json!(["c", "d"])),
            (json!({"a":"b"}), json!(["c"]), json!(["c"])),
            (json!({"a":"foo"}), json!(null), json!(null)),
            (json!({"a":"foo"}), json!("bar"), json!("bar")),
            (json!({"e":null}), json!({"a":1}), json!({"e":null,"a":1})),
            (json!([1, 2]), json!({"a":"b","c":null}), json!({"a":"b"})),
            (json!({}), json!({"a":{"bb":{"ccc":null}}}), json!({"a":{"bb":{}}})),
        ];
        for (target, patch, expected) in cases {
            let mut merged = target.clone();
            merge(&mut merged, &patch);
            assert_eq!(merged, expected, "{target} + {patch}");
        }
    }

    #[test]
    fn non_json_entries_and_malformed_patches_are_refused() {
        let refused = apply(&Encoding::Bytes, b"{}", b"{}").expect_err("bytes entry");
        assert!(refused.contains("needs a JSON entry"), "{refused}");
        let refused = apply(&Encoding::Json, b"{}", b"{not json").expect_err("malformed patch");
        assert!(refused.contains("patch is not JSON"), "{refused}");
        let refused = apply(&Encoding::Json, b"not json", b"{}").expect_err("malformed value");
        assert!(refused.contains("stored value is not JSON"), "{refused}");
        let big = format!("{{\"a\":\"{}\"}}", "x".repeat(70_000));
        let refused = apply(&Encoding::Json, b"{}", big.as_bytes()).expect_err("too big");
        assert!(refused.contains("value_bytes_max"), "{refused}");
    }

    /// Found by fuzzing (`fuzz/corpus/merge_patches`): serde_json's default
    /// float parser read this number one ulp off.
    #[test]
    fn numbers_are_stored_exactly_as_sent() {
        let patched = apply(&Encoding::Json, b"0", b"[0,2.222222122222252e21]").expect("a patch");
        assert_eq!(patched, b"[0,2.222222122222252e+21]");
    }
}
