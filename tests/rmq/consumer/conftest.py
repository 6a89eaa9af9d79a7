"""Fixtures of the consumer tests."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from rocksidecar.rmq.consumer.push_consumer import PushConsumer


@pytest.fixture
async def consumers() -> AsyncIterator[list[PushConsumer]]:
    """Consumers a test starts; closed after it, whatever happened."""
    made: list[PushConsumer] = []
    yield made
    for c in made:
        await c.close()
