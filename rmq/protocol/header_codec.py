"""The two header encodings of a remoting frame: JSON (what we send) and ROCKETMQ binary.

A Java peer may answer in either, so both are decoded on every connection (protocol reference §1.3).
"""

from __future__ import annotations

import struct
from typing import Any, Protocol

import orjson

from ..codes import LanguageCode, SerializeType
from ..errors import FrameError
from .numbers import INT32_MAX as _I32_MAX
from .numbers import INT32_MIN as _I32_MIN
from .numbers import java_int

_LANG_BY_NAME = {m.name: int(m) for m in LanguageCode}
_BIN_FIXED = struct.Struct(">hbhii")  # code, language, version, opaque, flag
_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")
# What a peer's header may hold. Java's request and response headers have a few dozen fields at most
# (a message's properties travel as one field); a remark is an error text.
MAX_EXT_FIELDS = 256
MAX_REMARK_CHARS = 4096


class HeaderFields(Protocol):
    """What a header encoder reads (a RemotingCommand has these)."""

    code: int
    language: int
    version: int
    opaque: int
    flag: int
    remark: str | None
    ext_fields: dict[str, str]


def encode_json(h: HeaderFields) -> bytes:
    doc: dict[str, Any] = {
        "code": h.code,
        "flag": h.flag,
        "language": _LANG_NAME.get(h.language, _OTHER_NAME),
        "opaque": h.opaque,
        "serializeTypeCurrentRPC": "JSON",
        "version": h.version,
    }
    if h.remark is not None:
        doc["remark"] = h.remark
    if h.ext_fields:
        doc["extFields"] = h.ext_fields
    return orjson.dumps(doc)


def decode_json(data: bytes) -> tuple[int, int, int, int, int, str | None, dict[str, str]]:
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise FrameError(f"undecodable JSON header: {exc}") from exc
    if not isinstance(doc, dict) or "code" not in doc:
        raise FrameError("JSON header is not an object with a code")
    raw_ext = doc.get("extFields") or {}
    if not isinstance(raw_ext, dict):
        raise FrameError("JSON header's extFields is not an object")
    if len(raw_ext) > MAX_EXT_FIELDS:
        raise FrameError(f"JSON header has {len(raw_ext)} extFields, more than {MAX_EXT_FIELDS}")
    lang = doc.get("language", "JAVA")
    language = (
        _LANG_BY_NAME.get(lang, int(LanguageCode.OTHER)) if isinstance(lang, str) else _i32(lang, "language")
    )
    ext = {str(k): v if isinstance(v, str) else _to_text(v) for k, v in raw_ext.items() if v is not None}
    remark = doc.get("remark")
    if remark is not None and (type(remark) is not str or len(remark) > MAX_REMARK_CHARS):
        remark = _short_remark(remark if isinstance(remark, str) else _to_text(remark))
    code, version, opaque, flag = doc["code"], doc.get("version", 0), doc.get("opaque", 0), doc.get("flag", 0)
    # every frame passes here: plain ints in range are taken as they are, anything else is checked
    if not (
        type(code) is int
        and type(version) is int
        and type(opaque) is int
        and type(flag) is int
        and _I32_MIN <= code <= _I32_MAX
        and _I32_MIN <= version <= _I32_MAX
        and _I32_MIN <= opaque <= _I32_MAX
        and _I32_MIN <= flag <= _I32_MAX
    ):
        code, version = _i32(code, "code"), _i32(version, "version")
        opaque, flag = _i32(opaque, "opaque"), _i32(flag, "flag")
    return code, language, version, opaque, flag, remark, ext


def _i32(value: object, name: str) -> int:
    """A header number as Java reads it into an int."""
    number = java_int(value, _I32_MIN, _I32_MAX)
    if number is None:
        raise FrameError(f"JSON header's {name} is not a 32-bit integer: {str(value)[:40]!r}")
    return number


def _short_remark(remark: str) -> str:
    """A remark is a human's text: one of megabytes is cut (it ends up in errors and log lines)."""
    if len(remark) <= MAX_REMARK_CHARS:
        return remark
    return f"{remark[:MAX_REMARK_CHARS]}... ({len(remark)} characters)"


def _to_text(value: object) -> str:
    # fastjson turns JSON numbers and booleans in extFields into their Java string forms.
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def encode_binary(h: HeaderFields) -> bytes:
    parts = [_BIN_FIXED.pack(h.code, h.language, h.version, h.opaque, h.flag)]
    remark_b = h.remark.encode() if h.remark else b""
    parts.append(_I32.pack(len(remark_b)))
    parts.append(remark_b)
    ext = bytearray()
    for key, value in (h.ext_fields or {}).items():
        kb, vb = key.encode(), value.encode()
        ext += _I16.pack(len(kb)) + kb + _I32.pack(len(vb)) + vb
    parts.append(_I32.pack(len(ext)))
    parts.append(bytes(ext))
    return b"".join(parts)


def _read_str(
    data: bytes, pos: int, end: int, length: struct.Struct, what: str, within: str
) -> tuple[bytes, int]:
    """The string at ``pos`` (its length first, as ``length`` packs it) and the position after it, as
    Java's readStr: a length that is negative or runs past ``end`` is refused, naming ``what`` and the
    part it overruns (``within``)."""
    (n,) = length.unpack_from(data, pos)
    pos += length.size
    if not 0 <= n <= end - pos:
        raise FrameError(f"binary header {what} length {n} overruns the {within}")
    return data[pos : pos + n], pos + n


def decode_binary(data: bytes) -> tuple[int, int, int, int, int, str | None, dict[str, str]]:
    # Every length is checked against what is left, and a negative one refused (Java's readStr fails
    # on it too): a negative key length once moved the cursor back and looped forever.
    size = len(data)
    try:
        code, language, version, opaque, flag = _BIN_FIXED.unpack_from(data, 0)
        pos = _BIN_FIXED.size
        remark_b, pos = _read_str(data, pos, size, _I32, "remark", "header")
        remark = _short_remark(remark_b.decode()) if remark_b else None
        (ext_len,) = _I32.unpack_from(data, pos)
        pos += 4
        end = pos + ext_len
        if ext_len < 0 or end > size:
            raise FrameError("binary header map overruns the header")
        ext: dict[str, str] = {}
        while pos < end:
            if len(ext) >= MAX_EXT_FIELDS:
                raise FrameError(f"binary header has more than {MAX_EXT_FIELDS} extFields")
            key_b, pos = _read_str(data, pos, end, _I16, "key", "map")
            key = key_b.decode()
            value_b, pos = _read_str(data, pos, end, _I32, "value", "map")
            if value_b:  # Java 4.9.4+ reads an empty value as null, i.e. absent.
                ext[key] = value_b.decode()
    except (struct.error, UnicodeDecodeError) as exc:
        raise FrameError(f"undecodable binary header: {exc}") from exc
    return code, language, version, opaque, flag, remark, ext


# Every frame names its language: a dict read, not an Enum call and its .name descriptor (issue 32).
_LANG_NAME = {int(code): code.name for code in LanguageCode}
# The name of a language code we do not know. Read once: a .get default is evaluated on every call, and
# an Enum member's .name is a Python-level descriptor.
_OTHER_NAME = LanguageCode.OTHER.name


ENCODERS = {SerializeType.JSON: encode_json, SerializeType.ROCKETMQ: encode_binary}
DECODERS = {SerializeType.JSON: decode_json, SerializeType.ROCKETMQ: decode_binary}
