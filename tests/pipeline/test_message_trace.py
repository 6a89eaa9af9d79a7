"""The Spark sink's traceparentColumn: a row's W3C traceparent goes out as the TRACE_CONTEXT property
(the sidecar validates it); a null or empty value adds nothing."""

from __future__ import annotations

from rocksidecar.pipeline.message import MessageBuilder
from rocksidecar.pipeline.options import WriteOptions, parse

TP = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def test_the_row_s_traceparent_becomes_the_trace_context_property() -> None:
    b = MessageBuilder(
        WriteOptions(
            topic="T", columns={"bodyColumn": "b", "propertiesColumn": "p", "traceparentColumn": "tp"}
        )
    )
    assert b.build({"b": "x", "p": {"k": "v"}, "tp": TP})["properties"] == {"k": "v", "TRACE_CONTEXT": TP}
    assert b.build({"b": "x", "p": None, "tp": TP})["properties"] == {"TRACE_CONTEXT": TP}
    assert "properties" not in b.build({"b": "x", "p": None, "tp": None})
    assert "properties" not in b.build({"b": "x", "p": None, "tp": ""})


def test_the_option_is_known() -> None:
    assert parse({"topic": "T", "traceparentColumn": "tp"}).column("traceparentColumn") == "tp"
