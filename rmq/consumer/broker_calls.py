"""Consumer requests the producer never makes: CONSUMER_SEND_MSG_BACK, LOCK_BATCH_MQ, UNLOCK_BATCH_MQ,
CHECK_CLIENT_CONFIG."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import orjson

from ..broker import Subscription
from ..codes import RequestCode, ResponseCode
from ..errors import FrameError, for_code
from ..message import MessageExt, MessageQueue
from ..pool import Invoker
from ..protocol.frame import RemotingCommand

MAX_DELAY_LEVEL = 18  # the broker's default messageDelayLevel has 18 levels (1 s ... 2 h)


def delay_level_for(reconsume_times: int) -> int:
    """The level Java's broker picks when the client leaves it at 0: 3 + reconsume times (10 s, 30 s,
    1 min, ...), at most the last level."""
    return min(3 + reconsume_times, MAX_DELAY_LEVEL)


def _queue_json(mq: MessageQueue) -> dict[str, Any]:
    return {"topic": mq.topic, "brokerName": mq.broker_name, "queueId": mq.queue_id}


def _ok(resp: RemotingCommand, addr: str) -> None:
    if resp.code != ResponseCode.SUCCESS:
        raise for_code(resp.code, resp.remark, addr)


async def send_back(
    invoker: Invoker,
    addr: str,
    msg: MessageExt,
    group: str,
    *,
    delay_level: int,
    max_reconsume_times: int,
    timeout_s: float = 3.0,
) -> None:
    """Hand a failed message back to the broker, which stores it in %RETRY%group (or %DLQ%group once it
    was reconsumed ``max_reconsume_times`` times) to be delivered again after the level's delay."""
    header = {
        "offset": str(msg.commit_log_offset),
        "group": group,
        "delayLevel": str(delay_level),
        "originMsgId": msg.msg_id,
        "originTopic": msg.topic,
        "unitMode": "false",
        "maxReconsumeTimes": str(max_reconsume_times),
    }
    resp = await invoker.invoke(addr, RemotingCommand(RequestCode.CONSUMER_SEND_MSG_BACK, header), timeout_s)
    _ok(resp, addr)


@dataclass(frozen=True, slots=True)
class QueueLocker:
    """LOCK_BATCH_MQ and UNLOCK_BATCH_MQ for one consumer (``group``, ``client_id``): orderly consumption
    holds a broker-side lock on each queue it consumes."""

    invoker: Invoker
    group: str
    client_id: str
    timeout_s: float = 1.0

    async def lock(self, addr: str, mqs: Iterable[MessageQueue]) -> set[MessageQueue]:
        """Lock (or renew) the queues for this client; returns the ones now held: those asked for that
        the broker lists (one it lists unasked is not ours to consume, and is left out)."""
        mqs = list(mqs)
        resp = await self._call(addr, RequestCode.LOCK_BATCH_MQ, mqs)
        try:
            doc = orjson.loads(resp.body) if resp.body else {}
            held = {
                MessageQueue(str(q["topic"]), str(q["brokerName"]), int(q["queueId"]))
                for q in doc.get("lockOKMQSet") or ()
            }
        except (orjson.JSONDecodeError, AttributeError, KeyError, TypeError, ValueError) as exc:
            raise FrameError(f"bad lock response from {addr}: {exc}", addr=addr) from exc
        return held.intersection(mqs)

    async def unlock(self, addr: str, mqs: Iterable[MessageQueue]) -> None:
        """Release the queues (the broker ignores those another client holds)."""
        await self._call(addr, RequestCode.UNLOCK_BATCH_MQ, mqs)

    async def _call(self, addr: str, code: int, mqs: Iterable[MessageQueue]) -> RemotingCommand:
        # LockBatchRequestBody and UnlockBatchRequestBody have the same fields
        body = orjson.dumps(
            {"consumerGroup": self.group, "clientId": self.client_id, "mqSet": [_queue_json(m) for m in mqs]}
        )
        resp = await self.invoker.invoke(addr, RemotingCommand(code, {}, body), self.timeout_s)
        _ok(resp, addr)
        return resp


async def check_client_config(
    invoker: Invoker,
    addr: str,
    group: str,
    client_id: str,
    subscription: Subscription,
    timeout_s: float = 3.0,
) -> None:
    """CHECK_CLIENT_CONFIG (checkClientInBroker): ask the broker whether it can filter by this
    subscription. A broker without enablePropertyFilter answers SYSTEM_ERROR, a malformed SQL92
    expression SUBSCRIPTION_PARSE_FAILED; both raise."""
    body = orjson.dumps({"clientId": client_id, "group": group, "subscriptionData": subscription.to_json()})
    resp = await invoker.invoke(addr, RemotingCommand(RequestCode.CHECK_CLIENT_CONFIG, {}, body), timeout_s)
    _ok(resp, addr)
