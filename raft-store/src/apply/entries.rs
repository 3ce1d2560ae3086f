//! Operations on entries of user namespaces: set (plain, conditional or
//! fenced), delete, expire, patch, copy and move, take, and bounded range
//! deletes; and the session index a write with a session updates.

use super::context::ApplyContext;
use super::{leases, not_found, precondition_holds, Applied};
use crate::command::{Encoding, Fence, OperationResult, Precondition, Rejection, Selector, SessionLink};
use crate::engine::{Engine, Space};
use crate::error::EngineError;
use crate::keys;

/// A set's fields, as one value.
pub(super) struct SetEntry<'o> {
    pub namespace: &'o str,
    pub key: &'o [u8],
    pub value: &'o [u8],
    pub encoding: &'o Encoding,
    pub expires_at_micros: Option<u64>,
    pub precondition: Option<Precondition>,
    pub fence: Option<&'o Fence>,
    pub session: Option<&'o SessionLink>,
}

pub(super) fn set<E: Engine>(context: &mut ApplyContext<'_, E>, set: SetEntry<'_>) -> Applied {
    if let Some(fence) = set.fence {
        if let Err(rejection) = leases::fence_holds(context, fence)? {
            return Ok(Err(rejection));
        }
    }
    let entry_key = keys::entry_key(set.namespace, set.key);
    if let Some(precondition) = set.precondition {
        let current = context.live(&entry_key)?.map(|entry| entry.version);
        if !precondition_holds(precondition, current) {
            return Ok(Err(Rejection::VersionConflict {
                key: set.key.to_vec(),
                current,
            }));
        }
    }
    let entry = context.stored(
        set.value.to_vec(),
        set.encoding.clone(),
        set.expires_at_micros,
        set.session.cloned(),
    );
    context.put(entry_key, entry)?;
    record_session(context, set.session, set.namespace, set.key)?;
    Ok(Ok(OperationResult::Set {
        version: context.version(),
    }))
}

pub(super) fn delete<E: Engine>(
    context: &mut ApplyContext<'_, E>,
    namespace: &str,
    key: &[u8],
    session: Option<&SessionLink>,
) -> Applied {
    record_session(context, session, namespace, key)?;
    let previous = context.remove(keys::entry_key(namespace, key))?;
    let removed_live_entry = previous.is_some_and(|entry| entry.is_live_at(context.now_micros()));
    Ok(Ok(OperationResult::Delete { removed_live_entry }))
}

pub(super) fn expire<E: Engine>(
    context: &mut ApplyContext<'_, E>,
    namespace: &str,
    key: &[u8],
    expires_at_micros: Option<u64>,
) -> Applied {
    let entry_key = keys::entry_key(namespace, key);
    let Some(mut entry) = context.live(&entry_key)? else {
        return Ok(Err(not_found(namespace, key)));
    };
    entry.expires_at_micros = expires_at_micros;
    let unchanged = entry.version;
    context.put(entry_key, entry)?;
    Ok(Ok(OperationResult::Expire { version: unchanged }))
}

pub(super) fn patch<E: Engine>(
    context: &mut ApplyContext<'_, E>,
    namespace: &str,
    key: &[u8],
    patch: &[u8],
    session: Option<&SessionLink>,
) -> Applied {
    let entry_key = keys::entry_key(namespace, key);
    let Some(entry) = context.live(&entry_key)? else {
        return Ok(Err(not_found(namespace, key)));
    };
    let value = match crate::merge_patch::apply(&entry.encoding, &entry.value, patch) {
        Ok(value) => value,
        Err(message) => return Ok(Err(Rejection::Invalid(message))),
    };
    let patched = context.stored(value, entry.encoding, entry.expires_at_micros, session.cloned());
    context.put(entry_key, patched)?;
    record_session(context, session, namespace, key)?;
    Ok(Ok(OperationResult::Patch {
        version: context.version(),
    }))
}

pub(super) fn copy<E: Engine>(
    context: &mut ApplyContext<'_, E>,
    (namespace, key): (&str, &[u8]),
    (to_namespace, to_key): (&str, &[u8]),
    remove_source: bool,
) -> Applied {
    let source_key = keys::entry_key(namespace, key);
    let Some(entry) = context.live(&source_key)? else {
        return Ok(Err(not_found(namespace, key)));
    };
    let destination_key = keys::entry_key(to_namespace, to_key);
    let copied = context.stored(entry.value, entry.encoding, entry.expires_at_micros, entry.session);
    context.put(destination_key.clone(), copied)?;
    if remove_source && source_key != destination_key {
        context.remove(source_key)?;
    }
    Ok(Ok(OperationResult::Copy {
        version: context.version(),
    }))
}

/// Removes the key's live entry and answers its value.
pub(super) fn take<E: Engine>(context: &mut ApplyContext<'_, E>, namespace: &str, key: &[u8]) -> Applied {
    let entry_key = keys::entry_key(namespace, key);
    let current = context.live(&entry_key)?;
    context.remove(entry_key)?;
    Ok(Ok(OperationResult::Taken {
        encoding: current.as_ref().map(|entry| entry.encoding.clone()),
        old_value: current.map(|entry| entry.value),
    }))
}

/// Records that `session` wrote `key` of `namespace`, so the keys a session
/// wrote can be listed; the record's version is the write's.
fn record_session<E: Engine>(
    context: &mut ApplyContext<'_, E>,
    session: Option<&SessionLink>,
    namespace: &str,
    key: &[u8],
) -> Result<(), EngineError> {
    let Some(session) = session else {
        return Ok(());
    };
    let record = context.stored(Vec::new(), Encoding::Bytes, None, Some(session.clone()));
    context.put(keys::session_index_key(session, namespace, key), record)
}

/// Removes the selected entries among the next `entries_max` of the range.
pub(super) fn delete_range<E: Engine>(
    context: &mut ApplyContext<'_, E>,
    namespace: &str,
    selector: &Selector,
    after: Option<&[u8]>,
    entries_max: u32,
) -> Applied {
    let (mut start, end) = crate::command::stored_range(selector, namespace);
    if let Some(after) = after {
        let mut resume = keys::entry_key(namespace, after);
        resume.push(0);
        start = start.max(resume);
    }
    let examined = context
        .engine()
        .scan(Space::Entries, &start, end.as_deref(), entries_max as usize)?;
    let full_page = examined.len() == entries_max as usize;
    let mut removed = 0;
    let mut last_key = None;
    for (stored_key, _) in examined {
        let Some((_, key)) = keys::split_entry_key(&stored_key) else {
            return Err(EngineError::corrupt("entry key", "no namespace prefix"));
        };
        if selector.matches(&key) {
            if let Some(previous) = context.remove(stored_key)? {
                removed += u32::from(previous.is_live_at(context.now_micros()));
            }
        }
        last_key = Some(key);
    }
    Ok(Ok(OperationResult::DeleteRange {
        removed,
        resume_after: if full_page { last_key } else { None },
    }))
}
