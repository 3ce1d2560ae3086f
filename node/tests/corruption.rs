//! Damaged storage found at open: a flipped bit in a state table, a
//! truncated table and a flipped bit in the log's write-ahead log, each
//! made in a stopped member's data directory on real RocksDB. The member
//! must refuse to start, exit with a failure and name the damaged file;
//! then, started on an empty data directory (README: replacing a member's
//! disk), it is readmitted and catches up from its peers with every value.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;

use support::{run_checked, wait_for_voter, TestCluster};

/// Small, so the replaced member catches up from a snapshot.
const SNAPSHOT_LOGS_MAX: u64 = 50;
const VALUES: usize = 300;
/// Large enough that the values (12 MB) overflow the state's memtable of
/// entries (8 MiB, `MEMTABLE_BYTES_BUSY` in raft-store's `rocks.rs`), so the
/// state holds table files to damage: a snapshot no longer flushes them.
const VALUE_BYTES: usize = 40_000;
const NAMESPACE: &str = "damage";

fn value_of(index: usize) -> Vec<u8> {
    let mut value = format!("value {index} ").into_bytes();
    value.resize(VALUE_BYTES, b'a' + (index % 26) as u8);
    value
}

/// The largest file named `*.{extension}` in `directory`.
fn largest_file(directory: &Path, extension: &str) -> PathBuf {
    let mut files: Vec<(u64, PathBuf)> = std::fs::read_dir(directory)
        .expect("list the database")
        .map(|entry| entry.expect("a directory entry").path())
        .filter(|path| path.extension().is_some_and(|found| found == extension))
        .map(|path| (std::fs::metadata(&path).expect("a file's size").len(), path))
        .collect();
    files.sort();
    files
        .pop()
        .unwrap_or_else(|| panic!("no .{extension} file in {}", directory.display()))
        .1
}

/// Inverts one byte in the middle of `path`.
fn flip_byte(path: &Path) {
    let mut bytes = std::fs::read(path).expect("read the file to damage");
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    std::fs::write(path, bytes).expect("write the damaged file");
}

fn truncate_to_half(path: &Path) {
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .expect("open the file to cut");
    let length = file.metadata().expect("the file's size").len();
    file.set_len(length / 2).expect("cut the file");
}

fn copy_directory(from: &Path, to: &Path) {
    let _ = std::fs::remove_dir_all(to);
    run_checked("copy a data directory", Command::new("cp").arg("-a").arg(from).arg(to));
}

/// Starts member `id` on its (damaged) directory and checks that it exits
/// with a failure whose log names `file` and says what to do.
fn assert_refuses_to_start(cluster: &mut TestCluster, id: u64, file: &Path) {
    let logged_before = cluster.log_text(id).len();
    cluster.restart_as_founder(id);
    let status = cluster.wait_for_exit(id);
    assert!(!status.success(), "member {id} started on a damaged directory");
    let log = cluster.log_text(id).split_off(logged_before);
    let name = file.file_name().and_then(|name| name.to_str()).expect("a file name");
    let line = log
        .lines()
        .rev()
        .find(|line| line.contains("corrupt database"))
        .unwrap_or_else(|| panic!("member {id}'s log has no corrupt-database line:\n{log}"));
    assert!(line.contains(name), "the refusal does not name {name}: {line}");
    assert!(
        line.contains("start it with an empty one"),
        "the refusal does not say what to do: {line}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn damaged_tables_and_logs_stop_the_start_naming_the_file_and_the_member_is_replaced_from_its_peers() {
    let mut cluster = TestCluster::start(3, SNAPSHOT_LOGS_MAX);
    let leader = cluster.wait_for_leader().await;
    let kv = cluster.client().kv(NAMESPACE);
    let mut written = Vec::new();
    for index in 0..VALUES {
        let key = format!("k{index}");
        let version = kv.set(&key).bytes(value_of(index)).send().await.expect("a write");
        written.push((key, version));
    }
    let damaged = cluster.a_follower(leader);
    let data_dir = cluster.members[&damaged].data_dir.clone();
    cluster.stop_gracefully(damaged);
    let pristine = data_dir.with_extension("pristine");
    copy_directory(&data_dir, &pristine);

    let state = data_dir.join("state").join("db");
    let table = largest_file(&state, "sst");
    flip_byte(&table);
    assert_refuses_to_start(&mut cluster, damaged, &table);

    copy_directory(&pristine, &data_dir);
    truncate_to_half(&table);
    assert_refuses_to_start(&mut cluster, damaged, &table);

    copy_directory(&pristine, &data_dir);
    let write_ahead_log = largest_file(&data_dir.join("log").join("db"), "log");
    flip_byte(&write_ahead_log);
    assert_refuses_to_start(&mut cluster, damaged, &write_ahead_log);

    // Writes go on meanwhile; then the member gets an empty directory.
    for index in VALUES..VALUES + 20 {
        let key = format!("k{index}");
        let version = kv.set(&key).bytes(value_of(index)).send().await.expect("a write");
        written.push((key, version));
    }
    std::fs::rename(&data_dir, data_dir.with_extension("damaged")).expect("move the damaged directory aside");
    cluster.restart_as_founder(damaged);
    let last = written.last().map(|(_, version)| *version).unwrap_or(0);
    cluster.wait_applied(damaged, last).await;
    wait_for_voter(&cluster.client(), damaged).await;
    // Read from the replaced member's own state.
    let replaced = cluster.client_of(damaged).kv(NAMESPACE);
    for (index, (key, version)) in written.iter().enumerate() {
        let entry = replaced
            .get_entry(key)
            .await
            .expect("a read from the replaced member")
            .unwrap_or_else(|| panic!("{key} is missing on the replaced member"));
        assert_eq!((entry.version, entry.value), (*version, value_of(index)), "{key}");
    }
    cluster.assert_no_errors_except(&["corrupt database"]);
}
