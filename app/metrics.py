"""Prometheus metrics, defined once (prefix ``rocksidecar_``), and the hooks that feed them.

Only this module imports prometheus_client. Lower layers report through plain callables; gauges that
describe state (back-off, store depth) are read when Prometheus scrapes, through ``Collectors``.
"""

from __future__ import annotations

import itertools
import threading
import time
from bisect import bisect_left
from collections.abc import Callable, Iterable, Sequence

from prometheus_client import CollectorRegistry, Counter, disable_created_metrics
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector
from prometheus_client.samples import Exemplar
from prometheus_client.utils import floatToGoString

from rocksidecar.rmq import Message, RocketMQError, SendResult
from rocksidecar.rmq.message import RETRY_PREFIX, MessageExt
from rocksidecar.rmq.producer import BrokerState
from rocksidecar.rmq.sender import BatchResults, Sender, ShardingKeys
from rocksidecar.storage.message import StoredMessage

from .exemplars import Exemplars
from .tracing.context import TRACEPARENT_PROPERTY

disable_created_metrics()  # type: ignore[no-untyped-call]  # the *_created series double the output and nobody graphs them

LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
MAX_CACHED_CHILDREN = 1024  # label values here are few (outcomes, brokers); bounded all the same
LATENESS_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0, 30.0, 120.0, 600.0)


def exposition(registry: CollectorRegistry, accept: str | None) -> tuple[bytes, str]:
    """/metrics' body and content type: OpenMetrics (with the exemplars) when the scraper asks for it
    (Prometheus does with exemplar storage on), else the classic text format."""
    try:
        encode, content_type = choose_encoder(accept or "")
    except (TypeError, ValueError):  # an OpenMetrics version that is not a number (the client's header)
        encode, content_type = choose_encoder("")  # a preference it cannot read: the classic format
    return encode(registry), content_type


class Metrics:
    def __init__(
        self, registry: CollectorRegistry | None = None, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.registry = registry or CollectorRegistry()
        # labels() takes a lock and builds a tuple on every call (0.6 us); the hot path's counters keep
        # their children: 2.7 -> 1.4 us of metrics per message sent (issue 18).
        self._attempt_children: dict[tuple[str, bool], Counter] = {}
        self.requests = self._counter(
            "requests",
            "API requests answered, by API (http or grpc), route and status code.",
            ["api", "route", "code"],
        )
        self.connections_refused = self._counter(
            "http_connections_refused",
            "HTTP connections answered 503 and closed at once: max_connections were open already.",
        )
        self.messages = Tally(
            "rocksidecar_messages",
            "Messages accepted or refused, by outcome: sent (stored "
            "by a broker), spooled (synced to the local retry store), scheduled (delayed), "
            "rejected (bad input), failed (could not be stored anywhere).",
            "outcome",
        )
        self.registry.register(self.messages)
        self.send_latency = self._latency(
            "send_latency_seconds", "Time to send one message or batch to RocketMQ, retries included.",
            LATENCY_BUCKETS, clock,
        )  # fmt: skip
        self.attempts = self._counter(
            "send_attempts",
            "Send attempts per broker, by result (ok or error); more attempts than messages means retries.",
            ["broker", "result"],
        )
        self.send_errors = self._counter(
            "send_errors",
            "Failed send attempts by broker and cause: the broker's response code name (NO_PERMISSION, "
            "CODE_<n> when unknown) or TRANSPORT.",
            ["broker", "code"],
        )
        self.replays = self._counter(
            "replays",
            "Resends from the retry store, by outcome: delivered, "
            "rescheduled (failed, moved to the next rung), dead (dead-lettered).",
            ["outcome"],
        )
        self.dead_letters = self._counter(
            "dead_letters",
            "Messages moved to the dead-letter area after their last retry (or refused by the broker).",
        )

        self.deliveries = DeliveryTally(
            "rocksidecar_subscription_deliveries",
            "Consumed messages delivered to the app, by subscription and outcome: ok (2xx; bulk: "
            "SUCCESS), later (429/503, offered again), failed (other status, bulk RETRY: sent back), "
            "dropped (bulk DROP: to the group's DLQ), error (no answer or timeout).",
            "rocksidecar_subscription_delivery_seconds",
            "Time the app took to answer one pushed message, by subscription.",
            LATENCY_BUCKETS,
            clock=clock,
        )
        self.registry.register(self.deliveries)
        self.delay_lateness = self._latency(
            "delay_lateness_seconds", "How late delayed messages were published after their due time.",
            LATENESS_BUCKETS, clock,
        )  # fmt: skip

    def _counter(self, name: str, doc: str, labels: Sequence[str] = ()) -> Counter:
        return Counter(f"rocksidecar_{name}", doc, list(labels), registry=self.registry)

    def _latency(
        self, name: str, doc: str, buckets: Sequence[float], clock: Callable[[], float]
    ) -> LatencyTally:
        tally = LatencyTally(f"rocksidecar_{name}", doc, buckets, clock=clock)
        self.registry.register(tally)
        return tally

    # The latencies' observers take the message: its trace context (any producer's, checked by
    # app.exemplars) is read here alone, for an exemplar now and then.
    def observe_delivery(self, subscription: str, outcome: str, seconds: float, message: MessageExt) -> None:
        """A delivery of ``message`` to the app took ``seconds``."""
        self.deliveries.observe(subscription, outcome, seconds, message.properties.get(TRACEPARENT_PROPERTY))

    def observe_send(self, latency_s: float, message: Message | None) -> None:
        """A send of ``message`` (a batch's first) took ``latency_s``, from the call to its outcome: every
        attempt it took included (app.sidecar's sends, TimedSender's). Not the producer's per-attempt
        hook: one observation per attempt said a send that needed three took a third of its time."""
        traceparent = None if message is None else message.properties.get(TRACEPARENT_PROPERTY)
        self.send_latency.observe(latency_s, "", traceparent)

    def observe_lateness(self, lateness_s: float, message: StoredMessage) -> None:
        """A delayed ``message`` was published ``lateness_s`` after its due time."""
        self.delay_lateness.observe(lateness_s, "", message.properties.get(TRACEPARENT_PROPERTY))

    def count_messages(self, outcome: str, n: int = 1) -> None:
        """``n`` messages more with ``outcome`` (sent, spooled, scheduled, rejected, failed)."""
        self.messages.inc(outcome, n)

    def observe_attempt(self, broker: str, ok: bool) -> None:
        child = self._attempt_children.get((broker, ok))
        if child is None:
            child = self.attempts.labels(broker, "ok" if ok else "error")
            if len(self._attempt_children) < MAX_CACHED_CHILDREN:
                self._attempt_children[(broker, ok)] = child
        child.inc()

    def observe_send_error(self, broker: str, cause: str) -> None:
        self.send_errors.labels(broker, cause).inc()

    def add_state(self, collector: Collector) -> None:
        self.registry.register(collector)


class TimedSender:
    """A Sender telling ``observe`` (Metrics.observe_send) how long each send and each batch took,
    retries included: one observation per call, whatever its outcome. Around the background loops'
    sender (replay, delay publication) and the Rock-DMQ forwarder's; the API's sends are timed inline by
    app.sidecar (no coroutine layer on the hot path)."""

    __slots__ = ("_clock", "_inner", "_observe")

    def __init__(
        self,
        inner: Sender,
        observe: Callable[[float, Message | None], None],
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self._inner, self._observe, self._clock = inner, observe, clock

    async def send(
        self, msg: Message, *, sharding_key: str | None = None, validated: bool = False
    ) -> SendResult:
        started = self._clock()
        try:
            result = await self._inner.send(msg, sharding_key=sharding_key, validated=validated)
        except RocketMQError:
            self._observe(self._clock() - started, msg)
            raise
        self._observe(self._clock() - started, msg)
        return result

    async def send_batch(
        self, messages: Sequence[Message], sharding_keys: ShardingKeys = None, *, validated: bool = False
    ) -> BatchResults:
        started = self._clock()
        try:
            return await self._inner.send_batch(messages, sharding_keys, validated=validated)
        finally:
            self._observe(self._clock() - started, messages[0] if messages else None)


def zeroed_counter(
    name: str, doc: str, label: str, values: Iterable[str], registry: CollectorRegistry
) -> Counter:
    """A Counter by one ``label`` with each of ``values`` exported from 0 (rates and alerts see a value
    before its first count, and a missing series is never a zero)."""
    counter = Counter(name, doc, [label], registry=registry)
    for value in values:
        counter.labels(value)
    return counter


def _counter_by_label(
    name: str, doc: str, label: str, counts: Iterable[tuple[str, float]]
) -> CounterMetricFamily:
    """A scrape-time counter family by one ``label``: a sample for each (label value, count)."""
    family = CounterMetricFamily(name, doc, labels=[label])
    for value, n in counts:
        family.add_metric([value], n)
    return family


class Tally(Collector):
    """A counter by one label, kept as plain numbers and read when Prometheus scrapes: for a count made
    once per message. prometheus_client's Counter (labels child, two checks, its value's lock) cost
    0.73 us per count_messages; this, a lock and a dict update. The lock keeps counts exact should an
    edge ever count from other threads; the label's values are the code's own (outcomes), never the
    client's."""

    def __init__(self, name: str, doc: str, label: str) -> None:
        self._name, self._doc, self._label = name, doc, label
        self._counts: dict[str, float] = {}
        self._lock = threading.Lock()

    def inc(self, value: str, n: float = 1) -> None:
        if n < 0:
            raise ValueError("a counter only goes up")
        with self._lock:
            self._counts[value] = self._counts.get(value, 0) + n

    def collect(self) -> Iterable[CounterMetricFamily]:
        with self._lock:
            counts = list(self._counts.items())
        yield _counter_by_label(self._name, self._doc, self._label, counts)


class _Series:
    """One series of a LatencyTally: a count per bucket (not cumulative), the sum, each bucket's newest
    exemplar."""

    __slots__ = ("counts", "exemplars", "total")

    def __init__(self, buckets: int) -> None:
        self.counts = [0] * buckets
        self.total = 0.0
        self.exemplars: list[Exemplar | None] = [None] * buckets


class LatencyTally(Collector):
    """A latency histogram by one label (or none), kept as plain numbers and read when Prometheus scrapes,
    each bucket with its newest exemplar (app.exemplars). prometheus_client's Histogram cost ~1 us an
    observation (a labels() lookup, a loop over the buckets, a lock per value); this is a bisect and a
    few list updates under one lock. Its text is the Histogram's (tests/app/test_metrics_children.py)."""

    def __init__(
        self,
        name: str,
        doc: str,
        buckets: Sequence[float],
        label: str | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._name, self._doc = name, doc
        self._labels = [] if label is None else [label]
        self._bounds = tuple(float(b) for b in buckets)
        self._les = [floatToGoString(b) for b in self._bounds] + ["+Inf"]  # type: ignore[no-untyped-call]
        self._series: dict[str, _Series] = {}  # per label value ("" without a label)
        self._gate = Exemplars(self._bounds, clock=clock)
        self._lock = threading.Lock()
        if label is None:  # a Histogram without labels shows its zero buckets before the first observation
            self._series[""] = _Series(len(self._les))

    def observe(self, seconds: float, value: str = "", traceparent: str | None = None) -> None:
        """``seconds`` in the series of label ``value``; ``traceparent``: the message's, for an exemplar
        now and then."""
        i = bisect_left(self._bounds, seconds)  # the first bucket whose bound is >= seconds, as observe()
        labels = None if traceparent is None else self._gate.take_at(value, i, traceparent)
        with self._lock:
            series = self._series.get(value)
            if series is None:
                series = self._series[value] = _Series(len(self._les))
            series.counts[i] += 1
            series.total += seconds
            if labels is not None:
                series.exemplars[i] = Exemplar(labels, seconds, time.time())

    def collect(self) -> Iterable[HistogramMetricFamily]:
        with self._lock:
            rows = [(v, list(s.counts), s.total, list(s.exemplars)) for v, s in self._series.items()]
        family = HistogramMetricFamily(self._name, self._doc, labels=self._labels)
        for value, counts, total, exemplars in rows:
            buckets = [
                (le, n) if exemplar is None else (le, n, exemplar)
                for le, n, exemplar in zip(self._les, itertools.accumulate(counts), exemplars, strict=True)
            ]
            family.add_metric([value] if self._labels else [], buckets, total)
        yield family


class DeliveryTally(Collector):
    """Pushed deliveries by subscription and outcome, and their latency by subscription (a LatencyTally):
    the Counter and Histogram these replace, kept as plain numbers and read when Prometheus scrapes. Once
    per consumed message, the two labels() lookups, Histogram.observe's bucket loop and three value locks
    were most of the push's bookkeeping (issue 32). Label values are subscription names from the
    configuration and the code's own outcomes."""

    def __init__(
        self,
        name: str,
        doc: str,
        latency_name: str,
        latency_doc: str,
        buckets: Sequence[float],
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._name, self._doc = name, doc
        self._counts: dict[tuple[str, str], int] = {}
        self._latency = LatencyTally(latency_name, latency_doc, buckets, "subscription", clock=clock)
        self._lock = threading.Lock()

    def observe(
        self, subscription: str, outcome: str, seconds: float, traceparent: str | None = None
    ) -> None:
        """``traceparent``: the delivered message's, for an exemplar now and then (app.exemplars)."""
        key = (subscription, outcome)
        with self._lock:
            self._counts[key] = self._counts.get(key, 0) + 1
        self._latency.observe(seconds, subscription, traceparent)

    def collect(self) -> Iterable[CounterMetricFamily | HistogramMetricFamily]:
        with self._lock:
            counts = list(self._counts.items())
        family = CounterMetricFamily(self._name, self._doc, labels=["subscription", "outcome"])
        for labels, n in counts:
            family.add_metric(list(labels), n)
        yield family
        yield from self._latency.collect()


_STATS_KEYS = {"dead_letters_stored": "dead_letters"}  # a gauge whose name differs from its store stat


class StateCollector(Collector):
    """Gauges read at scrape time: broker back-off, retry-store depth and age, dead letters, delays."""

    def __init__(
        self, brokers: Callable[[], Iterable[BrokerState]], store: Callable[[], dict[str, float]]
    ) -> None:
        self._brokers = brokers
        self._store = store

    def collect(self) -> Iterable[GaugeMetricFamily]:
        backoff = GaugeMetricFamily(
            "rocksidecar_broker_backoff_seconds",
            "Seconds until the broker is tried again (0: available). Slow or failing brokers back off.",
            labels=["broker"],
        )
        latency = GaugeMetricFamily(
            "rocksidecar_broker_latency_seconds", "The broker's last send latency.", labels=["broker"]
        )
        for row in self._brokers():
            backoff.add_metric([row.broker], row.not_available_for_s)
            latency.add_metric([row.broker], row.latency_ms / 1000.0)
        yield backoff
        yield latency
        stats = self._store()
        for name, help_text in (
            ("retry_pending", "Messages waiting in the local retry store for their next attempt."),
            (
                "retry_oldest_age_seconds",
                "Age of the oldest message in the retry store (since its first "
                "failure); grows while RocketMQ is unreachable.",
            ),
            # not rocksidecar_dead_letters: in OpenMetrics that is the family of the counter
            # rocksidecar_dead_letters_total, and strict parsers refuse two families of one name
            ("dead_letters_stored", "Messages in the dead-letter area now."),
            ("delay_scheduled", "Delayed messages waiting for their due time."),
            (
                "disk_draining",
                "1 while the disk is full and the reserve given up: the store drains, new work gets 503.",
            ),
        ):
            value = stats.get(_STATS_KEYS.get(name, name), 0.0)
            yield GaugeMetricFamily(f"rocksidecar_{name}", help_text, value=float(value))


class CoalesceCollector(Collector):
    """How the API's single sends were coalesced into broker batches (counters read at scrape time)."""

    def __init__(self, counts: Callable[[], tuple[int, int]]) -> None:
        self._counts = counts  # (batches of two or more, messages in them)

    def collect(self) -> Iterable[CounterMetricFamily]:
        batches, messages = self._counts()
        yield CounterMetricFamily(
            "rocksidecar_coalesced_batches",
            "Broker batches made of single sends that arrived while others were in flight (coalesce_sends).",
            value=batches,
        )
        yield CounterMetricFamily(
            "rocksidecar_coalesced_messages",
            "Single sends that went to the broker in a coalesced batch; the rest went alone.",
            value=messages,
        )


class MsgTraceCollector(Collector):
    """RocketMQ message trace (msg_trace): what its writer wrote, and what it gave up on."""

    def __init__(self, counts: Callable[[], tuple[int, int, int]]) -> None:
        self._counts = counts  # (trace messages written, trace messages failed, records dropped)

    def collect(self) -> Iterable[CounterMetricFamily]:
        written, failed, dropped = self._counts()
        yield CounterMetricFamily(
            "rocksidecar_msg_trace_messages_written",
            "Trace messages stored on the trace topic.",
            value=written,
        )
        yield CounterMetricFamily(
            "rocksidecar_msg_trace_messages_failed",
            "Trace messages the trace topic's broker refused or could not be sent: their records are lost.",
            value=failed,
        )
        yield CounterMetricFamily(
            "rocksidecar_msg_trace_records_dropped",
            "Trace records dropped unwritten because the buffer was full (the sends they record went on).",
            value=dropped,
        )


class TransactionCollector(Collector):
    """Transactions (issue 29), read at scrape time: decisions by outcome since start, and how many are
    undecided and for how long the oldest has been (app.transactions.observed.TransactionStats)."""

    def __init__(
        self, outcomes: Callable[[], dict[str, int]], undecided: Callable[[], tuple[int, float | None]]
    ) -> None:
        self._outcomes = outcomes
        self._undecided = undecided

    def collect(self) -> Iterable[CounterMetricFamily | GaugeMetricFamily]:
        yield _counter_by_label(
            "rocksidecar_transactions",
            "Transactions decided since start by outcome: committed, rolled_back (by the app through the "
            "API), checked_commit, checked_rollback (by the app's check endpoint, asked on a "
            "broker's check or the local outbox's), "
            "unknown (a broker's check or the local outbox's answered UNKNOWN; asked again later).",
            "outcome",
            self._outcomes().items(),
        )
        count, age_s = self._undecided()
        yield GaugeMetricFamily(
            "rocksidecar_transactions_undecided", "Transactions begun and not decided yet.", value=count
        )
        yield GaugeMetricFamily(
            "rocksidecar_transaction_oldest_undecided_age_seconds",
            "Seconds since the oldest undecided transaction began (0: none).",
            value=age_s or 0.0,
        )


# (subscription, topic, broker, queue id, lag, in flight) of each owned queue; and rebalances done.
QueueRows = Callable[[], Iterable[tuple[str, str, str, int, int, int]]]


class ConsumerCollector(Collector):
    """Gauges of the subscriptions, read at scrape time from the last lag sample: per-queue lag
    (broker max offset - committed), messages in flight, queues owned, rebalances; and the counts of
    messages that could not be decoded (sent to the group's DLQ undelivered) and of operators' resets
    and resends."""

    def __init__(
        self,
        queues: QueueRows,
        rebalances: Callable[[], dict[str, int]],
        undecodable: Callable[[], dict[str, int]],
        operator_actions: Callable[[], dict[tuple[str, str], int]],
    ) -> None:
        self._queues = queues
        self._rebalances = rebalances
        self._undecodable = undecodable
        self._operator_actions = operator_actions

    def collect(self) -> Iterable[GaugeMetricFamily | CounterMetricFamily]:
        labels = ["subscription", "topic", "broker", "queue"]
        lag = GaugeMetricFamily(
            "rocksidecar_consumer_lag",
            "Messages of an owned queue not yet consumed: the broker's max offset minus the committed one.",
            labels=labels,
        )
        in_flight = GaugeMetricFamily(
            "rocksidecar_consumer_in_flight",
            "Messages pulled and not yet done, per owned queue.",
            labels=labels,
        )
        owned = GaugeMetricFamily(
            "rocksidecar_consumer_queues_owned",
            "Queues this sidecar consumes now: kind=topic of the subscribed topic, kind=retry of the "
            "group's %RETRY% topic (one per broker, where failed messages come back).",
            labels=["subscription", "kind"],
        )
        counts: dict[tuple[str, str], int] = {}
        for sub, topic, broker, queue, lag_n, flight in self._queues():
            key = [sub, topic, broker, str(queue)]
            lag.add_metric(key, lag_n)
            in_flight.add_metric(key, flight)
            kind = "retry" if topic.startswith(RETRY_PREFIX) else "topic"
            counts[sub, kind] = counts.get((sub, kind), 0) + 1
        rebalances = GaugeMetricFamily(
            "rocksidecar_consumer_rebalances",
            "Rebalances done since start (queues re-divided among the group's members).",
            labels=["subscription"],
        )
        for sub, n in self._rebalances().items():
            rebalances.add_metric([sub], n)
            for kind in ("topic", "retry"):
                owned.add_metric([sub, kind], counts.get((sub, kind), 0))
        undecodable = _counter_by_label(
            "rocksidecar_consumer_undecodable",
            "Messages that could not be decoded (a compressed body past max_body_bytes or corrupt, text "
            "that is not UTF-8): sent to the group's %DLQ% topic without reaching the app.",
            "subscription",
            self._undecodable().items(),
        )
        operator = CounterMetricFamily(
            "rocksidecar_consumer_operator_actions",
            "What operators' tools did to a subscription's group: action=reset, queues whose offset an "
            "mqadmin resetOffsetByTime or skipAccumulatedMessage set; action=resend, messages a broker "
            "handed over to be delivered once (the Dashboard's resend: CONSUME_MESSAGE_DIRECTLY).",
            labels=["subscription", "action"],
        )
        for (sub, action), n in sorted(self._operator_actions().items()):
            operator.add_metric([sub, action], n)
        yield lag
        yield in_flight
        yield owned
        yield rebalances
        yield undecodable
        yield operator
