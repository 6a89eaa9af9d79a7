"""SIGTERM during start-up is honoured at once: `rocksidecar serve` and `rocksidecar dmq` cut their
start-up short (it may wait on a name server that does not answer: 3 s per request, ~12 s for the dmq's
inner consumer), stop what did start within the shutdown grace, and exit 0 (app.shutdown.
start_unless_stopped). Before, start-up ran to its end first, the stop waiting for it."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.common import wait_for_http
from rocksidecar.app.shutdown import start_unless_stopped
from tests.app.silent_namesrv import Process, silent_namesrv

GRACE_S = 2.0


@pytest.fixture
def namesrv() -> Iterator[str]:
    with silent_namesrv() as addr:
        yield addr


def stopped_after_sigterm(proc: subprocess.Popen[str]) -> tuple[int, float]:
    """SIGTERM ``proc``: its exit code and how long it took to exit."""
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    try:
        rc = proc.wait(60)
    except subprocess.TimeoutExpired:
        pytest.fail("did not exit within 60 s of SIGTERM during start-up")
    return rc, time.monotonic() - sent


@pytest.mark.timeout(180)
def test_serve_sigterm_during_startup_is_honoured_within_the_grace(tmp_path: Path, namesrv: str) -> None:
    """SIGTERM once start() began (the "configuration" line is logged) while it waits for the name server
    (6 allow-listed topics' routes, then a readiness check): the process exits 0 within the grace."""
    topics = ",".join(f"T{i}" for i in range(6))
    with Process(tmp_path, NAMESRV=namesrv, TOPICS=topics, SHUTDOWN_GRACE_S=str(GRACE_S)) as serve:
        serve.wait_for_line("event=config", 60)  # start() has begun
        rc, took = stopped_after_sigterm(serve.proc)
        output = "".join(serve.output)
        assert took <= GRACE_S + 3, f"exited {took:.1f} s after SIGTERM (grace {GRACE_S} s), rc {rc}"
        assert rc == 0, output
        assert "stopping during start-up" in output, output
        assert "Traceback" not in output, output


@pytest.mark.timeout(180)
def test_dmq_sigterm_during_startup_is_honoured_within_the_grace(tmp_path: Path, namesrv: str) -> None:
    """`rocksidecar dmq` likewise: SIGTERM once its HTTP server listens (start() under way: the inner
    consumer's start, ~12 s against a name server that does not answer) exits 0 within the grace."""
    with Process(tmp_path, "dmq", NAMESRV=namesrv, SHUTDOWN_GRACE_S=str(GRACE_S)) as dmq:
        assert wait_for_http(f"{dmq.url}/healthz", dmq.proc, 60), "dmq never listened"
        rc, took = stopped_after_sigterm(dmq.proc)
        output = "".join(dmq.output)
        assert took <= GRACE_S + 3, f"exited {took:.1f} s after SIGTERM (grace {GRACE_S} s), rc {rc}"
        assert rc == 0, output
        assert "Traceback" not in output, output


async def test_stop_first_cancels_the_start_up() -> None:
    """The stop event set while start() runs: start() is cancelled where it was, and False says so."""
    stop, reached = asyncio.Event(), asyncio.Event()
    cancelled = False

    async def start() -> None:
        nonlocal cancelled
        reached.set()
        try:
            await asyncio.sleep(60)  # a name server that does not answer
        except asyncio.CancelledError:
            cancelled = True
            raise

    async def sigterm() -> None:
        await reached.wait()
        stop.set()

    setter = asyncio.create_task(sigterm())
    assert await asyncio.wait_for(start_unless_stopped(start(), stop), 5) is False
    await setter
    assert cancelled


async def test_a_start_up_that_ends_first_or_fails() -> None:
    """A start-up that ends before any stop: True; one that fails: its error, as before."""
    stop = asyncio.Event()

    async def start() -> None:
        await asyncio.sleep(0)

    async def fails() -> None:
        raise RuntimeError("cannot start")

    assert await start_unless_stopped(start(), stop) is True
    with pytest.raises(RuntimeError, match="cannot start"):
        await start_unless_stopped(fails(), stop)
