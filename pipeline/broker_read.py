"""The read source's calls to RocketMQ with the project's asyncio client: the queues of the topics, their
min and max offsets (a broker that does not answer in time is left out, so only its queues stall), offsets
by time, and a queue's messages from one offset to another as pulls. Driver and executors each run these
in an event loop of their own (Spark calls a data source from plain threads that have none)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass, field

from rocksidecar.rmq import (
    BrokerApi,
    Credentials,
    MessageQueue,
    NameServerClient,
    PullResult,
    PullStatus,
    RemotingClient,
    RemotingError,
    RocketMQError,
    StoredRecord,
    TopicNotExist,
    offset_msg_id,
    tls_context,
)
from rocksidecar.rmq.broker import EXPRESSION_SQL92, EXPRESSION_TAG, Subscription
from rocksidecar.rmq.codes import MASTER_ID
from rocksidecar.rmq.consumer.broker_calls import check_client_config
from rocksidecar.rmq.errors import BrokerError, ServiceNotAvailable, SystemBusy
from rocksidecar.rmq.message import (
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    RESERVED_PROPERTIES,
    decode_properties,
)
from rocksidecar.rmq.route import BrokerData

from .options import OptionError
from .queue_ranges import QueueRef
from .read_options import ReadOptions

log = logging.getLogger(__name__)


# what a call to the name server or a broker raises when it fails (refused, or no answer)
CALL_FAILED = (RocketMQError, OSError, TimeoutError)


class NoMasterError(RocketMQError):
    """The route lists the broker without a master (a failover is under way, or the broker is down): no
    offset bounds; or, for a pull, without any node."""


# a queue's address in Cluster.queues while its broker has no master in the route: the queue is listed
# all the same, and bounds() names its broker as down, so a stream holds it as it holds a down broker's
# (left out, a queue was later taken for a new one and read from its earliest offset). Planning asks the
# master only, as Java's MQAdminImpl.minOffset/maxOffset/searchOffset (findBrokerAddressInPublish); a
# range already planned is pulled from a slave meanwhile (Cluster.read)
NO_MASTER = ""


# a broker that cannot answer now (down, unreachable, overloaded, between masters): waited for up to
# brokerTimeoutMs
UNAVAILABLE = (RemotingError, OSError, TimeoutError, SystemBusy, ServiceNotAvailable, NoMasterError)


PREFETCH = 4  # pulls in flight per partition
# PULL_OFFSET_MOVED answers in a row for an offset the queue holds before the read gives up: a broker
# answers so once after a server-side offset reset of the pulling group, then reads normally
MOVED_RETRIES = 3
# the client id CHECK_CLIENT_CONFIG carries (the broker's check reads only the subscription)
CHECK_CLIENT_ID = "rocksidecar_spark@driver"
# why offsets are gone, for DataLossError and the warning
_DELETED = "retention deleted them or the queue was reset"

Page = list[StoredRecord]  # a pull's records (rmq.message_codec.pull_records) within a read's range


class DataLossError(RuntimeError):
    """Offsets to be read are gone (deleted by retention, or the queue was reset) and failOnDataLoss."""


class BrokerDownError(RuntimeError):
    """A broker did not answer within brokerTimeoutMs."""


@dataclass(frozen=True, slots=True)
class Bounds:
    low: int  # the queue's min offset (what retention kept)
    high: int  # its max offset (the next one to be written)


@dataclass(slots=True)
class DownBrokers:
    """Brokers that did not answer the last offset lookup, and why: the driver logs them once each."""

    errors: dict[str, str] = field(default_factory=dict)


class Cluster:
    """One RemotingClient (with ACL credentials if given) for the name server and the brokers."""

    def __init__(self, opts: ReadOptions) -> None:
        creds = None
        if opts.access_key and opts.secret_key:
            creds = Credentials(opts.access_key, opts.secret_key, opts.security_token)
        self.opts = opts
        tls = None
        if opts.tls:
            try:
                tls = tls_context(opts.tls_ca_file, opts.tls_cert_file, opts.tls_key_file)
            except OSError as exc:  # ssl.SSLError too; the paths are the executor's
                files = "options tlsCaFile, tlsCertFile, tlsKeyFile"
                raise OptionError(f"{files}: a file does not load on this executor: {exc}") from None
        self._client = RemotingClient(connect_timeout_s=opts.broker_timeout_s, credentials=creds, tls=tls)
        self._namesrv = NameServerClient(self._client, opts.namesrv, timeout_s=opts.broker_timeout_s)
        self._api = BrokerApi(self._client)
        self._addrs: dict[str, str] = {}  # broker name -> its master (offset bounds, commits, pulls)
        self._nodes: dict[str, dict[int, str]] = {}  # broker name -> its nodes, slaves too (pulls)

    async def close(self) -> None:
        await self._client.close()

    async def queues(self) -> dict[QueueRef, str]:
        """Every readable queue of the topics -> its master's address, or NO_MASTER for a queue whose
        broker has none now (nothing can be read there now; bounds() names the broker as down). A topic
        that does not exist yet has no queues."""
        out: dict[QueueRef, str] = {}
        nodes: dict[str, dict[int, str]] = {}
        for topic in self.opts.topics:
            try:
                route = await self._namesrv.get_route(topic)
            except TopicNotExist:
                log.warning("topic %r does not exist (yet): it has no queues to read", topic)
                continue
            for b in route.broker_datas:  # every topic's nodes of a broker together, as the push consumer
                nodes.setdefault(b.broker_name, {}).update(b.broker_addrs)
            for mq in route.subscribe_queues(topic):
                addr = route.master_addr(mq.broker_name)
                out[QueueRef(topic, mq.broker_name, mq.queue_id)] = addr or NO_MASTER
                if addr:
                    self._addrs[mq.broker_name] = addr
        self._nodes.update(nodes)
        return out

    async def check_filter(self) -> None:
        """Have each master broker of the topics check the ``sql`` option (CHECK_CLIENT_CONFIG, as the
        sidecar's consumer checks its SQL92 subscription at start), on the driver before any pull: 4.9.4
        serves a pull whose expression does not compile unfiltered (ConsumerFilterManager.build returns
        null, and no compiled expression matches every message), so a typo would read the whole topic.
        Raises OptionError naming the option and the broker's reason (SUBSCRIPTION_PARSE_FAILED; or
        SYSTEM_ERROR, a broker without enablePropertyFilter). A broker that cannot answer now is warned
        about and not waited for: the others' answer stands for the expression, and its queues wait."""
        sql = self.opts.sql
        if not sql:
            return
        asked: set[str] = set()  # the expression is compiled alike for any topic: each broker once
        for topic in self.opts.topics:
            try:
                route = await self._namesrv.get_route(topic)
            except TopicNotExist:
                continue  # no queues to read (Cluster.queues warns)
            except CALL_FAILED as exc:
                log.warning("could not look up topic %r to check option sql: %s", topic, exc)
                continue
            for b in route.broker_datas:
                addr = b.master_addr
                if not addr or addr in asked:
                    continue
                asked.add(addr)
                sub = Subscription(topic, sql, expression_type=EXPRESSION_SQL92)
                try:
                    await check_client_config(
                        self._client, addr, self.opts.group, CHECK_CLIENT_ID, sub, self.opts.broker_timeout_s
                    )
                except UNAVAILABLE as exc:
                    log.warning("could not check option sql with broker %r: %s", b.broker_name, exc)
                except BrokerError as exc:
                    raise OptionError(
                        f"option sql={sql!r}: broker {b.broker_name!r} refuses it on topic {topic!r}: {exc}"
                    ) from None

    async def bounds(self, queues: dict[QueueRef, str], down: DownBrokers) -> dict[QueueRef, Bounds]:
        """Min and max offset of each queue, asked concurrently; the queues of a broker that fails, does
        not answer within brokerTimeoutMs or has no master (NO_MASTER) are left out, and the broker is
        named in ``down``."""

        async def one(ref: QueueRef, addr: str) -> tuple[QueueRef, Bounds | BaseException]:
            if addr == NO_MASTER:
                return ref, NoMasterError(f"broker {ref.broker!r} has no master in the route now")
            mq, t = MessageQueue(ref.topic, ref.broker, ref.queue_id), self.opts.broker_timeout_s
            try:
                low = await self._api.get_min_offset(addr, mq, timeout_s=t)
                high = await self._api.get_max_offset(addr, mq, timeout_s=t)
            except CALL_FAILED as exc:
                return ref, exc
            return ref, Bounds(low, high)

        out: dict[QueueRef, Bounds] = {}
        down.errors.clear()
        for ref, got in await asyncio.gather(*(one(r, a) for r, a in queues.items())):
            if isinstance(got, Bounds):
                out[ref] = got
            else:
                down.errors.setdefault(ref.broker, f"{type(got).__name__}: {got}")
        return out

    async def offset_at(self, ref: QueueRef, addr: str, timestamp_ms: int) -> int:
        mq = MessageQueue(ref.topic, ref.broker, ref.queue_id)
        return await self._api.search_offset(addr, mq, timestamp_ms, timeout_s=self.opts.broker_timeout_s)

    async def commit(self, positions: dict[QueueRef, int], group: str) -> None:
        """Store each queue's next offset under ``group`` (so mqadmin consumerProgress shows the lag);
        best effort: a broker that fails is logged, the next commit repeats it."""
        for ref, offset in positions.items():
            addr = self._addrs.get(ref.broker)
            if addr is None:
                continue
            mq = MessageQueue(ref.topic, ref.broker, ref.queue_id)
            try:
                await self._api.update_consumer_offset(
                    addr, group, mq, offset, timeout_s=self.opts.broker_timeout_s
                )
            except CALL_FAILED as exc:
                log.warning("could not commit %s offset %d for group %s: %s", ref, offset, group, exc)

    async def _pull_address(self, ref: QueueRef, node: int) -> tuple[str, bool]:
        """Where a pull goes, as Java's lite pull consumer (PullAPIWrapper.pullKernelImpl, 4.9.4):
        findBrokerAddressInSubscribe(broker, node, false) on the route, (address, is a slave) of node
        ``node``, else any node listed: the slave while the master is down, so that a range planned
        before the failover is read rather than failing its task for brokerTimeoutMs."""
        if ref.broker not in self._addrs and ref.broker not in self._nodes:
            await self.queues()
        nodes = dict(self._nodes.get(ref.broker, {}))
        if master := self._addrs.get(ref.broker):
            nodes[MASTER_ID] = master
        found = BrokerData("", ref.broker, nodes).subscribe_addr(node, False)
        if found is None:
            # unavailable for now, not refused: Cluster.read waits for a node up to brokerTimeoutMs
            # (looking the route up again) as it waits for a broker that does not answer
            raise NoMasterError(f"broker {ref.broker!r} has no node in the route now")
        return found

    async def read(self, ref: QueueRef, start: int, end: int) -> AsyncGenerator[Page, None]:
        """The records (rmq.message_codec.pull_records) of offsets [start, end) that pass the filter, a
        pull at a time. Offsets that are
        gone raise DataLossError (failOnDataLoss) or are skipped with a warning; a broker that does not
        answer (or has no node in the route, or only a slave that lacks the offsets) for brokerTimeoutMs
        raises BrokerDownError naming it (Spark then retries the task). Pulls go to the master, else a
        slave the route lists, and then to the node each answer's suggestWhichBrokerId names, as Java's
        (_pull_address); no pull commits an offset, so none has a commit-offset flag to clear for a
        slave."""
        opts = self.opts
        mq = MessageQueue(ref.topic, ref.broker, ref.queue_id)
        expression, kind = (opts.sql, EXPRESSION_SQL92) if opts.sql else (opts.tags or "*", EXPRESSION_TAG)
        offset = start
        failing_since: float | None = None
        # the node the next pull goes to: the last answer's suggestWhichBrokerId (Java's
        # pullFromWhichNodeTable, kept for this task), the master at first
        node = MASTER_ID
        moved = 0  # PULL_OFFSET_MOVED answers in a row for an offset inside the queue
        # without a filter a queue's offsets are consecutive: pull the next few windows at once, so a
        # partition waits one round trip per PREFETCH pulls (with a filter, pulls skip ahead: one at a time)
        depth = PREFETCH if expression == "*" else 1
        while offset < end:
            n = opts.pull_batch_size
            starts = [offset + i * n for i in range(depth) if offset + i * n < end]
            try:
                addr, slave = await self._pull_address(ref, node)
                results = await asyncio.gather(
                    *(
                        self._api.pull(
                            addr,
                            opts.group,
                            mq,
                            at,
                            max_nums=n,
                            expression=expression,
                            expression_type=kind,
                            timeout_s=opts.broker_timeout_s,
                            as_records=True,
                            max_body_bytes=opts.max_body_bytes,
                        )
                        for at in starts
                    )
                )
            except CALL_FAILED as exc:
                if not isinstance(exc, UNAVAILABLE):  # refused (a bad filter, no permission): say so now
                    raise RuntimeError(f"queue {ref}: broker {ref.broker!r} refused a pull: {exc}") from exc
                failing_since = await self._unavailable(ref, offset, failing_since, str(exc), exc)
                node = MASTER_ID  # start over at the master: the suggested node may be the one gone
                continue
            before, behind = offset, None
            for at, result in zip(starts, results, strict=True):
                if at != offset:
                    break  # a pull came back short (a byte limit): plan again from where it ended
                node = result.suggest_which_broker_id  # processPullResult: any id; one not listed falls back
                if slave and not result.min_offset <= offset < result.max_offset:
                    # a slave without the offset: behind the planned range (replication lags, or the
                    # master died before it copied them), or newer than the master (added or rebuilt
                    # after it: it starts at the master's latest commit log file). Neither is the queue's
                    # end nor lost offsets: the master holds them. Wait for them or the master, as for a
                    # broker that does not answer
                    behind = (
                        f"its slave {addr} holds offsets {result.min_offset} to {result.max_offset - 1} only"
                    )
                    break
                went_on = self._passed(ref, offset, end, result, expression != "*", moved)
                moved = moved + 1 if went_on == offset else 0
                if went_on is not None:
                    offset = went_on
                    continue  # a later result of this round is used if it was pulled at went_on
                _skip_bad(ref, offset, result)
                page = result.records
                if page and not (offset <= page[0][0] and page[-1][0] < end):  # offsets ascend in a pull
                    page = [r for r in page if offset <= r[0] < end]
                if page:
                    yield page
                offset = result.next_begin_offset
            if behind is None or offset > before:
                failing_since = None
            if behind is not None:
                failing_since = await self._unavailable(ref, offset, failing_since, behind, None)
                node = MASTER_ID

    async def _unavailable(
        self, ref: QueueRef, offset: int, since: float | None, why: str, exc: BaseException | None
    ) -> float:
        """A pull of ``ref`` at ``offset`` found nothing to read now (``why``), failing since ``since``
        (None: till now it did not): raise BrokerDownError once that lasts brokerTimeoutMs, else wait a
        little and have the next pull look the route up again (it may have moved). Returns when the
        failing began."""
        timeout = self.opts.broker_timeout_s
        now = asyncio.get_running_loop().time()
        since = now if since is None else since
        if now - since >= timeout:
            raise BrokerDownError(
                f"queue {ref}: broker {ref.broker!r} did not answer a pull at offset {offset} for "
                f"{timeout:g} s (brokerTimeoutMs): {why}"
            ) from exc
        self._addrs.pop(ref.broker, None)
        self._nodes.pop(ref.broker, None)
        await asyncio.sleep(min(1.0, timeout / 10))
        return since

    def _passed(
        self, ref: QueueRef, offset: int, end: int, result: PullResult, filtered: bool, moved: int
    ) -> int | None:
        """A pull at ``offset`` of [.., ``end``) that brought no records to read: the offset the read goes
        on from (``offset``: pull it again; ``end``: done), once offsets gone are raised or warned about
        (_lost). None when the pull's records are to be read (FOUND, or a filter's run that matched none).
        ``moved``: the PULL_OFFSET_MOVED answers for this offset so far."""
        status, low, high = result.status, result.min_offset, result.max_offset
        if status is PullStatus.OFFSET_ILLEGAL and low <= offset < high:
            # the queue holds the offset: not deleted offsets but the broker moving this group's pull (it
            # answers so once after a server-side offset reset of the group): pull it again, a few times
            if moved >= MOVED_RETRIES:
                raise RuntimeError(
                    f"queue {ref}: the broker answered PULL_OFFSET_MOVED {moved + 1} times in a row for "
                    f"offset {offset}, which the queue holds ({low} to {high})"
                )
            return offset
        if status is PullStatus.OFFSET_ILLEGAL or offset < low:
            return self._lost(ref, offset, max(offset + 1, min(low, end)) if low > offset else end, low, high)
        if status is PullStatus.NO_NEW_MSG and offset >= high:  # the queue's end
            if high < end:  # the queue ends before what the driver saw: it was reset
                self._lost(ref, high, end, low, high)
            return end
        if result.next_begin_offset <= offset:
            raise RuntimeError(f"queue {ref}: a pull at offset {offset} made no progress ({status})")
        resume = min(result.next_begin_offset, end)
        if status is PullStatus.NO_NEW_MSG:
            # inside the queue: the broker has no consume-queue entry there (OFFSET_FOUND_NULL) and rolled
            # on past it; those offsets cannot be read
            return self._lost(ref, offset, resume, low, high, "the broker has no entry for them")
        if status is PullStatus.NO_MATCHED_MSG and not filtered:
            # without a filter no offset is passed over for not matching: the messages under those entries
            # are gone from the commit log (MESSAGE_WAS_REMOVING: retention deleting under the read)
            return self._lost(ref, offset, resume, low, high, "retention deleted their messages")
        return None

    def _lost(self, ref: QueueRef, offset: int, resume: int, low: int, high: int, why: str = _DELETED) -> int:
        """Offsets ``offset`` to ``resume - 1`` of ``ref`` are gone: raise, or say so and return ``resume``
        (where the read goes on)."""
        what = f"queue {ref}: offsets {offset} to {resume - 1} are gone (the queue now holds {low} to {high}"
        what += f"; {why})"
        if self.opts.fail_on_data_loss:
            raise DataLossError(f"{what}. Set failOnDataLoss=false to skip them and go on")
        log.warning("%s: skipped (failOnDataLoss=false)", what)
        return resume


def _skip_bad(ref: QueueRef, offset: int, result: PullResult) -> None:
    """Records no reader can decode (a compressed body past maxBodyBytes or corrupt, text that is not
    UTF-8, a corrupt frame) are skipped, each with a warning naming its queue and offset: the read goes
    on rather than failing every retry of the task at the same offset."""
    for bad in result.undecodable:
        log.warning(
            "queue %s: message %s at offset %d skipped, it cannot be decoded: %s",
            ref, bad.message.msg_id, bad.message.queue_offset, bad.reason,
        )  # fmt: skip
    if result.corrupt is not None:
        log.warning(
            "queue %s: offsets %d to %d skipped, the broker's record there is corrupt: %s",
            ref, offset, result.next_begin_offset - 1, result.corrupt,
        )  # fmt: skip


@dataclass(slots=True)
class Columns:
    """The read source's per-message columns of a run of records, as plain lists (source._arrow makes
    them Arrow arrays); timestamps in milliseconds since the epoch."""

    offsets: list[int]
    msg_ids: list[str]
    uniq_keys: list[str | None]
    bodies: list[bytes]
    tags: list[str | None]
    keys: list[list[str]]
    properties: list[list[tuple[str, str]]]
    born_ms: list[int]
    stored_ms: list[int]
    reconsume_times: list[int]


def columns(records: Sequence[StoredRecord]) -> Columns:
    """The columns of the records (the executor's CPU per row is here): the fixed fields a list each,
    then one pass over the properties, each looked up once (what MessageExt's msg_id, keys,
    user_properties compute), the offset id only for a message without UNIQ_KEY."""
    msg_ids: list[str] = []
    uniq_keys: list[str | None] = []
    tags: list[str | None] = []
    keys: list[list[str]] = []
    properties: list[list[tuple[str, str]]] = []
    for _, _, text, _, _, _, host, phys in records:
        p = decode_properties(text)
        uniq = p.get(PROPERTY_UNIQ_KEY)
        raw_keys = p.get(PROPERTY_KEYS)
        msg_ids.append(uniq or offset_msg_id(host, phys))
        uniq_keys.append(uniq)
        tags.append(p.get(PROPERTY_TAGS))
        keys.append([k for k in raw_keys.split(" ") if k] if raw_keys else [])
        properties.append([(k, v) for k, v in p.items() if k not in RESERVED_PROPERTIES])
    return Columns(
        offsets=[r[0] for r in records],
        msg_ids=msg_ids,
        uniq_keys=uniq_keys,
        bodies=[r[1] for r in records],
        tags=tags,
        keys=keys,
        properties=properties,
        born_ms=[r[3] for r in records],
        stored_ms=[r[4] for r in records],
        reconsume_times=[r[5] for r in records],
    )
