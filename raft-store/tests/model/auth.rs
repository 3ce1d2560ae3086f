//! The auth part of the model: users, roles, grants and tokens as a few
//! maps, changed the way the seed's rules say, and the decisions they imply
//! (which token names which user, which namespace it may read or write),
//! compared with the state machine's after every step.
//!
//! Removing a user ends its tokens for good, and removing a role unbinds it
//! from every user: a user or role created again under the same name starts
//! with nothing.

use std::collections::{BTreeMap, BTreeSet};

use lode_raft_store::auth::AuthState;
use lode_raft_store::command::{OperationResult, Rejection};
use lode_types::auth::{is_cluster_admin, permits, sha256, AuthChange, Grant, Permission};
use lode_types::Access;
use proptest::prelude::*;

const USERS: [&str; 2] = ["app", "ops"];
const ROLES: [&str; 2] = ["reader", "writer"];
const PREFIXES: [&str; 3] = ["", "a", "b"];
const PERMISSIONS: [Permission; 3] = [Permission::Read, Permission::Write, Permission::Admin];
/// Namespaces each decision is asked about: each prefix's, one under a
/// prefix, one under none but the empty prefix.
const ASKED: [&str; 4] = ["a", "b", "ab", "c"];

#[derive(Clone, Debug)]
pub enum AuthStep {
    PutUser(usize),
    RemoveUser(usize),
    PutRole {
        role: usize,
        grants: Vec<(usize, usize)>,
    },
    RemoveRole(usize),
    Bind {
        user: usize,
        role: usize,
    },
    Unbind {
        user: usize,
        role: usize,
    },
    Issue {
        user: usize,
        ttl: Option<u64>,
    },
    /// Revokes the n-th token ever issued (one past the end: an unknown id).
    Revoke(usize),
    IssueSession {
        parent: usize,
        knows_secret: bool,
        ttl: u64,
    },
    Prune {
        tokens_max: u32,
    },
}

pub fn auth_step() -> impl Strategy<Value = AuthStep> {
    let user = 0..USERS.len();
    let role = 0..ROLES.len();
    let grant = (0..PREFIXES.len(), 0..PERMISSIONS.len());
    prop_oneof![
        2 => user.clone().prop_map(AuthStep::PutUser),
        1 => user.clone().prop_map(AuthStep::RemoveUser),
        2 => (role.clone(), prop::collection::vec(grant, 0..3))
            .prop_map(|(role, grants)| AuthStep::PutRole { role, grants }),
        1 => role.clone().prop_map(AuthStep::RemoveRole),
        2 => (user.clone(), role.clone()).prop_map(|(user, role)| AuthStep::Bind { user, role }),
        1 => (user.clone(), role).prop_map(|(user, role)| AuthStep::Unbind { user, role }),
        2 => (user, prop::option::of(1u64..60)).prop_map(|(user, ttl)| AuthStep::Issue { user, ttl }),
        1 => (0usize..6).prop_map(AuthStep::Revoke),
        1 => (0usize..6, any::<bool>(), 1u64..60)
            .prop_map(|(parent, knows_secret, ttl)| AuthStep::IssueSession { parent, knows_secret, ttl }),
        1 => (1u32..3).prop_map(|tokens_max| AuthStep::Prune { tokens_max }),
    ]
}

/// The secret of the token with `id`: known to the test, never stored.
pub fn secret_of(id: u128) -> [u8; 32] {
    sha256(&id.to_be_bytes())
}

#[derive(Clone, Debug)]
struct ModelToken {
    user: String,
    expires_at: Option<u64>,
    parent: Option<u128>,
}

impl ModelToken {
    fn expired_at(&self, now: u64) -> bool {
        self.expires_at.is_some_and(|at| at <= now)
    }
}

#[derive(Default)]
pub struct AuthModel {
    users: BTreeMap<String, BTreeSet<String>>,
    roles: BTreeMap<String, Vec<Grant>>,
    tokens: BTreeMap<u128, ModelToken>,
    /// Every id ever issued, in order, for steps to pick from.
    issued: Vec<u128>,
    /// The index of the last change that may have taken a permission away.
    grants_revision: u64,
}

fn not_found() -> Result<OperationResult, Rejection> {
    Err(Rejection::NotFound(String::new()))
}

impl AuthModel {
    /// The change a step proposes; `id` is the step's fresh token id.
    pub fn change(&self, step: &AuthStep, id: u128, now: u64) -> AuthChange {
        let picked = |index: usize| self.issued.get(index).copied().unwrap_or(u128::MAX);
        match step.clone() {
            AuthStep::PutUser(user) => AuthChange::PutUser {
                name: USERS[user].to_owned(),
            },
            AuthStep::RemoveUser(user) => AuthChange::RemoveUser {
                name: USERS[user].to_owned(),
            },
            AuthStep::PutRole { role, grants } => AuthChange::PutRole {
                name: ROLES[role].to_owned(),
                grants: grants
                    .into_iter()
                    .map(|(prefix, permission)| Grant {
                        prefix: PREFIXES[prefix].to_owned(),
                        permission: PERMISSIONS[permission],
                    })
                    .collect(),
            },
            AuthStep::RemoveRole(role) => AuthChange::RemoveRole {
                name: ROLES[role].to_owned(),
            },
            AuthStep::Bind { user, role } => AuthChange::BindRole {
                user: USERS[user].to_owned(),
                role: ROLES[role].to_owned(),
            },
            AuthStep::Unbind { user, role } => AuthChange::UnbindRole {
                user: USERS[user].to_owned(),
                role: ROLES[role].to_owned(),
            },
            AuthStep::Issue { user, ttl } => AuthChange::IssueToken {
                id,
                user: USERS[user].to_owned(),
                secret_sha256: sha256(&secret_of(id)),
                expires_at_micros: ttl.map(|ttl| now + ttl),
            },
            AuthStep::Revoke(index) => AuthChange::RevokeToken { id: picked(index) },
            AuthStep::IssueSession {
                parent,
                knows_secret,
                ttl,
            } => {
                let parent = picked(parent);
                let proof = if knows_secret { secret_of(parent) } else { [0; 32] };
                AuthChange::IssueSessionToken {
                    id,
                    parent,
                    parent_secret_sha256: sha256(&proof),
                    secret_sha256: sha256(&secret_of(id)),
                    expires_at_micros: now + ttl,
                }
            }
            AuthStep::Prune { tokens_max } => AuthChange::PruneTokens { tokens_max },
        }
    }

    /// Applies a change at log index `index` the way the rules say, with
    /// the answer expected.
    pub fn apply(&mut self, change: &AuthChange, index: u64, now: u64) -> Result<OperationResult, Rejection> {
        let first_user = self.users.is_empty() && matches!(change, AuthChange::PutUser { .. });
        let answer = self.apply_change(change, now);
        let restricts = first_user
            || matches!(
                change,
                AuthChange::RemoveUser { .. }
                    | AuthChange::PutRole { .. }
                    | AuthChange::RemoveRole { .. }
                    | AuthChange::UnbindRole { .. }
                    | AuthChange::RevokeToken { .. }
            );
        if answer.is_ok() && restricts {
            self.grants_revision = index;
        }
        answer
    }

    fn apply_change(&mut self, change: &AuthChange, now: u64) -> Result<OperationResult, Rejection> {
        match change {
            AuthChange::PutUser { name } => {
                self.users.entry(name.clone()).or_default();
            }
            AuthChange::RemoveUser { name } => {
                if self.users.remove(name).is_none() {
                    return not_found();
                }
                self.tokens.retain(|_, token| token.user != *name);
            }
            AuthChange::PutRole { name, grants } => {
                self.roles.insert(name.clone(), grants.clone());
            }
            AuthChange::RemoveRole { name } => {
                if self.roles.remove(name).is_none() {
                    return not_found();
                }
                for roles in self.users.values_mut() {
                    roles.remove(name);
                }
            }
            AuthChange::BindRole { user, role } => {
                if !self.roles.contains_key(role) {
                    return not_found();
                }
                let Some(roles) = self.users.get_mut(user) else {
                    return not_found();
                };
                roles.insert(role.clone());
            }
            AuthChange::UnbindRole { user, role } => {
                let Some(roles) = self.users.get_mut(user) else {
                    return not_found();
                };
                roles.remove(role);
            }
            AuthChange::IssueToken {
                id,
                user,
                expires_at_micros,
                ..
            } => {
                if !self.users.contains_key(user) {
                    return not_found();
                }
                self.issue(*id, user.clone(), *expires_at_micros, None);
            }
            AuthChange::RevokeToken { id } => {
                if self.tokens.remove(id).is_none() {
                    return not_found();
                }
            }
            AuthChange::IssueSessionToken {
                id,
                parent,
                parent_secret_sha256,
                expires_at_micros,
                ..
            } => return self.issue_session(*id, *parent, parent_secret_sha256, *expires_at_micros, now),
            AuthChange::PruneTokens { tokens_max } => {
                let dead: Vec<u128> = self
                    .tokens
                    .keys()
                    .copied()
                    .filter(|id| !self.alive(*id, now))
                    .take(*tokens_max as usize)
                    .collect();
                for id in dead {
                    self.tokens.remove(&id);
                }
            }
        }
        Ok(OperationResult::AuthChanged)
    }

    fn issue(&mut self, id: u128, user: String, expires_at: Option<u64>, parent: Option<u128>) {
        self.tokens.insert(
            id,
            ModelToken {
                user,
                expires_at,
                parent,
            },
        );
        self.issued.push(id);
    }

    fn issue_session(
        &mut self,
        id: u128,
        parent_id: u128,
        proof_sha256: &[u8; 32],
        expires_at: u64,
        now: u64,
    ) -> Result<OperationResult, Rejection> {
        let parent = self.tokens.get(&parent_id).filter(|parent| {
            sha256(&secret_of(parent_id)) == *proof_sha256 && parent.parent.is_none() && !parent.expired_at(now)
        });
        let Some(parent) = parent.cloned() else {
            return not_found();
        };
        let expires_at = parent.expires_at.map_or(expires_at, |at| at.min(expires_at));
        self.issue(id, parent.user, Some(expires_at), Some(parent_id));
        Ok(OperationResult::SessionTokenIssued {
            expires_at_micros: expires_at,
        })
    }

    /// Whether token `id` works at `now`: it exists, has not expired, and
    /// neither has the token it was derived from.
    fn alive(&self, id: u128, now: u64) -> bool {
        let Some(token) = self.tokens.get(&id) else {
            return false;
        };
        let parent_alive = token
            .parent
            .is_none_or(|parent| self.tokens.get(&parent).is_some_and(|parent| !parent.expired_at(now)));
        !token.expired_at(now) && self.users.contains_key(&token.user) && parent_alive
    }

    /// Whether the user may do `access` on `namespace`: a grant of a role
    /// it holds covers the namespace at that level or above.
    fn may(&self, user: &str, namespace: &str, access: Access) -> bool {
        let needed = match access {
            Access::Read => 0,
            Access::Write => 1,
            Access::Admin => 2,
        };
        let rank = |permission: Permission| PERMISSIONS.iter().position(|held| *held == permission);
        self.grants_of(user)
            .any(|grant| rank(grant.permission) >= Some(needed) && namespace.starts_with(grant.prefix.as_str()))
    }

    /// The grants of the roles the user holds that exist.
    fn grants_of<'m>(&'m self, user: &str) -> impl Iterator<Item = &'m Grant> {
        self.users[user]
            .iter()
            .filter_map(|role| self.roles.get(role))
            .flatten()
    }

    /// Compares the stored auth state and every decision it implies with
    /// the model's.
    pub fn check(&self, state: &AuthState, now: u64, context: &str) {
        let users: BTreeMap<_, _> = state
            .users
            .iter()
            .map(|(name, record)| (name.clone(), record.roles.clone()))
            .collect();
        assert_eq!(users, self.users, "users {context}");
        let roles: BTreeMap<_, _> = state
            .roles
            .iter()
            .map(|(name, record)| (name.clone(), record.grants.clone()))
            .collect();
        assert_eq!(roles, self.roles, "roles {context}");
        let ids: Vec<_> = state.tokens.keys().collect();
        assert_eq!(ids, self.tokens.keys().collect::<Vec<_>>(), "tokens {context}");
        assert_eq!(
            state.grants_revision, self.grants_revision,
            "the grants revision {context}"
        );
        for &id in &self.issued {
            let named = state.user_of_token(id, &secret_of(id), now).ok();
            let expected = self.alive(id, now).then(|| self.tokens[&id].user.as_str());
            assert_eq!(named, expected, "the user token {id} names {context}");
            assert!(
                state.user_of_token(id, &[0; 32], now).is_err(),
                "token {id} works with a wrong secret {context}"
            );
            let Some(user) = expected else { continue };
            let grants = state.grants_of(user);
            for namespace in ASKED {
                for access in [Access::Read, Access::Write] {
                    assert_eq!(
                        permits(&grants, namespace, access),
                        self.may(user, namespace, access),
                        "{user} {access:?} {namespace} {context}"
                    );
                }
            }
            assert_eq!(
                is_cluster_admin(&grants),
                self.roles_hold_admin_on_everything(user),
                "{user} is an admin {context}"
            );
        }
    }

    /// Whether a role of the user grants `admin` on the empty prefix.
    fn roles_hold_admin_on_everything(&self, user: &str) -> bool {
        self.grants_of(user)
            .any(|grant| grant.prefix.is_empty() && grant.permission == Permission::Admin)
    }
}
