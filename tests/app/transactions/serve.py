"""`rocksidecar serve` as a child process for the transaction tests (devbroker here, real 4.9.4 in
tests/realbroker): start it, SIGKILL it, start it again over the same data dir; the app's check
endpoint; begin and decide over HTTP."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import os
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import BinaryIO

import httpx

from bench.common import free_port

WAIT_S = 60.0
START_S = 120.0
EXE = str(Path(sys.executable).with_name("rocksidecar"))


def http_client() -> httpx.AsyncClient:
    """Idle connections are dropped after 1 s, before the server's keep-alive timeout (uvicorn's 5 s)
    closes them: a request sent on a connection the server is closing fails with ReadError."""
    return httpx.AsyncClient(timeout=30.0, limits=httpx.Limits(max_connections=40, keepalive_expiry=1.0))


class Serve:
    """`rocksidecar serve` as a child process on free ports, over one data dir across restarts."""

    def __init__(self, namesrv: str, data_dir: Path, **settings: str) -> None:
        self.url = f"http://127.0.0.1:{free_port()}"
        self.env = {
            **os.environ,
            "ROCKSIDECAR_NAMESRV": namesrv,
            "ROCKSIDECAR_HTTP_ADDR": self.url.removeprefix("http://"),
            "ROCKSIDECAR_GRPC_ADDR": f"127.0.0.1:{free_port()}",
            "ROCKSIDECAR_DATA_DIR": str(data_dir),
            "ROCKSIDECAR_LOG_LEVEL": "warning",
            **{f"ROCKSIDECAR_{k}": v for k, v in settings.items()},
        }
        self.log = data_dir.parent / "sidecar.log"
        self.proc: asyncio.subprocess.Process | None = None

    async def start(self, http: httpx.AsyncClient) -> None:
        """Start it and wait for /healthz (imports alone took 20 s on the shared 2-core machine)."""
        with self._open_log() as out:
            self.proc = await asyncio.create_subprocess_exec(
                EXE, "serve", env=self.env, stdout=out, stderr=out
            )
        async with asyncio.timeout(START_S):
            while True:  # a child process: nothing to await but its answer
                with contextlib.suppress(httpx.HTTPError):
                    if (await http.get(f"{self.url}/healthz")).status_code == 200:
                        return
                assert self.proc.returncode is None, self.log.read_text()[-3000:]
                await asyncio.sleep(0.1)

    def _open_log(self) -> BinaryIO:
        return open(self.log, "ab")  # the child's output, read when a start fails

    async def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        assert await self.proc.wait() == -signal.SIGKILL

    async def stop(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.terminate()
            await self.proc.wait()


@contextlib.asynccontextmanager
async def running(serve: Serve, http: httpx.AsyncClient) -> AsyncIterator[Serve]:
    await serve.start(http)
    try:
        yield serve
    finally:
        await serve.stop()


def check_endpoint(answers: dict[str, str]) -> Callable[[bytes], bytes]:
    """The app's check endpoint: the state the test set for the transaction, else UNKNOWN."""
    return lambda body: json.dumps({"state": answers.get(json.loads(body)["id"], "UNKNOWN")}).encode()


async def until(done: Callable[[], bool | Awaitable[bool]], what: str, timeout_s: float = WAIT_S) -> None:
    """Poll a broker's or another process's state (neither has an event for it) until ``done``."""
    for _ in range(int(timeout_s / 0.05)):
        answer = done()
        if await answer if inspect.isawaitable(answer) else answer:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


async def begin(http: httpx.AsyncClient, url: str, topic: str, body: str) -> str:
    r = await http.post(f"{url}/v1/transactions", json={"topic": topic, "body": body, "transactionKey": body})
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


async def decide(http: httpx.AsyncClient, url: str, tx_id: str, how: str) -> dict[str, object]:
    r = await http.post(f"{url}/v1/transactions/{tx_id}:{how}")
    assert r.status_code == 200, r.text
    return dict(r.json())
