"""Shared fixtures: a two-broker DevCluster on ephemeral loopback ports, a RemotingClient, and
certificates for TLS tests."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from rocksidecar.devbroker import DevCluster
from rocksidecar.rmq.pool import RemotingClient
from tests.tls_certs import Certs, make_certs


@pytest.fixture
async def cluster() -> AsyncIterator[DevCluster]:
    async with DevCluster(brokers=2, queues=4) as c:
        yield c


@pytest.fixture
async def client() -> AsyncIterator[RemotingClient]:
    rc = RemotingClient()
    yield rc
    await rc.close()


@pytest.fixture(scope="session")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    """A CA, a server and a client certificate for TLS tests (tests/tls_certs.py)."""
    return make_certs(tmp_path_factory.mktemp("certs"))
