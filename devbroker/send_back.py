"""CONSUMER_SEND_MSG_BACK (36) as 4.9.4's SendMessageProcessor.asyncConsumerSendMsgBack: the message at
the given commit-log offset is stored again, with reconsume times + 1, RETRY_TOPIC (the first topic),
ORIGIN_MESSAGE_ID and WAIT=false, either

- in ``%DLQ%<group>`` with DELAY=0 once its reconsume count reaches the maximum or the delay level is
  negative (the DLQ is created with one read-write queue, as 4.9.4 creates it), or
- through SCHEDULE_TOPIC_XXXX into ``%RETRY%<group>`` queue 0 after its delay level (0: 3 + reconsume
  times, at most 18), with DELAY, REAL_TOPIC and REAL_QID (devbroker/schedule.py; the broker's
  ``delay_scale`` shortens the delays, and DevCluster's default 0 delivers at once).

The maximum and the DLQ are shared with a plain send to a %RETRY% topic (send.py, handleRetryAndDLQ)."""

from __future__ import annotations

from rocksidecar.rmq.codes import ResponseCode
from rocksidecar.rmq.connection import Connection
from rocksidecar.rmq.message_codec import decode_stored
from rocksidecar.rmq.protocol.frame import RemotingCommand

from . import headers
from .headers import Reject
from .processor import StoreProcessor
from .schedule import MAX_DELAY_LEVEL, Schedule, scheduled
from .store import MessageStore, NewMessage
from .topics import DLQ_PREFIX, RETRY_PREFIX, TopicTable

DEFAULT_MAX_RECONSUME_TIMES = 16  # SubscriptionGroupConfig.retryMaxTimes (devbroker keeps no group configs)
RETRY_QUEUE_ID = 0  # a subscription group's retryQueueNums is 1
DLQ_QUEUE_ID = 0  # DLQ_NUMS_PER_GROUP is 1
V3_4_9 = 165  # MQVersion.Version.V3_4_9.ordinal(): the first client version whose maximum the broker reads


def max_reconsume_times(cmd: RemotingCommand, requested: int | None) -> int:
    """The reconsume count at which a message is dead: the client's own maximum (``requested``, None when
    its header has none) if its version is 3.4.9 or later, else the group's retryMaxTimes."""
    if requested is None or cmd.version < V3_4_9:
        return DEFAULT_MAX_RECONSUME_TIMES
    return requested


def dlq_topic(topics: TopicTable, group: str) -> str:
    """``%DLQ%<group>``, created if missing (createTopicInSendMessageBackMethod: DLQ_NUMS_PER_GROUP
    queues, read-write); its messages go to queue DLQ_QUEUE_ID."""
    return topics.ensure(DLQ_PREFIX + group).name


def delay_level(requested: int, reconsume_times: int) -> int:
    """The level the message waits for: 0 asks the broker's choice, 3 + reconsume times (10 s, 30 s,
    1 min, ...); a level beyond the table's is its last (2 h)."""
    return min(requested or 3 + reconsume_times, MAX_DELAY_LEVEL)


class SendBackProcessor(StoreProcessor):
    def __init__(self, store: MessageStore, topics: TopicTable, schedule: Schedule) -> None:
        super().__init__(store, topics)
        self._schedule = schedule

    async def send_back(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """Raises:
        Reject: SYSTEM_ERROR when no message is stored at the offset.
        """
        ext = cmd.ext_fields
        offset = headers.integer(ext, "offset")
        group = headers.text(ext, "group")
        requested = headers.integer(ext, "delayLevel", 0)
        requested_max = headers.integer(ext, "maxReconsumeTimes", DEFAULT_MAX_RECONSUME_TIMES)
        max_times = max_reconsume_times(cmd, requested_max)
        record = self._store.record_at(offset)
        if record is None:
            raise Reject(ResponseCode.SYSTEM_ERROR, f"look message by offset failed, {offset}")
        msg, _ = decode_stored(record, inflate=False)
        props = dict(msg.properties)
        props.setdefault("RETRY_TOPIC", msg.topic)
        props.setdefault("ORIGIN_MESSAGE_ID", msg.offset_msg_id)
        props["WAIT"] = "false"  # msgExt.setWaitStoreMsgOK(false)
        if msg.reconsume_times >= max_times or requested < 0:
            dlq = dlq_topic(self._topics, group)
            props["DELAY"] = "0"  # setDelayTimeLevel(0): stored at once
            self._store.put(dlq, DLQ_QUEUE_ID, [NewMessage.again(msg, props, reconsumed=1)])
        else:
            retry = self._topics.ensure(RETRY_PREFIX + group).name
            level = delay_level(requested, msg.reconsume_times)
            # CommitLog backs up the real topic and queue, then schedules
            again = scheduled(NewMessage.again(msg, props, reconsumed=1), retry, RETRY_QUEUE_ID, level)
            self._schedule.put(again, level)
        return cmd.response(ResponseCode.SUCCESS)
