//! Auth changes: users, roles and tokens written as records of the auth
//! namespace (`crate::auth`), checked against what is stored.

use std::collections::BTreeSet;

use lode_types::auth::AuthChange;
use lode_types::limits::ROLES_PER_USER_MAX;

use super::context::ApplyContext;
use super::Applied;
use crate::auth::{
    for_each_stored, record_key, revision_key, role_key, token_key, user_key, RoleRecord, TokenRecord, UserRecord,
    TOKEN, USER,
};
use crate::command::{Encoding, OperationResult, Rejection};
use crate::engine::Engine;
use crate::error::{decode, encode, EngineError};
use crate::keys;

fn read<E: Engine, T: serde::de::DeserializeOwned>(
    context: &mut ApplyContext<'_, E>,
    key: &[u8],
    what: &'static str,
) -> Result<Option<T>, EngineError> {
    match context.get(key)? {
        Some(entry) => Ok(Some(decode(what, &entry.value)?)),
        None => Ok(None),
    }
}

fn write<E: Engine, T: serde::Serialize>(
    context: &mut ApplyContext<'_, E>,
    key: Vec<u8>,
    what: &'static str,
    record: &T,
) -> Result<(), EngineError> {
    let entry = context.stored(encode(what, record)?, Encoding::Bytes, None, None);
    context.put(key, entry)
}

fn not_found(what: &str, name: &str) -> Applied {
    Ok(Err(Rejection::NotFound(format!("{what} {name:?}"))))
}

fn done() -> Applied {
    Ok(Ok(OperationResult::AuthChanged))
}

/// The log index of the last auth change that may have taken a
/// permission away (0: none yet), as this entry sees it.
pub(super) fn grants_revision<E: Engine>(context: &mut ApplyContext<'_, E>) -> Result<u64, EngineError> {
    Ok(read::<E, u64>(context, &revision_key(), "grants revision")?.unwrap_or(0))
}

/// Whether a change can take a permission away from someone: then every
/// write checked before it and applied after it is refused. The first user
/// does (it turns authentication on).
fn may_restrict<E: Engine>(context: &mut ApplyContext<'_, E>, change: &AuthChange) -> Result<bool, EngineError> {
    if let AuthChange::PutUser { .. } = change {
        for key in record_keys(context, USER)? {
            if context.get(&key)?.is_some() {
                return Ok(false);
            }
        }
        return Ok(true);
    }
    Ok(match change {
        AuthChange::RemoveUser { .. }
        | AuthChange::PutRole { .. }
        | AuthChange::RemoveRole { .. }
        | AuthChange::UnbindRole { .. }
        | AuthChange::RevokeToken { .. } => true,
        // Adding gives, and pruning removes only tokens that no longer work.
        AuthChange::PutUser { .. }
        | AuthChange::BindRole { .. }
        | AuthChange::IssueToken { .. }
        | AuthChange::IssueSessionToken { .. }
        | AuthChange::PruneTokens { .. } => false,
    })
}

pub(super) fn apply<E: Engine>(context: &mut ApplyContext<'_, E>, change: &AuthChange) -> Applied {
    let restricts = may_restrict(context, change)?;
    let applied = apply_change(context, change)?;
    if applied.is_ok() && restricts {
        let index = context.position().index;
        write(context, revision_key(), "grants revision", &index)?;
    }
    Ok(applied)
}

fn apply_change<E: Engine>(context: &mut ApplyContext<'_, E>, change: &AuthChange) -> Applied {
    match change {
        AuthChange::PutUser { name } => {
            if read::<E, UserRecord>(context, &user_key(name), "user record")?.is_none() {
                write(context, user_key(name), "user record", &UserRecord::default())?;
            }
            done()
        }
        AuthChange::RemoveUser { name } => match context.remove(user_key(name))? {
            Some(_) => remove_tokens_of(context, name),
            None => not_found("user", name),
        },
        AuthChange::PutRole { name, grants } => {
            let record = RoleRecord { grants: grants.clone() };
            write(context, role_key(name), "role record", &record)?;
            done()
        }
        AuthChange::RemoveRole { name } => match context.remove(role_key(name))? {
            Some(_) => unbind_everywhere(context, name),
            None => not_found("role", name),
        },
        AuthChange::BindRole { user, role } => bind(context, user, role, true),
        AuthChange::UnbindRole { user, role } => bind(context, user, role, false),
        AuthChange::IssueToken {
            id,
            user,
            secret_sha256,
            expires_at_micros,
        } => {
            if read::<E, UserRecord>(context, &user_key(user), "user record")?.is_none() {
                return not_found("user", user);
            }
            if context.get(&token_key(*id))?.is_some() {
                return Ok(Err(Rejection::Invalid(format!("a token with id {id:032x} exists"))));
            }
            let record = TokenRecord {
                user: user.clone(),
                secret_sha256: *secret_sha256,
                expires_at_micros: *expires_at_micros,
                parent: None,
            };
            write(context, token_key(*id), "token record", &record)?;
            done()
        }
        AuthChange::IssueSessionToken {
            id,
            parent,
            parent_secret_sha256,
            secret_sha256,
            expires_at_micros,
        } => issue_session_token(
            context,
            *id,
            *parent,
            (parent_secret_sha256, secret_sha256),
            *expires_at_micros,
        ),
        AuthChange::PruneTokens { tokens_max } => prune_tokens(context, *tokens_max),
        AuthChange::RevokeToken { id } => match context.remove(token_key(*id))? {
            Some(_) => done(),
            None => not_found("token", &format!("{id:032x}")),
        },
    }
}

/// Every record key of `kind` the entry sees: the stored ones and those
/// earlier operations of this entry wrote. A scan of the auth records,
/// which removals of users and roles (rare, an admin's) may afford.
fn record_keys<E: Engine>(context: &ApplyContext<'_, E>, kind: &[u8]) -> Result<BTreeSet<Vec<u8>>, EngineError> {
    let prefix = record_key(kind, b"");
    let end = keys::prefix_end(&prefix).ok_or_else(|| EngineError::corrupt("auth record", "no end of its kind"))?;
    let mut found: BTreeSet<Vec<u8>> = context.written_between(&prefix, &end).into_iter().collect();
    for_each_stored(context.engine(), &prefix, Some(&end), |key, _| {
        found.insert(key.to_vec());
        Ok(())
    })?;
    Ok(found)
}

/// A removed user's tokens go with it, so a user created again under the
/// name starts with none.
fn remove_tokens_of<E: Engine>(context: &mut ApplyContext<'_, E>, user: &str) -> Applied {
    for key in record_keys(context, TOKEN)? {
        let token = read::<E, TokenRecord>(context, &key, "token record")?;
        if token.is_some_and(|token| token.user == user) {
            context.remove(key)?;
        }
    }
    done()
}

/// A removed role is taken from every user, so a role created again under
/// the name is held by nobody.
fn unbind_everywhere<E: Engine>(context: &mut ApplyContext<'_, E>, role: &str) -> Applied {
    for key in record_keys(context, USER)? {
        let Some(mut user) = read::<E, UserRecord>(context, &key, "user record")? else {
            continue;
        };
        if user.roles.remove(role) {
            write(context, key, "user record", &user)?;
        }
    }
    done()
}

/// Gives `role` to `user`, or takes it away.
fn bind<E: Engine>(context: &mut ApplyContext<'_, E>, user: &str, role: &str, bound: bool) -> Applied {
    let Some(mut record) = read::<E, UserRecord>(context, &user_key(user), "user record")? else {
        return not_found("user", user);
    };
    if bound {
        if context.get(&role_key(role))?.is_none() {
            return not_found("role", role);
        }
        if !record.roles.contains(role) && record.roles.len() >= ROLES_PER_USER_MAX {
            return Ok(Err(Rejection::Invalid(format!(
                "user {user:?} holds roles_per_user_max = {ROLES_PER_USER_MAX} roles"
            ))));
        }
        record.roles.insert(role.to_owned());
    } else {
        record.roles.remove(role);
    }
    write(context, user_key(user), "user record", &record)?;
    done()
}

/// A session token of the parent's user, if the parent is a live user
/// token whose secret the caller knows; every refusal reads the same, so
/// it tells a guesser nothing.
fn issue_session_token<E: Engine>(
    context: &mut ApplyContext<'_, E>,
    id: u128,
    parent_id: u128,
    (parent_secret_sha256, secret_sha256): (&[u8; 32], &[u8; 32]),
    expires_at_micros: u64,
) -> Applied {
    let now_micros = context.now_micros();
    let parent = read::<E, TokenRecord>(context, &token_key(parent_id), "token record")?;
    let usable = parent.filter(|parent| {
        parent.secret_sha256 == *parent_secret_sha256
            && parent.parent.is_none()
            && parent.expires_at_micros.is_none_or(|expires| expires > now_micros)
    });
    let Some(parent) = usable else {
        return not_found("token", &format!("{parent_id:032x}"));
    };
    if read::<E, UserRecord>(context, &user_key(&parent.user), "user record")?.is_none() {
        return not_found("token", &format!("{parent_id:032x}"));
    }
    if context.get(&token_key(id))?.is_some() {
        return Ok(Err(Rejection::Invalid(format!("a token with id {id:032x} exists"))));
    }
    let expires_at_micros = parent
        .expires_at_micros
        .map_or(expires_at_micros, |parent_expiry| parent_expiry.min(expires_at_micros));
    let record = TokenRecord {
        user: parent.user,
        secret_sha256: *secret_sha256,
        expires_at_micros: Some(expires_at_micros),
        parent: Some(parent_id),
    };
    write(context, token_key(id), "token record", &record)?;
    Ok(Ok(OperationResult::SessionTokenIssued { expires_at_micros }))
}

/// Removes up to `tokens_max` tokens that no longer work. Auth changes are
/// proposed alone, so the stored state is the whole state here.
fn prune_tokens<E: Engine>(context: &mut ApplyContext<'_, E>, tokens_max: u32) -> Applied {
    let state = crate::auth::AuthState::load(context.engine())?;
    let now_micros = context.now_micros();
    let dead: Vec<u128> = state
        .tokens
        .iter()
        .take(lode_types::limits::TOKENS_EXAMINED_PER_PRUNE_MAX)
        .filter(|(_, record)| state.check_alive(record, now_micros).is_err())
        .map(|(id, _)| *id)
        .take(tokens_max as usize)
        .collect();
    for id in dead {
        context.remove(token_key(id))?;
    }
    done()
}
