"""What reads, leases and the change feed answer."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from ._wire import from_wire_bytes, u64_from_wire


@dataclass(frozen=True)
class SessionLink:
    """The session a write belongs to: its stream (by name) and id."""

    stream: str
    session_id: str

    def to_wire(self) -> dict[str, str]:
        return {"stream": self.stream, "session_id": self.session_id}

    @classmethod
    def from_wire(cls, value: Any) -> Optional[SessionLink]:
        if not isinstance(value, dict):
            return None
        return cls(str(value["stream"]), str(value["session_id"]))


@dataclass(frozen=True)
class Entry:
    """A stored entry; its version is the log index that wrote it."""

    key: bytes
    value: bytes
    encoding: str
    version: int
    expires_at_micros: Optional[int]
    source_term: int
    source_index: int
    session: Optional[SessionLink]

    @classmethod
    def from_wire(cls, value: Any) -> Entry:
        expires = value.get("expires_at_micros")
        return cls(
            key=from_wire_bytes(value["key"]),
            value=from_wire_bytes(value["value"]),
            encoding=str(value["encoding"]),
            version=u64_from_wire(value["version"]),
            expires_at_micros=None if expires is None else u64_from_wire(expires),
            source_term=u64_from_wire(value["source_term"]),
            source_index=u64_from_wire(value["source_index"]),
            session=SessionLink.from_wire(value.get("session")),
        )


@dataclass(frozen=True)
class EntryMeta:
    """What `exists` reports of a live entry."""

    version: int
    expires_at_micros: Optional[int]
    size_bytes: int


@dataclass(frozen=True)
class Lease:
    """A granted or renewed lease. `token` is the fencing token (the grant's
    log index; renewal keeps it), `position` the commit position to read at
    least before a protected update."""

    token: int
    ttl_ms: int
    position: int
    expires_at_micros: int

    @classmethod
    def from_answer(cls, answer: Any) -> Lease:
        """The lease a grant's or renewal's write answered."""
        result = answer["results"][0]
        return cls(
            token=u64_from_wire(result["token"]),
            ttl_ms=u64_from_wire(result["ttl_micros"]) // 1000,
            position=u64_from_wire(answer["position"]),
            expires_at_micros=u64_from_wire(result["expires_at_micros"]),
        )


@dataclass(frozen=True)
class LeaseInfo:
    """A live lease as the store holds it."""

    holder: str
    token: int
    expires_at_micros: int


@dataclass(frozen=True)
class ScanPage:
    """One page of a scan; pass `cursor` to continue, None when done."""

    entries: list[Entry]
    cursor: Optional[str]


@dataclass(frozen=True)
class ChangeEvent:
    """One change of one key, in commit order."""

    index: int
    sequence: int
    namespace: str
    key: bytes
    kind: str
    old_value: Optional[bytes]
    new_value: Optional[bytes]
    encoding: str
    version: int

    @property
    def position(self) -> tuple[int, int]:
        """Where the change sits in the change log: resume after it."""
        return (self.index, self.sequence)

    @classmethod
    def from_wire(cls, value: Any) -> ChangeEvent:
        old, new = value.get("old_value"), value.get("new_value")
        return cls(
            index=u64_from_wire(value["index"]),
            sequence=int(value["sequence"]),
            namespace=str(value["namespace"]),
            key=from_wire_bytes(value["key"]),
            kind=str(value["kind"]),
            old_value=None if old is None else from_wire_bytes(old),
            new_value=None if new is None else from_wire_bytes(new),
            encoding=str(value["encoding"]),
            version=u64_from_wire(value["version"]),
        )
