"""``rocksidecar devbroker``: argument checks, and a real process that serves until SIGTERM."""

from __future__ import annotations

import asyncio
import signal
import socket
import sys
from pathlib import Path

import pytest

from rocksidecar.app.cli import main
from rocksidecar.rmq import BrokerApi, Message, RocketMQError, tls_context
from rocksidecar.rmq.namesrv import NameServerClient
from rocksidecar.rmq.pool import RemotingClient
from rocksidecar.rmq.producer import Producer, ProducerConfig
from tests.tls_certs import Certs


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
        (["--delay-scale", "-1"], "--delay-scale"),
        (["--delay-scale", "nan"], "--delay-scale"),
    ],
)
def test_bad_arguments_exit_2(args: list[str], words: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["devbroker", *args]) == 2
    assert words in capsys.readouterr().err


def test_bad_tls_arguments_exit_2(certs: Certs, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate")
    cert, key = str(certs.server_cert), str(certs.server_key)
    for args, words in (
        (["--tls-cert", cert], "--tls-cert and --tls-key go together"),
        (["--tls-key", key], "--tls-cert and --tls-key go together"),
        (["--tls-client-ca", str(certs.ca)], "--tls-client-ca needs --tls-cert"),
        (["--tls-cert", str(garbage), "--tls-key", key], "do not load"),
        (["--tls-cert", cert, "--tls-key", str(tmp_path / "missing.key")], "do not load"),
        (["--tls-cert", cert, "--tls-key", key, "--tls-client-ca", str(garbage)], "do not load"),
    ):
        assert main(["devbroker", *args]) == 2, args
        err = capsys.readouterr().err
        assert words in err and len(err.strip().splitlines()) == 1, err


def test_a_taken_port_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        args = ["devbroker", "--namesrv-port", port, "--broker-base-port", "0", "--admin-port", "0"]
        assert main(args) == 1
    assert "cannot start" in capsys.readouterr().err


async def start_devbroker(*args: str) -> tuple[asyncio.subprocess.Process, list[str]]:
    """A devbroker process on free ports, and what it printed up to "devbroker ready"."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "rocksidecar.app.cli", "devbroker",
        "--namesrv-port", "0", "--broker-base-port", "0", "--admin-port", "0", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdout is not None and proc.stderr is not None
    lines: list[str] = []
    async with asyncio.timeout(30):
        while not lines or lines[-1] != "devbroker ready":
            line = await proc.stdout.readline()
            assert line, f"devbroker exited early: {(await proc.stderr.read()).decode()}"
            lines.append(line.decode().strip())
    return proc, lines


async def test_serves_until_sigterm_then_exits_0() -> None:
    proc, lines = await start_devbroker("--brokers", "3")
    try:
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


async def test_tls_only_serves_a_tls_client_and_drops_a_plain_one(certs: Certs) -> None:
    """As a RocketMQ with tls.server.mode=enforcing and client auth required: a client with
    ROCKSIDECAR_TLS's context and a certificate sends and reads the route; a plain one, or one without a
    certificate, gets nothing."""
    proc, lines = await start_devbroker(
        "--tls-cert", str(certs.server_cert), "--tls-key", str(certs.server_key),
        "--tls-client-ca", str(certs.ca),
    )  # fmt: skip
    try:
        assert "devbroker TLS only: clients need ROCKSIDECAR_TLS=true" in lines
        namesrv = lines[0].removeprefix("devbroker name server ")
        tls = tls_context(str(certs.ca), str(certs.client_cert), str(certs.client_key))
        client = RemotingClient(tls=tls)
        producer = Producer(NameServerClient(client, namesrv), BrokerApi(client), ProducerConfig())
        try:
            result = await producer.send(Message("TlsTopic", b"over TLS"))
            assert result.msg_id
        finally:
            await producer.close()
            await client.close()
        for refused in (RemotingClient(connect_timeout_s=2), RemotingClient(tls=tls_context(str(certs.ca)))):
            try:
                with pytest.raises(RocketMQError):
                    await NameServerClient(refused, namesrv).get_route("TlsTopic")
            finally:
                await refused.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
