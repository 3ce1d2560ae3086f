"""The request limits the SDK checks before anything is sent, the same as
the server's (`types/src/limits.rs`); each message names the field and the
limit."""

from __future__ import annotations

from .errors import InvalidError

NAMESPACE_BYTES_MAX = 256
KEY_BYTES_MAX = 2048
VALUE_BYTES_MAX = 65_536
HOLDER_BYTES_MAX = 256
LEASE_TTL_MICROS_MAX = 24 * 3600 * 1_000_000
GET_MANY_KEYS_MAX = 1000
SCAN_PAGE_ENTRIES_MAX = 1000


def over_limit(field: str, amount: str, limit_name: str, limit: int) -> InvalidError:
    return InvalidError(f"{field} is {amount}, over the limit {limit_name} = {limit}")


def check_namespace(namespace: str) -> None:
    size = len(namespace.encode())
    if size == 0:
        raise InvalidError("namespace must not be empty")
    if namespace.startswith("\0"):
        raise InvalidError("namespace must not start with a NUL character (reserved for Lode's own records)")
    if size > NAMESPACE_BYTES_MAX:
        raise over_limit("namespace", f"{size} bytes", "namespace_bytes_max", NAMESPACE_BYTES_MAX)


def check_key(key: bytes, field: str = "key") -> None:
    if not key:
        raise InvalidError(f"{field} must not be empty")
    if len(key) > KEY_BYTES_MAX:
        raise over_limit(field, f"{len(key)} bytes", "key_bytes_max", KEY_BYTES_MAX)


def check_value(value: bytes) -> None:
    if len(value) > VALUE_BYTES_MAX:
        raise over_limit("value", f"{len(value)} bytes", "value_bytes_max", VALUE_BYTES_MAX)


def check_holder(holder: str) -> None:
    size = len(holder.encode())
    if size == 0:
        raise InvalidError("holder must not be empty")
    if size > HOLDER_BYTES_MAX:
        raise over_limit("holder", f"{size} bytes", "holder_bytes_max", HOLDER_BYTES_MAX)


def check_lease_ttl(ttl_micros: int) -> None:
    if ttl_micros <= 0 or ttl_micros > LEASE_TTL_MICROS_MAX:
        raise InvalidError(
            f"lease ttl must be 1 to lease_ttl_micros_max = {LEASE_TTL_MICROS_MAX} microseconds"
        )


def lease_ttl_micros(ttl_ms: int) -> str:
    """A lease TTL given in milliseconds, checked, as the wire's micros."""
    check_lease_ttl(ttl_ms * 1000)
    return str(ttl_ms * 1000)


def check_u64(field: str, value: int) -> None:
    if value < 0 or value >= 1 << 64:
        raise InvalidError(f"{field} is {value}, outside the unsigned 64-bit range")
