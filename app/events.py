"""The operator's log: one structured event per cause (broker isolated or recovered, route changed,
message spooled, replays, dead letters, late delayed messages, the configuration at start).

Events that can come in storms (a spool per message while a broker is down) are throttled per cause:
the first line is written at once, then one summary per window says how many more there were. Message
bodies are never logged.
"""

from __future__ import annotations

import logging
import re
import time
from collections import Counter
from collections.abc import Callable
from typing import Any, ClassVar

from rocksidecar.retry.dead_letter import DeadLetter
from rocksidecar.retry.record import RetryRecord

from .logs import MAX_CAUSES, Throttle
from .tracing.context import trace_fields

log = logging.getLogger("rocksidecar.events")

WINDOW_S = 10.0
# past MAX_CAUSES causes held at once, an event's new causes share this one: keys hold client-chosen text
# (a topic), and a storm over distinct topics would otherwise be a line and an entry per topic
TOO_MANY_CAUSES = "(too many causes)"
_NUMBERS = re.compile(r"\d+")


def cause(error: str) -> str:
    """An error text without its numbers (ports, latencies, counts), so one cause is one key."""
    return _NUMBERS.sub("#", error)[:160]


class OpsEvents:
    """The sidecar's structured events. ``flush()`` writes the summaries of finished windows; the
    service calls it every ``window_s``."""

    default_logger: ClassVar[logging.Logger] = log  # a subclass for other events names its own

    def __init__(
        self,
        *,
        window_s: float = WINDOW_S,
        clock: Callable[[], float] = time.monotonic,
        late_threshold_s: float = 1.0,
        logger: logging.Logger | None = None,
    ) -> None:
        self.window_s = window_s
        self.late_threshold_s = late_threshold_s
        self._log = logger if logger is not None else self.default_logger
        self._throttle = Throttle(window_s, clock)
        self._clock = clock
        self._replays: Counter[str] = Counter()
        self._replays_since = clock()
        self._keys: dict[tuple[object, ...], tuple[int, str, dict[str, Any]]] = {}

    # --- one line per cause ------------------------------------------------------------------------
    def config(self, settings: dict[str, Any]) -> None:
        """The settings at start, as ``config.redacted`` gives them (no secrets)."""
        self._log.info("configuration", extra={"event": "config", "settings": settings})

    def started(self, *, ready: bool, details: dict[str, Any], addresses: dict[str, str]) -> None:
        if ready:
            self._log.info("rocksidecar ready", extra={"event": "started", "ready": True, **addresses})
            return
        why = []
        if details.get("nameServer") != "reachable":
            why.append(f"name server(s) {addresses.get('namesrv')} unreachable")
        elif details.get("reason"):
            why.append(str(details["reason"]))  # app.readiness says why a send cannot succeed now
        if details.get("store") != "ok" and not details.get("reason"):
            why.append(f"store {details.get('store')}")
        self._log.warning(
            "rocksidecar started but NOT ready (%s): /readyz answers 503; messages are accepted and "
            "spooled to the local store until RocketMQ is reachable",
            "; ".join(why) or "RocketMQ unreachable",
            extra={"event": "started", "ready": False, "reasons": why, **addresses},
        )

    def broker_state(self, broker: str, state: str, reason: str, backoff_s: float) -> None:
        level = logging.WARNING if state == "isolated" else logging.INFO
        what = {
            "isolated": "broker isolated",
            "backoff": "broker slow, backing off",
            "recovered": "broker recovered",
        }.get(state, f"broker {state}")
        self._log.log(
            level,
            "%s: %s (%s)",
            what,
            broker,
            reason,
            extra={
                "event": f"broker_{state}",
                "broker": broker,
                "reason": reason,
                "backoff_s": round(backoff_s, 3),
            },
        )

    def route_changed(self, topic: str, before: tuple[str, ...] | None, after: tuple[str, ...]) -> None:
        name = "route_appeared" if before is None else "route_changed"
        self._log.info(
            "route of %s %s: brokers %s",
            topic,
            "appeared" if before is None else "changed",
            ",".join(after) or "(none)",
            extra={
                "event": name,
                "topic": topic,
                "brokers_before": list(before) if before is not None else None,
                "brokers": list(after),
            },
        )

    # --- storms: throttled per cause ---------------------------------------------------------------
    def spooled(self, record: RetryRecord) -> None:
        """A message that could not be sent was synced to the retry store."""
        self._throttled(
            logging.WARNING,
            "message_spooled",
            {"topic": record.topic, "error_kind": cause(record.last_error)},
            "message %s to %s spooled for retry: %s",
            (record.id, record.topic, record.last_error),
            {"id": record.id, "error": record.last_error, **trace_fields(record.properties)},
        )

    def dead_lettered(self, letter: DeadLetter) -> None:
        record = letter.record
        topic = record.topic if record is not None else "?"
        self._throttled(
            logging.ERROR,
            "message_dead_lettered",
            {"topic": topic, "reason_kind": cause(letter.reason)},
            "message %s to %s dead-lettered: %s",
            (letter.id, topic, letter.reason),
            {
                "id": letter.id,
                "type": record.type if record is not None else None,
                "attempts": record.retry_count if record is not None else None,
                "reason": letter.reason,
                **(trace_fields(record.properties) if record is not None else {}),
            },
        )

    def dead_letter_hook(self, notify: Callable[[DeadLetter], None]) -> Callable[[DeadLetter], None]:
        """The retry store's dead-letter hook: logged here (throttled per cause), then ``notify`` (the
        webhook; it does not log each itself). One for the sidecar and the dmq service."""

        def dead_lettered(letter: DeadLetter) -> None:
            self.dead_lettered(letter)
            notify(letter)

        return dead_lettered

    def delay_published(self, lateness_s: float) -> None:
        if lateness_s <= self.late_threshold_s:
            return
        self._throttled(
            logging.WARNING,
            "delay_late",
            {},
            "a delayed message was published %.3f s after its due time",
            (lateness_s,),
            {"lateness_s": round(lateness_s, 3), "threshold_s": self.late_threshold_s},
        )

    def replayed(self, outcome: str) -> None:
        """Counted; ``flush()`` writes one summary per window."""
        self._replays[outcome] += 1

    async def flush_round(self) -> None:
        """``flush()`` as a periodic round (rmq.periodic.Periodic runs coroutines)."""
        self.flush()

    def flush(self) -> None:
        """Summaries: replays of the last window, and how many lines each throttled cause held back."""
        now = self._clock()
        if self._replays and now - self._replays_since >= self.window_s:
            counts = dict(sorted(self._replays.items()))
            self._log.info(
                "replayed %d messages from the retry store in %.0f s: %s",
                sum(counts.values()),
                now - self._replays_since,
                ", ".join(f"{k} {v}" for k, v in counts.items()),
                extra={"event": "replayed", "outcomes": counts, "count": sum(counts.values())},
            )
            self._replays.clear()
            self._replays_since = now
        elif not self._replays:
            self._replays_since = now
        for key, suppressed in self._throttle.expired():
            level, event, key_fields = self._keys.pop(key)
            self._log.log(
                level,
                "%d more %s events of %s in the last %.0f s",
                suppressed,
                event,
                "other causes (too many to tell apart)" if TOO_MANY_CAUSES in key else "the same cause",
                self.window_s,
                extra={"event": event, "summary": True, "suppressed": suppressed, **key_fields},
            )
        for key in [k for k in self._keys if k not in self._throttle]:
            del self._keys[key]

    def _throttled(
        self,
        level: int,
        event: str,
        key_fields: dict[str, Any],
        message: str,
        args: tuple[object, ...],
        fields_: dict[str, Any],
    ) -> None:
        key: tuple[object, ...] = (event, *sorted(key_fields.items()))
        shared = key not in self._throttle and len(self._throttle) >= MAX_CAUSES
        if shared:
            key = (event, TOO_MANY_CAUSES)
        suppressed = self._throttle.allow(key)
        if suppressed is None:
            return
        self._keys[key] = (level, event, {"cause": TOO_MANY_CAUSES} if shared else key_fields)
        extra = {"event": event, **key_fields, **fields_}
        if shared:
            extra["cause"] = TOO_MANY_CAUSES  # its summary counts every cause past the cap
        if suppressed:
            extra["suppressed"] = suppressed
        self._log.log(level, message, *args, extra=extra)
