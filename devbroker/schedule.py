"""Delay levels as 4.9.4's ScheduleMessageService runs them, for the broker's own CONSUMER_SEND_MSG_BACK
and for a producer's message with a DELAY property (send.py).

A message with delay level L (at most 18) is stored in SCHEDULE_TOPIC_XXXX, queue L - 1, with DELAY=L,
REAL_TOPIC and REAL_QID among its properties (CommitLog.asyncPutMessage). Once level L's delay has passed
since its store time it is stored again in REAL_TOPIC/REAL_QID with the same properties: messageTimeup
copies the stored properties string, so DELAY, REAL_TOPIC and REAL_QID stay on the delivered copy. Each
level delivers in store order, as Java's one timer task per level does.

``scale`` multiplies RocketMQ's messageDelayLevel table (1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m
30m 1h 2h): 1.0 is the real table (the ``rocksidecar devbroker`` command), 0 delivers within the request
that scheduled it (DevCluster's default, so tests do not wait), 0.01 a hundredth of each delay. Due
messages move on a timer of the running event loop, or when ``deliver_due`` is called (a test with an
injected ``now_ms`` clock). With a path the delivered offsets are saved on flush in the layout of Java's
delayOffset.json, so a restart neither loses nor repeats a scheduled message.

Not modelled: SCHEDULE_TOPIC_XXXX is not in the topic table (it cannot be pulled or routed)."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
from collections.abc import Callable
from pathlib import Path

from rocksidecar.rmq.message_codec import decode_stored

from .jsonfile import read_json, write_json
from .store import Appended, MessageStore, NewMessage
from .transactions import REAL_QID, REAL_TOPIC

log = logging.getLogger(__name__)

SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"  # TopicValidator.RMQ_SYS_SCHEDULE_TOPIC
DELAY_LEVELS_S = (1, 5, 10, 30, 60, 120, 180, 240, 300, 360, 420, 480, 540, 600, 1200, 1800, 3600, 7200)
MAX_DELAY_LEVEL = len(DELAY_LEVELS_S)
RETRY_AFTER_FAILURE_S = 1.0  # a delivery that failed (e.g. a full disk) is tried again after this


def check_scale(scale: float) -> float:
    """Raises:
    ValueError: a negative or non-finite scale.
    """
    if not (math.isfinite(scale) and scale >= 0):
        raise ValueError(f"delay_scale must be a finite number >= 0, not {scale!r}")
    return scale


class Schedule:
    def __init__(
        self,
        store: MessageStore,
        *,
        now_ms: Callable[[], int],
        scale: float = 0.0,
        path: Path | None = None,
    ) -> None:
        self._store = store
        self._now_ms = now_ms
        self.delays_ms = tuple(round(s * 1000 * check_scale(scale)) for s in DELAY_LEVELS_S)
        self._path = path
        self._delivered: dict[int, int] = {}  # level -> the first offset of its queue not delivered yet
        self._dirty = False
        if path is not None:
            for level, offset in ((read_json(path) or {}).get("offsetTable") or {}).items():
                self._delivered[int(level)] = int(offset)
        self._timer: asyncio.TimerHandle | None = None
        self._running = False

    def put(self, message: NewMessage, level: int) -> Appended:
        """Store ``message`` (its properties already carrying DELAY, REAL_TOPIC and REAL_QID) in level
        ``level``'s queue (1 <= level <= 18); at scale 0 it is delivered before this returns."""
        (appended,) = self._store.put(SCHEDULE_TOPIC, level - 1, [message])
        self.deliver_due()
        return appended

    def deliver_due(self) -> int:
        """Move every message whose delay has passed to its real topic; returns how many moved."""
        now, moved = self._now_ms(), 0
        store = self._store
        for level, delay_ms in enumerate(self.delays_ms, start=1):
            queue_id = level - 1
            end = store.max_offset(SCHEDULE_TOPIC, queue_id)
            at = self._first_waiting(level)
            while at < end:
                entry = store.entry(SCHEDULE_TOPIC, queue_id, at)
                if entry is None or entry[0] + delay_ms > now:
                    break
                self._deliver(store.read(entry[1], entry[2]))
                at += 1
                moved += 1
            if at != self._delivered.get(level, 0):
                self._delivered[level] = at
                self._dirty = True
        self._arm()
        return moved

    def next_due_ms(self) -> int | None:
        """When the next scheduled message falls due (the ``now_ms`` clock), or None when none waits."""
        due: int | None = None
        for level, delay_ms in enumerate(self.delays_ms, start=1):
            entry = self._store.entry(SCHEDULE_TOPIC, level - 1, self._first_waiting(level))
            if entry is not None and (due is None or entry[0] + delay_ms < due):
                due = entry[0] + delay_ms
        return due

    def start(self) -> None:
        """Deliver on timers from now on (the broker started): what fell due meanwhile goes at once."""
        self._running = True
        self.deliver_due()

    def stop(self) -> None:
        """No more timers (the broker stopped): the armed one cancelled, none armed again; scheduled
        messages wait for start()."""
        self._cancel()
        self._running = False

    def flush(self) -> None:
        if self._path is None or not self._dirty:
            return
        write_json(self._path, {"offsetTable": {str(k): v for k, v in sorted(self._delivered.items())}})
        self._dirty = False

    # internals ----------------------------------------------------------------------------------
    def _first_waiting(self, level: int) -> int:
        """The offset of level ``level``'s first message not delivered yet (past what retention took)."""
        return max(self._delivered.get(level, 0), self._store.min_offset(SCHEDULE_TOPIC, level - 1))

    def _deliver(self, record: bytes) -> None:
        msg, _ = decode_stored(record, inflate=False)
        props = msg.properties
        try:
            topic, queue_id = props["REAL_TOPIC"], int(props["REAL_QID"])
        except (KeyError, ValueError):  # Java logs such a message and skips it
            log.error("scheduled message %s lacks REAL_TOPIC/REAL_QID; dropped", msg.offset_msg_id)
            return
        self._store.put(topic, queue_id, [NewMessage.again(msg, props)])

    def _arm(self) -> None:
        self._cancel()
        if not self._running:
            return
        due = self.next_due_ms()
        if due is not None:
            delay_s = max(0.0, (due - self._now_ms()) / 1000)
            self._timer = asyncio.get_running_loop().call_later(delay_s, self._fire)

    def _fire(self) -> None:
        self._timer = None
        try:
            self.deliver_due()
        except Exception:  # e.g. OSError from a full disk: keep the messages, try again later
            log.exception("delivering scheduled messages failed")
            if self._running:
                self._timer = asyncio.get_running_loop().call_later(RETRY_AFTER_FAILURE_S, self._fire)

    def _cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


def scheduled(message: NewMessage, topic: str, queue_id: int, level: int) -> NewMessage:
    """The message as CommitLog puts it in SCHEDULE_TOPIC_XXXX: DELAY (capped), REAL_TOPIC and REAL_QID
    set, replacing any the sender put there (putProperty overwrites)."""
    drop = ("DELAY\x01", f"{REAL_TOPIC}\x01", f"{REAL_QID}\x01")
    items = [p for p in message.properties.split("\x02") if p and not p.startswith(drop)]
    items += [f"DELAY\x01{level}", f"{REAL_TOPIC}\x01{topic}", f"{REAL_QID}\x01{queue_id}"]
    return dataclasses.replace(message, properties="\x02".join(items))
