"""An in-memory fake of the sidecar's POST /v1/messages:batch contract: per-item SENT/SPOOLED,
REJECTED (no or empty body) and scripted FAILED items, Idempotency-Key (same key and body -> the first
answer, marked Idempotent-Replayed; another body -> 422; answers with FAILED items are not kept),
bearer auth, and scripted 503/429 phases and dropped connections."""

from __future__ import annotations

import hashlib
import itertools
import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import orjson

from tests.pipeline.http_double import Reply, Request

ALLOWED = {"topic", "body", "bodyBase64", "tags", "keys", "properties", "shardingKey"}


def problem(status: int, title: str, detail: str, field_: str | None = None, **headers: str) -> Reply:
    doc: dict[str, Any] = {"type": "about:blank", "title": title, "status": status, "detail": detail}
    if field_:
        doc["field"] = field_
    return Reply(status, orjson.dumps(doc), {"Content-Type": "application/problem+json", **headers})


@dataclass
class Seen:
    key: str | None
    size: int
    status: int
    user_agent: str = ""


@dataclass
class FakeSidecar:
    token: str = ""
    batch_limit: int = 1000
    stored: list[dict[str, Any]] = field(default_factory=list)  # every message stored, with its "id"
    requests: list[Seen] = field(default_factory=list)
    unavailable: deque[tuple[int, str | None]] = field(default_factory=deque)  # answered first, in order
    drop_after_store: int = 0  # this many requests are processed, then the connection drops unanswered
    fail_times: dict[str, int] = field(default_factory=dict)  # body -> how many times it answers FAILED
    _answers: dict[str, tuple[str, Reply]] = field(default_factory=dict)
    _ids: itertools.count[int] = field(default_factory=itertools.count)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, req: Request) -> Reply | None:
        with self._lock:
            key = req.headers.get("idempotency-key")
            reply = self._handle(req, key)
            self.requests.append(Seen(key, self._size(req), reply.status, req.headers.get("user-agent", "")))
            if self.drop_after_store > 0:
                self.drop_after_store -= 1
                return None
            return reply

    @staticmethod
    def _size(req: Request) -> int:
        try:
            return len(orjson.loads(req.body)["messages"])
        except (ValueError, KeyError, TypeError):
            return -1

    def bodies(self) -> list[str]:
        return [m.get("body") or m.get("bodyBase64") or "" for m in self.stored]

    def _handle(self, req: Request, key: str | None) -> Reply:
        if req.method != "POST" or req.path != "/v1/messages:batch":
            return problem(404, "Not found", f"no route {req.method} {req.path}")
        if self.token and req.headers.get("authorization") != f"Bearer {self.token}":
            return problem(401, "Unauthorized", "missing or wrong bearer token")
        if self.unavailable:
            status, retry_after = self.unavailable.popleft()
            return problem(
                status, "Unavailable", "scripted", **({"Retry-After": retry_after} if retry_after else {})
            )
        fp = hashlib.sha256(req.path.encode() + b"?" + req.query.encode() + b"\n" + req.body).hexdigest()
        if key is not None and key in self._answers:
            kept_fp, kept = self._answers[key]
            if kept_fp != fp:
                return problem(422, "Idempotency-Key reused", "different request", "Idempotency-Key")
            return Reply(kept.status, kept.body, {**kept.headers, "Idempotent-Replayed": "true"})
        reply, failed = self._batch(req)
        if key is not None and reply.status < 500 and not failed:
            self._answers[key] = (fp, reply)
        return reply

    def _batch(self, req: Request) -> tuple[Reply, int]:
        """The answer and how many of its items FAILED."""
        try:
            messages = orjson.loads(req.body)["messages"]
        except (ValueError, KeyError, TypeError):
            return problem(400, "Invalid request", "not a batch", "messages"), 0
        if not 1 <= len(messages) <= self.batch_limit:
            return problem(413, "Too large", f"a batch holds 1 to {self.batch_limit} messages", "messages"), 0
        for i, m in enumerate(messages):
            unknown = set(m) - ALLOWED
            if unknown:
                field_ = f"messages[{i}].{sorted(unknown)[0]}"
                return problem(400, "Invalid request", "unknown field", field_), 0
        ok_status = "SPOOLED" if "ack=spool" in req.query else "SENT"
        results = [self._item(i, m, ok_status) for i, m in enumerate(messages)]
        counts = {
            s: sum(r["status"] == s.upper() for r in results)
            for s in ("sent", "spooled", "scheduled", "rejected", "failed")
        }
        return Reply(200, orjson.dumps({"results": results, **counts})), counts["failed"]

    def _item(self, i: int, m: dict[str, Any], ok_status: str) -> dict[str, Any]:
        body = m.get("body") if m.get("body") is not None else m.get("bodyBase64")
        if (m.get("body") is None) == (m.get("bodyBase64") is None) or not body:
            err = problem(400, "Invalid request", "the body is empty or missing", f"messages[{i}].body")
            return {"index": i, "status": "REJECTED", "error": orjson.loads(err.body)}
        if self.fail_times.get(body, 0) > 0:
            self.fail_times[body] -= 1
            err = problem(503, "Store unavailable", "the local store is full")
            return {"index": i, "status": "FAILED", "error": orjson.loads(err.body)}
        msg_id = f"ID{next(self._ids):08d}"
        self.stored.append({**m, "id": msg_id})
        return {"index": i, "id": msg_id, "status": ok_status}
