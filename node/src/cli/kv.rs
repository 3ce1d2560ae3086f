//! `lode kv`: every key-value operation from the command line, with plain
//! output for people and `--json` output for scripts.
//!
//! Exit status: 0 on success, 1 when a read finds nothing ("not found" on
//! stderr), 2 on any error (its message on stderr).

use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Subcommand, ValueEnum};
use futures::TryStreamExt;
use lode_client::codec::{Codec, MsgpackCodec};
use lode_client::kv::SetBuilder;
use lode_client::{Bounds, Consistency, Encoding, Entry, Kv, LodeError};
use serde_json::{json, Value};

use super::helpers::{parse_duration, print_json, Endpoints};

#[derive(ValueEnum, Clone, Copy, Debug)]
pub enum ConsistencyArgument {
    Linearizable,
    Eventual,
}

/// How `set` and `cas` read VALUE.
#[derive(Args, Debug, Clone, Copy)]
#[group(multiple = false)]
pub struct EncodingArguments {
    /// VALUE is JSON text, stored with the JSON encoding.
    #[arg(long)]
    json: bool,
    /// VALUE is JSON text, stored as MessagePack.
    #[arg(long)]
    msgpack: bool,
    /// VALUE is stored as raw bytes (the default).
    #[arg(long)]
    bytes: bool,
}

/// Expiry of a written value.
#[derive(Args, Debug, Clone, Copy)]
#[group(multiple = false)]
pub struct ExpiryArguments {
    /// Expire this long from now, e.g. `500ms`, `30s`, `5m`, `1h`, `7d`.
    #[arg(long, value_parser = parse_duration)]
    ttl: Option<Duration>,
    /// Expire at this time, in microseconds since the epoch.
    #[arg(long)]
    expires_at: Option<u64>,
}

/// Which keys a bulk command selects (none: the whole namespace).
#[derive(Args, Debug, Clone)]
pub struct SelectorArguments {
    /// Keys that start with PREFIX.
    #[arg(long, conflicts_with_all = ["start", "contains"])]
    prefix: Option<String>,
    /// Keys from START (inclusive); needs --end.
    #[arg(long, requires = "end", conflicts_with = "contains")]
    start: Option<String>,
    /// Keys before END (exclusive).
    #[arg(long, requires = "start")]
    end: Option<String>,
    /// UTF-8 keys that contain TEXT.
    #[arg(long)]
    contains: Option<String>,
}

impl SelectorArguments {
    fn apply<B: Bounds>(&self, builder: B) -> B {
        match (&self.prefix, &self.start, &self.end, &self.contains) {
            (Some(prefix), ..) => builder.prefix(prefix),
            (_, Some(start), Some(end), _) => builder.range(start, end),
            (.., Some(text)) => builder.key_contains(text.clone()),
            _ => builder,
        }
    }
}

#[derive(Subcommand, Debug)]
pub enum KvCommand {
    /// Write a value; prints the new version.
    Set {
        namespace: String,
        key: String,
        value: String,
        #[command(flatten)]
        encoding: EncodingArguments,
        #[command(flatten)]
        expiry: ExpiryArguments,
        #[command(flatten)]
        endpoints: Endpoints,
    },
    /// Compare-and-swap: write only if the version matches (or the key is
    /// absent); prints the new version.
    Cas {
        namespace: String,
        key: String,
        value: String,
        #[arg(long, conflicts_with = "expect_absent", required_unless_present = "expect_absent")]
        expect_version: Option<u64>,
        #[arg(long)]
        expect_absent: bool,
        #[command(flatten)]
        encoding: EncodingArguments,
        #[command(flatten)]
        expiry: ExpiryArguments,
        #[command(flatten)]
        endpoints: Endpoints,
    },
    /// Print a value (MessagePack values as JSON text).
    Get {
        namespace: String,
        key: String,
        #[arg(long, value_enum, default_value = "linearizable")]
        consistency: ConsistencyArgument,
        /// Serve once the node has applied this position (any node).
        #[arg(long)]
        at_least: Option<u64>,
        #[command(flatten)]
        endpoints: Endpoints,
    },
    /// Print the entry (value, version, expiry, source) as JSON.
    Entry {
        namespace: String,
        key: String,
        #[command(flatten)]
        endpoints: Endpoints,
    },
    /// Print the version, expiry and size of a live entry.
    Exists {
        namespace: String,
        key: String,
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        endpoints: Endpoints,
    },
    /// Delete a key; prints whether a live entry was removed.
    Del {
        namespace: String,
        key: String,
        #[command(flatten)]
        endpoints: Endpoints,
    },
    /// Change or clear an entry's expiry without rewriting it.
    Expire {
        namespace: String,
        key: String,
        #[command(flatten)]
        expiry: ExpiryArguments,
        /// Remove the expiry.
        #[arg(long, conflicts_with_all = ["ttl", "expires_at"])]
        clear: bool,
        #[command(flatten)]
        endpoints: Endpoints,
    },
    /// Apply a JSON merge patch (RFC 7386) to a JSON entry; prints the new version.
    Patch {
        namespace: String,
        key: String,
        patch: String,
        #[command(flatten)]
        endpoints: Endpoints,
    },
    /// Copy an entry to another key; prints the destination's version.
    Copy {
        namespace: String,
        key: String,
        to_key: String,
        /// Destination namespace (default: the same).
        #[arg(long)]
        into: Option<String>,
        #[command(flatten)]
        endpoints: Endpoints,
    },
    /// Move an entry to another key; prints the destination's version.
    Move {
        namespace: String,
        key: String,
        to_key: String,
        #[arg(long)]
        into: Option<String>,
        #[command(flatten)]
        endpoints: Endpoints,
    },
    /// Read several keys from one consistent view.
    GetMany {
        namespace: String,
        keys: Vec<String>,
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        endpoints: Endpoints,
    },
    /// Delete the selected entries; prints how many live ones were removed.
    DeleteMany {
        namespace: String,
        #[command(flatten)]
        selector: SelectorArguments,
        #[command(flatten)]
        endpoints: Endpoints,
    },
    /// List entries in key order, a page at a time (or all with --all).
    Scan {
        namespace: String,
        #[command(flatten)]
        selector: SelectorArguments,
        #[arg(long, default_value_t = 100)]
        limit: u32,
        #[arg(long)]
        cursor: Option<String>,
        /// Walk every page.
        #[arg(long, conflicts_with = "cursor")]
        all: bool,
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        endpoints: Endpoints,
    },
    /// List the namespaces that hold live entries.
    Namespaces {
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        endpoints: Endpoints,
    },
}

fn invalid(message: impl Into<String>) -> LodeError {
    LodeError::Invalid(message.into())
}

/// Builds a write of VALUE as the encoding flags say.
fn build_set(
    kv: &Kv,
    key: &str,
    value: &str,
    encoding: EncodingArguments,
    expiry: ExpiryArguments,
) -> Result<SetBuilder, LodeError> {
    let parse_json =
        || serde_json::from_str::<Value>(value).map_err(|error| invalid(format!("VALUE is not JSON text: {error}")));
    let mut set = kv.set(key);
    set = if encoding.json {
        set.json(&parse_json()?)?
    } else if encoding.msgpack {
        set.msgpack(&parse_json()?)?
    } else {
        set.bytes(value)
    };
    if let Some(ttl) = expiry.ttl {
        set = set.ttl(ttl);
    }
    if let Some(epoch_micros) = expiry.expires_at {
        set = set.expires_at(epoch_micros);
    }
    Ok(set)
}

/// A value as text: MessagePack is shown as JSON, other bytes as they are.
fn value_text(entry: &Entry) -> String {
    if entry.encoding == Encoding::Msgpack {
        if let Ok(value) = MsgpackCodec.decode::<Value>(&entry.value) {
            return value.to_string();
        }
    }
    String::from_utf8_lossy(&entry.value).into_owned()
}

fn entry_json(entry: &Entry) -> Value {
    json!({
        "key": String::from_utf8_lossy(&entry.key),
        "value": value_text(entry),
        "encoding": match &entry.encoding {
            Encoding::Bytes => "bytes".to_owned(),
            Encoding::Json => "json".to_owned(),
            Encoding::Msgpack => "msgpack".to_owned(),
            Encoding::Custom(name) => name.clone(),
            Encoding::V8 => "v8".to_owned(),
            Encoding::Le64 => "le64".to_owned(),
        },
        "version": entry.version,
        "expires_at_micros": entry.expires_at_micros,
        "source": { "term": entry.source_term, "index": entry.source_index },
    })
}

async fn copy_or_move(builder: lode_client::kv::CopyBuilder, into: Option<String>) -> Result<u64, LodeError> {
    match into {
        Some(namespace) => builder.into_namespace(namespace).send().await,
        None => builder.send().await,
    }
}

fn not_found() -> ExitCode {
    eprintln!("not found");
    ExitCode::FAILURE
}

pub async fn run(command: KvCommand) -> Result<ExitCode, LodeError> {
    match command {
        KvCommand::Set {
            namespace,
            key,
            value,
            encoding,
            expiry,
            endpoints,
        } => {
            let kv = endpoints.client()?.kv(namespace);
            println!("{}", build_set(&kv, &key, &value, encoding, expiry)?.send().await?);
        }
        KvCommand::Cas {
            namespace,
            key,
            value,
            expect_version,
            expect_absent,
            encoding,
            expiry,
            endpoints,
        } => {
            let kv = endpoints.client()?.kv(namespace);
            let set = build_set(&kv, &key, &value, encoding, expiry)?;
            let set = match (expect_version, expect_absent) {
                (Some(version), _) => set.expect_version(version),
                (None, true) => set.expect_absent(),
                (None, false) => return Err(invalid("cas needs --expect-version or --expect-absent")),
            };
            println!("{}", set.commit().await?);
        }
        KvCommand::Get {
            namespace,
            key,
            consistency,
            at_least,
            endpoints,
        } => {
            let consistency = match (at_least, consistency) {
                (Some(position), _) => Consistency::AtLeast(position),
                (None, ConsistencyArgument::Linearizable) => Consistency::Linearizable,
                (None, ConsistencyArgument::Eventual) => Consistency::Eventual,
            };
            match endpoints
                .client()?
                .kv(namespace)
                .get_entry_with(key, consistency)
                .await?
                .0
            {
                Some(entry) => println!("{}", value_text(&entry)),
                None => return Ok(not_found()),
            }
        }
        KvCommand::Entry {
            namespace,
            key,
            endpoints,
        } => match endpoints.client()?.kv(namespace).get_entry(key).await? {
            Some(entry) => print_json(&entry_json(&entry)),
            None => return Ok(not_found()),
        },
        KvCommand::Exists {
            namespace,
            key,
            json,
            endpoints,
        } => match endpoints.client()?.kv(namespace).exists(key).await? {
            Some(meta) if json => print_json(&json!({
                "version": meta.version,
                "expires_at_micros": meta.expires_at_micros,
                "size_bytes": meta.size_bytes,
            })),
            Some(meta) => {
                let expiry = meta
                    .expires_at_micros
                    .map(|at| at.to_string())
                    .unwrap_or_else(|| "none".to_owned());
                println!(
                    "version={} expires_at_micros={expiry} size_bytes={}",
                    meta.version, meta.size_bytes
                );
            }
            None => return Ok(not_found()),
        },
        KvCommand::Del {
            namespace,
            key,
            endpoints,
        } => {
            println!("{}", endpoints.client()?.kv(namespace).delete(key).await?);
        }
        KvCommand::Expire {
            namespace,
            key,
            expiry,
            clear,
            endpoints,
        } => {
            let kv = endpoints.client()?.kv(namespace);
            match (expiry.ttl, expiry.expires_at, clear) {
                (Some(ttl), _, _) => kv.expire(key, Some(ttl)).await?,
                (None, Some(at), _) => kv.expire_at(key, Some(at)).await?,
                (None, None, true) => kv.expire(key, None).await?,
                (None, None, false) => return Err(invalid("expire needs --ttl, --expires-at or --clear")),
            }
        }
        KvCommand::Patch {
            namespace,
            key,
            patch,
            endpoints,
        } => {
            println!("{}", endpoints.client()?.kv(namespace).patch(key, patch).await?);
        }
        KvCommand::Copy {
            namespace,
            key,
            to_key,
            into,
            endpoints,
        } => {
            let kv = endpoints.client()?.kv(namespace);
            println!("{}", copy_or_move(kv.copy_to(key, to_key), into).await?);
        }
        KvCommand::Move {
            namespace,
            key,
            to_key,
            into,
            endpoints,
        } => {
            let kv = endpoints.client()?.kv(namespace);
            println!("{}", copy_or_move(kv.move_to(key, to_key), into).await?);
        }
        KvCommand::GetMany {
            namespace,
            keys,
            json,
            endpoints,
        } => {
            let values = endpoints.client()?.kv(namespace).get_many(&keys).await?;
            if json {
                let values: Vec<Value> = values
                    .iter()
                    .map(|value| {
                        value.as_ref().map_or(Value::Null, |value| {
                            Value::String(String::from_utf8_lossy(value).into_owned())
                        })
                    })
                    .collect();
                print_json(&Value::Array(values));
            } else {
                for (key, value) in keys.iter().zip(values) {
                    match value {
                        Some(value) => println!("{key}\t{}", String::from_utf8_lossy(&value)),
                        None => println!("{key}\t(absent)"),
                    }
                }
            }
        }
        KvCommand::DeleteMany {
            namespace,
            selector,
            endpoints,
        } => {
            let kv = endpoints.client()?.kv(namespace);
            println!("{}", selector.apply(kv.delete_many()).send().await?);
        }
        KvCommand::Scan {
            namespace,
            selector,
            limit,
            cursor,
            all,
            json,
            endpoints,
        } => {
            let kv = endpoints.client()?.kv(namespace);
            let mut scan = selector.apply(kv.scan()).limit(limit);
            if let Some(cursor) = cursor {
                scan = scan.cursor(cursor);
            }
            let (entries, next) = if all {
                (scan.entries().try_collect::<Vec<Entry>>().await?, None)
            } else {
                let page = scan.fetch().await?;
                (page.entries, page.cursor)
            };
            if json {
                print_json(&json!({
                    "entries": entries.iter().map(entry_json).collect::<Vec<_>>(),
                    "cursor": next,
                }));
            } else {
                for entry in &entries {
                    println!("{}\t{}", String::from_utf8_lossy(&entry.key), value_text(entry));
                }
                if let Some(cursor) = next {
                    println!("cursor: {cursor}");
                }
            }
        }
        KvCommand::Namespaces { json, endpoints } => {
            let names = endpoints.client()?.kv_namespaces().await?;
            if json {
                print_json(&json!(names));
            } else {
                for name in names {
                    println!("{name}");
                }
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
