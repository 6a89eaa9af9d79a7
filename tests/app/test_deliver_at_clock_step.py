"""An absolute deliverAt after the wall clock was stepped back: due when the wall clock reaches it.

The delay store's clock never runs backwards (storage.clock.SteadyClock): after a step back it runs ahead
of the wall clock by the step, for good (the lead is persisted with its high-water mark and restored at a
restart). A deliverAt is a wall time: taken as a time of that clock it was published the step early. The
API edges move it onto the store's clock by the store's ``lead_ms`` (app.request.prepare), so it goes out
when the wall clock reaches it; delayMs due times are counted on the store's clock and need nothing.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from rocksidecar.app.api.operations import _prepared
from rocksidecar.app.request import HTTP_FIELDS, Limits, MessageFields, Prepared, prepare
from rocksidecar.app.service import COLUMN_FAMILIES, Service
from rocksidecar.devbroker import DevCluster
from rocksidecar.storage.clock import wall_ms
from rocksidecar.storage.rocks import RocksKV
from tests.app.conftest import settings_for
from tests.delay.conftest import Harness, make_harness, message
from tests.fakes import FaultyKV

HOUR_MS = 3_600_000
LIMITS = Limits(max_body_bytes=1024, max_delay_ms=90 * 24 * HOUR_MS)


@pytest.fixture
async def h() -> AsyncIterator[Harness]:
    harness = make_harness()
    yield harness
    if harness.scheduler is not None:
        await harness.scheduler.close()
    await harness.store.close()
    await harness.writer.close()


def deliver_at(h: Harness, at_ms: int) -> int | None:
    """The due time an edge stores for ``deliverAt: at_ms``, by ``h``'s store clock (as EdgeDeps wires it)."""
    spec = MessageFields("orders", "x", deliver_at=at_ms)
    return prepare(spec, LIMITS, h.store.now_ms(), HTTP_FIELDS, None, h.store.lead_ms).deliver_at_ms


async def step_back_an_hour_and_restart(h: Harness) -> None:
    """The wall clock is stepped back an hour (NTP correcting a fast clock, an operator's date -s), then
    three hours pass with the store busy, and the sidecar restarts: the store's clock still leads."""
    await h.start().start()
    await h.settle()
    h.clock.step_wall(-HOUR_MS)
    await h.advance(3 * 3600.0)  # both clocks move: the wall clock is right again, and stays right
    await h.store.schedule(message("LATER", h.clock.now_ms() + 24 * HOUR_MS))  # any write: a busy store
    await h.restart()  # a restart does not bring the store's clock back to the wall clock
    await h.settle()
    assert h.store.lead_ms() == HOUR_MS


async def test_an_absolute_deliver_at_is_not_published_early_hours_after_a_backward_step(h: Harness) -> None:
    """A client asks for delivery at wall-clock now + 30 min: it goes out then, not now (30 min early),
    and not later either."""
    await step_back_an_hour_and_restart(h)
    at = h.clock.now_ms() + 30 * 60_000  # what the client sends as deliverAt
    due = deliver_at(h, at)
    # The answers (send, status) report the due time by the store's clock: deliverAt plus the lead.
    assert due == at + HOUR_MS
    await h.store.schedule(message("AT", due))
    await h.advance(1.0)
    assert h.ids() == [], (
        f"published at wall clock {(at - h.clock.now_ms()) / 60_000:.0f} min before its deliverAt; "
        f"store clock leads the wall clock by {(h.store.now_ms() - h.clock.now_ms()) / 60_000:.0f} min"
    )
    await h.advance(30 * 60.0 - 2.0)
    assert h.ids() == []
    await h.advance(1.0)  # the wall clock reaches deliverAt
    assert h.ids() == ["AT"]


async def test_a_deliver_at_past_by_the_wall_clock_is_sent_now_and_the_maximum_counts_from_it(
    h: Harness,
) -> None:
    await step_back_an_hour_and_restart(h)
    assert deliver_at(h, h.clock.now_ms() - 1) is None  # a time in the past means "now"
    assert deliver_at(h, h.clock.now_ms() + LIMITS.max_delay_ms) is not None  # not beyond the maximum
    with pytest.raises(Exception, match="more than the maximum"):
        deliver_at(h, h.clock.now_ms() + LIMITS.max_delay_ms + 1)


async def test_usual_case_deliver_at_is_taken_as_it_is(h: Harness) -> None:
    at = h.clock.now_ms() + 60_000
    assert h.store.lead_ms() == 0 and deliver_at(h, at) == at


async def test_a_batch_moves_its_deliver_at_items_too(h: Harness) -> None:
    await step_back_an_hour_and_restart(h)
    at = h.clock.now_ms() + 60_000
    specs = [MessageFields("orders", "now"), MessageFields("orders", "later", deliver_at=at)]
    items = _prepared(specs, LIMITS, h.store.now_ms(), HTTP_FIELDS, ["I0", "I1"], None, True, h.store.lead_ms)
    assert all(isinstance(p, Prepared) for p in items)
    assert [p.deliver_at_ms for p in items if isinstance(p, Prepared)] == [None, at + HOUR_MS]


async def test_over_http_a_deliver_at_after_a_backward_step_is_scheduled_for_its_wall_time(
    tmp_path: Path,
) -> None:
    """The sidecar as assembled (EdgeDeps wires the delay store's lead): its host's wall clock is stepped
    back an hour while it runs; a client on that host asks for now + 30 min."""
    step = [0]

    def host_ms() -> int:
        return wall_ms() + step[0]

    async with DevCluster(brokers=1, queues=2) as cluster:
        settings = settings_for(tmp_path, namesrv=(cluster.namesrv_addr,))
        (tmp_path / "data").mkdir(exist_ok=True)
        kv = FaultyKV(RocksKV.open(tmp_path / "data" / "store", COLUMN_FAMILIES))
        service = Service(settings, kv=kv, now_ms=host_ms)
        await service.start()
        try:
            async with httpx.AsyncClient(
                base_url=f"http://127.0.0.1:{service.http.port}", timeout=30
            ) as http:
                service.delay.now_ms()  # the store's clock has read the wall clock before the step
                step[0] = -HOUR_MS
                at = host_ms() + 30 * 60_000
                r = await http.post("/v1/messages", json={"topic": "Later", "body": "x", "deliverAt": at})
                assert r.status_code == 202, r.text  # not 200 SENT: that was 30 min early
                doc = r.json()
                assert doc["status"] == "SCHEDULED"
                lead = doc["deliverAt"] - at  # reported by the store's clock: deliverAt plus its lead
                assert abs(lead - HOUR_MS) <= 5_000
                status = (await http.get(f"/v1/messages/{doc['id']}")).json()
                assert status["status"] == "SCHEDULED" and status["deliverAt"] == doc["deliverAt"]
        finally:
            await service.stop()
