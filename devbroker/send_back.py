"""CONSUMER_SEND_MSG_BACK (36), simplified: the message at the given commit-log offset is copied at
once to ``%RETRY%<group>`` (no delay levels), or to ``%DLQ%<group>`` once its reconsume count reaches
the maximum or the delay level is negative, with reconsume times + 1, RETRY_TOPIC and ORIGIN_MESSAGE_ID
set as the Java broker sets them. Unlike Java's write-only DLQ, devbroker's DLQ topic is readable."""

from __future__ import annotations

from rocksidecar.rmq.codes import ResponseCode
from rocksidecar.rmq.connection import Connection
from rocksidecar.rmq.message_codec import decode_stored
from rocksidecar.rmq.protocol.frame import RemotingCommand

from . import headers
from .headers import Reject
from .processor import StoreProcessor
from .store import NewMessage
from .topics import DLQ_PREFIX, RETRY_PREFIX

DEFAULT_MAX_RECONSUME_TIMES = 16


class SendBackProcessor(StoreProcessor):
    async def send_back(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """Raises:
        Reject: SYSTEM_ERROR when no message is stored at the offset.
        """
        ext = cmd.ext_fields
        offset = headers.integer(ext, "offset")
        group = headers.text(ext, "group")
        delay_level = headers.integer(ext, "delayLevel", 0)
        max_times = headers.integer(ext, "maxReconsumeTimes", DEFAULT_MAX_RECONSUME_TIMES)
        record = self._store.record_at(offset)
        if record is None:
            raise Reject(ResponseCode.SYSTEM_ERROR, f"look message by offset failed, {offset}")
        msg, _ = decode_stored(record, inflate=False)
        props = dict(msg.properties)
        props.setdefault("RETRY_TOPIC", msg.topic)
        props.setdefault("ORIGIN_MESSAGE_ID", msg.offset_msg_id)
        dead = msg.reconsume_times >= max_times or delay_level < 0
        target = (DLQ_PREFIX if dead else RETRY_PREFIX) + group
        self._topics.ensure(target)
        self._store.put(target, 0, [NewMessage.again(msg, props, reconsumed=1)])
        return cmd.response(ResponseCode.SUCCESS)
