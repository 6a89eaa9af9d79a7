"""PySpark data source and jobs that publish through the sidecar over HTTP. Importing this package does
not import pyspark: ``register`` and ``RocksidecarDataSource`` load it when first used."""

import typing as _typing

from .client import GaveUpError, ItemResult, SidecarClient, SidecarError
from .options import OptionError, WriteOptions
from .report import PartitionReport, RejectedRowsError, WriteSummary

if _typing.TYPE_CHECKING:
    from .datasource import RocksidecarDataSource, register

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
    "register",
]
_NEEDS_PYSPARK = {"RocksidecarDataSource", "register"}


def __getattr__(name: str) -> object:
    if name in _NEEDS_PYSPARK:
        from . import datasource

        return getattr(datasource, name)
    raise AttributeError(f"module 'pipeline' has no attribute {name!r}")
