"""One devbroker whose clock the test moves and whose transaction checks run only when asked."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from rocksidecar.devbroker import DevCluster
from tests.fakes import FakeWallClock


@pytest.fixture
def clock() -> FakeWallClock:
    return FakeWallClock()


@pytest.fixture
async def cluster(clock: FakeWallClock) -> AsyncIterator[DevCluster]:
    async with DevCluster(brokers=1, queues=2, now_ms=clock.now_ms, transaction_check_interval_s=0) as c:
        yield c
