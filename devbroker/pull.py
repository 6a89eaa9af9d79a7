"""PULL_MESSAGE (11): checks as Java's PullMessageProcessor makes them, tag filtering by hash code (SQL92
on the properties where enablePropertyFilter is on), the
store's decision table mapped to response codes, and long polling (protocol reference §5.3-5.4)."""

from __future__ import annotations

from rocksidecar.rmq.broker import parse_tags
from rocksidecar.rmq.codes import PERM_READ, PULL_COMMIT_OFFSET, PULL_SUBSCRIPTION, PULL_SUSPEND, ResponseCode
from rocksidecar.rmq.connection import Connection
from rocksidecar.rmq.protocol.frame import RemotingCommand

from . import headers
from .filtering import Accept
from .headers import Reject
from .long_poll import PullHolds
from .state import BrokerState
from .store import GetResult, GetStatus, tag_code

_CODE_BY_STATUS = {
    GetStatus.FOUND: ResponseCode.SUCCESS,
    GetStatus.NO_MATCHED_MESSAGE: ResponseCode.PULL_RETRY_IMMEDIATELY,
    GetStatus.OFFSET_TOO_SMALL: ResponseCode.PULL_OFFSET_MOVED,
    GetStatus.OFFSET_OVERFLOW_ONE: ResponseCode.PULL_NOT_FOUND,
    GetStatus.OFFSET_OVERFLOW_BADLY: ResponseCode.PULL_OFFSET_MOVED,
}


def response_code(result: GetResult, offset: int) -> int:
    if result.status in (GetStatus.NO_MESSAGE_IN_QUEUE, GetStatus.NO_MATCHED_LOGIC_QUEUE):
        return ResponseCode.PULL_OFFSET_MOVED if offset != 0 else ResponseCode.PULL_NOT_FOUND
    return _CODE_BY_STATUS[result.status]


class PullProcessor:
    def __init__(self, state: BrokerState, holds: PullHolds) -> None:
        self._state = state
        self._holds = holds

    async def pull(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """Raises:
        Reject: unknown topic, unreadable topic, illegal queue id, unusable subscription.
        """
        ext = cmd.ext_fields
        group = headers.text(ext, "consumerGroup")
        topic = headers.text(ext, "topic")
        queue_id = headers.integer(ext, "queueId")
        offset = headers.integer(ext, "queueOffset")
        max_nums = headers.integer(ext, "maxMsgNums")
        sys_flag = headers.integer(ext, "sysFlag")
        suspend_ms = headers.integer(ext, "suspendTimeoutMillis", 0)
        self._check_queue(topic, queue_id)
        codes, accept = self._filter(ext, group, topic, sys_flag)
        if sys_flag & PULL_COMMIT_OFFSET:
            self._state.offsets.commit(group, topic, queue_id, headers.integer(ext, "commitOffset"))
        result = self._state.store.get(topic, queue_id, offset, max_nums, codes, accept)
        code = response_code(result, offset)
        if code == ResponseCode.PULL_NOT_FOUND and sys_flag & PULL_SUSPEND and suspend_ms > 0:
            # Long polling: hold until a matching message arrives or the suspend time passes, then
            # answer by reading again, as Java re-runs the pull without the suspend option.
            await self._holds.wait(topic, queue_id, offset, codes, accept, suspend_ms / 1000)
            result = self._state.store.get(topic, queue_id, offset, max_nums, codes, accept)
            code = response_code(result, offset)
        out = {
            "nextBeginOffset": str(result.next_begin_offset),
            "minOffset": str(result.min_offset),
            "maxOffset": str(result.max_offset),
            "suggestWhichBrokerId": "0",
        }
        return cmd.response(code, result.status.value, out, result.body)

    def _check_queue(self, topic: str, queue_id: int) -> None:
        cfg = self._state.topics.get(topic)
        if cfg is None:
            raise Reject(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist, apply first please!")
        if not cfg.perm & PERM_READ:
            raise Reject(ResponseCode.NO_PERMISSION, f"the topic[{topic}] pulling message is forbidden")
        if not 0 <= queue_id < cfg.read_queue_nums:
            raise Reject(
                ResponseCode.SYSTEM_ERROR,
                f"queueId[{queue_id}] is illegal, topic:[{topic}] "
                f"topicConfig.readQueueNums:[{cfg.read_queue_nums}]",
            )

    def _filter(
        self, ext: dict[str, str], group: str, topic: str, sys_flag: int
    ) -> tuple[frozenset[int] | None, Accept | None]:
        """The tag codes to accept (None: all) and an SQL92 match on the properties (None: none), from
        the request or the group's heartbeat."""
        if sys_flag & PULL_SUBSCRIPTION:
            expression_type = ext.get("expressionType") or "TAG"
            expression = ext.get("subscription") or "*"
            if expression_type != "TAG":
                return None, self._state.property_filter.pull_accept(expression_type, expression)
        else:
            sub = self._state.clients.subscription(group, topic)
            if sub is None:
                raise Reject(ResponseCode.SUBSCRIPTION_NOT_EXIST, "the consumer's subscription not exist")
            if sub.sub_version < headers.integer(ext, "subVersion", 0):
                # The heartbeat carrying the pull's subscription has not arrived yet: the client
                # heartbeats and pulls again (PullMessageProcessor's SUBSCRIPTION_NOT_LATEST).
                raise Reject(ResponseCode.SUBSCRIPTION_NOT_LATEST, "the consumer's subscription not latest")
            if sub.expression_type == "TAG":
                return sub.codes, None
            expression_type, expression = sub.expression_type, sub.expression
        if expression_type != "TAG":  # refused unless enablePropertyFilter, as Java's broker does
            return None, self._state.property_filter.accept(expression_type, expression)
        tags = parse_tags(expression)
        return (frozenset(tag_code(t) for t in tags) if tags else None), None
