//! Authentication under faults: a grantor (the bootstrap admin) gives the
//! tenant's role `write` on the guarded namespace and takes it away again,
//! through the log like any other command, while the tenant keeps writing
//! there, directly and by copies from a namespace it may always write.
//! Each acknowledged role change is recorded with its log index, each
//! tenant write with how it ended; `checkers/permissions.rs` judges them.

use std::cell::Cell;
use std::rc::Rc;
use std::time::Duration;

use lode_client::protocol::{Operation, WriteRequest};
use lode_client::{Client, ClientOptions};
use lode_types::auth::{sha256, AuthChange, Grant, Permission, TokenParts};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::history::{self, RoleChange, SharedHistory, TenantOutcome, TenantWrite};
use crate::workload::{client_options, is_definite_refusal};

/// The namespace the tenant may write only while its role says so.
pub const GUARDED_NAMESPACE: &str = "guarded";
/// The namespace the tenant may always write (and copy from).
pub const OPEN_NAMESPACE: &str = "open";
const TENANT: &str = "tenant";
/// The key of the open namespace the tenant copies from.
const SOURCE_KEY: &[u8] = b"source";

/// The tenant's token, issued by the grantor with this id and secret.
pub fn tenant_token() -> TokenParts {
    TokenParts {
        id: 2,
        secret: [0x7e; 32],
    }
}

/// What the grantor and the tenant do.
#[derive(Clone, Debug)]
pub struct AuthPlan {
    pub grantor: usize,
    pub tenant: usize,
    pub seed: u64,
    pub until: Duration,
}

fn auth_write(changes: Vec<AuthChange>) -> WriteRequest {
    WriteRequest {
        op_id: lode_client::sdk::new_op_id(),
        operations: changes.into_iter().map(|change| Operation::Auth { change }).collect(),
    }
}

fn tenant_grants(writes_guarded: bool) -> Vec<Grant> {
    let write = |prefix: &str| Grant {
        prefix: prefix.to_owned(),
        permission: Permission::Write,
    };
    let mut grants = vec![write(OPEN_NAMESPACE)];
    if writes_guarded {
        grants.push(write(GUARDED_NAMESPACE));
    }
    grants
}

/// Sends `request` (one op id) until it is answered; `None` if it was
/// refused for good.
async fn until_answered(client: &Client, request: &WriteRequest, history: &SharedHistory, actor: usize) -> Option<u64> {
    loop {
        match client.write(request.clone()).await {
            Ok(response) => return Some(response.position),
            Err(error) if is_definite_refusal(&error) || error.is_forbidden() => {
                history::answered(history, actor, format!("refused: {error}"));
                return None;
            }
            Err(error) => history::answered(history, actor, format!("retrying: {error}")),
        }
    }
}

/// The bootstrap admin: waits for itself to exist, sets the tenant up,
/// then turns the tenant's `write:guarded` on and off until `plan.until`.
pub async fn run_grantor(plan: AuthPlan, endpoints: Vec<String>, history: SharedHistory, ready: Rc<Cell<bool>>) {
    let mut random = StdRng::seed_from_u64(plan.seed);
    let Ok(client) = Client::with_options(endpoints, client_options()) else {
        panic!("client options are valid");
    };
    // Binding root to its own role works once the bootstrap admin applied,
    // and changes nothing.
    history::calling(&history, plan.grantor, "wait for the bootstrap admin");
    let root = || AuthChange::BindRole {
        user: "root".to_owned(),
        role: "root".to_owned(),
    };
    while until_answered(&client, &auth_write(vec![root()]), &history, plan.grantor)
        .await
        .is_none()
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let token = tenant_token();
    let setup = auth_write(vec![
        AuthChange::PutUser {
            name: TENANT.to_owned(),
        },
        AuthChange::PutRole {
            name: TENANT.to_owned(),
            grants: tenant_grants(false),
        },
        AuthChange::BindRole {
            user: TENANT.to_owned(),
            role: TENANT.to_owned(),
        },
        AuthChange::IssueToken {
            id: token.id,
            user: TENANT.to_owned(),
            secret_sha256: sha256(&token.secret),
            expires_at_micros: None,
        },
    ]);
    history::calling(&history, plan.grantor, "set up the tenant");
    let Some(index) = until_answered(&client, &setup, &history, plan.grantor).await else {
        panic!("the tenant's setup is well-formed and the grantor an admin");
    };
    record(&history, plan.grantor, index, false);
    ready.set(true);
    let mut writes_guarded = false;
    while crate::now() < plan.until {
        tokio::time::sleep(Duration::from_millis(random.gen_range(150..900))).await;
        writes_guarded = !writes_guarded;
        let change = auth_write(vec![AuthChange::PutRole {
            name: TENANT.to_owned(),
            grants: tenant_grants(writes_guarded),
        }]);
        history::calling(
            &history,
            plan.grantor,
            format!("tenant writes guarded: {writes_guarded}"),
        );
        match until_answered(&client, &change, &history, plan.grantor).await {
            Some(index) => record(&history, plan.grantor, index, writes_guarded),
            None => panic!("a role change is well-formed and the grantor an admin"),
        }
    }
}

fn record(history: &SharedHistory, grantor: usize, index: u64, writes_guarded: bool) {
    history
        .borrow_mut()
        .role_changes
        .push(RoleChange { index, writes_guarded });
    history::answered(history, grantor, format!("role changed at {index}"));
}

/// The tenant: once set up, writes the guarded namespace (a set, or a copy
/// from the open one) whether or not it may, until `plan.until`.
pub async fn run_tenant(plan: AuthPlan, endpoints: Vec<String>, history: SharedHistory, ready: Rc<Cell<bool>>) {
    let mut random = StdRng::seed_from_u64(plan.seed ^ 0x7e7e);
    while !ready.get() {
        if crate::now() > plan.until {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let options = ClientOptions {
        token: Some(lode_client::protocol::AccessToken(tenant_token().to_text())),
        ..client_options()
    };
    let Ok(client) = Client::with_options(endpoints, options) else {
        panic!("client options are valid");
    };
    let mut written = 0u64;
    while crate::now() < plan.until {
        written += 1;
        let value = format!("t{written}");
        let copy = random.gen_bool(0.5);
        if copy {
            let source = write(OPEN_NAMESPACE, SOURCE_KEY, &value);
            history::calling(&history, plan.tenant, format!("set the copy source to {value}"));
            if client.write(source).await.is_err() {
                continue;
            }
        }
        let key = format!("k{}", random.gen_range(0..3)).into_bytes();
        let request = if copy {
            WriteRequest {
                op_id: lode_client::sdk::new_op_id(),
                operations: vec![Operation::Copy {
                    namespace: OPEN_NAMESPACE.to_owned(),
                    key: SOURCE_KEY.to_vec(),
                    to_namespace: GUARDED_NAMESPACE.to_owned(),
                    to_key: key,
                    remove_source: false,
                }],
            }
        } else {
            write(GUARDED_NAMESPACE, &key, &value)
        };
        history::calling(
            &history,
            plan.tenant,
            format!("write {value} to guarded (copy: {copy})"),
        );
        let outcome = match client.write(request).await {
            Ok(response) => TenantOutcome::Applied {
                index: response.position,
            },
            Err(error) if error.is_forbidden() => TenantOutcome::Forbidden,
            Err(error) if is_definite_refusal(&error) => TenantOutcome::Refused,
            Err(_) => TenantOutcome::Unknown,
        };
        history::answered(&history, plan.tenant, format!("{outcome:?}"));
        history
            .borrow_mut()
            .tenant_writes
            .push(TenantWrite { value, copy, outcome });
        tokio::time::sleep(Duration::from_millis(random.gen_range(10..60))).await;
    }
}

fn write(namespace: &str, key: &[u8], value: &str) -> WriteRequest {
    WriteRequest {
        op_id: lode_client::sdk::new_op_id(),
        operations: vec![Operation::Set {
            namespace: namespace.to_owned(),
            key: key.to_vec(),
            value: value.as_bytes().to_vec(),
            encoding: Default::default(),
            expires_at_micros: None,
            precondition: None,
            fence: None,
            session: None,
        }],
    }
}
