"""bench/scale.py's in-process parts on a small store: the fill through the stores' bulk APIs lands
every message, and the open and tick figures come out (structure only; timings are the bench's job)."""

from __future__ import annotations

from pathlib import Path

from bench.scale import fill, open_and_tick, store_path
from rocksidecar.delay.keys import DUE_CF
from rocksidecar.retry.keys import PENDING_CF
from rocksidecar.storage.rocks import RocksKV

N = 2_500  # spans a partial last batch


async def test_fill_lands_every_message_and_ticks_are_measured(tmp_path: Path) -> None:
    base_ms = 1_900_000_000_000
    retry_rate, delay_rate = await fill(tmp_path, N, base_ms)
    assert retry_rate > 0 and delay_rate > 0
    kv = RocksKV.open(store_path(tmp_path), (PENDING_CF, DUE_CF))
    try:
        assert kv.count(PENDING_CF) == kv.count(DUE_CF) == N
    finally:
        kv.close()
    figures = await open_and_tick(tmp_path, base_ms, reps=3)
    assert set(figures) == {"open_s", "retry_tick_us", "delay_tick_us"}
    assert all(value > 0 for value in figures.values())
