//! Who may talk to a member, tried as an attacker would, against real
//! `lode node` processes with real TLS: the peer port takes only
//! certificates of the cluster's CA, the client port refuses Raft, a
//! member answers no other cluster, and open ports in the clear are
//! refused unless asked for.

mod support;

use std::time::Duration;

use lode_client::connection::{context, dial};
use lode_client::protocol::{ByteBuf, ClusterId, RaftMessageKind};
use lode_client::tls::{ClientTls, Transport};
use lode_raft_store::TypeConfig;
use openraft::raft::{InstallSnapshotRequest, VoteRequest};
use openraft::{SnapshotMeta, Vote};
use support::{make_certificates, wait_until, TestCluster};

/// A vote request from a made-up candidate with a huge term.
fn forged_vote() -> ByteBuf {
    let request = VoteRequest::<u64>::new(Vote::new(u64::MAX - 1, 99), None);
    ByteBuf::from(lode_types::binary::encode(&request).expect("encode"))
}

fn cluster_id(cluster: &TestCluster) -> ClusterId {
    cluster.cluster_id().parse().expect("a cluster id")
}

/// The term every running member reports.
async fn terms(cluster: &TestCluster) -> Vec<u64> {
    let mut terms = Vec::new();
    for id in cluster.running() {
        terms.push(cluster.client_of(id).node_status().await.expect("status").term);
    }
    terms
}

/// A raft call over `transport`: `Ok` with the member's answer, or `Err`
/// when the connection or its handshake failed.
async fn raft_call(
    address: &str,
    transport: &Transport,
    cluster: ClusterId,
    kind: RaftMessageKind,
    payload: ByteBuf,
) -> Result<Result<ByteBuf, lode_client::LodeError>, String> {
    let client = dial(address, transport).await.map_err(|error| error.to_string())?;
    tokio::time::timeout(Duration::from_secs(10), client.raft(context(), cluster, kind, payload))
        .await
        .map_err(|_| "no answer in 10 s".to_owned())?
        .map_err(|error| error.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_index_is_given_on_the_peer_port_to_the_cluster_only() {
    let cluster = TestCluster::start(3, 10_000);
    let leader = cluster.wait_for_leader().await;
    let id = cluster_id(&cluster);
    let written = cluster
        .client()
        .kv("config")
        .set("indexed")
        .bytes("value")
        .send()
        .await
        .expect("write");
    let ask = |address: String, cluster: ClusterId| async move {
        let client = dial(&address, &Transport::Plain).await.expect("dial");
        tokio::time::timeout(Duration::from_secs(10), client.read_index(context(), cluster))
            .await
            .expect("an answer in 10 s")
            .expect("the call is answered")
    };
    let member = &cluster.members[&leader];
    let index = ask(member.peer_address.clone(), id).await.expect("a read index");
    assert!(
        index >= written,
        "read index {index} is behind the acknowledged write at {written}"
    );
    let refused = ask(member.address.clone(), id)
        .await
        .expect_err("the client port gave a read index");
    assert!(refused.to_string().contains("peer port only"), "{refused}");
    let stranger = ask(member.peer_address.clone(), ClusterId(id.0 ^ 1))
        .await
        .expect_err("another cluster was given a read index");
    assert!(stranger.to_string().contains("not this member's cluster"), "{stranger}");
    // A follower that is asked is no leader, and says which member is.
    let follower = cluster
        .members
        .keys()
        .copied()
        .find(|other| *other != leader)
        .expect("a follower");
    let elsewhere = ask(cluster.members[&follower].peer_address.clone(), id)
        .await
        .expect_err("a follower gave a read index");
    assert!(
        matches!(elsewhere, lode_client::LodeError::NotLeader { .. }),
        "{elsewhere}"
    );
    cluster.assert_no_errors();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_peer_port_takes_only_certificates_of_the_cluster_ca() {
    let cluster = TestCluster::start_with_tls(3, 10_000);
    let leader = cluster.wait_for_leader().await;
    let tls = cluster.tls_dir.clone().expect("a TLS cluster");
    let client = cluster.client();
    client
        .kv("config")
        .set("over")
        .bytes("tls")
        .send()
        .await
        .expect("a write over TLS");
    let id = cluster_id(&cluster);
    let peer = cluster.members[&leader].peer_address.clone();
    let before = terms(&cluster).await;

    // In the clear: the TLS handshake never happens.
    let plain = raft_call(&peer, &Transport::Plain, id, RaftMessageKind::Vote, forged_vote()).await;
    assert!(plain.is_err(), "a plain connection was answered: {plain:?}");
    // TLS that trusts the CA but presents no certificate.
    let anonymous = Transport::Tls(ClientTls::from_files(&tls.join("ca.pem"), None).expect("tls"));
    let answer = raft_call(&peer, &anonymous, id, RaftMessageKind::Vote, forged_vote()).await;
    assert!(answer.is_err(), "a peer without a certificate was answered: {answer:?}");
    // A certificate another CA signed.
    let other = tempfile::tempdir().expect("temp dir");
    make_certificates(other.path());
    let stranger = Transport::Tls(
        ClientTls::from_files(
            &tls.join("ca.pem"),
            Some((&other.path().join("member.pem"), &other.path().join("member-key.pem"))),
        )
        .expect("tls"),
    );
    let answer = raft_call(&peer, &stranger, id, RaftMessageKind::Vote, forged_vote()).await;
    assert!(answer.is_err(), "a certificate of another CA was answered: {answer:?}");
    // A client without the CA does not trust the member at all.
    let untrusting = lode_client::ClientOptions {
        tls: Some(ClientTls::from_files(&other.path().join("ca.pem"), None).expect("tls")),
        call_timeout: Duration::from_secs(2),
        ..lode_client::ClientOptions::default()
    };
    let untrusting = lode_client::Client::with_options(cluster.endpoints(), untrusting).expect("client");
    let refused = untrusting.kv("config").get("over").await;
    assert!(refused.is_err(), "a client that trusts another CA read {refused:?}");

    assert_eq!(terms(&cluster).await, before, "a refused vote changed a term");
    assert_eq!(cluster.wait_for_leader().await, leader);
    let value = client.kv("config").get("over").await.expect("read");
    assert_eq!(value, Some(b"tls".to_vec()));
    cluster.assert_no_errors();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_port_refuses_raft_and_a_forged_vote_changes_nothing() {
    let cluster = TestCluster::start(3, 10_000);
    let leader = cluster.wait_for_leader().await;
    let id = cluster_id(&cluster);
    let before = terms(&cluster).await;
    let status = cluster.client().cluster_status().await.expect("status");

    for member in cluster.members.values() {
        let answer = raft_call(
            &member.address,
            &Transport::Plain,
            id,
            RaftMessageKind::Vote,
            forged_vote(),
        )
        .await
        .expect("the client port answers");
        let error = answer.expect_err("the client port must refuse raft");
        assert!(error.to_string().contains("peer port only"), "{error}");
    }
    // On the peer port, a message of another cluster is refused too.
    let stranger = ClusterId(id.0 ^ 1);
    let peer = cluster.members[&leader].peer_address.clone();
    let answer = raft_call(&peer, &Transport::Plain, stranger, RaftMessageKind::Vote, forged_vote())
        .await
        .expect("the peer port answers");
    let error = answer.expect_err("another cluster's vote must be refused");
    assert!(error.to_string().contains("not this member's cluster"), "{error}");

    assert_eq!(terms(&cluster).await, before, "a forged vote changed a term");
    let after = cluster.client().cluster_status().await.expect("status");
    let shape = |status: &lode_client::protocol::ClusterStatus| {
        let members = status.members.iter();
        members
            .map(|member| (member.id, member.voter, member.peer_address.clone()))
            .collect::<Vec<_>>()
    };
    assert_eq!(shape(&after), shape(&status), "the membership changed");
    assert_eq!(after.leader, Some(leader));
    cluster.assert_no_errors();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_chunk_at_a_huge_offset_is_refused_and_the_member_keeps_running() {
    let cluster = TestCluster::start(3, 10_000);
    let leader = cluster.wait_for_leader().await;
    let follower = cluster.a_follower(leader);
    let id = cluster_id(&cluster);
    let term = terms(&cluster).await[0];
    let chunk = InstallSnapshotRequest::<TypeConfig> {
        vote: Vote::new_committed(term, leader),
        meta: SnapshotMeta::default(),
        offset: 1 << 40,
        data: vec![1; 16],
        done: false,
    };
    let payload = ByteBuf::from(lode_types::binary::encode(&chunk).expect("encode"));
    let peer = cluster.members[&follower].peer_address.clone();
    let answer = raft_call(&peer, &Transport::Plain, id, RaftMessageKind::InstallSnapshot, payload)
        .await
        .expect("the peer port answers");
    let error = answer.expect_err("the chunk must be refused");
    assert!(error.to_string().contains("snapshot_bytes_max"), "{error}");
    let position = cluster
        .client()
        .kv("config")
        .set("after")
        .bytes("chunk")
        .send()
        .await
        .expect("write");
    cluster.wait_applied(follower, position).await;
    cluster.assert_no_errors();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_of_another_cluster_cannot_join_or_be_joined() {
    let mut cluster = TestCluster::start(3, 10_000);
    let leader = cluster.wait_for_leader().await;
    let other = TestCluster::start(1, 10_000);
    other.wait_for_leader().await;
    let before = cluster.client().cluster_status().await.expect("status");

    // Adding the other cluster's member is refused before it becomes a learner.
    let stranger = other.members[&1].peer_address.clone();
    let refused = cluster.lode(&["cluster", "add", "7", &stranger]);
    assert!(!refused.status.success(), "{refused:?}");
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("belongs to cluster"),
        "{refused:?}"
    );
    // A new member told another cluster's id is refused the same way.
    let spare = cluster.start_spare_with(4, &["--cluster-id".to_owned(), other.cluster_id()]);
    wait_until("the spare to serve", || async {
        cluster.client_of(4).node_status().await.ok()
    })
    .await;
    let refused = cluster.lode(&["cluster", "add", "4", &spare]);
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("belongs to cluster"),
        "{refused:?}"
    );
    let after = cluster.client().cluster_status().await.expect("status");
    assert_eq!(after.members.len(), before.members.len(), "{after:?}");

    // A member that belongs to the other cluster, restarted with --join
    // into this one, stays in its own.
    let mut other = other;
    let other_id = other.cluster_id();
    other.kill(1);
    let seed = cluster.members[&leader].peer_address.clone();
    other.restart_with_join(1, &seed);
    assert_eq!(other.wait_for_leader().await, 1);
    assert_eq!(other.cluster_id(), other_id);
    assert!(other
        .log_text(1)
        .contains("restarting as a member of an existing cluster"));
    let after = cluster.client().cluster_status().await.expect("status");
    assert!(
        after.members.iter().all(|member| member.peer_address != stranger),
        "{after:?}"
    );
    cluster.assert_no_errors();
}

#[tokio::test]
async fn an_open_port_in_the_clear_is_refused_unless_insecure() {
    let directory = tempfile::tempdir().expect("temp dir");
    let command = |extra: &[&str]| {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_lode"));
        command
            .args([
                "node",
                "--id",
                "1",
                "--listen",
                "0.0.0.0:0",
                "--peer-listen",
                "127.0.0.1:0",
            ])
            .args(["--peers", "1=127.0.0.1:1", "--data-dir"])
            .arg(directory.path().join("data"))
            .args(extra)
            .env("NO_COLOR", "1");
        command
    };
    let refused = command(&[]).output().expect("run lode node");
    assert_eq!(refused.status.code(), Some(2), "{refused:?}");
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("refusing to serve") && stderr.contains("--insecure"),
        "{stderr}"
    );

    let log_path = directory.path().join("insecure.log");
    let log = std::fs::File::create(&log_path).expect("log file");
    let mut insecure = command(&["--insecure"])
        .stderr(std::process::Stdio::from(log))
        .spawn()
        .expect("start lode node --insecure");
    wait_until("the warning", || async {
        let text = std::fs::read_to_string(&log_path).unwrap_or_default();
        text.lines()
            .any(|line| line.contains("WARN") && line.contains("serving without TLS"))
            .then_some(())
    })
    .await;
    insecure.kill().expect("kill");
    insecure.wait().expect("wait");
}

/// The certificate a member's client port presents, by a fresh handshake.
async fn presented_certificate(address: &str, ca: &std::path::Path) -> Vec<u8> {
    let roots = lode_client::tls::read_roots(ca).expect("roots");
    let config = lode_client::tls::client_config(roots, None).expect("config");
    let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(address).await.expect("connect");
    let name = rustls_pki_types::ServerName::try_from("127.0.0.1").expect("name");
    let stream = connector.connect(name, tcp).await.expect("handshake");
    let chain = stream.get_ref().1.peer_certificates().expect("a certificate");
    chain[0].as_ref().to_vec()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_certificate_is_presented_without_a_restart() {
    let cluster = TestCluster::start_with_tls(1, 10_000);
    cluster.wait_for_leader().await;
    let tls = cluster.tls_dir.clone().expect("a TLS cluster");
    let address = cluster.members[&1].address.clone();
    let first = presented_certificate(&address, &tls.join("ca.pem")).await;
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_lode"))
        .args(["tls", "issue", "--name", "rotated", "--hosts", "127.0.0.1", "--dir"])
        .arg(&tls)
        .output()
        .expect("lode tls issue");
    assert!(output.status.success(), "{output:?}");
    // The key first, then the certificate: a half-written pair is skipped.
    std::fs::rename(tls.join("rotated-key.pem"), tls.join("member-key.pem")).expect("key");
    std::fs::rename(tls.join("rotated.pem"), tls.join("member.pem")).expect("certificate");
    let rotated = std::fs::read_to_string(tls.join("member.pem")).expect("read");
    let rotated = rustls_pki_types::pem::PemObject::from_pem_slice(rotated.as_bytes())
        .map(|certificate: rustls_pki_types::CertificateDer<'static>| certificate.as_ref().to_vec())
        .expect("a certificate");
    assert_ne!(first, rotated);
    wait_until("the member to present the rotated certificate", || async {
        (presented_certificate(&address, &tls.join("ca.pem")).await == rotated).then_some(())
    })
    .await;
    let client = cluster.client();
    client
        .kv("config")
        .set("rotated")
        .bytes("yes")
        .send()
        .await
        .expect("write after rotation");
    cluster.assert_no_errors();
}
