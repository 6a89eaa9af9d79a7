"""PySpark data source and jobs that publish through the sidecar over HTTP. Importing this package imports
nothing else: each name loads its module on first use (pyspark only for ``register`` and
``RocksidecarDataSource``; httpx only for the client), so declaring ``rocksidecar spark-publish`` is cheap."""

from __future__ import annotations

import importlib
import typing as _typing

if _typing.TYPE_CHECKING:
    from .client import GaveUpError, ItemResult, SidecarClient, SidecarError
    from .datasource import RocksidecarDataSource, register
    from .options import OptionError, WriteOptions
    from .origin import origin_column, origin_id
    from .report import PartitionReport, RejectedRowsError, WriteSummary

__all__ = [
    "GaveUpError",
    "ItemResult",
    "OptionError",
    "PartitionReport",
    "RejectedRowsError",
    "RocksidecarDataSource",
    "SidecarClient",
    "SidecarError",
    "WriteOptions",
    "WriteSummary",
    "origin_column",
    "origin_id",
    "register",
]
_HOME = dict.fromkeys(("GaveUpError", "ItemResult", "SidecarClient", "SidecarError"), "client")
_HOME |= dict.fromkeys(("RocksidecarDataSource", "register"), "datasource")
_HOME |= dict.fromkeys(("OptionError", "WriteOptions"), "options")
_HOME |= dict.fromkeys(("origin_column", "origin_id"), "origin")
_HOME |= dict.fromkeys(("PartitionReport", "RejectedRowsError", "WriteSummary"), "report")


def __getattr__(name: str) -> object:
    if name in _HOME:
        return getattr(importlib.import_module(f".{_HOME[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
