"""The transport under uvicorn's protocol (app.api.http_protocol): one write per answer (issue 18)."""

from __future__ import annotations

import asyncio
from typing import Any

from rocksidecar.app.api.http_protocol import _LingeringTransport


class _Transport:
    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.events: list[str] = []
        self.closing = False

    def write(self, data: bytes) -> None:
        self.writes.append(data)
        self.events.append("write")

    def is_closing(self) -> bool:
        return self.closing

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        self.events.append("eof")

    def resume_reading(self) -> None:
        self.events.append("resume")

    def close(self) -> None:
        self.closing = True
        self.events.append("close")


class _Protocol:
    def __init__(self, loop: asyncio.AbstractEventLoop, arriving: bool = False) -> None:
        self.loop = loop
        self.arriving = arriving

    def body_arriving(self) -> bool:
        return self.arriving


async def test_a_head_and_body_written_in_one_turn_go_out_as_one_write() -> None:
    real = _Transport()
    t = _LingeringTransport(real, _Protocol(asyncio.get_running_loop()))  # type: ignore[arg-type]
    t.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n")
    t.write(b"{}")
    assert real.writes == []  # held until the loop's next turn
    await asyncio.sleep(0)  # one turn of the loop: what the held write waits for
    assert real.writes == [b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}"]
    t.write(b"next")
    await asyncio.sleep(0)
    assert real.writes[1:] == [b"next"]


async def test_held_writes_go_out_before_a_close_or_half_close() -> None:
    loop = asyncio.get_running_loop()
    real = _Transport()
    t: Any = _LingeringTransport(real, _Protocol(loop))  # type: ignore[arg-type]
    t.write(b"answer")
    t.close()
    assert real.events == ["write", "close"] and real.writes == [b"answer"]
    await asyncio.sleep(0)
    assert real.writes == [b"answer"]  # not twice
    lingering = _Transport()
    t = _LingeringTransport(lingering, _Protocol(loop, arriving=True))  # type: ignore[arg-type]
    t.write(b"413")
    t.close()
    assert lingering.events[:2] == ["write", "eof"]


async def test_an_answer_written_now_goes_out_at_once_after_what_is_held() -> None:
    real = _Transport()
    t = _LingeringTransport(real, _Protocol(asyncio.get_running_loop()))  # type: ignore[arg-type]
    t.write_now(b"alone")
    assert real.writes == [b"alone"]  # no wait for the loop's next turn
    t.write(b"held ")
    t.write_now(b"after")
    assert real.writes == [b"alone", b"held after"]  # in order, one write
    await asyncio.sleep(0)  # the held write's scheduled flush finds nothing left
    assert real.writes == [b"alone", b"held after"]
    real.closing = True
    t.write_now(b"late")
    assert real.writes == [b"alone", b"held after"]
