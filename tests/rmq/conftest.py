"""The scripted server of test_connection, for every test of a connection against a peer."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.rmq.test_connection import Server, default_handler


@pytest.fixture
async def server() -> AsyncIterator[Server]:
    srv = Server(default_handler)
    await srv.start()
    yield srv
    await srv.close()
