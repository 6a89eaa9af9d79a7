"""HTTP request and response bodies (pydantic). These models are the published OpenAPI contract."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

_CAMEL = ConfigDict(extra="forbid", validate_by_name=False, validate_by_alias=True)


class MessageIn(BaseModel):
    model_config = _CAMEL

    topic: Annotated[str, Field(description="Topic; characters [%|a-zA-Z0-9_-], at most 127.")]
    body: Annotated[str | None, Field(description="The body as UTF-8 text (or use bodyBase64).")] = None
    body_base64: Annotated[str | None, Field(alias="bodyBase64", description="The body as base64.")] = None
    tags: Annotated[str | None, Field(description="RocketMQ tag, used for broker-side filtering.")] = None
    # default_factory: a literal [] or {} default is deep-copied for every message parsed.
    keys: Annotated[
        list[str], Field(default_factory=list, description="Business keys (indexed by the broker).")
    ]
    properties: Annotated[dict[str, str], Field(default_factory=dict, description="User properties.")]
    sharding_key: Annotated[
        str | None,
        Field(
            alias="shardingKey", description=("Messages with the same key go to the same queue, in order.")
        ),
    ] = None
    type: Annotated[str | None, Field(description="Retry policy name; defaults to the topic.")] = None
    delay_ms: Annotated[int | None, Field(alias="delayMs", description="Deliver after this many ms.")] = None
    deliver_at: Annotated[
        int | str | None,
        Field(
            alias="deliverAt",
            description=("Deliver at this time: epoch milliseconds or an RFC 3339 timestamp."),
        ),
    ] = None

    @property
    def body_bytes(self) -> bytes | None:
        return None  # gRPC's raw bytes; over HTTP binary bodies come as bodyBase64


class BatchIn(BaseModel):
    model_config = _CAMEL

    messages: Annotated[list[MessageIn], Field(description="The messages; each gets its own result.")]


class Problem(BaseModel):
    """RFC 9457 problem details (application/problem+json)."""

    type: str = "about:blank"
    title: str
    status: int
    detail: str
    field: Annotated[str | None, Field(description="JSON path of the offending input, if any.")] = None


class SendOut(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    id: Annotated[str, Field(description="The message id: its UNIQ_KEY as stored in RocketMQ.")]
    status: Literal["SENT", "SPOOLED", "SCHEDULED"]
    broker: str | None = None
    queue_id: Annotated[int | None, Field(alias="queueId")] = None
    queue_offset: Annotated[int | None, Field(alias="queueOffset")] = None
    msg_id: Annotated[str | None, Field(alias="msgId", description="The broker's offset message id.")] = None
    next_attempt_at: Annotated[int | None, Field(alias="nextAttemptAt", description="Epoch ms.")] = None
    last_error: Annotated[str | None, Field(alias="lastError")] = None
    deliver_at: Annotated[int | None, Field(alias="deliverAt", description="Epoch ms.")] = None


class BatchItemOut(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    index: int
    id: str | None = None
    status: Literal["SENT", "SPOOLED", "SCHEDULED", "REJECTED", "FAILED"]
    broker: str | None = None
    queue_id: Annotated[int | None, Field(alias="queueId")] = None
    queue_offset: Annotated[int | None, Field(alias="queueOffset")] = None
    msg_id: Annotated[str | None, Field(alias="msgId")] = None
    next_attempt_at: Annotated[int | None, Field(alias="nextAttemptAt")] = None
    last_error: Annotated[str | None, Field(alias="lastError")] = None
    deliver_at: Annotated[int | None, Field(alias="deliverAt")] = None
    error: Problem | None = None


class BatchOut(BaseModel):
    results: list[BatchItemOut]
    sent: int
    spooled: int
    scheduled: int
    rejected: int
    failed: int


class MessageStatusOut(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    id: str
    status: Literal["SPOOLED", "SCHEDULED", "DEAD", "SENT", "CANCELLED"]
    topic: str | None = None
    attempts: int | None = None
    next_attempt_at: Annotated[int | None, Field(alias="nextAttemptAt")] = None
    deliver_at: Annotated[int | None, Field(alias="deliverAt")] = None
    last_error: Annotated[str | None, Field(alias="lastError")] = None
    reason: str | None = None


class CancelOut(BaseModel):
    id: str
    status: Literal["CANCELLED"]
