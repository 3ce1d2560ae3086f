//! Users, roles and grants on a real three-member cluster started with a
//! bootstrap token: what each token may read and write, what a refusal
//! says, that a refused atomic write applies nothing, that listings and
//! the change feed show only what the caller may read, that only admins
//! change the membership, that a token or grant given moments ago works on
//! a follower that had not applied it yet, and that revoked and expired
//! tokens stop working on every member.

mod support;

use lode_client::protocol::{Operation, WriteRequest};
use lode_client::LodeError;
use support::{client_with, secured, user_with, wait_until, Secured};

fn assert_forbidden(error: LodeError, namespace: &str) {
    match &error {
        LodeError::Forbidden { namespace: refused, .. } => assert_eq!(refused, namespace, "{error}"),
        other => panic!("expected forbidden on {namespace:?}, got {other}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grants_decide_what_each_token_may_read_write_and_see() {
    let Secured { cluster, root, .. } = secured().await;
    root.kv("config")
        .set("k")
        .bytes("v")
        .send()
        .await
        .expect("root writes config");
    root.kv("secrets")
        .set("s")
        .bytes("hidden")
        .send()
        .await
        .expect("root writes secrets");
    let issued = user_with(&root, "reader", &["read:config", "write:scratch"]).await;
    let reader = client_with(&cluster, cluster.endpoints(), &issued.token);

    let entry = reader.kv("config").get("k").await.expect("read config");
    assert_eq!(entry, Some(b"v".to_vec()));
    let refused = reader
        .kv("config")
        .set("k")
        .bytes("mine")
        .send()
        .await
        .expect_err("write");
    assert_forbidden(refused, "config");
    assert_forbidden(reader.kv("secrets").get("s").await.expect_err("read"), "secrets");
    let mut names = reader.kv_namespaces().await.expect("namespaces");
    names.sort();
    assert!(!names.contains(&"secrets".to_owned()), "{names:?}");
    assert!(names.contains(&"config".to_owned()), "{names:?}");

    // One forbidden operation refuses the whole write: nothing applies.
    let copy = Operation::Copy {
        namespace: "config".to_owned(),
        key: b"k".to_vec(),
        to_namespace: "secrets".to_owned(),
        to_key: b"copied".to_vec(),
        remove_source: false,
    };
    let scratch = support::plain_set("scratch", b"x".to_vec(), b"1".to_vec());
    let request = WriteRequest {
        op_id: lode_client::sdk::new_op_id(),
        operations: vec![scratch, copy],
    };
    let refused = reader.write(request).await.expect_err("a write with a forbidden copy");
    assert!(refused.to_string().contains("operation 1 (copy)"), "{refused}");
    assert_forbidden(refused, "secrets");
    assert_eq!(
        root.kv("scratch").get("x").await.expect("read"),
        None,
        "part of a refused write applied"
    );
    assert_eq!(root.kv("secrets").get("copied").await.expect("read"), None);

    // The change feed shows only namespaces the reader may read.
    let mut feed = reader.changes((0, 0));
    let events = feed.next_batch().await.expect("changes");
    assert!(!events.is_empty(), "the reader sees config's change");
    assert!(events.iter().all(|event| event.namespace == "config"), "{events:?}");

    // Membership is for admins.
    let refused = reader
        .add_member(9, "127.0.0.1:1")
        .await
        .expect_err("a reader adds a member");
    assert!(refused.is_forbidden(), "{refused}");
    let status = reader.cluster_status().await.expect("status");
    assert!(status.members.iter().all(|member| member.peer_address.is_empty()));
    cluster.assert_no_errors();
}

/// Whether a connection to the member at `address` holds bytes the member
/// has not read yet (it is stopped, so a call sent to it waits there).
fn unread_call_at(address: &str) -> bool {
    let port = address.rsplit(':').next().expect("address has a port");
    let output = std::process::Command::new("ss")
        .args(["-Htn", "state", "established", &format!("( sport = :{port} )")])
        .output()
        .expect("ss (iproute2)");
    assert!(output.status.success(), "ss failed: {output:?}");
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .any(|line| line.split_whitespace().next().is_some_and(|unread| unread != "0"))
}

/// Sends `call` to the stopped `follower` and lets the member go on once
/// the call waits in its socket, so the call arrives before the leader's
/// next append does.
async fn resume_once_sent<T: Send + 'static>(
    cluster: &support::TestCluster,
    follower: u64,
    call: impl std::future::Future<Output = T> + Send + 'static,
) -> T {
    let call = tokio::spawn(call);
    let address = cluster.address_of(follower);
    wait_until("the call to wait at the stopped follower", || async {
        unread_call_at(&address).then_some(())
    })
    .await;
    cluster.signal(follower, "CONT");
    call.await.expect("call task")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_and_a_grant_given_moments_ago_work_on_a_follower_that_lags() {
    let Secured {
        cluster, root_token, ..
    } = secured().await;
    let leader = cluster.wait_for_leader().await;
    let follower = cluster.a_follower(leader);
    let root = client_with(&cluster, vec![cluster.address_of(leader)], &root_token);
    for namespace in ["config", "other", "secrets"] {
        root.kv(namespace)
            .set("k")
            .bytes("v")
            .send()
            .await
            .expect("root writes");
    }

    // Stopped, the follower misses the user and its token.
    cluster.signal(follower, "STOP");
    let issued = user_with(&root, "late", &["read:config"]).await;
    let late = client_with(&cluster, vec![cluster.address_of(follower)], &issued.token);
    let read = resume_once_sent(&cluster, follower, {
        let late = late.clone();
        async move { late.kv("config").get("k").await }
    })
    .await
    .expect("a token issued before the call works on a follower that had not applied it");
    assert_eq!(read, Some(b"v".to_vec()));

    // Then a grant, on a connection it has already authenticated.
    cluster.signal(follower, "STOP");
    let grants = ["read:config", "read:other"]
        .iter()
        .map(|grant| lode_types::auth::Grant::parse(grant).expect("grant"))
        .collect();
    root.auth().put_role("late", grants).await.expect("grant read:other");
    let read = resume_once_sent(&cluster, follower, {
        let late = late.clone();
        async move { late.kv("other").get("k").await }
    })
    .await
    .expect("a grant given before the call is honoured by a follower that had not applied it");
    assert_eq!(read, Some(b"v".to_vec()));

    // Refusals still hold once the follower has caught up.
    let refused = late.kv("secrets").get("k").await.expect_err("no grant on secrets");
    assert_forbidden(refused, "secrets");
    let forged = lode_client::protocol::AccessToken(lode_client::auth::new_token().to_text());
    let stranger = client_with(&cluster, vec![cluster.address_of(follower)], &forged);
    let refused = stranger.kv("config").get("k").await.expect_err("an unknown token");
    assert!(refused.is_unauthorized(), "{refused}");
    cluster.assert_no_errors();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revoked_and_expired_tokens_stop_working_on_every_member() {
    let Secured { cluster, root, .. } = secured().await;
    root.kv("config").set("k").bytes("v").send().await.expect("write");
    let issued = user_with(&root, "service", &["read:config"]).await;
    let members: Vec<u64> = cluster.running();
    // The same connections before and after: a member's decision for a
    // connection must not outlive the revocation.
    let clients: Vec<_> = members
        .iter()
        .map(|id| client_with(&cluster, vec![cluster.members[id].address.clone()], &issued.token))
        .collect();
    for one in &clients {
        one.kv("config")
            .get("k")
            .await
            .expect("the token works on every member");
    }
    root.auth().revoke_token(issued.id).await.expect("revoke");
    for (id, one) in members.iter().zip(&clients) {
        wait_until(&format!("member {id} to refuse the revoked token"), || async {
            match one.kv("config").get("k").await {
                Err(error) if error.is_unauthorized() => Some(()),
                _ => None,
            }
        })
        .await;
    }

    let short = root
        .auth()
        .issue_token("service", Some(std::time::Duration::from_millis(300)))
        .await
        .expect("a short token");
    let expiring = client_with(&cluster, cluster.endpoints(), &short.token);
    wait_until("the short token to expire", || async {
        match expiring.kv("config").get("k").await {
            Err(error) if error.is_unauthorized() => Some(()),
            _ => None,
        }
    })
    .await;
    // A user that was removed takes its tokens with it.
    let other = user_with(&root, "gone", &["read:config"]).await;
    root.auth().remove_user("gone").await.expect("remove user");
    let removed = client_with(&cluster, cluster.endpoints(), &other.token);
    let refused = removed.kv("config").get("k").await.expect_err("a removed user's token");
    assert!(refused.is_unauthorized(), "{refused}");
    // An auth change is an admin's.
    let service = user_with(&root, "writer", &["write:"]).await;
    let writer = client_with(&cluster, cluster.endpoints(), &service.token);
    assert_may_not_add_users(&writer).await;
}

async fn assert_may_not_add_users(client: &lode_client::Client) {
    let refused = client.auth().put_user("mallory").await.expect_err("a user added");
    assert!(refused.is_forbidden(), "{refused}");
}

/// The HTTP port acts as the token's user: the State API honours the
/// user's grants, and the shared access token stops working once the
/// cluster has users.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_http_port_acts_as_the_caller_with_its_grants() {
    use serde_json::{json, Value};
    let Secured { cluster, root, .. } = secured().await;
    let issued = user_with(&root, "profiles", &["write:state:users"]).await;
    let leader = cluster.wait_for_leader().await;
    let address = cluster.kv_connect_url(leader).trim_start_matches("http://").to_owned();
    let call = |token: &str, function: &str, body: Value| -> (u16, Value) {
        let (status, text) = support::post(
            &address,
            &format!("/state/v1/{function}"),
            Some(token),
            "application/json",
            body.to_string().as_bytes(),
        );
        (status, serde_json::from_str(text.trim()).unwrap_or(Value::String(text)))
    };
    let token = issued.token.0.clone();
    let (status, body) = call(&token, "set", json!({ "scope": "users", "key": "u1", "value": 1 }));
    assert_eq!(status, 200, "{body}");
    let (status, body) = call(&token, "get", json!({ "scope": "users", "key": "u1" }));
    assert_eq!((status, body), (200, json!(1)));
    let (status, body) = call(&token, "set", json!({ "scope": "orders", "key": "o1", "value": 1 }));
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (403, Some("forbidden")),
        "{body}"
    );
    let (status, body) = call(&token, "list_groups", json!({}));
    assert_eq!((status, body), (200, json!({ "groups": ["users"] })));
    let (status, _) = call(support::ACCESS_TOKEN, "get", json!({ "scope": "users", "key": "u1" }));
    assert_eq!(status, 401, "the shared token still works with users");
    let (status, metrics) = support::get(&address, "/metrics", None);
    assert_eq!(status, 200, "without --metrics-role, metrics are open: {metrics}");
    root.auth().revoke_token(issued.id).await.expect("revoke");
    wait_until("the HTTP port to refuse the revoked token", || async {
        let (status, _) = call(&token, "get", json!({ "scope": "users", "key": "u1" }));
        (status == 401).then_some(())
    })
    .await;
}

/// The KV JSON API acts as the token's user too: writes and reads of a
/// namespace outside its grants are `forbidden`, and listings and the
/// change feed show only what it may read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kv_json_api_acts_as_the_caller_with_its_grants() {
    use serde_json::{json, Value};
    let Secured { cluster, root, .. } = secured().await;
    let issued = user_with(&root, "configurer", &["write:config"]).await;
    let written = root
        .kv("secrets")
        .set("password")
        .bytes("hunter2")
        .send()
        .await
        .expect("root writes");
    let leader = cluster.wait_for_leader().await;
    let follower = cluster.a_follower(leader);
    // A follower knows a token once it has applied its creation.
    cluster.wait_applied(follower, written).await;
    let address = cluster
        .kv_connect_url(follower)
        .trim_start_matches("http://")
        .to_owned();
    let token = issued.token.0.clone();
    let call = |path: &str, body: Value| -> (u16, Value) {
        let (status, text) = support::post(
            &address,
            &format!("/kv/v1/{path}"),
            Some(&token),
            "application/json",
            body.to_string().as_bytes(),
        );
        (status, serde_json::from_str(text.trim()).unwrap_or(Value::String(text)))
    };
    let set =
        |namespace: &str| json!({ "operations": [{ "op": "set", "namespace": namespace, "key": "k", "value": "v" }] });
    let (status, body) = call("write", set("config"));
    assert_eq!(status, 200, "{body}");
    let (status, body) = call("write", set("secrets"));
    assert_eq!(
        (status, body["error"]["kind"].as_str()),
        (403, Some("forbidden")),
        "{body}"
    );
    let (status, body) = call(
        "read",
        json!({ "query": { "op": "get", "namespace": "secrets", "key": "password" } }),
    );
    assert_eq!(
        (status, body["error"]["kind"].as_str()),
        (403, Some("forbidden")),
        "{body}"
    );
    let (status, body) = call("read", json!({ "query": { "op": "namespaces" } }));
    assert_eq!((status, body["namespaces"].clone()), (200, json!(["config"])), "{body}");
    // The feed holds the root's secret first, then the user's write; the
    // user sees only its own.
    let first = support::server_sent_events(&address, "/kv/v1/changes", &token, None, 1);
    assert_eq!(first[0].1["namespace"], "config", "{first:?}");
    let (status, _) = support::post(
        &address,
        "/kv/v1/write",
        Some(support::ACCESS_TOKEN),
        "application/json",
        set("config").to_string().as_bytes(),
    );
    assert_eq!(status, 401, "the shared token no longer works once users exist");
}

/// On the client port a certificate signed by the cluster CA names the
/// user of its common name, as etcd does: that user's grants apply with no
/// token, and a certificate naming no user is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_certificate_names_the_user_of_its_common_name() {
    use lode_client::tls::ClientTls;
    use lode_client::{Client, ClientOptions};
    let directory = tempfile::tempdir().expect("temporary directory");
    let (path, root_token) = support::bootstrap_token_file(directory.path());
    let cluster = support::TestCluster::start_with_tls_and_flags(3, 10_000, &["--bootstrap-token-file", &path]);
    cluster.wait_for_leader().await;
    let root = client_with(&cluster, cluster.endpoints(), &root_token);
    wait_until("the bootstrap admin", || async {
        root.kv("config").set("k").bytes("v").send().await.ok()
    })
    .await;
    // `make_certificates` issues `client` (common name "client") and `member`.
    user_with(&root, "client", &["read:config"]).await;
    let tls_dir = cluster.tls_dir.clone().expect("a TLS cluster");
    let with_certificate = |name: &str| {
        let identity = (
            tls_dir.join(format!("{name}.pem")),
            tls_dir.join(format!("{name}-key.pem")),
        );
        let tls = ClientTls::from_files(
            &tls_dir.join("ca.pem"),
            Some((identity.0.as_path(), identity.1.as_path())),
        )
        .expect("client TLS");
        let options = ClientOptions {
            tls: Some(tls),
            ..ClientOptions::default()
        };
        Client::with_options(cluster.endpoints(), options).expect("client")
    };
    let client = with_certificate("client");
    let entry = client
        .kv("config")
        .get("k")
        .await
        .expect("the certificate's user reads config");
    assert_eq!(entry, Some(b"v".to_vec()));
    let refused = client
        .kv("config")
        .set("k")
        .bytes("mine")
        .send()
        .await
        .expect_err("a write");
    assert!(refused.is_forbidden(), "{refused}");
    let nobody = with_certificate("member");
    let refused = nobody
        .kv("config")
        .get("k")
        .await
        .expect_err("a certificate naming no user");
    assert!(refused.is_unauthorized(), "{refused}");
}

/// Session links are a namespace a grant can name (`\0session\0<stream>`):
/// writing with a link needs `write` on it, listing a session's keys
/// `read`, and a listing leaves out keys of namespaces the caller may not
/// read. A grant on the auth namespace alone does not make an admin.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_links_and_auth_management_need_their_own_grants() {
    use lode_client::protocol::SessionLink;
    let Secured { cluster, root, .. } = secured().await;
    let session = SessionLink {
        stream: "checkout".to_owned(),
        session_id: "s1".to_owned(),
    };
    let unlinked = user_with(&root, "unlinked", &["write:orders"]).await;
    let unlinked = client_with(&cluster, cluster.endpoints(), &unlinked.token);
    unlinked
        .kv("orders")
        .set("plain")
        .bytes("1")
        .send()
        .await
        .expect("a write without a link");
    let refused = unlinked
        .kv("orders")
        .in_session(session.clone())
        .set("o1")
        .bytes("1")
        .send()
        .await
        .expect_err("a linked write without the session grant");
    assert_forbidden(refused, "\\0session\\0checkout");
    assert_eq!(root.kv("orders").get("o1").await.expect("read"), None);
    let refused = unlinked.session_keys(&session).await.expect_err("a listing");
    assert_forbidden(refused, "\\0session\\0checkout");

    let linked = user_with(&root, "linked", &["write:orders", "write:\\0session\\0checkout"]).await;
    let linked = client_with(&cluster, cluster.endpoints(), &linked.token);
    linked
        .kv("orders")
        .in_session(session.clone())
        .set("o1")
        .bytes("1")
        .send()
        .await
        .expect("a linked write with the grant");
    root.kv("secrets")
        .in_session(session.clone())
        .set("s1")
        .bytes("hidden")
        .send()
        .await
        .expect("root writes secrets in the session");
    let keys = linked.session_keys(&session).await.expect("the linked user lists");
    assert_eq!(keys, vec![("orders".to_owned(), b"o1".to_vec())]);
    let all = root.session_keys(&session).await.expect("root lists");
    assert_eq!(all.len(), 2, "{all:?}");

    let auth_only = user_with(&root, "auth-only", &["admin:\\0auth"]).await;
    assert_may_not_add_users(&client_with(&cluster, cluster.endpoints(), &auth_only.token)).await;
    cluster.assert_no_errors();
}

/// `/health` and `/ready` need no token and show no data; `/metrics` is
/// open unless `--metrics-role` names a role, then it needs a user holding
/// it (or an admin).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_need_the_configured_role_and_health_needs_nothing() {
    let Secured {
        cluster,
        root,
        root_token,
        ..
    } = support::secured_with(&["--metrics-role", "monitoring"]).await;
    root.kv("secrets")
        .set("password")
        .bytes("hunter2")
        .send()
        .await
        .expect("root writes");
    let leader = cluster.wait_for_leader().await;
    let address = cluster.kv_connect_url(leader).trim_start_matches("http://").to_owned();
    let (status, health) = support::get(&address, "/health", None);
    assert_eq!((status, health.as_str()), (200, "ok\n"));
    let (status, ready) = support::get(&address, "/ready", None);
    assert_eq!(status, 200, "{ready}");
    assert!(!ready.contains("secrets") && !ready.contains("hunter2"), "{ready}");

    let (status, body) = support::get(&address, "/metrics", None);
    assert_eq!(status, 401, "{body}");
    let reader = user_with(&root, "reader", &["read:"]).await;
    let (status, body) = support::get(&address, "/metrics", Some(&reader.token.0));
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("monitoring"), "the refusal names the role: {body}");
    let monitor = user_with(&root, "scraper", &[]).await;
    root.auth().put_role("monitoring", Vec::new()).await.expect("role");
    root.auth().bind_role("scraper", "monitoring").await.expect("bind");
    let metrics = wait_until("the scraper's role to reach the member", || async {
        let (status, body) = support::get(&address, "/metrics", Some(&monitor.token.0));
        (status == 200).then_some(body)
    })
    .await;
    assert!(metrics.contains("lode_raft_term"), "{metrics}");
    assert!(!metrics.contains("hunter2"), "{metrics}");
    let (status, _) = support::get(&address, "/metrics", Some(&root_token.0));
    assert_eq!(status, 200, "an admin reads metrics");
    cluster.assert_no_errors();
}

/// A member started with a bootstrap token is never open: until a user
/// exists in its state (a spare not yet added has none), it lets in only
/// that token, so no one can create the first user before the admin.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_with_a_bootstrap_token_lets_in_only_that_token_before_any_user() {
    let Secured {
        mut cluster,
        root_token,
        _directory,
        ..
    } = secured().await;
    let path = _directory.path().join("root.token").to_string_lossy().into_owned();
    let output = cluster.lode(&["cluster", "status", "--json", "--token-file", &path]);
    assert!(output.status.success(), "{output:?}");
    let status: serde_json::Value = serde_json::from_slice(&output.stdout).expect("status JSON");
    let cluster_id = status["cluster_id"].as_str().expect("a cluster id").to_owned();
    cluster.start_spare_with(
        4,
        &[
            "--cluster-id".to_owned(),
            cluster_id,
            "--bootstrap-token-file".to_owned(),
            path,
        ],
    );
    let anonymous = cluster.client_of(4);
    let refused = wait_until("the spare to answer", || async {
        match anonymous.kv_namespaces().await {
            Err(error) if error.is_unauthorized() => Some(error),
            Err(LodeError::Unavailable(_) | LodeError::Timeout(_) | LodeError::NotLeader { .. }) => None,
            other => panic!("an anonymous call to a member without users: {other:?}"),
        }
    })
    .await;
    assert!(refused.is_unauthorized());
    let spare_with = |token: &lode_client::protocol::AccessToken| {
        let options = lode_client::ClientOptions {
            token: Some(token.clone()),
            call_timeout: std::time::Duration::from_secs(2),
            attempt_timeout: std::time::Duration::from_secs(1),
            ..cluster.options()
        };
        lode_client::Client::with_options([cluster.address_of(4)], options).expect("client")
    };
    let someone = lode_client::protocol::AccessToken(lode_client::auth::new_token().to_text());
    let refused = spare_with(&someone).kv_namespaces().await.expect_err("another token");
    assert!(refused.is_unauthorized(), "{refused}");
    // The bootstrap token gets past authentication (the spare, in no
    // cluster yet, may still be unable to answer).
    let admin = spare_with(&root_token);
    if let Err(error) = admin.kv_namespaces().await {
        assert!(!error.is_unauthorized() && !error.is_forbidden(), "{error}");
    }
}
