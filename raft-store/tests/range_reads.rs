//! `Engine::read_ranges` on both engines: ranges that can hold one key only
//! (`[key, key ++ [0])`, what a Deno KV `get` reads) are answered by a point
//! read on RocksDB, and must answer exactly what a walk of the range would:
//! the key itself and never its neighbours, nothing past `limit`,
//! `examined_max` or the `keep` filter, all from one view of the engine.
//! Scans and range reads stop at their bounds; `Engine::walk` stops where
//! its visitor says and leaves the block cache alone.

use lode_raft_store::engine::{Durability, Engine, Pairs, RangeRead, Space, WriteBatch};
use lode_raft_store::{MemoryEngine, RocksEngine};

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// Keys placed so that a point read answering a neighbour, or a prefix
/// match, would show: `a` beside `a\0`, `a\0\0` and `ab`.
const STORED: [&[u8]; 6] = [b"a", b"a\0", b"a\0\0", b"ab", b"b", b"skipped"];

fn single(key: &[u8]) -> RangeRead {
    let mut end = key.to_vec();
    end.push(0);
    RangeRead {
        start: key.to_vec(),
        end,
        reverse: false,
        limit: 1,
        examined_max: 1,
    }
}

fn filled<E: Engine>(engine: &E) -> Result<(), Box<dyn std::error::Error>> {
    let mut batch = WriteBatch::default();
    for key in STORED {
        let mut value = b"value of ".to_vec();
        value.extend_from_slice(key);
        batch.put(Space::Entries, key.to_vec(), value);
    }
    engine.write(batch, Durability::Synced)?;
    Ok(())
}

/// Every case, read in one call so that they share one view.
fn cases() -> Vec<RangeRead> {
    let reversed = RangeRead {
        reverse: true,
        ..single(b"a")
    };
    let no_limit = RangeRead {
        limit: 0,
        ..single(b"a")
    };
    let nothing_examined = RangeRead {
        examined_max: 0,
        ..single(b"a")
    };
    let wide = RangeRead {
        start: b"a".to_vec(),
        end: b"b".to_vec(),
        reverse: false,
        limit: 10,
        examined_max: 10,
    };
    // Ends in a zero byte, but not right after its start: a real range.
    let not_single = RangeRead {
        start: b"a".to_vec(),
        end: b"a\0\0".to_vec(),
        reverse: false,
        limit: 10,
        examined_max: 10,
    };
    vec![
        single(b"a"),
        single(b"a\0"),
        single(b"absent"),
        single(b"skipped"),
        reversed,
        no_limit,
        nothing_examined,
        wide,
        not_single,
    ]
}

fn keys(pairs: &Pairs) -> Vec<&[u8]> {
    pairs.iter().map(|(key, _)| key.as_slice()).collect()
}

fn read<E: Engine>(engine: &E) -> Result<Vec<Pairs>, Box<dyn std::error::Error>> {
    filled(engine)?;
    let keep = |key: &[u8], _value: &[u8]| key != b"skipped";
    Ok(engine.read_ranges(Space::Entries, &cases(), &keep)?)
}

#[test]
fn a_single_key_range_answers_that_key_alone_on_both_engines() -> TestResult {
    let directory = tempfile::tempdir()?;
    let rocks = read(&RocksEngine::open(directory.path())?)?;
    let memory = read(&MemoryEngine::new())?;
    assert_eq!(rocks, memory, "both engines answer every range alike");

    let expected: [&[&[u8]]; 9] = [
        &[b"a"],
        &[b"a\0"],
        &[],
        &[],
        &[b"a"],
        &[],
        &[],
        &[b"a", b"a\0", b"a\0\0", b"ab"],
        &[b"a", b"a\0"],
    ];
    for ((pairs, expected), range) in rocks.iter().zip(expected).zip(cases()) {
        assert_eq!(keys(pairs), expected, "range {range:?}");
    }
    let (key, value) = &rocks[0][0];
    assert_eq!((key.as_slice(), value.as_slice()), (&b"a"[..], &b"value of a"[..]));
    Ok(())
}

#[test]
fn only_a_range_up_to_its_start_and_one_zero_byte_is_a_single_key() {
    assert_eq!(single(b"k").single_key(), Some(&b"k"[..]));
    assert_eq!(single(b"").single_key(), Some(&b""[..]), "the empty key");
    let range = |start: &[u8], end: &[u8]| RangeRead {
        start: start.to_vec(),
        end: end.to_vec(),
        reverse: false,
        limit: 1,
        examined_max: 1,
    };
    assert_eq!(range(b"k", b"k\x01").single_key(), None);
    assert_eq!(range(b"k", b"l\0").single_key(), None);
    assert_eq!(range(b"k", b"k\0\0").single_key(), None);
    assert_eq!(range(b"k", b"").single_key(), None);
}

#[test]
fn a_single_key_read_sees_the_view_of_its_call_not_later_writes() -> TestResult {
    let directory = tempfile::tempdir()?;
    let engine = RocksEngine::open(directory.path())?;
    filled(&engine)?;
    // A write from inside `keep` lands while the call reads; the ranges
    // after it must still answer from the view the call began with.
    let wrote = std::cell::Cell::new(false);
    let keep = |_key: &[u8], _value: &[u8]| {
        if !wrote.replace(true) {
            let mut batch = WriteBatch::default();
            batch.put(Space::Entries, b"b".to_vec(), b"rewritten".to_vec());
            batch.delete(Space::Entries, b"ab".to_vec());
            engine
                .write(batch, Durability::Buffered)
                .expect("a write beside the read");
        }
        true
    };
    let ranges = [single(b"a"), single(b"b"), single(b"ab")];
    let read = engine.read_ranges(Space::Entries, &ranges, &keep)?;
    assert_eq!(read[1], vec![(b"b".to_vec(), b"value of b".to_vec())]);
    assert_eq!(keys(&read[2]), [&b"ab"[..]], "deleted after the view was taken");
    Ok(())
}

/// Live keys `b0`..`b4`, between two runs of removed keys (`a…` below,
/// `c…` above) and one live key past them (`d`).
fn between_removed_keys<E: Engine>(engine: &E) -> Result<(), Box<dyn std::error::Error>> {
    let removed = |run: &'static str| (0..REMOVED_RUN_KEYS).map(move |index| format!("{run}{index:05}").into_bytes());
    let mut batch = WriteBatch::default();
    for key in removed("a").chain(removed("c")) {
        batch.put(Space::Entries, key, b"gone".to_vec());
    }
    for key in ["b0", "b1", "b2", "b3", "b4", "d"] {
        batch.put(Space::Entries, key.as_bytes().to_vec(), b"live".to_vec());
    }
    engine.write(batch, Durability::Synced)?;
    let mut batch = WriteBatch::default();
    for key in removed("a").chain(removed("c")) {
        batch.delete(Space::Entries, key);
    }
    engine.write(batch, Durability::Synced)?;
    Ok(())
}

const REMOVED_RUN_KEYS: usize = 5_000;

/// The bounded reads of `bounded_reads_step_over_no_removed_key_outside_their_range`,
/// each named.
#[allow(clippy::type_complexity)]
fn bounded_reads<E: Engine>() -> Vec<(
    &'static str,
    Box<dyn Fn(&E) -> Result<Pairs, lode_raft_store::EngineError>>,
)> {
    let range = |reverse: bool, limit: usize| RangeRead {
        start: b"b".to_vec(),
        end: b"c".to_vec(),
        reverse,
        limit,
        examined_max: 100,
    };
    let keep = |_: &[u8], _: &[u8]| true;
    let ranged = move |reverse, limit| {
        Box::new(move |engine: &E| {
            let mut pairs = engine.read_ranges(Space::Entries, &[range(reverse, limit)], &keep)?;
            Ok(pairs.pop().unwrap_or_default())
        }) as Box<dyn Fn(&E) -> Result<Pairs, lode_raft_store::EngineError>>
    };
    vec![
        (
            "a scan up to its end",
            Box::new(|engine: &E| engine.scan(Space::Entries, b"b", Some(b"c"), 100)),
        ),
        (
            "a scan up to its limit",
            Box::new(|engine: &E| engine.scan(Space::Entries, b"b", None, 5)),
        ),
        ("a range read up to its end", ranged(false, 100)),
        ("a reverse range read down to its start", ranged(true, 100)),
        ("a range read up to its limit", ranged(false, 5)),
        ("a reverse range read down to its limit", ranged(true, 5)),
    ]
}

/// What `read` answers, and how many times RocksDB counted `metric` in
/// this thread while it ran.
fn counted<T>(metric: rocksdb::perf::PerfMetric, read: impl FnOnce() -> T) -> (T, u64) {
    use rocksdb::perf::{set_perf_stats, PerfContext, PerfStatsLevel};
    set_perf_stats(PerfStatsLevel::EnableCount);
    let mut context = PerfContext::default();
    context.reset();
    let answer = read();
    let count = context.metric(metric);
    set_perf_stats(PerfStatsLevel::Disable);
    (answer, count)
}

/// Scans and range reads stop at their bounds and at their limits. Past
/// them RocksDB would step over every removed key up to the next live one,
/// whatever namespace it is in: the queue's claims once did, over the
/// claimed and overdue keys of every finished message, and cost more with
/// each message taken (`docs/performance.md`, twenty-third round).
#[test]
fn bounded_reads_step_over_no_removed_key_outside_their_range() -> TestResult {
    let directory = tempfile::tempdir()?;
    let rocks = RocksEngine::open(directory.path())?;
    between_removed_keys(&rocks)?;
    let memory = MemoryEngine::new();
    between_removed_keys(&memory)?;
    let live: Vec<&[u8]> = vec![b"b0", b"b1", b"b2", b"b3", b"b4"];
    let backwards: Vec<&[u8]> = live.iter().rev().copied().collect();
    let expected = [&live, &live, &live, &backwards, &live, &backwards];
    let reads = bounded_reads::<RocksEngine>()
        .into_iter()
        .zip(bounded_reads::<MemoryEngine>());
    for (((name, on_rocks), (_, on_memory)), expected) in reads.zip(expected) {
        let (pairs, stepped_over) = counted(rocksdb::perf::PerfMetric::InternalDeleteSkippedCount, || {
            on_rocks(&rocks)
        });
        let pairs = pairs?;
        assert_eq!(pairs, on_memory(&memory)?, "{name}: both engines answer alike");
        assert_eq!(&keys(&pairs), expected, "{name}");
        assert_eq!(stepped_over, 0, "{name} stepped over removed keys outside it");
    }
    Ok(())
}

/// What a walk hands out, on either engine: the pairs from its start in key
/// order, up to and including the one its visitor answered false to.
fn walked<E: Engine>(engine: &E, start: &[u8], wanted: usize) -> Result<Vec<Vec<u8>>, Box<dyn std::error::Error>> {
    let mut seen = Vec::new();
    engine.walk(Space::Entries, start, &mut |key, _| {
        seen.push(key.to_vec());
        seen.len() < wanted
    })?;
    Ok(seen)
}

#[test]
fn a_walk_hands_out_pairs_in_order_until_its_visitor_stops_it() -> TestResult {
    let directory = tempfile::tempdir()?;
    let rocks = RocksEngine::open(directory.path())?;
    filled(&rocks)?;
    let memory = MemoryEngine::new();
    filled(&memory)?;
    for (start, wanted, expected) in [
        (&b"a\0"[..], 2, vec![&b"a\0"[..], b"a\0\0"]),
        (b"aa", 10, vec![b"ab", b"b", b"skipped"]),
        (b"", 1, vec![b"a"]),
        (b"t", 10, vec![]),
    ] {
        let expected: Vec<Vec<u8>> = expected.into_iter().map(<[u8]>::to_vec).collect();
        assert_eq!(walked(&rocks, start, wanted)?, expected, "RocksDB from {start:?}");
        assert_eq!(walked(&memory, start, wanted)?, expected, "memory from {start:?}");
    }
    Ok(())
}

/// A walk keeps none of what it read in the block cache. The change log's
/// trim walks the oldest events once, for their sizes; while it read them
/// through the cache, their blocks pushed out the ones apply's point reads
/// come back to, and the members spent 6% more CPU per 4 KiB put
/// (`docs/performance.md`, twenty-fourth round).
#[test]
fn a_walk_leaves_the_block_cache_as_it_found_it() -> TestResult {
    let directory = tempfile::tempdir()?;
    let rocks = RocksEngine::open(directory.path())?;
    let mut batch = WriteBatch::default();
    for index in 0..512u64 {
        batch.put(Space::ChangeLog, index.to_be_bytes().to_vec(), vec![index as u8; 1024]);
    }
    rocks.write(batch, Durability::Synced)?;
    // Into table files, where reads go through the block cache.
    rocks.compact()?;
    let mut walked_pairs = 0;
    rocks.walk(Space::ChangeLog, &[], &mut |_, _| {
        walked_pairs += 1;
        true
    })?;
    assert_eq!(walked_pairs, 512);
    // Two scans after the walk: the first finds no block in the cache, the
    // second finds those the first left there.
    let mut cache_hits = Vec::new();
    for _ in 0..2 {
        let (pairs, hits) = counted(rocksdb::perf::PerfMetric::BlockCacheHitCount, || {
            rocks.scan(Space::ChangeLog, &[], None, 512)
        });
        cache_hits.push(hits);
        assert_eq!(pairs?.len(), 512);
    }
    assert_eq!(cache_hits[0], 0, "the walk left blocks in the cache");
    assert!(cache_hits[1] > 0, "a scan fills the cache, so the count can tell");
    Ok(())
}
