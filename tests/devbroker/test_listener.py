"""devbroker.listener: a listener asked for any port takes one below the kernel's ephemeral range, so that
no outgoing connection can hold it while the listener is stopped, and its restart binds it again."""

from __future__ import annotations

import asyncio
import socket

import pytest

from rocksidecar.devbroker import listener as listener_module
from rocksidecar.devbroker.listener import Listener


async def _no_requests(*args: object) -> None:
    raise AssertionError("no request expected")


async def test_any_port_is_below_the_ephemeral_range_and_kept_across_a_restart() -> None:
    listener = Listener(_no_requests)
    await listener.start()
    try:
        port = listener.port
        assert port in listener_module._own_ports()
        await listener.stop()
        await listener.start()
        assert listener.port == port
        _, writer = await asyncio.open_connection(listener.host, port)  # it listens there again
        writer.close()
    finally:
        await listener.stop()


async def test_a_taken_port_is_passed_over(monkeypatch: pytest.MonkeyPatch) -> None:
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    try:
        used = taken.getsockname()[1]
        tries = iter([used, used])  # the first candidates are taken: the next one is used
        monkeypatch.setattr(listener_module.random, "sample", lambda ports, k: [*tries, *ports[:k]])
        listener = Listener(_no_requests)
        await listener.start()
        try:
            assert listener.port != used and listener.port in listener_module._own_ports()
        finally:
            await listener.stop()
    finally:
        taken.close()
