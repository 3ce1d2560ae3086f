"""A cluster of real `lode node` processes on loopback, started from the
built binary (`LODE_BINARY`), each with an HTTP port; stopped (SIGKILL) by
the test that started it. Every wait polls a condition with a deadline."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional, TypeVar

ACCESS_TOKEN = "test-token"
WAIT_S_MAX = 60.0

T = TypeVar("T")

_handed_out: set[int] = set()


def free_port() -> int:
    """A free loopback port this process never handed out before."""
    while True:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = int(probe.getsockname()[1])
        if port not in _handed_out:
            _handed_out.add(port)
            return port


def binary() -> str:
    path = os.environ.get("LODE_BINARY")
    if not path:
        target = os.environ.get("CARGO_TARGET_DIR", os.path.expanduser("~/.cache/lode-target"))
        path = os.path.join(target, "debug", "lode")
    if not os.access(path, os.X_OK):
        raise RuntimeError(f"no lode binary at {path}: build it (cargo build -p lode-node) or set LODE_BINARY")
    return path


def wait_until(what: str, condition: Callable[[], Optional[T]], timeout_s: float = WAIT_S_MAX) -> T:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            result = condition()
        except OSError:
            result = None
        if result is not None:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


@dataclass
class Member:
    id: int
    client: str
    peer: str
    http: str
    data_dir: Path
    log_path: Path
    process: Optional[subprocess.Popen[bytes]] = field(default=None)


class Cluster:
    def __init__(self, count: int = 3, extra: tuple[str, ...] = ()) -> None:
        self._directory = tempfile.TemporaryDirectory(prefix="lode-python-")
        root = Path(self._directory.name)
        self.members = {
            id: Member(
                id,
                f"127.0.0.1:{free_port()}",
                f"127.0.0.1:{free_port()}",
                f"127.0.0.1:{free_port()}",
                root / f"node-{id}",
                root / f"node-{id}.log",
            )
            for id in range(1, count + 1)
        }
        self._peers = ",".join(f"{member.id}={member.peer}" for member in self.members.values())
        self._extra = extra
        for member in self.members.values():
            self._spawn(member)
        self.wait_ready()

    def _spawn(self, member: Member) -> None:
        log = open(member.log_path, "ab")
        member.process = subprocess.Popen(
            [
                binary(), "node", "--id", str(member.id), "--listen", member.client,
                "--peer-listen", member.peer, "--data-dir", str(member.data_dir),
                "--http", member.http, "--access-token", ACCESS_TOKEN, "--peers", self._peers,
                *self._extra,
            ],
            stdout=subprocess.DEVNULL,
            stderr=log,
            env=dict(os.environ, LODE_LOG="info,openraft=warn", NO_COLOR="1"),
        )
        log.close()

    def running(self) -> list[Member]:
        return [member for member in self.members.values() if member.process and member.process.poll() is None]

    def connection_string(self, ids: Optional[list[int]] = None) -> str:
        chosen = [self.members[id] for id in ids] if ids else list(self.members.values())
        return "http://" + ",".join(member.http for member in chosen) + f"?token={ACCESS_TOKEN}"

    def _ready(self, member: Member) -> bool:
        try:
            with urllib.request.urlopen(f"http://{member.http}/ready", timeout=2) as answer:
                return bool(answer.status == 200)
        except OSError:
            return False

    def wait_ready(self) -> None:
        wait_until("every running member to be ready", lambda: all(self._ready(m) for m in self.running()) or None)
        self.leader()

    def leader(self) -> int:
        """The leader every running member agrees on."""

        def agreed() -> Optional[int]:
            endpoints = ",".join(member.client for member in self.running())
            output = subprocess.run(
                [binary(), "cluster", "status", "--json", "--endpoints", endpoints],
                capture_output=True,
                timeout=10,
            )
            if output.returncode != 0:
                return None
            leader = json.loads(output.stdout).get("leader")
            running = {member.id for member in self.running()}
            return int(leader) if leader in running else None

        return wait_until("a leader", agreed)

    def kill(self, id: int) -> None:
        process = self.members[id].process
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGKILL)
            process.wait(timeout=10)

    def restart(self, id: int) -> None:
        self.kill(id)
        self._spawn(self.members[id])

    def stop(self) -> None:
        for id in self.members:
            self.kill(id)
        self._directory.cleanup()
