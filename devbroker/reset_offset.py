"""INVOKE_BROKER_TO_RESET_OFFSET (222) and INVOKE_BROKER_TO_GET_CONSUMER_STATUS (223), as Broker2Client
answers them for ``mqadmin resetOffsetByTime`` and ``mqadmin getConsumerStatus`` on a group that is online.

A reset works out each of this broker's queues of the topic: the offset of the timestamp (-1: the queue's
end), taken when forced or when it lies before the group's committed one; then tells every member of the
group (RESET_CONSUMER_CLIENT_OFFSET, one-way, the table in the body) and answers the same table. The
members do the reset: the broker's committed offsets change only when they persist theirs. A group with
no member online is CONSUMER_NOT_ONLINE (mqadmin then falls back to rewriting the offsets itself, which
devbroker does not serve).
"""

from __future__ import annotations

from collections.abc import Callable

import orjson

from rocksidecar.rmq.codes import FLAG_ONEWAY, RequestCode, ResponseCode
from rocksidecar.rmq.connection import Connection
from rocksidecar.rmq.consumer.queue_tables import loads, offsets, table_json
from rocksidecar.rmq.errors import FrameError, RocketMQError
from rocksidecar.rmq.message import MessageQueue
from rocksidecar.rmq.protocol.frame import RemotingCommand

from . import headers
from .headers import Reject
from .state import BrokerState

CALL_CLIENT_TIMEOUT_S = 5.0  # Broker2Client.getConsumeStatus's invokeSync timeout


class OffsetResets:
    def __init__(self, state: BrokerState, broker_name: str, opaque: Callable[[], int]) -> None:
        self._state = state
        self._broker = broker_name
        self._opaque = opaque  # the broker's own requests' opaque numbers

    async def reset(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """Raises:
        Reject: SYSTEM_ERROR for a topic this broker lacks or a group without a committed offset on one
            of its queues; CONSUMER_NOT_ONLINE for a group with no member connected.
        """
        ext = cmd.ext_fields
        topic, group = headers.text(ext, "topic"), headers.text(ext, "group")
        timestamp, force = headers.integer(ext, "timestamp"), headers.boolean(ext, "isForce")
        config = self._state.topics.get(topic)
        if config is None:
            raise Reject(
                ResponseCode.SYSTEM_ERROR,
                f"[reset-offset] reset offset failed, no topic in this broker. topic={topic}",
            )
        store, table = self._state.store, {}  # MessageQueue -> the offset it moves to
        for queue_id in range(config.write_queue_nums):
            committed = self._state.offsets.query(group, topic, queue_id)
            if committed is None:
                raise Reject(ResponseCode.SYSTEM_ERROR, f"THe consumer group <{group}> not exist")  # sic
            if timestamp == -1:
                wanted = store.max_offset(topic, queue_id)
            else:
                wanted = store.search_offset(topic, queue_id, timestamp)
            wanted = max(wanted, 0)
            table[MessageQueue(topic, self._broker, queue_id)] = (
                wanted if force or wanted < committed else committed
            )
        members = self._state.clients.consumer_connections(group)
        if not members:
            raise Reject(
                ResponseCode.CONSUMER_NOT_ONLINE,
                f"Consumer not online, so can not reset offset, Group: {group} Topic: {topic} "
                f"Timestamp: {timestamp}",
            )
        body = _reset_body(table)
        for member, _ in members:
            request = RemotingCommand(
                RequestCode.RESET_CONSUMER_CLIENT_OFFSET,
                {"topic": topic, "group": group, "timestamp": str(timestamp), "isForce": str(force).lower()},
                body,
                opaque=self._opaque(),
                flag=FLAG_ONEWAY,
            )
            member.send(request)  # one-way: a closed connection just drops it
        return cmd.response(ResponseCode.SUCCESS, body=body)

    async def status(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """Every member's (or ``clientAddr``'s, a client id) offsets of the topic in its memory."""
        ext = cmd.ext_fields
        topic, group, only = headers.text(ext, "topic"), headers.text(ext, "group"), ext.get("clientAddr", "")
        members = self._state.clients.consumer_connections(group)
        if not members:
            raise Reject(
                ResponseCode.SYSTEM_ERROR, f"No Any Consumer online in the consumer group: [{group}]"
            )
        tables: list[bytes] = []
        for member, client_id in members:
            if only and only != client_id:
                continue
            ask = RemotingCommand(
                RequestCode.GET_CONSUMER_STATUS_FROM_CLIENT, {"topic": topic, "group": group}
            )
            try:
                answer = await member.invoke(ask, CALL_CLIENT_TIMEOUT_S)
            except RocketMQError:
                continue  # Java logs it and leaves the member out
            if answer.code == ResponseCode.SUCCESS and answer.body:
                # the member's messageQueueTable as it wrote it: the broker passes it on unparsed
                table = _message_queue_table(answer.body)
                if table is not None:
                    tables.append(orjson.dumps(client_id) + b":" + table)
        return cmd.response(
            ResponseCode.SUCCESS,
            body=b'{"consumerTable":{' + b",".join(tables) + b'},"messageQueueTable":{}}',
        )


def _reset_body(table: dict[MessageQueue, int]) -> bytes:
    return b'{"offsetTable":' + table_json(table) + b"}"


def _message_queue_table(body: bytes) -> bytes | None:
    """The ``messageQueueTable`` object of a GetConsumerStatusBody, re-serialised as fastjson writes it;
    None if the body is not one."""
    try:
        table = offsets(loads(body, "GetConsumerStatusBody").get("messageQueueTable") or {}, "status")
    except (FrameError, AttributeError):
        return None
    return table_json(table)
