"""The two-phase coordination API: prepare a lease or fenced-write request
once, then send the prepared object as often as needed. Repeating it sends
the same op id and the same request bytes, so the cluster applies it at
most once, and an ambiguous outcome comes with its recovery action.

A `FencedLeaseClient` sends through a transport: `DedicatedKvTransport`
over its own connections, or any object with `send` and `reset` (and
optionally `ready` and `close`)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Optional, Protocol

from . import limits
from ._http import HttpCluster, Options
from ._wire import as_bytes, new_op_id, to_wire_bytes, u64_from_wire
from .client import parse_connection_string
from .errors import AmbiguousMutationError, AmbiguousMutationRecovery, InvalidError, KvError, LodeError
from .types import Entry, Lease

KV_LEASE_OP_VERSION = 1
ATTEMPT_TIMEOUT_MS_DEFAULT = 10_000


class CoordinationTransport(Protocol):
    """What a coordination client sends through. `send` posts the body's
    exact bytes to a KV API path and answers the JSON (raising
    `LodeError`); `reset` retires the connection, stopping in-flight work
    before it returns."""

    async def send(self, path: str, body: bytes, op_id: Optional[str], timeout_ms: int) -> Any: ...

    async def reset(self) -> None: ...


class DedicatedKvTransport:
    """A transport over its own connections to the members a connection
    string names, opened on first use. A call gets one attempt's time: an
    uncertain outcome is reported, not retried away. Closing is final."""

    def __init__(self, connection_string: str) -> None:
        endpoints, options = parse_connection_string(connection_string)
        self._cluster = HttpCluster(endpoints, options.get("token"), Options())
        self._closed = False

    async def ready(self) -> None:
        if self._closed:
            raise InvalidError("the transport is closed")

    async def send(self, path: str, body: bytes, op_id: Optional[str], timeout_ms: int) -> Any:
        await self.ready()
        return await self._cluster.call_encoded("POST", path, body, op_id, timeout_ms)

    async def reset(self) -> None:
        await self._cluster.reset()

    async def close(self) -> None:
        self._closed = True
        await self._cluster.close()


@dataclass(frozen=True)
class PreparedMutation:
    """A request validated once, with its op id and bytes fixed, bound to
    one client and one operation."""

    client_id: str
    kind: str
    op_id: str
    body: bytes
    lease_ttl_micros: int

    @property
    def ambiguous_recovery(self) -> AmbiguousMutationRecovery:
        """What to do when sending it ended ambiguous."""
        if self.kind == "acquire":
            return AmbiguousMutationRecovery.wait_out_lease_ttl(self.lease_ttl_micros)
        return AmbiguousMutationRecovery.repeat_prepared()


def _fields(request: dict[str, Any], required: tuple[str, ...], optional: tuple[str, ...]) -> dict[str, Any]:
    """The request's fields, refused when one is missing or unknown, or `v`
    is not this client's version."""
    if not isinstance(request, dict):
        raise InvalidError("a request is a dict")
    unknown = set(request) - set(required) - set(optional) - {"v"}
    if unknown:
        raise InvalidError(f"the request has unknown field {sorted(unknown)[0]!r}")
    for name in required:
        if name not in request:
            raise InvalidError(f"the request needs {name!r}")
    if request.get("v") != KV_LEASE_OP_VERSION:
        raise InvalidError(f"v is {request.get('v')!r}; this client speaks KV_LEASE_OP_VERSION = {KV_LEASE_OP_VERSION}")
    return request


def _key(value: Any, field: str) -> Any:
    data = as_bytes(value, field)
    limits.check_key(data, field)
    return to_wire_bytes(data)


def _int(value: Any, field: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidError(f"{field} must be an int")
    limits.check_u64(field, value)
    return value



class FencedLeaseClient:
    """The two-phase coordination client."""

    def __init__(self, transport: CoordinationTransport) -> None:
        self._id = new_op_id()
        self._transport = transport
        self._attempt_timeout_ms = ATTEMPT_TIMEOUT_MS_DEFAULT
        self._closed = False

    @classmethod
    def connect_dedicated(cls, connection_string: str) -> FencedLeaseClient:
        """A client over its own connections, opened on first use."""
        return cls(DedicatedKvTransport(connection_string))

    def with_attempt_timeout(self, timeout_ms: int) -> FencedLeaseClient:
        """How long one attempt may take, in milliseconds; zero is refused
        before anything is sent."""
        self._attempt_timeout_ms = timeout_ms
        return self

    async def __aenter__(self) -> FencedLeaseClient:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    def _prepare(self, kind: str, operation: dict[str, Any], lease_ttl_micros: int) -> PreparedMutation:
        limits.check_namespace(str(operation["namespace"]))
        op_id = new_op_id()
        body = json.dumps({"op_id": op_id, "operations": [operation]}, separators=(",", ":")).encode()
        return PreparedMutation(self._id, kind, op_id, body, lease_ttl_micros)

    def _lease_operation(self, op: str, request: dict[str, Any], extra: tuple[str, ...]) -> dict[str, Any]:
        fields = _fields(request, ("namespace", "key", "holder_id", *extra), ("subject_user_id",))
        holder = str(fields["holder_id"])
        limits.check_holder(holder)
        operation: dict[str, Any] = {
            "op": op,
            "namespace": str(fields["namespace"]),
            "key": _key(fields["key"], "key"),
            "holder": holder,
        }
        if "lease_token" in extra:
            operation["token"] = str(_int(fields["lease_token"], "lease_token"))
        if "lease_ttl_micros" in extra:
            ttl = _int(fields["lease_ttl_micros"], "lease_ttl_micros")
            limits.check_lease_ttl(ttl)
            operation["ttl_micros"] = str(ttl)
        return operation

    def prepare_acquire(self, request: dict[str, Any]) -> PreparedMutation:
        operation = self._lease_operation("acquire_lease", request, ("lease_ttl_micros",))
        return self._prepare("acquire", operation, int(request["lease_ttl_micros"]))

    def prepare_renew(self, request: dict[str, Any]) -> PreparedMutation:
        operation = self._lease_operation("renew_lease", request, ("lease_token", "lease_ttl_micros"))
        return self._prepare("renew", operation, int(request["lease_ttl_micros"]))

    def prepare_release(self, request: dict[str, Any]) -> PreparedMutation:
        operation = self._lease_operation("release_lease", request, ("lease_token",))
        return self._prepare("release", operation, 0)

    def prepare_cas_fenced(self, request: dict[str, Any]) -> PreparedMutation:
        """`namespace`, `key`, `value` (bytes), optional `encoding`, one of
        `expect_version` or `expect_absent`, `fence_namespace`, `fence_key`
        and `lease_token`."""
        fields = _fields(
            request,
            ("namespace", "key", "value", "fence_namespace", "fence_key", "lease_token"),
            ("encoding", "expect_version", "expect_absent"),
        )
        value = as_bytes(fields["value"], "value")
        limits.check_value(value)
        operation: dict[str, Any] = {
            "op": "set",
            "namespace": str(fields["namespace"]),
            "key": _key(fields["key"], "key"),
            "value": to_wire_bytes(value),
            "encoding": str(fields.get("encoding", "bytes")),
            "fence": {
                "namespace": str(fields["fence_namespace"]),
                "key": _key(fields["fence_key"], "fence_key"),
                "token": str(_int(fields["lease_token"], "lease_token")),
            },
        }
        if ("expect_version" in fields) == bool(fields.get("expect_absent")):
            raise InvalidError("a fenced write needs exactly one of expect_version and expect_absent")
        if "expect_version" in fields:
            operation["expect_version"] = str(_int(fields["expect_version"], "expect_version"))
        else:
            operation["expect_absent"] = True
        return self._prepare("cas_fenced", operation, 0)

    async def _definite_checks(self, prepared: Optional[PreparedMutation], kind: Optional[str]) -> None:
        if self._closed:
            raise InvalidError("the client is closed")
        if self._attempt_timeout_ms <= 0:
            raise InvalidError("attempt_timeout must be above zero")
        if prepared is not None:
            if prepared.client_id != self._id:
                raise InvalidError("the prepared mutation belongs to another client")
            if prepared.kind != kind:
                raise InvalidError(f"the prepared mutation is for {prepared.kind}, not {kind}")
        ready = getattr(self._transport, "ready", None)
        if ready is not None:
            await ready()

    async def _send(self, prepared: PreparedMutation, kind: str) -> Any:
        await self._definite_checks(prepared, kind)
        try:
            return await self._transport.send("/kv/v1/write", prepared.body, prepared.op_id, self._attempt_timeout_ms)
        except LodeError as error:
            if not (error.ambiguous_mutation or error.timeout):
                raise
            await self._transport.reset()
            raise AmbiguousMutationError(
                f"{error.message}; to recover: {prepared.ambiguous_recovery.kind}", prepared.ambiguous_recovery
            ) from error

    async def acquire(self, prepared: PreparedMutation) -> Lease:
        """Sends a prepared acquisition; after an ambiguous outcome wait out
        the TTL before acquiring again (the recovery says so)."""
        return Lease.from_answer(await self._send(prepared, "acquire"))

    async def renew(self, prepared: PreparedMutation) -> Lease:
        """Sends a prepared renewal; repeat it after an ambiguous outcome."""
        return Lease.from_answer(await self._send(prepared, "renew"))

    async def release(self, prepared: PreparedMutation) -> bool:
        return bool((await self._send(prepared, "release"))["results"][0]["released"])

    async def cas_fenced(self, prepared: PreparedMutation) -> int:
        """Sends a prepared fenced write and returns the new version."""
        return u64_from_wire((await self._send(prepared, "cas_fenced"))["results"][0]["version"])

    async def get(self, request: dict[str, Any]) -> Optional[Entry]:
        """The barriered read (`namespace`, `key`, `position`): the entry
        once the serving member has applied the position. A timeout is a
        plain timeout; reads change nothing."""
        await self._definite_checks(None, None)
        if not isinstance(request, dict) or set(request) != {"namespace", "key", "position"}:
            raise InvalidError("a get request holds exactly namespace, key and position")
        limits.check_namespace(str(request["namespace"]))
        query = {"op": "get", "namespace": str(request["namespace"]), "key": _key(request["key"], "key")}
        body = {"query": query, "consistency": {"at_least": str(_int(request["position"], "position"))}}
        encoded = json.dumps(body, separators=(",", ":")).encode()
        try:
            answer = await self._transport.send("/kv/v1/read", encoded, None, self._attempt_timeout_ms)
        except LodeError as error:
            if not (error.ambiguous_mutation or error.timeout):
                raise
            await self._transport.reset()
            raise KvError("timeout", error.message) from error
        entry = answer["entry"]
        return None if entry is None else Entry.from_wire(entry)

    async def close(self) -> None:
        """Closes the client for good; later calls fail before sending."""
        if not self._closed:
            self._closed = True
            close = getattr(self._transport, "close", None)
            if close is not None:
                await close()
