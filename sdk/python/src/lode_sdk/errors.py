"""Lode's one error kind set, as Python exceptions.

Every failure is a `LodeError` whose `kind` names it, with a flag per kind
(`version_conflict`, `lease_lost`, `stale`, `not_found`, …) so that a
caller can test any error without knowing its class. Store failures are
`KvError`; a request refused before it was sent is `InvalidError` or
`UnsupportedError`; a mutation whose outcome is unknown is
`AmbiguousMutationError`, whose `ambiguous_recovery` says what to do.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional


@dataclass(frozen=True)
class AmbiguousMutationRecovery:
    """What to do after a mutation whose outcome is unknown; compares equal
    to the factory of the same action."""

    kind: str
    op_id: Optional[str] = None
    ttl_micros: Optional[int] = None

    @classmethod
    def repeat_prepared(cls) -> AmbiguousMutationRecovery:
        """Send the same prepared mutation again: same op id, same bytes."""
        return cls("repeat_prepared")

    @classmethod
    def retry_same_operation(cls, op_id: str) -> AmbiguousMutationRecovery:
        """Send the same mutation again with this op id."""
        return cls("retry_same_operation", op_id=op_id)

    @classmethod
    def wait_out_lease_ttl(cls, ttl_micros: int) -> AmbiguousMutationRecovery:
        """Wait out the lease's TTL; any grant made has expired by then."""
        return cls("wait_out_lease_ttl", ttl_micros=ttl_micros)


class LodeError(Exception):
    """Every failure a Lode API reports."""

    def __init__(self, kind: str, message: str, detail: Optional[dict[str, Any]] = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.detail: dict[str, Any] = dict(detail or {})

    @property
    def invalid(self) -> bool:
        return self.kind == "invalid"

    @property
    def not_found(self) -> bool:
        return self.kind == "not_found"

    @property
    def version_conflict(self) -> bool:
        return self.kind == "version_conflict"

    @property
    def lease_lost(self) -> bool:
        return self.kind == "lease_lost"

    @property
    def stale(self) -> bool:
        return self.kind == "stale"

    @property
    def unsupported(self) -> bool:
        return self.kind == "unsupported"

    @property
    def ambiguous_mutation(self) -> bool:
        return self.kind == "ambiguous_mutation"

    @property
    def unauthorized(self) -> bool:
        return self.kind == "unauthorized"

    @property
    def forbidden(self) -> bool:
        return self.kind == "forbidden"

    @property
    def unavailable(self) -> bool:
        return self.kind == "unavailable"

    @property
    def timeout(self) -> bool:
        return self.kind == "timeout"

    @property
    def compacted(self) -> bool:
        return self.kind == "compacted"

    @property
    def quota_exceeded(self) -> bool:
        return self.kind == "quota_exceeded"

    @property
    def current_version(self) -> Optional[int]:
        """A version conflict's current version (None: the key is absent)."""
        current = self.detail.get("current_version")
        return int(current) if isinstance(current, str) else None

    @property
    def ambiguous_recovery(self) -> Optional[AmbiguousMutationRecovery]:
        return None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.kind!r}, {self.message!r})"


class KvError(LodeError):
    """A store failure: not found, version conflict, lease lost, stale, …"""


class InvalidError(LodeError):
    """A request broke a limit or was malformed; nothing was sent (or the
    server refused it the same way)."""

    def __init__(self, message: str, detail: Optional[dict[str, Any]] = None) -> None:
        super().__init__("invalid", message, detail)


class UnsupportedError(LodeError):
    """The cluster lacks a capability the call needs; nothing was sent."""

    def __init__(self, message: str, detail: Optional[dict[str, Any]] = None) -> None:
        super().__init__("unsupported", message, detail)


class AmbiguousMutationError(LodeError):
    """The mutation may or may not have been applied."""

    def __init__(self, message: str, recovery: AmbiguousMutationRecovery) -> None:
        super().__init__("ambiguous_mutation", message)
        self._recovery = recovery

    @property
    def ambiguous_recovery(self) -> AmbiguousMutationRecovery:
        return self._recovery


def recovery_from_wire(recovery: Any) -> AmbiguousMutationRecovery:
    """The recovery a server's `ambiguous_mutation` answer carried."""
    if isinstance(recovery, dict):
        action = recovery.get("action")
        if action == "retry_same_operation" and isinstance(recovery.get("op_id"), str):
            return AmbiguousMutationRecovery.retry_same_operation(recovery["op_id"])
        if action == "wait_out_lease_ttl" and isinstance(recovery.get("ttl_micros"), str):
            return AmbiguousMutationRecovery.wait_out_lease_ttl(int(recovery["ttl_micros"]))
    return AmbiguousMutationRecovery.repeat_prepared()


def error_from_wire(body: Any, status: int) -> LodeError:
    """The exception for a failure answer (`{"error": {"kind", "message", …}}`)."""
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict) or not isinstance(error.get("kind"), str):
        return KvError("unavailable", f"the server answered HTTP {status} without an error kind")
    kind: str = error["kind"]
    message = str(error.get("message", kind))
    detail = {name: value for name, value in error.items() if name not in ("kind", "message")}
    if kind == "invalid":
        return InvalidError(message, detail)
    if kind == "unsupported":
        return UnsupportedError(message, detail)
    if kind == "ambiguous_mutation":
        return AmbiguousMutationError(message, recovery_from_wire(error.get("recovery")))
    return KvError(kind, message, detail)
