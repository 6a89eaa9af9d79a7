"""How many of the requests a schema-driven client generates as *valid* from /openapi.json does the sidecar
accept? (issue 17 item 7: the schema must state the real rules.) schemathesis' positive mode against a
sidecar with its own devbroker; per operation, answers by status, and batch items by result.

    .venv/bin/python -m bench.openapi_acceptance [--examples 300]

To measure another checkout, run it with PYTHONPATH pointing at that tree (the sidecar subprocess
inherits it).
"""

from __future__ import annotations

import collections
import tempfile
from pathlib import Path
from typing import Any

import schemathesis
from hypothesis import HealthCheck, given, settings

from bench.common import bench_parser
from bench.sidecar_process import sidecar_process

REFUSALS: list[str] = []  # a sample of what the sidecar said about "valid" requests it refused
ROUTES = ("POST /v1/messages", "POST /v1/messages:batch")


def measure(url: str, examples: int) -> dict[str, collections.Counter[str]]:
    schema = schemathesis.openapi.from_url(f"{url}/openapi.json")
    out: dict[str, collections.Counter[str]] = {}
    for result in schema.get_all_operations():
        op = result.ok()
        if op.label not in ROUTES:
            continue
        out[op.label] = _run(op, examples)
    return out


def _run(op: Any, examples: int) -> collections.Counter[str]:
    counts: collections.Counter[str] = collections.Counter()

    @given(case=op.as_strategy())
    @settings(
        max_examples=examples,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        database=None,
        derandomize=True,
    )
    def run(case: schemathesis.Case) -> None:
        response = case.call()
        counts[f"{response.status_code}"] += 1
        if response.status_code == 400 and len(REFUSALS) < 40:
            REFUSALS.append(
                f"{op.label}: {response.json().get('detail', '')[:150]} <- {str(case.body)[:200]}"
            )
        if response.status_code == 200 and op.label.endswith(":batch"):
            doc: Any = response.json()
            for item in doc["results"]:
                counts[f"item {item['status']}"] += 1
                if item["status"] == "REJECTED" and len(REFUSALS) < 40:
                    REFUSALS.append(f"{op.label} item: {item['error']['detail'][:150]}")
        if response.status_code == 422:
            title = response.json().get("title", "")
            counts["422 Idempotency-Key reused" if "Idempotency" in title else "422 other"] += 1

    run()
    return counts


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("--examples", type=int, default=300, help="generated requests per operation")
    parser.add_argument("--show-refusals", action="store_true", help="print a sample of the 400 details")
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory() as tmp,
        sidecar_process(None, Path(tmp), SEND_TIMEOUT_MS="1000", LOG_LEVEL="error") as (url, _),
    ):
        results = measure(url, args.examples)
    for label, counts in results.items():
        total = sum(v for k, v in counts.items() if k.isdigit())
        ok = sum(v for k, v in counts.items() if k[:1] == "2")
        reused = counts["422 Idempotency-Key reused"]  # legitimately refused, whatever the schema says
        print(f"{label}: {ok}/{total} accepted ({ok / total:.1%})  {dict(sorted(counts.items()))}")
        print(f"  without Idempotency-Key reuse (a key sent again with another body): {ok}/{total - reused}")
        items = {k: v for k, v in counts.items() if k.startswith("item")}
        if items:
            good = sum(v for k, v in items.items() if k not in ("item REJECTED", "item FAILED"))
            print(f"  batch items: {good}/{sum(items.values())} stored ({good / sum(items.values()):.1%})")
    if args.show_refusals:
        print("\n".join(REFUSALS))


if __name__ == "__main__":
    main()
