//! State triggers on a three-member cluster: the seed's reactive-sync and
//! conditional-trigger examples (server-side "field changed" filter and a
//! worker-side condition), a trigger that resumes across a leader kill and
//! its own restart with no lost event, `compacted` for a position the
//! cluster no longer keeps, and the server-sent-events stream on the HTTP
//! port.

mod support;

use lode_client::protocol::ChangeKind;
use lode_client::state::{StateEvent, Trigger};
use lode_client::LodeError;
use serde_json::{json, Value};
use support::{server_sent_events, wait_until, TestCluster, ACCESS_TOKEN};

/// Reads a trigger until it has delivered `count` events.
async fn collect(trigger: &mut Trigger, count: usize) -> Vec<StateEvent> {
    let mut events = Vec::new();
    let deadline = tokio::time::Instant::now() + support::WAIT_MAX;
    while events.len() < count {
        assert!(
            tokio::time::Instant::now() < deadline,
            "only {} of {count} events: {events:?}",
            events.len()
        );
        events.extend(trigger.next_batch().await.expect("trigger read"));
    }
    events
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reactive_sync_and_the_conditional_trigger() {
    let cluster = TestCluster::start(3, 10_000);
    cluster.wait_for_leader().await;
    let client = cluster.client();
    let state = client.state();
    let mut profile = state.trigger().scope("users").key("profile");
    let mut server_side = state
        .trigger()
        .scope("users")
        .key("profile")
        .kinds(vec![ChangeKind::Updated])
        .field_changed("/email");
    let mut worker_side = state.trigger().scope("users").key("profile").condition(|event| {
        event.event_type == "state:updated" && event.old_value.get("email") != event.new_value.get("email")
    });

    let first = json!({ "name": "Alice", "email": "alice@example.com" });
    let renamed = json!({ "name": "Alicia", "email": "alice@example.com" });
    let moved = json!({ "name": "Alicia", "email": "alicia@example.com" });
    state.set("users", "profile", first.clone()).await.expect("set");
    state
        .set("users", "settings", json!({ "theme": "dark" }))
        .await
        .expect("set");
    state.set("users", "profile", renamed.clone()).await.expect("set");
    state.set("users", "profile", moved.clone()).await.expect("set");
    state.delete("users", "profile").await.expect("delete");

    let events = collect(&mut profile, 4).await;
    let seen: Vec<(&str, Value, Value)> = events
        .iter()
        .map(|event| (event.event_type, event.old_value.clone(), event.new_value.clone()))
        .collect();
    assert_eq!(
        seen,
        vec![
            ("state:created", Value::Null, first.clone()),
            ("state:updated", first, renamed.clone()),
            ("state:updated", renamed.clone(), moved.clone()),
            ("state:deleted", moved.clone(), Value::Null),
        ]
    );
    assert!(
        events.windows(2).all(|pair| pair[0].position < pair[1].position),
        "commit order"
    );
    assert_eq!(
        events[0].to_json(),
        json!({
            "type": "state",
            "event_type": "state:created",
            "scope": "users",
            "key": "profile",
            "old_value": null,
            "new_value": { "name": "Alice", "email": "alice@example.com" },
        })
    );
    for trigger in [&mut server_side, &mut worker_side] {
        let events = collect(trigger, 1).await;
        assert_eq!(events.len(), 1, "{events:?}");
        assert_eq!(
            (events[0].old_value.clone(), events[0].new_value.clone()),
            (renamed.clone(), moved.clone())
        );
    }
    // Nothing else matches later: a read past the last change is empty.
    assert!(server_side.next_batch().await.expect("read").is_empty());
    cluster.assert_no_errors();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trigger_resumes_across_a_leader_kill_and_its_own_restart() {
    const WRITES: u64 = 40;
    let mut cluster = TestCluster::start(3, 10_000);
    let leader = cluster.wait_for_leader().await;
    let client = cluster.client();
    let state = client.state();
    // The subscriber follows while the writes run and the leader dies; it
    // handles ten events, then stops (its process "restarts").
    let mut trigger = state.trigger().scope("jobs");
    let subscriber = tokio::spawn(async move {
        let mut handled = collect(&mut trigger, 10).await;
        handled.truncate(10);
        handled
    });
    for count in 0..WRITES {
        if count == WRITES / 2 {
            cluster.kill(leader);
        }
        state.set("jobs", "counter", json!(count)).await.expect("set");
    }
    let mut handled = subscriber.await.expect("the subscriber");
    let resume = handled[9].position;
    let mut resumed = state.trigger().scope("jobs").after(resume);
    handled.extend(collect(&mut resumed, (WRITES - 10) as usize).await);
    let values: Vec<Value> = handled.iter().map(|event| event.new_value.clone()).collect();
    let expected: Vec<Value> = (0..WRITES).map(|count| json!(count)).collect();
    assert_eq!(
        values, expected,
        "every change once, in commit order, across the restart"
    );
    cluster.assert_no_errors_except(&["unreachable", "connection refused", "Connection refused"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_position_older_than_the_retained_window_is_compacted() {
    let cluster = TestCluster::start_with_flags(1, 10_000, &["--change-log-events-max", "5"]);
    cluster.wait_for_leader().await;
    let state = cluster.client().state();
    for count in 0..20 {
        state.set("s", "k", json!(count)).await.expect("set");
    }
    let trigger = state.trigger().scope("s");
    let error = wait_until("the change log to be trimmed", || async {
        trigger.clone().next_batch().await.err()
    })
    .await;
    assert!(matches!(error, LodeError::Compacted { .. }), "{error:?}");
    cluster.assert_no_errors();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn triggers_stream_as_server_sent_events_and_resume_by_last_event_id() {
    let cluster = TestCluster::start_with_http(3, 10_000);
    cluster.wait_for_leader().await;
    let state = cluster.client().state();
    state
        .set("users", "profile", json!({ "email": "a@example.com" }))
        .await
        .expect("set");
    state
        .set("users", "profile", json!({ "email": "a@example.com", "n": 1 }))
        .await
        .expect("set");
    state
        .set("users", "profile", json!({ "email": "b@example.com" }))
        .await
        .expect("set");
    let address = cluster.kv_connect_url(1).trim_start_matches("http://").to_owned();

    let read_events = |query: &str, last_event_id: Option<&str>, count: usize| {
        server_sent_events(
            &address,
            &format!("/state/v1/triggers?{query}"),
            ACCESS_TOKEN,
            last_event_id,
            count,
        )
    };
    let all = read_events("scope=users&key=profile", None, 3);
    assert_eq!(all[0].1["event_type"], "state:created");
    assert_eq!(all[2].1["new_value"], json!({ "email": "b@example.com" }));
    let changed = read_events("scope=users&changed=/email&kinds=updated", None, 1);
    assert_eq!(changed[0].1["new_value"]["email"], "b@example.com");
    assert_eq!(changed[0].0, all[2].0);
    let resumed = read_events("scope=users", Some(&all[0].0), 2);
    assert_eq!(resumed[0].0, all[1].0, "resumes right after the last event id");
    cluster.assert_no_errors();
}
