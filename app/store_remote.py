"""``rocksidecar store`` against a running sidecar: the same commands through its admin API
(/v1/admin), for when the sidecar holds the store (RocksDB allows one writer)."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import orjson

HTTP_ADDR_ENV = "ROCKSIDECAR_HTTP_ADDR"
TOKEN_ENV = "ROCKSIDECAR_AUTH_TOKEN"
TIMEOUT_S = 30.0
MAX_REDRIVE_CALLS = 10_000  # a bound on "go on with the cursor" (each call runs for seconds)


class RemoteError(Exception):
    """The sidecar answered with an error (its problem's detail is the message)."""


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
    """A few admin API calls. Raises httpx.TransportError when nothing answers at ``url``."""

    def __init__(self, url: str, token: str | None = None) -> None:
        token = os.environ.get(TOKEN_ENV, "") if token is None else token
        headers = {"authorization": f"Bearer {token}"} if token else {}
        self.url = url.rstrip("/")
        self._client = httpx.Client(base_url=self.url, headers=headers, timeout=TIMEOUT_S)

    def close(self) -> None:
        self._client.close()

    def _call(self, method: str, path: str, **kw: Any) -> Any:
        answer = self._client.request(method, path, **kw)
        if answer.status_code >= 400:
            try:
                detail = answer.json().get("detail") or answer.text
            except ValueError:
                detail = answer.text[:300]
            raise RemoteError(f"the sidecar at {self.url} answered {answer.status_code}: {detail}")
        return answer.json()

    def serves(self, store_path: Path) -> bool:
        """Whether this sidecar is the one holding ``store_path`` (not another one on that port)."""
        stats = self._call("GET", "/v1/admin/stats")
        theirs = stats.get("store")
        return isinstance(theirs, str) and Path(theirs).resolve() == store_path.resolve()

    def stats(self) -> list[str]:
        doc = self._call("GET", "/v1/admin/stats")
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

    def inspect(self, id_: str) -> dict[str, Any]:
        result: dict[str, Any] = self._call("GET", f"/v1/admin/messages/{id_}")
        return result

    def dead_list(self, limit: int, as_json: bool) -> list[str]:
        doc = self._call("GET", "/v1/admin/retries", params={"state": "dead", "limit": min(limit, 1000)})
        lines = []
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

    def redrive(self, id_: str | None, every: bool) -> str:
        body: dict[str, object] = {"all": True} if every else {"id": id_}
        moved = skipped = 0
        for _ in range(MAX_REDRIVE_CALLS):  # each call answers within its deadline; the cursor goes on
            doc = self._call("POST", "/v1/admin/dead-letters:redrive", json=body)
            moved, skipped = moved + doc["redriven"], skipped + doc["skipped"]
            if doc.get("nextCursor") is None:
                break
            body = {"all": True, "cursor": doc["nextCursor"]}
        else:
            raise RemoteError(f"re-drove {moved} dead letter(s) and stopped after {MAX_REDRIVE_CALLS} calls")
        text = f"re-drove {moved} dead letter(s)" + (f"; skipped {skipped} corrupt" if skipped else "")
        return text + (f"; {doc['stillDead']} still dead" if doc.get("stillDead") else "")

    def replay(self, topic: str | None) -> str:
        doc = self._call("POST", "/v1/admin/retries:replay", json={"topic": topic} if topic else {})
        if not doc["pending"]:
            return "nothing is pending"
        return f"replaying {doc['pending']} pending message(s) now" + (f" of topic {topic}" if topic else "")
