"""GET_CONSUMER_RUNNING_INFO (307) and CONSUME_MESSAGE_DIRECTLY (309) forwarded to the consumer, as
AdminBrokerProcessor.callConsumer does: the broker finds the client's connection in the group, sends it
the same request (same ext fields and body) and returns the client's answer as its own. ``mqadmin
consumerStatus`` and the sticky allocation (rmq/consumer/holdings.py) read a member's queues this way; the
Dashboard's "resend message" (``mqadmin queryMsgById -g -d``) has the broker attach the stored message
its offset id names, and its name."""

from __future__ import annotations

from collections.abc import Callable

from rocksidecar.rmq.codes import ResponseCode
from rocksidecar.rmq.connection import Connection
from rocksidecar.rmq.errors import RequestTimeout, RocketMQError
from rocksidecar.rmq.producer.transaction import commit_log_offset
from rocksidecar.rmq.protocol.frame import RemotingCommand

from .clients import ClientRegistry

CALL_CLIENT_TIMEOUT_S = 10.0  # Broker2Client.callClient's invokeSync timeout


class ConsumerCaller:
    def __init__(
        self, clients: ClientRegistry, record_at: Callable[[int], bytes | None], broker_name: str
    ) -> None:
        self._clients = clients
        self._record_at = record_at  # the stored record at a commit-log offset
        self._broker_name = broker_name

    async def consume_directly(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        try:
            record = self._record_at(commit_log_offset(cmd.ext_fields.get("msgId", "")))
        except ValueError as exc:
            return cmd.response(ResponseCode.SYSTEM_ERROR, str(exc))
        if record is None:
            return cmd.response(ResponseCode.SYSTEM_ERROR, "can not find the message by its offset id")
        fields = {**cmd.ext_fields, "brokerName": self._broker_name}
        return await self.call(conn, RemotingCommand(cmd.code, fields, record, opaque=cmd.opaque))

    async def call(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        group = cmd.ext_fields.get("consumerGroup", "")
        client_id = cmd.ext_fields.get("clientId", "")
        target = self._clients.consumer_connection(group, client_id)
        if target is None:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"The Consumer <{group}> <{client_id}> not online")
        forward = RemotingCommand(cmd.code, dict(cmd.ext_fields), cmd.body)
        try:
            answer = await target.invoke(forward, CALL_CLIENT_TIMEOUT_S)
        except RequestTimeout as exc:
            return cmd.response(
                ResponseCode.CONSUME_MSG_TIMEOUT, f"consumer <{group}> <{client_id}> Timeout: {exc}"
            )
        except RocketMQError as exc:
            return cmd.response(
                ResponseCode.SYSTEM_ERROR, f"invoke consumer <{group}> <{client_id}> Exception: {exc}"
            )
        return cmd.response(answer.code, answer.remark, dict(answer.ext_fields), answer.body)
