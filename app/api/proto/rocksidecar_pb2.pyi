from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Ack(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ACK_BROKER: _ClassVar[Ack]
    ACK_SPOOL: _ClassVar[Ack]

class Status(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    STATUS_UNSPECIFIED: _ClassVar[Status]
    SENT: _ClassVar[Status]
    SPOOLED: _ClassVar[Status]
    SCHEDULED: _ClassVar[Status]
    REJECTED: _ClassVar[Status]
    FAILED: _ClassVar[Status]
    DEAD: _ClassVar[Status]
    CANCELLED: _ClassVar[Status]

class AckOutcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ACK_OK: _ClassVar[AckOutcome]
    ACK_LATER: _ClassVar[AckOutcome]
    ACK_FAILED: _ClassVar[AckOutcome]

class TransactionState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TX_PREPARED: _ClassVar[TransactionState]
    TX_COMMITTED: _ClassVar[TransactionState]
    TX_ROLLED_BACK: _ClassVar[TransactionState]
ACK_BROKER: Ack
ACK_SPOOL: Ack
STATUS_UNSPECIFIED: Status
SENT: Status
SPOOLED: Status
SCHEDULED: Status
REJECTED: Status
FAILED: Status
DEAD: Status
CANCELLED: Status
ACK_OK: AckOutcome
ACK_LATER: AckOutcome
ACK_FAILED: AckOutcome
TX_PREPARED: TransactionState
TX_COMMITTED: TransactionState
TX_ROLLED_BACK: TransactionState

class Message(_message.Message):
    __slots__ = ("topic", "body", "body_bytes", "tags", "keys", "properties", "sharding_key", "type", "delay_ms", "deliver_at_ms", "deliver_at")
    class PropertiesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    BODY_BYTES_FIELD_NUMBER: _ClassVar[int]
    TAGS_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    PROPERTIES_FIELD_NUMBER: _ClassVar[int]
    SHARDING_KEY_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    DELAY_MS_FIELD_NUMBER: _ClassVar[int]
    DELIVER_AT_MS_FIELD_NUMBER: _ClassVar[int]
    DELIVER_AT_FIELD_NUMBER: _ClassVar[int]
    topic: str
    body: str
    body_bytes: bytes
    tags: str
    keys: _containers.RepeatedScalarFieldContainer[str]
    properties: _containers.ScalarMap[str, str]
    sharding_key: str
    type: str
    delay_ms: int
    deliver_at_ms: int
    deliver_at: str
    def __init__(self, topic: _Optional[str] = ..., body: _Optional[str] = ..., body_bytes: _Optional[bytes] = ..., tags: _Optional[str] = ..., keys: _Optional[_Iterable[str]] = ..., properties: _Optional[_Mapping[str, str]] = ..., sharding_key: _Optional[str] = ..., type: _Optional[str] = ..., delay_ms: _Optional[int] = ..., deliver_at_ms: _Optional[int] = ..., deliver_at: _Optional[str] = ...) -> None: ...

class Error(_message.Message):
    __slots__ = ("http_status", "title", "detail", "field")
    HTTP_STATUS_FIELD_NUMBER: _ClassVar[int]
    TITLE_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    FIELD_FIELD_NUMBER: _ClassVar[int]
    http_status: int
    title: str
    detail: str
    field: str
    def __init__(self, http_status: _Optional[int] = ..., title: _Optional[str] = ..., detail: _Optional[str] = ..., field: _Optional[str] = ...) -> None: ...

class SendRequest(_message.Message):
    __slots__ = ("message", "ack", "idempotency_key")
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    ACK_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    message: Message
    ack: Ack
    idempotency_key: str
    def __init__(self, message: _Optional[_Union[Message, _Mapping]] = ..., ack: _Optional[_Union[Ack, str]] = ..., idempotency_key: _Optional[str] = ...) -> None: ...

class SendResponse(_message.Message):
    __slots__ = ("id", "status", "broker", "queue_id", "queue_offset", "msg_id", "next_attempt_at_ms", "last_error", "deliver_at_ms")
    ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    BROKER_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    QUEUE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MSG_ID_FIELD_NUMBER: _ClassVar[int]
    NEXT_ATTEMPT_AT_MS_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_FIELD_NUMBER: _ClassVar[int]
    DELIVER_AT_MS_FIELD_NUMBER: _ClassVar[int]
    id: str
    status: Status
    broker: str
    queue_id: int
    queue_offset: int
    msg_id: str
    next_attempt_at_ms: int
    last_error: str
    deliver_at_ms: int
    def __init__(self, id: _Optional[str] = ..., status: _Optional[_Union[Status, str]] = ..., broker: _Optional[str] = ..., queue_id: _Optional[int] = ..., queue_offset: _Optional[int] = ..., msg_id: _Optional[str] = ..., next_attempt_at_ms: _Optional[int] = ..., last_error: _Optional[str] = ..., deliver_at_ms: _Optional[int] = ...) -> None: ...

class SendBatchRequest(_message.Message):
    __slots__ = ("messages", "ack", "idempotency_key")
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    ACK_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[Message]
    ack: Ack
    idempotency_key: str
    def __init__(self, messages: _Optional[_Iterable[_Union[Message, _Mapping]]] = ..., ack: _Optional[_Union[Ack, str]] = ..., idempotency_key: _Optional[str] = ...) -> None: ...

class BatchItem(_message.Message):
    __slots__ = ("index", "result", "error")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    index: int
    result: SendResponse
    error: Error
    def __init__(self, index: _Optional[int] = ..., result: _Optional[_Union[SendResponse, _Mapping]] = ..., error: _Optional[_Union[Error, _Mapping]] = ...) -> None: ...

class SendBatchResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[BatchItem]
    def __init__(self, results: _Optional[_Iterable[_Union[BatchItem, _Mapping]]] = ...) -> None: ...

class PublishRequest(_message.Message):
    __slots__ = ("sequence", "message", "ack")
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    ACK_FIELD_NUMBER: _ClassVar[int]
    sequence: int
    message: Message
    ack: Ack
    def __init__(self, sequence: _Optional[int] = ..., message: _Optional[_Union[Message, _Mapping]] = ..., ack: _Optional[_Union[Ack, str]] = ...) -> None: ...

class PublishAck(_message.Message):
    __slots__ = ("sequence", "result", "error")
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    sequence: int
    result: SendResponse
    error: Error
    def __init__(self, sequence: _Optional[int] = ..., result: _Optional[_Union[SendResponse, _Mapping]] = ..., error: _Optional[_Union[Error, _Mapping]] = ...) -> None: ...

class GetMessageRequest(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    def __init__(self, id: _Optional[str] = ...) -> None: ...

class MessageStatus(_message.Message):
    __slots__ = ("id", "status", "topic", "attempts", "next_attempt_at_ms", "deliver_at_ms", "last_error", "reason", "dead_at_ms", "sent_at_ms", "cancelled_at_ms", "broker", "queue_id", "queue_offset", "msg_id")
    ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    NEXT_ATTEMPT_AT_MS_FIELD_NUMBER: _ClassVar[int]
    DELIVER_AT_MS_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    DEAD_AT_MS_FIELD_NUMBER: _ClassVar[int]
    SENT_AT_MS_FIELD_NUMBER: _ClassVar[int]
    CANCELLED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    BROKER_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    QUEUE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MSG_ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    status: Status
    topic: str
    attempts: int
    next_attempt_at_ms: int
    deliver_at_ms: int
    last_error: str
    reason: str
    dead_at_ms: int
    sent_at_ms: int
    cancelled_at_ms: int
    broker: str
    queue_id: int
    queue_offset: int
    msg_id: str
    def __init__(self, id: _Optional[str] = ..., status: _Optional[_Union[Status, str]] = ..., topic: _Optional[str] = ..., attempts: _Optional[int] = ..., next_attempt_at_ms: _Optional[int] = ..., deliver_at_ms: _Optional[int] = ..., last_error: _Optional[str] = ..., reason: _Optional[str] = ..., dead_at_ms: _Optional[int] = ..., sent_at_ms: _Optional[int] = ..., cancelled_at_ms: _Optional[int] = ..., broker: _Optional[str] = ..., queue_id: _Optional[int] = ..., queue_offset: _Optional[int] = ..., msg_id: _Optional[str] = ...) -> None: ...

class CancelRequest(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    def __init__(self, id: _Optional[str] = ...) -> None: ...

class CancelResponse(_message.Message):
    __slots__ = ("id", "status")
    ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    id: str
    status: Status
    def __init__(self, id: _Optional[str] = ..., status: _Optional[_Union[Status, str]] = ...) -> None: ...

class SubscribeRequest(_message.Message):
    __slots__ = ("subscription",)
    SUBSCRIPTION_FIELD_NUMBER: _ClassVar[int]
    subscription: str
    def __init__(self, subscription: _Optional[str] = ...) -> None: ...

class Delivery(_message.Message):
    __slots__ = ("delivery_id", "id", "topic", "body", "tags", "keys", "properties", "broker", "queue_id", "queue_offset", "reconsume_times", "born_timestamp_ms", "traceparent", "tracestate")
    class PropertiesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    DELIVERY_ID_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    TAGS_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    PROPERTIES_FIELD_NUMBER: _ClassVar[int]
    BROKER_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    QUEUE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    RECONSUME_TIMES_FIELD_NUMBER: _ClassVar[int]
    BORN_TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    TRACEPARENT_FIELD_NUMBER: _ClassVar[int]
    TRACESTATE_FIELD_NUMBER: _ClassVar[int]
    delivery_id: str
    id: str
    topic: str
    body: bytes
    tags: str
    keys: _containers.RepeatedScalarFieldContainer[str]
    properties: _containers.ScalarMap[str, str]
    broker: str
    queue_id: int
    queue_offset: int
    reconsume_times: int
    born_timestamp_ms: int
    traceparent: str
    tracestate: str
    def __init__(self, delivery_id: _Optional[str] = ..., id: _Optional[str] = ..., topic: _Optional[str] = ..., body: _Optional[bytes] = ..., tags: _Optional[str] = ..., keys: _Optional[_Iterable[str]] = ..., properties: _Optional[_Mapping[str, str]] = ..., broker: _Optional[str] = ..., queue_id: _Optional[int] = ..., queue_offset: _Optional[int] = ..., reconsume_times: _Optional[int] = ..., born_timestamp_ms: _Optional[int] = ..., traceparent: _Optional[str] = ..., tracestate: _Optional[str] = ...) -> None: ...

class AckRequest(_message.Message):
    __slots__ = ("delivery_id", "outcome", "retry_after_ms")
    DELIVERY_ID_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    RETRY_AFTER_MS_FIELD_NUMBER: _ClassVar[int]
    delivery_id: str
    outcome: AckOutcome
    retry_after_ms: int
    def __init__(self, delivery_id: _Optional[str] = ..., outcome: _Optional[_Union[AckOutcome, str]] = ..., retry_after_ms: _Optional[int] = ...) -> None: ...

class AckResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class BeginTransactionRequest(_message.Message):
    __slots__ = ("message", "transaction_key", "idempotency_key")
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    TRANSACTION_KEY_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    message: Message
    transaction_key: str
    idempotency_key: str
    def __init__(self, message: _Optional[_Union[Message, _Mapping]] = ..., transaction_key: _Optional[str] = ..., idempotency_key: _Optional[str] = ...) -> None: ...

class TransactionRequest(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    def __init__(self, id: _Optional[str] = ...) -> None: ...

class Transaction(_message.Message):
    __slots__ = ("id", "state", "transaction_key", "topic", "broker", "queue_id", "half_offset", "msg_id", "created_ms", "decided_ms", "acknowledged")
    ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    TRANSACTION_KEY_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    BROKER_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    HALF_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MSG_ID_FIELD_NUMBER: _ClassVar[int]
    CREATED_MS_FIELD_NUMBER: _ClassVar[int]
    DECIDED_MS_FIELD_NUMBER: _ClassVar[int]
    ACKNOWLEDGED_FIELD_NUMBER: _ClassVar[int]
    id: str
    state: TransactionState
    transaction_key: str
    topic: str
    broker: str
    queue_id: int
    half_offset: int
    msg_id: str
    created_ms: int
    decided_ms: int
    acknowledged: bool
    def __init__(self, id: _Optional[str] = ..., state: _Optional[_Union[TransactionState, str]] = ..., transaction_key: _Optional[str] = ..., topic: _Optional[str] = ..., broker: _Optional[str] = ..., queue_id: _Optional[int] = ..., half_offset: _Optional[int] = ..., msg_id: _Optional[str] = ..., created_ms: _Optional[int] = ..., decided_ms: _Optional[int] = ..., acknowledged: _Optional[bool] = ...) -> None: ...
