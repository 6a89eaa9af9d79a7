"""Adapters from the stores to the sidecar's view of a message: status by id, and cancel."""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

from rocksidecar.delay import CancelOutcome, DelayState, DelayStatus, DelayStore
from rocksidecar.retry import MessageStatus

from .sidecar import MessageState

T = TypeVar("T")


class StoreLookup(Generic[T]):
    """A store's ``get`` by id, seen as the API's MessageState (``view``)."""

    def __init__(self, get: Callable[[str], T | None]) -> None:
        self._get = get

    async def state(self, id: str) -> MessageState | None:
        found = self._get(id)
        return None if found is None else self.view(id, found)

    def view(self, id: str, found: T) -> MessageState:
        raise NotImplementedError


class RetryLookup(StoreLookup[MessageStatus]):
    """Where a spooled or dead-lettered message stands, from the retry store (its ``get``).

    ``forwarded`` (Rock-DMQ service mode: Forwarder.forwarded): (the app's topic, its due time) of an id
    whose inner message the sidecar forwarded. Such a message's record in the retry store is the inner
    message, on the inner topic: its status names the app's topic and deliverAt instead, as local mode's
    and its 202 SCHEDULED do."""

    def __init__(
        self,
        get: Callable[[str], MessageStatus | None],
        forwarded: Callable[[str], tuple[str, int] | None] | None = None,
    ) -> None:
        super().__init__(get)
        self._forwarded = forwarded

    def view(self, id: str, found: MessageStatus) -> MessageState:
        topic, deliver_at = found.topic, None
        if self._forwarded is not None and (fwd := self._forwarded(id)) is not None:
            topic, deliver_at = fwd
        return MessageState(
            id=id,
            status=found.state,  # the stores report in the API's vocabulary (storage.status)
            topic=topic,
            deliver_at_ms=deliver_at,
            attempts=found.attempts,
            next_attempt_at_ms=found.next_attempt_at_ms,
            last_error=found.last_error or None,
            reason=found.reason,
            dead_at_ms=found.dead_at_ms,
        )


class DelayLookup(StoreLookup[DelayStatus]):
    """Scheduled, sent or cancelled delayed messages, from the delay store. Ask it after the retry store:
    a delayed message whose publish failed is SENT here but still pending there."""

    def __init__(self, store: DelayStore) -> None:
        super().__init__(store.get)
        self._store = store

    def view(self, id: str, found: DelayStatus) -> MessageState:
        return MessageState(
            id=id,
            status=found.state,
            topic=found.topic,
            deliver_at_ms=found.due_ms,
            sent_at_ms=found.at_ms if found.state is DelayState.SENT else None,
            cancelled_at_ms=found.at_ms if found.state is DelayState.CANCELLED else None,
            stored_at=found.sent_to,
        )

    async def cancel(self, id: str) -> CancelOutcome:
        return await self._store.cancel(id)
