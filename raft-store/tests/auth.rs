//! The auth state through the state machine: users, roles and tokens as
//! the log changes them, session tokens that prove their parent and die
//! with it, and pruning of tokens that no longer work.

use std::sync::Arc;

use lode_raft_store::auth::TokenRefusal;
use lode_raft_store::command::{Command, CommandV1, Operation, OperationResult, Proposal, Rejection};
use lode_raft_store::{MemoryEngine, StateMachineStore, TypeConfig};
use lode_types::auth::{sha256, AuthChange, Grant, Permission};
use openraft::storage::RaftStateMachine;
use openraft::testing::log_id;
use openraft::{Entry, EntryPayload};

type TestResult = Result<(), Box<dyn std::error::Error>>;

struct Store {
    state: StateMachineStore<MemoryEngine>,
    index: u64,
}

impl Store {
    async fn apply(
        &mut self,
        time_micros: u64,
        change: AuthChange,
    ) -> Result<Result<OperationResult, Rejection>, Box<dyn std::error::Error>> {
        self.index += 1;
        let entry = Entry::<TypeConfig> {
            log_id: log_id(1, 1, self.index),
            payload: EntryPayload::Normal(Proposal::single(Command::V1(CommandV1 {
                op_id: None,
                time_micros,
                operations: vec![Operation::Auth { change }],
            }))),
        };
        let outcome = self.state.apply([entry]).await?.remove(0).outcomes.remove(0);
        Ok(outcome.result.map(|mut results| results.remove(0)))
    }
}

#[tokio::test]
async fn tokens_name_users_through_roles_and_stop_when_revoked_expired_or_orphaned() -> TestResult {
    let mut store = Store {
        state: StateMachineStore::open(Arc::new(MemoryEngine::new()))?,
        index: 0,
    };
    let reader = store.state.reader();
    let version_before = reader.auth_version();
    store.apply(1, AuthChange::PutUser { name: "app".to_owned() }).await??;
    assert_ne!(
        reader.auth_version(),
        version_before,
        "an auth change moves the version"
    );
    let grants = vec![Grant {
        prefix: "config".to_owned(),
        permission: Permission::Read,
    }];
    store
        .apply(
            2,
            AuthChange::PutRole {
                name: "reader".to_owned(),
                grants: grants.clone(),
            },
        )
        .await??;
    store
        .apply(
            3,
            AuthChange::BindRole {
                user: "app".to_owned(),
                role: "reader".to_owned(),
            },
        )
        .await??;
    let secret = [5u8; 32];
    let issue = AuthChange::IssueToken {
        id: 7,
        user: "app".to_owned(),
        secret_sha256: sha256(&secret),
        expires_at_micros: Some(10_000),
    };
    store.apply(4, issue).await??;
    let state = reader.auth_state()?;
    assert_eq!(state.user_of_token(7, &secret, 5), Ok("app"));
    assert_eq!(state.grants_of("app"), grants);
    assert_eq!(state.user_of_token(7, &[6u8; 32], 5), Err(TokenRefusal::Unknown));
    assert_eq!(state.user_of_token(7, &secret, 10_000), Err(TokenRefusal::Expired));

    // A session token needs the parent's secret, and lives no longer.
    let session = |parent_secret: &[u8; 32], id| AuthChange::IssueSessionToken {
        id,
        parent: 7,
        parent_secret_sha256: sha256(parent_secret),
        secret_sha256: sha256(&[9u8; 32]),
        expires_at_micros: 50_000,
    };
    let refused = store.apply(5, session(&[6u8; 32], 8)).await?;
    assert!(matches!(refused, Err(Rejection::NotFound(_))), "{refused:?}");
    let issued = store.apply(6, session(&secret, 8)).await??;
    assert_eq!(
        issued,
        OperationResult::SessionTokenIssued {
            expires_at_micros: 10_000
        }
    );
    assert_eq!(reader.auth_state()?.user_of_token(8, &[9u8; 32], 7), Ok("app"));

    // Revoking the parent ends the session token; a prune removes both.
    store.apply(7, AuthChange::RevokeToken { id: 7 }).await??;
    let state = reader.auth_state()?;
    assert_eq!(state.user_of_token(8, &[9u8; 32], 8), Err(TokenRefusal::Unknown));
    assert!(state.has_dead_tokens(8));
    store.apply(9, AuthChange::PruneTokens { tokens_max: 10 }).await??;
    let state = reader.auth_state()?;
    assert!(state.tokens.is_empty(), "{:?}", state.tokens.keys().collect::<Vec<_>>());
    assert!(!state.has_dead_tokens(9));

    // Removing a user stops its tokens; binding to it fails.
    store
        .apply(10, AuthChange::RemoveUser { name: "app".to_owned() })
        .await??;
    let bind = store
        .apply(
            11,
            AuthChange::BindRole {
                user: "app".to_owned(),
                role: "reader".to_owned(),
            },
        )
        .await?;
    assert!(matches!(bind, Err(Rejection::NotFound(_))), "{bind:?}");
    Ok(())
}

/// A write checked against the grants at one revision applies while no
/// permission has been taken away since, and is refused whole once one
/// has (wherever its check ran); the refusal keeps no dedup record, so the
/// write checked again applies under the same op id.
#[tokio::test]
async fn a_write_checked_before_a_permission_was_taken_away_is_refused() -> TestResult {
    use lode_raft_store::command::{Encoding, OpId};
    let mut store = Store {
        state: StateMachineStore::open(Arc::new(MemoryEngine::new()))?,
        index: 0,
    };
    let reader = store.state.reader();
    store.apply(1, AuthChange::PutUser { name: "app".to_owned() }).await??;
    let before = reader.auth_state()?.grants_revision;
    store
        .apply(
            2,
            AuthChange::BindRole {
                user: "app".to_owned(),
                role: "missing".to_owned(),
            },
        )
        .await?
        .expect_err("no such role");
    store
        .apply(
            3,
            AuthChange::PutRole {
                name: "writer".to_owned(),
                grants: Vec::new(),
            },
        )
        .await??;
    let after = reader.auth_state()?.grants_revision;
    assert!(after > before, "replacing a role's grants may take some away");
    store
        .apply(
            4,
            AuthChange::BindRole {
                user: "app".to_owned(),
                role: "writer".to_owned(),
            },
        )
        .await??;
    assert_eq!(reader.auth_state()?.grants_revision, after, "binding only gives");

    let set = |value: &str| Operation::Set {
        namespace: "config".to_owned(),
        key: b"k".to_vec(),
        value: value.as_bytes().to_vec(),
        encoding: Encoding::Bytes,
        expires_at_micros: None,
        precondition: None,
        fence: None,
        session: None,
    };
    let mut checked_write = |revision: u64, value: &str| {
        store.index += 1;
        Entry::<TypeConfig> {
            log_id: log_id(1, 1, store.index),
            payload: EntryPayload::Normal(Proposal::single(Command::V2 {
                command: CommandV1 {
                    op_id: Some(OpId(99)),
                    time_micros: 10,
                    operations: vec![set(value)],
                },
                grants_revision: revision,
            })),
        }
    };
    let stale = checked_write(before, "stale");
    let fresh = checked_write(after, "fresh");
    let mut outcomes = store.state.apply([stale, fresh]).await?;
    let refused = outcomes.remove(0).outcomes.remove(0);
    assert_eq!(
        refused.result,
        Err(Rejection::GrantsChanged {
            checked: before,
            current: after
        })
    );
    let applied = outcomes.remove(0).outcomes.remove(0);
    assert!(applied.result.is_ok() && !applied.deduplicated, "{applied:?}");
    let entry = reader.get_entry("config", b"k", 10)?.expect("the fresh write");
    assert_eq!(entry.value, b"fresh");
    Ok(())
}
