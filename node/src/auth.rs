//! Who is calling, and what they may do: a connection names its caller by
//! a token (`authenticate`), and every call is checked against the grants
//! the replicated auth state gives that caller, before anything is
//! proposed or read. A cluster with no user lets every caller do
//! everything; the peer port is the members' own (mutually authenticated
//! when TLS is on) and is trusted, and so is the member's own HTTP gateway,
//! which names itself by a secret only this process knows. On the client
//! port a certificate signed by the cluster CA names the user of its
//! common name, as etcd does.

use std::sync::{Arc, Mutex, RwLock};

use lode_client::protocol::{AccessToken, ChangeEvent, Query};
use lode_client::LodeError;
use lode_raft_store::auth::{AuthState, TokenRefusal};
use lode_raft_store::injected_bugs::{self, InjectedBug};
use lode_raft_store::{SelectedEngine, StateReader};
use lode_types::auth::{constant_time_equal, is_cluster_admin, permits, Grant, TokenParts};
use lode_types::{Access, Operation};

/// The id a member's own gateway presents; no issued token has it.
pub const MEMBER_TOKEN_ID: u128 = 0;

/// How a connection's caller was named.
#[derive(Clone, Debug)]
pub enum Credential {
    Token(TokenParts),
    /// A client certificate, signed by the cluster CA, whose common name
    /// is this user's.
    Certificate(String),
    /// The member itself (its HTTP gateway, in this process).
    Member,
}

/// The caller of one connection: how it was named (by `authenticate`, or
/// its certificate), and the last decision for it, kept while the auth
/// state it was made from is current and its token unexpired, so a call
/// costs no hash and no copy of grants.
#[derive(Debug, Default)]
pub struct Caller {
    credential: Option<Credential>,
    decided: Option<Decided>,
}

#[derive(Debug)]
struct Decided {
    auth_version: u64,
    /// When the token stops working by itself (its own or its parent's
    /// expiry), if it does.
    valid_until_micros: Option<u64>,
    allowed: Allowed,
}

impl Caller {
    pub fn named(credential: Option<Credential>) -> Self {
        Self {
            credential,
            decided: None,
        }
    }
}

pub type CallerSlot = Arc<Mutex<Caller>>;

/// What a call may touch: everything, or what the grants allow as of
/// grants revision `revision` (a write checked so carries it, and apply
/// refuses it if a permission was taken away since).
#[derive(Clone, Debug)]
pub enum Allowed {
    /// The member itself, or a peer.
    Everything,
    /// No user exists yet: everything, but a write binds to that (the
    /// first user moves the grants revision).
    Open {
        revision: u64,
    },
    Grants {
        grants: Arc<Vec<Grant>>,
        revision: u64,
    },
}

/// The auth state as this member has applied it, read again whenever the
/// state machine says it may have changed.
pub struct AuthCache {
    reader: StateReader<SelectedEngine>,
    loaded: RwLock<Option<(u64, Arc<AuthState>)>>,
    /// The secret of [`MEMBER_TOKEN_ID`], made at start.
    member_secret: [u8; 32],
    /// The first admin's token this member was started with: until a user
    /// exists, only it is let in, so no one else can create the first
    /// user before the bootstrap admin applies.
    bootstrap: Option<TokenParts>,
}

fn storage(error: lode_raft_store::EngineError) -> LodeError {
    tracing::error!(%error, "reading the auth state failed");
    LodeError::Unavailable("the auth state cannot be read".to_owned())
}

impl AuthCache {
    pub fn new(reader: StateReader<SelectedEngine>, bootstrap: Option<TokenParts>) -> Self {
        let mut member_secret = [0u8; 32];
        rand::Rng::fill(&mut rand::thread_rng(), &mut member_secret);
        Self {
            reader,
            loaded: RwLock::new(None),
            member_secret,
            bootstrap,
        }
    }

    /// Whether `parts` may call while no user exists: any token, unless
    /// the member holds a bootstrap token, then only that one.
    fn lets_in_before_users(&self, parts: &TokenParts) -> bool {
        self.bootstrap
            .as_ref()
            .is_none_or(|bootstrap| bootstrap.id == parts.id && constant_time_equal(&bootstrap.secret, &parts.secret))
    }

    /// The token this member's own gateway presents.
    pub fn member_token(&self) -> AccessToken {
        AccessToken(
            TokenParts {
                id: MEMBER_TOKEN_ID,
                secret: self.member_secret,
            }
            .to_text(),
        )
    }

    pub fn state(&self) -> Result<Arc<AuthState>, LodeError> {
        let version = self.reader.auth_version();
        {
            let loaded = self.loaded.read().unwrap_or_else(|poisoned| poisoned.into_inner());
            if let Some((seen, state)) = loaded.as_ref() {
                if *seen == version {
                    return Ok(state.clone());
                }
            }
        }
        let state = Arc::new(self.reader.auth_state().map_err(storage)?);
        let mut loaded = self.loaded.write().unwrap_or_else(|poisoned| poisoned.into_inner());
        *loaded = Some((version, state.clone()));
        Ok(state)
    }

    /// Checks `token` and names the connection's caller by it; answers the
    /// user (empty for the member itself, or when authentication is off).
    pub fn authenticate(&self, slot: &CallerSlot, token: &AccessToken, now_micros: u64) -> Result<String, LodeError> {
        let parts = TokenParts::parse(&token.0).map_err(LodeError::Invalid)?;
        let (credential, user) = if parts.id == MEMBER_TOKEN_ID {
            if !constant_time_equal(&parts.secret, &self.member_secret) {
                return Err(LodeError::Unauthorized);
            }
            (Credential::Member, String::new())
        } else {
            let state = self.state()?;
            let user = if state.is_enabled() {
                user_of(&state, &parts, now_micros)?.to_owned()
            } else if self.lets_in_before_users(&parts) {
                String::new()
            } else {
                return Err(LodeError::Unauthorized);
            };
            (Credential::Token(parts), user)
        };
        *slot.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = Caller::named(Some(credential));
        Ok(user)
    }

    /// What the caller of `slot` may touch now.
    pub fn allowed(&self, slot: &CallerSlot, now_micros: u64) -> Result<Allowed, LodeError> {
        // Read before the state: a state newer than the version only makes
        // the next call decide again.
        let auth_version = self.reader.auth_version();
        let mut caller = slot.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(decided) = &caller.decided {
            let unexpired = decided.valid_until_micros.is_none_or(|until| now_micros < until);
            if decided.auth_version == auth_version && unexpired {
                return Ok(decided.allowed.clone());
            }
        }
        let (allowed, valid_until_micros) = self.decide(caller.credential.clone(), now_micros)?;
        caller.decided = Some(Decided {
            auth_version,
            valid_until_micros,
            allowed: allowed.clone(),
        });
        Ok(allowed)
    }

    /// What `credential` may touch at `now_micros`, and until when at most.
    fn decide(&self, credential: Option<Credential>, now_micros: u64) -> Result<(Allowed, Option<u64>), LodeError> {
        if matches!(credential, Some(Credential::Member)) {
            return Ok((Allowed::Everything, None));
        }
        let state = self.state()?;
        if !state.is_enabled() {
            let before_users = Allowed::Open {
                revision: state.grants_revision,
            };
            return match (&self.bootstrap, credential) {
                (None, _) => Ok((before_users, None)),
                (Some(_), Some(Credential::Token(parts))) if self.lets_in_before_users(&parts) => {
                    Ok((before_users, None))
                }
                (Some(_), _) => Err(LodeError::Unauthorized),
            };
        }
        let grants_of = |user: &str| Allowed::Grants {
            grants: Arc::new(state.grants_of(user)),
            revision: state.grants_revision,
        };
        match credential {
            Some(Credential::Token(parts)) => {
                let user = user_of(&state, &parts, now_micros)?;
                Ok((grants_of(user), state.token_expiry(parts.id)))
            }
            Some(Credential::Certificate(user)) if state.users.contains_key(&user) => Ok((grants_of(&user), None)),
            _ => Err(LodeError::Unauthorized),
        }
    }
}

impl AuthCache {
    /// Whether `token` works now and its user holds `role` or is a cluster
    /// admin; on a cluster without users, any well-formed token does.
    pub fn token_holds_role(&self, token: &AccessToken, role: &str, now_micros: u64) -> bool {
        let Ok(parts) = TokenParts::parse(&token.0) else {
            return false;
        };
        let Ok(state) = self.state() else {
            return false;
        };
        if !state.is_enabled() {
            return true;
        }
        let Ok(user) = user_of(&state, &parts, now_micros) else {
            return false;
        };
        state.users.get(user).is_some_and(|record| record.roles.contains(role))
            || is_cluster_admin(&state.grants_of(user))
    }
}

fn user_of<'s>(state: &'s AuthState, parts: &TokenParts, now_micros: u64) -> Result<&'s str, LodeError> {
    state
        .user_of_token(parts.id, &parts.secret, now_micros)
        .map_err(|refusal| {
            let reason = match refusal {
                TokenRefusal::Unknown => "unknown or revoked",
                TokenRefusal::Expired => "expired",
                TokenRefusal::UserRemoved => "of a removed user",
            };
            // Debug, not info: a client that keeps a revoked token would
            // otherwise log a line per call.
            tracing::debug!(token = format!("{:032x}", parts.id), reason, "a token was refused");
            LodeError::Unauthorized
        })
}

fn access_name(access: Access) -> &'static str {
    match access {
        Access::Read => "read",
        Access::Write => "write",
        Access::Admin => "admin",
    }
}

fn shown(namespace: &str) -> String {
    namespace.replace('\0', "\\0")
}

impl Allowed {
    /// `admin` access is to the auth records only, and managing them is
    /// managing the cluster: it needs `admin` on every namespace, never a
    /// grant on the auth namespace alone.
    fn permits(&self, namespace: &str, access: Access) -> bool {
        match self {
            Allowed::Everything | Allowed::Open { .. } => true,
            Allowed::Grants { grants, .. } if access == Access::Admin => is_cluster_admin(grants),
            Allowed::Grants { grants, .. } => permits(grants, namespace, access),
        }
    }

    /// The grants revision a write checked by these grants carries.
    pub fn grants_revision(&self) -> Option<u64> {
        match self {
            Allowed::Everything => None,
            Allowed::Open { revision } | Allowed::Grants { revision, .. } => Some(*revision),
        }
    }

    /// Every operation of a write, each namespace it reads or writes: the
    /// first one not allowed refuses the whole write.
    pub fn check_write(&self, operations: &[Operation]) -> Result<(), LodeError> {
        for (index, operation) in operations.iter().enumerate() {
            let mut touched_all = operation.namespaces();
            if matches!(operation, Operation::Copy { .. })
                && injected_bugs::enabled(InjectedBug::SkipCopyDestinationCheck)
            {
                touched_all.truncate(1);
            }
            for touched in touched_all {
                if !self.permits(&touched.namespace, touched.access) {
                    return Err(LodeError::Forbidden {
                        operation: format!("operation {index} ({})", operation.name()),
                        namespace: shown(&touched.namespace),
                        access: access_name(touched.access).to_owned(),
                    });
                }
            }
        }
        Ok(())
    }

    /// A read of one namespace needs `read` on it; listings and the change
    /// feed are filtered instead (`keeps_namespace`).
    pub fn check_query(&self, query: &Query) -> Result<(), LodeError> {
        let session_namespace;
        let namespace = match query {
            Query::Get { namespace, .. }
            | Query::Exists { namespace, .. }
            | Query::GetMany { namespace, .. }
            | Query::Scan { namespace, .. }
            | Query::Lease { namespace, .. }
            | Query::Ranges { namespace, .. } => namespace.as_str(),
            Query::NextDelivery { .. } => lode_types::QUEUE_NAMESPACE,
            Query::SessionKeys { session, .. } => {
                session_namespace = session.grant_namespace();
                session_namespace.as_str()
            }
            Query::Namespaces { .. } | Query::Changes { .. } | Query::StateEvents { .. } => return Ok(()),
        };
        if self.permits(namespace, Access::Read) {
            return Ok(());
        }
        Err(LodeError::Forbidden {
            operation: format!("a {} read", query.name()),
            namespace: shown(namespace),
            access: "read".to_owned(),
        })
    }

    /// Whether a listed namespace, a session's key or a change event of
    /// `namespace` may be shown.
    pub fn keeps_namespace(&self, namespace: &str) -> bool {
        self.permits(namespace, Access::Read)
    }

    pub fn keeps_event(&self, event: &ChangeEvent) -> bool {
        self.keeps_namespace(&event.namespace)
    }

    pub fn is_admin(&self) -> bool {
        match self {
            Allowed::Everything | Allowed::Open { .. } => true,
            Allowed::Grants { grants, .. } => is_cluster_admin(grants),
        }
    }

    /// Membership changes and auth management need `admin` on every
    /// namespace.
    pub fn require_admin(&self, call: &str) -> Result<(), LodeError> {
        if self.is_admin() {
            return Ok(());
        }
        Err(LodeError::Forbidden {
            operation: call.to_owned(),
            namespace: String::new(),
            access: "admin".to_owned(),
        })
    }
}
