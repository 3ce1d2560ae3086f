"""The client: a cluster reached through its members' HTTP ports, the
namespace handles, capabilities, namespace listing, session keys and the
change feed."""

from __future__ import annotations

import asyncio
import json
import urllib.parse
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING, Any, Optional, Union

from ._http import HttpCluster, Options
from ._wire import from_wire_bytes, new_op_id
from .errors import AmbiguousMutationError, AmbiguousMutationRecovery, InvalidError, UnsupportedError
from .types import ChangeEvent, SessionLink

if TYPE_CHECKING:
    from .kv import Kv, Session

SESSION_KEYS_PAGE = 1000


def parse_connection_string(connection_string: str) -> tuple[list[str], dict[str, str]]:
    """`http://host:port[,host:port…][?token=…&default_stream=…]` (or
    `https://`): the endpoints and the options."""
    text = connection_string.strip()
    scheme = "http://"
    for prefix in ("http://", "https://"):
        if text.startswith(prefix):
            scheme, text = prefix, text[len(prefix):]
    hosts, _, query = text.partition("?")
    endpoints = [scheme + host.strip().strip("/") for host in hosts.split(",") if host.strip().strip("/")]
    if not endpoints:
        raise InvalidError(f"connection string {connection_string!r} names no host:port")
    options = dict(urllib.parse.parse_qsl(query, strict_parsing=bool(query)))
    unknown = set(options) - {"token", "default_stream"}
    if unknown:
        raise InvalidError(f"connection string option {sorted(unknown)[0]!r} is none of token, default_stream")
    return endpoints, options


class Client:
    """A handle on a cluster. Its methods are coroutines; close it when done
    (`async with` closes it too)."""

    def __init__(
        self,
        endpoints: Union[str, Sequence[str]],
        *,
        token: Optional[str] = None,
        default_stream: Optional[str] = None,
        attempt_timeout_ms: int = 10_000,
        call_timeout_ms: int = 30_000,
    ) -> None:
        listed = [endpoints] if isinstance(endpoints, str) else list(endpoints)
        self._cluster = HttpCluster(listed, token, Options(attempt_timeout_ms, call_timeout_ms))
        self._default_stream = default_stream
        self._capabilities: Optional[list[str]] = None
        # Lease acquisitions run one at a time per client.
        self._lease_gate = asyncio.Lock()

    @classmethod
    def connect(cls, connection_string: str, **options: Any) -> Client:
        """A client for the members a connection string names."""
        endpoints, parsed = parse_connection_string(connection_string)
        merged: dict[str, Any] = {**parsed, **options}
        return cls(endpoints, **merged)

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self._cluster.close()

    def _stream_prefix(self) -> str:
        return "" if self._default_stream is None else f"stream:{self._default_stream}/"

    def resource_namespace(self, namespace: str) -> str:
        """The name sent for `namespace` (stream-scoped with a default stream)."""
        return self._stream_prefix() + namespace

    def kv(self, namespace: str) -> Kv:
        """A handle on one namespace, scoped to the default stream if any."""
        from .kv import Kv

        return Kv(self, namespace, self.resource_namespace(namespace))

    def kv_unscoped(self, namespace: str) -> Kv:
        """A handle on a namespace exactly as named."""
        from .kv import Kv

        return Kv(self, namespace, namespace)

    def session(self, stream: str, session_id: str) -> Session:
        """The session `session_id` of `stream`, for linking writes to it."""
        from .kv import Session

        return Session(self, stream, session_id)

    async def capabilities(self) -> list[str]:
        """What the cluster offers (`kv`, `cas`, `fenced_leases`, …); asked once."""
        if self._capabilities is None:
            answer = await self._cluster.call("GET", "/kv/v1/capabilities", None, None)
            self._capabilities = [str(name) for name in answer["capabilities"]]
        return list(self._capabilities)

    async def require(self, capability: str) -> None:
        """`UnsupportedError`, before anything is sent, without `capability`."""
        if capability not in await self.capabilities():
            raise UnsupportedError(f"the cluster does not offer {capability}")

    async def write(self, operations: list[dict[str, Any]], op_id: Optional[str] = None) -> dict[str, Any]:
        """One atomic write of wire operations under `op_id` (fresh when
        None): the answer's `op_id`, `position` and `results`."""
        op_id = op_id or new_op_id()
        answer: dict[str, Any] = await self._cluster.call(
            "POST", "/kv/v1/write", {"op_id": op_id, "operations": operations}, op_id
        )
        return answer

    async def read(self, query: dict[str, Any], consistency: Any = "linearizable") -> dict[str, Any]:
        """One wire read: its answer and `position`."""
        answer: dict[str, Any] = await self._cluster.call(
            "POST", "/kv/v1/read", {"query": query, "consistency": consistency}, None
        )
        return answer

    async def acquire_gated(self, operation: dict[str, Any], ttl_ms: int) -> dict[str, Any]:
        """A lease acquisition behind the client's gate; an unknown outcome
        waits out `ttl_ms` before it is reported."""
        async with self._lease_gate:
            try:
                return await self.write([operation])
            except AmbiguousMutationError as error:
                await asyncio.sleep(ttl_ms / 1000)
                raise AmbiguousMutationError(
                    f"{error.message}; any grant it made has expired after its TTL of {ttl_ms} ms",
                    AmbiguousMutationRecovery.wait_out_lease_ttl(ttl_ms * 1000),
                ) from error

    async def kv_namespaces(self) -> list[str]:
        """The namespaces holding live entries (this stream's, unprefixed)."""
        await self.require("kv")
        prefix = self._stream_prefix()
        answer = await self.read({"op": "namespaces", "prefix": prefix})
        return [str(name)[len(prefix):] for name in answer["namespaces"] if str(name).startswith(prefix)]

    async def session_keys(self, session: SessionLink) -> list[tuple[str, bytes]]:
        """The (namespace, key) pairs written under `session`, every page."""
        await self.require("kv")
        written: list[tuple[str, bytes]] = []
        after: Any = None
        while True:
            query: dict[str, Any] = {"op": "session_keys", "session": session.to_wire(), "limit": SESSION_KEYS_PAGE}
            if after is not None:
                query["after"] = after
            answer = await self.read(query)
            written.extend((str(key["namespace"]), from_wire_bytes(key["key"])) for key in answer["keys"])
            after = answer["resume_after"]
            if after is None:
                return written

    async def changes(
        self, after: tuple[int, int] = (0, 0), namespace_prefix: str = ""
    ) -> AsyncIterator[ChangeEvent]:
        """Every change after `after` (log index, sequence), in commit order,
        at least once, resumed on another member when a connection fails;
        a position older than the cluster keeps raises `compacted`."""
        path = "/kv/v1/changes?" + urllib.parse.urlencode({"namespace_prefix": namespace_prefix})
        async for _, _, data in self._cluster.events(path, after):
            yield ChangeEvent.from_wire(json.loads(data))

