//! Each open of a RocksDB engine draws its flush triggers, its column
//! families' memtable sizes and its write-ahead log limit, each up to a
//! quarter below nominal, so that members applying the same entries do not
//! all flush a family at the same moment. Read back from the options file
//! RocksDB writes at every open.

use std::collections::BTreeMap;
use std::path::Path;

use lode_raft_store::engine::rocks::WAL_BYTES_MAX;
use lode_raft_store::RocksEngine;

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// The nominal memtable sizes: the busy families' and the small ones'.
const NOMINAL_BYTES: [u64; 2] = [8 << 20, 1 << 20];

/// Whether `bytes` is its nominal size or up to a quarter below it.
fn drawn_from(bytes: u64, nominal: u64) -> bool {
    bytes <= nominal && bytes >= nominal / 4 * 3
}

/// Each family's `write_buffer_size` in the newest options file of the
/// engine under `root`, and the instance's `max_total_wal_size` under the
/// name `wal`.
fn flush_triggers(root: &Path) -> Result<BTreeMap<String, u64>, Box<dyn std::error::Error>> {
    let mut options_files = Vec::new();
    for file in std::fs::read_dir(root.join("db"))? {
        let name = file?.file_name().to_string_lossy().into_owned();
        if name.starts_with("OPTIONS-") {
            options_files.push(name);
        }
    }
    let newest = options_files.into_iter().max().ok_or("no OPTIONS file")?;
    let text = std::fs::read_to_string(root.join("db").join(newest))?;
    let mut sizes = BTreeMap::new();
    let mut family = None;
    for line in text.lines().map(str::trim) {
        if let Some(name) = line
            .strip_prefix("[CFOptions \"")
            .and_then(|rest| rest.strip_suffix("\"]"))
        {
            family = Some(name.to_owned());
        } else if line.starts_with('[') {
            family = None;
        } else if let (Some(name), Some(value)) = (&family, line.strip_prefix("write_buffer_size=")) {
            sizes.insert(name.clone(), value.parse()?);
        } else if let Some(value) = line.strip_prefix("max_total_wal_size=") {
            sizes.insert("wal".to_owned(), value.parse()?);
        }
    }
    Ok(sizes)
}

#[test]
fn every_open_draws_its_flush_triggers_within_a_quarter_below_nominal() -> TestResult {
    let directories = [tempfile::tempdir()?, tempfile::tempdir()?];
    let mut drawn = Vec::new();
    for directory in &directories {
        drop(RocksEngine::open(directory.path())?);
        let sizes = flush_triggers(directory.path())?;
        assert!(sizes.len() > 3, "too few families read: {sizes:?}");
        let wal = sizes.get("wal").copied().ok_or("no max_total_wal_size")?;
        assert!(drawn_from(wal, WAL_BYTES_MAX), "write-ahead log limit of {wal} bytes");
        for (family, bytes) in sizes
            .iter()
            .filter(|(name, _)| !matches!(name.as_str(), "default" | "wal"))
        {
            let within = NOMINAL_BYTES.iter().any(|nominal| drawn_from(*bytes, *nominal));
            assert!(within, "family {family}: memtable of {bytes} bytes");
        }
        drawn.push(sizes);
    }
    assert_ne!(drawn[0], drawn[1], "two opens drew the same flush triggers");
    Ok(())
}
