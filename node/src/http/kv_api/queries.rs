//! The reads `POST /kv/v1/read` takes (`{"query": {"op": "get", …},
//! "consistency": …}`): get, exists, get_many, scan, namespaces,
//! session_keys and lease; the entries, pages and change events they answer.

use lode_client::protocol::{ChangeEvent, Consistency, Entry, Query, QueryResult, SessionLink};
use lode_client::LodeError;
use serde::{Deserialize, Serialize};

use super::operations::SelectorJson;
use super::wire::{encoding_name, WireBytes, WireU64};

/// One read, named by its `op` field (read through `wire::untag`).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub(super) enum QueryJson {
    Get {
        namespace: String,
        key: WireBytes,
    },
    Exists {
        namespace: String,
        key: WireBytes,
    },
    GetMany {
        namespace: String,
        keys: Vec<WireBytes>,
    },
    /// One page; `cursor` is a page's `cursor`, to continue after it.
    Scan {
        namespace: String,
        #[serde(default)]
        prefix: Option<WireBytes>,
        #[serde(default)]
        start: Option<WireBytes>,
        #[serde(default)]
        end: Option<WireBytes>,
        #[serde(default)]
        key_contains: Option<String>,
        #[serde(default)]
        cursor: Option<String>,
        #[serde(default)]
        limit: Option<u32>,
    },
    Namespaces {
        #[serde(default)]
        prefix: String,
    },
    SessionKeys {
        session: SessionLink,
        #[serde(default)]
        after: Option<WireBytes>,
        #[serde(default)]
        limit: Option<u32>,
    },
    Lease {
        namespace: String,
        key: WireBytes,
    },
}

impl QueryJson {
    pub(super) fn query(self) -> Result<Query, LodeError> {
        Ok(match self {
            QueryJson::Get { namespace, key } => Query::Get { namespace, key: key.0 },
            QueryJson::Exists { namespace, key } => Query::Exists { namespace, key: key.0 },
            QueryJson::GetMany { namespace, keys } => Query::GetMany {
                namespace,
                keys: keys.into_iter().map(|key| serde_bytes::ByteBuf::from(key.0)).collect(),
            },
            QueryJson::Scan {
                namespace,
                prefix,
                start,
                end,
                key_contains,
                cursor,
                limit,
            } => Query::Scan {
                namespace,
                selector: SelectorJson {
                    prefix,
                    start,
                    end,
                    key_contains,
                }
                .selector()?,
                after: cursor.as_deref().map(lode_client::kv::decode_cursor).transpose()?,
                limit: limit.unwrap_or(lode_client::kv::SCAN_LIMIT_DEFAULT),
            },
            QueryJson::Namespaces { prefix } => Query::Namespaces { prefix },
            QueryJson::SessionKeys { session, after, limit } => Query::SessionKeys {
                session,
                after: after.map(|after| after.0),
                limit: limit.unwrap_or(lode_client::sdk::SESSION_KEYS_PAGE),
            },
            QueryJson::Lease { namespace, key } => Query::Lease { namespace, key: key.0 },
        })
    }
}

/// How fresh a read must be: `"linearizable"` (the default), `"eventual"`
/// (this member's state), or `{"at_least": "<position>"}`.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub(super) enum ConsistencyJson {
    #[default]
    Linearizable,
    Eventual,
    AtLeast(WireU64),
}

impl ConsistencyJson {
    pub(super) fn consistency(&self) -> Consistency {
        match self {
            ConsistencyJson::Linearizable => Consistency::Linearizable,
            ConsistencyJson::Eventual => Consistency::Eventual,
            ConsistencyJson::AtLeast(position) => Consistency::AtLeast(position.0),
        }
    }
}

/// A stored entry.
#[derive(Debug, Serialize)]
pub(super) struct EntryJson {
    key: WireBytes,
    value: WireBytes,
    encoding: String,
    version: WireU64,
    expires_at_micros: Option<WireU64>,
    source_term: WireU64,
    source_index: WireU64,
    session: Option<SessionLink>,
}

impl From<Entry> for EntryJson {
    fn from(entry: Entry) -> Self {
        Self {
            key: WireBytes(entry.key),
            value: WireBytes(entry.value),
            encoding: encoding_name(&entry.encoding),
            version: WireU64(entry.version),
            expires_at_micros: entry.expires_at_micros.map(WireU64),
            source_term: WireU64(entry.source_term),
            source_index: WireU64(entry.source_index),
            session: entry.session,
        }
    }
}

/// One (namespace, key) a session wrote.
#[derive(Debug, Serialize)]
pub(super) struct SessionKeyJson {
    namespace: String,
    key: WireBytes,
}

/// What a read answered, beside its `position`.
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub(super) enum AnswerJson {
    Entry {
        entry: Option<EntryJson>,
    },
    Exists {
        exists: Option<MetaJson>,
    },
    Entries {
        entries: Vec<Option<EntryJson>>,
    },
    Page {
        entries: Vec<EntryJson>,
        cursor: Option<String>,
    },
    Namespaces {
        namespaces: Vec<String>,
    },
    SessionKeys {
        keys: Vec<SessionKeyJson>,
        resume_after: Option<WireBytes>,
    },
    Lease {
        lease: Option<LeaseJson>,
    },
}

#[derive(Debug, Serialize)]
pub(super) struct MetaJson {
    version: WireU64,
    expires_at_micros: Option<WireU64>,
    size_bytes: WireU64,
}

#[derive(Debug, Serialize)]
pub(super) struct LeaseJson {
    holder: String,
    token: WireU64,
    expires_at_micros: WireU64,
}

impl AnswerJson {
    /// The JSON of a KV query's answer; another kind is a server bug,
    /// reported as `unavailable`.
    pub(super) fn from_result(result: QueryResult) -> Result<Self, LodeError> {
        Ok(match result {
            QueryResult::Entry(entry) => AnswerJson::Entry {
                entry: entry.map(EntryJson::from),
            },
            QueryResult::Exists(meta) => AnswerJson::Exists {
                exists: meta.map(|meta| MetaJson {
                    version: WireU64(meta.version),
                    expires_at_micros: meta.expires_at_micros.map(WireU64),
                    size_bytes: WireU64(meta.size_bytes),
                }),
            },
            QueryResult::Entries(entries) => AnswerJson::Entries {
                entries: entries.into_iter().map(|entry| entry.map(EntryJson::from)).collect(),
            },
            QueryResult::Page { entries, resume_after } => AnswerJson::Page {
                entries: entries.into_iter().map(EntryJson::from).collect(),
                cursor: resume_after.as_deref().map(lode_client::kv::encode_cursor),
            },
            QueryResult::Namespaces(namespaces) => AnswerJson::Namespaces { namespaces },
            QueryResult::SessionKeys { keys, resume_after } => AnswerJson::SessionKeys {
                keys: keys
                    .into_iter()
                    .map(|(namespace, key)| SessionKeyJson {
                        namespace,
                        key: WireBytes(key.into_vec()),
                    })
                    .collect(),
                resume_after: resume_after.map(WireBytes),
            },
            QueryResult::Lease(lease) => AnswerJson::Lease {
                lease: lease.map(|lease| LeaseJson {
                    holder: lease.holder,
                    token: WireU64(lease.token),
                    expires_at_micros: WireU64(lease.expires_at_micros),
                }),
            },
            other => {
                return Err(LodeError::Unavailable(format!(
                    "the server answered a KV query with {other:?}"
                )))
            }
        })
    }
}

/// One change of the change feed.
#[derive(Debug, Serialize)]
pub(super) struct ChangeJson {
    index: WireU64,
    sequence: u32,
    namespace: String,
    key: WireBytes,
    kind: &'static str,
    old_value: Option<WireBytes>,
    new_value: Option<WireBytes>,
    encoding: String,
    version: WireU64,
}

impl From<ChangeEvent> for ChangeJson {
    fn from(event: ChangeEvent) -> Self {
        use lode_client::protocol::ChangeKind;
        Self {
            index: WireU64(event.index),
            sequence: event.sequence,
            namespace: event.namespace,
            key: WireBytes(event.key),
            kind: match event.kind {
                ChangeKind::Created => "created",
                ChangeKind::Updated => "updated",
                ChangeKind::Deleted => "deleted",
            },
            old_value: event.old_value.map(WireBytes),
            new_value: event.new_value.map(WireBytes),
            encoding: encoding_name(&event.encoding),
            version: WireU64(event.version),
        }
    }
}
