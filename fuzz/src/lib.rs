//! Fuzz targets: one function per decoder that untrusted bytes reach, each
//! asserting more than "no panic" where it can (a round trip, or agreement
//! with a reference).
//!
//! `main.rs` runs one under AFL++ (`fuzz/run`); `tests/corpus.rs` replays
//! every file of `fuzz/corpus/<target>/` through the same function in the
//! normal test build, so a crash once found stays fixed.

pub mod deno;
pub mod files;
pub mod http;
pub mod values;
pub mod wire;

/// A fuzz target: its name (the corpus directory's) and its body.
#[derive(Clone, Copy, Debug)]
pub struct Target {
    pub name: &'static str,
    pub run: fn(&[u8]),
}

pub const TARGETS: &[Target] = &[
    Target {
        name: "client_frames",
        run: wire::client_frames,
    },
    Target {
        name: "server_frames",
        run: wire::server_frames,
    },
    Target {
        name: "raft_payloads",
        run: wire::raft_payloads,
    },
    Target {
        name: "kv_connect_requests",
        run: deno::kv_connect_requests,
    },
    Target {
        name: "deno_keys",
        run: deno::deno_keys,
    },
    Target {
        name: "v8_numbers",
        run: deno::v8_numbers,
    },
    Target {
        name: "state_update_ops",
        run: values::state_update_ops,
    },
    Target {
        name: "merge_patches",
        run: values::merge_patches,
    },
    Target {
        name: "tokens",
        run: values::tokens,
    },
    Target {
        name: "backup_files",
        run: files::backup_files,
    },
    Target {
        name: "snapshot_images",
        run: files::snapshot_images,
    },
    Target {
        name: "http_bodies",
        run: http::http_bodies,
    },
];

/// The target named `name`.
pub fn target(name: &str) -> Option<&'static Target> {
    TARGETS.iter().find(|target| target.name == name)
}

/// Decodes `bytes` as a `T` of Lode's binary encoding; when it decodes,
/// encoding the value and decoding that gives a value of the same
/// encoding. (Not always the bytes read: maps and sets decode repeated or
/// unsorted keys into their one order, as openraft's memberships do.)
pub fn binary_round_trip<T: serde::Serialize + serde::de::DeserializeOwned>(bytes: &[u8]) -> Option<T> {
    let value: T = lode_types::binary::decode(bytes).ok()?;
    let encoded = lode_types::binary::encode(&value).expect("a decoded value encodes");
    let again: T = lode_types::binary::decode(&encoded).expect("an encoded value decodes");
    let encoded_again = lode_types::binary::encode(&again).expect("a decoded value encodes");
    assert!(
        encoded == encoded_again,
        "a value's encoding changed when decoded and encoded again"
    );
    Some(value)
}
