//! The storage quota against a real member on RocksDB: writes that grow
//! the state are refused past `--storage-bytes-max` with a message naming
//! the quota and the size, while reads, deletes, lease releases and expiry
//! sweeps go on; once deletes are compacted away, writes are accepted
//! again with nothing to disarm.

mod support;

use std::time::Duration;

use lode_client::LodeError;
use support::{wait_until, TestCluster};

const QUOTA_BYTES: u64 = 4 << 20;
const VALUE_BYTES: usize = 60 * 1024;
/// Writes tried before the quota must have refused one: the quota holds
/// about 70 values.
const WRITES_MAX: usize = 400;

/// Bytes that do not compress (xorshift), different for every `seed`.
fn incompressible(seed: u64) -> Vec<u8> {
    let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..VALUE_BYTES / 8)
        .flat_map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state.to_le_bytes()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn writes_past_the_quota_are_refused_until_space_is_reclaimed() {
    let quota = QUOTA_BYTES.to_string();
    let flags = ["--storage-bytes-max", quota.as_str(), "--change-log-bytes-max", "65536"];
    let cluster = TestCluster::start_with_flags(1, 10_000, &flags);
    cluster.wait_for_leader().await;
    let client = cluster.client();
    let locks = client.kv("locks");
    let lease = locks
        .lease("leader", "worker-a", Duration::from_secs(60))
        .await
        .expect("lease");
    let config = client.kv("config");
    config
        .set("short-lived")
        .bytes("gone soon")
        .ttl(Duration::from_secs(3))
        .send()
        .await
        .expect("set with a ttl");

    let big = client.kv("big");
    let mut refusal = None;
    for index in 0..WRITES_MAX {
        match big
            .set(format!("value-{index:04}"))
            .bytes(incompressible(index as u64))
            .send()
            .await
        {
            Ok(_) => {}
            Err(error) => {
                refusal = Some((index, error));
                break;
            }
        }
    }
    let (written, refusal) = refusal.expect("the quota refused a write");
    assert!(refusal.is_quota_exceeded(), "{refusal}");
    let LodeError::QuotaExceeded {
        quota_bytes,
        used_bytes,
    } = &refusal
    else {
        unreachable!()
    };
    assert_eq!(*quota_bytes, QUOTA_BYTES);
    assert!(*used_bytes > QUOTA_BYTES / 2, "{refusal}");
    let message = refusal.to_string();
    assert!(
        message.contains("storage_bytes_max") && message.contains(&quota),
        "{message}"
    );

    // Over the quota: reads, a lease release, an expiry sweep and deletes.
    assert_eq!(big.get("value-0000").await.expect("read"), Some(incompressible(0)));
    let again = big.set("another").bytes(incompressible(9_999)).send().await;
    assert!(again.is_err_and(|error| error.is_quota_exceeded()));
    assert!(locks.release("leader", "worker-a", lease.token).await.expect("release"));
    wait_until("the expired entry to be swept", || async {
        cluster
            .client()
            .node_status()
            .await
            .ok()
            .filter(|status| status.expired_awaiting_sweep == 0)?;
        config
            .exists("short-lived")
            .await
            .expect("exists")
            .is_none()
            .then_some(())
    })
    .await;
    let removed = big.delete_many().send().await.expect("delete");
    assert_eq!(removed, written as u64);

    // No alarm to disarm: once compaction drops the deleted values, writes
    // go through again.
    wait_until("writes to be accepted again", || async {
        config.set("after").bytes("reclaimed").send().await.ok()
    })
    .await;
    assert_eq!(config.get("after").await.expect("read"), Some(b"reclaimed".to_vec()));
    cluster.assert_no_errors();
}
