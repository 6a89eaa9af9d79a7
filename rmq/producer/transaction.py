"""Transactions on RocketMQ's own protocol, as Java's TransactionMQProducer runs them.

A half message (TRAN_MSG, PGROUP) is stored by a broker but kept from consumers; END_TRANSACTION to that
broker commits or rolls it back. A half left undecided is asked about by the broker
(CHECK_TRANSACTION_STATE) on a connection of a client whose heartbeat announced the group; the answer
is an END_TRANSACTION with fromTransactionCheck. Unlike Java, the decision and the check answer are the
caller's (the sidecar keeps its own record): this module only speaks the protocol.
"""

from __future__ import annotations

import enum
import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from ..broker import (
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_NOT_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    EndTransaction,
)
from ..clock import wall_ms
from ..codes import RequestCode
from ..connection import Connection
from ..errors import FrameError, RocketMQError, RouteNotFound, SendFailed
from ..message import Message, MessageExt, MessageQueue
from ..msgid import new_uniq_id
from ..protocol.frame import RemotingCommand
from ..result import SendResult, SendStatus
from .producer import Producer
from .publish_info import TopicPublishInfo

log = logging.getLogger(__name__)


class TransactionState(enum.Enum):
    """Java's LocalTransactionState, valued by the commitOrRollback it sends."""

    COMMIT = TRANSACTION_COMMIT_TYPE
    ROLLBACK = TRANSACTION_ROLLBACK_TYPE
    UNKNOWN = TRANSACTION_NOT_TYPE


# An offset message id: the store host (IPv4 or IPv6 address and port) and the commit-log offset, in hex.
_OFFSET_MSG_ID = re.compile(r"[0-9A-Fa-f]{32}|[0-9A-Fa-f]{56}")


def commit_log_offset(offset_msg_id: str) -> int:
    """MessageDecoder.decodeMessageId: the commit-log offset is the last 8 bytes of the offset id;
    ValueError when it is not an offset id (int() alone would take '+', '_' or non-ASCII digits)."""
    if not _OFFSET_MSG_ID.fullmatch(offset_msg_id):
        raise ValueError(f"not an offset message id: {offset_msg_id[:80]!r}")
    return int(offset_msg_id[-16:], 16)


@dataclass(frozen=True, slots=True)
class HalfReceipt:
    """Where a broker stored a half message: all END_TRANSACTION needs, for as long as the caller keeps
    it (the sidecar syncs it so that a decision survives a restart)."""

    group: str
    msg_id: str  # UNIQ_KEY, which Java also uses as the transaction id
    broker_name: str
    queue: MessageQueue  # the real topic's queue the broker chose
    queue_offset: int  # the half's offset in RMQ_SYS_TRANS_HALF_TOPIC: tranStateTableOffset
    commit_log_offset: int
    offset_msg_id: str

    def end(self, state: TransactionState, *, from_check: bool = False) -> EndTransaction:
        ids = (self.msg_id, self.msg_id)  # the transaction id is the UNIQ_KEY, as Java's
        return _end(self.group, (self.queue_offset, self.commit_log_offset), ids, state, from_check)


@dataclass(frozen=True, slots=True)
class CheckRequest:
    """A broker's CHECK_TRANSACTION_STATE: the half it asks about (``message``) and whom to answer."""

    broker_addr: str
    tran_state_table_offset: int
    commit_log_offset: int
    msg_id: str  # the half's UNIQ_KEY (or its offset id when it has none)
    transaction_id: str
    message: MessageExt

    def answer(self, group: str, state: TransactionState) -> EndTransaction:
        offsets = (self.tran_state_table_offset, self.commit_log_offset)
        return _end(group, offsets, (self.msg_id, self.transaction_id), state, True)


def _end(
    group: str, offsets: tuple[int, int], ids: tuple[str, str], state: TransactionState, from_check: bool
) -> EndTransaction:
    """END_TRANSACTION of the half at ``offsets`` (its half-topic offset, its commit-log offset) with
    ``ids`` (msgId, transactionId): a decision, or the answer to a check."""
    return EndTransaction(
        producer_group=group,
        tran_state_table_offset=offsets[0],
        commit_log_offset=offsets[1],
        state=state.value,
        msg_id=ids[0],
        transaction_id=ids[1],
        from_transaction_check=from_check,
    )


# Decides a check: the caller's record, or its app. Raising counts as UNKNOWN (the broker asks again).
Checker = Callable[[CheckRequest], Awaitable[TransactionState]]


class TransactionHook(Protocol):
    """What watches a transaction producer, as Java's SendMessageHook and EndTransactionHook do (the
    sidecar's message trace). Called inline: it must neither wait nor raise."""

    def half_stored(self, group: str, msg: Message, result: SendResult, started_ms: int) -> None:
        """A broker stored ``msg`` as a half (degraded too) at ``result``; the send began at
        ``started_ms`` (wall clock)."""

    def ending(self, end: EndTransaction, topic: str, broker_addr: str, msg: MessageExt | None) -> None:
        """``end`` is about to go to ``broker_addr``: a decision, or the answer to a check of ``msg``."""


def _header_int(cmd: RemotingCommand, name: str) -> int:
    try:
        return int(cmd.ext_fields[name])
    except (KeyError, ValueError) as exc:
        raise ValueError(f"CHECK_TRANSACTION_STATE lacks a valid {name!r}") from exc


class TransactionProducer:
    """Half sends, decisions and check answers for one producer group, over a started Producer (whose
    client instance carries the group in its heartbeats)."""

    def __init__(self, producer: Producer, group: str, checker: Checker | None = None) -> None:
        """``checker``: decides the brokers' checks (settable later, e.g. by whoever keeps the
        record); without one every check is answered UNKNOWN."""
        if not group:
            raise ValueError("a transaction producer group must be non-empty")
        self.producer = producer
        self.group = group
        self.checker = checker
        self.checks_answered = 0
        # Set by whoever watches (the sidecar's message trace, when on); None costs one check per call.
        self.hook: TransactionHook | None = None

    def start(self) -> None:
        self.producer.instance.register_transaction_checker(self.group, self._on_check)

    async def close(self) -> None:
        self.producer.instance.unregister_transaction_checker(self.group)
        await self.producer.instance.unregister(producer_group=self.group)

    async def send_half(self, msg: Message, *, sharding_key: str | None = None) -> HalfReceipt:
        """Store ``msg`` as a half message (retried on other brokers like a plain send); raises
        SendFailed when no broker stored it. A degraded store (e.g. FLUSH_DISK_TIMEOUT) is a failure
        here, and its half is rolled back first, as Java's sendMessageInTransaction does: the half may
        not survive to be committed, and the caller may carry the message another way (the sidecar's
        local outbox, under the same UNIQ_KEY), which a later commit of this half would duplicate."""
        msg.validate(self.producer.config.max_body_bytes)
        uniq = msg.id or new_uniq_id()
        group = self.group

        async def attempt(
            mq: MessageQueue, addr: str, remaining: float, info: TopicPublishInfo
        ) -> SendResult:
            return await self.producer.api.send(
                addr, mq, msg, uniq, remaining, self.producer.config.default_topic, half_of_group=group
            )

        hook = self.hook
        started = wall_ms() if hook is not None else 0
        result = await self.producer.with_retries(
            msg.topic, self.producer.selector_for(sharding_key), attempt, uniq, msg
        )
        if hook is not None:  # before its checks: a degraded half is seen too, as Java's hook sees it
            hook.half_stored(group, msg, result, started)
        degraded = result.status is not SendStatus.SEND_OK
        try:
            offset = commit_log_offset(result.offset_msg_id)
        except ValueError as exc:
            # Stored, but END_TRANSACTION cannot name it: the broker's checks decide it, as in Java when
            # its endTransaction fails.
            if degraded:
                raise SendFailed(
                    f"half message {uniq} stored only as {result.status.value}", [], None
                ) from exc
            broker = result.queue.broker_name
            raise FrameError(
                f"half message {uniq} stored on {broker} with a msgId that is not an offset id: {exc}"
            ) from exc
        receipt = HalfReceipt(
            group=group,
            msg_id=uniq,
            broker_name=result.queue.broker_name,
            queue=result.queue,
            queue_offset=result.queue_offset,
            commit_log_offset=offset,
            offset_msg_id=result.offset_msg_id,
        )
        if degraded:
            await self._roll_back_degraded(receipt, result.status)
            raise SendFailed(f"half message {uniq} stored only as {result.status.value}", [], None)
        return receipt

    async def _roll_back_degraded(self, receipt: HalfReceipt, status: SendStatus) -> None:
        """Best effort, as Java's (which logs a failed endTransaction and goes on): should the rollback
        not arrive, the broker's checks of the half ask the checker (the sidecar answers ROLLBACK for a
        transaction it carries in its local outbox). Its failure never hides the send's own error."""
        try:
            await self.end(receipt, TransactionState.ROLLBACK)
        except RocketMQError as exc:
            log.warning(
                "half message %s stored only as %s; its rollback was not acknowledged: %s",
                receipt.msg_id, status.value, exc,
            )  # fmt: skip

    def broker_addr(self, receipt: HalfReceipt) -> str:
        """The master address of the broker that holds the half: END_TRANSACTION goes only there."""
        addr = self.producer.instance.broker_addrs().get(receipt.broker_name)
        if addr is None:
            raise RouteNotFound(f"broker {receipt.broker_name} of transaction {receipt.msg_id} is not known")
        return addr

    async def resolve(self, receipt: HalfReceipt) -> str:
        """broker_addr, fetching the topic's route first when the broker is not known yet (a restart)."""
        try:
            return self.broker_addr(receipt)
        except RouteNotFound:
            await self.producer.instance.get_route(receipt.queue.topic)
            return self.broker_addr(receipt)

    async def end(self, receipt: HalfReceipt, state: TransactionState, *, timeout_s: float = 3.0) -> None:
        """Send the decision and wait for the broker's answer (Java sends it one-way and never learns
        whether it arrived). Raises RocketMQError when it may not have reached the broker."""
        if state is TransactionState.UNKNOWN:
            raise ValueError("only COMMIT or ROLLBACK end a transaction")
        addr = await self.resolve(receipt)
        end = receipt.end(state)
        if self.hook is not None:  # before it is sent, as Java's doExecuteEndTransactionHook
            self.hook.ending(end, receipt.queue.topic, addr, None)
        await self.producer.api.end_transaction(addr, end, timeout_s=timeout_s)

    async def _on_check(self, conn: Connection, cmd: RemotingCommand, msg: MessageExt) -> None:
        try:
            request = CheckRequest(
                broker_addr=conn.addr,
                tran_state_table_offset=_header_int(cmd, "tranStateTableOffset"),
                commit_log_offset=_header_int(cmd, "commitLogOffset"),
                msg_id=msg.uniq_key or cmd.ext_fields.get("msgId", "") or msg.offset_msg_id,
                transaction_id=cmd.ext_fields.get("transactionId", "") or (msg.uniq_key or ""),
                message=msg,
            )
        except ValueError as exc:
            log.warning("transaction check from %s ignored: %s", conn.addr, exc)
            return
        try:
            state = await self.checker(request) if self.checker else TransactionState.UNKNOWN
        except Exception:  # the app's trouble: the broker asks again later, as after Java's UNKNOW
            log.exception("transaction check of %s failed; answering UNKNOWN", request.msg_id)
            state = TransactionState.UNKNOWN
        end = request.answer(self.group, state)
        if self.hook is not None:
            self.hook.ending(end, msg.topic, conn.addr, msg)
        try:  # on the connection the broker asked on, one-way, as Java's endTransactionOneway
            await conn.invoke_oneway(RemotingCommand(RequestCode.END_TRANSACTION, end.header()))
        except RocketMQError as exc:
            log.warning("answer to the transaction check of %s not sent: %s", request.msg_id, exc)
            return
        self.checks_answered += 1
