"""One publish call for a batch of due messages: stamp their delivery times, call ``publish`` and sort
its outcomes into published and failed. ``publish`` is injected (the service sends through the producer
and spools what fails into the retry store); delay/ never imports the transport.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from rocksidecar.storage.status import StoredAt

from .message import DelayedMessage

# One outcome per message, in order: an exception means "not stored anywhere" (it stays scheduled and is
# tried again); SPOOLED, not published but stored for a later retry (the retry store's replay sends it);
# anything else means stored by a broker (a StoredAt says where).
Publish = Callable[[list[DelayedMessage]], Awaitable[Sequence[object]]]


class Spooled:
    """The type of SPOOLED: the outcome of a message its publish could not store on a broker and that was
    kept for a later retry instead. Done here (recorded as sent), but not published: no lateness yet."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "SPOOLED"


SPOOLED = Spooled()


@dataclass(frozen=True, slots=True)
class Published:
    sent: list[tuple[bytes, DelayedMessage]]  # (due key, message as stored): published or SPOOLED
    sent_to: list[StoredAt | None]  # where each of ``sent`` was stored, when publish said so
    published: list[DelayedMessage]  # those of ``sent`` a broker stored (not SPOOLED into the retry store)
    failed: list[bytes]  # due keys
    first_error: BaseException | None
    done_at_ms: int  # when publish returned: "sent" time and lateness are measured to here


async def publish_batch(
    publish: Publish, batch: list[tuple[bytes, DelayedMessage]], now_ms: Callable[[], int]
) -> Published:
    """Publish ``batch`` (due key, message) once. A publish that raises, or answers with the wrong number
    of outcomes, fails every message of the batch."""
    started = now_ms()
    msgs = [msg.for_publish(started) for _, msg in batch]
    try:
        results: list[object] = list(await publish(msgs))
        if len(results) != len(msgs):
            raise RuntimeError(f"publish returned {len(results)} outcomes for {len(msgs)} messages")
    except Exception as exc:
        results = [exc] * len(msgs)
    sent: list[tuple[bytes, DelayedMessage]] = []
    sent_to: list[StoredAt | None] = []
    published: list[DelayedMessage] = []
    failed: list[bytes] = []
    first_error: BaseException | None = None
    for item, result in zip(batch, results, strict=True):
        if isinstance(result, BaseException):
            failed.append(item[0])
            first_error = first_error or result
        else:
            if result is not SPOOLED:
                published.append(item[1])
            sent.append(item)
            sent_to.append(result if isinstance(result, StoredAt) else None)
    return Published(sent, sent_to, published, failed, first_error, now_ms())
