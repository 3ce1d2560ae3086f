//! A member's data volume under faults, with real RocksDB on real, small
//! file systems the test mounts (tmpfs; the tests run as root): a volume
//! that fills refuses writes with a clear error before RocksDB meets the
//! full disk, loses nothing, and takes writes again by itself once it
//! grows; and a member whose storage fails anyway (no reserve) stops and
//! exits, acknowledging nothing after the failure, and serves everything
//! it acknowledged once restarted; restarted with less free than its
//! reserve it refuses writes from the first, until the volume grows. On a FUSE file system whose
//! fsync fails on command (`support/faulty_fs.py`), a leader whose fsync
//! fails stops and exits: it acknowledges nothing after the failure, the
//! others go on, and it comes back with everything once the disk heals.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lode_client::Client;
use support::{run_checked, wait_until, TestCluster};

const MIB: u64 = 1 << 20;
/// Under `value_bytes_max` (64 KiB), so few writes fill a volume.
const VALUE_BYTES: usize = 60_000;

/// tmpfs volumes mounted at members' data directories, unmounted when
/// dropped (lazily, so a member still running cannot keep one).
struct Volumes {
    mounts: Vec<PathBuf>,
}

impl Volumes {
    fn mount(directory: &Path, count: u64, size_bytes: u64) -> Self {
        let mut volumes = Volumes { mounts: Vec::new() };
        for id in 1..=count {
            let path = directory.join(format!("node-{id}"));
            std::fs::create_dir_all(&path).expect("mount point");
            let options = format!("size={},mode=0700", size_bytes);
            run_checked(
                "mount a tmpfs volume",
                Command::new("mount")
                    .args(["-t", "tmpfs", "-o", &options, "tmpfs"])
                    .arg(&path),
            );
            volumes.mounts.push(path);
        }
        volumes
    }

    fn resize(&self, size_bytes: u64) {
        for path in &self.mounts {
            let options = format!("remount,size={size_bytes}");
            run_checked(
                "grow a tmpfs volume",
                Command::new("mount").args(["-o", &options]).arg(path),
            );
        }
    }
}

impl Drop for Volumes {
    fn drop(&mut self) {
        for path in &self.mounts {
            let _ = Command::new("umount").arg("-l").arg(path).status();
        }
    }
}

/// Members' data directories served by `support/faulty_fs.py` from
/// backing directories beside them, each with a control file that makes
/// its fsyncs fail; unmounted and stopped when dropped.
struct FaultyVolumes {
    mounts: Vec<PathBuf>,
    controls: Vec<PathBuf>,
    servers: Vec<Child>,
}

impl FaultyVolumes {
    fn mount(directory: &Path, count: u64) -> Self {
        use std::os::unix::fs::PermissionsExt;
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/faulty_fs.py");
        let mut volumes = FaultyVolumes {
            mounts: Vec::new(),
            controls: Vec::new(),
            servers: Vec::new(),
        };
        for id in 1..=count {
            let backing = directory.join(format!("backing-{id}"));
            let mount = directory.join(format!("node-{id}"));
            for path in [&backing, &mount] {
                std::fs::create_dir_all(path).expect("a volume's directory");
                std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o700)).expect("0700");
            }
            let control = directory.join(format!("fail-fsync-{id}"));
            let server = Command::new("/usr/bin/python3")
                .arg(&script)
                .args([&backing, &mount, &control])
                .spawn()
                .expect("start faulty_fs.py (python3-fuse)");
            volumes.servers.push(server);
            volumes.mounts.push(mount.clone());
            volumes.controls.push(control);
            let deadline = std::time::Instant::now() + Duration::from_secs(30);
            while !std::fs::read_to_string("/proc/mounts")
                .unwrap_or_default()
                .contains(mount.to_str().expect("a UTF-8 path"))
            {
                assert!(
                    std::time::Instant::now() < deadline,
                    "{} was not mounted",
                    mount.display()
                );
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        volumes
    }

    /// From now on every fsync on member `id`'s volume fails with EIO.
    fn fail_fsync(&self, id: u64) {
        std::fs::write(&self.controls[id as usize - 1], b"").expect("create the control file");
    }

    fn heal(&self, id: u64) {
        std::fs::remove_file(&self.controls[id as usize - 1]).expect("remove the control file");
    }
}

impl Drop for FaultyVolumes {
    fn drop(&mut self) {
        for path in &self.mounts {
            let _ = Command::new("fusermount").arg("-u").arg("-z").arg(path).status();
        }
        for server in &mut self.servers {
            let _ = server.kill();
            let _ = server.wait();
        }
    }
}

fn value_of(index: usize) -> Vec<u8> {
    let mut value = format!("value {index} ").into_bytes();
    value.resize(VALUE_BYTES, b'.');
    value
}

/// Writes distinct keys until a write fails: the keys and versions
/// acknowledged, and the failure.
async fn fill(client: &Client, writes_max: usize) -> (Vec<(String, u64)>, lode_client::LodeError) {
    let kv = client.kv("fill");
    let mut written = Vec::new();
    loop {
        let index = written.len();
        assert!(index < writes_max, "{writes_max} writes and the volume never filled");
        let key = format!("key-{index:05}");
        match kv.set(&key).bytes(value_of(index)).send().await {
            Ok(version) => written.push((key, version)),
            Err(error) => return (written, error),
        }
    }
}

/// Reads every acknowledged write back, from the `skip`th on.
async fn assert_all_read_back(client: &Client, written: &[(String, u64)], skip: usize) {
    let kv = client.kv("fill");
    for (index, (key, version)) in written.iter().enumerate().skip(skip) {
        let entry = kv
            .get_entry(key)
            .await
            .expect("read back")
            .expect("an acknowledged write is there");
        assert_eq!(entry.version, *version, "{key}");
        assert!(entry.value == value_of(index), "{key} holds another value");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_full_data_volume_refuses_writes_loses_nothing_and_recovers_when_space_returns() {
    let directory = tempfile::tempdir().expect("temporary directory");
    let volumes = Volumes::mount(directory.path(), 3, 160 * MIB);
    let cluster = TestCluster::start_in_directory(directory, 3, 10_000, &["--disk-free-bytes-min", "64MiB"]);
    let leader = cluster.wait_for_leader().await;
    let client = cluster.client();

    let (written, refusal) = fill(&client, 5_000).await;
    assert!(refusal.is_quota_exceeded(), "refused as quota_exceeded: {refusal:?}");
    let message = refusal.to_string();
    assert!(
        message.contains(&format!("member {leader}")) && message.contains("disk_free_bytes_min"),
        "the refusal names the member and the limit: {message}"
    );
    assert!(
        written.len() > 50,
        "only {} writes before the volume filled",
        written.len()
    );
    eprintln!("{} writes of {VALUE_BYTES} bytes before: {message}", written.len());
    assert_all_read_back(&client, &written, 0).await;
    // Removals go on while writes are refused, and no member stopped.
    assert!(client.kv("fill").delete(&written[0].0).await.expect("a delete"));
    for id in cluster.running() {
        let status = cluster
            .client_of(id)
            .node_status()
            .await
            .expect("every member still serves");
        assert_eq!(status.leader, Some(leader));
    }

    volumes.resize(320 * MIB);
    let kv = client.kv("fill");
    wait_until("writes to resume once the volumes grew", || async {
        kv.set("after").bytes("space returned").send().await.ok()
    })
    .await;
    assert_all_read_back(&client, &written, 1).await;
    cluster.assert_no_errors();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_member_whose_storage_fails_exits_acknowledges_nothing_after_and_keeps_what_it_acknowledged() {
    let directory = tempfile::tempdir().expect("temporary directory");
    let volumes = Volumes::mount(directory.path(), 1, 64 * MIB);
    // No reserve: RocksDB itself meets the full disk.
    let mut cluster = TestCluster::start_in_directory(directory, 1, 10_000, &["--disk-free-bytes-min", "0"]);
    cluster.wait_for_leader().await;
    let client = cluster.client();

    let (written, failure) = fill(&client, 5_000).await;
    assert!(!failure.is_quota_exceeded(), "the reserve was off: {failure:?}");
    let status = cluster.wait_for_exit(1);
    assert!(
        !status.success(),
        "a member whose storage failed exits with a failure, not {status}"
    );
    let log = cluster.log_text(1);
    assert!(log.contains("No space left on device"), "the log names the cause");
    assert!(
        log.contains("this member exits so that its supervisor restarts it"),
        "and says why it exits"
    );

    // Restarted with the default reserve (256 MiB) on a volume grown to
    // 256 MiB, so less than the reserve is free: the member reads its
    // volume before it serves, and refuses even its first write.
    volumes.resize(256 * MIB);
    cluster.restart(1);
    cluster.wait_for_leader().await;
    let client = cluster.client();
    assert_all_read_back(&client, &written, 0).await;
    let refusal = client
        .kv("fill")
        .set("after")
        .bytes("restarted")
        .send()
        .await
        .expect_err("a write with less than the reserve free");
    assert!(
        matches!(refusal, lode_client::LodeError::DiskFull { member: 1, .. }),
        "refused as disk_full: {refusal:?}"
    );

    volumes.resize(512 * MIB);
    let kv = client.kv("fill");
    let version = wait_until("writes to resume once the volume grew past the reserve", || async {
        kv.set("after").bytes("restarted").send().await.ok()
    })
    .await;
    // The failed write was never acknowledged; whether it applied on
    // restart (it may have reached the log) the caller was told it failed.
    assert!(written.iter().all(|(_, acknowledged)| *acknowledged < version));
    cluster.assert_no_errors_except(&["No space left on device", "raft stopped", "RaftCore"]);
}

/// Writes distinct small keys one after another until `stop`, recording
/// each acknowledged one with its version.
async fn write_until(client: Client, stop: Arc<AtomicBool>, written: Arc<Mutex<Vec<(String, u64)>>>) {
    let kv = client.kv("fill");
    let mut index = 0usize;
    while !stop.load(Ordering::SeqCst) {
        let key = format!("key-{index:05}");
        if let Ok(version) = kv.set(&key).bytes(value_of(index)).send().await {
            written.lock().expect("the record").push((key, version));
        }
        index += 1;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_leader_whose_fsync_fails_exits_acknowledges_nothing_after_and_returns_whole() {
    let directory = tempfile::tempdir().expect("temporary directory");
    let volumes = FaultyVolumes::mount(directory.path(), 3);
    let mut cluster = TestCluster::start_in_directory(directory, 3, 10_000, &[]);
    let leader = cluster.wait_for_leader().await;
    let written = Arc::new(Mutex::new(Vec::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let writer = tokio::spawn(write_until(cluster.client(), stop.clone(), written.clone()));
    wait_until("writes to be acknowledged", || async {
        (written.lock().expect("the record").len() >= 20).then_some(())
    })
    .await;

    volumes.fail_fsync(leader);
    let status = tokio::task::block_in_place(|| cluster.wait_for_exit(leader));
    assert!(
        !status.success(),
        "a leader whose fsync failed exits with a failure, not {status}"
    );
    let log = cluster.log_text(leader);
    assert!(log.contains("Input/output error"), "the log names the failed sync");
    assert!(
        log.contains("this member exits so that its supervisor restarts it"),
        "and says why it exits"
    );
    let at_exit = written.lock().expect("the record").len();
    wait_until("the other members to acknowledge writes again", || async {
        (written.lock().expect("the record").len() >= at_exit + 20).then_some(())
    })
    .await;
    stop.store(true, Ordering::SeqCst);
    writer.await.expect("the writer");

    volumes.heal(leader);
    cluster.restart(leader);
    let written = written.lock().expect("the record").clone();
    let last = written.last().map(|(_, version)| *version).unwrap_or(0);
    cluster.wait_applied(leader, last).await;
    // Every write the cluster acknowledged, before and after the failure,
    // is in the returned member's own state.
    let returned = cluster.client_of(leader).kv("fill");
    for (key, version) in &written {
        let entry = returned
            .get_entry(key)
            .await
            .expect("read back")
            .expect("an acknowledged write");
        assert_eq!(entry.version, *version, "{key}");
    }
    eprintln!(
        "{} writes acknowledged, {at_exit} of them before the leader exited",
        written.len()
    );
    cluster.assert_no_errors_except(&["Input/output error", "raft stopped", "RaftCore"]);
}
