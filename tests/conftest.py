"""Shared fixtures: a two-broker DevCluster on ephemeral loopback ports and a RemotingClient."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from rocksidecar.devbroker import DevCluster
from rocksidecar.rmq.pool import RemotingClient


@pytest.fixture
async def cluster() -> AsyncIterator[DevCluster]:
    async with DevCluster(brokers=2, queues=4) as c:
        yield c


@pytest.fixture
async def client() -> AsyncIterator[RemotingClient]:
    rc = RemotingClient()
    yield rc
    await rc.close()
