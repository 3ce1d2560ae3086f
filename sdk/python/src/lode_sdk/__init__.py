"""Lode's KV API for Python, over a member's JSON HTTP port.

    import lode_sdk as ls

    laser = ls.Client.connect("http://127.0.0.1:7201,127.0.0.1:7202?token=…")
    store = laser.kv("config")
    version = await store.set("service:auth").json({"log_level": "info"}).send()
"""

from .client import Client, parse_connection_string
from .codec import Codec, JsonCodec, MsgpackCodec
from .errors import (
    AmbiguousMutationError,
    AmbiguousMutationRecovery,
    InvalidError,
    KvError,
    LodeError,
    UnsupportedError,
)
from .fenced import (
    KV_LEASE_OP_VERSION,
    CoordinationTransport,
    DedicatedKvTransport,
    FencedLeaseClient,
    PreparedMutation,
)
from .kv import CopyBuilder, DeleteManyBuilder, Kv, ScanBuilder, Session, SetBuilder
from .state_store import FileStore, InMemoryStore, KvStore, StateStore
from .types import ChangeEvent, Entry, EntryMeta, Lease, LeaseInfo, ScanPage, SessionLink

__all__ = [
    "AmbiguousMutationError",
    "AmbiguousMutationRecovery",
    "ChangeEvent",
    "Client",
    "Codec",
    "CoordinationTransport",
    "CopyBuilder",
    "DedicatedKvTransport",
    "DeleteManyBuilder",
    "Entry",
    "EntryMeta",
    "FencedLeaseClient",
    "FileStore",
    "InMemoryStore",
    "InvalidError",
    "JsonCodec",
    "KV_LEASE_OP_VERSION",
    "Kv",
    "KvError",
    "KvStore",
    "Lease",
    "LeaseInfo",
    "LodeError",
    "MsgpackCodec",
    "PreparedMutation",
    "ScanBuilder",
    "ScanPage",
    "Session",
    "SessionLink",
    "SetBuilder",
    "StateStore",
    "UnsupportedError",
    "parse_connection_string",
]
