"""RemotingCommand and its frame: ``total_length | header_word | header | body`` (big-endian).

``FrameDecoder`` cuts a byte stream into commands incrementally, for the connection's reader.
"""

from __future__ import annotations

import struct

import msgspec

from ..codes import CLIENT_VERSION, FLAG_ONEWAY, FLAG_RESPONSE, LanguageCode, SerializeType
from ..errors import FrameError, RequestTooLarge
from .header_codec import DECODERS, ENCODERS

MAX_FRAME_BYTES = 16 * 1024 * 1024  # including the 4-byte length prefix, as Java's NettyDecoder
# A header is a few hundred bytes (a send's properties at most 32 KiB); one of megabytes would decode into
# a dict of millions of fields. Bodies carry the bulk.
MAX_HEADER_BYTES = 1024 * 1024
_PREFIX = struct.Struct(">ii")
_I32 = struct.Struct(">i")


class RemotingCommand(msgspec.Struct):
    """A request or response. A Struct, not a slots dataclass: two are built per send (the request and
    the decoded answer), and its __init__ in C takes a fraction of the dataclass's (issue 32)."""

    code: int
    ext_fields: dict[str, str] = msgspec.field(default_factory=dict)
    body: bytes = b""
    remark: str | None = None
    opaque: int = 0
    flag: int = 0
    language: int = LanguageCode.PYTHON
    version: int = CLIENT_VERSION
    serialize_type: SerializeType = SerializeType.JSON

    @property
    def is_response(self) -> bool:
        return bool(self.flag & FLAG_RESPONSE)

    @property
    def is_oneway(self) -> bool:
        return bool(self.flag & FLAG_ONEWAY)

    def response(
        self,
        code: int,
        remark: str | None = None,
        ext_fields: dict[str, str] | None = None,
        body: bytes = b"",
    ) -> RemotingCommand:
        """A response to this request: same opaque and serialize type, response flag set."""
        return RemotingCommand(
            code=code,
            ext_fields=ext_fields or {},
            body=body,
            remark=remark,
            opaque=self.opaque,
            flag=FLAG_RESPONSE,
            serialize_type=self.serialize_type,
        )


def encode(cmd: RemotingCommand) -> bytes:
    ser = cmd.serialize_type
    header = ENCODERS[ser](cmd)
    body = cmd.body
    total = 4 + len(header) + len(body)
    if total + 4 > MAX_FRAME_BYTES:
        # Not a FrameError (a transport error, retriable): the same command is as large on every broker
        # and at every later try; nothing was written, so no peer and no connection is at fault.
        raise RequestTooLarge(f"frame of {total + 4} bytes exceeds the {MAX_FRAME_BYTES}-byte limit")
    # One join (one copy of the body) rather than two concatenations; the type's number without int()
    # (an IntEnum shifts as its int). Once a frame (issue 32).
    return b"".join((_PREFIX.pack(total, (ser << 24) | len(header)), header, body))


def decode(frame: bytes | memoryview) -> RemotingCommand:
    """Decode one frame without its 4-byte length prefix (header word, header, body)."""
    if len(frame) < 4:
        raise FrameError("frame shorter than its header word")
    (word,) = _I32.unpack_from(frame, 0)
    ser, header_len = (word >> 24) & 0xFF, word & 0xFFFFFF
    if 4 + header_len > len(frame):
        raise FrameError(f"header length {header_len} overruns a frame of {len(frame)} bytes")
    if header_len > MAX_HEADER_BYTES:
        raise FrameError(f"header of {header_len} bytes exceeds the {MAX_HEADER_BYTES}-byte limit")
    try:
        ser_type = SerializeType(ser)
    except ValueError as exc:
        raise FrameError(f"unknown serialize type {ser}") from exc
    header = bytes(frame[4 : 4 + header_len])
    code, language, version, opaque, flag, remark, ext = DECODERS[ser_type](header)
    return RemotingCommand(
        code=code,
        ext_fields=ext,
        body=bytes(frame[4 + header_len :]),
        remark=remark,
        opaque=opaque,
        flag=flag,
        language=language,
        version=version,
        serialize_type=ser_type,
    )


class FrameDecoder:
    """Accumulates stream bytes and returns the complete commands they contain."""

    __slots__ = ("_buf",)

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[RemotingCommand]:
        buf = self._buf
        buf += data
        out: list[RemotingCommand] = []
        pos, size = 0, len(buf)
        with memoryview(buf) as view:  # released before the buffer is resized below
            while size - pos >= 4:
                (length,) = _I32.unpack_from(view, pos)
                if length < 4 or length + 4 > MAX_FRAME_BYTES:
                    raise FrameError(f"bad frame length {length}")
                if size - pos - 4 < length:
                    break
                # Released here, not when the last reference goes: a profiler holding decode()'s frame
                # (sys._current_frames) would otherwise keep the buffer exported and the del below fail.
                with view[pos + 4 : pos + 4 + length] as frame:
                    out.append(decode(frame))
                pos += 4 + length
        if pos:
            del buf[:pos]
        return out
