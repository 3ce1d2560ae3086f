"""Failure paths of the Python SDK against real processes: conflicts,
lost leases, stale reads, input refused before sending, unsupported
capabilities, unknown tokens, a leader SIGKILLed during writes, and HTTP
connections cut mid-request (ambiguous, then repeated: applied once)."""

from __future__ import annotations

import asyncio
import secrets
import time

import pytest

import lode_sdk as ls
from cluster import ACCESS_TOKEN, Cluster, free_port
from proxy import CuttingProxy

pytestmark = pytest.mark.anyio


def fresh(name: str) -> str:
    return f"{name}-{secrets.token_hex(4)}"


async def test_a_version_conflict_carries_the_current_version(connection_string: str) -> None:
    async with ls.Client.connect(connection_string) as laser:
        kv = laser.kv(fresh("cas"))
        first = await kv.set("k").bytes(b"1").expect_absent().commit()
        second = await kv.set("k").bytes(b"2").expect_version(first).commit()
        with pytest.raises(ls.KvError) as conflict:
            await kv.set("k").bytes(b"3").expect_version(first).commit()
        assert conflict.value.version_conflict and not conflict.value.lease_lost
        assert conflict.value.current_version == second
        with pytest.raises(ls.KvError) as taken:
            await kv.set("k").bytes(b"3").expect_absent().commit()
        assert taken.value.current_version == second
        with pytest.raises(ls.InvalidError, match=r"call \.commit\(\)"):
            await kv.set("k").bytes(b"3").expect_version(second).send()
        with pytest.raises(ls.InvalidError, match="needs expect_version or expect_absent"):
            await kv.set("k").bytes(b"3").commit()
        assert await kv.get("k") == b"2"


async def test_a_lease_is_lost_after_expiry_and_after_another_holder_acquires(connection_string: str) -> None:
    async with ls.Client.connect(connection_string) as laser:
        kv = laser.kv(fresh("leases"))
        version = await kv.set("guarded").bytes(b"0").send()
        lease = await kv.lease("lock", "worker-a", 300)
        with pytest.raises(ls.KvError) as held:
            await kv.lease("lock", "worker-b", 30_000)
        assert held.value.version_conflict
        deadline = time.monotonic() + 30
        while await kv.lease_info("lock") is not None:
            assert time.monotonic() < deadline, "the lease never expired"
            await asyncio.sleep(0.05)
        with pytest.raises(ls.KvError) as expired:
            await kv.cas_fenced("guarded", kv.namespace, "lock", lease.token).bytes(b"late").expect_version(version).commit()
        assert expired.value.lease_lost
        with pytest.raises(ls.KvError) as not_renewed:
            await kv.renew_lease("lock", "worker-a", lease.token, 30_000)
        assert not_renewed.value.lease_lost

        successor = await kv.lease("lock", "worker-b", 30_000)
        assert successor.token > lease.token
        with pytest.raises(ls.KvError) as superseded:
            await kv.cas_fenced("guarded", kv.namespace, "lock", lease.token).bytes(b"stale").expect_version(version).commit()
        assert superseded.value.lease_lost
        written = await kv.cas_fenced("guarded", kv.namespace, "lock", successor.token).bytes(b"new").expect_version(version).commit()
        assert written > version
        assert await kv.release("lock", "worker-b", successor.token) is True
        assert await kv.release("lock", "worker-b", successor.token) is False


async def test_a_barriered_read_that_cannot_catch_up_is_stale(connection_string: str) -> None:
    async with ls.Client.connect(connection_string) as laser:
        kv = laser.kv(fresh("barrier"))
        version = await kv.set("k").bytes(b"v").send()
        assert (await kv.get_entry_at_least("k", version)) is not None
        with pytest.raises(ls.KvError) as stale:
            await kv.get_entry_at_least("k", version + 1_000_000_000)
        assert stale.value.stale


async def test_bad_input_is_refused_before_anything_is_sent() -> None:
    # Nothing listens here: a call that sent anything would fail otherwise.
    laser = ls.Client(f"127.0.0.1:{free_port()}", call_timeout_ms=5_000)
    kv = laser.kv("config")
    started = time.monotonic()
    with pytest.raises(ls.InvalidError, match="key_bytes_max = 2048"):
        await kv.set("k" * 2049).bytes(b"v").send()
    with pytest.raises(ls.InvalidError, match="value_bytes_max = 65536"):
        await kv.set("k").bytes(b"v" * 65_537).send()
    with pytest.raises(ls.InvalidError, match="namespace_bytes_max = 256"):
        await laser.kv("n" * 257).get("k")
    with pytest.raises(ls.InvalidError, match="holder_bytes_max"):
        await kv.lease("lock", "h" * 257, 1000)
    with pytest.raises(ls.InvalidError, match="key must be str or bytes"):
        await kv.get(42)  # type: ignore[arg-type]
    assert time.monotonic() - started < 1, "refusals came without waiting on the network"
    with pytest.raises(ls.InvalidError):
        ls.Client.connect("http://")
    with pytest.raises(ls.InvalidError, match="none of token, default_stream"):
        ls.Client.connect("http://127.0.0.1:1?colour=red")
    await laser.close()


async def test_an_unsupported_capability_and_an_unknown_token(connection_string: str, shared_cluster: Cluster) -> None:
    async with ls.Client.connect(connection_string) as laser:
        assert set(await laser.capabilities()) == {"kv", "cas", "fenced_leases"}
        with pytest.raises(ls.UnsupportedError) as unsupported:
            await laser.require("forks")
        assert unsupported.value.unsupported
    endpoints = connection_string.split("?")[0]
    async with ls.Client.connect(endpoints, token="not-" + ACCESS_TOKEN) as stranger:
        with pytest.raises(ls.KvError) as refused:
            await stranger.kv("config").get("k")
        assert refused.value.unauthorized


async def test_prepared_mutations_are_bound_to_their_client_and_call(connection_string: str) -> None:
    async with ls.FencedLeaseClient.connect_dedicated(connection_string) as client:
        other = ls.FencedLeaseClient.connect_dedicated(connection_string)
        acquire = client.prepare_acquire(
            {"v": 1, "namespace": fresh("prepared"), "key": b"lock", "lease_ttl_micros": 5_000_000, "holder_id": "a"}
        )
        assert acquire.ambiguous_recovery == ls.AmbiguousMutationRecovery.wait_out_lease_ttl(5_000_000)
        with pytest.raises(ls.InvalidError, match="another client"):
            await other.acquire(acquire)
        with pytest.raises(ls.InvalidError, match="not renew"):
            await client.renew(acquire)
        with pytest.raises(ls.InvalidError, match="KV_LEASE_OP_VERSION"):
            client.prepare_acquire({"v": 2, "namespace": "n", "key": b"k", "lease_ttl_micros": 1, "holder_id": "a"})
        with pytest.raises(ls.InvalidError, match="unknown field"):
            client.prepare_release({"v": 1, "namespace": "n", "key": b"k", "holder_id": "a", "lease_token": 1, "x": 1})
        with pytest.raises(ls.InvalidError, match="above zero"):
            await ls.FencedLeaseClient.connect_dedicated(connection_string).with_attempt_timeout(0).acquire(acquire)
        assert (await client.acquire(acquire)).token > 0
        await other.close()


async def test_a_leader_killed_during_writes_applies_each_write_once(own_cluster: Cluster) -> None:
    namespace = fresh("failover")
    async with ls.Client.connect(own_cluster.connection_string(), call_timeout_ms=30_000) as laser:
        kv = laser.kv(namespace)
        outcomes: list[str] = []

        async def writer(worker: int) -> None:
            for index in range(40):
                try:
                    # Applied twice, an expect_absent write would conflict
                    # with itself; applied once, a retry is answered with
                    # its first outcome.
                    await kv.set(f"w{worker}-{index}").bytes(b"v").expect_absent().commit()
                    outcomes.append("applied")
                except ls.AmbiguousMutationError:
                    outcomes.append("ambiguous")

        writers = asyncio.gather(*(writer(worker) for worker in range(4)))
        while len(outcomes) < 20:
            await asyncio.sleep(0.01)
        leader = own_cluster.leader()
        own_cluster.kill(leader)
        await writers
        assert outcomes.count("applied") >= 150, outcomes
        # Every change up to a last write: no key was created twice.
        await kv.set("sentinel").bytes(b"end").send()
        created: dict[bytes, int] = {}
        async for event in laser.changes(namespace_prefix=namespace):
            if event.key == b"sentinel":
                break
            created[event.key] = created.get(event.key, 0) + 1
        assert set(created.values()) == {1}, "every key was created exactly once"
        assert len(created) >= outcomes.count("applied")
        own_cluster.restart(leader)


async def test_a_connection_cut_mid_request_is_ambiguous_then_applied_once(shared_cluster: Cluster) -> None:
    member = next(iter(shared_cluster.members.values()))
    proxy = CuttingProxy(member.http)
    address = await proxy.start()
    namespace = fresh("cut")
    try:
        async with ls.Client.connect(f"http://{address}?token={ACCESS_TOKEN}", call_timeout_ms=1_500) as laser:
            kv = laser.kv(namespace)
            await kv.set("k").bytes(b"0").send()
            proxy.cutting = True
            operation = {"op": "set", "namespace": namespace, "key": "k", "value": "1"}
            with pytest.raises(ls.AmbiguousMutationError) as ambiguous:
                await laser.write([operation])
            recovery = ambiguous.value.ambiguous_recovery
            assert recovery.kind == "retry_same_operation" and recovery.op_id is not None
            assert proxy.cut >= 1
            proxy.cutting = False
            repeated = await laser.write([operation], op_id=recovery.op_id)
            assert repeated["op_id"] == recovery.op_id
            entry = await kv.get_entry("k")
            assert entry is not None and (entry.value, str(entry.version)) == (b"1", repeated["position"])

            # The prepared flow: ambiguous, repeated, applied once.
            base = await kv.set("guarded").bytes(b"0").send()
            fenced = ls.FencedLeaseClient.connect_dedicated(f"http://{address}?token={ACCESS_TOKEN}")
            fenced.with_attempt_timeout(1_000)
            lease = await kv.lease("lock", "worker-a", 30_000)
            write = fenced.prepare_cas_fenced({
                "v": 1, "namespace": namespace, "key": b"guarded", "value": b"fenced",
                "expect_version": base, "fence_namespace": namespace, "fence_key": b"lock",
                "lease_token": lease.token,
            })
            proxy.cutting = True
            with pytest.raises(ls.AmbiguousMutationError) as cut:
                await fenced.cas_fenced(write)
            assert cut.value.ambiguous_recovery == ls.AmbiguousMutationRecovery.repeat_prepared()
            proxy.cutting = False
            version = await fenced.cas_fenced(write)
            assert version == (await kv.get_entry("guarded")).version  # type: ignore[union-attr]
            await fenced.close()

            # A lease acquisition whose outcome is unknown waits out its TTL.
            proxy.cutting = True
            started = time.monotonic()
            with pytest.raises(ls.AmbiguousMutationError) as unknown:
                await kv.lease("other-lock", "worker-a", 1_500)
            assert unknown.value.ambiguous_recovery == ls.AmbiguousMutationRecovery.wait_out_lease_ttl(1_500_000)
            assert time.monotonic() - started >= 1.5
            proxy.cutting = False
            assert (await kv.lease("other-lock", "worker-b", 1_000)).token > 0

        changes = []
        async with ls.Client.connect(shared_cluster.connection_string()) as laser:
            async for event in laser.changes(namespace_prefix=namespace):
                if event.key == b"guarded" or event.key == b"k":
                    changes.append((event.key, event.kind))
                if len(changes) == 4:
                    break
        assert changes == [(b"k", "created"), (b"k", "updated"), (b"guarded", "created"), (b"guarded", "updated")]
    finally:
        await proxy.stop()
