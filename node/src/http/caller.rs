//! Who calls the HTTP port, and the clients that act for them.
//!
//! A caller presents `Authorization: Bearer <token>`: a user's token
//! (`lode_…`) makes the gateway act as that user, through clients that
//! name the user to the node, which checks every call against the user's
//! grants as it does on the client port; the port's shared access token
//! (`--access-token`) acts with every grant, and only while the cluster has
//! no user. The shared token is compared in constant time and never
//! appears in `Debug` output, logs or answers.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::http::{header, HeaderMap, StatusCode};
use lode_client::protocol::AccessToken;
use lode_client::{Client, ClientOptions};
use lode_types::auth::constant_time_equal;

use super::kv_connect::Refusal;

/// Users' clients kept at once; past it the oldest ones are dropped (and
/// dialed again when their user calls).
const USER_CLIENTS_MAX: usize = 1024;

/// What the HTTP port asks its node about callers.
pub trait AuthView: Send + Sync {
    /// Whether the cluster has users (authentication on); a state that
    /// cannot be read counts as having them, so the port fails closed.
    fn users_exist(&self) -> bool;
    /// Whether `token` works now and its user holds `role` or is a cluster
    /// admin.
    fn holds_role(&self, token: &AccessToken, role: &str) -> bool;
}

impl std::fmt::Debug for dyn AuthView {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str("AuthView")
    }
}

/// A port whose node never has users (tests, embedders without auth).
pub(super) struct NoUsers;

impl AuthView for NoUsers {
    fn users_exist(&self) -> bool {
        false
    }

    fn holds_role(&self, _token: &AccessToken, _role: &str) -> bool {
        true
    }
}

/// A request's caller, put in its extensions by the port's token check.
#[derive(Clone, Debug)]
pub enum Caller {
    /// The shared access token, on a cluster without users.
    Shared,
    User(AccessToken),
}

/// The clients a caller's requests go through.
pub struct Clients {
    /// Writes and strong reads: follows the leader.
    pub cluster: Client,
    /// Eventual reads, watches, triggers: this member only.
    pub local: Client,
}

/// The gateway's own clients and its users'.
pub struct Callers {
    shared_token: Option<AccessToken>,
    auth: Arc<dyn AuthView>,
    own: Arc<Clients>,
    options: ClientOptions,
    node_address: String,
    users: Mutex<UserClients>,
}

/// Users' clients by token, and the tokens oldest first.
#[derive(Default)]
struct UserClients {
    by_token: HashMap<String, Arc<Clients>>,
    order: Vec<String>,
}

fn unauthorized(message: &str) -> Refusal {
    Refusal::new(StatusCode::UNAUTHORIZED, format!("unauthorized: {message}"))
}

impl Callers {
    pub fn new(
        node_address: String,
        options: ClientOptions,
        shared_token: Option<AccessToken>,
        auth: Arc<dyn AuthView>,
    ) -> Result<Self, lode_client::LodeError> {
        let own = Arc::new(Clients {
            cluster: Client::with_options([node_address.clone()], options.clone())?,
            local: Client::with_options([node_address.clone()], options.clone())?,
        });
        Ok(Self {
            shared_token,
            auth,
            own,
            options,
            node_address,
            users: Mutex::new(UserClients::default()),
        })
    }

    /// The shared access token, if the port has one.
    pub fn shared_token(&self) -> Option<AccessToken> {
        self.shared_token.clone()
    }

    /// The gateway's own clients (health and metrics).
    pub fn own(&self) -> &Clients {
        &self.own
    }

    /// Names the caller of a request from its bearer token, before any body
    /// is read. A user's token is checked by the node at its first call.
    pub fn identify(&self, headers: &HeaderMap) -> Result<Caller, Refusal> {
        let presented = headers
            .get(header::AUTHORIZATION)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.strip_prefix("Bearer "))
            .ok_or_else(|| unauthorized("send a token as `Authorization: Bearer <token>`"))?;
        let users = self.auth.users_exist();
        if users && presented.starts_with("lode_") {
            return Ok(Caller::User(AccessToken(presented.to_owned())));
        }
        match &self.shared_token {
            Some(shared) if constant_time_equal(presented.as_bytes(), shared.0.as_bytes()) => {
                if users {
                    Err(unauthorized(
                        "the shared access token is refused once the cluster has users; present a user's token",
                    ))
                } else {
                    Ok(Caller::Shared)
                }
            }
            _ => Err(unauthorized("the token is not valid")),
        }
    }

    /// Whether `caller` may read `/metrics` when it needs `role`: the shared
    /// token may (it works only while there are no users), a user's token
    /// if its user holds the role.
    pub fn holds_role(&self, caller: &Caller, role: &str) -> bool {
        match caller {
            Caller::Shared => true,
            Caller::User(token) => self.auth.holds_role(token, role),
        }
    }

    /// The clients that act for `caller`.
    pub fn clients(&self, caller: &Caller) -> Result<Arc<Clients>, lode_client::LodeError> {
        let token = match caller {
            Caller::Shared => return Ok(self.own.clone()),
            Caller::User(token) => token,
        };
        let mut users = self.users.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(clients) = users.by_token.get(&token.0) {
            return Ok(clients.clone());
        }
        let options = ClientOptions {
            token: Some(token.clone()),
            ..self.options.clone()
        };
        let clients = Arc::new(Clients {
            cluster: Client::with_options([self.node_address.clone()], options.clone())?,
            local: Client::with_options([self.node_address.clone()], options)?,
        });
        if users.order.len() >= USER_CLIENTS_MAX {
            let oldest = users.order.remove(0);
            users.by_token.remove(&oldest);
        }
        users.order.push(token.0.clone());
        users.by_token.insert(token.0.clone(), clients.clone());
        Ok(clients)
    }
}
