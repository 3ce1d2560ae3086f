"""State stores: the small get/set/delete interface agents use for
checkpoints, cursor offsets and duplicate-suppression keys. Keys are
strings, values are bytes.

- `InMemoryStore` lives in the process and is gone on restart;
- `FileStore(root)` keeps one file per key (named `k` + the key's UTF-8
  bytes in hex, as the Rust SDK names them) and survives restarts: a value
  is written to a temporary file, fsynced, renamed over the old one and
  the directory fsynced, so a crash leaves the old value or the new one;
- `KvStore(kv)` is the managed store: it writes without expiry and keeps
  the key and value limits.
"""

from __future__ import annotations

import abc
import asyncio
import os
import secrets
from pathlib import Path
from collections.abc import Awaitable
from typing import Optional, TypeVar, Union

from .errors import KvError
from .kv import Kv

TEMPORARY_SUFFIX = ".tmp"

T = TypeVar("T")


class StateStore(abc.ABC):
    @abc.abstractmethod
    async def get(self, key: str) -> Optional[bytes]: ...

    @abc.abstractmethod
    async def set(self, key: str, value: bytes) -> None: ...

    @abc.abstractmethod
    async def delete(self, key: str) -> bool:
        """True when a value was removed."""


class InMemoryStore(StateStore):
    def __init__(self) -> None:
        self._values: dict[str, bytes] = {}

    async def get(self, key: str) -> Optional[bytes]:
        return self._values.get(key)

    async def set(self, key: str, value: bytes) -> None:
        self._values[key] = bytes(value)

    async def delete(self, key: str) -> bool:
        return self._values.pop(key, None) is not None


class FileStore(StateStore):
    def __init__(self, root: Union[str, os.PathLike[str]]) -> None:
        self._root = Path(root)

    def _path(self, key: str) -> Path:
        return self._root / ("k" + key.encode().hex())

    def _sync_root(self) -> None:
        descriptor = os.open(self._root, os.O_RDONLY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)

    def _get(self, key: str) -> Optional[bytes]:
        try:
            return self._path(key).read_bytes()
        except FileNotFoundError:
            return None

    def _set(self, key: str, value: bytes) -> None:
        self._root.mkdir(parents=True, exist_ok=True)
        path = self._path(key)
        temporary = path.with_name(f"{path.name}.{secrets.token_hex(16)}{TEMPORARY_SUFFIX}")
        with open(temporary, "wb") as file:
            file.write(value)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
        self._sync_root()

    def _delete(self, key: str) -> bool:
        try:
            self._path(key).unlink()
        except FileNotFoundError:
            return False
        self._sync_root()
        return True

    async def get(self, key: str) -> Optional[bytes]:
        return await self._io("reading", asyncio.to_thread(self._get, key))

    async def set(self, key: str, value: bytes) -> None:
        await self._io("writing", asyncio.to_thread(self._set, key, bytes(value)))

    async def delete(self, key: str) -> bool:
        return await self._io("deleting", asyncio.to_thread(self._delete, key))

    async def _io(self, action: str, work: Awaitable[T]) -> T:
        try:
            return await work
        except OSError as error:
            raise KvError("unavailable", f"{action} under {self._root}: {error}") from error


class KvStore(StateStore):
    """A namespace as a state store: set never expires."""

    def __init__(self, kv: Kv) -> None:
        self._kv = kv

    async def get(self, key: str) -> Optional[bytes]:
        return await self._kv.get(key)

    async def set(self, key: str, value: bytes) -> None:
        await self._kv.set(key).bytes(value).send()

    async def delete(self, key: str) -> bool:
        return await self._kv.delete(key)
