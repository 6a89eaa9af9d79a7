"""/ui: a status page rendered on the server, with no script or style from elsewhere (works offline):
brokers and their back-off, retry-store depth and age, dead letters with re-drive buttons, scheduled
messages by due time, message and replay counters, charts of the last minutes (inline SVG), and
transactions (undecided, oldest age, outcomes, the open ones) when the sidecar runs them.

Same auth as the API: with ROCKSIDECAR_AUTH_TOKEN set, the page needs ``Authorization: Bearer <token>``
or the cookie that ``/ui?token=<token>`` sets once (a browser cannot send the header by itself). The
re-drive buttons post JSON with fetch() to /ui/redrive, same origin, authorised the same way. No other
site may frame the page (X-Frame-Options, CSP frame-ancestors): a click on a framed "Re-drive all" would
be a same-origin request the edge cannot tell apart.
"""

from __future__ import annotations

import hmac
import html
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from rocksidecar.delay.admin import scheduled_page
from rocksidecar.retry.admin import dead_page
from rocksidecar.storage.query import Filter

from ..history import History
from ..metrics import Metrics
from ..request import RequestError
from ..subscriptions.runner import QueueLag
from .admin import (
    AdminOps,
    RedriveIn,
    TransactionsView,
    dead_view,
    listed_view,
    parse_body,
    problem_response,
    redrive_dead,
    scheduled_view,
    stats_view,
)
from .docs import NOT_FRAMED
from .guards import Guards

COOKIE = "rocksidecar_token"
SHOWN = 20  # dead letters and scheduled messages listed
MESSAGE_OUTCOMES = ("sent", "spooled", "scheduled", "rejected", "failed")
REPLAY_OUTCOMES = ("delivered", "rescheduled", "dead", "quarantined")


@dataclass(frozen=True, slots=True)
class UiDeps:
    ops: AdminOps
    metrics: Metrics
    history: History
    auth_token: str = ""
    consumer_lag: Callable[[], Sequence[QueueLag]] | None = None  # only when subscriptions exist


def counters(metrics: Metrics) -> dict[str, float]:
    """Totals of messages by outcome and replays by outcome, as the history and the page show them."""
    out: dict[str, float] = {}
    for outcome in MESSAGE_OUTCOMES:
        value = metrics.registry.get_sample_value("rocksidecar_messages_total", {"outcome": outcome})
        out[f"messages_{outcome}"] = value or 0.0
    for outcome in REPLAY_OUTCOMES:
        value = metrics.registry.get_sample_value("rocksidecar_replays_total", {"outcome": outcome})
        out[f"replays_{outcome}"] = value or 0.0
    return out


def _authorized(request: Request, token: str) -> bool:
    if not token:
        return True
    if Guards(token).authorized(request.headers.get("authorization")):  # the API's own check
        return True
    return hmac.compare_digest(request.cookies.get(COOKIE, "").encode(), token.encode())


def ui_routes(app: FastAPI, deps: UiDeps) -> None:
    @app.get("/ui", include_in_schema=False)
    async def page(request: Request) -> Response:
        given = request.query_params.get("token")
        if (
            given is not None
            and deps.auth_token
            and hmac.compare_digest(given.encode(), deps.auth_token.encode())
        ):
            # the token leaves the address bar
            answer = RedirectResponse("/ui", status_code=303, headers=NOT_FRAMED)
            answer.set_cookie(COOKIE, given, httponly=True, samesite="strict", path="/ui")
            return answer
        if not _authorized(request, deps.auth_token):
            return HTMLResponse(
                _unauthorized(), status_code=401, headers={"www-authenticate": "Bearer", **NOT_FRAMED}
            )
        return HTMLResponse(render(deps), headers=NOT_FRAMED)

    @app.post("/ui/redrive", include_in_schema=False)
    async def redrive(request: Request) -> Response:
        if not _authorized(request, deps.auth_token):
            return problem_response(
                RequestError(
                    "the status page's token is missing or wrong",
                    field="Authorization",
                    status=401,
                    title="Unauthorized",
                )
            )
        try:
            done = await redrive_dead(deps.ops, await parse_body(request, RedriveIn))
        except Exception as exc:
            return problem_response(exc)
        return Response(orjson.dumps(done), media_type="application/json")


# --- rendering -------------------------------------------------------------------------------------
def _e(value: object) -> str:
    return html.escape("" if value is None else str(value))


def _when(ms: int | None, now_ms: int) -> str:
    if ms is None:
        return "-"
    try:
        at = datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    except (ValueError, OverflowError, OSError):
        # A time a stored record holds need not be one a date can show: the number, not a 500 page.
        return f"{ms} ms (out of range)"
    delta_s = (ms - now_ms) / 1000
    rel = f"in {_span(delta_s)}" if delta_s >= 0 else f"{_span(-delta_s)} ago"
    return f"{at} ({rel})"


def _span(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    if seconds < 172800:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"


def _num(key: str, value: float | int) -> str:
    text = f"{value:,.0f}" if isinstance(value, int) or float(value).is_integer() else f"{value:,.1f}"
    return f'<span class="num" data-k="{_e(key)}">{_e(text)}</span>'


def sparkline(points: Sequence[tuple[float, float]], *, width: int = 300, height: int = 60) -> str:
    """An inline SVG line of ``points`` (time, value), scaled to fit; a note when there are too few."""
    if len(points) < 2:
        note = f'<text x="4" y="{height // 2}" class="muted">collecting samples...</text>'
        return f'<svg width="{width}" height="{height}" role="img">{note}</svg>'
    t0, t1 = points[0][0], points[-1][0]
    top = max(v for _, v in points) or 1.0
    span = (t1 - t0) or 1.0
    coords = " ".join(
        f"{(t - t0) / span * (width - 4) + 2:.1f},{height - 2 - v / top * (height - 14):.1f}"
        for t, v in points
    )
    return (
        f'<svg width="{width}" height="{height}" role="img">'
        f'<polyline fill="none" stroke="#2b6cb0" stroke-width="2" points="{coords}"/>'
        f'<text x="{width - 4}" y="10" text-anchor="end" class="muted">max {top:,.1f}</text></svg>'
    )


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]], empty: str) -> str:
    if not rows:
        return f'<p class="muted">{_e(empty)}</p>'
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def render(deps: UiDeps) -> str:
    ops = deps.ops
    stats = stats_view(ops)
    now = stats["nowMs"]
    retry, scheduled = stats["retry"], stats["scheduled"]
    dead = [dead_view(d) for d in dead_page(ops.retry, Filter(), limit=SHOWN).items]
    due = [scheduled_view(s) for s in scheduled_page(ops.delay, Filter(), limit=SHOWN).items]
    totals = counters(deps.metrics)
    sections = [
        _brokers(stats["brokers"]),
        _store(retry, scheduled, now, stats["disk"]),
        _counters(totals),
        _charts(deps.history),
        *([_lag(deps.consumer_lag())] if deps.consumer_lag is not None else []),
        _dead(dead, retry["dead"], now),
        _scheduled(due, scheduled["pending"], now),
        *([_transactions(ops.transactions, now)] if ops.transactions is not None else []),
    ]
    return _PAGE.format(now=_e(_when(now, now).split(" (")[0]), body="\n".join(sections))


def _brokers(brokers: list[dict[str, Any]]) -> str:
    rows = [
        [
            _e(b["broker"]),
            _state(b["broker"], b["state"]),
            _num(f"broker-latency-{b['broker']}", b["latencyMs"]),
            _num(f"broker-backoff-{b['broker']}", b["notAvailableForS"]),
        ]
        for b in brokers
    ]
    table = _table(["broker", "state", "last latency (ms)", "back-off left (s)"], rows, "No broker seen yet.")
    return f"<section><h2>Brokers</h2>{table}</section>"


def _lag(rows: Sequence[QueueLag]) -> str:
    cells = [
        [
            _e(r.subscription),
            _e(r.topic),
            _e(f"{r.broker}/{r.queue_id}"),
            _num(f"lag-{r.subscription}-{r.broker}-{r.queue_id}", r.lag),
            _num(f"inflight-{r.subscription}-{r.broker}-{r.queue_id}", r.in_flight),
        ]
        for r in sorted(rows, key=lambda r: (r.subscription, r.topic, r.broker, r.queue_id))
    ]
    total = sum(r.lag for r in rows)
    table = _table(
        ["subscription", "topic", "queue", "lag", "in flight"], cells, "No queue owned (yet): see the group."
    )
    return f"<section><h2>Consumer lag {_num('lag-total', total)}</h2>{table}</section>"


def _state(broker: str, state: str) -> str:
    return f'<span class="state {_e(state)}" data-k="broker-state-{_e(broker)}">{_e(state)}</span>'


def _store(retry: dict[str, Any], scheduled: dict[str, Any], now: int, disk: dict[str, Any]) -> str:
    health = "ok" if retry["healthy"] else f"failing: {retry['lastError']}"
    drain = f"full, draining: {disk['reason']}" if disk["draining"] else "ok"
    return (
        "<section><h2>Local store</h2><dl>"
        f"<dt>retry pending</dt><dd>{_num('retry-pending', retry['pending'])}</dd>"
        f"<dt>oldest age (s)</dt><dd>{_num('retry-oldest-age', retry['oldestAgeS'])}</dd>"
        f"<dt>oldest next attempt</dt><dd>{_e(_when(retry['oldestDueMs'], now))}</dd>"
        f"<dt>replaying now</dt><dd>{_num('retry-in-flight', retry['inFlight'])}</dd>"
        f"<dt>dead letters</dt><dd>{_num('retry-dead', retry['dead'])}</dd>"
        f"<dt>scheduled</dt><dd>{_num('scheduled-pending', scheduled['pending'])}</dd>"
        f"<dt>next scheduled due</dt><dd>{_e(_when(scheduled['nextDueMs'], now))}</dd>"
        f'<dt>store</dt><dd data-k="store-health">{_e(health)}</dd>'
        f'<dt>disk</dt><dd data-k="disk-draining">{_e(drain)}</dd>'
        "</dl></section>"
    )


def _counters(totals: dict[str, float]) -> str:
    messages = " ".join(
        f"<li>{_e(o)} {_num(f'messages-{o}', totals[f'messages_{o}'])}</li>" for o in MESSAGE_OUTCOMES
    )
    replays = " ".join(
        f"<li>{_e(o)} {_num(f'replays-{o}', totals[f'replays_{o}'])}</li>" for o in REPLAY_OUTCOMES
    )
    return (
        "<section><h2>Since start</h2>"
        f'<p>messages:</p><ul class="inline">{messages}</ul>'
        f'<p>replays from the retry store:</p><ul class="inline">{replays}</ul></section>'
    )


def _charts(history: History) -> str:
    charts = [
        ("retry pending", history.levels("retry_pending")),
        ("sent per second", history.rates("messages_sent")),
        ("spooled per second", history.rates("messages_spooled")),
        ("replayed and delivered per second", history.rates("replays_delivered")),
    ]
    figures = "".join(
        f"<figure>{sparkline(points)}<figcaption>{_e(title)}</figcaption></figure>"
        for title, points in charts
    )
    return f'<section><h2>Last minutes</h2><div class="charts">{figures}</div></section>'


def _dead(dead: list[dict[str, Any]], total: int, now: int) -> str:
    rows = [
        [
            _e(d["id"]),
            _e(d.get("topic", "?")),
            _e(d.get("attempts", "?")),
            _e(_when(d["deadAtMs"], now)),
            _e(d["reason"]),
            f'<button type="button" data-redrive="{_e(d["id"])}">Re-drive</button>',
        ]
        for d in dead
    ]
    all_button = '<button type="button" data-redrive-all="1">Re-drive all</button>' if total else ""
    shown = f" (the oldest {len(dead)} of {total})" if total > len(dead) else ""
    table = _table(["id", "topic", "attempts", "died", "reason", ""], rows, "No dead letters.")
    result = '<p id="redrive-result" class="muted"></p>'
    return f"<section><h2>Dead letters{_e(shown)}</h2>{all_button}{result}{table}</section>"


def _scheduled(due: list[dict[str, Any]], total: int, now: int) -> str:
    rows = [[_e(s["id"]), _e(s.get("topic", "?")), _e(_when(s["dueMs"], now))] for s in due]
    shown = f" (the next {len(due)} of {total})" if total > len(due) else ""
    table = _table(["id", "topic", "due"], rows, "No scheduled messages.")
    return f"<section><h2>Scheduled messages by due time{_e(shown)}</h2>{table}</section>"


def _transactions(tx: TransactionsView, now: int) -> str:
    summary = tx.summary()
    read, view = tx.sources["open"]
    # A record that does not decode is listed by its id and why (listed_view): its state cell says why,
    # what else it lacks shows "?".
    open_ = [listed_view(view, r) for r in read(Filter(), limit=SHOWN).items]
    outcomes = " ".join(
        f"<li>{_e(o)} {_num(f'transactions-{o}', n)}</li>" for o, n in summary["outcomes"].items()
    )
    rows = [
        [
            _e(t["id"]),
            _e(t["state"] if "state" in t else f"corrupt: {t.get('corrupt', '?')}"),
            _e(t.get("topic", "?")),
            _e(t.get("transactionKey", "?") or "-"),
            _e(_when(t["createdMs"], now) if "createdMs" in t else "?"),
            _e(("yes" if t["acknowledged"] else "no") if "acknowledged" in t else "?"),
        ]
        for t in open_
    ]
    table = _table(
        ["id", "state", "topic", "transactionKey", "begun", "acknowledged"], rows, "No open transactions."
    )
    return (
        "<section><h2>Transactions</h2><dl>"
        f"<dt>undecided</dt><dd>{_num('transactions-undecided', summary['undecided'])}</dd>"
        f"<dt>oldest undecided age (s)</dt>"
        f"<dd>{_num('transactions-oldest-age', summary['oldestUndecidedAgeS'] or 0)}</dd>"
        f'</dl><p>decided since start:</p><ul class="inline">{outcomes}</ul>'
        f"<p>open (undecided, or the broker has not acknowledged the decision; the first {SHOWN} by id):</p>"
        f"{table}</section>"
    )


def _unauthorized() -> str:
    return _PAGE.format(
        now="",
        body="<section><h2>Unauthorized</h2><p>This sidecar requires its API token: open "
        "<code>/ui?token=&lt;token&gt;</code> once, or send <code>Authorization: Bearer</code>.</p>"
        "</section>",
    )


_SCRIPT = """
document.addEventListener("click", async (event) => {
  const button = event.target.closest("button[data-redrive], button[data-redrive-all]");
  if (!button) return;
  let body = button.dataset.redriveAll ? {all: true} : {id: button.dataset.redrive};
  button.disabled = true;
  let answer, doc, moved = 0;
  // A call answers within its deadline; its nextCursor goes on with the same snapshot of letters.
  for (let calls = 0; calls < 1000; calls++) {
    answer = await fetch("/ui/redrive", {method: "POST", credentials: "same-origin",
      headers: {"content-type": "application/json"}, body: JSON.stringify(body)});
    doc = await answer.json();
    if (!answer.ok) break;
    moved += doc.redriven;
    if (!doc.nextCursor) break;
    body = {all: true, cursor: doc.nextCursor};
  }
  document.getElementById("redrive-result").textContent =
    answer.ok ? `re-drove ${moved}, ${doc.stillDead} still dead` : `failed: ${doc.detail}`;
  if (answer.ok) setTimeout(() => location.reload(), 500);
});
"""

_PAGE = (
    """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>rocksidecar status</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta http-equiv="refresh" content="10">
<style>
body {{ font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #1a202c; }}
h1 {{ font-size: 1.4em; margin: 0 0 .2em; }} h2 {{ font-size: 1.1em; border-bottom: 1px solid #cbd5e0; }}
table {{ border-collapse: collapse; }} td, th {{ padding: .2em .8em .2em 0; text-align: left; }}
dl {{ display: grid; grid-template-columns: max-content auto; gap: .1em 1em; }} dd {{ margin: 0; }}
.num {{ font-variant-numeric: tabular-nums; font-weight: 600; }} .muted {{ color: #718096; font-size: 12px; }}
.state.available {{ color: #276749; }} .state.backoff {{ color: #b7791f; }}
.state.isolated {{ color: #c53030; }}
.charts {{ display: flex; flex-wrap: wrap; gap: 1em; }} figure {{ margin: 0; }}
ul.inline {{ list-style: none; padding: 0; display: flex; gap: 1.2em; flex-wrap: wrap; }}
</style></head>
<body><h1>rocksidecar</h1><p class="muted">status at {now}; refreshes every 10 s</p>
{body}
<script>"""
    + _SCRIPT.replace("{", "{{").replace("}", "}}")
    + """</script>
</body></html>
"""
)
