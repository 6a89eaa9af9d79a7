"""Publish one partition's rows in batches: batch n goes out under Idempotency-Key ``<prefix>:b<n>``, and
items answered FAILED go out again under a key naming exactly which of the batch's items they are, so a
re-run of the task repeats every request byte for byte and the sidecar answers instead of sending."""

from __future__ import annotations

import hashlib
import itertools
import logging
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from pipeline.client import GaveUpError, ItemResult, SidecarClient
from pipeline.message import MessageBuilder
from pipeline.report import MAX_NAMED, PartitionReport, Rejection

log = logging.getLogger(__name__)


def subset_key(key: str, indexes: Iterable[int]) -> str:
    """The key for re-posting these items of the batch posted under ``key``. It depends on which items,
    not on the round: after a task re-run, the same FAILED set maps to the same stored answer."""
    digest = hashlib.sha256(",".join(map(str, indexes)).encode()).hexdigest()[:16]
    return f"{key}:r{digest}"


class PartitionPublisher:
    def __init__(
        self, client: SidecarClient, builder: MessageBuilder, key_prefix: str, batch_size: int, partition: int
    ) -> None:
        self._client = client
        self._builder = builder
        self._prefix = key_prefix
        self._batch_size = batch_size
        self._partition = partition

    def publish(self, rows: Iterable[Mapping[str, Any]]) -> PartitionReport:
        """Raises SidecarError (a refused request), GaveUpError (unavailable, or items still FAILED)."""
        counts: Counter[str] = Counter()
        rejections: list[Rejection] = []
        numbered = enumerate(rows)
        for batch_no in itertools.count():
            chunk = list(itertools.islice(numbered, self._batch_size))
            if not chunk:
                break
            results = self._post(chunk, f"{self._prefix}:b{batch_no}", counts)
            for (index, row), result in zip(chunk, results, strict=True):
                counts[result.status] += 1
                if result.status == "REJECTED" and len(rejections) < MAX_NAMED:
                    rejections.append(Rejection(self._builder.row_id(row, index), result.error or ""))
        report = PartitionReport(
            partition=self._partition,
            rows=sum(counts[s] for s in ("SENT", "SPOOLED", "SCHEDULED", "REJECTED")),
            sent=counts["SENT"],
            spooled=counts["SPOOLED"],
            scheduled=counts["SCHEDULED"],
            rejected=counts["REJECTED"],
            requests=counts["requests"],
            failed_retried=counts["failed_retried"],
            rejections=tuple(rejections),
        )
        log.info("partition %d published under %s: %s", self._partition, self._prefix, report)
        return report

    def _post(
        self, chunk: list[tuple[int, Mapping[str, Any]]], key: str, counts: Counter[str]
    ) -> list[ItemResult]:
        messages = [self._builder.build(row) for _, row in chunk]
        results = self._client.post_batch(messages, key)
        counts["requests"] += 1
        pending = [i for i, r in enumerate(results) if r.status == "FAILED"]
        attempt = 0
        while pending:
            if attempt == self._client.max_retries:
                rows = [self._builder.row_id(chunk[i][1], chunk[i][0]) for i in pending[:20]]
                raise GaveUpError(
                    f"partition {self._partition}: {len(pending)} rows still FAILED after "
                    f"{attempt} retries (rows {rows}): {results[pending[0]].error}"
                )
            counts["failed_retried"] += len(pending)
            self._client.pause(attempt)
            again = self._client.post_batch([messages[i] for i in pending], subset_key(key, pending))
            counts["requests"] += 1
            for i, result in zip(pending, again, strict=True):
                results[i] = result
            pending = [i for i in pending if results[i].status == "FAILED"]
            attempt += 1
        return results
