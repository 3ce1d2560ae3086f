//! Prepared coordination requests (FencedLeaseClient) against a real
//! cluster: the same op id and bytes on every repeat, the recovery action
//! of an ambiguous outcome, and the failures that happen before sending.

mod support;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use lode_client::fenced::{
    BoxFuture, CoordinationTransport, DedicatedTransport, KvCasFenced, KvGet, KvLease, KvLeaseRenew, KvRelease,
    PreparedKind, KV_LEASE_OP_VERSION,
};
use lode_client::protocol::{Precondition, ReadRequest, ReadResponse, WriteRequest, WriteResponse};
use lode_client::{Encoding, FencedLeaseClient, LodeError, MutationRecovery};
use support::TestCluster;

const NAMESPACE: &str = "config";
const LOCK: &[u8] = b"lease:service:auth";

fn acquire_request(holder: &str) -> KvLease {
    KvLease {
        v: KV_LEASE_OP_VERSION,
        namespace: NAMESPACE.to_owned(),
        key: LOCK.to_vec(),
        lease_ttl_micros: 30_000_000,
        holder_id: holder.to_owned(),
        subject_user_id: None,
    }
}

fn fenced_write(token: u64, value: &str, precondition: Precondition) -> KvCasFenced {
    KvCasFenced {
        v: KV_LEASE_OP_VERSION,
        namespace: NAMESPACE.to_owned(),
        key: b"service:auth".to_vec(),
        value: value.as_bytes().to_vec(),
        encoding: Encoding::Bytes,
        precondition,
        fence_namespace: NAMESPACE.to_owned(),
        fence_key: LOCK.to_vec(),
        lease_token: token,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prepared_mutations_repeat_with_the_same_op_id_and_apply_once() {
    let cluster = TestCluster::start(3, 10_000);
    cluster.wait_for_leader().await;
    let client = FencedLeaseClient::connect_dedicated(&format!("lode://{}", cluster.endpoints().join(",")))
        .expect("client")
        .with_attempt_timeout(Duration::from_secs(5));

    let acquire = client.prepare_acquire(&acquire_request("worker-a")).expect("prepare");
    assert_eq!(
        acquire.ambiguous_recovery(),
        MutationRecovery::WaitOutLeaseTtl { ttl_micros: 30_000_000 }
    );
    let lease = client.acquire(&acquire).await.expect("acquire");
    // The repeat is the same operation: the original grant comes back.
    assert_eq!(client.acquire(&acquire).await.expect("repeat"), lease);

    let write = client
        .prepare_cas_fenced(&fenced_write(lease.token, "v1", Precondition::Absent))
        .expect("prepare");
    let version = client.cas_fenced(&write).await.expect("fenced write");
    assert_eq!(
        client.cas_fenced(&write).await.expect("repeat"),
        version,
        "applied once"
    );
    let read = KvGet {
        namespace: NAMESPACE.to_owned(),
        key: b"service:auth".to_vec(),
        position: version,
    };
    assert_eq!(
        client.get(&read).await.expect("barriered read").expect("entry").version,
        version
    );

    let renew = client
        .prepare_renew(&KvLeaseRenew {
            v: KV_LEASE_OP_VERSION,
            namespace: NAMESPACE.to_owned(),
            key: LOCK.to_vec(),
            holder_id: "worker-a".to_owned(),
            subject_user_id: None,
            lease_token: lease.token,
            lease_ttl_micros: 20_000_000,
        })
        .expect("prepare");
    assert_eq!(renew.ambiguous_recovery(), MutationRecovery::RepeatPrepared);
    let renewed = client.renew(&renew).await.expect("renew");
    assert_eq!(client.renew(&renew).await.expect("repeat"), renewed);
    assert_eq!(renewed.token, lease.token);

    // Refused before sending: another client's object, the wrong call, a
    // foreign version, a zero timeout.
    let other = FencedLeaseClient::connect_dedicated(&cluster.endpoints().join(",")).expect("client");
    let foreign = other
        .renew(&renew)
        .await
        .expect_err("another client's prepared mutation");
    assert!(
        foreign.is_invalid() && foreign.to_string().contains("another client"),
        "{foreign}"
    );
    let wrong_call = client.release(&renew).await.expect_err("a renewal passed to release");
    assert!(
        wrong_call.is_invalid() && wrong_call.to_string().contains("Renew"),
        "{wrong_call}"
    );
    assert_eq!(renew.kind(), PreparedKind::Renew);
    let mut old = acquire_request("worker-b");
    old.v = 2;
    assert!(client.prepare_acquire(&old).expect_err("version").is_invalid());
    let zero = FencedLeaseClient::connect_dedicated(&cluster.endpoints().join(","))
        .expect("client")
        .with_attempt_timeout(Duration::ZERO);
    let prepared = zero.prepare_acquire(&acquire_request("worker-z")).expect("prepare");
    assert!(zero.acquire(&prepared).await.expect_err("zero timeout").is_invalid());

    let release = client
        .prepare_release(&KvRelease {
            v: KV_LEASE_OP_VERSION,
            namespace: NAMESPACE.to_owned(),
            key: LOCK.to_vec(),
            holder_id: "worker-a".to_owned(),
            subject_user_id: None,
            lease_token: lease.token,
        })
        .expect("prepare");
    assert!(client.release(&release).await.expect("release"));
    assert!(
        client.release(&release).await.expect("repeat"),
        "the repeat returns the first outcome"
    );

    client.close().await;
    let closed = client.acquire(&acquire).await.expect_err("closed");
    assert!(closed.is_invalid() && closed.to_string().contains("closed"), "{closed}");
    cluster.assert_no_errors();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_lost_between_proposal_and_reply_leaves_an_ambiguous_write_that_repeats_once() {
    let mut cluster = TestCluster::start(3, 10_000);
    let leader = cluster.wait_for_leader().await;
    // The connection string lists the leader first, so the write goes there.
    let leader_address = cluster.members[&leader].address.clone();
    let mut endpoints = vec![leader_address.clone()];
    endpoints.extend(
        cluster
            .endpoints()
            .into_iter()
            .filter(|address| *address != leader_address),
    );
    let client = FencedLeaseClient::connect_dedicated(&endpoints.join(","))
        .expect("client")
        .with_attempt_timeout(Duration::from_secs(2));
    let lease = client
        .acquire(&client.prepare_acquire(&acquire_request("worker-a")).expect("prepare"))
        .await
        .expect("acquire");
    let write = client
        .prepare_cas_fenced(&fenced_write(lease.token, "once", Precondition::Absent))
        .expect("prepare");

    // The leader stops answering with the write on its way, then dies.
    cluster.signal(leader, "STOP");
    let error = client.cas_fenced(&write).await.expect_err("no answer");
    assert!(error.is_ambiguous_mutation(), "{error:?}");
    assert_eq!(error.ambiguous_recovery(), Some(&MutationRecovery::RepeatPrepared));
    cluster.kill(leader);
    cluster.wait_for_leader().await;

    // The recovery: repeat the prepared write; it lands on the new leader.
    let version = client.cas_fenced(&write).await.expect("repeat");
    let entry = client
        .get(&KvGet {
            namespace: NAMESPACE.to_owned(),
            key: b"service:auth".to_vec(),
            position: version,
        })
        .await
        .expect("read")
        .expect("written");
    assert_eq!((entry.value.as_slice(), entry.version), (&b"once"[..], version));
    // Sending it again changes nothing: the first outcome comes back.
    assert_eq!(client.cas_fenced(&write).await.expect("repeat again"), version);
    assert_eq!(write.request().op_id, write.op_id());
    cluster.assert_no_errors_except(&["Unreachable node", "NetworkError", "Timeout", "timeout"]);
}

/// A transport of the application's: counts what it sends and can refuse
/// to be ready.
struct CountingTransport {
    inner: DedicatedTransport,
    sends: AtomicUsize,
    resets: AtomicUsize,
    ready: AtomicBool,
}

impl CoordinationTransport for CountingTransport {
    fn send_write(&self, request: WriteRequest, timeout: Duration) -> BoxFuture<'_, Result<WriteResponse, LodeError>> {
        self.sends.fetch_add(1, Ordering::SeqCst);
        self.inner.send_write(request, timeout)
    }
    fn send_read(&self, request: ReadRequest, timeout: Duration) -> BoxFuture<'_, Result<ReadResponse, LodeError>> {
        self.sends.fetch_add(1, Ordering::SeqCst);
        self.inner.send_read(request, timeout)
    }
    fn reset(&self) -> BoxFuture<'_, ()> {
        self.resets.fetch_add(1, Ordering::SeqCst);
        self.inner.reset()
    }
    fn ready(&self) -> BoxFuture<'_, Result<(), LodeError>> {
        let ready = self.ready.load(Ordering::SeqCst);
        Box::pin(async move {
            if ready {
                Ok(())
            } else {
                Err(LodeError::Unavailable("not ready".to_owned()))
            }
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_custom_transport_carries_requests_and_readiness_failures_are_definite() {
    let cluster = TestCluster::start(3, 10_000);
    cluster.wait_for_leader().await;
    let transport = Arc::new(CountingTransport {
        inner: DedicatedTransport::new(&cluster.endpoints().join(",")).expect("transport"),
        sends: AtomicUsize::new(0),
        resets: AtomicUsize::new(0),
        ready: AtomicBool::new(false),
    });
    let client = FencedLeaseClient::new(transport.clone());
    let acquire = client.prepare_acquire(&acquire_request("worker-c")).expect("prepare");
    let refused = client.acquire(&acquire).await.expect_err("not ready");
    assert!(
        !refused.is_ambiguous_mutation(),
        "a readiness failure is definite: {refused:?}"
    );
    assert_eq!(transport.sends.load(Ordering::SeqCst), 0, "nothing was sent");
    transport.ready.store(true, Ordering::SeqCst);
    let lease = client.acquire(&acquire).await.expect("acquire");
    assert!(lease.token > 0);
    assert_eq!(transport.sends.load(Ordering::SeqCst), 1);
    assert_eq!(transport.resets.load(Ordering::SeqCst), 0);
    cluster.assert_no_errors();
}
