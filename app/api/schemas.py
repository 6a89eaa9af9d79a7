"""HTTP request and response bodies (pydantic). These models are the published OpenAPI contract.

Requests are parsed in strict mode (no "1000" for 1000, no true for 1). The JSON schema of each request
field states the rules that ``app.request.prepare`` enforces (topic pattern and length, non-empty body,
exactly one of body and bodyBase64, ...) so that a schema-driven client's valid requests are accepted;
the checks themselves stay in ``prepare``, shared with gRPC, with messages that name the field.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, WithJsonSchema

from rocksidecar.rmq.codes import DEFAULT_TOPIC
from rocksidecar.rmq.message import (
    NOT_ALLOWED_SEND_TOPICS,
    RESERVED_PROPERTIES,
    SYSTEM_TOPIC_PREFIX,
    TOPIC_MAX_LEN,
    TOPIC_PATTERN,
)

from ..request import MAX_SHARDING_KEY_CHARS


def integral(value: Any) -> Any:
    """JSON Schema's integer is any number without a fraction: 6926.0 is 6926 (strict mode refuses
    floats, and still refuses true and "6926")."""
    if type(value) is float and value.is_integer() and abs(value) < 2**63:
        return int(value)
    return value


_CAMEL = ConfigDict(extra="forbid", validate_by_name=False, validate_by_alias=True, strict=True)
_NO_SEPARATORS = "^[^\\u0001\\u0002]+$"  # \x01 and \x02 separate properties on the wire
# What str.isspace() calls white space (the wire splits KEYS on it), as a JSON Schema character class.
_SPACE = "".join(f"\\u{c:04x}" for c in range(0x3001) if chr(c).isspace())
_BASE64 = "^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=|[A-Za-z0-9+/]{4})$"

_TOPIC_SCHEMA: dict[str, Any] = {
    "type": "string",
    "description": f"Topic: characters [%|a-zA-Z0-9_-], 1 to {TOPIC_MAX_LEN} of them; not a system topic "
    f"({DEFAULT_TOPIC}, {', '.join(sorted(NOT_ALLOWED_SEND_TOPICS))}, {SYSTEM_TOPIC_PREFIX}*).",
    "pattern": f"^{TOPIC_PATTERN.pattern}$",
    "minLength": 1,
    "maxLength": TOPIC_MAX_LEN,
    "not": {
        "anyOf": [
            {"enum": sorted({DEFAULT_TOPIC, *NOT_ALLOWED_SEND_TOPICS})},
            {"pattern": f"^{SYSTEM_TOPIC_PREFIX}"},
        ]
    },
    "examples": ["Orders"],
}
_BODY_SCHEMA: dict[str, Any] = {
    "description": "The body: UTF-8 text (a non-empty string), or any JSON object or array, sent as "
    "compact UTF-8 JSON with the property content-type: application/json. Give exactly one of body and "
    "bodyBase64.",
    "anyOf": [{"type": "string", "minLength": 1}, {"type": "object"}, {"type": "array"}],
    "examples": ["hello", {"orderId": 1}],
}
_DELIVER_AT_SCHEMA: dict[str, Any] = {
    "description": "Deliver at this time: epoch milliseconds or an RFC 3339 timestamp with an offset. A "
    "past time means now; at most maxDelayMs ahead. At most one of delayMs and deliverAt.",
    "anyOf": [
        {"type": "integer", "minimum": 0, "maximum": 10**16 - 1},
        {"type": "string", "format": "date-time", "maxLength": 64},
    ],
    "examples": [1767225600000, "2026-01-01T00:00:00Z"],
}
_PROPERTIES_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "User properties: non-empty names and values without \\u0001 or \\u0002, names not "
    "reserved by RocketMQ.",
    "propertyNames": {
        "pattern": _NO_SEPARATORS,
        "not": {"enum": sorted(RESERVED_PROPERTIES)},
    },
    "additionalProperties": {"type": "string", "pattern": _NO_SEPARATORS},
    "examples": [{"source": "checkout"}],
}


class MessageIn(BaseModel):
    model_config = ConfigDict(
        **_CAMEL,
        json_schema_extra={
            "oneOf": [{"required": ["body"]}, {"required": ["bodyBase64"]}],
            "not": {"required": ["delayMs", "deliverAt"]},
            "examples": [
                {"topic": "Orders", "body": {"orderId": 1}, "keys": ["order-1"]},
                {"topic": "Orders", "body": "hello", "tags": "created", "delayMs": 60000},
                {"topic": "Orders", "bodyBase64": "aGVsbG8=", "shardingKey": "customer-7"},
            ],
        },
    )

    topic: Annotated[str, WithJsonSchema(_TOPIC_SCHEMA)]
    body: Annotated[str | dict[str, Any] | list[Any] | None, WithJsonSchema(_BODY_SCHEMA)] = None
    body_base64: Annotated[
        str | None,
        Field(alias="bodyBase64"),
        WithJsonSchema(
            {
                "type": "string",
                "description": "The body as standard base64 (non-empty, padded), for bytes that are "
                "not text.",
                "pattern": _BASE64,
                "examples": ["aGVsbG8="],
            }
        ),
    ] = None
    tags: Annotated[
        str | None,
        WithJsonSchema(
            {
                "type": "string",
                "description": "RocketMQ tag, for broker-side filtering; no \\u0001 or \\u0002.",
                "pattern": "^[^\\u0001\\u0002]*$",
                "examples": ["created"],
            }
        ),
    ] = None
    # default_factory: a literal [] or {} default is deep-copied for every message parsed.
    keys: Annotated[
        list[str],
        Field(default_factory=list),
        WithJsonSchema(
            {
                "type": "array",
                "description": "Business keys, indexed by the broker: non-empty, no white space.",
                "items": {"type": "string", "pattern": f"^[^{_SPACE}\\u0001\\u0002]+$"},
                "examples": [["order-1"]],
            }
        ),
    ]
    properties: Annotated[dict[str, str], Field(default_factory=dict), WithJsonSchema(_PROPERTIES_SCHEMA)]
    sharding_key: Annotated[
        str | None,
        Field(alias="shardingKey"),
        WithJsonSchema(
            {
                "type": "string",
                "minLength": 1,
                "maxLength": MAX_SHARDING_KEY_CHARS,
                "pattern": _NO_SEPARATORS,
                "description": "Messages with the same key go to the same queue, in order.",
                "examples": ["customer-7"],
            }
        ),
    ] = None
    type: Annotated[
        str | None,
        WithJsonSchema(
            {
                "type": "string",
                "pattern": "^[^:]{1,128}$",
                "description": "Retry policy name (1-128 characters, no ':'); defaults to the topic.",
                "examples": ["orders"],
            }
        ),
    ] = None
    delay_ms: Annotated[
        int | None,
        BeforeValidator(integral),
        Field(alias="delayMs"),
        WithJsonSchema(
            {
                "type": "integer",
                "minimum": 0,
                "description": "Deliver after this many milliseconds (0: now); at most maxDelayMs. At "
                "most one of delayMs and deliverAt.",
                "examples": [60000],
            }
        ),
    ] = None
    deliver_at: Annotated[
        int | str | None,
        BeforeValidator(integral),
        Field(alias="deliverAt"),
        WithJsonSchema(_DELIVER_AT_SCHEMA),
    ] = None


class BatchIn(BaseModel):
    model_config = ConfigDict(
        **_CAMEL,
        json_schema_extra={
            "examples": [
                {"messages": [{"topic": "Orders", "body": "one"}, {"topic": "Orders", "body": {"n": 2}}]}
            ]
        },
    )

    messages: Annotated[
        list[MessageIn],
        Field(
            min_length=1,
            description="The messages (1 to the batch limit); each gets its own result, and a bad one "
            "fails only itself.",
        ),
    ]


def _examples(*docs: dict[str, Any]) -> ConfigDict:
    """A model's configuration with the examples its OpenAPI schema shows."""
    return ConfigDict(json_schema_extra={"examples": list(docs)})


class Problem(BaseModel):
    """RFC 9457 problem details (application/problem+json)."""

    model_config = _examples(
        {
            "type": "about:blank",
            "title": "Invalid request",
            "status": 400,
            "detail": "topic 'bad topic' may only contain characters [%|a-zA-Z0-9_-]",
            "field": "topic",
        }
    )

    type: Annotated[str, Field(description="Always about:blank: the status says it all.")] = "about:blank"
    title: Annotated[str, Field(description="Short summary of the kind of problem.")]
    status: Annotated[int, Field(description="The HTTP status code.")]
    detail: Annotated[str, Field(description="What is wrong, for a human.")]
    field: Annotated[str | None, Field(description="JSON path of the offending input, if any.")] = None
    errors: Annotated[
        list[dict[str, str]] | None,
        Field(description="More bad fields of the same request ({field, detail}), when there are several."),
    ] = None


_ID = Field(description="The message id: its UNIQ_KEY as stored in RocketMQ.")
_BROKER = Field(description="The broker that stored it (SENT).")
_QUEUE_ID = Field(alias="queueId", description="The queue it was stored in (SENT).")
_QUEUE_OFFSET = Field(alias="queueOffset", description="Its offset in that queue (SENT).")
_MSG_ID = Field(alias="msgId", description="The broker's offset message id (SENT).")
_NEXT = Field(alias="nextAttemptAt", description="Epoch ms of the next delivery attempt (SPOOLED).")
_LAST_ERROR = Field(alias="lastError", description="Why the last attempt failed (SPOOLED, DEAD).")
_DELIVER_AT = Field(alias="deliverAt", description="Epoch ms it is due (SCHEDULED).")


class _Outcome(BaseModel):
    """Where a stored message went: the fields of a send's answer after id and status."""

    model_config = ConfigDict(populate_by_name=True)

    broker: Annotated[str | None, _BROKER] = None
    queue_id: Annotated[int | None, _QUEUE_ID] = None
    queue_offset: Annotated[int | None, _QUEUE_OFFSET] = None
    offset_msg_id: Annotated[str | None, _MSG_ID] = None
    next_attempt_at: Annotated[int | None, _NEXT] = None
    last_error: Annotated[str | None, _LAST_ERROR] = None
    deliver_at: Annotated[int | None, _DELIVER_AT] = None


class SendOut(_Outcome):
    model_config = _examples(
        {
            "id": "7F0000010C5C1B4AAC2B5F8A3E4D0000",
            "status": "SENT",
            "broker": "broker-a",
            "queueId": 2,
            "queueOffset": 1041,
            "msgId": "7F00000100002A9F0000000000012345",
        },
        {"id": "7F0000010C5C1B4AAC2B5F8A3E4D0001", "status": "SCHEDULED", "deliverAt": 1767225600000},
    )

    id: Annotated[str, _ID]
    status: Annotated[
        Literal["SENT", "SPOOLED", "SCHEDULED"],
        Field(
            description="SENT: stored by a broker. SPOOLED: synced to the local store, delivered in the "
            "background. SCHEDULED: stored locally until its due time."
        ),
    ]


class BatchItemOut(_Outcome):
    index: Annotated[int, Field(description="Position of the message in the request.")]
    id: Annotated[str | None, _ID] = None
    status: Annotated[
        Literal["SENT", "SPOOLED", "SCHEDULED", "REJECTED", "FAILED"],
        Field(
            description="As for one message, or REJECTED (bad input, see error) or FAILED (could not be "
            "stored; retry it)."
        ),
    ]
    error: Annotated[
        Problem | None, Field(description="Why it was rejected or failed; field is messages[i].name.")
    ] = None


class BatchOut(BaseModel):
    model_config = _examples(
        {
            "results": [
                {"index": 0, "id": "7F0000010C5C1B4AAC2B5F8A3E4D0002", "status": "SPOOLED"},
                {
                    "index": 1,
                    "status": "REJECTED",
                    "error": {
                        "type": "about:blank",
                        "title": "Invalid request",
                        "status": 400,
                        "detail": "messages[1].topic: Field required",
                        "field": "messages[1].topic",
                    },
                },
            ],
            "sent": 0,
            "spooled": 1,
            "scheduled": 0,
            "rejected": 1,
            "failed": 0,
        }
    )

    results: Annotated[list[BatchItemOut], Field(description="One result per message, in request order.")]
    sent: Annotated[int, Field(description="How many were SENT.")]
    spooled: Annotated[int, Field(description="How many were SPOOLED.")]
    scheduled: Annotated[int, Field(description="How many were SCHEDULED.")]
    rejected: Annotated[int, Field(description="How many were REJECTED.")]
    failed: Annotated[int, Field(description="How many FAILED.")]


class MessageStatusOut(_Outcome):
    model_config = _examples(
        {
            "id": "7F0000010C5C1B4AAC2B5F8A3E4D0002",
            "status": "SPOOLED",
            "topic": "Orders",
            "attempts": 1,
            "nextAttemptAt": 1767225603000,
            "lastError": "connection refused",
        },
        {
            "id": "7F0000010C5C1B4AAC2B5F8A3E4D0002",
            "status": "SENT",
            "sentAt": 1767225603120,
            "broker": "broker-a",
            "queueId": 1,
            "queueOffset": 77,
        },
    )

    id: Annotated[str, _ID]
    status: Annotated[
        Literal["SPOOLED", "SCHEDULED", "DEAD", "SENT", "CANCELLED"],
        Field(
            description="SPOOLED: waiting for its next attempt. SCHEDULED: waiting for its due time. DEAD: "
            "dead-lettered after its last attempt. SENT: delivered from the store (kept for a while). "
            "CANCELLED: cancelled before its due time."
        ),
    ]
    topic: Annotated[str | None, Field(description="Its topic.")] = None
    attempts: Annotated[int | None, Field(description="Failed delivery attempts so far.")] = None
    reason: Annotated[str | None, Field(description="Why it was dead-lettered (DEAD).")] = None
    dead_at: Annotated[int | None, Field(alias="deadAt", description="Epoch ms it died (DEAD).")] = None
    sent_at: Annotated[int | None, Field(alias="sentAt", description="Epoch ms it was delivered (SENT).")] = (
        None
    )
    cancelled_at: Annotated[
        int | None, Field(alias="cancelledAt", description="Epoch ms it was cancelled (CANCELLED).")
    ] = None


class CancelOut(BaseModel):
    model_config = _examples({"id": "7F0000010C5C1B4AAC2B5F8A3E4D0001", "status": "CANCELLED"})

    id: Annotated[str, _ID]
    status: Annotated[Literal["CANCELLED"], Field(description="Always CANCELLED: it will not be sent.")]


class HealthOut(BaseModel):
    model_config = _examples({"status": "ok"})

    status: Annotated[Literal["ok"], Field(description="Always ok: the process answers.")]


class BrokerStateOut(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    broker: Annotated[str, Field(description="Broker name.")]
    state: Annotated[
        Literal["available", "backoff", "isolated"],
        Field(description="isolated: its last send failed; backoff: it was slow; both for notAvailableForS."),
    ]
    latency_ms: Annotated[float, Field(alias="latencyMs", description="Latency of its last send.")]
    not_available_for_s: Annotated[
        float, Field(alias="notAvailableForS", description="Seconds until it is chosen again.")
    ]


class ReadyOut(BaseModel):
    model_config = ConfigDict(
        populate_by_name=True,
        json_schema_extra={
            "examples": [
                {
                    "ready": False,
                    "store": "ok",
                    "nameServer": "reachable",
                    "writableBrokers": [],
                    "brokers": [
                        {
                            "broker": "broker-a",
                            "state": "isolated",
                            "latencyMs": 30000,
                            "notAvailableForS": 540.2,
                        }
                    ],
                    "reason": "every broker is isolated after failed sends: b",
                }
            ]
        },
    )

    ready: Annotated[bool, Field(description="Whether a send can succeed now.")]
    store: Annotated[str, Field(description="ok, or failing: the store's error.")]
    name_server: Annotated[
        Literal["reachable", "unreachable"], Field(alias="nameServer", description="Whether it answers.")
    ]
    writable_brokers: Annotated[
        list[str] | None,
        Field(alias="writableBrokers", description="Usable brokers (without ROCKSIDECAR_TOPICS)."),
    ] = None
    routes: Annotated[
        dict[str, list[str]] | None,
        Field(description="Per configured topic, its usable brokers (with ROCKSIDECAR_TOPICS)."),
    ] = None
    brokers: Annotated[list[BrokerStateOut], Field(description="The producer's fault table.")]
    reason: Annotated[str | None, Field(description="Why it is not ready.")] = None
