"""A SENT done marker may say where the message was stored; markers written before that still read."""

from __future__ import annotations

from rocksidecar.delay import DelayState, StoredAt
from rocksidecar.delay.keys import DONE_CF, SENT, done_value
from rocksidecar.storage.kv import Put
from tests.delay.conftest import Harness


async def test_where_a_message_was_sent_is_kept_and_old_markers_still_read(h: Harness) -> None:
    to = StoredAt("broker-b", 3, 41, "7F00000100002A9F0000000000012345")
    await h.store.record_sent(["W", "N"], [to, None])
    w, n = h.store.get("W"), h.store.get("N")
    assert w is not None and (w.state, w.sent_to, w.at_ms) == (DelayState.SENT, to, h.store.now_ms())
    assert n is not None and n.state is DelayState.SENT and n.sent_to is None
    h.kv.write([Put(DONE_CF, b"OLD", done_value(SENT, 1_700_000_000_000))], sync=True)  # the old format
    old = h.store.get("OLD")
    assert old is not None and (old.state, old.at_ms, old.sent_to) == (
        DelayState.SENT,
        1_700_000_000_000,
        None,
    )
