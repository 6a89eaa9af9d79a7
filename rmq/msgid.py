"""UNIQ_KEY ids in the layout of Java's MessageClientIDSetter, so ids look normal in RocketMQ tools.

``ip(4|16) pid(2) magic(4) | ms-since-start-of-month(4) counter(2)``, uppercase hex: 32 characters
for an IPv4 host. The first part is fixed per process; the rest changes per id.
"""

from __future__ import annotations

import ipaddress
import itertools
import os
import random
import socket
import struct
import time
from collections.abc import Callable

from .clock import wall_ms


def local_ip() -> bytes:
    """This host's address as the Java client reports it; loopback when nothing better is known."""
    try:
        addr = ipaddress.ip_address(socket.gethostbyname(socket.gethostname()))
    except (OSError, ValueError):
        addr = ipaddress.ip_address("127.0.0.1")
    return addr.packed


def _month_bounds_ms(now_ms: int) -> tuple[int, int]:
    """This month's first local midnight and the next month's, by the zone's rules on those days (Java's
    Calendar in setStartTime): the offset in force now was wrong by an hour for either in a month with a
    DST change, so ids read an hour off in Java's getNearlyTimeFromID, and the time part stepped back an
    hour (repeating ids) at a month end met in winter time."""
    now = time.localtime(now_ms / 1000)
    year, month = now.tm_year, now.tm_mon
    after = (year + 1, 1) if month == 12 else (year, month + 1)
    start, end = (time.mktime((y, m, 1, 0, 0, 0, 0, 0, -1)) for y, m in ((year, month), after))
    return int(start * 1000), int(end * 1000)


class UniqIdGenerator:
    __slots__ = (
        "_counter",
        "_month_end",
        "_month_start",
        "_now_ms",
        "_prefix",
        "_stamp",
        "_stamp_ms",
        "_time_ns",
    )

    def __init__(
        self,
        ip: bytes | None = None,
        pid: int | None = None,
        magic: int | None = None,
        now_ms: Callable[[], int] = wall_ms,
    ) -> None:
        ip = ip if ip is not None else local_ip()
        pid = os.getpid() if pid is None else pid
        magic = random.getrandbits(31) if magic is None else magic
        self._prefix = (ip + struct.pack(">Hi", pid & 0xFFFF, magic)).hex().upper()
        self._counter = itertools.count(random.getrandbits(15))
        self._now_ms = now_ms
        # The wall clock itself when it is the default: next_id reads time_ns (C) rather than calling
        # wall_ms (Python), once a message (issue 32).
        self._time_ns = time.time_ns if now_ms is wall_ms else None
        self._month_start = self._month_end = 0
        # prefix + time part of the last millisecond seen: a batch's ids share it, formatted once
        self._stamp_ms = -1
        self._stamp = ""

    def next_id(self) -> str:
        time_ns = self._time_ns
        now = time_ns() // 1_000_000 if time_ns is not None else self._now_ms()
        if now != self._stamp_ms:
            self._restamp(now)
        n = next(self._counter) & 0xFFFF
        return self._stamp + _HEX2[n >> 8] + _HEX2[n & 0xFF]  # half the time of f"{n:04X}"

    def next_ids(self, count: int) -> list[str]:
        """``count`` fresh ids at once (a batch's), in ascending order: the clock read once, no call per id.

        A batch's ids share one stamp, so their 16-bit counter alone orders them, and the retry store
        (due:count:type:id) and the delay store (due:id) replay a batch due at one millisecond in id
        order: a counter that wrapped inside the batch put its tail first. Such a batch starts at the
        counter's next 0 instead, skipping the values up to it. Still unique: one stamp's ids repeat only
        if the counter values drawn under it span 65 536, and a skip (fewer values than the batch, once a
        wrap) leaves that as far out of reach as before (some 64 000 ids in one millisecond). Every value
        is drawn from the shared counter, none computed, so a concurrent next_id never gets one of them.
        A batch of more than 65 536 ids cannot ascend (nor be unique) in one millisecond either way."""
        if count <= 0:
            return []
        now = self._now_ms()
        if now != self._stamp_ms:
            self._restamp(now)
        stamp, hex2, counter = self._stamp, _HEX2, self._counter
        first = next(counter)
        if (low := first & 0xFFFF) + count > 0x10000:
            first = next(itertools.islice(counter, 0xFFFF - low, None))  # the value whose low 16 bits are 0
        ids = [stamp + hex2[(first >> 8) & 0xFF] + hex2[first & 0xFF]]
        # the rest straight from the counter (a chain with the first cost about 10 ns an id)
        ids += [stamp + hex2[(n >> 8) & 0xFF] + hex2[n & 0xFF] for n in itertools.islice(counter, count - 1)]
        return ids

    def _restamp(self, now: int) -> None:
        if now >= self._month_end or now < self._month_start - 1000:
            self._month_start, self._month_end = _month_bounds_ms(now)
        diff = max(now - self._month_start, 0)  # a small backwards step (NTP) reads as 0, as in Java
        self._stamp_ms, self._stamp = now, self._prefix + f"{diff & 0xFFFFFFFF:08X}"


_HEX2 = [f"{i:02X}" for i in range(256)]
_default = UniqIdGenerator()
# A fresh UNIQ_KEY from this process's generator: its bound method itself, not a function calling it (a
# call less per id, one a message on the send paths).
new_uniq_id: Callable[[], str] = _default.next_id
new_uniq_ids: Callable[[int], list[str]] = _default.next_ids  # as many at once (a batch's)
