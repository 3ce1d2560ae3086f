//! The auth state as stored: users, roles and tokens as records of
//! `lode_types::auth::AUTH_NAMESPACE`, written only by the apply of
//! `Operation::Auth` (`apply/auth.rs`) and read whole by [`AuthState::load`]
//! into the view every member checks callers against.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use lode_types::auth::{constant_time_equal, sha256, Grant, AUTH_NAMESPACE};

use crate::engine::{Engine, Space};
use crate::entry::StoredEntry;
use crate::error::{decode, EngineError};
use crate::keys;

/// Auth records read per scan while loading the state.
const LOAD_PAGE_RECORDS: usize = 1024;

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserRecord {
    pub roles: BTreeSet<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoleRecord {
    pub grants: Vec<Grant>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenRecord {
    pub user: String,
    pub secret_sha256: [u8; 32],
    pub expires_at_micros: Option<u64>,
    /// The token a session token was derived from; it dies with it.
    pub parent: Option<u128>,
}

impl TokenRecord {
    fn expired_at(&self, now_micros: u64) -> bool {
        self.expires_at_micros.is_some_and(|expires| expires <= now_micros)
    }
}

/// The record of the grants revision: the log index of the last auth
/// change that may have taken a permission away.
const REVISION: &[u8] = b"revision\0";
pub(crate) const USER: &[u8] = b"user\0";
const ROLE: &[u8] = b"role\0";
pub(crate) const TOKEN: &[u8] = b"token\0";

/// The stored key of a record of `kind` (a `name` of nothing: the start
/// of every record of the kind).
pub(crate) fn record_key(kind: &[u8], name: &[u8]) -> Vec<u8> {
    let mut key = kind.to_vec();
    key.extend_from_slice(name);
    keys::entry_key(AUTH_NAMESPACE, &key)
}

pub fn user_key(name: &str) -> Vec<u8> {
    record_key(USER, name.as_bytes())
}

pub fn role_key(name: &str) -> Vec<u8> {
    record_key(ROLE, name.as_bytes())
}

pub fn token_key(id: u128) -> Vec<u8> {
    record_key(TOKEN, &id.to_be_bytes())
}

pub(crate) fn revision_key() -> Vec<u8> {
    record_key(REVISION, b"")
}

/// Why a token does not name a caller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenRefusal {
    /// No such token, a wrong secret, or one revoked.
    Unknown,
    Expired,
    /// Its user was removed.
    UserRemoved,
}

/// Visits every stored entry in `[start, end)`, a page of
/// `LOAD_PAGE_RECORDS` at a time.
pub(crate) fn for_each_stored<E: Engine>(
    engine: &E,
    start: &[u8],
    end: Option<&[u8]>,
    mut visit: impl FnMut(&[u8], &[u8]) -> Result<(), EngineError>,
) -> Result<(), EngineError> {
    let mut start = start.to_vec();
    loop {
        let page = engine.scan(Space::Entries, &start, end, LOAD_PAGE_RECORDS)?;
        for (stored_key, bytes) in &page {
            visit(stored_key, bytes)?;
        }
        match page.last() {
            Some((last, _)) if page.len() == LOAD_PAGE_RECORDS => {
                start = last.clone();
                start.push(0);
            }
            _ => return Ok(()),
        }
    }
}

/// Every user, role and token, as one member has applied them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AuthState {
    pub users: BTreeMap<String, UserRecord>,
    pub roles: BTreeMap<String, RoleRecord>,
    pub tokens: BTreeMap<u128, TokenRecord>,
    /// The log index of the last auth change that may have taken a
    /// permission away, as of (or before) the records above: a write
    /// checked against them carries it (`Command::V2`).
    pub grants_revision: u64,
}

impl AuthState {
    /// Reads every auth record of `engine`.
    pub fn load<E: Engine>(engine: &E) -> Result<Self, EngineError> {
        let prefix = keys::namespace_prefix(AUTH_NAMESPACE);
        let end = keys::prefix_end(&prefix);
        // The revision is read before the records: records newer than it
        // only make apply refuse a write that could have passed, never
        // pass one checked against grants older than it says.
        let grants_revision = match engine.get(Space::Entries, &revision_key())? {
            Some(bytes) => decode::<u64>("grants revision", &decode::<StoredEntry>("auth record", &bytes)?.value)?,
            None => 0,
        };
        let mut state = AuthState {
            grants_revision,
            ..AuthState::default()
        };
        for_each_stored(engine, &prefix, end.as_deref(), |stored_key, bytes| {
            let entry: StoredEntry = decode("auth record", bytes)?;
            state.add(&stored_key[prefix.len()..], &entry.value)
        })?;
        Ok(state)
    }

    fn add(&mut self, key: &[u8], value: &[u8]) -> Result<(), EngineError> {
        let name = |kind: &[u8]| {
            String::from_utf8(key[kind.len()..].to_vec())
                .map_err(|_| EngineError::corrupt("auth record", "a name that is not UTF-8"))
        };
        if key.starts_with(REVISION) {
            // Read first, by `load`.
        } else if key.starts_with(USER) {
            self.users.insert(name(USER)?, decode("user record", value)?);
        } else if key.starts_with(ROLE) {
            self.roles.insert(name(ROLE)?, decode("role record", value)?);
        } else if key.starts_with(TOKEN) {
            let id = key[TOKEN.len()..]
                .try_into()
                .map(u128::from_be_bytes)
                .map_err(|_| EngineError::corrupt("auth record", "a token id that is not 16 bytes"))?;
            self.tokens.insert(id, decode("token record", value)?);
        } else {
            return Err(EngineError::corrupt("auth record", "a key of no known kind"));
        }
        Ok(())
    }

    /// Whether authentication is on: a cluster with no user lets every
    /// caller do everything (a fresh `lode dev`, a cluster not bootstrapped
    /// with an admin token).
    pub fn is_enabled(&self) -> bool {
        !self.users.is_empty()
    }

    /// The grants of a user, through its roles.
    pub fn grants_of(&self, user: &str) -> Vec<Grant> {
        let Some(record) = self.users.get(user) else {
            return Vec::new();
        };
        record
            .roles
            .iter()
            .filter_map(|role| self.roles.get(role))
            .flat_map(|role| role.grants.iter().cloned())
            .collect()
    }

    /// The user a token names at `now_micros`, if the secret's SHA-256 is
    /// the stored one (compared in constant time).
    pub fn user_of_token(&self, id: u128, secret: &[u8; 32], now_micros: u64) -> Result<&str, TokenRefusal> {
        let record = self.tokens.get(&id).ok_or(TokenRefusal::Unknown)?;
        if !constant_time_equal(&sha256(secret), &record.secret_sha256) {
            return Err(TokenRefusal::Unknown);
        }
        self.check_alive(record, now_micros)?;
        Ok(&record.user)
    }

    /// Whether a stored token still works: unexpired, its user present and
    /// its parent (for a session token) alive.
    pub fn check_alive(&self, record: &TokenRecord, now_micros: u64) -> Result<(), TokenRefusal> {
        if record.expired_at(now_micros) {
            return Err(TokenRefusal::Expired);
        }
        if !self.users.contains_key(&record.user) {
            return Err(TokenRefusal::UserRemoved);
        }
        if let Some(parent) = record.parent {
            let parent = self.tokens.get(&parent).ok_or(TokenRefusal::Unknown)?;
            if parent.expired_at(now_micros) {
                return Err(TokenRefusal::Expired);
            }
        }
        Ok(())
    }

    /// When token `id` stops working by itself: its own expiry or its
    /// parent's, whichever comes first.
    pub fn token_expiry(&self, id: u128) -> Option<u64> {
        let record = self.tokens.get(&id)?;
        let parent = record
            .parent
            .and_then(|parent| self.tokens.get(&parent))
            .and_then(|parent| parent.expires_at_micros);
        match (record.expires_at_micros, parent) {
            (Some(own), Some(parent)) => Some(own.min(parent)),
            (own, parent) => own.or(parent),
        }
    }

    /// Whether some token no longer works and waits to be pruned.
    pub fn has_dead_tokens(&self, now_micros: u64) -> bool {
        self.tokens
            .values()
            .any(|record| self.check_alive(record, now_micros).is_err())
    }
}
