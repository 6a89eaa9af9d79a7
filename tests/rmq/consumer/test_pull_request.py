"""PULL_MESSAGE as the push consumer sends it: sys flags, batch size, suspend time, subscription."""

from __future__ import annotations

from rocksidecar.rmq.broker import BrokerApi
from rocksidecar.rmq.codes import (
    PULL_COMMIT_OFFSET,
    PULL_SUBSCRIPTION,
    PULL_SUSPEND,
    RequestCode,
    ResponseCode,
)
from rocksidecar.rmq.message import MessageQueue
from rocksidecar.rmq.protocol.frame import RemotingCommand
from rocksidecar.rmq.result import PullStatus


class Scripted:
    """An Invoker that records requests and answers PULL_NOT_FOUND."""

    def __init__(self) -> None:
        self.sent: list[tuple[RemotingCommand, float]] = []

    async def invoke(self, addr: str, cmd: RemotingCommand, timeout_s: float) -> RemotingCommand:
        self.sent.append((cmd, timeout_s))
        ext = {"nextBeginOffset": "12", "minOffset": "0", "maxOffset": "12"}
        return cmd.response(ResponseCode.PULL_NOT_FOUND, None, ext)

    async def invoke_oneway(self, addr: str, cmd: RemotingCommand) -> None:
        raise AssertionError("pulls are never one-way")


async def test_a_long_poll_with_a_commit_offset_and_the_subscription() -> None:
    invoker = Scripted()
    api = BrokerApi(invoker)
    mq = MessageQueue("T", "broker-a", 3)
    result = await api.pull(
        "addr",
        "G",
        mq,
        12,
        max_nums=32,
        expression="TagA || TagB",
        suspend_s=15.0,
        commit_offset=9,
        timeout_s=30.0,
        sub_version=77,
    )
    assert result.status is PullStatus.NO_NEW_MSG and result.next_begin_offset == 12
    cmd, timeout_s = invoker.sent[0]
    assert cmd.code == RequestCode.PULL_MESSAGE and timeout_s == 30.0
    ext = cmd.ext_fields
    assert int(ext["sysFlag"]) == PULL_COMMIT_OFFSET | PULL_SUSPEND | PULL_SUBSCRIPTION
    assert (ext["queueOffset"], ext["maxMsgNums"], ext["commitOffset"]) == ("12", "32", "9")
    assert (ext["suspendTimeoutMillis"], ext["subscription"], ext["subVersion"]) == (
        "15000",
        "TagA || TagB",
        "77",
    )
    assert (ext["consumerGroup"], ext["topic"], ext["queueId"], ext["bname"]) == ("G", "T", "3", "broker-a")


async def test_without_the_subscription_the_broker_uses_the_heartbeats() -> None:
    invoker = Scripted()
    await BrokerApi(invoker).pull("addr", "G", MessageQueue("T", "b", 0), 0, subscribe=False)
    assert int(invoker.sent[0][0].ext_fields["sysFlag"]) == 0  # no commit, no suspend, no subscription
