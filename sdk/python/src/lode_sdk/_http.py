"""The HTTP ports of a cluster's members, as one endpoint with retries.

Any member serves the KV API (writes and linearizable reads follow the
leader from there). A call goes to the member that answered last; a member
that cannot be reached, or answers `unavailable`, is passed over for the
next, with backoff (20 ms doubling to 500 ms) until the call's time is up.
A mutation always carries its op id, so sending it again after a lost
answer applies it at most once; if no attempt settles it, the call ends
with `AmbiguousMutationError` and the op id to retry with.

The transport is aiohttp: httpx's connection pool scans every connection
for every request, so 64 concurrent calls through it were no faster than
one.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Optional

import aiohttp

from .errors import (
    AmbiguousMutationError,
    AmbiguousMutationRecovery,
    InvalidError,
    KvError,
    LodeError,
    error_from_wire,
)

BACKOFF_INITIAL_S = 0.02
BACKOFF_MAX_S = 0.5
# A change stream that heard nothing (not even the server's keepalive,
# every 15 s) for this long is dead.
STREAM_SILENCE_S_MAX = 45.0
# The longest line of a change stream: an event holds one key and two
# values (`value_bytes_max`, 64 KiB), base64-encoded.
STREAM_LINE_BYTES_MAX = 1 << 20
# The longest answer read: a page of `get_many` or `scan` values is a few
# MiB at most.
ANSWER_BYTES_MAX = 64 << 20


@dataclass(frozen=True)
class Options:
    """Time limits, in milliseconds: one attempt against one member, and all
    attempts of one call together."""

    attempt_timeout_ms: int = 10_000
    call_timeout_ms: int = 30_000

    def check(self) -> None:
        if self.attempt_timeout_ms <= 0 or self.call_timeout_ms <= 0:
            raise InvalidError("attempt_timeout_ms and call_timeout_ms must be above zero")


def normalize_endpoint(endpoint: str) -> str:
    endpoint = endpoint.strip().rstrip("/")
    if not endpoint:
        raise InvalidError("an endpoint must name host:port")
    if "://" not in endpoint:
        endpoint = "http://" + endpoint
    if not endpoint.startswith(("http://", "https://")):
        raise InvalidError(f"endpoint {endpoint!r} is neither http:// nor https://")
    return endpoint


class _Uncertain(Exception):
    """A transport failure after the request may have reached the member."""


class _NotSent(Exception):
    """A failure before the request could reach the member (its dial)."""


async def _read_bounded(response: aiohttp.ClientResponse, url: str) -> bytes:
    """The answer's body, refused past `ANSWER_BYTES_MAX`: a member's answers
    are bounded, so a longer one is not a member's."""
    if response.content_length is not None and response.content_length > ANSWER_BYTES_MAX:
        raise _Uncertain(f"an answer of {response.content_length} bytes from {url} is over {ANSWER_BYTES_MAX}")
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.content.iter_chunked(1 << 16):
        size += len(chunk)
        if size > ANSWER_BYTES_MAX:
            raise _Uncertain(f"an answer from {url} is over {ANSWER_BYTES_MAX} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


class HttpCluster:
    def __init__(self, endpoints: list[str], token: Optional[str], options: Options) -> None:
        options.check()
        if not endpoints:
            raise InvalidError("endpoints must name at least one host:port")
        self._endpoints = [normalize_endpoint(endpoint) for endpoint in endpoints]
        self._token = token
        self.options = options
        self._preferred = 0
        self._http: Optional[aiohttp.ClientSession] = None
        self._closed = False

    def _headers(self) -> dict[str, str]:
        headers = {"content-type": "application/json"}
        if self._token is not None:
            headers["authorization"] = f"Bearer {self._token}"
        return headers

    def _client(self) -> aiohttp.ClientSession:
        if self._closed:
            raise InvalidError("the client is closed")
        if self._http is None:
            # No cap on connections: calls in flight are the application's
            # to bound, and a cap would queue them out of their timeouts.
            connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=10)
            self._http = aiohttp.ClientSession(connector=connector, read_bufsize=STREAM_LINE_BYTES_MAX)
        return self._http

    async def reset(self) -> None:
        """Retires every connection; the next call dials afresh."""
        http, self._http = self._http, None
        if http is not None:
            await http.close()

    async def close(self) -> None:
        await self.reset()
        self._closed = True

    def _rotate(self, index: int) -> None:
        if self._preferred == index:
            self._preferred = (index + 1) % len(self._endpoints)

    async def _attempt(self, method: str, path: str, body: Optional[bytes], timeout_s: float) -> Any:
        """One request to the preferred member: the answer's JSON, or the
        error it stands for. Raises `_Uncertain` when the request may have
        arrived, `_NotSent` when it cannot have."""
        url = self._endpoints[self._preferred] + path
        timeout = aiohttp.ClientTimeout(total=timeout_s)
        try:
            async with self._client().request(
                method, url, data=body, headers=self._headers(), timeout=timeout
            ) as response:
                status = response.status
                raw = await _read_bounded(response, url)
        except aiohttp.ClientConnectorError as error:
            raise _NotSent(f"{type(error).__name__} dialing {url}") from error
        except (asyncio.TimeoutError, aiohttp.ClientError) as error:
            raise _Uncertain(f"{type(error).__name__} at {url}") from error
        try:
            answer = json.loads(raw)
        except ValueError:
            # Answers without JSON come from in front of the API (a proxy, or
            # the body limit): nothing was acted on except for a 5xx.
            if status == 413:
                return InvalidError(f"the request body is over the member's limit (HTTP 413 at {url})")
            if status in (401, 403):
                kind = "unauthorized" if status == 401 else "forbidden"
                text = raw.decode(errors="replace").strip()
                return KvError(kind, f"{kind}: {text} (at {url})")
            raise _Uncertain(f"HTTP {status} without JSON at {url}")
        if status == 200:
            return answer
        return error_from_wire(answer, status)

    async def call(self, method: str, path: str, body: Optional[dict[str, Any]], op_id: Optional[str]) -> Any:
        """The answer of one call, with retries; `op_id` marks a mutation."""
        encoded = None if body is None else json.dumps(body, separators=(",", ":")).encode()
        return await self.call_encoded(method, path, encoded, op_id)

    async def call_encoded(
        self, method: str, path: str, encoded: Optional[bytes], op_id: Optional[str], timeout_ms: Optional[int] = None
    ) -> Any:
        """`call` with the body's bytes as given; `timeout_ms` bounds the
        call and each attempt instead of the options."""
        call_timeout_ms = self.options.call_timeout_ms if timeout_ms is None else timeout_ms
        attempt_timeout_ms = self.options.attempt_timeout_ms if timeout_ms is None else timeout_ms
        deadline = time.monotonic() + call_timeout_ms / 1000
        backoff = BACKOFF_INITIAL_S
        uncertain: Optional[str] = None
        last: LodeError = KvError("unavailable", "no member answered")
        while True:
            index = self._preferred
            remaining = max(deadline - time.monotonic(), 0.001)
            timeout_s = min(attempt_timeout_ms / 1000, remaining)
            try:
                answer = await self._attempt(method, path, encoded, timeout_s)
            except _NotSent as error:
                last = KvError("unavailable", str(error))
                self._rotate(index)
            except _Uncertain as error:
                # The connection that failed is not reused; the others are.
                uncertain = str(error)
                last = KvError("timeout" if op_id is None else "unavailable", str(error))
                self._rotate(index)
            else:
                if not isinstance(answer, LodeError):
                    return answer
                if answer.ambiguous_mutation and op_id is not None:
                    uncertain = answer.message
                    last = KvError("unavailable", answer.message)
                    self._rotate(index)
                elif answer.unavailable:
                    last = answer
                    self._rotate(index)
                else:
                    raise answer
            if time.monotonic() >= deadline:
                if op_id is not None and uncertain is not None:
                    raise AmbiguousMutationError(
                        f"the outcome is unknown: {uncertain}; to recover, send the same mutation "
                        f"again with op id {op_id}",
                        AmbiguousMutationRecovery.retry_same_operation(op_id),
                    )
                raise last
            await asyncio.sleep(min(backoff, max(deadline - time.monotonic(), 0)))
            backoff = min(backoff * 2, BACKOFF_MAX_S)

    async def events(self, path: str, after: tuple[int, int]) -> AsyncIterator[tuple[str, str, str]]:
        """A server-sent-event stream's (id, event, data), resumed after the
        last id on another member when a connection fails; ends with an
        error event (raised) or when every member stayed unreachable for a
        call's time."""
        last_id = f"{after[0]}.{after[1]}"
        backoff = BACKOFF_INITIAL_S
        failing_since: Optional[float] = None
        while True:
            index = self._preferred
            url = self._endpoints[index] + path
            headers = dict(self._headers(), **{"last-event-id": last_id})
            timeout = aiohttp.ClientTimeout(
                total=None, connect=self.options.attempt_timeout_ms / 1000, sock_read=STREAM_SILENCE_S_MAX
            )
            try:
                async with self._client().get(url, headers=headers, timeout=timeout) as response:
                    if response.status != 200:
                        raise error_from_wire(json.loads(await _read_bounded(response, url)), response.status)
                    failing_since, backoff = None, BACKOFF_INITIAL_S
                    event_id, event, data = "", "message", ""
                    # Lines over the session's read_bufsize raise ValueError.
                    async for raw_line in response.content:
                        line = raw_line.decode().rstrip("\r\n")
                        if line.startswith("id: "):
                            event_id = line[4:]
                        elif line.startswith("event: "):
                            event = line[7:]
                        elif line.startswith("data: "):
                            data = line[6:]
                        elif line == "" and data:
                            if event == "error":
                                raise error_from_wire({"error": json.loads(data)}, 200)
                            yield event_id, event, data
                            last_id = event_id or last_id
                            event_id, event, data = "", "message", ""
            except (asyncio.TimeoutError, aiohttp.ClientError, _Uncertain, ValueError) as error:
                now = time.monotonic()
                failing_since = failing_since or now
                if now - failing_since > self.options.call_timeout_ms / 1000:
                    raise KvError("unavailable", f"the change stream failed: {error}") from error
                self._rotate(index)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, BACKOFF_MAX_S)
