"""Compile and run the probes of tools/java/ (ConsumeProbe.java: a Java producer / DefaultMQPushConsumer;
TxProbe.java: a TransactionMQProducer) against the RocketMQ 4.9.4 distribution, with the class path
real-broker.sh uses (Debian's netty, bcprov and zstd-jni stand in for jars a snapshot may lack)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

SOURCES = Path(__file__).resolve().parents[2] / "tools" / "java"
DIST = Path(os.environ.get("ROCKETMQ_DIST", "/tmp/rocketmq-dist"))
OPENS = [
    "--add-opens=java.base/java.nio=ALL-UNNAMED",
    "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED",
    "--add-opens=java.base/java.lang=ALL-UNNAMED",
]


def classpath() -> str:
    own = [str(p) for p in sorted((DIST / "lib").glob("*.jar")) if p.stat().st_size > 0]
    share = Path("/usr/share/java")
    netty = [
        str(p)
        for p in sorted(share.glob("netty-*.Final.jar"))
        if not any(x in p.name for x in ("macos", "epoll", "kqueue"))
    ]
    extra = [str(share / "bcprov.jar"), str(share / "zstd-jni.jar")]
    return ":".join([str(DIST / "conf"), *own, *netty, *extra])


@functools.cache
def compiled(main: str = "ConsumeProbe") -> str:
    if not shutil.which("javac") or not (DIST / "lib").is_dir():
        pytest.skip(f"needs javac and the RocketMQ distribution at {DIST}")
    out = tempfile.mkdtemp(prefix="rs-probe-")
    subprocess.run(
        ["javac", "-encoding", "UTF-8", "-cp", classpath(), "-d", out, str(SOURCES / f"{main}.java")],
        check=True,
    )
    return f"{out}:{classpath()}"


async def start(*args: str, main: str = "ConsumeProbe") -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        "java",
        "-Xmx256m",
        *OPENS,
        f"-Duser.home={tempfile.gettempdir()}/rs-probe-home",
        "-cp",
        compiled(main),
        main,
        *args,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )


async def stop(proc: asyncio.subprocess.Process) -> None:
    """End a probe that runs until stdin closes (``consume``, TxProbe): closing its stdin asks it to shut
    down; killed after 20 s."""
    if proc.stdin is not None:
        proc.stdin.close()
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(proc.wait(), 20)
    if proc.returncode is None:
        proc.kill()
        await proc.wait()


async def output(*args: str, main: str = "ConsumeProbe", timeout_s: float = 120) -> list[str]:
    """Run a probe to its end (it must exit 0 within ``timeout_s``); the lines it printed."""
    proc = await start(*args, main=main)
    out, _ = await asyncio.wait_for(proc.communicate(), timeout_s)
    assert proc.returncode == 0, out[-2000:]
    return out.decode().splitlines()


async def produce(namesrv: str, topic: str, n: int) -> dict[str, bytes]:
    """Send ``n`` messages from a Java DefaultMQProducer; their bodies by message id."""
    sent = {}
    for line in await output("produce", namesrv, topic, str(n)):
        if line.startswith("SENT "):
            _, msg_id, body = line.split(" ")
            sent[msg_id] = bytes.fromhex(body)
    assert len(sent) == n
    return sent
