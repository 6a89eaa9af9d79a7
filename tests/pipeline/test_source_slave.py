"""Java 4.9.4 parity of where the Spark source's tasks pull from while a broker's master is down.

Java's reference (rocketmq-all-4.9.4): DefaultLitePullConsumerImpl pulls through the push consumer's
PullAPIWrapper.pullKernelImpl, at MQClientInstance.findBrokerAddressInSubscribe(brokerName,
recalculatePullFromWhichNode(mq), false): the node the last answer's suggestWhichBrokerId named (the
master at first), else any node the route lists (a slave while the master is down). Its offset bounds
(MQAdminImpl.minOffset/maxOffset/searchOffset) ask findBrokerAddressInPublish, the master only: planning
keeps holding a broker without a master (tests/pipeline/test_spark_gaps.py), a planned range is read.

The brokers are a devbroker DevCluster; RouteRewriting (tests/rmq/consumer/test_pull_from_slave.py)
rewrites the name server's routes, so a broker is listed with only a slave (here the same devbroker
answering at the slave's address)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from rocksidecar.devbroker import DevCluster
from rocksidecar.pipeline import broker_read
from rocksidecar.pipeline.broker_read import BrokerDownError, Cluster, DataLossError
from rocksidecar.pipeline.queue_ranges import QueueRef
from rocksidecar.pipeline.read_options import ReadOptions
from rocksidecar.rmq.codes import RequestCode, ResponseCode
from rocksidecar.rmq.protocol.frame import RemotingCommand
from tests.rmq.consumer.helpers import send_to_queues
from tests.rmq.consumer.test_pull_from_slave import RouteRewriting

TOPIC = "SparkSlaveT"


class Nodes(RouteRewriting):
    """RouteRewriting whose pulls to ``alias`` (an address no broker listens at: a slave) are served by
    ``target`` (the devbroker). ``suggest`` rewrites the suggestWhichBrokerId of every pull answered at
    an address (as a master with slaveReadEnable answers a consumer that reads from disk). ``lag``: the
    slave holds offsets below it only, as a 4.9.4 slave behind its master answers (PULL_NOT_FOUND at its
    max offset, nextBeginOffset not corrected); ``on_lag`` runs at such an answer."""

    def __init__(self, rewrite: dict[str, dict[int, str]], alias: str, target: str) -> None:
        super().__init__(rewrite)
        self.alias, self.target = alias, target
        self.suggest: dict[str, int] = {}
        self.lag: int | None = None
        self.on_lag: Callable[[], None] = lambda: None

    async def invoke(self, addr: str, cmd: RemotingCommand, timeout_s: float) -> RemotingCommand:
        if cmd.code != RequestCode.PULL_MESSAGE:
            return await super().invoke(addr, cmd, timeout_s)
        self.pulls.append((addr, cmd))
        offset = int(cmd.ext_fields["queueOffset"])
        if addr == self.alias and self.lag is not None and offset >= self.lag:
            self.on_lag()
            ext = {"nextBeginOffset": str(offset), "minOffset": "0", "maxOffset": str(self.lag)}
            return cmd.response(ResponseCode.PULL_NOT_FOUND, None, ext)
        resp = await super(RouteRewriting, self).invoke(
            self.target if addr == self.alias else addr, cmd, timeout_s
        )
        if addr in self.suggest:
            ext = {**resp.ext_fields, "suggestWhichBrokerId": str(self.suggest[addr])}
            resp = cmd.response(resp.code, resp.remark, ext, resp.body)
        return resp


async def _read(
    cluster: DevCluster,
    client: Nodes,
    monkeypatch: pytest.MonkeyPatch,
    ref: QueueRef,
    end: int,
    **opts: object,
) -> list[tuple[int, bytes]]:
    monkeypatch.setattr(broker_read, "RemotingClient", lambda **_: client)
    reader = Cluster(ReadOptions(cluster.namesrv_addr, (TOPIC,), **opts))  # type: ignore[arg-type]
    try:
        return [(r[0], r[1]) async for page in reader.read(ref, 0, end) for r in page]
    finally:
        await reader.close()


def _bodies(broker: str, n: int) -> list[tuple[int, bytes]]:
    return [(i, f"{broker}/0/{i}".encode()) for i in range(n)]


async def test_a_planned_range_of_a_broker_whose_master_is_down_is_pulled_from_its_slave(
    cluster: DevCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """broker-a's master left the route after the micro-batch was planned; its slave (id 1) is listed.
    The task pulled from the master only: it waited brokerTimeoutMs for a master and failed
    (BrokerDownError, 'no master'), and so did Spark's retries until the failover ended. Java's lite
    pull consumer reads the queue from the slave."""
    down = sorted(cluster.brokers)[0]
    slave = "127.0.0.1:1"  # never connected: the devbroker answers for it
    await send_to_queues(cluster, TOPIC, 5, queues=1)
    client = Nodes({down: {1: slave}}, alias=slave, target=cluster.brokers[down].addr)
    got = await _read(cluster, client, monkeypatch, QueueRef(TOPIC, down, 0), 5, broker_timeout_s=0.5)
    assert got == _bodies(down, 5)
    assert {a for a, _ in client.pulls} == {slave}


async def test_pulls_follow_the_node_the_broker_suggests(
    cluster: DevCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """processPullResult: each answer's suggestWhichBrokerId picks the queue's next node. The master
    suggests slave 1, the slave suggests the master again: the pulls go master, slave, master."""
    name = sorted(cluster.brokers)[0]
    master, slave = cluster.brokers[name].addr, "127.0.0.1:1"
    await send_to_queues(cluster, TOPIC, 6, queues=1, tags="a")
    client = Nodes({name: {0: master, 1: slave}}, alias=slave, target=master)
    client.suggest = {master: 1, slave: 0}
    # a filter pulls one window at a time (no prefetch): a pull per two offsets
    got = await _read(cluster, client, monkeypatch, QueueRef(TOPIC, name, 0), 6, pull_batch_size=2, tags="a")
    assert got == _bodies(name, 6)
    assert [a for a, _ in client.pulls] == [master, slave, master]


@pytest.mark.parametrize("fail_on_data_loss", [True, False])
async def test_a_slave_behind_the_planned_range_is_waited_for_not_taken_for_lost_offsets(
    cluster: DevCluster, monkeypatch: pytest.MonkeyPatch, fail_on_data_loss: bool
) -> None:
    """The range was planned at the master's end (5); the slave has replicated offsets 0 to 2 only. Its
    PULL_NOT_FOUND at its own end is not the queue's end (no reset, nothing lost: the master has them):
    the task waits, as for a broker that does not answer, and reads on once the master is back."""
    down = sorted(cluster.brokers)[0]
    master, slave = cluster.brokers[down].addr, "127.0.0.1:1"
    await send_to_queues(cluster, TOPIC, 5, queues=1)
    client = Nodes({down: {1: slave}}, alias=slave, target=master)
    client.lag = 3

    def master_back() -> None:
        client.rewrite[down] = {0: master, 1: slave}

    client.on_lag = master_back
    got = await _read(
        cluster,
        client,
        monkeypatch,
        QueueRef(TOPIC, down, 0),
        5,
        broker_timeout_s=2.0,
        pull_batch_size=1,  # the lagging slave's answers are per offset
        fail_on_data_loss=fail_on_data_loss,
    )
    assert got == _bodies(down, 5)
    assert [a for a, _ in client.pulls][-1] == master


async def test_a_slave_that_stays_behind_fails_the_task_as_a_broker_that_does_not_answer(
    cluster: DevCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No master comes back and the slave never gets offsets 3 and 4: after brokerTimeoutMs the task
    fails naming the queue and the broker (Spark retries it), not a DataLossError or a skip."""
    down = sorted(cluster.brokers)[0]
    slave = "127.0.0.1:1"
    await send_to_queues(cluster, TOPIC, 5, queues=1)
    client = Nodes({down: {1: slave}}, alias=slave, target=cluster.brokers[down].addr)
    client.lag = 3
    with pytest.raises(BrokerDownError, match=rf"{TOPIC}@{down}:0.*offset 3"):
        await _read(
            cluster,
            client,
            monkeypatch,
            QueueRef(TOPIC, down, 0),
            5,
            broker_timeout_s=0.5,
            pull_batch_size=1,
            fail_on_data_loss=False,
        )


SHORT_T = "ReviewSlaveT"


class ShortSlave(Nodes):
    """A slave (``alias``) that holds the queue's offsets from ``low`` on only (a slave rebuilt or added
    after the master, which replicates from the master's latest commit log file; or one whose own
    retention ran ahead). For an offset below ``low`` it answers as a 4.9.4 slave does
    (offsetCheckInSlave=false, the default): PullMessageProcessor turns the store's OFFSET_TOO_SMALL into
    PULL_RETRY_IMMEDIATELY with nextBeginOffset left at the offset asked and suggestWhichBrokerId the
    master. ``on_short`` runs at such an answer."""

    def __init__(
        self, rewrite: dict[str, dict[int, str]], alias: str, target: str, low: int, high: int
    ) -> None:
        super().__init__(rewrite, alias, target)
        self.low, self.high = low, high
        self.short_answers = 0
        self.on_short = lambda: None

    async def invoke(self, addr: str, cmd: RemotingCommand, timeout_s: float) -> RemotingCommand:
        if cmd.code == RequestCode.PULL_MESSAGE and addr == self.alias:
            offset = int(cmd.ext_fields["queueOffset"])
            if offset < self.low:
                self.pulls.append((addr, cmd))
                self.short_answers += 1
                self.on_short()
                ext = {
                    "nextBeginOffset": str(offset),
                    "minOffset": str(self.low),
                    "maxOffset": str(self.high),
                    "suggestWhichBrokerId": "0",
                }
                return cmd.response(ResponseCode.PULL_RETRY_IMMEDIATELY, None, ext)
        return await super().invoke(addr, cmd, timeout_s)


@pytest.mark.parametrize("fail_on_data_loss", [False, True])
async def test_a_slave_lacking_the_start_of_a_planned_range_is_not_taken_for_lost_offsets(
    cluster: DevCluster, monkeypatch: pytest.MonkeyPatch, fail_on_data_loss: bool
) -> None:
    """d78b305 pulls a planned range from the broker's slave while the master is down, and handles a
    slave *behind* the range (offset >= its max) as unavailable. A slave that lacks the range's
    *beginning* (its min offset above the offset asked: the master holds offsets 0 to 4, the slave 3
    to 4) is not: its answer goes to _passed, which takes ``offset < min_offset`` for offsets deleted by
    retention, so offsets 0 to 2, which the master holds, are skipped with a warning
    (failOnDataLoss=false: silently missing from the micro-batch) or fail the task with DataLossError
    (and every retry while the failover lasts). Before d78b305 the task waited for the master. A 4.9.4
    lite pull consumer retries at the master (PULL_RETRY_IMMEDIATELY suggests it). Here the master is
    back by the time of the slave's first answer: the fixed read waits, looks the route up again and
    reads all five offsets from the master."""
    down = sorted(cluster.brokers)[0]
    master, slave = cluster.brokers[down].addr, "127.0.0.1:1"
    await send_to_queues(cluster, SHORT_T, 5, queues=1)
    client = ShortSlave({down: {1: slave}}, alias=slave, target=master, low=3, high=5)

    def master_back() -> None:
        client.rewrite[down] = {0: master, 1: slave}

    client.on_short = master_back
    monkeypatch.setattr(broker_read, "RemotingClient", lambda **_: client)
    reader = Cluster(
        ReadOptions(
            cluster.namesrv_addr,
            (SHORT_T,),
            broker_timeout_s=2.0,
            pull_batch_size=1,
            fail_on_data_loss=fail_on_data_loss,
        )  # type: ignore[call-arg]
    )
    try:
        try:
            got = [(r[0], r[1]) async for page in reader.read(QueueRef(SHORT_T, down, 0), 0, 5) for r in page]
        except DataLossError as exc:
            raise AssertionError(f"offsets the master holds were reported lost: {exc}") from None
    finally:
        await reader.close()
    assert client.short_answers >= 1  # the slave was asked and answered that it lacks them
    assert got == [(i, f"{down}/0/{i}".encode()) for i in range(5)], "offsets the master holds were skipped"


async def test_a_slave_the_master_suggests_that_lacks_old_offsets_does_not_lose_them(
    cluster: DevCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same with the master up: a master with slaveReadEnable suggests its slave (id 1) to a reader
    of old messages (a Spark batch backfilling), and d78b305 follows the suggestion. The slave, added
    after the master, holds offsets 6 to 9 only. Its answer at offset 4 (PULL_RETRY_IMMEDIATELY, min 6,
    suggesting the master) is taken for retention having deleted 4 and 5: they are skipped
    (failOnDataLoss=false) though the master, up all along, holds them. Java's lite pull consumer pulls
    them again from the master the slave suggests."""
    name = sorted(cluster.brokers)[0]
    master, slave = cluster.brokers[name].addr, "127.0.0.1:1"
    await send_to_queues(cluster, SHORT_T, 10, queues=1)
    client = ShortSlave({name: {0: master, 1: slave}}, alias=slave, target=master, low=6, high=10)
    client.suggest = {master: 1}
    monkeypatch.setattr(broker_read, "RemotingClient", lambda **_: client)
    reader = Cluster(
        ReadOptions(
            cluster.namesrv_addr,
            (SHORT_T,),
            broker_timeout_s=2.0,
            pull_batch_size=1,
            fail_on_data_loss=False,
        )  # type: ignore[call-arg]
    )
    try:
        got = [(r[0], r[1]) async for page in reader.read(QueueRef(SHORT_T, name, 0), 0, 10) for r in page]
    finally:
        await reader.close()
    assert client.short_answers >= 1  # the slave was asked below its min offset
    assert [o for o, _ in got] == list(range(10)), "offsets the master holds were skipped"
    assert got == [(i, f"{name}/0/{i}".encode()) for i in range(10)]
