//! A namespace handle: every key-value operation of the KV API, with the
//! exact semantics of the KV seed (preconditions committed, never dropped;
//! missing and expired entries read as absent; bounded pages with opaque
//! cursors).

use std::time::Duration;

use futures::Stream;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::codec::{Codec, JsonCodec, MsgpackCodec};
use crate::error::{unexpected, LodeError};
use crate::protocol::{
    Capability, Consistency, Encoding, Entry, EntryMeta, Fence, LeaseInfo, Operation, OperationResult, Precondition,
    Query, QueryResult, ReadRequest, Selector, SessionLink, WriteRequest, WriteResponse,
};
use crate::sdk::{duration_micros, new_op_id, Client};

/// Entries one range delete examines per round trip; `delete_many` repeats
/// until the selection is done.
pub const DELETE_MANY_ENTRIES_PER_CALL: u32 = 1000;
/// Entries a scan page holds when `limit` is not given.
pub const SCAN_LIMIT_DEFAULT: u32 = 100;

/// Operations on one namespace.
#[derive(Clone, Debug)]
pub struct Kv {
    client: Client,
    /// The name the application gave.
    namespace: String,
    /// The name sent to the cluster (stream-scoped when the client has a
    /// default stream).
    resource_namespace: String,
    consistency: Consistency,
    /// Stamped on every set, compare-and-swap, delete and patch.
    session: Option<SessionLink>,
}

/// Checks every operation's limits before anything is sent. Sweeps are
/// the leader's own and never come from a client.
/// A granted or renewed lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lease {
    /// The fencing token: the log index of the grant. Renewal keeps it.
    pub token: u64,
    /// The TTL granted, at most the one asked for.
    pub ttl: Duration,
    /// The commit position of the grant or renewal: read with
    /// `get_entry_at_least(key, position)` before a protected update.
    pub position: u64,
    /// When the lease expires, in the cluster's log time.
    pub expires_at_micros: u64,
}

impl Lease {
    /// The lease a grant or renewal answered.
    pub(crate) fn from_response(response: &WriteResponse) -> Result<Lease, LodeError> {
        match response.results.first() {
            Some(OperationResult::AcquireLease {
                token,
                ttl_micros,
                expires_at_micros,
            })
            | Some(OperationResult::RenewLease {
                token,
                ttl_micros,
                expires_at_micros,
            }) => Ok(Lease {
                token: *token,
                ttl: Duration::from_micros(*ttl_micros),
                position: response.position,
                expires_at_micros: *expires_at_micros,
            }),
            other => Err(unexpected("a lease call", &other)),
        }
    }
}

fn now_plus(duration: Duration) -> u64 {
    crate::facade::now_micros().saturating_add(duration_micros(duration))
}

/// An opaque cursor for the key a scan resumes after (every API that pages
/// a scan hands out this one).
pub fn encode_cursor(key: &[u8]) -> String {
    key.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// The key a cursor from [`encode_cursor`] resumes after; `invalid` for
/// any other text.
pub fn decode_cursor(cursor: &str) -> Result<Vec<u8>, LodeError> {
    let invalid = || LodeError::Invalid(format!("cursor {cursor:?} is not one a scan returned"));
    if !cursor.len().is_multiple_of(2) {
        return Err(invalid());
    }
    (0..cursor.len())
        .step_by(2)
        .map(|at| {
            cursor
                .get(at..at + 2)
                .and_then(|pair| u8::from_str_radix(pair, 16).ok())
                .ok_or_else(invalid)
        })
        .collect()
}

impl Kv {
    pub(crate) fn new(client: Client, namespace: String, resource_namespace: String) -> Self {
        Self {
            client,
            namespace,
            resource_namespace,
            consistency: Consistency::Linearizable,
            session: None,
        }
    }

    /// The namespace name this handle was opened with.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The namespace name sent to the cluster.
    pub fn resource_namespace(&self) -> &str {
        &self.resource_namespace
    }

    /// A handle whose sets, compare-and-swaps, deletes and patches are
    /// linked to `session`: the link is stored with the entry and the keys
    /// a session wrote can be listed with `Client::session_keys`.
    pub fn in_session(&self, session: SessionLink) -> Kv {
        Kv {
            session: Some(session),
            ..self.clone()
        }
    }

    /// A handle whose reads (`get`, `get_entry`, `exists`, `get_many`,
    /// `scan`) use `consistency` instead of linearizable reads.
    pub fn with_consistency(&self, consistency: Consistency) -> Kv {
        Kv {
            consistency,
            ..self.clone()
        }
    }

    /// Sends one operation as its own atomic write.
    async fn write_one(&self, operation: Operation) -> Result<OperationResult, LodeError> {
        self.client.require(Capability::Kv).await?;
        self.client.write_one(operation).await
    }

    async fn query(&self, query: Query, consistency: Consistency) -> Result<(QueryResult, u64), LodeError> {
        self.client.require(Capability::Kv).await?;
        let response = self.client.read(ReadRequest { query, consistency }).await?;
        Ok((response.result, response.position))
    }

    /// Starts a write of `key`; choose the value, then `.send()`, or set a
    /// precondition and `.commit()`.
    pub fn set(&self, key: impl AsRef<[u8]>) -> SetBuilder {
        SetBuilder {
            kv: self.clone(),
            key: key.as_ref().to_vec(),
            value: Vec::new(),
            encoding: Encoding::Bytes,
            expires_at_micros: None,
            precondition: None,
            fence: None,
        }
    }

    /// A write of `key` that applies only while the lease `fence_key` of
    /// coordination namespace `fence_namespace` is held with `token`; it
    /// needs a precondition and `.commit()`, and fails with `lease_lost`
    /// once the lease expired, was released or was granted again.
    pub fn cas_fenced(
        &self,
        key: impl AsRef<[u8]>,
        fence_namespace: impl AsRef<str>,
        fence_key: impl AsRef<[u8]>,
        token: u64,
    ) -> SetBuilder {
        let mut builder = self.set(key);
        builder.fence = Some(Fence {
            namespace: self.client.resource_namespace(fence_namespace.as_ref()),
            key: fence_key.as_ref().to_vec(),
            token,
        });
        builder
    }

    /// Acquires the lease `key` of this namespace for `holder`. A live lease
    /// (also the holder's own) is a version conflict carrying its token;
    /// renew it instead. The grant's TTL is at most `ttl`.
    ///
    /// Acquisitions run one at a time per client. When the outcome stays
    /// unknown, the call waits out `ttl` (so any grant made has expired)
    /// before it returns `ambiguous_mutation`; the next acquisition waits
    /// too, even if this call was dropped.
    pub async fn lease(
        &self,
        key: impl AsRef<[u8]>,
        holder: impl Into<String>,
        ttl: Duration,
    ) -> Result<Lease, LodeError> {
        self.client.require(Capability::FencedLeases).await?;
        let operation = Operation::AcquireLease {
            namespace: self.resource_namespace.clone(),
            key: key.as_ref().to_vec(),
            holder: holder.into(),
            ttl_micros: duration_micros(ttl),
        };
        let request = WriteRequest {
            op_id: new_op_id(),
            operations: vec![operation],
        };
        // acquire_gated sends through Client::write, which validates first.
        Lease::from_response(&self.client.acquire_gated(request, ttl).await?)
    }

    /// Extends a held lease to `ttl` from now, keeping its token; fails
    /// with `lease_lost` when it is no longer held with `token`.
    pub async fn renew_lease(
        &self,
        key: impl AsRef<[u8]>,
        holder: impl Into<String>,
        token: u64,
        ttl: Duration,
    ) -> Result<Lease, LodeError> {
        self.client.require(Capability::FencedLeases).await?;
        let operation = Operation::RenewLease {
            namespace: self.resource_namespace.clone(),
            key: key.as_ref().to_vec(),
            holder: holder.into(),
            token,
            ttl_micros: duration_micros(ttl),
        };
        let request = WriteRequest {
            op_id: new_op_id(),
            operations: vec![operation],
        };
        Lease::from_response(&self.client.write(request).await?)
    }

    /// Revokes a held lease at once; true when one was released, false when
    /// it was not held by `holder` with `token`.
    pub async fn release(
        &self,
        key: impl AsRef<[u8]>,
        holder: impl Into<String>,
        token: u64,
    ) -> Result<bool, LodeError> {
        self.client.require(Capability::FencedLeases).await?;
        let operation = Operation::ReleaseLease {
            namespace: self.resource_namespace.clone(),
            key: key.as_ref().to_vec(),
            holder: holder.into(),
            token,
        };
        match self.write_one(operation).await? {
            OperationResult::ReleaseLease { released } => Ok(released),
            other => Err(unexpected("release", &other)),
        }
    }

    /// The live lease `key` of this namespace: holder, token and expiry.
    pub async fn lease_info(&self, key: impl AsRef<[u8]>) -> Result<Option<LeaseInfo>, LodeError> {
        let query = Query::Lease {
            namespace: self.resource_namespace.clone(),
            key: key.as_ref().to_vec(),
        };
        match self.query(query, self.consistency).await? {
            (QueryResult::Lease(lease), _) => Ok(lease),
            (other, _) => Err(unexpected("lease_info", &other)),
        }
    }

    /// The value at `key`, or `None` when absent or expired.
    pub async fn get(&self, key: impl AsRef<[u8]>) -> Result<Option<Vec<u8>>, LodeError> {
        Ok(self.get_entry(key).await?.map(|entry| entry.value))
    }

    /// The value at `key` decoded as JSON.
    pub async fn get_typed<T: DeserializeOwned>(&self, key: impl AsRef<[u8]>) -> Result<Option<T>, LodeError> {
        self.get_as(key, &JsonCodec).await
    }

    /// The value at `key` decoded with `codec`.
    pub async fn get_as<T: DeserializeOwned, C: Codec>(
        &self,
        key: impl AsRef<[u8]>,
        codec: &C,
    ) -> Result<Option<T>, LodeError> {
        match self.get(key).await? {
            Some(bytes) => Ok(Some(codec.decode(&bytes)?)),
            None => Ok(None),
        }
    }

    /// The entry at `key`: value, key, version, expiry and source.
    pub async fn get_entry(&self, key: impl AsRef<[u8]>) -> Result<Option<Entry>, LodeError> {
        Ok(self.get_entry_with(key, self.consistency).await?.0)
    }

    /// The entry at `key` once the serving node has applied `position`; a
    /// `stale` error when it does not catch up in time.
    pub async fn get_entry_at_least(&self, key: impl AsRef<[u8]>, position: u64) -> Result<Option<Entry>, LodeError> {
        Ok(self.get_entry_with(key, Consistency::AtLeast(position)).await?.0)
    }

    /// The entry at `key` with explicit consistency, and the position it was
    /// served at (a barrier for the next read elsewhere).
    pub async fn get_entry_with(
        &self,
        key: impl AsRef<[u8]>,
        consistency: Consistency,
    ) -> Result<(Option<Entry>, u64), LodeError> {
        let query = Query::Get {
            namespace: self.resource_namespace.clone(),
            key: key.as_ref().to_vec(),
        };
        match self.query(query, consistency).await? {
            (QueryResult::Entry(entry), position) => Ok((entry, position)),
            (other, _) => Err(unexpected("get", &other)),
        }
    }

    /// Removes `key`; true when a live entry was removed.
    pub async fn delete(&self, key: impl AsRef<[u8]>) -> Result<bool, LodeError> {
        let operation = Operation::Delete {
            namespace: self.resource_namespace.clone(),
            key: key.as_ref().to_vec(),
            session: self.session.clone(),
        };
        match self.write_one(operation).await? {
            OperationResult::Delete { removed_live_entry } => Ok(removed_live_entry),
            other => Err(unexpected("delete", &other)),
        }
    }

    /// The version, expiry and size of the live entry at `key`, without its
    /// value, or `None`.
    pub async fn exists(&self, key: impl AsRef<[u8]>) -> Result<Option<EntryMeta>, LodeError> {
        let query = Query::Exists {
            namespace: self.resource_namespace.clone(),
            key: key.as_ref().to_vec(),
        };
        match self.query(query, self.consistency).await? {
            (QueryResult::Exists(meta), _) => Ok(meta),
            (other, _) => Err(unexpected("exists", &other)),
        }
    }

    /// Sets the expiry to `ttl` from now, or clears it with `None`, without
    /// rewriting the value or changing the version. An absent or expired
    /// key is `not_found`.
    pub async fn expire(&self, key: impl AsRef<[u8]>, ttl: Option<Duration>) -> Result<(), LodeError> {
        self.expire_at(key, ttl.map(now_plus)).await
    }

    /// Sets the expiry to an absolute time (microseconds since the epoch), or
    /// clears it with `None`.
    pub async fn expire_at(&self, key: impl AsRef<[u8]>, epoch_micros: Option<u64>) -> Result<(), LodeError> {
        let operation = Operation::Expire {
            namespace: self.resource_namespace.clone(),
            key: key.as_ref().to_vec(),
            expires_at_micros: epoch_micros,
        };
        match self.write_one(operation).await? {
            OperationResult::Expire { .. } => Ok(()),
            other => Err(unexpected("expire", &other)),
        }
    }

    /// Applies a JSON merge patch (RFC 7386) to a JSON entry and returns the
    /// new version. A non-JSON entry or a malformed patch is `invalid`; an
    /// absent key is `not_found`.
    pub async fn patch(&self, key: impl AsRef<[u8]>, merge_patch: impl AsRef<[u8]>) -> Result<u64, LodeError> {
        let operation = Operation::Patch {
            namespace: self.resource_namespace.clone(),
            key: key.as_ref().to_vec(),
            patch: merge_patch.as_ref().to_vec(),
            session: self.session.clone(),
        };
        match self.write_one(operation).await? {
            OperationResult::Patch { version } => Ok(version),
            other => Err(unexpected("patch", &other)),
        }
    }

    /// Copies the entry at `key` to `to_key` (same namespace unless
    /// `.into_namespace(..)`); finish with `.send()`.
    pub fn copy_to(&self, key: impl AsRef<[u8]>, to_key: impl AsRef<[u8]>) -> CopyBuilder {
        CopyBuilder::new(self.clone(), key.as_ref().to_vec(), to_key.as_ref().to_vec(), false)
    }

    /// Moves the entry at `key` to `to_key` in one transaction; finish with
    /// `.send()`.
    pub fn move_to(&self, key: impl AsRef<[u8]>, to_key: impl AsRef<[u8]>) -> CopyBuilder {
        CopyBuilder::new(self.clone(), key.as_ref().to_vec(), to_key.as_ref().to_vec(), true)
    }

    /// One optional value per key, in the order given, read from one
    /// consistent view.
    pub async fn get_many<K: AsRef<[u8]>>(&self, keys: &[K]) -> Result<Vec<Option<Vec<u8>>>, LodeError> {
        let query = Query::GetMany {
            namespace: self.resource_namespace.clone(),
            keys: keys
                .iter()
                .map(|key| serde_bytes::ByteBuf::from(key.as_ref().to_vec()))
                .collect(),
        };
        match self.query(query, self.consistency).await? {
            (QueryResult::Entries(entries), _) if entries.len() == keys.len() => Ok(entries
                .into_iter()
                .map(|entry| entry.map(|entry| entry.value))
                .collect()),
            (other, _) => Err(unexpected("get_many", &other)),
        }
    }

    /// Starts a bulk delete; without a bound it clears the namespace.
    pub fn delete_many(&self) -> DeleteManyBuilder {
        DeleteManyBuilder {
            kv: self.clone(),
            selector: Selector::All,
        }
    }

    /// Starts a scan; without a bound it walks the whole namespace.
    pub fn scan(&self) -> ScanBuilder {
        ScanBuilder {
            kv: self.clone(),
            selector: Selector::All,
            limit: SCAN_LIMIT_DEFAULT,
            cursor: None,
        }
    }
}

/// A write being built.
#[derive(Debug)]
pub struct SetBuilder {
    kv: Kv,
    key: Vec<u8>,
    value: Vec<u8>,
    encoding: Encoding,
    expires_at_micros: Option<u64>,
    precondition: Option<Precondition>,
    fence: Option<Fence>,
}

impl SetBuilder {
    /// Raw bytes.
    pub fn bytes(mut self, value: impl AsRef<[u8]>) -> Self {
        self.value = value.as_ref().to_vec();
        self.encoding = Encoding::Bytes;
        self
    }

    /// A value encoded as JSON.
    pub fn json<T: Serialize + ?Sized>(self, value: &T) -> Result<Self, LodeError> {
        self.encode_with(&JsonCodec, value)
    }

    /// A value encoded as MessagePack (structs as named maps).
    pub fn msgpack<T: Serialize + ?Sized>(self, value: &T) -> Result<Self, LodeError> {
        self.encode_with(&MsgpackCodec, value)
    }

    /// A value encoded with any codec; its encoding is stored with the entry.
    pub fn encode_with<C: Codec, T: Serialize + ?Sized>(mut self, codec: &C, value: &T) -> Result<Self, LodeError> {
        self.value = codec.encode(value)?;
        self.encoding = codec.encoding();
        Ok(self)
    }

    /// Expires `ttl` from now.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.expires_at_micros = Some(now_plus(ttl));
        self
    }

    /// Expires at an absolute time, in microseconds since the epoch.
    pub fn expires_at(mut self, epoch_micros: u64) -> Self {
        self.expires_at_micros = Some(epoch_micros);
        self
    }

    /// Write only if the key's live entry is at `version`; finish with
    /// `.commit()`.
    pub fn expect_version(mut self, version: u64) -> Self {
        self.precondition = Some(Precondition::Version(version));
        self
    }

    /// Write only if the key holds no live entry; finish with `.commit()`.
    pub fn expect_absent(mut self) -> Self {
        self.precondition = Some(Precondition::Absent);
        self
    }

    fn operation(self) -> (Kv, Operation) {
        let operation = Operation::Set {
            namespace: self.kv.resource_namespace.clone(),
            key: self.key,
            value: self.value,
            encoding: self.encoding,
            expires_at_micros: self.expires_at_micros,
            precondition: self.precondition,
            fence: self.fence,
            session: self.kv.session.clone(),
        };
        (self.kv, operation)
    }

    /// Writes unconditionally and returns the new version. Refused when a
    /// precondition is set, so that a precondition is never dropped.
    pub async fn send(self) -> Result<u64, LodeError> {
        if self.fence.is_some() {
            return Err(LodeError::Invalid(
                "a fenced write needs expect_version or expect_absent and .commit()".to_owned(),
            ));
        }
        if self.precondition.is_some() {
            return Err(LodeError::Invalid(
                "a precondition (expect_version or expect_absent) is set: call .commit() to apply it; .send() writes unconditionally".to_owned(),
            ));
        }
        let (kv, operation) = self.operation();
        match kv.write_one(operation).await? {
            OperationResult::Set { version } => Ok(version),
            other => Err(unexpected("set", &other)),
        }
    }

    /// Applies the guarded write and returns the new version; a changed
    /// version is a `version_conflict` carrying the current version.
    pub async fn commit(self) -> Result<u64, LodeError> {
        if self.precondition.is_none() {
            return Err(LodeError::Invalid(
                ".commit() needs expect_version or expect_absent; use .send() for an unconditional write".to_owned(),
            ));
        }
        self.kv.client.require(Capability::Cas).await?;
        if self.fence.is_some() {
            self.kv.client.require(Capability::FencedLeases).await?;
        }
        let (kv, operation) = self.operation();
        match kv.write_one(operation).await? {
            OperationResult::Set { version } => Ok(version),
            other => Err(unexpected("commit", &other)),
        }
    }
}

/// A copy or move being built.
#[derive(Debug)]
pub struct CopyBuilder {
    kv: Kv,
    key: Vec<u8>,
    to_key: Vec<u8>,
    to_namespace: String,
    remove_source: bool,
}

impl CopyBuilder {
    fn new(kv: Kv, key: Vec<u8>, to_key: Vec<u8>, remove_source: bool) -> Self {
        let to_namespace = kv.resource_namespace.clone();
        Self {
            kv,
            key,
            to_key,
            to_namespace,
            remove_source,
        }
    }

    /// Writes the destination in another namespace (scoped like the
    /// client's namespaces).
    pub fn into_namespace(mut self, namespace: impl AsRef<str>) -> Self {
        self.to_namespace = self.kv.client.resource_namespace(namespace.as_ref());
        self
    }

    /// Copies or moves in one transaction and returns the destination's new
    /// version. The destination is overwritten and keeps the source's
    /// remaining expiry; an absent or expired source is `not_found`.
    pub async fn send(self) -> Result<u64, LodeError> {
        let operation = Operation::Copy {
            namespace: self.kv.resource_namespace.clone(),
            key: self.key,
            to_namespace: self.to_namespace,
            to_key: self.to_key,
            remove_source: self.remove_source,
        };
        match self.kv.write_one(operation).await? {
            OperationResult::Copy { version } => Ok(version),
            other => Err(unexpected("copy", &other)),
        }
    }
}

/// Narrows a bulk operation to part of the namespace.
pub trait Bounds: Sized {
    #[doc(hidden)]
    fn selector_mut(&mut self) -> &mut Selector;

    /// Keys that start with `prefix`.
    fn prefix(mut self, prefix: impl AsRef<[u8]>) -> Self {
        *self.selector_mut() = Selector::Prefix(prefix.as_ref().to_vec());
        self
    }

    /// Keys with `start <= key < end`.
    fn range(mut self, start: impl AsRef<[u8]>, end: impl AsRef<[u8]>) -> Self {
        *self.selector_mut() = Selector::Range {
            start: start.as_ref().to_vec(),
            end: end.as_ref().to_vec(),
        };
        self
    }

    /// UTF-8 keys that contain `text`; keys that are not UTF-8 are skipped.
    fn key_contains(mut self, text: impl Into<String>) -> Self {
        *self.selector_mut() = Selector::KeyContains(text.into());
        self
    }
}

/// A bulk delete being built.
#[derive(Debug)]
pub struct DeleteManyBuilder {
    kv: Kv,
    selector: Selector,
}

impl Bounds for DeleteManyBuilder {
    fn selector_mut(&mut self) -> &mut Selector {
        &mut self.selector
    }
}

impl DeleteManyBuilder {
    /// Removes the selected entries and returns how many live ones it
    /// removed. Each round trip is atomic on its own; a large selection
    /// takes several.
    pub async fn send(self) -> Result<u64, LodeError> {
        self.selector.validate().map_err(LodeError::Invalid)?;
        let mut removed_total = 0;
        let mut after = None;
        loop {
            let operation = Operation::DeleteRange {
                namespace: self.kv.resource_namespace.clone(),
                selector: self.selector.clone(),
                after: after.take(),
                entries_max: DELETE_MANY_ENTRIES_PER_CALL,
            };
            match self.kv.write_one(operation).await? {
                OperationResult::DeleteRange { removed, resume_after } => {
                    removed_total += u64::from(removed);
                    match resume_after {
                        Some(key) => after = Some(key),
                        None => return Ok(removed_total),
                    }
                }
                other => return Err(unexpected("delete_many", &other)),
            }
        }
    }
}

/// One page of a scan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScanPage {
    pub entries: Vec<Entry>,
    /// Pass to `.cursor(..)` for the next page; `None` when the walk is done.
    pub cursor: Option<String>,
}

/// A scan being built.
#[derive(Debug, Clone)]
pub struct ScanBuilder {
    kv: Kv,
    selector: Selector,
    limit: u32,
    cursor: Option<String>,
}

impl Bounds for ScanBuilder {
    fn selector_mut(&mut self) -> &mut Selector {
        &mut self.selector
    }
}

impl ScanBuilder {
    /// Entries per page (1 to `scan_page_entries_max`).
    pub fn limit(mut self, limit: u32) -> Self {
        self.limit = limit;
        self
    }

    /// Continues a walk from a cursor an earlier page returned.
    pub fn cursor(mut self, cursor: impl Into<String>) -> Self {
        self.cursor = Some(cursor.into());
        self
    }

    /// One page and the cursor for the next.
    pub async fn fetch(&self) -> Result<ScanPage, LodeError> {
        let after = self.cursor.as_deref().map(decode_cursor).transpose()?;
        let query = Query::Scan {
            namespace: self.kv.resource_namespace.clone(),
            selector: self.selector.clone(),
            after,
            limit: self.limit,
        };
        query.validate().map_err(LodeError::Invalid)?;
        match self.kv.query(query, self.kv.consistency).await? {
            (QueryResult::Page { entries, resume_after }, _) => Ok(ScanPage {
                entries,
                cursor: resume_after.as_deref().map(encode_cursor),
            }),
            (other, _) => Err(unexpected("scan", &other)),
        }
    }

    /// Every selected entry, page after page, as a stream. A walk never
    /// returns a key twice and never skips a key that existed throughout.
    pub fn entries(self) -> impl Stream<Item = Result<Entry, LodeError>> {
        struct Walk {
            scan: ScanBuilder,
            buffered: std::vec::IntoIter<Entry>,
            done: bool,
        }
        let walk = Walk {
            scan: self,
            buffered: Vec::new().into_iter(),
            done: false,
        };
        futures::stream::try_unfold(walk, |mut walk| async move {
            loop {
                if let Some(entry) = walk.buffered.next() {
                    return Ok(Some((entry, walk)));
                }
                if walk.done {
                    return Ok(None);
                }
                let page = walk.scan.fetch().await?;
                walk.done = page.cursor.is_none();
                walk.scan.cursor = page.cursor;
                walk.buffered = page.entries.into_iter();
            }
        })
    }
}

impl Client {
    /// A handle on one namespace, scoped to the default stream if the
    /// client has one.
    pub fn kv(&self, namespace: impl Into<String>) -> Kv {
        let namespace = namespace.into();
        let resource = self.resource_namespace(&namespace);
        Kv::new(self.clone(), namespace, resource)
    }

    /// A handle on a namespace exactly as named, even when the client has a
    /// default stream.
    pub fn kv_unscoped(&self, namespace: impl Into<String>) -> Kv {
        let namespace = namespace.into();
        Kv::new(self.clone(), namespace.clone(), namespace)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_foreign_ones_are_refused() {
        for key in [&b""[..], b"a", b"\x00\xff key"] {
            assert_eq!(decode_cursor(&encode_cursor(key)).expect("round trip"), key);
        }
        assert!(decode_cursor("abc").expect_err("odd length").is_invalid());
        assert!(decode_cursor("zz").expect_err("not hex").is_invalid());
    }
}
