"""Rock-DMQ keeps a message's trace context: the real message it publishes carries the same
TRACE_CONTEXT/TRACE_STATE as the inner message it consumed."""

from __future__ import annotations

from rocksidecar.app.tracing.context import TRACEPARENT_PROPERTY, TRACESTATE_PROPERTY
from rocksidecar.rmq.msgid import new_uniq_id
from tests.app.dmq.conftest import DmqStack
from tests.app.dmq.test_dmq_devbroker import delayed, send_inner

TP = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


async def test_the_published_message_keeps_the_trace_context(stack: DmqStack) -> None:
    props = {TRACEPARENT_PROPERTY: TP, TRACESTATE_PROPERTY: "a=b"}
    await send_inner(stack, delayed(new_uniq_id(), stack.service.delay.now_ms() + 100, properties=props))
    await stack.received.until(bool)
    (out,) = stack.received.got
    assert out.properties[TRACEPARENT_PROPERTY] == TP and out.properties[TRACESTATE_PROPERTY] == "a=b"
