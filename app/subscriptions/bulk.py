"""Push a batch of one queue's messages to the app in one POST, as Dapr's bulk subscribe does, and
turn its per-entry statuses into per-message consume statuses.

The body is Dapr's bulk envelope (``id``, ``type``, ``topic``, ``pubsubname``, ``metadata``,
``entries``), each entry a structured CloudEvent with its ``entryId`` (the queue offset, unique within
the POST). The app answers ``{"statuses": [{"entryId": ..., "status": "SUCCESS" | "RETRY" | "DROP"}]}``:
SUCCESS is done, RETRY goes back to the broker like a failed single delivery, DROP goes straight to the
group's DLQ (not lost: Dapr drops it, we keep it where an operator can look). An entry the answer does
not name, or an unknown status, counts as RETRY (Dapr's rule). Non-2xx: 429/503 wait (Retry-After)
and post the whole batch again; any other status, a timeout or no answer fails every entry.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from functools import partial

import orjson

from rocksidecar.rmq.consumer.config import ConsumeStatus
from rocksidecar.rmq.consumer.process_queue import ProcessQueue
from rocksidecar.rmq.message import MessageExt, MessageQueue

from ..http_client import PostError
from ..tracing import msgtrace, spans
from .cloudevents import structured_event
from .push import LATER_STATUSES, HttpPush
from .spec import SubscriptionSpec
from .withdraw import Withdrawn, log_if_dead

BULK_EVENT_TYPE = "com.dapr.event.sent.bulk"  # Dapr's DefaultBulkEventType
CONTENT_TYPE = "application/json"
ENTRY_CONTENT_TYPE = "application/cloudevents+json"
_HEADERS = {"content-type": CONTENT_TYPE}
_STATUSES = {
    "SUCCESS": ConsumeStatus.SUCCESS,
    "RETRY": ConsumeStatus.RECONSUME_LATER,
    "DROP": ConsumeStatus.DEAD_LETTER,
}
_OUTCOMES = {
    ConsumeStatus.SUCCESS: "ok",
    ConsumeStatus.RECONSUME_LATER: "failed",
    ConsumeStatus.DEAD_LETTER: "dropped",
}


def envelope(spec: SubscriptionSpec, msgs: Sequence[MessageExt], mq: MessageQueue) -> bytes:
    entries = [_entry(m, mq, spec.group) for m in msgs]
    try:
        return _document(spec, mq, entries)
    except orjson.JSONEncodeError:
        pass
    # One event could not be written: JSON data nested deeper than orjson writes (254 levels, where its
    # loads takes 1024: any producer can send that). Raised here it failed the whole batch before the
    # POST, every time: its neighbours were sent back unseen until the DLQ. Only such an entry goes as
    # the bytes it is (data_base64), as if it were not JSON; found by writing each alone, at the same
    # depth. The slow way only after a failure: the hot path writes the envelope once.
    for i, msg in enumerate(msgs):
        try:
            _document(spec, mq, entries[i : i + 1])
        except orjson.JSONEncodeError:
            entries[i] = _entry(msg, mq, spec.group, as_bytes=True)
    # an entry as bytes holds only strings strictly decoded and base64: it cannot fail to be written
    return _document(spec, mq, entries)


def _entry(msg: MessageExt, mq: MessageQueue, group: str, *, as_bytes: bool = False) -> dict[str, object]:
    return {
        "entryId": str(msg.queue_offset),
        "event": structured_event(msg, mq, group, as_bytes=as_bytes),
        "contentType": ENTRY_CONTENT_TYPE,
        "metadata": {},
    }


def _document(spec: SubscriptionSpec, mq: MessageQueue, entries: list[dict[str, object]]) -> bytes:
    return orjson.dumps(
        {
            "id": str(uuid.uuid4()),
            "type": BULK_EVENT_TYPE,
            "topic": spec.topic,
            "pubsubname": spec.name,
            "metadata": {
                "rocketmqgroup": spec.group,
                "rocketmqbroker": mq.broker_name,
                "rocketmqqueue": str(mq.queue_id),
            },
            "entries": entries,
        }
    )


def statuses_from(body: bytes, msgs: Sequence[MessageExt]) -> list[ConsumeStatus]:
    """Per message, from the app's answer; what it does not say (or says wrongly) is RETRY, and so is an
    entry it names twice with different statuses (which one it meant cannot be known)."""
    try:
        answer = orjson.loads(body) if body else {}
    except orjson.JSONDecodeError:
        answer = {}
    named: dict[str, ConsumeStatus] = {}
    items = answer.get("statuses") if isinstance(answer, dict) else None
    for item in items if isinstance(items, list) else ():
        if isinstance(item, dict) and isinstance(entry := item.get("entryId"), str):
            status = _status(item.get("status"))
            named[entry] = status if named.get(entry, status) is status else ConsumeStatus.RECONSUME_LATER
    return [named.get(str(m.queue_offset), ConsumeStatus.RECONSUME_LATER) for m in msgs]


def _status(said: object) -> ConsumeStatus:
    """A status the app said, in any ASCII case (a long s, U+017F, upper-cases to S: not one); else RETRY."""
    if not (isinstance(said, str) and said.isascii()):
        return ConsumeStatus.RECONSUME_LATER
    return _STATUSES.get(said.upper(), ConsumeStatus.RECONSUME_LATER)


class BulkPush(HttpPush):
    """The PushConsumer's listener of one bulk subscription (consume_batch_size = bulk_max_messages)."""

    async def __call__(  # type: ignore[override]  # per message, which the consumer accepts
        self, msgs: Sequence[MessageExt], mq: MessageQueue
    ) -> list[ConsumeStatus]:
        pq = self.queue_of(mq)
        try:
            if not spans.ON and msgtrace.DISPATCHER is None:  # tracing off: this one check per batch
                return await self._post(msgs, mq, pq)
            started = msgtrace.now_ms()
            if spans.ON:
                statuses = list(
                    await spans.process_batch(
                        msgs, self.spec.group, self.spec.endpoint, self._post(msgs, mq, pq)
                    )
                )
            else:
                statuses = await self._post(msgs, mq, pq)
        except Withdrawn:
            return [self.withdrawn(pq, msgs[0])] * len(msgs)
        msgtrace.consumed_all(msgs, self.spec.group, started, [s is ConsumeStatus.SUCCESS for s in statuses])
        return statuses

    async def _post(
        self, msgs: Sequence[MessageExt], mq: MessageQueue, pq: ProcessQueue | None = None
    ) -> list[ConsumeStatus]:
        body = envelope(self.spec, msgs, mq)
        failed = [ConsumeStatus.RECONSUME_LATER] * len(msgs)
        while True:
            started = time.perf_counter()
            try:
                resp = await self._client.post(self.spec.endpoint, body, _HEADERS, self.spec.timeout_s)
            except PostError as exc:
                self._report("error", msgs, time.perf_counter() - started)
                self._log.no_answer(self.spec.name, str(exc), msgs[0].msg_id)
                return self._dead_letters(msgs, failed, pq)
            elapsed = time.perf_counter() - started
            if 200 <= resp.status < 300:
                statuses = statuses_from(resp.body, msgs)
                for msg, status in zip(msgs, statuses, strict=True):
                    self._on_delivery(self.spec.name, _OUTCOMES[status], elapsed, msg)
                return self._dead_letters(msgs, statuses, pq)
            self._log.answered(self.spec.name, resp.status, msgs[0].msg_id)
            if resp.status in LATER_STATUSES:
                self._report("later", msgs, elapsed)
                await self.later(resp.headers.get("retry-after"), pq)  # Withdrawn: not POSTed again
                continue
            self._report("failed", msgs, elapsed)
            return self._dead_letters(msgs, failed, pq)

    def _dead_letters(
        self, msgs: Sequence[MessageExt], statuses: list[ConsumeStatus], pq: ProcessQueue | None
    ) -> list[ConsumeStatus]:
        """Log the messages these statuses send to the group's DLQ: DROP, or a failure with no
        reconsume left; only where the consumer acts on them (HttpPush.acted_on)."""
        for msg, status in zip(msgs, statuses, strict=True):
            if status is ConsumeStatus.DEAD_LETTER:
                if self.acted_on(pq, msg):
                    self._log.moved_to_dlq(
                        self.spec.name, self.spec.group, msg.msg_id, "the app answered DROP"
                    )
            elif status is ConsumeStatus.RECONSUME_LATER:
                log_if_dead(self._log, self.spec, msg, "failed", partial(self.acted_on, pq, msg))
        return statuses

    def _report(self, outcome: str, msgs: Sequence[MessageExt], elapsed: float) -> None:
        for msg in msgs:  # the metrics count deliveries per message, bulk or not
            self._on_delivery(self.spec.name, outcome, elapsed, msg)
