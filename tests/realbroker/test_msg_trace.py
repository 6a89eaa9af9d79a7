"""RocketMQ message trace on real RocketMQ 4.9.4 (brokers with traceTopicEnable=true): a message sent
through the sidecar and delivered by its subscription shows its Pub record and its SubBefore/SubAfter
records (one Sub row) in `mqadmin queryMsgTraceById`. Skipped unless ROCKSIDECAR_TEST_NAMESRV is set."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx

from rocksidecar.app.service import Service
from rocksidecar.app.subscriptions.spec import SubscriptionSpec
from tests.app.conftest import settings_for
from tests.app.push_app import push_app
from tests.realbroker.test_subscriptions import _topic

WAIT_S = 90.0


async def _query_trace(broker_ctl: Path, namesrv: str, msg_id: str) -> str:
    proc = await asyncio.create_subprocess_exec(
        str(broker_ctl), "java", "org.apache.rocketmq.tools.command.MQAdminStartup", "queryMsgTraceById",
        "-n", namesrv, "-i", msg_id,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    async with asyncio.timeout(WAIT_S):
        out, _ = await proc.communicate()
    return out.decode(errors="replace")


def _rows(text: str, kind: str) -> list[list[str]]:
    """The distinct rows of one kind (Pub, Sub) that queryMsgTraceById printed."""
    rows = {tuple(line.split()) for line in text.splitlines() if line.split()[:1] == [kind]}
    return [list(r) for r in sorted(rows)]


async def test_mqadmin_shows_the_sidecar_s_send_and_consume_records(
    namesrv_addr: str, broker_ctl: Path, tmp_path: Path
) -> None:
    topic = await _topic(namesrv_addr, "traceMsgTrace")
    group = f"{topic}_g"
    with push_app() as app:
        sub = SubscriptionSpec("traced", topic, group, app.url, consume_from="first")
        settings = settings_for(tmp_path, namesrv=(namesrv_addr,), subscriptions=(sub,), msg_trace=True,
                                producer_group="traceProducer")  # fmt: skip
        service = Service(settings)
        await service.start()
        try:
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{service.http.port}") as http:
                r = await http.post("/v1/messages", json={"topic": topic, "body": "traced", "keys": ["tk1"]})
            assert r.status_code == 200, r.text
            msg_id = r.json()["id"]
            await app.until(lambda got: any(g.headers["ce-id"] == msg_id for g in got), WAIT_S)
        finally:
            await service.stop()  # flushes the last trace records
    text = ""
    for _ in range(30):  # the trace messages are indexed by key asynchronously on the broker
        text = await _query_trace(broker_ctl, namesrv_addr, msg_id)
        if _rows(text, "Pub") and _rows(text, "Sub"):
            break
        await asyncio.sleep(1)
    # mqadmin merges a SubBefore/SubAfter pair into one Sub row
    assert [r[:2] for r in _rows(text, "Pub")] == [["Pub", "traceProducer"]], text[-3000:]
    assert [(r[1], r[-1]) for r in _rows(text, "Sub")] == [(group, "success")], text[-3000:]
    print(text)
