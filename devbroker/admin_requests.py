"""Topic and queue-offset requests: UPDATE_AND_CREATE_TOPIC (17), SEARCH_OFFSET_BY_TIMESTAMP (29),
GET_MAX_OFFSET (30), GET_MIN_OFFSET (31) and VIEW_MESSAGE_BY_ID (33), as AdminBrokerProcessor and
QueryMessageProcessor answer them."""

from __future__ import annotations

from rocksidecar.rmq.codes import ResponseCode
from rocksidecar.rmq.connection import Connection
from rocksidecar.rmq.protocol.frame import RemotingCommand

from . import headers
from .headers import Reject
from .processor import StoreProcessor
from .topics import TopicConfig, is_system_topic, topic_name_error


class AdminProcessor(StoreProcessor):
    async def create_topic(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """Raises:
        Reject: SYSTEM_ERROR for an invalid or system topic name or a topic without queues.
        """
        ext = cmd.ext_fields
        topic = headers.text(ext, "topic")
        error = topic_name_error(topic)
        if error is not None:
            raise Reject(ResponseCode.SYSTEM_ERROR, error)
        if is_system_topic(topic):
            raise Reject(ResponseCode.SYSTEM_ERROR, f"The topic[{topic}] is conflict with system topic.")
        cfg = TopicConfig(
            name=topic,
            read_queue_nums=headers.integer(ext, "readQueueNums"),
            write_queue_nums=headers.integer(ext, "writeQueueNums"),
            perm=headers.integer(ext, "perm"),
            topic_sys_flag=headers.integer(ext, "topicSysFlag", 0),
            order=headers.boolean(ext, "order"),
        )
        try:
            self._topics.put(cfg)
        except ValueError as exc:
            raise Reject(ResponseCode.SYSTEM_ERROR, str(exc)) from None
        return cmd.response(ResponseCode.SUCCESS)

    async def max_offset(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        topic, queue_id = _queue(cmd)
        return _offset(cmd, self._store.max_offset(topic, queue_id))

    async def min_offset(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        topic, queue_id = _queue(cmd)
        return _offset(cmd, self._store.min_offset(topic, queue_id))

    async def search_offset(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        topic, queue_id = _queue(cmd)
        timestamp_ms = headers.integer(cmd.ext_fields, "timestamp")
        return _offset(cmd, self._store.search_offset(topic, queue_id, timestamp_ms))

    async def view_message(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        offset = headers.integer(cmd.ext_fields, "offset")
        record = self._store.record_at(offset)
        if record is None:
            raise Reject(ResponseCode.SYSTEM_ERROR, f"can not find message by the offset, {offset}")
        return cmd.response(ResponseCode.SUCCESS, body=record)


def _queue(cmd: RemotingCommand) -> tuple[str, int]:
    return headers.text(cmd.ext_fields, "topic"), headers.integer(cmd.ext_fields, "queueId")


def _offset(cmd: RemotingCommand, offset: int) -> RemotingCommand:
    return cmd.response(ResponseCode.SUCCESS, ext_fields={"offset": str(offset)})
