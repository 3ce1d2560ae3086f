//! `/metrics` on a real member: the metrics a slow write is explained by
//! move with writes, and every series the Grafana dashboard in
//! `k8s/monitoring/grafana-dashboard.json` queries exists.

mod support;

use std::collections::BTreeSet;

use support::TestCluster;

/// The names of the series a dashboard's queries read.
fn dashboard_series() -> BTreeSet<String> {
    let text = include_str!("../../k8s/monitoring/grafana-dashboard.json");
    let dashboard: serde_json::Value = serde_json::from_str(text).expect("the dashboard is JSON");
    let mut names = BTreeSet::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        for target in panel["targets"].as_array().expect("targets") {
            let query = target["expr"].as_str().expect("a query");
            for prefix in ["lode_", "process_"] {
                let mut rest = query;
                while let Some(at) = rest.find(prefix) {
                    let name: String = rest[at..]
                        .chars()
                        .take_while(|character| character.is_ascii_alphanumeric() || *character == '_')
                        .collect();
                    rest = &rest[at + name.len()..];
                    names.insert(name);
                }
            }
        }
    }
    names
}

/// The series names a scrape holds, with their value on the first line.
fn scraped(body: &str) -> std::collections::BTreeMap<String, f64> {
    let mut series = std::collections::BTreeMap::new();
    for line in body.lines().filter(|line| !line.starts_with('#')) {
        let name: String = line
            .chars()
            .take_while(|character| character.is_ascii_alphanumeric() || *character == '_')
            .collect();
        let value = line
            .rsplit(' ')
            .next()
            .and_then(|value| value.parse().ok())
            .unwrap_or(0.0);
        series.entry(name).or_insert(value);
    }
    series
}

#[tokio::test(flavor = "multi_thread")]
async fn every_series_of_the_dashboard_exists_and_writes_move_the_write_metrics() {
    let cluster = TestCluster::start_with_http(3, 10_000);
    let leader = cluster.wait_for_leader().await;
    let kv = cluster.client_of(leader).kv("config");
    for index in 0..20 {
        kv.set(format!("key-{index}")).bytes("value").send().await.expect("set");
    }
    let address = cluster.kv_connect_url(leader).trim_start_matches("http://").to_owned();
    let (status, body) = support::get(&address, "/metrics", None);
    assert_eq!(status, 200, "{body}");
    assert!(body.trim_end().ends_with("# EOF"), "OpenMetrics text ends with EOF");
    let series = scraped(&body);
    let missing: Vec<String> = dashboard_series()
        .into_iter()
        .filter(|name| !series.contains_key(name))
        .collect();
    assert!(
        missing.is_empty(),
        "the dashboard queries series no member exports: {missing:?}"
    );
    assert!(series["lode_log_append_duration_seconds_count"] >= 20.0, "{body}");
    // The leader syncs its own appends in the background, several at once
    // when they come close together.
    assert!(series["lode_log_sync_duration_seconds_count"] >= 1.0, "{body}");
    assert!(series["lode_apply_duration_seconds_count"] >= 20.0);
    assert!(series["lode_commands_per_entry_count"] >= 1.0);
    assert_eq!(series["lode_raft_is_leader"], 1.0);
    assert!(series["lode_state_bytes"] > 0.0);
    assert!(series.contains_key("lode_block_cache_bytes"), "{body}");
    assert!(series.contains_key("lode_table_readers_bytes"), "{body}");
    // The process's own series, under the names every exporter uses (the
    // test's process: its members run in it).
    assert!(series["process_cpu_seconds_total"] > 0.0, "{body}");
    assert!(
        series["process_resident_memory_bytes"] > f64::from(1u32 << 20),
        "{body}"
    );
    assert!(series["process_virtual_memory_bytes"] >= series["process_resident_memory_bytes"]);
    assert!(series["process_threads"] >= 1.0, "{body}");
    assert!(series["process_open_fds"] >= 3.0, "{body}");
    assert!(series["process_max_fds"] >= series["process_open_fds"], "{body}");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_secs_f64();
    let started = series["process_start_time_seconds"];
    assert!(
        started <= now + 1.0 && started > now - 3600.0,
        "started {started}, now {now}"
    );
    let entries_bytes = body
        .lines()
        .find(|line| line.starts_with("lode_space_bytes{space=\"entries\"}"))
        .and_then(|line| line.rsplit(' ').next()?.parse::<f64>().ok());
    assert!(entries_bytes.is_some_and(|bytes| bytes > 0.0), "{body}");
    assert!(series["lode_quota_bytes"] > 0.0);
    let writes = body
        .lines()
        .find(|line| {
            line.starts_with("lode_request_duration_seconds_count")
                && line.contains("api=\"kv\"")
                && line.contains("call=\"write\"")
                && line.contains("operation=\"set\"")
                && line.contains("outcome=\"ok\"")
        })
        .expect("a count of kv writes");
    let count: f64 = writes
        .rsplit(' ')
        .next()
        .and_then(|value| value.parse().ok())
        .expect("a count");
    assert!(count >= 20.0, "{writes}");
    for port in ["client", "peer", "http"] {
        assert!(
            body.contains(&format!("lode_connections_open{{port=\"{port}\"}}")),
            "{body}"
        );
    }
    // The scrape itself is the HTTP port's request in flight; the writes'
    // counts went back to zero.
    assert!(body.contains("lode_requests_in_flight{port=\"http\"} 1"), "{body}");
    assert!(body.contains("lode_requests_in_flight{port=\"client\"} 0"), "{body}");
    // Every follower shows on the leader with its lag.
    for id in (1..=3).filter(|id| *id != leader) {
        assert!(
            body.contains(&format!("lode_raft_replication_lag_entries{{follower=\"{id}\"}}")),
            "{body}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_snapshot_sent_to_a_new_member_shows_on_the_leader() {
    // Snapshots every 50 entries: the leader's log is purged, so a new
    // member catches up from a snapshot.
    let mut cluster = TestCluster::start_with_http(3, 50);
    let leader = cluster.wait_for_leader().await;
    let client = cluster.client();
    let kv = client.kv("config");
    for index in 0..200 {
        kv.set(format!("key-{index}")).bytes("value").send().await.expect("set");
    }
    let address = cluster.start_spare(4);
    client.add_member(4, address).await.expect("add member 4");
    let leader_http = cluster.kv_connect_url(leader).trim_start_matches("http://").to_owned();
    let series = support::wait_until("the leader to count a snapshot sent", || async {
        let series = scraped(&support::get(&leader_http, "/metrics", None).1);
        (series.get("lode_snapshots_sent_total").copied().unwrap_or(0.0) >= 1.0).then_some(series)
    })
    .await;
    assert!(series["lode_snapshot_sent_bytes_total"] > 0.0, "{series:?}");
    assert!(series["lode_snapshot_built_bytes_total"] > 0.0, "{series:?}");
    assert!(series["lode_snapshot_send_duration_seconds_count"] >= 1.0, "{series:?}");
    // The image existed only to be sent: no member keeps a second copy
    // of its state once the new member has installed it.
    let member_ids: Vec<u64> = cluster.members.keys().copied().collect();
    for id in member_ids {
        let snapshots = cluster.members[&id].data_dir.join("state").join("snapshots");
        support::wait_until("images to go once sent and installed", || async {
            let names: Vec<String> = std::fs::read_dir(&snapshots)
                .map(|items| {
                    items
                        .filter_map(Result::ok)
                        .map(|item| item.file_name().to_string_lossy().into_owned())
                        .collect()
                })
                .unwrap_or_default();
            names.iter().all(|name| name == "current").then_some(())
        })
        .await;
    }
    let spare_http = cluster.kv_connect_url(4).trim_start_matches("http://").to_owned();
    let received = scraped(&support::get(&spare_http, "/metrics", None).1);
    assert!(received["lode_snapshot_received_bytes_total"] > 0.0, "{received:?}");
    assert!(
        received["lode_snapshot_install_duration_seconds_count"] >= 1.0,
        "{received:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_log_of_large_values_is_snapshotted_by_its_size_before_its_entry_count() {
    // 48 writes of 60,000 bytes: about 2.9 MB of log in about 50 entries,
    // far under the 100,000 entries that bring a snapshot by count.
    let cluster = TestCluster::start_with_http_and_flags(3, 100_000, &["--snapshot-log-bytes-max", "1MiB"]);
    let leader = cluster.wait_for_leader().await;
    let member_ids: Vec<u64> = cluster.members.keys().copied().collect();
    let scrape = |id: u64| {
        let address = cluster.kv_connect_url(id).trim_start_matches("http://").to_owned();
        scraped(&support::get(&address, "/metrics", None).1)
    };
    for &id in &member_ids {
        let series = scrape(id);
        assert_eq!(
            series["lode_snapshot_build_duration_seconds_count"], 0.0,
            "member {id}: {series:?}"
        );
    }
    let kv = cluster.client_of(leader).kv("config");
    let value = |index: usize| vec![u8::try_from(index % 251).expect("under 251"); 60_000];
    for index in 0..48 {
        kv.set(format!("key-{index}"))
            .bytes(value(index))
            .send()
            .await
            .expect("set");
    }
    // Each megabyte of log brings a snapshot that purges the log behind
    // it, so every member's last snapshot ends up within a megabyte (17
    // entries) of its applied index, and it took two or more to get there.
    for &id in &member_ids {
        let series = support::wait_until("every member to snapshot its log by size", || async {
            let series = scrape(id);
            (series["lode_raft_applied_index"] >= 48.0
                && series["lode_raft_snapshot_index"] >= series["lode_raft_applied_index"] - 17.0)
                .then_some(series)
        })
        .await;
        assert!(
            series["lode_snapshot_build_duration_seconds_count"] >= 2.0,
            "member {id}: {series:?}"
        );
    }
    for index in [0, 23, 47] {
        let read = kv.get(format!("key-{index}")).await.expect("get");
        assert_eq!(read, Some(value(index)), "key-{index}");
    }
}

/// The value of the one series `name{labels}` a scrape holds, if any.
fn series_value(body: &str, name_and_labels: &str) -> Option<f64> {
    body.lines()
        .find_map(|line| line.strip_prefix(name_and_labels)?.trim().parse().ok())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_follower_serves_linearizable_reads_itself_after_the_leaders_read_index() {
    let cluster = TestCluster::start_with_http(3, 10_000);
    let leader = cluster.wait_for_leader().await;
    let follower = (1..=3).find(|id| *id != leader).expect("a follower");
    let writer = cluster.client_of(leader).kv("config");
    let reader = cluster.client_of(follower).kv("config");
    // Each read begins after its write was acknowledged by the leader, so
    // a follower that served one from an index asked earlier, or before
    // it applied that far, would answer the round before.
    for round in 0..50 {
        let value = format!("round-{round}");
        let version = writer.set("shared").bytes(&value).send().await.expect("write");
        let entry = reader.get_entry("shared").await.expect("read").expect("entry");
        assert_eq!((entry.value, entry.version), (value.into_bytes(), version));
    }
    let scrape = |id: u64| {
        let address = cluster.kv_connect_url(id).trim_start_matches("http://").to_owned();
        support::get(&address, "/metrics", None).1
    };
    let on_follower = scrape(follower);
    let routes = |body: &str, route: &str| {
        series_value(body, &format!("lode_linearizable_reads_total{{route=\"{route}\"}}")).unwrap_or(0.0)
    };
    assert!(routes(&on_follower, "follower") >= 50.0, "{on_follower}");
    assert_eq!(routes(&on_follower, "forwarded"), 0.0, "{on_follower}");
    // The leader answered read indexes only: it served no read itself.
    let on_leader = scrape(leader);
    assert_eq!(routes(&on_leader, "leader"), 0.0, "{on_leader}");
}
