"""The Python SDK's KV surface against a real cluster: every operation and
read, bytes and text keys, codecs, bulk deletes and scans with cursors,
stream scoping, the change feed, and the state stores."""

from __future__ import annotations

import secrets
from pathlib import Path

import pytest

import lode_sdk as ls

pytestmark = pytest.mark.anyio


def fresh(name: str) -> str:
    """A namespace no other test of the shared cluster uses."""
    return f"{name}-{secrets.token_hex(4)}"


async def test_values_entries_and_codecs(connection_string: str) -> None:
    async with ls.Client.connect(connection_string) as laser:
        kv = laser.kv(fresh("values"))
        version = await kv.set("text").bytes(b"plain").send()
        entry = await kv.get_entry("text")
        assert entry is not None
        assert (entry.key, entry.value, entry.encoding, entry.version) == (b"text", b"plain", "bytes", version)
        assert entry.source_index == version and entry.source_term >= 1
        binary_key = b"\x00\xff\x01"
        await kv.set(binary_key).bytes(b"\x80\x81").send()
        assert await kv.get(binary_key) == b"\x80\x81"
        await kv.set("doc").json({"a": [1, 2], "b": None}).send()
        assert await kv.get_typed("doc") == {"a": [1, 2], "b": None}
        await kv.set("packed").msgpack({"n": 2**63, "s": "x"}).send()
        assert await kv.get_as("packed", ls.MsgpackCodec()) == {"n": 2**63, "s": "x"}
        assert (await kv.get_entry("packed")) is not None
        meta = await kv.exists("doc")
        assert meta is not None and meta.size_bytes == len(b'{"a":[1,2],"b":null}')
        assert await kv.exists("nobody") is None
        assert await kv.get("nobody") is None
        await kv.set("short").bytes(b"v").ttl(60_000).send()
        short = await kv.get_entry("short")
        assert short is not None and short.expires_at_micros is not None
        assert await kv.get_many(["text", "nobody", binary_key]) == [b"plain", None, b"\x80\x81"]
        assert await kv.delete("text") is True
        assert await kv.delete("text") is False


async def test_patch_copy_move_and_namespaces(connection_string: str) -> None:
    async with ls.Client.connect(connection_string) as laser:
        source, target = fresh("source"), fresh("target")
        kv = laser.kv(source)
        await kv.set("config").json({"level": "info"}).send()
        patched = await kv.patch("config", b'{"level":"debug","retries":3}')
        assert (await kv.get_entry("config")).version == patched  # type: ignore[union-attr]
        assert await kv.get_typed("config") == {"level": "debug", "retries": 3}
        copied = await kv.copy_to("config", "copy")
        assert (await kv.get_entry("copy")).version == copied  # type: ignore[union-attr]
        await kv.copy_to("config", "elsewhere").into_namespace(target).send()
        await kv.move_to("copy", "moved", to_namespace=target)
        assert await kv.get("copy") is None
        assert await laser.kv(target).get_many(["elsewhere", "moved"]) != [None, None]
        names = await laser.kv_namespaces()
        assert source in names and target in names
        with pytest.raises(ls.KvError) as absent:
            await kv.copy_to("nobody", "x")
        assert absent.value.not_found


async def test_bulk_deletes_and_scans_page_by_cursor(connection_string: str) -> None:
    async with ls.Client.connect(connection_string) as laser:
        kv = laser.kv(fresh("pages"))
        for index in range(7):
            await kv.set(f"k{index}").bytes(b"v").send()
        await kv.set("other").bytes(b"v").send()
        first = await kv.scan().prefix("k").limit(3).fetch()
        assert [entry.key for entry in first.entries] == [b"k0", b"k1", b"k2"]
        assert first.cursor is not None
        second = await kv.scan().prefix("k").limit(3).cursor(first.cursor).fetch()
        assert [entry.key for entry in second.entries] == [b"k3", b"k4", b"k5"]
        walked = [entry.key async for entry in kv.scan().limit(2).entries()]
        assert walked == [b"k0", b"k1", b"k2", b"k3", b"k4", b"k5", b"k6", b"other"]
        assert await kv.delete_many().range("k1", "k3").send() == 2
        assert await kv.delete_many().key_contains("6").send() == 1
        assert await kv.delete_many().prefix("k").send() == 4
        assert await kv.delete_many().send() == 1
        assert (await kv.scan().fetch()).entries == []
        with pytest.raises(ls.InvalidError):
            kv.scan().limit(0)


async def test_default_stream_scopes_names(connection_string: str) -> None:
    stream = fresh("stream")
    async with ls.Client.connect(connection_string, default_stream=stream) as scoped:
        kv = scoped.kv("config")
        assert (kv.namespace, kv.resource_namespace) == ("config", f"stream:{stream}/config")
        await kv.set("k").bytes(b"v").send()
        assert await scoped.kv_namespaces() == ["config"]
        async with ls.Client.connect(connection_string) as plain:
            assert await plain.kv_unscoped(f"stream:{stream}/config").get("k") == b"v"


async def test_the_change_feed_resumes_after_a_position(connection_string: str) -> None:
    async with ls.Client.connect(connection_string) as laser:
        namespace = fresh("feed")
        kv = laser.kv(namespace)
        first = await kv.set("a").bytes(b"1").send()
        await kv.set("a").bytes(b"2").send()
        await kv.delete("a")
        seen: list[ls.ChangeEvent] = []
        async for event in laser.changes((first - 1, 2**32 - 1), namespace_prefix=namespace):
            seen.append(event)
            if len(seen) == 3:
                break
        assert [event.kind for event in seen] == ["created", "updated", "deleted"]
        assert (seen[1].old_value, seen[1].new_value) == (b"1", b"2")
        resumed = []
        async for event in laser.changes(seen[1].position, namespace_prefix=namespace):
            resumed.append(event)
            break
        assert resumed[0].position == seen[2].position


async def test_state_stores(connection_string: str, tmp_path: Path) -> None:
    memory = ls.InMemoryStore()
    await memory.set("a", b"1")
    assert (await memory.get("a"), await memory.delete("a"), await memory.delete("a")) == (b"1", True, False)

    files = ls.FileStore(tmp_path)
    await files.set("cursor:é", b"42")
    assert (tmp_path / ("k" + "cursor:é".encode().hex())).read_bytes() == b"42"
    assert await ls.FileStore(tmp_path).get("cursor:é") == b"42", "a new store on the same root reads it back"
    assert not list(tmp_path.glob("*.tmp"))

    async with ls.Client.connect(connection_string) as laser:
        kv = laser.kv(fresh("state"))
        store: ls.StateStore = ls.KvStore(kv)
        await store.set("checkpoint", b"7")
        assert await store.get("checkpoint") == b"7"
        entry = await kv.get_entry("checkpoint")
        assert entry is not None and entry.expires_at_micros is None
        assert await store.delete("checkpoint") is True
        with pytest.raises(ls.InvalidError):
            await store.set("k" * 2049, b"v")


def test_op_ids_begin_with_the_millisecond_they_were_made_and_never_repeat() -> None:
    import time

    from lode_sdk._wire import new_op_id

    before = time.time_ns() // 1_000_000
    ids = [new_op_id() for _ in range(10_000)]
    after = time.time_ns() // 1_000_000
    for op_id in ids:
        assert len(op_id) == 32 and int(op_id, 16) >= 0
        assert before <= int(op_id[:12], 16) <= after, op_id
    assert len(set(ids)) == len(ids)
    later = new_op_id()
    while int(later[:12], 16) <= after:
        later = new_op_id()
    assert all(op_id < later for op_id in ids)
