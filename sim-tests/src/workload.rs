//! The clients of a simulated run: key-value clients doing gets, sets,
//! compare-and-sets and deletes on a few shared keys, and lock clients that
//! take a lease and make fenced writes, some of them stalling past their
//! lease. Each records every call into the shared history.

use std::collections::BTreeMap;
use std::time::Duration;

use lode_client::{Client, ClientOptions, LodeError};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::history::{self, Call, FencedWrite, Grant, Outcome, SharedHistory};

/// The namespace the workload writes.
pub const NAMESPACE: &str = "sim";
/// The coordination namespace of the lock clients' lease.
pub const LOCK_NAMESPACE: &str = "locks";
/// The lease the lock clients contend for.
pub const LOCK_KEY: &str = "lock";
/// The key only the lease holder may write.
pub const GUARDED_KEY: &str = "guarded";

/// SDK options inside the simulation: short attempts, so calls against a
/// partitioned member give up and move on in simulated seconds.
pub fn client_options() -> ClientOptions {
    ClientOptions {
        attempt_timeout: Duration::from_millis(400),
        call_timeout: Duration::from_millis(3_000),
        backoff_initial: Duration::from_millis(20),
        backoff_max: Duration::from_millis(200),
        default_stream: None,
        tls: None,
        token: Some(lode_client::protocol::AccessToken(root_token().to_text())),
        in_process: None,
    }
}

/// The first admin's token every member is started with; every client of
/// the workload but the tenant presents it.
pub fn root_token() -> lode_types::auth::TokenParts {
    lode_types::auth::TokenParts {
        id: 1,
        secret: [0x5e; 32],
    }
}

/// Errors after which the call certainly did not take effect.
pub fn is_definite_refusal(error: &LodeError) -> bool {
    matches!(
        error,
        LodeError::Invalid(_)
            | LodeError::NotFound(_)
            | LodeError::VersionConflict { .. }
            | LodeError::LeaseLost
            | LodeError::Unsupported(_)
            | LodeError::Unauthorized
            | LodeError::Compacted { .. }
            | LodeError::ChecksFailed { .. }
    )
}

fn write_outcome(result: Result<u64, LodeError>) -> Outcome {
    match result {
        Ok(version) => Outcome::Written { version },
        Err(LodeError::VersionConflict { current }) => Outcome::Conflict { current },
        Err(error) if is_definite_refusal(&error) => Outcome::Failed,
        Err(_) => Outcome::Unknown,
    }
}

/// What one key-value client does.
#[derive(Clone, Debug)]
pub struct KvClientPlan {
    pub client: usize,
    pub seed: u64,
    pub keys: usize,
    /// How long the client starts operations for.
    pub until: Duration,
    /// Only reads (a configuration watcher, say).
    pub read_only: bool,
}

/// Runs a key-value client until `plan.until` (simulated time).
pub async fn run_kv_client(plan: KvClientPlan, endpoints: Vec<String>, history: SharedHistory) {
    let started = tokio::time::Instant::now();
    let mut random = StdRng::seed_from_u64(plan.seed);
    let client = match Client::with_options(endpoints, client_options()) {
        Ok(client) => client,
        Err(error) => panic!("client options are valid: {error}"),
    };
    let kv = client.kv(NAMESPACE);
    // The version this client last saw per key (None: absent), for its
    // compare-and-sets; stale on purpose when others wrote since.
    let mut last_seen: BTreeMap<String, Option<u64>> = BTreeMap::new();
    let mut written = 0u64;
    while started.elapsed() < plan.until {
        let key = format!("k{}", random.gen_range(0..plan.keys));
        let choice = if plan.read_only { 0 } else { random.gen_range(0..100) };
        if choice < 40 {
            let slot = history::invoke(&history, plan.client, Call::Get { key: key.clone() });
            let outcome = match kv.get_entry(&key).await {
                Ok(entry) => {
                    let read = entry.map(|entry| (String::from_utf8_lossy(&entry.value).into_owned(), entry.version));
                    last_seen.insert(key.clone(), read.as_ref().map(|(_, version)| *version));
                    Outcome::Read(read)
                }
                Err(_) => Outcome::Failed,
            };
            history::complete(&history, slot, outcome);
        } else if choice < 65 {
            written += 1;
            let value = format!("c{}.{written}", plan.client);
            let call = Call::Set {
                key: key.clone(),
                value: value.clone(),
            };
            let slot = history::invoke(&history, plan.client, call);
            let outcome = write_outcome(kv.set(&key).bytes(&value).send().await);
            if let Outcome::Written { version } = outcome {
                last_seen.insert(key.clone(), Some(version));
            }
            history::complete(&history, slot, outcome);
        } else if choice < 90 {
            written += 1;
            let value = format!("c{}.{written}", plan.client);
            let expected = last_seen.get(&key).copied().flatten();
            let call = Call::Cas {
                key: key.clone(),
                expected,
                value: value.clone(),
            };
            let slot = history::invoke(&history, plan.client, call);
            let builder = kv.set(&key).bytes(&value);
            let builder = match expected {
                Some(version) => builder.expect_version(version),
                None => builder.expect_absent(),
            };
            let result = builder.commit().await;
            if let Err(LodeError::VersionConflict { current }) = &result {
                last_seen.insert(key.clone(), *current);
            }
            let outcome = write_outcome(result);
            if let Outcome::Written { version } = outcome {
                last_seen.insert(key.clone(), Some(version));
            }
            history::complete(&history, slot, outcome);
        } else {
            let slot = history::invoke(&history, plan.client, Call::Delete { key: key.clone() });
            let outcome = match kv.delete(&key).await {
                Ok(existed) => {
                    last_seen.insert(key.clone(), None);
                    Outcome::Deleted { existed }
                }
                Err(error) if is_definite_refusal(&error) => Outcome::Failed,
                Err(_) => Outcome::Unknown,
            };
            history::complete(&history, slot, outcome);
        }
        tokio::time::sleep(Duration::from_millis(random.gen_range(0..40))).await;
    }
}

/// What one lock client does.
#[derive(Clone, Debug)]
pub struct LockClientPlan {
    pub client: usize,
    pub seed: u64,
    pub lease_ttl: Duration,
    pub until: Duration,
}

/// Runs a lock client until `plan.until`: acquire the lease, write the
/// guarded key with the token a few times (sometimes stalling past the
/// lease first), release or let it expire, again.
pub async fn run_lock_client(plan: LockClientPlan, endpoints: Vec<String>, history: SharedHistory) {
    let started = tokio::time::Instant::now();
    let mut random = StdRng::seed_from_u64(plan.seed);
    let client = match Client::with_options(endpoints, client_options()) {
        Ok(client) => client,
        Err(error) => panic!("client options are valid: {error}"),
    };
    let locks = client.kv(LOCK_NAMESPACE);
    let kv = client.kv(NAMESPACE);
    let holder = format!("l{}", plan.client);
    let mut written = 0u64;
    while started.elapsed() < plan.until {
        let invoked = history.borrow_mut().tick();
        history::calling(&history, plan.client, "acquire the lease");
        let acquired = locks.lease(LOCK_KEY, &holder, plan.lease_ttl).await;
        history::answered(
            &history,
            plan.client,
            match &acquired {
                Ok(lease) => format!("token {}", lease.token),
                Err(error) => format!("failed: {error}"),
            },
        );
        let lease = match acquired {
            Ok(lease) => lease,
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(random.gen_range(5..50))).await;
                continue;
            }
        };
        {
            let mut shared = history.borrow_mut();
            let completed = shared.tick();
            shared.grants.push(Grant {
                client: plan.client,
                token: lease.token,
                invoked,
                completed,
            });
        }
        let writes = random.gen_range(1..6);
        for _ in 0..writes {
            if random.gen_bool(0.25) {
                // A holder that stalls (a pause, a slow disk) and writes
                // after its lease may have gone to someone else.
                tokio::time::sleep(plan.lease_ttl + Duration::from_millis(random.gen_range(0..200))).await;
            }
            let current = match kv.get_entry(GUARDED_KEY).await {
                Ok(entry) => entry.map(|entry| entry.version),
                Err(_) => continue,
            };
            written += 1;
            let value = format!("t{}.l{}.{written}", lease.token, plan.client);
            let invoked = history.borrow_mut().tick();
            let builder = kv
                .cas_fenced(GUARDED_KEY, LOCK_NAMESPACE, LOCK_KEY, lease.token)
                .bytes(&value);
            let builder = match current {
                Some(version) => builder.expect_version(version),
                None => builder.expect_absent(),
            };
            history::calling(&history, plan.client, format!("fenced write {value}"));
            let result = builder.commit().await;
            history::answered(&history, plan.client, format!("{result:?}"));
            let outcome = match result {
                Ok(version) => Outcome::Written { version },
                Err(error) if is_definite_refusal(&error) => Outcome::Failed,
                Err(_) => Outcome::Unknown,
            };
            let mut shared = history.borrow_mut();
            let completed = (outcome != Outcome::Unknown).then(|| shared.tick());
            shared.fenced_writes.push(FencedWrite {
                client: plan.client,
                token: lease.token,
                value,
                invoked,
                completed,
                outcome,
            });
        }
        if random.gen_bool(0.5) {
            history::calling(&history, plan.client, format!("release token {}", lease.token));
            let released = locks.release(LOCK_KEY, &holder, lease.token).await;
            history::answered(&history, plan.client, format!("{released:?}"));
        }
        tokio::time::sleep(Duration::from_millis(random.gen_range(0..100))).await;
    }
}

/// The token a guarded value was written with (`t<token>.…`).
pub fn token_of(value: &str) -> Option<u64> {
    value.strip_prefix('t')?.split('.').next()?.parse().ok()
}
