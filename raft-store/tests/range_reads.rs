//! `Engine::read_ranges` on both engines: ranges that can hold one key only
//! (`[key, key ++ [0])`, what a Deno KV `get` reads) are answered by a point
//! read on RocksDB, and must answer exactly what a walk of the range would:
//! the key itself and never its neighbours, nothing past `limit`,
//! `examined_max` or the `keep` filter, all from one view of the engine.

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
