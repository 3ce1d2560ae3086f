//! Leases: an entry of the internal namespace `\0lease\0<namespace>` whose
//! version is its fencing token (the grant's log index) and whose expiry is
//! judged by command time. Acquire, renew, release, and the fence check a
//! fenced write makes.

use super::context::ApplyContext;
use super::Applied;
use crate::command::{Encoding, Fence, OperationResult, Rejection};
use crate::engine::Engine;
use crate::error::EngineError;
use crate::injected_bugs;
use crate::keys;

fn lease_key(namespace: &str, key: &[u8]) -> Vec<u8> {
    keys::entry_key(&keys::lease_namespace(namespace), key)
}

/// The lease at a key if it is live by the command's time (as the injected
/// clock bug sees it, when that is on).
fn live_lease<E: Engine>(
    context: &mut ApplyContext<'_, E>,
    lease_key: &[u8],
) -> Result<Option<crate::entry::StoredEntry>, EngineError> {
    let lease_time = injected_bugs::lease_time(context.now_micros());
    context.live_at(lease_key, lease_time)
}

/// `Ok` when the fence's lease is held with its token.
pub(super) fn fence_holds<E: Engine>(
    context: &mut ApplyContext<'_, E>,
    fence: &Fence,
) -> Result<Result<(), Rejection>, EngineError> {
    let held = live_lease(context, &lease_key(&fence.namespace, &fence.key))?
        .is_some_and(|lease| lease.version == fence.token);
    if held {
        return Ok(Ok(()));
    }
    Ok(Err(Rejection::LeaseLost(format!(
        "lease {} in namespace {:?} is not held with token {}",
        keys::display_key(&fence.key),
        fence.namespace,
        fence.token
    ))))
}

pub(super) fn acquire<E: Engine>(
    context: &mut ApplyContext<'_, E>,
    (namespace, key): (&str, &[u8]),
    holder: &str,
    ttl_micros: u64,
) -> Applied {
    let lease_key = lease_key(namespace, key);
    if let Some(live_lease) = live_lease(context, &lease_key)? {
        return Ok(Err(Rejection::VersionConflict {
            key: key.to_vec(),
            current: Some(live_lease.version),
        }));
    }
    let expires_at_micros = context.now_micros().saturating_add(ttl_micros);
    let lease = context.stored(
        holder.as_bytes().to_vec(),
        Encoding::Bytes,
        Some(expires_at_micros),
        None,
    );
    context.put(lease_key, lease)?;
    Ok(Ok(OperationResult::AcquireLease {
        token: context.version(),
        ttl_micros,
        expires_at_micros,
    }))
}

pub(super) fn renew<E: Engine>(
    context: &mut ApplyContext<'_, E>,
    (namespace, key): (&str, &[u8]),
    (holder, token): (&str, u64),
    ttl_micros: u64,
) -> Applied {
    let lease_key = lease_key(namespace, key);
    let Some(mut lease) =
        live_lease(context, &lease_key)?.filter(|lease| lease.version == token && lease.value == holder.as_bytes())
    else {
        return Ok(Err(Rejection::LeaseLost(format!(
            "lease {} in namespace {namespace:?} is not held by {holder:?} with token {token}",
            keys::display_key(key)
        ))));
    };
    let expires_at_micros = context.now_micros().saturating_add(ttl_micros);
    lease.expires_at_micros = Some(expires_at_micros);
    context.put(lease_key, lease)?;
    Ok(Ok(OperationResult::RenewLease {
        token,
        ttl_micros,
        expires_at_micros,
    }))
}

pub(super) fn release<E: Engine>(
    context: &mut ApplyContext<'_, E>,
    (namespace, key): (&str, &[u8]),
    (holder, token): (&str, u64),
) -> Applied {
    let lease_key = lease_key(namespace, key);
    let held = live_lease(context, &lease_key)?
        .is_some_and(|lease| lease.version == token && lease.value == holder.as_bytes());
    if held {
        context.remove(lease_key)?;
    }
    Ok(Ok(OperationResult::ReleaseLease { released: held }))
}
