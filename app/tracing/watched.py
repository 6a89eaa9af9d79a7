"""Wrappers that watch what they wrap without changing it. WatchedSender is the one place the Sender
signatures are restated for the tracing wrappers (spans.TracedSender, msgtrace.MsgTraceSender), which
override only its two hooks; the spool and schedule wrappers are plain Delegating ones."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from rocksidecar.rmq import Message, SendResult
from rocksidecar.rmq.sender import BatchResults, ShardingKeys


class Delegating:
    """A wrapper whose every attribute it does not define is ``inner``'s (fault tables, routes, ...)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class WatchedSender(Delegating):
    """Delegates to ``inner``; ``_one`` and ``_many`` run around each call (the defaults just call)."""

    async def send(
        self, msg: Message, *, sharding_key: str | None = None, validated: bool = False
    ) -> SendResult:
        inner = self._inner
        return await self._one(msg, lambda: inner.send(msg, sharding_key=sharding_key, validated=validated))

    async def send_batch(
        self, messages: Sequence[Message], sharding_keys: ShardingKeys = None, *, validated: bool = False
    ) -> BatchResults:
        if not messages:
            return list(await self._inner.send_batch(messages, sharding_keys, validated=validated))
        return await self._many(
            messages, lambda: self._inner.send_batch(messages, sharding_keys, validated=validated)
        )

    async def _one(self, msg: Message, call: Callable[[], Awaitable[SendResult]]) -> SendResult:
        return await call()

    async def _many(
        self, messages: Sequence[Message], call: Callable[[], Awaitable[BatchResults]]
    ) -> BatchResults:
        return await call()
