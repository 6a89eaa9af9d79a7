"""``rocksidecar devbroker``: argument checks, and a real process that serves until SIGTERM."""

from __future__ import annotations

import asyncio
import signal
import socket
import sys

import pytest

from rocksidecar.app.cli import main
from rocksidecar.rmq.namesrv import NameServerClient
from rocksidecar.rmq.pool import RemotingClient


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--brokers", "0"], "--brokers"),
        (["--queues", "0"], "--queues"),
        (["--broker-base-port", "65530", "--brokers", "2"], "ports"),
        (["--max-log-mb", "1"], "--max-log-mb"),
        (["--host", "no-such-host.invalid"], "--host"),
        (["--transaction-check-interval", "0"], "--transaction-check-interval"),
        (["--transaction-check-interval", "nan"], "--transaction-check-interval"),
    ],
)
def test_bad_arguments_exit_2(args: list[str], words: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["devbroker", *args]) == 2
    assert words in capsys.readouterr().err


def test_a_taken_port_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        args = ["devbroker", "--namesrv-port", port, "--broker-base-port", "0", "--admin-port", "0"]
        assert main(args) == 1
    assert "cannot start" in capsys.readouterr().err


async def test_serves_until_sigterm_then_exits_0() -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "rocksidecar.app.cli",
        "devbroker",
        "--namesrv-port",
        "0",
        "--broker-base-port",
        "0",
        "--admin-port",
        "0",
        "--brokers",
        "3",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert proc.stdout is not None
    lines: list[str] = []
    try:
        async with asyncio.timeout(30):
            while not lines or lines[-1] != "devbroker ready":
                line = await proc.stdout.readline()
                assert line, f"devbroker exited early: {(await proc.stderr.read()).decode()}"  # type: ignore[union-attr]
                lines.append(line.decode().strip())
        namesrv = lines[0].removeprefix("devbroker name server ")
        assert [ln.split()[1] for ln in lines[1:4]] == ["broker-a", "broker-b", "broker-c"]
        client = RemotingClient()
        route = await NameServerClient(client, namesrv).get_route("TBW102")
        await client.close()
        assert len(route.broker_datas) == 3
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
    assert out.decode().strip().endswith("devbroker stopped")
