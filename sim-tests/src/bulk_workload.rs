//! The bulk writer of the storage fault mix: it fills the state with large
//! values, each key written once, so that a member that lost its disk or
//! fell behind catches up by installing a snapshot of several MiB rather
//! than a few small keys. The verifier reads every value back at the end.

use std::time::Duration;

use lode_client::Client;
use rand::rngs::StdRng;
use rand::{RngCore, SeedableRng};

use crate::history::{self, Known, SharedHistory};
use crate::workload::{client_options, is_definite_refusal};

/// The namespace the bulk writer fills (apart from the checked keys, so
/// the linearizability checker's histories stay small).
pub const BULK_NAMESPACE: &str = "bulk";
/// Bytes of each bulk value.
pub const BULK_VALUE_BYTES: usize = 64 * 1024;
/// Values the writer writes at most: 4 MiB of state in all.
pub const BULK_VALUES_MAX: u64 = 64;
/// The pause between two writes, so the state grows while faults happen.
pub const BULK_PAUSE: Duration = Duration::from_millis(60);

/// One bulk write and how it ended.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct BulkWrite {
    pub index: u64,
    pub known: Known,
}

/// The key of the `index`th bulk value.
pub fn bulk_key(index: u64) -> String {
    format!("b{index}")
}

/// The `index`th bulk value: a function of the run's seed and the index,
/// so the verifier can recompute it instead of the history holding it.
pub fn bulk_value(seed: u64, index: u64) -> Vec<u8> {
    let mut value = vec![0; BULK_VALUE_BYTES];
    StdRng::seed_from_u64(seed ^ index.wrapping_mul(0x9e37_79b9_7f4a_7c15)).fill_bytes(&mut value);
    value
}

/// Writes the bulk values one after another until `until` (simulated
/// time) or `BULK_VALUES_MAX` of them, recording each outcome.
pub async fn run_bulk_writer(
    client_number: usize,
    seed: u64,
    until: Duration,
    endpoints: Vec<String>,
    history: SharedHistory,
) {
    let started = tokio::time::Instant::now();
    let client = match Client::with_options(endpoints, client_options()) {
        Ok(client) => client,
        Err(error) => panic!("client options are valid: {error}"),
    };
    let kv = client.kv(BULK_NAMESPACE);
    for index in 0..BULK_VALUES_MAX {
        if started.elapsed() >= until {
            break;
        }
        history::calling(&history, client_number, format!("bulk write {index}"));
        let answer = kv.set(bulk_key(index)).bytes(bulk_value(seed, index)).send().await;
        history::answered(&history, client_number, format!("{answer:?}"));
        let known = match answer {
            Ok(_) => Known::Acknowledged,
            Err(error) if is_definite_refusal(&error) => Known::Refused,
            Err(_) => Known::Unknown,
        };
        history.borrow_mut().bulk_writes.push(BulkWrite { index, known });
        tokio::time::sleep(BULK_PAUSE).await;
    }
}

/// Reads every bulk value back: an acknowledged one must hold exactly what
/// was written, a refused one must be absent. Returns what was wrong.
pub async fn check_bulk_values(client: &Client, seed: u64, writes: &[BulkWrite]) -> Result<Vec<String>, String> {
    let kv = client.kv(BULK_NAMESPACE);
    let mut problems = Vec::new();
    for write in writes {
        let key = bulk_key(write.index);
        let stored = kv
            .get(&key)
            .await
            .map_err(|error| format!("the final read of bulk key {key:?} failed: {error}"))?;
        let expected = bulk_value(seed, write.index);
        match (&write.known, stored) {
            (Known::Acknowledged, None) => problems.push(format!("acknowledged bulk write {key:?} is missing")),
            (Known::Refused, Some(_)) => problems.push(format!("refused bulk write {key:?} was applied")),
            (_, Some(value)) if value != expected => problems.push(format!(
                "bulk key {key:?} holds {} bytes that differ from the {} written",
                value.len(),
                expected.len()
            )),
            _ => {}
        }
    }
    Ok(problems)
}
