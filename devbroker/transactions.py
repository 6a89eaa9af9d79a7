"""Transactional messages as the 4.9.4 broker keeps them (TransactionalMessageBridge,
EndTransactionProcessor, TransactionalMessageCheckService).

A half message is stored in RMQ_SYS_TRANS_HALF_TOPIC queue 0 with its real topic and queue in REAL_TOPIC
and REAL_QID, out of every consumer's sight. END_TRANSACTION with the half's commit-log offset commits
(the message is stored again in its real queue) or rolls back; either way an op message whose body is
the half's queue offset goes to RMQ_SYS_TRANS_OP_HALF_TOPIC, which is how a restarted broker knows
which halves are decided. Every ``check_interval_s`` the undecided halves born more than ``timeout_ms``
ago (by the producer's bornTimestamp) are asked about (CHECK_TRANSACTION_STATE, one-way) on a connection
of their producer group (PGROUP), at most ``max_checks`` times each (a round with no producer online
counts too); then they are dropped, as Java's broker does.

As Java's, a repeated commit of the same half stores the message again: the broker does not look at
the op topic when it ends a transaction. The check counts live in memory (Java re-appends the half
with TRANSACTION_CHECK_TIMES); a restarted devbroker counts from zero.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field

from rocksidecar.rmq.broker import TRANSACTION_COMMIT_TYPE, TRANSACTION_NOT_TYPE, TRANSACTION_ROLLBACK_TYPE
from rocksidecar.rmq.codes import FLAG_ONEWAY, RequestCode, ResponseCode
from rocksidecar.rmq.connection import Connection
from rocksidecar.rmq.message import MessageExt
from rocksidecar.rmq.message_codec import (
    decode_stored,
    decode_stored_all,
)
from rocksidecar.rmq.protocol.frame import RemotingCommand

from .clients import ClientRegistry
from .headers import Reject, boolean, integer, text
from .store import MessageStore, NewMessage, packed_host, tag_code

log = logging.getLogger(__name__)

HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
OP_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
REAL_TOPIC = "REAL_TOPIC"
REAL_QID = "REAL_QID"
OP_TAG = "d"  # TransactionalMessageUtil.REMOVETAG
TRANSACTION_BITS = 0xC
DEFAULT_CHECK_INTERVAL_S = 60.0  # transactionCheckInterval
DEFAULT_TIMEOUT_MS = 6000  # transactionTimeOut
DEFAULT_MAX_CHECKS = 15  # transactionCheckMax
_SCAN = 32


def _reset_transaction(sys_flag: int, kind: int) -> int:
    return (sys_flag & ~TRANSACTION_BITS) | kind


@dataclass(eq=False)
class Transactions:
    store: MessageStore
    clients: ClientRegistry
    _: KW_ONLY
    now_ms: Callable[[], int]
    timeout_ms: int = DEFAULT_TIMEOUT_MS
    max_checks: int = DEFAULT_MAX_CHECKS
    on_decided: Callable[[int, int], None] | None = field(default=None, init=False)  # (half, kind): tests
    _checks: dict[int, int] = field(default_factory=dict, init=False)  # half queue offset -> checks sent
    _done: set[int] = field(default_factory=set, init=False)  # decided (or dropped) half queue offsets
    _scan_from: int = field(default=0, init=False)  # every half before it is decided
    _opaque: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        self._rebuild()

    # sending a half -------------------------------------------------------------------------------
    @staticmethod
    def is_half(properties: str) -> bool:
        """SendMessageProcessor looks at TRAN_MSG, not at the system flag."""
        return "TRAN_MSG\x01true" in properties.split("\x02")

    @staticmethod
    def half(topic: str, queue_id: int, message: NewMessage) -> NewMessage:
        """parseHalfMessageInner: the real topic and queue become properties, the transaction bits of
        the system flag are cleared, and the message goes to the half topic's queue 0."""
        props = f"{message.properties}\x02{REAL_TOPIC}\x01{topic}\x02{REAL_QID}\x01{queue_id}"
        return NewMessage(
            message.body,
            message.flag,
            _reset_transaction(message.sys_flag, TRANSACTION_NOT_TYPE),
            message.born_timestamp_ms,
            message.born_host,
            props,
            message.tag_code,
            message.reconsume_times,
        )

    # END_TRANSACTION ------------------------------------------------------------------------------
    async def end(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        ext = cmd.ext_fields
        kind = integer(ext, "commitOrRollback")
        group = text(ext, "producerGroup")
        table_offset = integer(ext, "tranStateTableOffset")
        log_offset = integer(ext, "commitLogOffset")
        if kind not in (TRANSACTION_COMMIT_TYPE, TRANSACTION_ROLLBACK_TYPE):
            # Java answers nothing; an answer here only spares a two-way caller its timeout
            log.info(
                "END_TRANSACTION %s (from check: %s) left undecided",
                log_offset,
                boolean(ext, "fromTransactionCheck"),
            )
            return cmd.response(ResponseCode.SUCCESS, None)
        half = self._half_at(log_offset)
        if half is None:
            raise Reject(ResponseCode.SYSTEM_ERROR, "Find prepared transaction message failed")
        if half.properties.get("PGROUP") != group:
            raise Reject(ResponseCode.SYSTEM_ERROR, "The producer group wrong")
        if half.queue_offset != table_offset:
            raise Reject(ResponseCode.SYSTEM_ERROR, "The transaction state table offset wrong")
        if kind == TRANSACTION_COMMIT_TYPE:
            self._store_final(half)
        self._decided(half.queue_offset)
        if self.on_decided is not None:
            self.on_decided(half.queue_offset, kind)
        return cmd.response(ResponseCode.SUCCESS, None)

    def _half_at(self, commit_log_offset: int) -> MessageExt | None:
        record = self.store.record_at(commit_log_offset)
        if record is None:
            return None
        msg, _ = decode_stored(record, inflate=False)
        return msg if msg.topic == HALF_TOPIC else None

    def _store_final(self, half: MessageExt) -> None:
        """endMessageTransaction + sendFinalMessage: the half, back in its real queue."""
        props = dict(half.properties)
        topic, queue_id = props.pop(REAL_TOPIC), int(props.pop(REAL_QID))
        props.pop("TRAN_MSG", None)
        sys_flag = _reset_transaction(half.sys_flag, TRANSACTION_COMMIT_TYPE)
        self.store.put(topic, queue_id, [NewMessage.again(half, props, sys_flag=sys_flag)])

    def _decided(self, half_offset: int) -> None:
        op = NewMessage(
            str(half_offset).encode(),
            0,
            0,
            self.now_ms(),
            packed_host("127.0.0.1:0"),
            f"TAGS\x01{OP_TAG}",
            tag_code(OP_TAG),
        )
        self.store.put(OP_TOPIC, 0, [op])
        self._done.add(half_offset)
        self._checks.pop(half_offset, None)

    # check-back -------------------------------------------------------------------------------------
    def check_round(self) -> int:
        """One round of TransactionalMessageCheckService (TransactionalMessageServiceImpl.check): every
        undecided half stored before the round and older than the timeout by its producer's born time
        counts one check, whether or not a producer of its group is online to be asked (4.9.4 puts the
        half back with TRANSACTION_CHECK_TIMES + 1 either way); one checked ``max_checks`` times is
        dropped. Returns how many checks were sent."""
        sent = 0
        start = self.now_ms()
        offset = self._scan_from
        end = self.store.max_offset(HALF_TOPIC, 0)
        while offset < end:
            result = self.store.get(HALF_TOPIC, 0, offset, _SCAN, None)
            if not result.body:
                offset = result.next_begin_offset if result.next_begin_offset > offset else end
                continue
            for half in decode_stored_all(result.body):
                offset = half.queue_offset + 1
                if half.queue_offset in self._done:
                    continue
                if self._checks.get(half.queue_offset, 0) >= self.max_checks:  # needDiscard comes first
                    log.warning("half %s checked %d times; dropped", half.uniq_key, self.max_checks)
                    self._decided(half.queue_offset)
                    continue
                if half.store_timestamp_ms >= start:
                    return sent  # stored during this round: the next one looks at it
                # The immunity runs from the producer's clock (bornTimestamp); a negative age (that clock
                # runs ahead of the broker's) is checked at once, as Java's valueOfCurrentMinusBorn <= -1.
                if 0 <= start - half.born_timestamp_ms <= self.timeout_ms:
                    return sent  # Java stops the round at the first half still immune
                self._checks[half.queue_offset] = self._checks.get(half.queue_offset, 0) + 1
                if self._ask(half):
                    sent += 1
            self._advance()
        return sent

    def _advance(self) -> None:
        while self._scan_from in self._done:
            self._done.discard(self._scan_from)
            self._scan_from += 1

    def _ask(self, half: MessageExt) -> bool:
        conn = self.clients.producer_connection(half.properties.get("PGROUP", ""))
        if conn is None:
            return False  # Java logs "channel is null" (the check still counts) and tries next round
        props = dict(half.properties)
        topic, queue_id = props.get(REAL_TOPIC, half.topic), int(props.get(REAL_QID, half.queue_id))
        props["TRANSACTION_CHECK_TIMES"] = str(self._checks[half.queue_offset])
        body = NewMessage.again(half, props).record(
            topic,
            queue_id,
            half.queue_offset,
            half.commit_log_offset,
            half.store_timestamp_ms,
            packed_host(half.store_host),
        )
        uniq = half.uniq_key or half.offset_msg_id
        header = {
            "tranStateTableOffset": str(half.queue_offset),
            "commitLogOffset": str(half.commit_log_offset),
            "msgId": uniq,
            "transactionId": uniq,
            "offsetMsgId": half.offset_msg_id,
        }
        self._opaque += 1
        conn.send(
            RemotingCommand(
                RequestCode.CHECK_TRANSACTION_STATE, header, body, opaque=self._opaque, flag=FLAG_ONEWAY
            )
        )
        return True

    def undecided(self) -> int:
        """How many halves wait for a decision (for the admin endpoint and tests)."""
        end = self.store.max_offset(HALF_TOPIC, 0)
        return sum(1 for o in range(self._scan_from, end) if o not in self._done)

    def _rebuild(self) -> None:
        for op in self.store.messages(OP_TOPIC, 0):
            try:
                self._done.add(int(op.body))
            except ValueError:
                continue
        self._scan_from = self.store.min_offset(HALF_TOPIC, 0)
        self._advance()
