"""app.tracing.loop_export: a ``force_flush`` from another thread takes the processor's one export slot
like any export (review, session 31)."""

from __future__ import annotations

import asyncio
import threading

import pytest

from rocksidecar.app.tracing import loop_export
from rocksidecar.app.tracing.loop_export import LoopBatchProcessor, settings
from tests.app.tracing.test_loop_export import _ended, _names


def test_spans_of_a_flush_from_another_thread_cut_short_by_the_stop_are_exported_at_shutdown(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """app.tracing.loop_export: "one export at a time", and a batch whose export the loop's end cuts
    short goes back to the queue for ``shutdown`` (the sidecar calls it after its loop stopped). A
    ``force_flush`` from another thread (the SDK's TracerProvider.force_flush, any thread) runs
    ``_drain`` on the loop, which sends what is queued without the processor's ``_exporting``: spans
    that fill a batch meanwhile start a second export beside it. Both record their batch in the one
    ``_inflight`` slot, so when the loop ends with both under way, the flush's batch is not put back:
    its spans are never exported, nor counted failed or dropped."""
    config = settings(
        {
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9",
            "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "2",
            "OTEL_BSP_SCHEDULE_DELAY": "3600000",
        }
    )
    assert config is not None
    processor = LoopBatchProcessor(config)
    sent_at_shutdown: list[int] = []
    in_flight = [0, 0]  # now, at most

    async def serve() -> None:  # the sidecar's loop: a flush from another thread, spans end, it stops
        started = [asyncio.Event(), asyncio.Event()]
        never = asyncio.Event()

        async def held(body: bytes, timeout_s: float) -> None:  # a collector slow to answer
            in_flight[0] += 1
            in_flight[1] = max(in_flight)
            started[min(in_flight[0], 2) - 1].set()
            try:
                await never.wait()
            finally:
                in_flight[0] -= 1

        processor._transport.send = held  # type: ignore[method-assign]
        _ended(processor, 1, "flushed")  # binds the processor to this loop; a partial batch waits
        flusher = threading.Thread(target=processor.force_flush, daemon=True)
        flusher.start()
        await asyncio.wait_for(started[0].wait(), 10)  # the flush's export is with the collector
        _ended(processor, 2, "full")  # a full batch meanwhile
        try:  # the second export, if one starts beside the first (bounded: none may ever start)
            await asyncio.wait_for(started[1].wait(), 0.5)
        except TimeoutError:
            pass
        # the loop ends here (SIGTERM): asyncio.run cancels the exports under way
        flusher_threads.append(flusher)

    class Counting:
        async def send(self, body: bytes, timeout_s: float) -> None:
            sent_at_shutdown.append(len(_names(body)))

        async def close(self) -> None:
            pass

    flusher_threads: list[threading.Thread] = []
    asyncio.run(serve())
    for thread in flusher_threads:
        thread.join(10)
    monkeypatch.setattr(loop_export, "transport", lambda _config: Counting())
    processor.shutdown()  # what the sidecar does after its loop stopped: the rest, on a loop of its own
    assert sum(sent_at_shutdown) == 3, (
        f"3 spans ended, {sum(sent_at_shutdown)} exported at shutdown (failed {processor.failed}, "
        f"dropped {processor.dropped}); exports at once at most: {in_flight[1]}"
    )
