"""Every Python example of the KV seed, run against a real 3-member
cluster. Each is the seed's text with three changes only: the import
(`import lode_sdk as ls`), the connection (`laser` and `connection_string`
name this cluster), and the exception's name (`ls.LodeError` for the
seed's `ls.LaserError`); the FileStore example's directory is a temporary
one."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

import lode_sdk as ls

pytestmark = pytest.mark.anyio


async def test_expiry_and_bulk_delete(connection_string: str) -> None:
    laser = ls.Client.connect(connection_string)
    store = laser.kv("config")
    await store.set("service:auth").json({"log_level": "info"}).send()
    await store.set("session:1").bytes(b"a").send()
    await store.set("session:2").bytes(b"b").send()

    await store.expire("service:auth", 3_600_000)  # one hour from now
    tomorrow = time.time_ns() // 1_000 + 86_400_000_000
    await store.expire_at("service:auth", tomorrow)  # an absolute time
    await store.expire("service:auth")  # clear the expiry

    removed = await store.delete_many().prefix("session:").send()

    assert removed == 2
    entry = await store.get_entry("service:auth")
    assert entry is not None and entry.expires_at_micros is None
    await laser.close()


async def test_locks_and_fenced_writes(connection_string: str) -> None:
    laser = ls.Client.connect(connection_string)
    await laser.kv("config").set("service:auth").json({"log_level": "info"}).send()

    store = laser.kv("config")
    lease = await store.lease("lease:service:auth", "worker-a", 30_000)
    try:
        entry = await store.get_entry_at_least("service:auth", lease.position)
        if entry is None:
            raise RuntimeError("config entry missing")
        await (
            store.cas_fenced("service:auth", "config", "lease:service:auth", lease.token)
            .json({"log_level": "debug"})
            .expect_version(entry.version)
            .commit()
        )
        await store.renew_lease("lease:service:auth", "worker-a", lease.token, 30_000)
    finally:
        await store.release("lease:service:auth", "worker-a", lease.token)

    assert await store.get_typed("service:auth") == {"log_level": "debug"}
    assert await store.lease_info("lease:service:auth") is None
    await laser.close()


async def test_prepared_coordination_requests(connection_string: str) -> None:
    client = ls.FencedLeaseClient.connect_dedicated(connection_string).with_attempt_timeout(5_000)
    try:
        lease = await client.acquire(
            client.prepare_acquire({
                "v": 1,
                "namespace": "config",
                "key": b"lease:service:auth",
                "lease_ttl_micros": 30_000_000,
                "holder_id": "worker-a",
            })
        )

        renewal = client.prepare_renew({
            "v": 1,
            "namespace": "config",
            "key": b"lease:service:auth",
            "holder_id": "worker-a",
            "lease_token": lease.token,
            "lease_ttl_micros": 30_000_000,
        })
        try:
            await client.renew(renewal)
        except ls.LodeError as error:
            if not error.ambiguous_mutation:
                raise
            # renewal.ambiguous_recovery == ls.AmbiguousMutationRecovery.repeat_prepared()
            await client.renew(renewal)
        assert renewal.ambiguous_recovery == ls.AmbiguousMutationRecovery.repeat_prepared()
        # Repeating the prepared renewal is answered, never applied twice.
        assert (await client.renew(renewal)).token == lease.token
        release = client.prepare_release({
            "v": 1, "namespace": "config", "key": b"lease:service:auth",
            "holder_id": "worker-a", "lease_token": lease.token,
        })
        assert await client.release(release)
    finally:
        await client.close()
    with pytest.raises(ls.InvalidError):
        await client.renew(renewal)


async def test_local_state_stores(tmp_path: Path) -> None:
    store = ls.FileStore(tmp_path / "agent-state")
    await store.set("cursor:metrics", b"42")
    saved = await store.get("cursor:metrics")
    await store.delete("cursor:metrics")

    assert saved == b"42"
    assert await store.get("cursor:metrics") is None


async def test_session_links(connection_string: str) -> None:
    laser = ls.Client.connect(connection_string)
    session = laser.session("agents", "session-7")

    flags = session.kv("ticket-flags")
    await flags.set("ticket:42").json({"escalated": True}).send()

    linked = laser.kv("ticket-flags").in_session(session.reference())

    await linked.set("ticket:43").json({"escalated": False}).send()
    entry = await laser.kv("ticket-flags").get_entry("ticket:42")
    assert entry is not None and entry.session == session.reference()
    assert await laser.session_keys(session.reference()) == [
        ("ticket-flags", b"ticket:42"),
        ("ticket-flags", b"ticket:43"),
    ]
    await laser.close()
