//! The stored encodings, pinned: one command per operation variant, a log
//! entry carrying a proposal, a stored snapshot and a command of each later
//! shape, each compared with the
//! bytes in `tests/golden_bytes.txt` and decoded back from them. A change
//! that would leave an old log or snapshot unreadable (a field moved,
//! added or removed, a variant reordered) fails here; a new shape is a new
//! variant, added at the end with a new line in the file.
//!
//! `LODE_GOLDEN_WRITE=1` rewrites the file from the current encodings; do
//! that only when adding a variant, and check that no existing line moved.

use std::collections::BTreeMap;

use lode_raft_store::command::{
    CounterKind, EnqueueOptions, Fence, MessageId, Precondition, Retention, Selector, SessionLink,
};
use lode_raft_store::snapshot::StoredSnapshot;
use lode_raft_store::{Command, CommandV1, Encoding, OpId, Operation, Proposal, TypeConfig};
use openraft::{CommittedLeaderId, Entry, EntryPayload, LogId, SnapshotMeta, StoredMembership};

const GOLDEN_PATH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/golden_bytes.txt");

fn session() -> Option<SessionLink> {
    Some(SessionLink {
        stream: "s".to_owned(),
        session_id: "i".to_owned(),
    })
}

/// One operation of every variant, each field set to something recognizable.
fn operations() -> Vec<(&'static str, Operation)> {
    let namespace = || "ns".to_owned();
    let key = || b"k".to_vec();
    vec![
        (
            "set",
            Operation::Set {
                namespace: namespace(),
                key: key(),
                value: b"v".to_vec(),
                encoding: Encoding::Custom("c".to_owned()),
                expires_at_micros: Some(7),
                precondition: Some(Precondition::Version(3)),
                fence: Some(Fence {
                    namespace: "locks".to_owned(),
                    key: b"l".to_vec(),
                    token: 9,
                }),
                session: session(),
            },
        ),
        (
            "delete",
            Operation::Delete {
                namespace: namespace(),
                key: key(),
                session: session(),
            },
        ),
        ("sweep_expired", Operation::SweepExpired { entries_max: 5 }),
        (
            "expire",
            Operation::Expire {
                namespace: namespace(),
                key: key(),
                expires_at_micros: None,
            },
        ),
        (
            "patch",
            Operation::Patch {
                namespace: namespace(),
                key: key(),
                patch: b"{}".to_vec(),
                session: None,
            },
        ),
        (
            "copy",
            Operation::Copy {
                namespace: namespace(),
                key: key(),
                to_namespace: "to".to_owned(),
                to_key: b"t".to_vec(),
                remove_source: true,
            },
        ),
        (
            "delete_range",
            Operation::DeleteRange {
                namespace: namespace(),
                selector: Selector::Range {
                    start: b"a".to_vec(),
                    end: b"b".to_vec(),
                },
                after: Some(b"a".to_vec()),
                entries_max: 10,
            },
        ),
        (
            "acquire_lease",
            Operation::AcquireLease {
                namespace: namespace(),
                key: key(),
                holder: "h".to_owned(),
                ttl_micros: 1_000,
            },
        ),
        (
            "renew_lease",
            Operation::RenewLease {
                namespace: namespace(),
                key: key(),
                holder: "h".to_owned(),
                token: 4,
                ttl_micros: 2_000,
            },
        ),
        (
            "release_lease",
            Operation::ReleaseLease {
                namespace: namespace(),
                key: key(),
                holder: "h".to_owned(),
                token: 4,
            },
        ),
        (
            "check",
            Operation::Check {
                namespace: namespace(),
                key: key(),
                precondition: Precondition::Absent,
            },
        ),
        (
            "enqueue",
            Operation::Enqueue {
                payload: b"p".to_vec(),
                encoding: Encoding::V8,
                options: EnqueueOptions {
                    deliver_at_micros: 11,
                    backoff_schedule_ms: vec![100, 200],
                    keys_if_undelivered: vec![b"u".to_vec()],
                },
            },
        ),
        ("claim_message", Operation::ClaimMessage { visibility_ms: 700 }),
        (
            "finish_message",
            Operation::FinishMessage {
                id: MessageId { index: 12, sequence: 1 },
                attempt: 2,
                delivered: false,
            },
        ),
        ("requeue_overdue", Operation::RequeueOverdue { messages_max: 8 }),
        (
            "state_update",
            Operation::StateUpdate {
                namespace: "state:s".to_owned(),
                key: key(),
                ops_json: b"[]".to_vec(),
            },
        ),
        (
            "take",
            Operation::Take {
                namespace: namespace(),
                key: key(),
            },
        ),
        (
            "sum_v8",
            Operation::SumV8 {
                namespace: "deno".to_owned(),
                key: key(),
                operand: vec![0xff, 0x0f, 0x49, 0x02],
                min: None,
                max: Some(vec![0xff, 0x0f, 0x49, 0x10]),
                clamp: true,
            },
        ),
        (
            "counter",
            Operation::Counter {
                namespace: "deno".to_owned(),
                key: key(),
                kind: CounterKind::Max,
                operand: 6,
            },
        ),
        (
            "auth",
            Operation::Auth {
                change: lode_types::auth::AuthChange::IssueToken {
                    id: 0x0f0e_0d0c_0b0a_0908_0706_0504_0302_0100,
                    user: "root".to_owned(),
                    secret_sha256: [7; 32],
                    expires_at_micros: Some(1_767_225_600_000_000),
                },
            },
        ),
    ]
}

fn command(operation: Operation) -> Command {
    Command::V1(CommandV1 {
        op_id: Some(OpId(0x0102_0304_0506_0708_090a_0b0c_0d0e_0f10)),
        time_micros: 1_767_225_600_000_000,
        operations: vec![operation],
    })
}

/// A command whose caller's grants were checked (`Command::V2`).
fn checked_command() -> Command {
    let Command::V1(body) = command(Operation::Delete {
        namespace: "ns".to_owned(),
        key: b"k".to_vec(),
        session: None,
    }) else {
        unreachable!("command() makes V1 commands")
    };
    Command::V2 {
        command: body,
        grants_revision: 77,
    }
}

fn log_entry() -> Entry<TypeConfig> {
    let proposal = Proposal {
        commands: vec![
            command(Operation::ClaimMessage { visibility_ms: 1 }),
            Command::V1(CommandV1 {
                op_id: None,
                time_micros: 2,
                operations: vec![Operation::SweepExpired { entries_max: 3 }],
            }),
        ]
        .into(),
        retention: Retention {
            dedup_micros: 4,
            change_events_max: 5,
            change_bytes_max: 6,
        },
    };
    Entry {
        log_id: LogId::new(CommittedLeaderId::new(2, 1), 42),
        payload: EntryPayload::Normal(proposal),
    }
}

fn snapshot() -> StoredSnapshot {
    let member = lode_raft_store::Member {
        peer_address: "n1:7001".to_owned(),
        client_address: "n1:7000".to_owned(),
    };
    let members: BTreeMap<u64, lode_raft_store::Member> = [(1, member)].into();
    let membership = openraft::Membership::new(vec![members.keys().copied().collect()], members);
    StoredSnapshot {
        meta: SnapshotMeta {
            last_log_id: Some(LogId::new(CommittedLeaderId::new(2, 1), 40)),
            last_membership: StoredMembership::new(Some(LogId::new(CommittedLeaderId::new(1, 1), 1)), membership),
            snapshot_id: "2-40-1".to_owned(),
        },
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

fn unhex(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|at| u8::from_str_radix(&text[at..at + 2], 16).expect("golden bytes are hex"))
        .collect()
}

/// Every pinned encoding, by name, in the file's order.
fn current_encodings() -> Vec<(String, Vec<u8>)> {
    let mut encodings: Vec<(String, Vec<u8>)> = operations()
        .into_iter()
        .map(|(name, operation)| {
            let bytes = lode_types::binary::encode(&command(operation)).expect("a command encodes");
            (format!("command.{name}"), bytes)
        })
        .collect();
    encodings.push((
        "log_entry".to_owned(),
        lode_types::binary::encode(&log_entry()).expect("a log entry encodes"),
    ));
    encodings.push((
        "stored_snapshot".to_owned(),
        snapshot().to_bytes().expect("a snapshot encodes"),
    ));
    encodings.push((
        "command_v2".to_owned(),
        lode_types::binary::encode(&checked_command()).expect("a command encodes"),
    ));
    encodings
}

fn golden() -> BTreeMap<String, Vec<u8>> {
    let text = std::fs::read_to_string(GOLDEN_PATH).expect("reading tests/golden_bytes.txt");
    text.lines()
        .filter(|line| !line.trim().is_empty() && !line.starts_with('#'))
        .map(|line| {
            let (name, bytes) = line.split_once(' ').expect("a golden line is `name hex`");
            (name.to_owned(), unhex(bytes.trim()))
        })
        .collect()
}

#[test]
fn every_stored_encoding_matches_its_golden_bytes_and_decodes_back() {
    let current = current_encodings();
    if std::env::var("LODE_GOLDEN_WRITE").is_ok() {
        let mut text = String::from("# Pinned by raft-store/tests/golden_bytes.rs: `name hex`, one line each.\n");
        for (name, bytes) in &current {
            text.push_str(&format!("{name} {}\n", hex(bytes)));
        }
        std::fs::write(GOLDEN_PATH, text).expect("writing tests/golden_bytes.txt");
    }
    let golden = golden();
    let mut differing = Vec::new();
    for (name, bytes) in &current {
        match golden.get(name) {
            Some(pinned) if pinned == bytes => {}
            Some(pinned) => differing.push(format!("{name}: pinned {}, now {}", hex(pinned), hex(bytes))),
            None => differing.push(format!("{name}: not pinned (a new variant needs a new line)")),
        }
    }
    assert!(differing.is_empty(), "encodings changed:\n{}", differing.join("\n"));
    assert_eq!(
        golden.len(),
        current.len(),
        "the golden file names encodings the test no longer makes"
    );
    golden_bytes_decode_to_the_values_they_were_made_from(&golden);
}

/// Reading an old log or snapshot: the pinned bytes decode to the values
/// they were made from.
fn golden_bytes_decode_to_the_values_they_were_made_from(golden: &BTreeMap<String, Vec<u8>>) {
    for (name, operation) in operations() {
        let bytes = &golden[&format!("command.{name}")];
        let decoded: Command = lode_types::binary::decode(bytes).unwrap_or_else(|error| panic!("{name}: {error}"));
        assert_eq!(decoded, command(operation), "{name}");
    }
    let entry: Entry<TypeConfig> = lode_types::binary::decode(&golden["log_entry"]).expect("the log entry decodes");
    assert_eq!(entry.log_id, log_entry().log_id);
    match (entry.payload, log_entry().payload) {
        (EntryPayload::Normal(decoded), EntryPayload::Normal(made)) => assert_eq!(decoded, made),
        _ => panic!("the log entry's payload is not a proposal"),
    }
    let checked: Command = lode_types::binary::decode(&golden["command_v2"]).expect("a V2 command decodes");
    assert_eq!(checked, checked_command());
    let stored = StoredSnapshot::from_bytes(&golden["stored_snapshot"]).expect("the snapshot decodes");
    assert_eq!(stored.meta, snapshot().meta);
}
