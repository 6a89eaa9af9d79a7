"""Begin, decide and check transactions in broker mode (RocketMQ half messages).

begin: the half is stored by a broker, then its receipt is synced; commit/rollback: the decision is
synced, then END_TRANSACTION goes to the broker that holds the half. A decision the broker did not
acknowledge is re-sent by ``resend`` (at start and periodically). A broker's check-back is answered from
the record when it holds a decision, else by the app (``ask_app``), as Java's checkLocalTransaction.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace

from rocksidecar.rmq.errors import RocketMQError
from rocksidecar.rmq.message import Message
from rocksidecar.rmq.producer.transaction import CheckRequest, TransactionProducer, TransactionState

from .records import Decision, Record, TransactionRecords

log = logging.getLogger(__name__)

# The app's answer for an undecided transaction: its id, its transactionKey (None if unknown here) and
# its topic (app_check.AppCheck asks the app's check endpoint).
AskApp = Callable[[str, str | None, str], Awaitable[TransactionState]]


class TransactionNotFound(LookupError):
    """No transaction has this id here (HTTP 404)."""


class TransactionConflict(Exception):
    """The transaction was decided the other way already (HTTP 409)."""


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


class TransactionCoordinator:
    def __init__(
        self,
        records: TransactionRecords,
        producer: TransactionProducer,
        ask_app: AskApp | None,
        *,
        now_ms: Callable[[], int] = _wall_ms,
    ) -> None:
        self.records = records
        self.producer = producer
        self._ask_app = ask_app
        self._now_ms = now_ms
        producer.checker = self.check  # the brokers' checks are answered from the records

    async def begin(
        self, msg: Message, *, transaction_key: str | None = None, sharding_key: str | None = None
    ) -> Record:
        """Store the half (SendFailed when no broker did) and sync its record."""
        receipt = await self.producer.send_half(msg, sharding_key=sharding_key)
        record = Record(receipt.msg_id, receipt, self._now_ms(), transaction_key)
        await self.records.put(record)
        return record

    async def decide(self, tx_id: str, decision: Decision) -> Record:
        """Sync ``decision`` then send it. Deciding the same way again answers the same record (and
        re-sends it if the broker never acknowledged it); the other way raises TransactionConflict."""
        if decision is Decision.NONE:
            raise ValueError("a decision is COMMIT or ROLLBACK")
        record = self.records.get(tx_id)
        if record is None:
            raise TransactionNotFound(tx_id)
        if record.decision is not Decision.NONE and record.decision is not decision:
            raise TransactionConflict(f"transaction {tx_id} is already {record.decision.value}")
        if record.decision is Decision.NONE:
            record = record.decided(decision, self._now_ms())
            await self.records.put(record)  # synced before anyone hears of the decision
        if not record.acknowledged:
            record = await self._send(record)
        return record

    async def _send(self, record: Record) -> Record:
        try:
            await self.producer.end(record.receipt, record.decision.state)
        except RocketMQError as exc:  # the record holds the decision: resend or a check delivers it
            log.warning("END_TRANSACTION of %s not acknowledged: %s", record.id, exc)
            return record
        acked = replace(record, acknowledged=True)
        await self.records.put(acked, sync=False)  # losing it costs one more END, which the broker tolerates
        return acked

    async def resend(self) -> int:
        """Re-send every decision the brokers did not acknowledge; returns how many they now did."""
        done = 0
        for record in self.records.open():
            if record.decision is not Decision.NONE and (await self._send(record)).acknowledged:
                done += 1
        return done

    async def check(self, request: CheckRequest) -> TransactionState:
        """A broker asks: the record's decision, else the app's answer (UNKNOWN without an app)."""
        record = self.records.get(request.msg_id)
        if record is not None and record.decision is not Decision.NONE:
            return record.decision.state
        if self._ask_app is None:
            return TransactionState.UNKNOWN
        key = record.transaction_key if record is not None else None
        state = await self._ask_app(request.msg_id, key, request.message.topic)
        if record is not None and state is not TransactionState.UNKNOWN:
            decision = Decision.COMMIT if state is TransactionState.COMMIT else Decision.ROLLBACK
            # acknowledged: the broker acts on the answer to its own check
            await self.records.put(replace(record.decided(decision, self._now_ms()), acknowledged=True))
        return state
