"""Value codecs: JSON, MessagePack, and the `Codec` protocol any
application codec follows (its `encoding` is stored with the entry)."""

from __future__ import annotations

import json
from typing import Any, Protocol

import msgpack

from .errors import InvalidError


class Codec(Protocol):
    """Encodes and decodes values; `encoding` is the stored encoding's name
    (`json`, `msgpack`, or `custom:<name>` for an application's own)."""

    @property
    def encoding(self) -> str: ...

    def encode(self, value: Any) -> bytes: ...

    def decode(self, data: bytes) -> Any: ...


class JsonCodec:
    @property
    def encoding(self) -> str:
        return "json"

    def encode(self, value: Any) -> bytes:
        try:
            return json.dumps(value, separators=(",", ":")).encode()
        except (TypeError, ValueError) as error:
            raise InvalidError(f"the value cannot be encoded as JSON: {error}") from error

    def decode(self, data: bytes) -> Any:
        try:
            return json.loads(data)
        except ValueError as error:
            raise InvalidError(f"the value is not JSON: {error}") from error


class MsgpackCodec:
    """MessagePack; structured values as named maps (dicts)."""

    @property
    def encoding(self) -> str:
        return "msgpack"

    def encode(self, value: Any) -> bytes:
        try:
            packed: bytes = msgpack.packb(value, use_bin_type=True)
        except (TypeError, ValueError, OverflowError) as error:
            raise InvalidError(f"the value cannot be encoded as MessagePack: {error}") from error
        return packed

    def decode(self, data: bytes) -> Any:
        try:
            return msgpack.unpackb(data, raw=False, strict_map_key=False)
        except (ValueError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError) as error:
            raise InvalidError(f"the value is not MessagePack: {error}") from error


JSON = JsonCodec()
MSGPACK = MsgpackCodec()
