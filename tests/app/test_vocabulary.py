"""Issue 12, item 8: one vocabulary. A message's states are the members of one enum (app.sidecar.Status),
and HTTP, gRPC, the stores, the metrics and the README's glossary use exactly those names; the message
id is the UNIQ_KEY (``id``) and the broker's id is the offset message id everywhere."""

from __future__ import annotations

import dataclasses
import re
import typing
from pathlib import Path

import msgspec

import rocksidecar.app.sidecar
from rocksidecar.app import wire
from rocksidecar.app.api import grpc_views, operations, schemas
from rocksidecar.app.api.proto import rocksidecar_pb2 as pb
from rocksidecar.app.lookups import DelayLookup, RetryLookup
from rocksidecar.app.metrics import Metrics
from rocksidecar.app.sidecar import MessageState, Outcome, Status
from rocksidecar.delay import CancelOutcome, DelayState, DelayStatus, StoredAt
from rocksidecar.retry import MessageStatus, State
from rocksidecar.rmq import MessageQueue, SendResult, SendStatus
from rocksidecar.storage import status as storage_status


class DelayStoreStub:
    def __init__(self, found: DelayStatus) -> None:
        self.found = found

    def get(self, id: str) -> DelayStatus | None:
        return self.found


README = Path(__file__).resolve().parents[2] / "README.md"
STATES = {s.value for s in Status}
ITEM_LABELS = {"REJECTED", "FAILED"}  # a batch item that is not a stored message


def test_the_states_are_one_enum_named_as_the_glossary() -> None:
    assert {"SENT", "SPOOLED", "SCHEDULED", "DEAD", "CANCELLED"} == STATES
    glossary = README.read_text().split("Glossary:", 1)[1].split("\n\n", 1)[0]
    assert set(re.findall(r"`([A-Z]+)`", glossary)) == STATES


def test_the_stores_report_in_the_one_enum() -> None:
    # Issue 26: one status vocabulary, not three enums mapped by their names
    assert State is DelayState is Status is storage_status.Status
    spooled = MessageStatus("a", State.SPOOLED, b"k", 1, "busy", topic="T", next_attempt_at_ms=5)
    assert RetryLookup(lambda _id: spooled).view("a", spooled).status is Status.SPOOLED
    cancelled = DelayStatus("b", DelayState.CANCELLED, at_ms=9)
    assert DelayLookup(DelayStoreStub(cancelled))  # type: ignore[arg-type].view("b", cancelled).status is Status.CANCELLED


def test_grpc_maps_each_state_by_identity() -> None:
    assert set(grpc_views.PB_STATUS) == set(Status)
    for state, number in grpc_views.PB_STATUS.items():
        assert pb.Status.Name(number) == state.name


def test_http_and_grpc_answer_with_the_enum_names() -> None:
    grpc_names = set(pb.Status.keys()) - {"STATUS_UNSPECIFIED"}
    assert grpc_names == STATES | ITEM_LABELS
    assert typing.get_args(schemas.MessageStatusOut.model_fields["status"].annotation) == tuple(
        s.value for s in (Status.SPOOLED, Status.SCHEDULED, Status.DEAD, Status.SENT, Status.CANCELLED)
    )
    sent = set(typing.get_args(schemas.SendOut.model_fields["status"].annotation))
    assert sent == {"SENT", "SPOOLED", "SCHEDULED"} <= STATES
    assert set(typing.get_args(schemas.BatchItemOut.model_fields["status"].annotation)) == sent | ITEM_LABELS


def test_the_messages_metric_counts_by_the_enum_names() -> None:
    metrics = Metrics()
    ops = operations.Operations(None, None, 1, metrics, None, lambda: 0, None)  # type: ignore[arg-type]
    for label in (*STATES, *ITEM_LABELS):
        ops.count(label)
    (family,) = [m for m in metrics.registry.collect() if m.name == "rocksidecar_messages"]
    labels = {s.labels["outcome"] for s in family.samples if s.name.endswith("_total")}
    assert labels == {x.lower() for x in STATES | ITEM_LABELS}


def test_message_id_and_offset_message_id_are_named_as_the_glossary() -> None:
    # SendResult: msg_id is the UNIQ_KEY as in Java; everywhere past the client, the broker's id is
    # offset_msg_id and the message id is id.
    # (SendResult is a msgspec Struct: its __init__ in C, issue 32)
    assert {"msg_id", "offset_msg_id"} <= {f.name for f in msgspec.structs.fields(SendResult)}
    names = {f.name for f in dataclasses.fields(StoredAt)}
    assert "offset_msg_id" in names and "msg_id" not in names
    assert "offset_msg_id" in schemas.SendOut.model_fields and "msg_id" not in schemas.SendOut.model_fields


def test_one_type_says_where_the_broker_stored_it() -> None:
    # Issue 26: StoredAt (storage.status) is what the stores keep; a send's answer and a status hold a
    # StoredAtLike (a StoredAt, or the SendResult itself) instead of four copied fields of their own.
    assert StoredAt is storage_status.StoredAt
    where = {"broker", "queue_id", "queue_offset", "offset_msg_id"}
    assert {f.name for f in dataclasses.fields(StoredAt)} == where
    # Outcome is a msgspec Struct (issue 32: its __init__ in C), MessageState a dataclass
    outcome = {f.name for f in msgspec.structs.fields(Outcome)}
    state = {f.name for f in dataclasses.fields(MessageState)}
    for names in (outcome, state):
        assert "stored_at" in names and not names & where, names
    result = SendResult(SendStatus.SEND_OK, "id-1", "OFFSET", MessageQueue("T", "broker-a", 3), 41)
    assert Outcome.sent(result).stored_at is result  # not copied: one per message on the hot path
    assert wire.stored_at(result) == StoredAt("broker-a", 3, 41, "OFFSET")
    assert {name: getattr(result, name) for name in where} == dataclasses.asdict(wire.stored_at(result))


def test_one_name_for_what_a_cancel_did() -> None:
    # CancelResult, its old twin, is gone: the delay store's enum is the one name
    assert not hasattr(rocksidecar.app.sidecar, "CancelResult")
    assert rocksidecar.app.sidecar.Sidecar.cancel.__annotations__["return"] in (
        CancelOutcome,
        "CancelOutcome",
    )
