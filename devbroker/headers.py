"""Typed reads of request extFields for the broker's processors, and ``Reject``: the error a processor
raises to answer a request with a response code and remark instead of a result."""

from __future__ import annotations

from collections.abc import Mapping

from rocksidecar.rmq.codes import ResponseCode


class Reject(Exception):
    """Answer the request with ``code`` and ``remark`` (an answer, not a devbroker failure)."""

    def __init__(self, code: int, remark: str) -> None:
        super().__init__(remark)
        self.code = code
        self.remark = remark


def text(ext: Mapping[str, str], name: str) -> str:
    """A required header field; a missing one is SYSTEM_ERROR, as the Java broker's NPE would be."""
    value = ext.get(name)
    if value is None:
        raise Reject(ResponseCode.SYSTEM_ERROR, f"the request header lacks the required field {name!r}")
    return value


def integer(ext: Mapping[str, str], name: str, default: int | None = None) -> int:
    """An integer header field; ``default`` when it is absent and optional."""
    value = ext.get(name)
    if value is None and default is not None:
        return default
    raw = text(ext, name)
    try:
        return int(raw)
    except ValueError:
        raise Reject(ResponseCode.SYSTEM_ERROR, f"header field {name!r} is not an integer: {raw!r}") from None


def boolean(ext: Mapping[str, str], name: str) -> bool:
    return ext.get(name, "false").lower() == "true"
