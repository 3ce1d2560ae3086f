//! The State API's `update`: ordered operations on one JSON value (set,
//! merge, increment, decrement, append, remove), applied best effort. A
//! failing operation is skipped and reported with its index, a code from
//! the State seed's table and a message; the others apply in order.
//!
//! Paths: empty, missing or null target the root. A string is one
//! first-level field name, taken literally (`"a.b"` is the field `a.b`).
//! `merge` and `append` also take an array of literal segments and walk
//! it, creating `{}` for a missing intermediate and replacing one that is
//! not an object. This is a pure function of its inputs, so apply can run
//! it and every replica computes the same value.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::limits::{
    STATE_MERGE_KEYS_MAX, STATE_PATH_SEGMENTS_MAX, STATE_PATH_SEGMENT_BYTES_MAX, STATE_UPDATE_OPS_MAX,
    STATE_VALUE_DEPTH_MAX,
};

/// Where the error codes are documented.
pub const DOC_URL: &str = "https://iii.dev/docs/workers/iii-state#error-codes";

const PROTO_NAMES: [&str; 3] = ["__proto__", "constructor", "prototype"];

/// Where an operation applies: the root, a first-level field, or nested
/// segments.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum UpdatePath {
    Field(String),
    Segments(Vec<String>),
}

/// One update operation, tagged by `type` as the State API sends it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum UpdateOp {
    Set {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        path: Option<UpdatePath>,
        value: Value,
    },
    Merge {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        path: Option<UpdatePath>,
        value: Value,
    },
    Increment {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        path: Option<UpdatePath>,
        by: Value,
    },
    Decrement {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        path: Option<UpdatePath>,
        by: Value,
    },
    Append {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        path: Option<UpdatePath>,
        value: Value,
    },
    Remove {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        path: Option<UpdatePath>,
    },
}

/// Why one operation was skipped.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UpdateOpError {
    pub op_index: u32,
    pub code: String,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub doc_url: Option<String>,
}

/// What an update did: the value after every operation that applied, and
/// the operations that did not.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct UpdateOutcome {
    pub new_value: Value,
    pub errors: Vec<UpdateOpError>,
}

impl UpdateOp {
    fn name(&self) -> &'static str {
        match self {
            UpdateOp::Set { .. } => "set",
            UpdateOp::Merge { .. } => "merge",
            UpdateOp::Increment { .. } => "increment",
            UpdateOp::Decrement { .. } => "decrement",
            UpdateOp::Append { .. } => "append",
            UpdateOp::Remove { .. } => "remove",
        }
    }

    fn path(&self) -> Option<&UpdatePath> {
        match self {
            UpdateOp::Set { path, .. }
            | UpdateOp::Merge { path, .. }
            | UpdateOp::Increment { path, .. }
            | UpdateOp::Decrement { path, .. }
            | UpdateOp::Append { path, .. }
            | UpdateOp::Remove { path } => path.as_ref(),
        }
    }
}

/// A resolved path.
enum Target<'a> {
    Root,
    Field(&'a str),
    Nested(&'a [String]),
}

/// An operation's failure before it is numbered.
struct Failure {
    code: String,
    message: String,
}

fn fail(code: impl Into<String>, message: impl Into<String>) -> Failure {
    Failure {
        code: code.into(),
        message: message.into(),
    }
}

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn depth(value: &Value) -> usize {
    match value {
        Value::Array(items) => 1 + items.iter().map(depth).max().unwrap_or(0),
        Value::Object(fields) => 1 + fields.values().map(depth).max().unwrap_or(0),
        _ => 0,
    }
}

/// Checks an operation's path and resolves it.
fn target<'a>(op: &'a UpdateOp) -> Result<Target<'a>, Failure> {
    let name = op.name();
    let check_segment = |segment: &str| -> Result<(), Failure> {
        if PROTO_NAMES.contains(&segment) {
            return Err(fail(
                format!("{name}.path.proto_polluted"),
                format!("Path segment '{segment}' is not allowed (prototype pollution)."),
            ));
        }
        if segment.len() > STATE_PATH_SEGMENT_BYTES_MAX {
            return Err(fail(
                format!("{name}.path.segment_too_long"),
                format!(
                    "Path segment is {} bytes, longer than {STATE_PATH_SEGMENT_BYTES_MAX}.",
                    segment.len()
                ),
            ));
        }
        Ok(())
    };
    match op.path() {
        None => Ok(Target::Root),
        Some(UpdatePath::Field(field)) if field.is_empty() => Ok(Target::Root),
        Some(UpdatePath::Field(field)) => {
            check_segment(field)?;
            Ok(Target::Field(field))
        }
        Some(UpdatePath::Segments(segments)) => {
            if !matches!(op, UpdateOp::Merge { .. } | UpdateOp::Append { .. }) {
                return Err(fail(
                    format!("{name}.path.not_a_field"),
                    format!("{name} takes a first-level field name, not an array path."),
                ));
            }
            if segments.len() > STATE_PATH_SEGMENTS_MAX {
                return Err(fail(
                    format!("{name}.path.too_deep"),
                    format!(
                        "Path has {} segments, more than {STATE_PATH_SEGMENTS_MAX}.",
                        segments.len()
                    ),
                ));
            }
            for segment in segments {
                if segment.is_empty() {
                    return Err(fail(
                        format!("{name}.path.empty_segment"),
                        "Path contains an empty segment.",
                    ));
                }
                check_segment(segment)?;
            }
            match segments.as_slice() {
                [] => Ok(Target::Root),
                [field] => Ok(Target::Field(field)),
                _ => Ok(Target::Nested(segments)),
            }
        }
    }
}

/// Checks a merge value against the seed's limits.
fn check_merge_value(value: &Value) -> Result<&Map<String, Value>, Failure> {
    let Value::Object(fields) = value else {
        return Err(fail(
            "merge.value.not_an_object",
            format!("Merge value must be an object, got {}.", type_name(value)),
        ));
    };
    if depth(value) > STATE_VALUE_DEPTH_MAX {
        return Err(fail(
            "merge.value.too_deep",
            format!("Merge value nests deeper than {STATE_VALUE_DEPTH_MAX} levels."),
        ));
    }
    if fields.len() > STATE_MERGE_KEYS_MAX {
        return Err(fail(
            "merge.value.too_many_keys",
            format!(
                "Merge value has {} top-level keys, more than {STATE_MERGE_KEYS_MAX}.",
                fields.len()
            ),
        ));
    }
    if let Some(key) = fields.keys().find(|key| PROTO_NAMES.contains(&key.as_str())) {
        return Err(fail(
            "merge.value.proto_polluted",
            format!("Merge value key '{key}' is not allowed (prototype pollution)."),
        ));
    }
    Ok(fields)
}

/// Adds two JSON numbers: integers stay integers while they fit.
fn add(current: &serde_json::Number, by: &serde_json::Number, negate: bool) -> Option<Value> {
    if let (Some(current), Some(by)) = (current.as_i64(), by.as_i64()) {
        let sum = if negate {
            current.checked_sub(by)
        } else {
            current.checked_add(by)
        };
        if let Some(sum) = sum {
            return Some(Value::from(sum));
        }
    }
    let (current, by) = (current.as_f64()?, by.as_f64()?);
    serde_json::Number::from_f64(if negate { current - by } else { current + by }).map(Value::Number)
}

/// The object a field operation works in: the root, made `{}` when absent
/// or null; any other non-object is `<op>.target_not_object`.
fn root_object<'a>(root: &'a mut Value, name: &str, field: &str) -> Result<&'a mut Map<String, Value>, Failure> {
    if root.is_null() {
        *root = Value::Object(Map::new());
    }
    let kind = type_name(root);
    root.as_object_mut().ok_or_else(|| {
        fail(
            format!("{name}.target_not_object"),
            format!("Expected object to write field '{field}', got {kind}."),
        )
    })
}

/// Walks `segments`, creating `{}` for each missing or non-object step.
fn walk_or_create<'a>(mut at: &'a mut Value, segments: &[String]) -> &'a mut Value {
    for segment in segments {
        if !at.is_object() {
            *at = Value::Object(Map::new());
        }
        let Value::Object(fields) = at else {
            unreachable!("made an object just above");
        };
        at = fields.entry(segment.clone()).or_insert(Value::Null);
    }
    at
}

/// Appends to one value: arrays push; a string takes a string; a missing or
/// null value becomes `[value]`, or the string itself when `concat_strings`
/// (the legacy single-field form) and the value is a string.
fn append_to(slot: &mut Value, value: &Value, concat_strings: bool, path: &str) -> Result<(), Failure> {
    match slot {
        Value::Null => {
            *slot = match value {
                Value::String(_) if concat_strings => value.clone(),
                _ => Value::Array(vec![value.clone()]),
            };
            Ok(())
        }
        Value::Array(items) => {
            items.push(value.clone());
            Ok(())
        }
        Value::String(text) => match value {
            Value::String(more) => {
                text.push_str(more);
                Ok(())
            }
            other => Err(fail(
                "append.type_mismatch",
                format!("Cannot append {} to string at path '{path}'.", type_name(other)),
            )),
        },
        other => Err(fail(
            "append.type_mismatch",
            format!("Cannot append to {} at path '{path}'.", type_name(other)),
        )),
    }
}

fn apply_one(root: &mut Value, op: &UpdateOp) -> Result<(), Failure> {
    let target = target(op)?;
    let name = op.name();
    match (op, target) {
        (UpdateOp::Set { value, .. }, Target::Root) => *root = value.clone(),
        (UpdateOp::Set { value, .. }, Target::Field(field)) => {
            root_object(root, name, field)?.insert(field.to_owned(), value.clone());
        }
        (UpdateOp::Merge { value, .. }, target) => {
            let fields = check_merge_value(value)?;
            let slot = match target {
                Target::Root => root,
                Target::Field(field) => walk_or_create(root, std::slice::from_ref(&field.to_owned())),
                Target::Nested(segments) => walk_or_create(root, segments),
            };
            if !slot.is_object() {
                *slot = Value::Object(Map::new());
            }
            if let Value::Object(existing) = slot {
                for (key, value) in fields {
                    existing.insert(key.clone(), value.clone());
                }
            }
        }
        (UpdateOp::Increment { by, .. } | UpdateOp::Decrement { by, .. }, target) => {
            let negate = matches!(op, UpdateOp::Decrement { .. });
            let Value::Number(by) = by else {
                return Err(fail(
                    format!("{name}.by.not_number"),
                    format!("Expected a number for 'by', got {}.", type_name(by)),
                ));
            };
            let (slot, path) = match target {
                Target::Root => (root, String::new()),
                Target::Field(field) => {
                    let object = root_object(root, name, field)?;
                    (object.entry(field.to_owned()).or_insert(Value::Null), field.to_owned())
                }
                Target::Nested(_) => unreachable!("target() refuses nested paths for {name}"),
            };
            let result = match &*slot {
                Value::Null => add(&serde_json::Number::from(0), by, negate),
                Value::Number(current) => add(current, by, negate),
                other => {
                    return Err(fail(
                        format!("{name}.not_number"),
                        format!("Expected number at path '{path}', got {}.", type_name(other)),
                    ))
                }
            };
            *slot = result.ok_or_else(|| {
                fail(
                    format!("{name}.not_number"),
                    format!("The result at path '{path}' is not a finite number."),
                )
            })?;
        }
        (UpdateOp::Append { value, .. }, Target::Root) => append_to(root, value, true, "")?,
        (UpdateOp::Append { value, .. }, Target::Field(field)) => {
            let nested = matches!(op.path(), Some(UpdatePath::Segments(_)));
            let object = if nested {
                if !root.is_object() {
                    *root = Value::Object(Map::new());
                }
                root.as_object_mut()
                    .ok_or_else(|| fail("append.target_not_object", ""))?
            } else {
                root_object(root, name, field)?
            };
            let slot = object.entry(field.to_owned()).or_insert(Value::Null);
            append_to(slot, value, !nested, field)?;
        }
        (UpdateOp::Append { value, .. }, Target::Nested(segments)) => {
            let slot = walk_or_create(root, segments);
            append_to(slot, value, false, &segments.join("."))?;
        }
        (UpdateOp::Remove { .. }, Target::Root) => *root = Value::Null,
        (UpdateOp::Remove { .. }, Target::Field(field)) => match root {
            Value::Null => {}
            Value::Object(fields) => {
                fields.remove(field);
            }
            other => {
                return Err(fail(
                    "remove.target_not_object",
                    format!("Expected object to remove field '{field}', got {}.", type_name(other)),
                ))
            }
        },
        (UpdateOp::Set { .. } | UpdateOp::Remove { .. }, Target::Nested(_)) => {
            unreachable!("target() refuses nested paths for {name}")
        }
    }
    Ok(())
}

/// The namespace that holds a State API scope's keys.
pub fn scope_namespace(scope: &str) -> String {
    format!("{SCOPE_NAMESPACE_PREFIX}{scope}")
}

/// Namespaces holding State API scopes start with this.
pub const SCOPE_NAMESPACE_PREFIX: &str = "state:";

/// Reads the JSON array of ops an update carries, checking their count.
pub fn parse_ops(ops_json: &[u8]) -> Result<Vec<UpdateOp>, String> {
    let ops: Vec<UpdateOp> =
        serde_json::from_slice(ops_json).map_err(|error| format!("ops is not a valid array of update ops: {error}"))?;
    if ops.is_empty() {
        return Err("ops must hold at least one update op".to_owned());
    }
    if ops.len() > STATE_UPDATE_OPS_MAX {
        return Err(crate::limits::over_limit(
            "the number of ops",
            ops.len(),
            "state_update_ops_max",
            STATE_UPDATE_OPS_MAX,
        ));
    }
    Ok(ops)
}

/// Applies `ops` in order to `current` (`None`: the key is absent). Failed
/// operations change nothing and are reported; the rest apply.
pub fn apply(current: Option<&Value>, ops: &[UpdateOp]) -> UpdateOutcome {
    let mut value = current.cloned().unwrap_or(Value::Null);
    let mut errors = Vec::new();
    for (index, op) in (0u32..).zip(ops) {
        // Each op works on a copy, so a failure half-way leaves nothing.
        let mut next = value.clone();
        match apply_one(&mut next, op) {
            Ok(()) => value = next,
            Err(failure) => errors.push(UpdateOpError {
                op_index: index,
                code: failure.code,
                message: failure.message,
                doc_url: Some(DOC_URL.to_owned()),
            }),
        }
    }
    UpdateOutcome {
        new_value: value,
        errors,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn ops(value: Value) -> Vec<UpdateOp> {
        serde_json::from_value(value).expect("update ops")
    }

    fn codes(outcome: &UpdateOutcome) -> Vec<(u32, &str)> {
        outcome
            .errors
            .iter()
            .map(|error| (error.op_index, error.code.as_str()))
            .collect()
    }

    #[test]
    fn the_seed_examples() {
        let outcome = apply(
            Some(&json!({ "name": "Ada" })),
            &ops(json!([{ "type": "increment", "path": "name", "by": 1 }])),
        );
        assert_eq!(outcome.new_value, json!({ "name": "Ada" }));
        assert_eq!(codes(&outcome), vec![(0, "increment.not_number")]);
        assert_eq!(outcome.errors[0].message, "Expected number at path 'name', got string.");
        assert_eq!(outcome.errors[0].doc_url.as_deref(), Some(DOC_URL));

        let outcome = apply(
            Some(&json!({})),
            &ops(json!([{ "type": "set", "path": "__proto__", "value": 1 }])),
        );
        assert_eq!(outcome.new_value, json!({}));
        assert_eq!(codes(&outcome), vec![(0, "set.path.proto_polluted")]);
        assert_eq!(
            outcome.errors[0].message,
            "Path segment '__proto__' is not allowed (prototype pollution)."
        );
    }

    #[test]
    fn nested_paths_walk_and_create() {
        let outcome = apply(
            None,
            &ops(json!([
                { "type": "merge", "path": ["sessions", "abc"], "value": { "ts": "chunk" } },
                { "type": "append", "path": ["sessions", "abc", "events"], "value": { "kind": "chunk" } },
                { "type": "append", "path": ["sessions", "abc", "events"], "value": { "kind": "end" } },
                { "type": "merge", "path": ["a.b"], "value": { "x": 1 } },
            ])),
        );
        assert!(outcome.errors.is_empty(), "{:?}", outcome.errors);
        assert_eq!(
            outcome.new_value,
            json!({
                "sessions": { "abc": { "ts": "chunk", "events": [{ "kind": "chunk" }, { "kind": "end" }] } },
                "a.b": { "x": 1 },
            })
        );
        // An array intermediate is replaced by an object.
        let outcome = apply(
            Some(&json!({ "a": [1, 2, 3] })),
            &ops(json!([{ "type": "append", "path": ["a", "b"], "value": 42 }])),
        );
        assert_eq!(outcome.new_value, json!({ "a": { "b": [42] } }));
        // A missing nested leaf is an array even for a string.
        let outcome = apply(
            None,
            &ops(json!([{ "type": "append", "path": ["x", "y"], "value": "s" }])),
        );
        assert_eq!(outcome.new_value, json!({ "x": { "y": ["s"] } }));
        // The legacy single-field form concatenates strings.
        let outcome = apply(
            None,
            &ops(json!([
                { "type": "append", "path": "log", "value": "a" },
                { "type": "append", "path": "log", "value": "b" },
                { "type": "append", "value": "first" },
            ])),
        );
        assert_eq!(codes(&outcome), vec![(2, "append.type_mismatch")]);
        assert_eq!(outcome.new_value, json!({ "log": "ab" }));
    }

    #[test]
    fn every_error_code_of_the_table() {
        let long = "x".repeat(STATE_PATH_SEGMENT_BYTES_MAX + 1);
        let deep_path: Vec<String> = (0..=STATE_PATH_SEGMENTS_MAX).map(|index| format!("s{index}")).collect();
        let mut deep_value = json!(1);
        for _ in 0..=STATE_VALUE_DEPTH_MAX {
            deep_value = json!({ "d": deep_value });
        }
        let many_keys: Map<String, Value> = (0..=STATE_MERGE_KEYS_MAX)
            .map(|index| (format!("k{index}"), json!(index)))
            .collect();
        let cases = [
            (
                json!([1]),
                json!({ "type": "set", "path": "f", "value": 1 }),
                "set.target_not_object",
            ),
            (
                json!(7),
                json!({ "type": "append", "path": "f", "value": 1 }),
                "append.target_not_object",
            ),
            (
                json!({ "n": 1 }),
                json!({ "type": "append", "path": "n", "value": 1 }),
                "append.type_mismatch",
            ),
            (
                json!({ "s": "a" }),
                json!({ "type": "append", "path": "s", "value": 1 }),
                "append.type_mismatch",
            ),
            (
                json!({ "o": {} }),
                json!({ "type": "append", "path": ["o"], "value": 1 }),
                "append.type_mismatch",
            ),
            (
                json!("x"),
                json!({ "type": "increment", "path": "f", "by": 1 }),
                "increment.target_not_object",
            ),
            (
                json!({ "f": "a" }),
                json!({ "type": "increment", "path": "f", "by": 1 }),
                "increment.not_number",
            ),
            (
                json!(true),
                json!({ "type": "decrement", "path": "f", "by": 1 }),
                "decrement.target_not_object",
            ),
            (
                json!({ "f": [] }),
                json!({ "type": "decrement", "path": "f", "by": 1 }),
                "decrement.not_number",
            ),
            (
                json!([]),
                json!({ "type": "remove", "path": "f" }),
                "remove.target_not_object",
            ),
            (
                json!({}),
                json!({ "type": "merge", "path": ["constructor"], "value": {} }),
                "merge.path.proto_polluted",
            ),
            (
                json!({}),
                json!({ "type": "remove", "path": "prototype" }),
                "remove.path.proto_polluted",
            ),
            (
                json!({}),
                json!({ "type": "set", "path": long, "value": 1 }),
                "set.path.segment_too_long",
            ),
            (
                json!({}),
                json!({ "type": "merge", "path": deep_path, "value": {} }),
                "merge.path.too_deep",
            ),
            (
                json!({}),
                json!({ "type": "merge", "path": ["a", ""], "value": {} }),
                "merge.path.empty_segment",
            ),
            (
                json!({}),
                json!({ "type": "append", "path": deep_path, "value": 1 }),
                "append.path.too_deep",
            ),
            (
                json!({}),
                json!({ "type": "append", "path": ["", "a"], "value": 1 }),
                "append.path.empty_segment",
            ),
            (
                json!({}),
                json!({ "type": "merge", "value": [1] }),
                "merge.value.not_an_object",
            ),
            (
                json!({}),
                json!({ "type": "merge", "value": deep_value }),
                "merge.value.too_deep",
            ),
            (
                json!({}),
                json!({ "type": "merge", "value": many_keys }),
                "merge.value.too_many_keys",
            ),
            (
                json!({}),
                json!({ "type": "merge", "value": { "__proto__": 1 } }),
                "merge.value.proto_polluted",
            ),
        ];
        for (current, op, code) in cases {
            let outcome = apply(Some(&current), &ops(json!([op.clone()])));
            assert_eq!(codes(&outcome), vec![(0, code)], "{op}");
            assert_eq!(outcome.new_value, current, "a failed op changed the value: {op}");
        }
    }

    #[test]
    fn best_effort_applies_the_ops_that_can() {
        let outcome = apply(
            Some(&json!({ "count": 1, "name": "Ada" })),
            &ops(json!([
                { "type": "increment", "path": "count", "by": 2 },
                { "type": "increment", "path": "name", "by": 1 },
                { "type": "decrement", "path": "count", "by": 0.5 },
                { "type": "set", "path": "status", "value": "active" },
                { "type": "remove", "path": "name" },
                { "type": "remove", "path": "missing" },
                { "type": "merge", "value": { "extra": true } },
                { "type": "increment", "path": "fresh", "by": 5 },
            ])),
        );
        assert_eq!(codes(&outcome), vec![(1, "increment.not_number")]);
        assert_eq!(
            outcome.new_value,
            json!({ "count": 2.5, "status": "active", "extra": true, "fresh": 5 })
        );
        // Root operations: replace, merge, count, append.
        let outcome = apply(
            None,
            &ops(json!([
                { "type": "set", "path": null, "value": [1] },
                { "type": "append", "path": "", "value": 2 },
            ])),
        );
        assert_eq!(outcome.new_value, json!([1, 2]));
        let outcome = apply(Some(&json!(3)), &ops(json!([{ "type": "increment", "by": 4 }])));
        assert_eq!(outcome.new_value, json!(7));
    }
}
