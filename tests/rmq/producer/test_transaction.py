"""TransactionProducer against a scripted broker: what a half's answer must hold for END_TRANSACTION."""

from __future__ import annotations

import pytest

from rocksidecar.rmq.codes import RequestCode
from rocksidecar.rmq.errors import FrameError
from rocksidecar.rmq.message import Message
from rocksidecar.rmq.producer.transaction import TransactionProducer, commit_log_offset
from tests.fakes import send_ok
from tests.rmq.producer.harness import Harness

OFFSET_ID = "0A00000100002A9F" + "000000000000BEEF"  # store host 10.0.0.1:10911, commit-log offset 0xBEEF

# Not offset ids: int(x, 16) took the last two ('+', '_'), and full-width digits.
NOT_OFFSET_IDS = [
    "NOT-AN-OFFSET-ID",
    "",
    OFFSET_ID[:-1],
    "0A00000100002A9F" + "+00000000000BEEF",
    "0A00000100002A9F" + "0000_0000000BEEF",
    "0A00000100002A9F" + "\uff10" * 16,
]


def test_commit_log_offset_is_the_last_8_bytes_of_an_offset_id() -> None:
    assert commit_log_offset(OFFSET_ID) == 0xBEEF
    assert commit_log_offset("00" * 16 + OFFSET_ID[-24:].lower()) == 0xBEEF  # IPv6 store host: 56
    for odd in NOT_OFFSET_IDS:
        with pytest.raises(ValueError, match="not an offset message id"):
            commit_log_offset(odd)


@pytest.mark.parametrize("msg_id", NOT_OFFSET_IDS)
async def test_a_half_stored_with_an_odd_msg_id_fails_as_a_frame_error(msg_id: str) -> None:
    # Before: a bare ValueError (or a made-up offset), past send_half's callers, which catch RocketMQError.
    h = Harness()
    h.behaviour["broker-a"] = h.behaviour["broker-b"] = lambda cmd: send_ok(cmd, 3, msg_id=msg_id)
    tx = TransactionProducer(h.producer(), "txg")
    with pytest.raises(FrameError, match=r"half message \w+ stored on broker-. with a msgId that is not an"):
        await tx.send_half(Message("T", b"x"))
    assert len(h.invoker.sends()) == 1  # stored: not sent again


async def test_a_half_with_an_offset_id_gets_its_receipt() -> None:
    h = Harness()
    h.behaviour["broker-a"] = h.behaviour["broker-b"] = lambda cmd: send_ok(cmd, 3, msg_id=OFFSET_ID)
    receipt = await TransactionProducer(h.producer(), "txg").send_half(Message("T", b"x"))
    assert (receipt.commit_log_offset, receipt.queue_offset, receipt.offset_msg_id) == (0xBEEF, 3, OFFSET_ID)
    [(_, cmd, _)] = h.invoker.sends()
    assert cmd.code == RequestCode.SEND_MESSAGE_V2
    assert cmd.ext_fields["a"] == "txg"  # the half's group (PGROUP)
