//! Each open of a RocksDB engine draws its column families' memtable sizes,
//! each up to a quarter below the family's nominal size, so that members
//! applying the same entries do not all flush a family at the same moment.
//! Read back from the options file RocksDB writes at every open.

use std::collections::BTreeMap;
use std::path::Path;

use lode_raft_store::RocksEngine;

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// The nominal memtable sizes: the busy families' and the small ones'.
const NOMINAL_BYTES: [u64; 2] = [8 << 20, 1 << 20];

/// Each family's `write_buffer_size` in the newest options file of the
/// engine under `root`.
fn memtable_sizes(root: &Path) -> Result<BTreeMap<String, u64>, Box<dyn std::error::Error>> {
    let mut newest = None;
    for file in std::fs::read_dir(root.join("db"))? {
        let name = file?.file_name().to_string_lossy().into_owned();
        if name.starts_with("OPTIONS-") && newest.as_ref().is_none_or(|newest: &String| name > *newest) {
            newest = Some(name);
        }
    }
    let newest = newest.ok_or("no OPTIONS file")?;
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
        }
    }
    Ok(sizes)
}

#[test]
fn every_open_draws_memtable_sizes_within_a_quarter_below_nominal() -> TestResult {
    let directories = [tempfile::tempdir()?, tempfile::tempdir()?];
    let mut drawn = Vec::new();
    for directory in &directories {
        drop(RocksEngine::open(directory.path())?);
        let sizes = memtable_sizes(directory.path())?;
        assert!(sizes.len() > 2, "too few families read: {sizes:?}");
        for (family, bytes) in &sizes {
            if family == "default" {
                continue;
            }
            let within = NOMINAL_BYTES
                .iter()
                .any(|nominal| *bytes <= *nominal && *bytes >= nominal / 4 * 3);
            assert!(within, "family {family}: memtable of {bytes} bytes");
        }
        drawn.push(sizes);
    }
    assert_ne!(drawn[0], drawn[1], "two opens drew the same memtable sizes");
    Ok(())
}
