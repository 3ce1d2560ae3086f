"""A namespace handle: every key-value operation of the KV API with the KV
seed's semantics (preconditions committed, never dropped; missing and
expired entries read as absent; bounded pages with opaque cursors)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Generator, Sequence
from typing import TYPE_CHECKING, Any, Optional, TypeVar, Union

from . import limits
from ._wire import KeyLike, as_bytes, from_wire_bytes, to_wire_bytes, u64_from_wire
from .codec import JSON, MSGPACK, Codec
from .errors import InvalidError
from .types import Entry, EntryMeta, Lease, LeaseInfo, ScanPage, SessionLink

if TYPE_CHECKING:
    from .client import Client

DELETE_MANY_ENTRIES_PER_CALL = 1000
SCAN_LIMIT_DEFAULT = 100

Consistency = Union[str, dict[str, str]]
BoundsT = TypeVar("BoundsT", bound="_Bounds")


def now_micros() -> int:
    return time.time_ns() // 1000



class Kv:
    """Operations on one namespace."""

    def __init__(
        self,
        client: Client,
        namespace: str,
        resource_namespace: str,
        consistency: Consistency = "linearizable",
        session: Optional[SessionLink] = None,
    ) -> None:
        self._client = client
        self._namespace = namespace
        self._resource_namespace = resource_namespace
        self._consistency = consistency
        self._session = session

    @property
    def namespace(self) -> str:
        """The name this handle was opened with."""
        return self._namespace

    @property
    def resource_namespace(self) -> str:
        """The name sent to the cluster."""
        return self._resource_namespace

    @property
    def client(self) -> Client:
        return self._client

    def in_session(self, session: SessionLink) -> Kv:
        """A handle whose sets, compare-and-swaps, deletes and patches are
        linked to `session`."""
        return Kv(self._client, self._namespace, self._resource_namespace, self._consistency, session)

    def with_consistency(self, consistency: Consistency) -> Kv:
        """A handle whose reads use `consistency`: `"linearizable"`,
        `"eventual"` or `{"at_least": "<position>"}`."""
        return Kv(self._client, self._namespace, self._resource_namespace, consistency, self._session)

    def _key(self, key: KeyLike, field: str = "key") -> Any:
        data = as_bytes(key, field)
        limits.check_key(data, field)
        return to_wire_bytes(data)

    def _session_wire(self) -> Any:
        return None if self._session is None else self._session.to_wire()

    async def _write_one(self, operation: dict[str, Any], capability: str = "kv") -> dict[str, Any]:
        limits.check_namespace(self._resource_namespace)
        await self._client.require(capability)
        answer = await self._client.write([operation])
        result: dict[str, Any] = answer["results"][0]
        result["position"] = answer["position"]
        return result

    async def _read(self, query: dict[str, Any], consistency: Optional[Consistency] = None) -> dict[str, Any]:
        limits.check_namespace(self._resource_namespace)
        await self._client.require("kv")
        return await self._client.read(query, self._consistency if consistency is None else consistency)

    def set(self, key: KeyLike) -> SetBuilder:
        """Starts a write of `key`: choose the value, then `.send()`, or set a
        precondition and `.commit()`."""
        return SetBuilder(self, self._key(key))

    def cas_fenced(self, key: KeyLike, fence_namespace: str, fence_key: KeyLike, token: int) -> SetBuilder:
        """A write that applies only while the lease `fence_key` of
        `fence_namespace` is held with `token`; needs a precondition and
        `.commit()`."""
        builder = SetBuilder(self, self._key(key))
        builder._fence = {
            "namespace": self._client.resource_namespace(fence_namespace),
            "key": self._key(fence_key, "fence_key"),
            "token": str(token),
        }
        return builder

    async def get(self, key: KeyLike) -> Optional[bytes]:
        """The value at `key`, or None when absent or expired."""
        entry = await self.get_entry(key)
        return None if entry is None else entry.value

    async def get_typed(self, key: KeyLike) -> Any:
        """The value at `key` decoded as JSON (None when absent)."""
        return await self.get_as(key, JSON)

    async def get_as(self, key: KeyLike, codec: Codec) -> Any:
        value = await self.get(key)
        return None if value is None else codec.decode(value)

    async def get_entry(self, key: KeyLike) -> Optional[Entry]:
        """The entry at `key`: value, key, version, expiry and source."""
        return await self._get_entry(key, None)

    async def get_entry_at_least(self, key: KeyLike, position: int) -> Optional[Entry]:
        """The entry once the serving member has applied `position`; a
        `stale` error when it does not catch up in time."""
        limits.check_u64("position", position)
        return await self._get_entry(key, {"at_least": str(position)})

    async def _get_entry(self, key: KeyLike, consistency: Optional[Consistency]) -> Optional[Entry]:
        query = {"op": "get", "namespace": self._resource_namespace, "key": self._key(key)}
        entry = (await self._read(query, consistency))["entry"]
        return None if entry is None else Entry.from_wire(entry)

    async def exists(self, key: KeyLike) -> Optional[EntryMeta]:
        """The live entry's version, expiry and size without its value."""
        query = {"op": "exists", "namespace": self._resource_namespace, "key": self._key(key)}
        meta = (await self._read(query))["exists"]
        if meta is None:
            return None
        expires = meta["expires_at_micros"]
        return EntryMeta(
            version=u64_from_wire(meta["version"]),
            expires_at_micros=None if expires is None else u64_from_wire(expires),
            size_bytes=u64_from_wire(meta["size_bytes"]),
        )

    async def delete(self, key: KeyLike) -> bool:
        """Removes `key`; True when a live entry was removed."""
        operation = {"op": "delete", "namespace": self._resource_namespace, "key": self._key(key)}
        if self._session is not None:
            operation["session"] = self._session_wire()
        return bool((await self._write_one(operation))["removed_live_entry"])

    async def expire(self, key: KeyLike, ttl_ms: Optional[int] = None) -> None:
        """Sets the expiry `ttl_ms` from now, or clears it when left out,
        without rewriting the value or changing its version."""
        await self.expire_at(key, None if ttl_ms is None else now_micros() + ttl_ms * 1000)

    async def expire_at(self, key: KeyLike, epoch_micros: Optional[int] = None) -> None:
        """Sets an absolute expiry (microseconds since the epoch), or clears it."""
        operation: dict[str, Any] = {"op": "expire", "namespace": self._resource_namespace, "key": self._key(key)}
        if epoch_micros is not None:
            limits.check_u64("expires_at_micros", epoch_micros)
            operation["expires_at_micros"] = str(epoch_micros)
        await self._write_one(operation)

    async def patch(self, key: KeyLike, patch: Union[bytes, str]) -> int:
        """Applies a JSON merge patch (RFC 7386) and returns the new version."""
        operation = {
            "op": "patch",
            "namespace": self._resource_namespace,
            "key": self._key(key),
            "patch": to_wire_bytes(as_bytes(patch, "patch")),
        }
        if self._session is not None:
            operation["session"] = self._session_wire()
        return u64_from_wire((await self._write_one(operation))["version"])

    def copy_to(self, key: KeyLike, to_key: KeyLike, to_namespace: Optional[str] = None) -> CopyBuilder:
        """Copies the entry to `to_key`; `.into_namespace(ns)` (or
        `to_namespace=`) for another namespace. Await it or `.send()`."""
        return CopyBuilder(self, self._key(key), self._key(to_key, "to_key"), "copy", to_namespace)

    def move_to(self, key: KeyLike, to_key: KeyLike, to_namespace: Optional[str] = None) -> CopyBuilder:
        """Moves the entry to `to_key` in one transaction."""
        return CopyBuilder(self, self._key(key), self._key(to_key, "to_key"), "move", to_namespace)

    async def get_many(self, keys: Sequence[KeyLike]) -> list[Optional[bytes]]:
        """One optional value per key, in the order given, from one view."""
        if len(keys) > limits.GET_MANY_KEYS_MAX:
            raise limits.over_limit(
                "the number of keys", str(len(keys)), "get_many_keys_max", limits.GET_MANY_KEYS_MAX
            )
        query = {"op": "get_many", "namespace": self._resource_namespace, "keys": [self._key(key) for key in keys]}
        entries = (await self._read(query))["entries"]
        return [None if entry is None else from_wire_bytes(entry["value"]) for entry in entries]

    def delete_many(self) -> DeleteManyBuilder:
        """Starts a bulk delete; without a bound it clears the namespace."""
        return DeleteManyBuilder(self)

    def scan(self) -> ScanBuilder:
        """Starts a scan; without a bound it walks the whole namespace."""
        return ScanBuilder(self)

    async def lease(self, key: KeyLike, holder: str, ttl_ms: int) -> Lease:
        """Acquires the lease `key` of this namespace for `holder`. A live
        lease is a version conflict. One acquisition runs at a time per
        client; when its outcome stays unknown the call waits out `ttl_ms`
        (so any grant made has expired) before `AmbiguousMutationError`, and
        the next acquisition waits too, even if this call was cancelled."""
        limits.check_holder(holder)
        ttl_micros = limits.lease_ttl_micros(ttl_ms)
        await self._client.require("fenced_leases")
        operation = {
            "op": "acquire_lease",
            "namespace": self._resource_namespace,
            "key": self._key(key),
            "holder": holder,
            "ttl_micros": ttl_micros,
        }
        # The acquisition runs as a task of its own, so that a caller who
        # stops waiting leaves the gate closed through the wait.
        task = asyncio.ensure_future(self._client.acquire_gated(operation, ttl_ms))
        return Lease.from_answer(await asyncio.shield(task))

    async def renew_lease(self, key: KeyLike, holder: str, token: int, ttl_ms: int) -> Lease:
        """Extends a held lease to `ttl_ms` from now, keeping its token;
        `lease_lost` when it is no longer held with `token`."""
        limits.check_holder(holder)
        ttl_micros = limits.lease_ttl_micros(ttl_ms)
        await self._client.require("fenced_leases")
        operation = {
            "op": "renew_lease",
            "namespace": self._resource_namespace,
            "key": self._key(key),
            "holder": holder,
            "token": str(token),
            "ttl_micros": ttl_micros,
        }
        return Lease.from_answer(await self._client.write([operation]))

    async def release(self, key: KeyLike, holder: str, token: int) -> bool:
        """Revokes a held lease; True when one was released."""
        limits.check_holder(holder)
        operation = {
            "op": "release_lease",
            "namespace": self._resource_namespace,
            "key": self._key(key),
            "holder": holder,
            "token": str(token),
        }
        return bool((await self._write_one(operation, "fenced_leases"))["released"])

    async def lease_info(self, key: KeyLike) -> Optional[LeaseInfo]:
        """The live lease `key`: holder, token and expiry."""
        query = {"op": "lease", "namespace": self._resource_namespace, "key": self._key(key)}
        lease = (await self._read(query))["lease"]
        if lease is None:
            return None
        return LeaseInfo(str(lease["holder"]), u64_from_wire(lease["token"]), u64_from_wire(lease["expires_at_micros"]))


class SetBuilder:
    """A write being built."""

    def __init__(self, kv: Kv, key: Any) -> None:
        self._kv = kv
        self._key = key
        self._value = b""
        self._encoding = "bytes"
        self._expires_at_micros: Optional[int] = None
        self._expect_version: Optional[int] = None
        self._expect_absent = False
        self._fence: Optional[dict[str, Any]] = None

    def bytes(self, payload: Union[bytes, bytearray, memoryview]) -> SetBuilder:
        self._value, self._encoding = bytes(payload), "bytes"
        return self

    def json(self, value: Any) -> SetBuilder:
        return self.encode_with(JSON, value)

    def msgpack(self, value: Any) -> SetBuilder:
        return self.encode_with(MSGPACK, value)

    def encode_with(self, codec: Codec, value: Any) -> SetBuilder:
        self._value, self._encoding = codec.encode(value), codec.encoding
        return self

    def ttl(self, ttl_ms: int) -> SetBuilder:
        """Expires `ttl_ms` milliseconds from now."""
        self._expires_at_micros = now_micros() + ttl_ms * 1000
        return self

    def expires_at(self, epoch_micros: int) -> SetBuilder:
        self._expires_at_micros = epoch_micros
        return self

    def expect_version(self, version: int) -> SetBuilder:
        """Write only while the live entry is at `version`; `.commit()`."""
        self._expect_version, self._expect_absent = version, False
        return self

    def expect_absent(self) -> SetBuilder:
        """Write only while the key holds no live entry; `.commit()`."""
        self._expect_version, self._expect_absent = None, True
        return self

    def _operation(self) -> dict[str, Any]:
        limits.check_value(self._value)
        operation: dict[str, Any] = {
            "op": "set",
            "namespace": self._kv.resource_namespace,
            "key": self._key,
            "value": to_wire_bytes(self._value),
            "encoding": self._encoding,
        }
        if self._expires_at_micros is not None:
            limits.check_u64("expires_at_micros", self._expires_at_micros)
            operation["expires_at_micros"] = str(self._expires_at_micros)
        if self._expect_version is not None:
            limits.check_u64("expect_version", self._expect_version)
            operation["expect_version"] = str(self._expect_version)
        if self._expect_absent:
            operation["expect_absent"] = True
        if self._fence is not None:
            operation["fence"] = self._fence
        session = self._kv._session_wire()
        if session is not None:
            operation["session"] = session
        return operation

    async def send(self) -> int:
        """Writes unconditionally and returns the new version; refused when a
        precondition is set, so that a precondition is never dropped."""
        if self._fence is not None:
            raise InvalidError("a fenced write needs expect_version or expect_absent and .commit()")
        if self._expect_version is not None or self._expect_absent:
            raise InvalidError(
                "a precondition (expect_version or expect_absent) is set: call .commit() to apply it; "
                ".send() writes unconditionally"
            )
        return u64_from_wire((await self._kv._write_one(self._operation()))["version"])

    async def commit(self) -> int:
        """Applies the guarded write and returns the new version; a changed
        version is a version conflict carrying the current one."""
        if self._expect_version is None and not self._expect_absent:
            raise InvalidError(".commit() needs expect_version or expect_absent; use .send() for an unconditional write")
        await self._kv.client.require("cas")
        capability = "fenced_leases" if self._fence is not None else "cas"
        return u64_from_wire((await self._kv._write_one(self._operation(), capability))["version"])


class CopyBuilder:
    """A copy or move being built; await it or call `.send()`."""

    def __init__(self, kv: Kv, key: Any, to_key: Any, op: str, to_namespace: Optional[str]) -> None:
        self._kv, self._key, self._to_key, self._op = kv, key, to_key, op
        self._to_namespace = kv.resource_namespace
        if to_namespace is not None:
            self.into_namespace(to_namespace)

    def into_namespace(self, namespace: str) -> CopyBuilder:
        """Writes the destination in another namespace (scoped like the
        client's namespaces)."""
        self._to_namespace = self._kv.client.resource_namespace(namespace)
        limits.check_namespace(self._to_namespace)
        return self

    async def send(self) -> int:
        """Copies or moves and returns the destination's new version."""
        operation = {
            "op": self._op,
            "namespace": self._kv.resource_namespace,
            "key": self._key,
            "to_key": self._to_key,
            "to_namespace": self._to_namespace,
        }
        return u64_from_wire((await self._kv._write_one(operation))["version"])

    def __await__(self) -> Generator[Any, None, int]:
        return self.send().__await__()


class _Bounds:
    """prefix, range and key_contains, shared by bulk deletes and scans."""

    def __init__(self, kv: Kv) -> None:
        self._kv = kv
        self._selector: dict[str, Any] = {}

    def prefix(self: BoundsT, prefix: KeyLike) -> BoundsT:
        self._selector = {"prefix": to_wire_bytes(as_bytes(prefix, "prefix"))}
        return self

    def range(self: BoundsT, start: KeyLike, end: KeyLike) -> BoundsT:
        """Keys with start <= key < end."""
        self._selector = {
            "start": to_wire_bytes(as_bytes(start, "start")),
            "end": to_wire_bytes(as_bytes(end, "end")),
        }
        return self

    def key_contains(self: BoundsT, text: str) -> BoundsT:
        """UTF-8 keys containing `text`; keys that are not UTF-8 are skipped."""
        self._selector = {"key_contains": text}
        return self


class DeleteManyBuilder(_Bounds):
    async def send(self) -> int:
        """Removes the selected entries; each round trip is atomic on its own."""
        removed = 0
        after: Any = None
        while True:
            operation = {
                "op": "delete_range",
                "namespace": self._kv.resource_namespace,
                "entries_max": DELETE_MANY_ENTRIES_PER_CALL,
                **self._selector,
            }
            if after is not None:
                operation["after"] = after
            result = await self._kv._write_one(operation)
            removed += int(result["removed"])
            after = result["resume_after"]
            if after is None:
                return removed


class ScanBuilder(_Bounds):
    def __init__(self, kv: Kv) -> None:
        super().__init__(kv)
        self._limit = SCAN_LIMIT_DEFAULT
        self._cursor: Optional[str] = None

    def limit(self, limit: int) -> ScanBuilder:
        """Entries per page (1 to 1000)."""
        if not 1 <= limit <= limits.SCAN_PAGE_ENTRIES_MAX:
            raise InvalidError(f"limit is {limit}, outside 1 to scan_page_entries_max = {limits.SCAN_PAGE_ENTRIES_MAX}")
        self._limit = limit
        return self

    def cursor(self, cursor: str) -> ScanBuilder:
        """Continues from a cursor an earlier page returned."""
        self._cursor = cursor
        return self

    async def fetch(self) -> ScanPage:
        """One page and the cursor for the next."""
        query: dict[str, Any] = {"op": "scan", "namespace": self._kv.resource_namespace, "limit": self._limit}
        query.update(self._selector)
        if self._cursor is not None:
            query["cursor"] = self._cursor
        answer = await self._kv._read(query)
        cursor = answer["cursor"]
        return ScanPage([Entry.from_wire(entry) for entry in answer["entries"]], None if cursor is None else str(cursor))

    async def entries(self) -> AsyncIterator[Entry]:
        """Every selected entry, page after page; never a key twice."""
        while True:
            page = await self.fetch()
            for entry in page.entries:
                yield entry
            if page.cursor is None:
                return
            self._cursor = page.cursor


class Session:
    """A session that key-value writes can name: `reference()` is its link,
    and `kv(namespace)` a handle already linked to it."""

    def __init__(self, client: Client, stream: str, session_id: str) -> None:
        self._client = client
        self._link = SessionLink(stream, session_id)

    def reference(self) -> SessionLink:
        return self._link

    def kv(self, namespace: str) -> Kv:
        return self._client.kv(namespace).in_session(self._link)
