"""SIGTERM while a subscription's app holds a delivery: `rocksidecar serve` still drains, closes its store
and exits 0 within ROCKSIDECAR_SHUTDOWN_GRACE_S. The consumers' close waits for what the app holds half
the grace at most (app.subscriptions.runner.close_wait_s; the client's fixed 10 s before, past the grace +
5 s the stop had: it was cancelled midway, the store never closed, a TimeoutError traceback, exit 1). And
a stop that overruns anyway is cut short with one line, the store closed, exit 1 (app.shutdown.
stop_within)."""

from __future__ import annotations

import asyncio
import http.server
import logging
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from bench.sidecar_process import sidecar_process
from rocksidecar.app import shutdown
from rocksidecar.app.shutdown import close_stores, stop_within
from rocksidecar.app.subscriptions.runner import Subscriptions, close_wait_s, consumer_config
from rocksidecar.app.subscriptions.spec import SubscriptionSpec
from rocksidecar.rmq.consumer import ConsumerConfig

GRACE_S = 2.0


class HoldingApp:
    """A subscription's app that holds every POST until released."""

    def __init__(self) -> None:
        self.got = threading.Event()
        self.release = threading.Event()
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                outer.got.set()
                outer.release.wait(60)
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/events"

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.timeout(180)
def test_sigterm_while_the_app_holds_a_delivery_drains_within_grace_and_exits_0(tmp_path: Path) -> None:
    """README: SIGTERM stops accepting, finishes in-flight work, flushes and exits 0 within the grace,
    with a subscription's app holding a delivery too (it is not committed: redelivered after a restart)."""
    app = HoldingApp()
    config = tmp_path / "sidecar.yaml"
    config.write_text(
        "subscriptions:\n"
        "  - name: held\n"
        "    topic: HeldTopic\n"
        "    group: held-app\n"
        f"    endpoint: {app.url}\n"
        "    consume_from: first\n"
        "    timeout_s: 60\n"
    )
    try:
        with sidecar_process(None, tmp_path, CONFIG=str(config), SHUTDOWN_GRACE_S=str(GRACE_S)) as (
            url,
            proc,
        ):
            r = httpx.post(f"{url}/v1/messages", json={"topic": "HeldTopic", "body": "held"}, timeout=10)
            assert r.status_code == 200, r.text
            assert app.got.wait(30), "the subscription never delivered to the app"
            sent = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            rc = proc.wait(60)
            took = time.monotonic() - sent
            log = (tmp_path / "sidecar.log").read_text()
            assert rc == 0, f"exit code {rc} {took:.1f} s after SIGTERM (grace {GRACE_S} s); log:\n{log}"
            assert took <= GRACE_S + 3, f"exited {took:.1f} s after SIGTERM (grace {GRACE_S} s)"
            assert "Traceback" not in log, log
    finally:
        app.close()


async def test_the_consumers_close_wait_is_a_share_of_the_grace() -> None:
    """Half the grace, never more than the client's 10 s (its default, left as it is), and what each
    subscription's consumer is given."""
    assert [close_wait_s(g) for g in (0.0, 2.0, 20.0, 60.0)] == [0.0, 1.0, 10.0, 10.0]
    spec = SubscriptionSpec("a", "T", "g", "http://127.0.0.1:1/in")
    assert consumer_config(spec).close_timeout_s == ConsumerConfig(group="g").close_timeout_s == 10.0
    subs = Subscriptions([spec], "127.0.0.1:9", close_timeout_s=close_wait_s(4.0))
    try:
        assert subs.consumers["a"].config.close_timeout_s == 2.0
    finally:
        await subs.close()


class Step:
    """A store part whose close is recorded, and fails when told to."""

    def __init__(self, name: str, done: list[str], fails: bool = False) -> None:
        self.name, self.done, self.fails = name, done, fails

    async def close(self) -> None:
        self.done.append(self.name)
        if self.fails:
            raise RuntimeError(f"{self.name} is closed already")


class Kv:
    def __init__(self, done: list[str]) -> None:
        self.done = done

    def close(self) -> None:
        self.done.append("kv")


async def test_a_stop_that_overruns_is_cut_short_and_the_store_still_closed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """stop() past its limit: cancelled, one error line (event stop_overran), the store closed in order
    (a step that fails does not keep RocksDB open), and False (the process exits 1)."""
    done: list[str] = []
    cancelled = False

    async def stuck_stop() -> None:
        nonlocal cancelled
        try:
            await asyncio.sleep(60)  # an app that holds a delivery, a broker that does not answer
        except asyncio.CancelledError:
            cancelled = True
            raise

    async def close_store() -> None:
        await close_stores(
            Step("retry", done, fails=True), Step("delay", done), Step("writer", done), Kv(done), anyway=True
        )

    with caplog.at_level(logging.WARNING, logger="rocksidecar"):
        assert await stop_within(stuck_stop(), 0.1, close_store) is False
    assert cancelled
    assert done == ["retry", "delay", "writer", "kv"]
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert [getattr(r, "event", None) for r in errors] == ["stop_overran"]


async def test_a_stop_within_its_limit() -> None:
    """stop() done in time: True, and the store is left to stop() (closed there, not twice)."""
    closed: list[str] = []

    async def stop() -> None:
        await asyncio.sleep(0)

    async def close_store() -> None:
        closed.append("store")

    assert await stop_within(stop(), 5, close_store) is True
    assert closed == []


async def test_closing_the_store_after_an_overrun_is_bounded_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """A disk that hung the stop may hang closing the store as well: that is cut short too, so the process
    still exits 1 (README) rather than waiting for Kubernetes' SIGKILL."""
    monkeypatch.setattr(shutdown, "CLOSE_STORE_S", 0.1)
    hung = asyncio.Event()

    async def stuck() -> None:
        await hung.wait()

    assert await stop_within(stuck(), 0.1, stuck) is False


CHILD = """
import asyncio, sys, time
from rocksidecar.app import shutdown
from rocksidecar.app.wiring import run_process

shutdown.CLOSE_STORE_S = 0.2

async def main() -> int:
    async def stuck() -> None:
        await asyncio.Event().wait()

    async def close_store() -> None:
        await asyncio.to_thread(time.sleep, 15)  # a synced write on a disk that hangs

    # as serve's and dmq's run(): exit_now when closing the store overran too
    return 0 if await shutdown.stop_within(stuck(), 0.2, close_store, shutdown.exit_now) else 1

sys.exit(run_process(main()))
"""


def test_a_process_whose_close_overran_exits_within_the_bound() -> None:
    """wait_for cancels the await, not the work: a store write stuck in a thread on a hung disk held the
    loop's shutdown and the interpreter's exit (16 s here, for ever on a dead disk). exit_now leaves."""
    root = Path(__file__).resolve().parents[2]
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", CHILD], check=False, cwd=root, capture_output=True, text=True, timeout=60
    )
    took = time.monotonic() - started
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert took < 6, f"the process exited {took:.1f} s after an overrun bounded at 0.2 + 0.2 s"
