"""Lanes beside the replay loop: one key's lane holds up no other message (README, "A sharding key's
order across an outage")."""

from __future__ import annotations

import asyncio

from rocksidecar.retry.keys import PENDING_CF, WAITING_CF
from rocksidecar.retry.record import RetryRecord
from rocksidecar.storage.kv import Delete
from tests.retry.conftest import Harness, record

KEY = "customer-7"


def keyed(id_: str) -> RetryRecord:
    return record(id_, "orders", sharding_key=KEY)


async def test_an_unkeyed_messages_ack_does_not_wait_for_a_busy_lanes_intake(h: Harness) -> None:
    """README: "Messages without a sharding key are replayed as before, in parallel, and one key's lane
    holds up no other key." An unkeyed message U and a key's head H, due together, are delivered in one
    replay batch; meanwhile 20 more messages of H's key are being spooled at once (a hot key's requests,
    held behind H). Their spools hold the lane's lock one after another, each until its own batch is
    synced, and the batch's acknowledgement (ack_many: U's and H's delete in one write) waits for that
    lock behind all of them: U, delivered, stays pending (claimed, sent again after a crash) for 20
    synced writes, where without H in its batch it is acknowledged by the next group commit."""
    writes: list[str] = []  # what each synced write carried: "ack U" or "spool"
    inner = h.kv.write

    def write(ops, *, sync, no_slowdown=False):  # type: ignore[no-untyped-def]
        inner(ops, sync=sync, no_slowdown=no_slowdown)
        if any(type(op) is Delete and op.cf == PENDING_CF and op.key.endswith(b":U") for op in ops):
            writes.append("ack U")
        elif any(op.cf == WAITING_CF for op in ops):
            writes.append("spool")

    h.kv.write = write  # type: ignore[method-assign]
    await h.store.spool_many([keyed("H"), record("U", "orders")])
    intake = [asyncio.ensure_future(h.store.spool(keyed(f"k{i:02d}"))) for i in range(20)]
    await h.start_loop(workers=1, deliver_batch=h.deliver_batch, batch_max=32).start()
    await asyncio.gather(*intake)
    await h.settle()
    assert h.batch_sizes[0] == 2  # U and H in one replay batch, as the scenario needs
    assert "ack U" in writes
    spools_first = writes.index("ack U")  # synced writes of the lane's intake that landed before it
    assert spools_first <= 1, f"U's ack waited for {spools_first} synced spools of another key's lane"
