"""The small JSON messages replicas send one another (marks, beats): a ``DMQ_OP`` property naming the
kind and a bounded version-1 JSON object body. Anyone who may write those topics is hostile: what does
not parse is skipped and counted by the reader, never applied in part."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

import orjson

from rocksidecar.rmq.message import MessageExt

from .inner import OP

T = TypeVar("T")


def load(
    body: bytes, props: Mapping[str, str], op: str, max_body: int, error: type[ValueError]
) -> dict[str, Any]:
    """The version-1 JSON object of a message whose ``DMQ_OP`` is ``op``. Raises ``error``. A reader
    ignores members it does not know: a member added later (a mark's ``dues``) is read by the replicas
    that know it and skipped by those of an earlier version, which apply the rest as before."""
    kind = op.lower()
    if props.get(OP) != op:
        raise error(f"not a {kind} ({OP}={props.get(OP)!r})")
    if len(body) > max_body:
        raise error(f"{kind} body of {len(body)} bytes")
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise error(f"{kind} body is not JSON: {exc}") from None
    if not isinstance(doc, dict) or doc.get("v") != 1:
        raise error(f"{kind} body is not a version 1 {kind}")
    return doc


def each(
    batch: Sequence[MessageExt],
    parse: Callable[[bytes, Mapping[str, str]], T],
    error: type[ValueError],
    on_malformed: Callable[[], None],
    log: logging.Logger,
    level: int = logging.WARNING,
) -> Iterator[T]:
    """What each message of ``batch`` carries; one that does not parse is counted, logged and skipped."""
    for ext in batch:
        try:
            yield parse(ext.body, ext.properties)
        except error as exc:
            on_malformed()
            log.log(level, "%s skipped: %s", ext.msg_id, exc)
