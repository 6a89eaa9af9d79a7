"""Versioned framing of stored values, shared by the retry and delay codecs: one format-version byte, a
4-byte big-endian metadata length, the metadata, then the body verbatim (bodies are arbitrary bytes and
are never re-encoded)."""

from __future__ import annotations

import struct

_HEADER = struct.Struct(">BI")


def frame(version: int, meta: bytes, body: bytes) -> bytes:
    return _HEADER.pack(version, len(meta)) + meta + body


def unframe(data: bytes, version: int) -> tuple[bytes, bytes]:
    """(metadata, body) of a value framed with ``version``. Raises ValueError for anything else."""
    if len(data) < _HEADER.size:
        raise ValueError(f"{len(data)} bytes is shorter than the header")
    found, meta_len = _HEADER.unpack_from(data)
    if found != version:
        raise ValueError(f"unknown format version {found}")
    end = _HEADER.size + meta_len
    if end > len(data):
        raise ValueError(f"metadata length {meta_len} runs past the end ({len(data)} bytes)")
    return data[_HEADER.size : end], data[end:]
