"""CONSUME_MESSAGE_DIRECTLY (309): a broker hands one stored message to one member of a group (the RocketMQ
Dashboard's "resend message" to a client, ``mqadmin queryMsgById -i ID -g GROUP -d CLIENT``), which gives
it to its listener once, outside any queue's flow (no offset moves, nothing is sent back), and answers
ConsumeMessageDirectlyResult, as Java's ConsumeMessage{Concurrently,Orderly}Service.consumeMessageDirectly.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import orjson

from ..message import MessageExt, MessageQueue
from .config import ConsumeStatus, MessageListener

log = logging.getLogger(__name__)

# CMResult of each status (Java's: SUCCESS; RECONSUME_LATER and orderly's SUSPEND are CR_LATER). A message
# the listener dead-letters has no Java counterpart: CR_LATER too, the remark saying so.
_RESULTS = {
    ConsumeStatus.SUCCESS: "CR_SUCCESS",
    ConsumeStatus.RECONSUME_LATER: "CR_LATER",
    ConsumeStatus.SUSPEND: "CR_LATER",
    ConsumeStatus.DEAD_LETTER: "CR_LATER",
}


async def consume_directly(
    listener: MessageListener,
    msg: MessageExt,
    mq: MessageQueue,
    *,
    orderly: bool,
    clock: Callable[[], float] = time.monotonic,
) -> bytes:
    """The listener's answer for ``msg`` as the body of ConsumeMessageDirectlyResult (fastjson's field
    order); an exception of the listener is CR_THROW_EXCEPTION with its text, as Java's."""
    began = clock()
    remark: str | None = None
    try:
        answer = await listener([msg], mq)
    except Exception as exc:  # the listener is the app's side: its failure is the answer, not ours
        log.warning("consume directly: the listener failed on %s of %s: %r", msg.msg_id, mq, exc)
        result, remark = "CR_THROW_EXCEPTION", f"{type(exc).__name__}: {exc}"
    else:
        status = answer if isinstance(answer, ConsumeStatus) else next(iter(answer or ()), None)
        result = (
            _RESULTS.get(status, "CR_RETURN_NULL") if isinstance(status, ConsumeStatus) else "CR_RETURN_NULL"
        )
        if status is ConsumeStatus.DEAD_LETTER:
            remark = "the listener dead-lettered it (DEAD_LETTER)"
    doc: dict[str, object] = {"autoCommit": True, "consumeResult": result, "order": orderly}
    if remark is not None:
        doc["remark"] = remark
    doc["spentTimeMills"] = int((clock() - began) * 1000)
    log.info("consume directly: %s of %s: %s", msg.msg_id, mq, result)
    return orjson.dumps(doc)
