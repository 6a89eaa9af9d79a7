"""A service-mode cancel of a delayed message whose inner message is still spooled here (no broker took it
when it was scheduled): it is taken back out of the retry store, so CANCELLED holds and the status says so.

Before, the cancel message was spooled beside it: the inner message, spooled first, came due first and,
replayed after its due time, was published at once by the service; the cancel arrived too late. And the
status kept saying SPOOLED (the retry store's lookup comes first)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from rocksidecar.app.dmq.forward import COLUMN_FAMILIES as FORWARD_CFS
from rocksidecar.app.dmq.forward import FORWARDED_CF, Forwarder
from rocksidecar.app.lookups import RetryLookup
from rocksidecar.app.sidecar import Sidecar, Status
from rocksidecar.delay import CancelOutcome
from rocksidecar.retry.keys import COLUMN_FAMILIES as RETRY_CFS
from rocksidecar.retry.policy import RetryPolicy
from rocksidecar.retry.store import RetryStore
from rocksidecar.storage.errors import StorageError
from rocksidecar.storage.group_commit import GroupCommitWriter
from rocksidecar.storage.kv import Op
from rocksidecar.storage.memory import MemoryKV
from tests.app.dmq.test_forward_spool import INNER, Clock, Unreachable, prepared

POLICY = RetryPolicy((2.0,), 5)


def parts(
    clock: Clock, writer_type: type[GroupCommitWriter] = GroupCommitWriter
) -> tuple[RetryStore, Forwarder, Sidecar]:
    kv = MemoryKV(FORWARD_CFS + RETRY_CFS)
    writer = writer_type(kv)
    retry = RetryStore(kv, writer=writer, now_ms=clock)
    down = Unreachable(clock)  # no broker answers: every send and cancel is spooled
    fwd = Forwarder(
        down, retry, kv, writer, policy_for=lambda _t: POLICY, now_ms=clock,  # type: ignore[arg-type]
        inner_topic=INNER, withdraw=retry.withdraw,
    )  # fmt: skip
    sc = Sidecar(
        down, retry, policy_for=lambda _t: POLICY, delay=fwd, lookups=[RetryLookup(retry.get), fwd],
        canceller=fwd, now_ms=clock,
    )  # fmt: skip
    return retry, fwd, sc


async def test_a_cancel_takes_the_spooled_inner_message_back() -> None:
    clock = Clock()
    retry, _fwd, sc = parts(clock)
    clock.ms = 1_000
    assert (await sc.send(prepared("id-x", 2_500))).status is Status.SCHEDULED  # spooled: no broker
    assert retry.pending_count == 1
    clock.ms = 1_600
    assert await sc.cancel("id-x") is CancelOutcome.CANCELLED
    assert retry.pending_count == 0 and retry.get("id-x") is None  # never replayed, so never published
    state = await sc.status("id-x")
    assert state is not None and state.status is Status.CANCELLED
    assert await sc.cancel("id-x") is CancelOutcome.CANCELLED  # again: the same answer


async def test_one_in_flight_is_left_to_its_replay_and_the_cancel_is_sent_after_it() -> None:
    clock = Clock()
    retry, _fwd, sc = parts(clock)
    clock.ms = 1_000
    await sc.send(prepared("id-y", 60_000))
    spooled = retry.get("id-y")
    assert spooled is not None
    key = spooled.key
    assert retry.queue.claim(key)  # a replay has it: it may be sending it right now
    assert await sc.cancel("id-y") is CancelOutcome.CANCELLED
    # the inner message stays with its replay; the cancel is spooled behind it, as before
    assert retry.pending_count == 2
    retry.queue.release([key])


class ForwardedRecordFails(GroupCommitWriter):
    """The shared writer; writes of the forwarder's records fail while ``failing`` (a full disk that the
    retry store's purge, written first, still had room for)."""

    failing = False

    async def write(self, ops: Sequence[Op], *, lazy: bool = False) -> None:
        if self.failing and any(op.cf == FORWARDED_CF for op in ops):
            raise StorageError("No space left on device")
        await super().write(ops, lazy=lazy)


async def test_a_cancel_answered_503_leaves_the_message_deliverable() -> None:
    # A service-mode cancel whose own record cannot be written leaves the message on its way, as its
    # 503 says: the withdrawal of a spooled inner message and the cancelled record are one write.
    clock = Clock()
    retry, fwd, sc = parts(clock, ForwardedRecordFails)
    writer = fwd.writer
    assert isinstance(writer, ForwardedRecordFails)
    clock.ms = 1_000
    assert (await sc.send(prepared("id-x", 60_000))).status is Status.SCHEDULED  # 202: spooled
    clock.ms = 1_600
    before = await sc.status("id-x")
    assert before is not None and before.status is Status.SPOOLED  # on its way to the service
    writer.failing = True
    with pytest.raises(StorageError):  # the API answers 503: "nothing was acknowledged"
        await sc.cancel("id-x")
    # Not cancelled, as the 503 said: the message is still on its way to the service (it was deleted,
    # and the status said SCHEDULED for a message gone).
    assert await sc.status("id-x") == before
    assert retry.get("id-x") is not None
    writer.failing = False  # room again: the client's retry of the cancel takes it back
    assert await sc.cancel("id-x") is CancelOutcome.CANCELLED
    after = await sc.status("id-x")
    assert retry.get("id-x") is None and after is not None and after.status is Status.CANCELLED
