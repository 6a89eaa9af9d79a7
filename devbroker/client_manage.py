"""Client and consumer-group requests: HEART_BEAT (34), UNREGISTER_CLIENT (35),
GET_CONSUMER_LIST_BY_GROUP (38), QUERY_CONSUMER_OFFSET (14), UPDATE_CONSUMER_OFFSET (15) and
CHECK_CLIENT_CONFIG (46)."""

from __future__ import annotations

import orjson

from rocksidecar.rmq.codes import ResponseCode
from rocksidecar.rmq.connection import Connection
from rocksidecar.rmq.protocol.frame import RemotingCommand

from . import headers
from .headers import Reject
from .state import BrokerState
from .topics import RETRY_PREFIX


class ClientManageProcessor:
    def __init__(self, state: BrokerState) -> None:
        self._state = state

    async def heartbeat(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        try:
            doc = orjson.loads(cmd.body)
            if not isinstance(doc, dict):
                raise ValueError("the heartbeat body is not a JSON object")
            groups = self._state.clients.heartbeat(conn, doc)
        except (orjson.JSONDecodeError, ValueError, TypeError, KeyError) as exc:
            raise Reject(ResponseCode.SYSTEM_ERROR, f"bad heartbeat: {exc}") from None
        for group in groups:  # the broker creates each consumer group's retry topic
            self._state.topics.ensure(RETRY_PREFIX + group)
        return cmd.response(ResponseCode.SUCCESS)

    async def check_config(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """checkClientConfig: can this broker filter by the subscription? (Reject says why not.)"""
        try:
            doc = orjson.loads(cmd.body) if cmd.body else {}
            sub = doc.get("subscriptionData") if isinstance(doc, dict) else None
        except orjson.JSONDecodeError as exc:
            raise Reject(ResponseCode.SYSTEM_ERROR, f"bad check-client body: {exc}") from None
        if isinstance(sub, dict):
            expression_type = str(sub.get("expressionType") or "TAG")
            self._state.property_filter.check(expression_type, str(sub.get("subString") or ""))
        return cmd.response(ResponseCode.SUCCESS)

    async def unregister(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        ext = cmd.ext_fields
        client_id = headers.text(ext, "clientID")
        self._state.clients.unregister(client_id, ext.get("producerGroup"), ext.get("consumerGroup"))
        return cmd.response(ResponseCode.SUCCESS)

    async def consumer_list(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        group = cmd.ext_fields.get("consumerGroup", "")
        ids = self._state.clients.consumer_ids(group)
        if not ids:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"no consumer for this group, {group}")
        return cmd.response(ResponseCode.SUCCESS, body=orjson.dumps({"consumerIdList": ids}))

    async def query_offset(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """§6.5: the committed offset; else 0 while the queue still starts at offset 0 (devbroker
        keeps every message in memory, so none is "swapped out"); else QUERY_NOT_FOUND. A committed
        negative offset (UPDATE_CONSUMER_OFFSET stores what it is given) counts as none, as 4.9.4's
        queryConsumerOffset answers only an offset >= 0."""
        group, topic, queue_id = self._queue(cmd)
        offset = self._state.offsets.query(group, topic, queue_id)
        if offset is not None and offset < 0:
            offset = None
        if offset is None and self._state.store.min_offset(topic, queue_id) > 0:
            return cmd.response(
                ResponseCode.QUERY_NOT_FOUND,
                "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first",
            )
        return cmd.response(ResponseCode.SUCCESS, ext_fields={"offset": str(offset or 0)})

    async def update_offset(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        group, topic, queue_id = self._queue(cmd)
        offset = headers.integer(cmd.ext_fields, "commitOffset")
        self._state.offsets.commit(group, topic, queue_id, offset)
        return cmd.response(ResponseCode.SUCCESS)  # not sent when the request was one-way

    @staticmethod
    def _queue(cmd: RemotingCommand) -> tuple[str, str, int]:
        ext = cmd.ext_fields
        return headers.text(ext, "consumerGroup"), headers.text(ext, "topic"), headers.integer(ext, "queueId")
