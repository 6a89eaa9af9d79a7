"""Messages as a broker would return them from a pull, for consumer tests."""

from __future__ import annotations

from rocksidecar.rmq.message import MessageExt


def stored(
    offset: int,
    body: bytes = b"x",
    *,
    topic: str = "T",
    queue_id: int = 0,
    tags: str | None = None,
    reconsume_times: int = 0,
) -> MessageExt:
    props = {"UNIQ_KEY": f"U{offset:08d}"}
    if tags:
        props["TAGS"] = tags
    return MessageExt(
        topic=topic,
        body=body,
        queue_id=queue_id,
        queue_offset=offset,
        commit_log_offset=1000 + offset,
        sys_flag=0,
        flag=0,
        born_timestamp_ms=0,
        born_host="127.0.0.1:1",
        store_timestamp_ms=0,
        store_host="127.0.0.1:2",
        reconsume_times=reconsume_times,
        prepared_transaction_offset=0,
        body_crc=0,
        store_size=0,
        properties=props,
        offset_msg_id=f"O{offset}",
    )
