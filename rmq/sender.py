"""Sender: what the sidecar needs of a transport to RocketMQ, and all it may assume.

The remoting Producer implements it; a RocketMQ 5 gRPC transport would stand beside it by implementing
the same two calls with the same values and the same failure rule (rmq.errors).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from .errors import RocketMQError
from .message import Message
from .result import SendResult

ShardingKeys = Sequence[str | None] | None  # one per message of a batch, or None: no ordering asked
Outcomes = list[SendResult | RocketMQError]  # one per message of a batch, in order


class Sender(Protocol):
    async def send(
        self, msg: Message, *, sharding_key: str | None = None, validated: bool = False
    ) -> SendResult:
        """Store one message on a broker or raise a RocketMQError (SendFailed lists the attempts)."""
        ...

    async def send_batch(
        self, messages: Sequence[Message], sharding_keys: ShardingKeys = None, *, validated: bool = False
    ) -> Outcomes:
        """One outcome per message, in order; a failing message fails only itself."""
        ...
