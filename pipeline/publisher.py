"""Publish one partition's rows in batches: batch n goes out under Idempotency-Key ``<prefix>:b<n>`` (with
an idColumn: ``<prefix>:i<digest of the batch's ids>``), and items answered FAILED go out again under a key
naming exactly which of the batch's items they are, so a re-run of the task repeats every request byte for
byte and the sidecar answers instead of sending."""

from __future__ import annotations

import hashlib
import logging
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import orjson

from .client import GaveUpError, ItemResult, SidecarClient, SidecarError
from .message import MessageBuilder, UnsendableRowError
from .options import DEFAULT_BATCH_BYTES, DEFAULT_BATCH_SIZE
from .report import MAX_NAMED, PartitionReport, Rejection

log = logging.getLogger(__name__)


def subset_key(key: str, indexes: Iterable[int]) -> str:
    """The key for re-posting these items of the batch posted under ``key``. It depends on which items,
    not on the round: after a task re-run, the same FAILED set maps to the same stored answer."""
    digest = hashlib.sha256(",".join(map(str, indexes)).encode()).hexdigest()[:16]
    return f"{key}:r{digest}"


def ids_key(prefix: str, ids: Iterable[str]) -> str:
    """The key of a batch of rows with ids: it names the rows (by their ids, in order), not the batch's
    place, so it is the same whichever micro-batch, partition or attempt posts these rows. The ids are
    hashed as a JSON array, so no two lists of ids share an encoding (joined with '\n', as before, ['a\nb']
    and ['a', 'b'] did: the second batch was answered 422). This changed every idColumn key: a job or
    stream re-run across this upgrade sends again the rows an earlier version sent (once; the
    sidecar's idempotency window decides how long the old keys would have been kept anyway)."""
    digest = hashlib.sha256(orjson.dumps(list(ids))).hexdigest()[:32]
    return f"{prefix}:i{digest}"


class Encoded(NamedTuple):
    position: int  # the row's index within the partition
    row: Mapping[str, Any]
    message: bytes  # the message's JSON
    id: str | None  # the idColumn value, if the write has one


# told a row that is not sent (its position, the row, why)
Refuse = Callable[[int, Mapping[str, Any], str], None]


def batches(
    rows: Iterable[Mapping[str, Any]],
    builder: MessageBuilder,
    max_messages: int,
    max_bytes: int,
    refuse: Refuse,
) -> Iterator[list[Encoded]]:
    """Consecutive rows as batches of at most ``max_messages`` messages and ``max_bytes`` of JSON (a
    single larger message goes alone); a row with an empty body goes to ``refuse`` instead. Boundaries
    depend only on the rows, so a re-run cuts alike."""
    chunk: list[Encoded] = []
    size = 0
    for position, row in enumerate(rows):
        try:
            encoded = orjson.dumps(builder.build(row))
            row_id = builder.id_of(row) if builder.has_ids else None
        except UnsendableRowError as exc:
            refuse(position, row, str(exc))
            continue
        if chunk and (len(chunk) == max_messages or size + len(encoded) > max_bytes):
            yield chunk
            chunk, size = [], 0
        chunk.append(Encoded(position, row, encoded, row_id))
        size += len(encoded) + 1
    if chunk:
        yield chunk


@dataclass(eq=False, slots=True)
class PartitionPublisher:
    """Publishes one Spark partition's rows in batches, keyed ``<key_prefix>:b<n>`` (or by their ids) for
    idempotent re-runs."""

    client: SidecarClient
    builder: MessageBuilder
    key_prefix: str
    partition: int
    batch_size: int = field(default=DEFAULT_BATCH_SIZE, kw_only=True)
    batch_bytes: int = field(default=DEFAULT_BATCH_BYTES, kw_only=True)

    def publish(self, rows: Iterable[Mapping[str, Any]]) -> PartitionReport:
        """Raises SidecarError (a refused request), GaveUpError (unavailable, or items still FAILED)."""
        counts: Counter[str] = Counter()
        rejections: list[Rejection] = []

        def reject(position: int, row: Mapping[str, Any], error: str) -> None:
            counts["REJECTED"] += 1
            if len(rejections) < MAX_NAMED:
                rejections.append(Rejection(self.builder.row_id(row, position), error))

        def refuse(position: int, row: Mapping[str, Any], error: str) -> None:
            counts["rows"] += 1
            reject(position, row, error)

        chunks = batches(rows, self.builder, self.batch_size, self.batch_bytes, refuse)
        for batch_no, chunk in enumerate(chunks):
            # every row is counted as it goes in, not from what the answers say became of it: a row no
            # answer accounts for then shows as not accepted (publish_job exits 0 only if all were)
            counts["rows"] += len(chunk)
            if self.builder.has_ids:
                key = ids_key(self.key_prefix, (item.id or "" for item in chunk))
            else:
                key = f"{self.key_prefix}:b{batch_no}"
            results = self._post(chunk, key, counts)
            for item, result in zip(chunk, results, strict=True):
                if result.status == "REJECTED":
                    reject(item.position, item.row, result.error or "")
                else:
                    # stored by an earlier run under the same key (a re-run with the same jobId): not sent now
                    counts["DEDUPLICATED" if result.replayed and result.stored else result.status] += 1
        report = PartitionReport(
            partition=self.partition,
            rows=counts["rows"],
            sent=counts["SENT"],
            spooled=counts["SPOOLED"],
            scheduled=counts["SCHEDULED"],
            deduplicated=counts["DEDUPLICATED"],
            rejected=counts["REJECTED"],
            requests=counts["requests"],
            failed_retried=counts["failed_retried"],
            rejections=tuple(rejections),
        )
        log.info("partition %d published under %s: %s", self.partition, self.key_prefix, report)
        return report

    def _send(self, items: list[bytes], key: str) -> list[ItemResult]:
        try:
            return self.client.post_encoded(items, key)
        except SidecarError as exc:
            if exc.status != 422:
                raise
            raise SidecarError(
                f"partition {self.partition}: the sidecar already has a different request under "
                f"Idempotency-Key {key!r}: an earlier attempt of this write sent other rows in this batch. "
                "The partition's rows must be the same, in the same order, on every attempt (read files, "
                "or sortWithinPartitions after a shuffle), and a jobId names one dataset only",
                422,
            ) from exc

    def _post(self, chunk: list[Encoded], key: str, counts: Counter[str]) -> list[ItemResult]:
        results = self._send([item.message for item in chunk], key)
        counts["requests"] += 1
        pending = [i for i, r in enumerate(results) if r.status == "FAILED"]
        attempt = 0
        while pending:
            if attempt == self.client.max_retries:
                rows = [self.builder.row_id(chunk[i].row, chunk[i].position) for i in pending[:20]]
                raise GaveUpError(
                    f"partition {self.partition}: {len(pending)} rows still FAILED after "
                    f"{attempt} retries (rows {rows}): {results[pending[0]].error}"
                )
            counts["failed_retried"] += len(pending)
            self.client.pause(attempt)
            again = self._send([chunk[i].message for i in pending], subset_key(key, pending))
            counts["requests"] += 1
            for i, result in zip(pending, again, strict=True):
                results[i] = result
            pending = [i for i in pending if results[i].status == "FAILED"]
            attempt += 1
        return results
