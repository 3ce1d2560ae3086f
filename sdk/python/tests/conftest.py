"""Fixtures: one shared 3-member cluster for tests that leave it whole, and
a cluster of their own for tests that kill members."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from cluster import Cluster


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def shared_cluster() -> Iterator[Cluster]:
    cluster = Cluster()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def own_cluster() -> Iterator[Cluster]:
    cluster = Cluster()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def connection_string(shared_cluster: Cluster) -> str:
    return shared_cluster.connection_string()
