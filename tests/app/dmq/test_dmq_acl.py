"""`rocksidecar dmq` with ACL credentials: its inner-topic consumer signs its requests (heartbeat, pulls,
offsets) like its producer does; it used to open unsigned connections of its own."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from rocksidecar.app.dmq.options import DmqOptions
from rocksidecar.app.dmq.service import DmqService
from rocksidecar.devbroker import DevCluster
from rocksidecar.rmq.acl import signature
from rocksidecar.rmq.codes import RequestCode
from tests.app.dmq.conftest import INNER_TOPIC, dmq_settings
from tests.rmq.consumer.test_push_acl import record_requests


async def test_the_inner_consumer_signs_its_requests(cluster: DevCluster, tmp_path: Path) -> None:
    seen = record_requests(cluster)
    settings = dataclasses.replace(
        dmq_settings(cluster.namesrv_addr, tmp_path / "dmq"), access_key="dmq-ak", secret_key="dmq-sk"
    )
    options = DmqOptions(inner_topic=INNER_TOPIC, group="dmq_acl_group", http_addr="127.0.0.1:0")
    service = DmqService(settings, options)
    await service.start()
    try:
        await service.consumer.stats.reach("pulls", 1)
    finally:
        await service.stop()
    codes = {cmd.code for cmd in seen}
    assert {RequestCode.HEART_BEAT, RequestCode.PULL_MESSAGE, RequestCode.UNREGISTER_CLIENT} <= codes
    for cmd in seen:
        fields = cmd.ext_fields
        assert fields.get("AccessKey") == "dmq-ak", RequestCode(cmd.code).name
        assert fields.get("Signature") == signature(fields, cmd.body, "dmq-sk")
