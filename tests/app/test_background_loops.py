"""The sidecar's background work runs supervised (rmq.periodic): a round that raises is logged once,
with its traceback, and the next round runs (before, the status-history loop ended at its first error)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from rocksidecar.app.history import SAMPLE_EVERY_S
from rocksidecar.app.service import Service
from tests.app.conftest import settings_for
from tests.rmq.test_periodic import StepSleep


class FailingHistory:
    """A status history whose first two samples fail (a bug, or a store read that raised)."""

    def __init__(self) -> None:
        self.calls = 0

    def sample(self, now: float, values: dict[str, float]) -> None:
        self.calls += 1
        if self.calls <= 2:
            raise RuntimeError("sample failed")


async def test_the_status_history_loop_outlives_a_failing_sample(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    service = Service(settings_for(tmp_path), namesrv=("127.0.0.1:1",))
    try:
        history = service.history = FailingHistory()  # type: ignore[assignment]
        sleep = StepSleep()
        (loop,) = [p for p in service.background_loops(sleep) if p.name == "status-history"]
        with caplog.at_level(logging.ERROR, logger="rocksidecar"):
            loop.start()
            await sleep.waiting.wait()  # the first sample runs at once, then the loop sleeps
            await sleep.release()
            await sleep.release()
            await loop.close()
        assert history.calls == 3  # two failed rounds, and the loop still took the third sample
        assert sleep.intervals == [SAMPLE_EVERY_S] * 3
        errors = [r for r in caplog.records if "status-history: round failed" in r.getMessage()]
        assert len(errors) == 1 and errors[0].exc_info is not None  # once, with the traceback
    finally:
        # All of it, not only the store: what else __init__ built, left to interpreter exit, printed
        # "Error in sys.excepthook" after make test's summary.
        await service.stop()
