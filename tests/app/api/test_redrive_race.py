"""Two re-drives of one dead letter at once (a double click on /ui's button, the CLI and the page
together) while the store's writer is busy: the letter moves back once, and the other answers 404."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest

from rocksidecar.retry.keys import PENDING_CF
from tests.app.api.test_admin import SLOW, bury, spool
from tests.app.conftest import Stack
from tests.retry.conftest import GatedWrites


@pytest.fixture
async def down(make_stack: Callable[..., Any]) -> AsyncIterator[Stack]:
    """A sidecar whose brokers are down, with a slow ladder: nothing else writes meanwhile."""
    async with make_stack(retry_default=SLOW) as stack:
        await stack.stop_brokers()
        yield stack


async def test_concurrent_redrives_of_one_dead_letter_move_it_once(
    down: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    [id_] = await spool(down, "C", 1)
    await bury(down, id_)
    retry = down.service.retry
    gated = GatedWrites(retry.writer)  # each write waits, as behind a slow WAL sync
    monkeypatch.setattr(retry.writer, "write", gated)

    def post() -> asyncio.Task[httpx.Response]:
        return asyncio.create_task(down.http.post("/v1/admin/dead-letters:redrive", json={"id": id_}))

    first = post()
    await gated.until_arrived(1)  # its batch waits at the gate: the letter is still in the store
    second = post()
    queued = asyncio.create_task(gated.until_arrived(2))
    # The second answers at once, or (the race) queues a batch of its own: whichever comes first.
    await asyncio.wait({second, queued}, return_when=asyncio.FIRST_COMPLETED)
    queued.cancel()
    gated.gate.set()
    answers = [await first, await second]
    rows = [k for k, _ in retry.kv.scan(PENDING_CF) if k.endswith(id_.encode())]
    stats = retry.stats()
    assert [a.status_code for a in answers] == [200, 404], [a.text for a in answers]
    assert answers[1].json()["detail"] == f"no dead letter for message {id_!r}"
    assert (len(rows), stats.pending, stats.dead) == (1, 1, 0)
