//! Every file of `fuzz/corpus/<target>/` through its target, in the normal
//! test build: the seeds (`seed-*`), every input a fuzzing run kept as a
//! crash once its cause was fixed (`crash-*`), and the coverage a long
//! campaign reached (`cov-*`, its queue reduced by `afl-cmin`, named by the
//! first 16 hex digits of their SHA-256). Each target has a corpus.
//!
//! The seeds are real encodings of real values, written by
//! `LODE_WRITE_FUZZ_SEEDS=1 cargo test -p lode-fuzz --test corpus`; AFL++
//! mutates them from there (`fuzz/run`).

use std::path::{Path, PathBuf};

use denokv_proto::datapath as pb;
use lode_client::protocol::{LodeServiceRequest, LodeServiceResponse, WriteRequest};
use lode_client::rpc::{ClientFrame, ServerFrame};
use lode_fuzz::TARGETS;
use lode_raft_store::TypeConfig;
use lode_types::v8_number::V8Number;
use prost::Message;

fn corpus_dir(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus").join(target)
}

#[test]
fn every_target_runs_its_whole_corpus_without_a_failure() {
    if std::env::var_os("LODE_WRITE_FUZZ_SEEDS").is_some() {
        write_seeds();
    }
    for target in TARGETS {
        let directory = corpus_dir(target.name);
        let mut inputs = 0;
        for file in std::fs::read_dir(&directory).unwrap_or_else(|error| panic!("{}: {error}", directory.display())) {
            let path = file.expect("a corpus entry").path();
            let data = std::fs::read(&path).expect("a corpus file");
            let outcome = std::panic::catch_unwind(|| (target.run)(&data));
            assert!(outcome.is_ok(), "{} failed on {}", target.name, path.display());
            inputs += 1;
        }
        assert!(inputs > 0, "{} has no corpus", target.name);
    }
}

fn frame(body: &[u8]) -> Vec<u8> {
    let mut framed = (body.len() as u32).to_be_bytes().to_vec();
    framed.extend_from_slice(body);
    framed
}

fn encode<T: serde::Serialize>(value: &T) -> Vec<u8> {
    lode_types::binary::encode(value).expect("a seed encodes")
}

fn prefixed(kind: u8, body: &[u8]) -> Vec<u8> {
    let mut seed = vec![kind];
    seed.extend_from_slice(body);
    seed
}

fn write_seeds() {
    let seeds: Vec<(&str, Vec<Vec<u8>>)> = vec![
        ("client_frames", client_frame_seeds()),
        ("server_frames", server_frame_seeds()),
        ("raft_payloads", raft_payload_seeds()),
        ("kv_connect_requests", kv_connect_seeds()),
        ("deno_keys", deno_key_seeds()),
        ("v8_numbers", v8_number_seeds()),
        ("state_update_ops", text_seeds(STATE_UPDATE_SEEDS)),
        ("merge_patches", text_seeds(MERGE_PATCH_SEEDS)),
        ("tokens", text_seeds(TOKEN_SEEDS)),
        ("backup_files", backup_seeds()),
        ("snapshot_images", snapshot_image_seeds()),
        ("http_bodies", http_body_seeds()),
    ];
    for (target, inputs) in seeds {
        let directory = corpus_dir(target);
        std::fs::create_dir_all(&directory).expect("corpus directory");
        for (index, input) in inputs.iter().enumerate() {
            std::fs::write(directory.join(format!("seed-{index:02}")), input).expect("write a seed");
        }
    }
}

fn client_frame_seeds() -> Vec<Vec<u8>> {
    let message = lode_client::queue::Message::new(b"job".to_vec(), lode_client::Encoding::Bytes);
    let operations = vec![
        message.operation().expect("an enqueue"),
        lode_client::Operation::ClaimMessage { visibility_ms: 1000 },
    ];
    let write = LodeServiceRequest::Write {
        request: WriteRequest { op_id: 7, operations },
    };
    let calls: Vec<ClientFrame<LodeServiceRequest>> = vec![
        ClientFrame::Call { id: 1, request: write },
        ClientFrame::Call {
            id: 2,
            request: LodeServiceRequest::Capabilities {},
        },
        ClientFrame::Call {
            id: 3,
            request: LodeServiceRequest::ClusterStatus {},
        },
        ClientFrame::Cancel { id: 1 },
    ];
    let mut seeds: Vec<Vec<u8>> = calls.iter().map(|call| frame(&encode(call))).collect();
    seeds.push(seeds.concat());
    seeds
}

fn server_frame_seeds() -> Vec<Vec<u8>> {
    let capabilities = vec![lode_client::Capability::Kv, lode_client::Capability::FencedLeases];
    let answers: Vec<ServerFrame<LodeServiceResponse>> = vec![
        ServerFrame {
            id: 1,
            outcome: Ok(LodeServiceResponse::Capabilities(capabilities)),
        },
        ServerFrame {
            id: 2,
            outcome: Err("refused".to_owned()),
        },
    ];
    answers.iter().map(|answer| frame(&encode(answer))).collect()
}

fn raft_payload_seeds() -> Vec<Vec<u8>> {
    use openraft::{CommittedLeaderId, Entry, EntryPayload, LogId, Vote};
    let log_id = LogId::new(CommittedLeaderId::new(2, 1), 5);
    let append = openraft::raft::AppendEntriesRequest::<TypeConfig> {
        vote: Vote::new_committed(2, 1),
        prev_log_id: Some(LogId::new(CommittedLeaderId::new(2, 1), 4)),
        entries: vec![Entry {
            log_id,
            payload: EntryPayload::Blank,
        }],
        leader_commit: Some(log_id),
    };
    let vote = openraft::raft::VoteRequest::new(Vote::new(3, 2), Some(log_id));
    vec![prefixed(0, &encode(&append)), prefixed(1, &encode(&vote))]
}

fn kv_connect_seeds() -> Vec<Vec<u8>> {
    let read = pb::SnapshotRead {
        ranges: vec![pb::ReadRange {
            start: b"\x02a\x00".to_vec(),
            end: b"\x02b\x00".to_vec(),
            limit: 10,
            reverse: false,
        }],
    };
    let write = pb::AtomicWrite {
        checks: vec![pb::Check {
            key: b"\x02a\x00".to_vec(),
            versionstamp: vec![0; 10],
        }],
        mutations: vec![pb::Mutation {
            key: b"\x02a\x00".to_vec(),
            value: Some(pb::KvValue {
                data: 1u64.to_le_bytes().to_vec(),
                encoding: pb::ValueEncoding::VeLe64 as i32,
            }),
            mutation_type: pb::MutationType::MSum as i32,
            expire_at_ms: 0,
            ..Default::default()
        }],
        enqueues: Vec::new(),
    };
    vec![prefixed(0, &read.encode_to_vec()), prefixed(1, &write.encode_to_vec())]
}

fn deno_key_seeds() -> Vec<Vec<u8>> {
    use denokv_proto::{Key, KeyPart};
    let keys = [
        Key(vec![
            KeyPart::String("users".to_owned()),
            KeyPart::Bytes(vec![0, 1, 255]),
        ]),
        Key(vec![KeyPart::Float(-1.5), KeyPart::True, KeyPart::False]),
    ];
    keys.iter()
        .map(|key| denokv_proto::encode_key(key).expect("a key encodes"))
        .collect()
}

fn v8_number_seeds() -> Vec<Vec<u8>> {
    [
        V8Number::Number(42.0),
        V8Number::Number(-0.5),
        V8Number::BigInt(-12_345_678_901_234_567),
    ]
    .iter()
    .map(V8Number::encode)
    .collect()
}

fn backup_seeds() -> Vec<Vec<u8>> {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("../node/tests/fixtures/format-1/backup.lode");
    let file = std::fs::read(fixture).expect("the format fixture's backup");
    let (_, header_bytes) = lode_types::backup::read_header(&mut file.as_slice()).expect("its header");
    let body = &file[12..header_bytes as usize - 32];
    vec![prefixed(0, &file[..header_bytes as usize + 64]), prefixed(1, body)]
}

fn snapshot_image_seeds() -> Vec<Vec<u8>> {
    let checkpoint: Vec<(String, Vec<u8>)> = [
        ("CURRENT", b"MANIFEST-000005\n".to_vec()),
        ("OPTIONS-000007", b"[Version]\n  rocksdb_version=9.10.0\n".to_vec()),
        ("000009.sst", vec![0x88, 0xe2, 0x41, 0x00, 0x07, 0x01, 0x00, 0xff]),
    ]
    .into_iter()
    .map(|(name, contents)| (name.to_owned(), contents))
    .collect();
    // Mode 1 takes what follows the magic, up to the digest, and adds both.
    let records = |image: &[u8]| image[8..image.len() - 32].to_vec();
    let whole = lode_fuzz::files::reference_image(&checkpoint);
    vec![
        prefixed(1, &records(&whole)),
        prefixed(1, &records(&lode_fuzz::files::reference_image(&[]))),
        prefixed(0, &whole),
    ]
}

fn http_body_seeds() -> Vec<Vec<u8>> {
    let bodies: [(u8, &str); 10] = [
        (
            0,
            r#"{"op_id":"000000000000000000000000000000ff","operations":[{"op":"set","namespace":"config","key":"service:auth","value":"{\"a\":1}","encoding":"json","ttl_micros":"60000000"}]}"#,
        ),
        (
            0,
            r#"{"operations":[{"op":"set","namespace":"config","key":{"base64":"AP8="},"value":{"base64":"gAE="},"expect_version":"12","fence":{"namespace":"config","key":"lease:k","token":"3"}},{"op":"delete","namespace":"config","key":"old"}]}"#,
        ),
        (
            0,
            r#"{"operations":[{"op":"patch","namespace":"config","key":"k","patch":"{\"b\":null}"},{"op":"copy","namespace":"config","key":"k","to_key":"c","to_namespace":"backup"},{"op":"expire","namespace":"config","key":"c","ttl_micros":"1000"}]}"#,
        ),
        (
            1,
            r#"{"query":{"op":"get","namespace":"config","key":"service:auth"},"consistency":"linearizable"}"#,
        ),
        (
            1,
            r#"{"query":{"op":"scan","namespace":"pages","prefix":"k","limit":3},"consistency":{"at_least":"1000000000"}}"#,
        ),
        (
            1,
            r#"{"query":{"op":"get_many","namespace":"backup","keys":["copy",{"base64":"AP8="}]}}"#,
        ),
        (
            2,
            r#"{"scope":"app","key":"config","value":{"retries":3,"hosts":["a","b"]}}"#,
        ),
        (
            6,
            r#"{"scope":"app","key":"config","ops":[{"type":"increment","path":"retries","by":1},{"type":"append","path":"hosts","value":"c"}]}"#,
        ),
        (18, r#"{"scope":"app"}"#),
        (3, r#"{"supportedVersions":[1,2,3]}"#),
    ];
    bodies
        .iter()
        .map(|(selector, body)| prefixed(*selector, body.as_bytes()))
        .collect()
}

fn text_seeds(texts: &[&str]) -> Vec<Vec<u8>> {
    texts.iter().map(|text| text.as_bytes().to_vec()).collect()
}

const STATE_UPDATE_SEEDS: &[&str] = &[
    r#"{"count":1,"tags":["a"]}[{"type":"increment","path":"count","by":2},{"type":"append","path":"tags","value":"b"}]"#,
    r#"null[{"type":"set","path":["a","b"],"value":{"c":true}},{"type":"merge","value":{"d":null}},{"type":"remove","path":"a"}]"#,
    r#"{"n":1.5}[{"type":"decrement","path":"n","by":0.5},{"type":"set","value":[1,2]}]"#,
];

const MERGE_PATCH_SEEDS: &[&str] = &[
    r#"{"a":"b","c":{"d":"e","f":"g"}} {"a":"z","c":{"f":null}}"#,
    r#"[1,2] {"a":{"b":null}}"#,
    r#"{"e":null} {"a":1,"e":[{"x":null}]}"#,
];

const TOKEN_SEEDS: &[&str] = &[
    "lode_0123456789abcdef0123456789abcdef_00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff",
    "read:config",
    "write:jobs/*",
    "admin:*",
];
