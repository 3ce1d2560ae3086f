//! `/health` and `/ready` against real processes: ready means a voter that
//! reaches its leader; a member not yet added, or one cut off from its
//! quorum, is not ready, while `/health` answers throughout.

mod support;

use support::{wait_until, TestCluster};

fn http_address(cluster: &TestCluster, id: u64) -> String {
    cluster.kv_connect_url(id).trim_start_matches("http://").to_owned()
}

fn ready(cluster: &TestCluster, id: u64) -> (u16, String) {
    support::get(&http_address(cluster, id), "/ready?verbose", None)
}

#[tokio::test(flavor = "multi_thread")]
async fn ready_means_a_voter_that_reaches_its_leader_and_health_never_waits_for_one() {
    let mut cluster = TestCluster::start_with_http(3, 10_000);
    let leader = cluster.wait_for_leader().await;
    cluster
        .client()
        .kv("config")
        .set("k")
        .bytes("v")
        .send()
        .await
        .expect("set");
    for id in 1..=3 {
        let (status, body) = wait_until("every member to be ready", || async {
            let answer = ready(&cluster, id);
            (answer.0 == 200).then_some(answer)
        })
        .await;
        assert_eq!(status, 200);
        for check in [
            "[+] voter",
            "[+] leader",
            "[+] caught up",
            "ready_lag_entries_max = 1000",
        ] {
            assert!(body.contains(check), "member {id}: {body}");
        }
    }
    let (status, body) = support::get(&http_address(&cluster, leader), "/ready", None);
    assert_eq!((status, body.as_str()), (200, "ready\n"));

    // A member waiting to be added is no voter and knows no leader.
    let spare = cluster.start_spare(4);
    let (status, body) = wait_until("the spare's HTTP port", || async {
        std::net::TcpStream::connect(http_address(&cluster, 4)).ok()?;
        Some(ready(&cluster, 4))
    })
    .await;
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("[-] voter") && body.contains("not a voter"), "{body}");
    // Added, it is a learner (promoted only after keeping up for 3 s):
    // still not ready. Once promoted, it is.
    let added = cluster.client().add_member(4, spare).await.expect("add member 4");
    assert!(
        added.members.iter().any(|member| member.id == 4 && !member.voter),
        "{added:?}"
    );
    let (status, body) = ready(&cluster, 4);
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("not a voter"), "{body}");
    wait_until("the promoted member to be ready", || async {
        (ready(&cluster, 4).0 == 200).then_some(())
    })
    .await;

    // Cut off from its quorum: the last member standing is not ready,
    // whether it led or followed, and its health stays 200.
    let survivor = cluster.a_follower(leader);
    for id in [1, 2, 3] {
        if id != survivor {
            cluster.kill(id);
        }
    }
    let body = wait_until("the survivor to be not ready", || async {
        let (status, body) = ready(&cluster, survivor);
        (status == 503).then_some(body)
    })
    .await;
    assert!(body.contains("[-] leader") && body.contains("not ready:"), "{body}");
    let (status, health) = support::get(&http_address(&cluster, survivor), "/health", None);
    assert_eq!((status, health.as_str()), (200, "ok\n"));
}
