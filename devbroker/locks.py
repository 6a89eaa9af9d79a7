"""LOCK_BATCH_MQ (41) and UNLOCK_BATCH_MQ (42): the queue locks of orderly consumers, as Java's
RebalanceLockManager keeps them: a lock belongs to one client id of a group, is renewed by locking again
and lapses 60 s after its last renewal, so a crashed client's queues go to another member in time."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import orjson

from rocksidecar.rmq.codes import ResponseCode
from rocksidecar.rmq.connection import Connection
from rocksidecar.rmq.message import MessageQueue
from rocksidecar.rmq.protocol.frame import RemotingCommand

from .headers import Reject

LOCK_MAX_LIVE_S = 60.0  # rocketmq.broker.rebalance.lockMaxLiveTime


def _queues(doc: dict[str, Any]) -> list[MessageQueue]:
    return [
        MessageQueue(str(q["topic"]), str(q["brokerName"]), int(q["queueId"])) for q in doc.get("mqSet") or ()
    ]


def _queue_json(mq: MessageQueue) -> dict[str, Any]:
    return {"topic": mq.topic, "brokerName": mq.broker_name, "queueId": mq.queue_id}


class QueueLocks:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._table: dict[tuple[str, MessageQueue], tuple[str, float]] = {}  # -> (client id, renewed at)

    def try_lock(self, group: str, client_id: str, mqs: list[MessageQueue]) -> list[MessageQueue]:
        """Lock or renew each queue that is free, lapsed or already this client's; returns those."""
        now = self._clock()
        out = []
        for mq in mqs:
            held = self._table.get((group, mq))
            if held is None or held[0] == client_id or now - held[1] > LOCK_MAX_LIVE_S:
                self._table[(group, mq)] = (client_id, now)
                out.append(mq)
        return out

    def unlock(self, group: str, client_id: str, mqs: list[MessageQueue]) -> None:
        for mq in mqs:
            held = self._table.get((group, mq))
            if held is not None and held[0] == client_id:
                del self._table[(group, mq)]

    def owner(self, group: str, mq: MessageQueue) -> str | None:
        held = self._table.get((group, mq))
        if held is None or self._clock() - held[1] > LOCK_MAX_LIVE_S:
            return None
        return held[0]


class LockProcessor:
    def __init__(self, locks: QueueLocks) -> None:
        self._locks = locks

    @staticmethod
    def _body(cmd: RemotingCommand) -> tuple[str, str, list[MessageQueue]]:
        try:
            doc = orjson.loads(cmd.body)
            group, client_id = str(doc["consumerGroup"] or ""), str(doc["clientId"] or "")
            if not group or not client_id:
                raise ValueError("consumerGroup and clientId must not be empty")
            return group, client_id, _queues(doc)
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise Reject(ResponseCode.SYSTEM_ERROR, f"bad lock request body: {exc}") from None

    async def lock(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        group, client_id, mqs = self._body(cmd)
        locked = self._locks.try_lock(group, client_id, mqs)
        body = orjson.dumps({"lockOKMQSet": [_queue_json(mq) for mq in locked]})
        return cmd.response(ResponseCode.SUCCESS, body=body)

    async def unlock(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        group, client_id, mqs = self._body(cmd)
        self._locks.unlock(group, client_id, mqs)
        return cmd.response(ResponseCode.SUCCESS)
