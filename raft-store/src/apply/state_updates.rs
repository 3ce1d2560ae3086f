//! The State API's update: JSON update ops applied best effort to a key's
//! live JSON value (the ops themselves are `lode_types::state_update`),
//! stored as JSON unless every op failed.

use super::context::ApplyContext;
use super::Applied;
use crate::command::{Encoding, OperationResult, Rejection};
use crate::engine::Engine;
use crate::error::EngineError;
use crate::keys;

/// The JSON value at a live entry (`None`: absent), or why it has none.
fn current_json(
    entry: Option<&crate::entry::StoredEntry>,
    namespace: &str,
    key: &[u8],
) -> Result<Option<serde_json::Value>, Rejection> {
    match entry {
        None => Ok(None),
        Some(entry) if entry.encoding == Encoding::Json => {
            serde_json::from_slice(&entry.value).map(Some).map_err(|error| {
                Rejection::Invalid(format!(
                    "key {} of namespace {namespace:?} does not hold valid JSON: {error}",
                    keys::display_key(key)
                ))
            })
        }
        Some(entry) => Err(Rejection::Invalid(format!(
            "key {} of namespace {namespace:?} holds a {:?} value; a state update needs JSON",
            keys::display_key(key),
            entry.encoding
        ))),
    }
}

fn encode_json(value: &impl serde::Serialize, what: &'static str) -> Result<Vec<u8>, EngineError> {
    serde_json::to_vec(value).map_err(|error| EngineError::corrupt(what, error))
}

pub(super) fn update<E: Engine>(
    context: &mut ApplyContext<'_, E>,
    namespace: &str,
    key: &[u8],
    ops_json: &[u8],
) -> Applied {
    let entry_key = keys::entry_key(namespace, key);
    let current = context.live(&entry_key)?;
    let old_value = match current_json(current.as_ref(), namespace, key) {
        Ok(value) => value,
        Err(rejection) => return Ok(Err(rejection)),
    };
    let ops = match lode_types::state_update::parse_ops(ops_json) {
        Ok(ops) => ops,
        Err(message) => return Ok(Err(Rejection::Invalid(message))),
    };
    let outcome = lode_types::state_update::apply(old_value.as_ref(), &ops);
    let new_value = encode_json(&outcome.new_value, "state value")?;
    let written = outcome.errors.len() < ops.len();
    if written {
        if let Err(message) = crate::limits::check_value(&new_value) {
            return Ok(Err(Rejection::Invalid(format!("the updated {message}"))));
        }
        let entry = context.stored(new_value.clone(), Encoding::Json, None, None);
        context.put(entry_key, entry)?;
    }
    Ok(Ok(OperationResult::StateUpdated {
        version: written.then_some(context.version()),
        old_value: current.map(|entry| entry.value),
        new_value,
        errors_json: encode_json(&outcome.errors, "state update errors")?,
    }))
}
