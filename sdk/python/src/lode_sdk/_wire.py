"""How the KV JSON API spells bytes and 64-bit integers: UTF-8 text as a
string, other bytes as `{"base64": …}`; integers as decimal strings."""

from __future__ import annotations

import base64
import secrets
import time
from typing import Any, Union

from .errors import InvalidError, KvError

KeyLike = Union[str, bytes]


def as_bytes(key: KeyLike, field: str = "key") -> bytes:
    if isinstance(key, str):
        return key.encode()
    if isinstance(key, (bytes, bytearray, memoryview)):
        return bytes(key)
    raise InvalidError(f"{field} must be str or bytes, not {type(key).__name__}")


def to_wire_bytes(data: bytes) -> Union[str, dict[str, str]]:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(data).decode("ascii")}


def from_wire_bytes(value: Any) -> bytes:
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, dict) and isinstance(value.get("base64"), str):
        return base64.b64decode(value["base64"], validate=True)
    raise KvError("unavailable", f"the server sent bytes as {value!r}")


def u64_from_wire(value: Any) -> int:
    if isinstance(value, str) and value.isdigit():
        return int(value)
    if isinstance(value, int) and value >= 0:
        return value
    raise KvError("unavailable", f"the server sent an integer as {value!r}")


def new_op_id() -> str:
    """A fresh op id as 32 hexadecimal digits: the wall clock's
    milliseconds in the top 48 bits, then 80 random bits. Ids made about
    the same time sort together, which keeps the members' dedup records
    written in order; only uniqueness is relied on."""
    millis = (time.time_ns() // 1_000_000) & ((1 << 48) - 1)
    return f"{millis:012x}{secrets.token_hex(10)}"
