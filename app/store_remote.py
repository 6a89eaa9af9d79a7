"""``rocksidecar store`` against a running sidecar: the same commands through its admin API
(/v1/admin), for when the sidecar holds the store (RocksDB allows one writer)."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import orjson

from .http_client import HttpClient

HTTP_ADDR_ENV = "ROCKSIDECAR_HTTP_ADDR"
TOKEN_ENV = "ROCKSIDECAR_AUTH_TOKEN"
TIMEOUT_S = 30.0
MAX_REDRIVE_CALLS = 10_000  # a bound on "go on with the cursor" (each call runs for seconds)


class RemoteError(Exception):
    """The sidecar answered with an error (its problem's detail is the message), or what answered is
    not a sidecar's admin API."""


class RefusedError(RemoteError):
    """A sidecar answered and refused the CLI (401, 403): never a reason to read the store behind its
    back as if nothing answered."""


NOT_OURS = "is that a rocksidecar's address?"


def default_url() -> str:
    """The local sidecar's HTTP API, from the same setting the sidecar reads."""
    addr = os.environ.get(HTTP_ADDR_ENV, "127.0.0.1:9880").strip()
    host, _, port = addr.rpartition(":")
    if host in ("0.0.0.0", "::", "[::]", ""):  # a listen-everywhere address: call loopback
        host = "127.0.0.1"
    return f"http://{host}:{port}"


def iso(ms: int | None) -> str:
    moment = datetime.now(UTC) if ms is None else datetime.fromtimestamp(ms / 1000, UTC)
    return moment.isoformat(timespec="milliseconds")


class Remote:
    """A few admin API calls over app's one HTTP client. Raises PostError when nothing answers at
    ``url``, RemoteError when the sidecar answers an error."""

    def __init__(self, url: str, token: str | None = None, client: HttpClient | None = None) -> None:
        token = os.environ.get(TOKEN_ENV, "") if token is None else token
        self._headers = {"authorization": f"Bearer {token}"} if token else {}
        self._headers["accept"] = "application/json"
        self.url = url.rstrip("/")
        self._client = client or HttpClient()

    async def close(self) -> None:
        await self._client.close()

    async def _call(
        self, method: str, path: str, *, json: object = None, params: Mapping[str, object] | None = None
    ) -> Any:
        url = self.url + path + (f"?{urlencode(params)}" if params else "")
        headers = dict(self._headers)
        body = b""
        if json is not None:
            body = orjson.dumps(json)
            headers["content-type"] = "application/json"
        answer = await self._client.request(url, body, headers, TIMEOUT_S, method)
        if answer.status == 401:
            if "authorization" in self._headers:
                raise RefusedError(f"the sidecar at {self.url} answered 401: {TOKEN_ENV} is not its token")
            raise RefusedError(
                f"the sidecar at {self.url} requires a token (it answered 401): set {TOKEN_ENV} to its token"
            )
        if answer.status >= 400:
            text = answer.body.decode("utf-8", "replace")
            try:
                detail = orjson.loads(answer.body).get("detail") or text
            except (orjson.JSONDecodeError, AttributeError):
                detail = text[:300]
            error = RefusedError if answer.status == 403 else RemoteError  # a Host or Origin it refuses
            raise error(f"the sidecar at {self.url} answered {answer.status}: {detail}")
        try:
            return orjson.loads(answer.body)
        except orjson.JSONDecodeError:  # something else on that port (a web page, another service)
            raise RemoteError(
                f"{self.url}{path} answered {answer.status} with something other than JSON: {NOT_OURS}"
            ) from None

    @contextmanager
    def _reading(self, path: str) -> Iterator[None]:
        """Around the reads of one answer's fields: JSON of another shape is not a sidecar's answer."""
        try:
            yield
        except (KeyError, TypeError, AttributeError, IndexError, ValueError, OverflowError) as exc:
            what = f"no {exc}" if isinstance(exc, KeyError) else str(exc)
            raise RemoteError(
                f"{self.url}{path} answered JSON of another shape ({what}): {NOT_OURS}"
            ) from None

    async def serves(self, store_path: Path) -> bool:
        """Whether this sidecar is the one holding ``store_path`` (not another one on that port)."""
        stats = await self._call("GET", "/v1/admin/stats")
        theirs = stats.get("store") if isinstance(stats, dict) else None
        return isinstance(theirs, str) and _same_path(Path(theirs), store_path)

    async def stats(self) -> list[str]:
        path = "/v1/admin/stats"
        doc = await self._call("GET", path)
        with self._reading(path):
            return self._stats_lines(doc)

    @staticmethod
    def _stats_lines(doc: Any) -> list[str]:
        retry, scheduled = doc["retry"], doc["scheduled"]
        lines = [f"pending: {retry['pending']}", f"dead: {retry['dead']}"]
        if retry["oldestDueMs"] is not None:
            late_s = (doc["nowMs"] - retry["oldestDueMs"]) / 1000
            when = f"{late_s:.1f} s ago" if late_s >= 0 else f"in {-late_s:.1f} s"
            lines.append(f"oldest due: {iso(retry['oldestDueMs'])} ({when})")
        if retry["oldestFirstFailureMs"]:
            lines.append(f"oldest first failure: {iso(retry['oldestFirstFailureMs'])}")
        lines.append(f"in flight: {retry['inFlight']}")
        lines.append(f"scheduled: {scheduled['pending']}")
        if scheduled["nextDueMs"] is not None:
            lines.append(f"next scheduled due: {iso(scheduled['nextDueMs'])}")
        lines += [
            f"broker {b['broker']}: {b['state']}"
            + (f" for {b['notAvailableForS']:.0f} s more" if b["notAvailableForS"] else "")
            for b in doc["brokers"]
        ]
        return lines

    async def inspect(self, id_: str) -> dict[str, Any]:
        result: dict[str, Any] = await self._call("GET", f"/v1/admin/messages/{quote(id_, safe='')}")
        return result

    async def dead_list(self, limit: int, as_json: bool) -> list[str]:
        path = "/v1/admin/retries"
        doc = await self._call("GET", path, params={"state": "dead", "limit": min(limit, 1000)})
        lines = []
        with self._reading(path):
            for item in doc["items"]:
                if as_json:
                    lines.append(orjson.dumps(item).decode())
                    continue
                what = (
                    f"{item['topic']} type={item['type']} attempts={item['attempts']}"
                    if "topic" in item
                    else "(corrupt value)"
                )
                lines.append(f"{iso(item['deadAtMs'])}  {item['id']}  {what}  {item['reason']}")
        return lines

    async def redrive(self, id_: str | None, every: bool) -> str:
        path = "/v1/admin/dead-letters:redrive"
        body: dict[str, object] = {"all": True} if every else {"id": id_}
        moved = skipped = 0
        for _ in range(MAX_REDRIVE_CALLS):  # each call answers within its deadline; the cursor goes on
            doc = await self._call("POST", path, json=body)
            with self._reading(path):
                moved, skipped = moved + int(doc["redriven"]), skipped + int(doc["skipped"])
                cursor = doc.get("nextCursor")
            if cursor is None:
                break
            body = {"all": True, "cursor": cursor}
        else:
            raise RemoteError(f"re-drove {moved} dead letter(s) and stopped after {MAX_REDRIVE_CALLS} calls")
        text = f"re-drove {moved} dead letter(s)" + (f"; skipped {skipped} corrupt" if skipped else "")
        return text + (f"; {doc['stillDead']} still dead" if doc.get("stillDead") else "")

    async def replay(self, topic: str | None) -> str:
        path = "/v1/admin/retries:replay"
        doc = await self._call("POST", path, json={"topic": topic} if topic else {})
        with self._reading(path):
            pending = int(doc["pending"])
        if not pending:
            return "nothing is pending"
        return f"replaying {pending} pending message(s) now" + (f" of topic {topic}" if topic else "")


def _same_path(a: Path, b: Path) -> bool:
    # a CLI's one-off stat calls: blocking the loop for them is harmless (nothing else runs on it)
    return a.resolve() == b.resolve()
