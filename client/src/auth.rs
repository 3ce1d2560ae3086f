//! Managing users, roles, grants and tokens (`lode_types::auth`); every
//! call needs `admin` on every namespace once authentication is on.

use std::time::Duration;

use lode_types::auth::{sha256, AuthChange, Grant, TokenParts};

use crate::protocol::{AccessToken, Operation, OperationResult};
use crate::sdk::{duration_micros, Client};
use crate::LodeError;

/// The auth state's changes, through one client.
#[derive(Clone, Debug)]
pub struct Auth {
    client: Client,
}

/// A token just issued: its text, shown to its holder once, and its id,
/// which revokes it.
#[derive(Clone, Debug)]
pub struct IssuedToken {
    pub id: u128,
    pub token: AccessToken,
}

/// A fresh token: 128 random bits of id (never the members' 0), 256 of
/// secret.
pub fn new_token() -> TokenParts {
    let mut secret = [0u8; 32];
    rand::Rng::fill(&mut rand::thread_rng(), &mut secret);
    let id = loop {
        let id: u128 = rand::random();
        if id != 0 {
            break id;
        }
    };
    TokenParts { id, secret }
}

impl Auth {
    pub(crate) fn new(client: Client) -> Self {
        Self { client }
    }

    async fn change(&self, change: AuthChange) -> Result<(), LodeError> {
        change.validate().map_err(LodeError::Invalid)?;
        match self.client.write_one(Operation::Auth { change }).await? {
            OperationResult::AuthChanged => Ok(()),
            other => Err(crate::error::unexpected("an auth change", &other)),
        }
    }

    pub async fn put_user(&self, name: &str) -> Result<(), LodeError> {
        self.change(AuthChange::PutUser { name: name.to_owned() }).await
    }

    pub async fn remove_user(&self, name: &str) -> Result<(), LodeError> {
        self.change(AuthChange::RemoveUser { name: name.to_owned() }).await
    }

    /// Creates the role or replaces its grants.
    pub async fn put_role(&self, name: &str, grants: Vec<Grant>) -> Result<(), LodeError> {
        self.change(AuthChange::PutRole {
            name: name.to_owned(),
            grants,
        })
        .await
    }

    pub async fn remove_role(&self, name: &str) -> Result<(), LodeError> {
        self.change(AuthChange::RemoveRole { name: name.to_owned() }).await
    }

    pub async fn bind_role(&self, user: &str, role: &str) -> Result<(), LodeError> {
        let (user, role) = (user.to_owned(), role.to_owned());
        self.change(AuthChange::BindRole { user, role }).await
    }

    pub async fn unbind_role(&self, user: &str, role: &str) -> Result<(), LodeError> {
        let (user, role) = (user.to_owned(), role.to_owned());
        self.change(AuthChange::UnbindRole { user, role }).await
    }

    /// Issues a token of `user`, valid for `ttl` (`None`: until revoked).
    /// The secret is made here and only its SHA-256 is sent.
    pub async fn issue_token(&self, user: &str, ttl: Option<Duration>) -> Result<IssuedToken, LodeError> {
        let parts = new_token();
        let secret_sha256 = sha256(&parts.secret);
        let expires_at_micros = ttl.map(|ttl| crate::facade::now_micros().saturating_add(duration_micros(ttl)));
        self.change(AuthChange::IssueToken {
            id: parts.id,
            user: user.to_owned(),
            secret_sha256,
            expires_at_micros,
        })
        .await?;
        Ok(IssuedToken {
            id: parts.id,
            token: AccessToken(parts.to_text()),
        })
    }

    /// Issues a session token derived from `parent` (whose secret proves
    /// the caller holds it), valid for `ttl` or until the parent expires or
    /// goes; answers it and when it expires (micros since the epoch).
    pub async fn issue_session_token(
        &self,
        parent: &TokenParts,
        ttl: Duration,
    ) -> Result<(IssuedToken, u64), LodeError> {
        let token = new_token();
        let change = AuthChange::IssueSessionToken {
            id: token.id,
            parent: parent.id,
            parent_secret_sha256: sha256(&parent.secret),
            secret_sha256: sha256(&token.secret),
            expires_at_micros: crate::facade::now_micros().saturating_add(duration_micros(ttl)),
        };
        change.validate().map_err(LodeError::Invalid)?;
        match self.client.write_one(Operation::Auth { change }).await? {
            OperationResult::SessionTokenIssued { expires_at_micros } => Ok((
                IssuedToken {
                    id: token.id,
                    token: AccessToken(token.to_text()),
                },
                expires_at_micros,
            )),
            other => Err(crate::error::unexpected("a session token", &other)),
        }
    }

    pub async fn revoke_token(&self, id: u128) -> Result<(), LodeError> {
        self.change(AuthChange::RevokeToken { id }).await
    }
}

impl Client {
    /// Users, roles, grants and tokens.
    pub fn auth(&self) -> Auth {
        Auth::new(self.clone())
    }
}
