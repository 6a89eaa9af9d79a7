"""Heartbeats on the presence topic: how the replicas tell a frozen replica from a live one.

The brokers' member list of the publishers' group (app.dmq.presence) drops a replica at once when its
connection closes, but a frozen one (SIGSTOP, a stalled node, a long GC pause) keeps its connections
open and stays listed until the broker's channel expiry, 120 s without a heartbeat. So every replica also
sends a beat to the presence topic every ``interval_s`` and reads everyone's beats (a broadcasting
consumer that starts at the topic's end): a replica whose last beat is older than ``timeout_ms`` is not
live. A replica also needs its own beat read back to count itself live, so one that was frozen does not
publish its share again before it has heard about the present (README "Rock-DMQ replicas").

A beat is ``{"v": 1, "name": <instance>, "at": <epoch ms>}`` with ``DMQ_OP=BEAT``. Freshness compares the
sender's clock with the reader's (the replicas' clocks must agree to well within ``timeout_ms``, as NTP
keeps them); a beat from the future counts as sent now, also one in the future because the local clock
was stepped back after it was heard (its age then counts from the first reading after the step, which the
presence loop makes at least every interval). Anyone who may write the topic is hostile: a beat
that does not parse, or names a replica not listed, is skipped and counted.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass

import orjson

from . import envelope
from .defaults import INTERVAL_S, TIMEOUT_BEATS, presence_topic
from .inner import MAX_ID_CHARS

log = logging.getLogger(__name__)

__all__ = [
    "INTERVAL_S",
    "TIMEOUT_BEATS",
    "Beat",
    "BeatFormatError",
    "BeatSender",
    "Beats",
    "encode",
    "parse",
    "presence_topic",
]

OP_BEAT = "BEAT"
MAX_BODY = 1024
MAX_AT_MS = 1 << 53


class BeatFormatError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class Beat:
    name: str
    at_ms: int


def encode(name: str, at_ms: int) -> bytes:
    return orjson.dumps({"v": 1, "name": name, "at": at_ms})


def parse(body: bytes, props: Mapping[str, str]) -> Beat:
    """The beat a message of the presence topic carries. Raises BeatFormatError."""
    doc = envelope.load(body, props, OP_BEAT, MAX_BODY, BeatFormatError)
    name, at = doc.get("name"), doc.get("at")
    if not isinstance(name, str) or not 0 < len(name) <= MAX_ID_CHARS:
        raise BeatFormatError("beat needs a 'name'")
    if type(at) is not int or not 0 <= at < MAX_AT_MS:
        raise BeatFormatError("beat needs an integer 'at' (epoch ms)")
    return Beat(name, at)


class Beats:
    """The last beat heard from each listed replica, and which of them are fresh now."""

    def __init__(
        self,
        names: Collection[str],
        timeout_ms: int,
        *,
        clock_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
    ) -> None:
        self._names = frozenset(names)
        self.timeout_ms = timeout_ms
        self._clock_ms = clock_ms
        self._last: dict[str, int] = {}
        self._future_since: tuple[int, int] | None = None  # silent's since_ms in the future, and its reading

    def heard(self, beat: Beat) -> bool:
        """Note ``beat``; False (ignored) when it names a replica that is not listed."""
        if beat.name not in self._names:
            return False
        now = self._clock_ms()
        at = min(beat.at_ms, now)  # a clock ahead of ours: sent now, not later
        last = self._last_by(beat.name, now)
        if last is None or at > last:
            self._last[beat.name] = at
        return True

    def _last_by(self, name: str, now: int) -> int | None:
        """The last beat heard from ``name``, by the clock reading ``now``. A beat from the future counts
        as sent now, also when it is in the future because this clock was stepped back since it was
        heard: its age counts from the first reading after the step, as stored (kept so, it would look
        fresh for the size of the step, and a beat heard after it would look older and be ignored)."""
        last = self._last.get(name)
        if last is not None and last > now:
            self._last[name] = last = now
        return last

    def now_ms(self) -> int:
        return self._clock_ms()

    def fresh(self, name: str) -> bool:
        now = self._clock_ms()
        last = self._last_by(name, now)
        return last is not None and now - last <= self.timeout_ms

    def age_ms(self, name: str) -> int | None:
        now = self._clock_ms()
        last = self._last_by(name, now)
        return None if last is None else now - last

    def next_stale_ms(self) -> int | None:
        """When the first beat that is fresh now goes stale (None: none is fresh)."""
        now = self._clock_ms()
        lasts = [self._last_by(name, now) for name in list(self._last)]
        ends = [
            last + self.timeout_ms + 1 for last in lasts if last is not None and now - last <= self.timeout_ms
        ]
        return min(ends, default=None)

    def silent(self, name: str, since_ms: int) -> bool:
        """Whether nothing was heard from ``name`` for longer than the timeout, counting from its last
        beat heard or from ``since_ms``, whichever is later (``since_ms``: when the silence may start
        counting, say a start or the end of a catch-up; one in the future, read before this clock was
        stepped back, counts from the first reading after the step, as a beat does)."""
        now = self._clock_ms()
        since = since_ms
        if since > now:  # counts from the first reading that found it in the future, as a beat does
            if self._future_since is None or self._future_since[0] != since:
                self._future_since = (since, now)
            since = self._future_since[1]
        last = self._last_by(name, now)
        return now - (since if last is None else max(last, since)) > self.timeout_ms

    def last_ms(self, name: str) -> int | None:
        """The send time of the last beat heard from ``name`` (None: none yet)."""
        return self._last.get(name)


class BeatSender:
    """Starts each beat's send without waiting for the broker's answer, so beats leave one interval
    apart, not one interval after a slow send returned: in bursts the beats were up to 3 s apart and
    the others took the sender for frozen (bench.dmq_copies). At most ``max_in_flight`` sends at once:
    a replica whose brokers stopped answering goes silent, as it should."""

    def __init__(self, send: Callable[[], Awaitable[object]], max_in_flight: int = TIMEOUT_BEATS) -> None:
        self._send = send
        self._max = max_in_flight
        self._sends: set[asyncio.Future[object]] = set()
        self.skipped = 0  # beats not sent: max_in_flight sends were outstanding

    def beat(self) -> bool:
        """Start a send; False (skipped) while max_in_flight are outstanding."""
        if len(self._sends) >= self._max:
            self.skipped += 1
            return False
        send = asyncio.ensure_future(self._send())
        self._sends.add(send)
        send.add_done_callback(self._sent)
        return True

    def _sent(self, send: asyncio.Future[object]) -> None:
        self._sends.discard(send)
        if not send.cancelled() and (exc := send.exception()) is not None:
            log.debug("beat not sent: %s", exc)  # the others see the silence; nothing else to do

    async def close(self) -> None:
        for send in list(self._sends):
            send.cancel()
        await asyncio.gather(*self._sends, return_exceptions=True)
