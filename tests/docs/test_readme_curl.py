"""The README's curl examples, run (issue 17, "Must show"): every fenced `sh` block with a curl command
is run against a real `rocksidecar serve` and devbroker started here on free ports (the README's
127.0.0.1:9880 and :19880 are rewritten to them), and each answer must match what the README shows
under the command: the HTTP status, and the shown JSON's fields (exact for status/title/field/type,
the same kind of value for the rest; "..." stands for any text). A command shown without an answer must
answer 2xx. A failure names the README line and block that drifted."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest

from bench.common import DevbrokerProcess, devbroker_process
from bench.sidecar_process import sidecar_process
from tests.docs.readme import Block, Command, blocks, commands, pipeline_stages

pytestmark = pytest.mark.timeout(180)
SIDECAR, ADMIN = "127.0.0.1:9880", "127.0.0.1:19880"  # as the README (and `make run`) has them
EXACT = {"status", "title", "field", "type"}  # compared as shown; other fields by kind of value
MARK = "\n__README_TEST_STATUS__"


def to_demo(argv: list[str]) -> bool:
    """A curl of the demo's sidecar or devbroker (others, e.g. into a container's pod, need what the
    Containers section sets up and are not run here)."""
    return argv[0] == "curl" and any(SIDECAR in a or ADMIN in a for a in argv)


CURL_BLOCKS = [b for b in blocks() if b.lang == "sh" and any(to_demo(c.argv) for c in commands(b))]


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[dict[str, str], DevbrokerProcess]]:
    with devbroker_process() as dev, sidecar_process(dev.namesrv, tmp_path_factory.mktemp("readme")) as side:
        yield {SIDECAR: urlsplit(side.url).netloc, ADMIN: urlsplit(dev.admin_url).netloc}, dev


def shown(output: str) -> tuple[int | None, Any]:
    """The status (from an `HTTP/1.1 NNN` line) and the JSON document the README shows, if any."""
    status = None
    lines = []
    for line in output.splitlines():
        match = re.match(r"^HTTP/[\d.]+ (\d{3})", line)
        if match:
            status = int(match.group(1))
        elif line.strip() and not re.match(r"^[\w-]+: ", line):  # header lines of `curl -i`
            lines.append(line)
    text = "\n".join(lines).strip()
    if not text:
        return status, None
    text = re.sub(r",\s*\.\.\.\s*(?=[}\]])", "", text)  # `, ...}`: more fields the README leaves out
    try:
        return status, json.loads(text)
    except ValueError as exc:
        raise AssertionError(
            f"the answer the README shows is not JSON this test can read ({exc}):\n{text}"
        ) from None


def mismatch(expected: Any, actual: Any, path: str = "") -> str | None:
    """Where ``actual`` differs from what the README shows, or None."""
    if isinstance(expected, dict):
        if not isinstance(actual, dict):
            return f"{path or 'the answer'}: expected an object, got {actual!r}"
        for key, value in expected.items():
            if key not in actual:
                return f"{path}{key}: missing (the answer has {sorted(actual)})"
            if key in EXACT and not isinstance(value, dict | list):
                if actual[key] != value:
                    return f"{path}{key}: the README shows {value!r}, the sidecar answered {actual[key]!r}"
                continue
            found = mismatch(value, actual[key], f"{path}{key}.")
            if found:
                return found
        return None
    if isinstance(expected, list):
        if not isinstance(actual, list) or len(actual) != len(expected):
            return (
                f"{path.rstrip('.')}: the README shows {len(expected)} items, the sidecar answered {actual!r}"
            )
        for i, (e, a) in enumerate(zip(expected, actual, strict=True)):
            found = mismatch(e, a, f"{path.rstrip('.')}[{i}].")
            if found:
                return found
        return None
    if same_kind(expected, actual):
        return None
    return f"{path.rstrip('.')}: the README shows {expected!r}, the sidecar answered {actual!r}"


def same_kind(expected: Any, actual: Any) -> bool:
    """Ids, brokers, offsets and times differ from run to run: a shown value stands for its kind."""
    if expected is None:
        return True
    if isinstance(expected, bool) or isinstance(actual, bool):
        return isinstance(expected, bool) and isinstance(actual, bool)
    if isinstance(expected, int | float):
        return isinstance(actual, int | float)
    return isinstance(actual, type(expected))


def run_curl(argv: list[str], ports: dict[str, str]) -> tuple[int, Any, str]:
    args = [re.sub("|".join(map(re.escape, ports)), lambda m: ports[m.group(0)], a) for a in argv]
    out = subprocess.run(
        [*args, "-sS", "-w", MARK + "%{http_code}"], capture_output=True, text=True, timeout=60, check=False
    )
    body, _, code = out.stdout.rpartition(MARK)
    if "\r\n\r\n" in body:  # -i: the headers come first
        body = body.split("\r\n\r\n", 1)[1]
    try:
        doc = json.loads(body) if body.strip() else None
    except ValueError:
        doc = body
    return int(code or 0), doc, out.stderr.strip()


def reset(dev: DevbrokerProcess) -> None:
    """Undo what a block did to devbroker (faults, stopped brokers) before the next block."""
    for broker in ("broker-a", "broker-b"):
        dev.clear(broker)
        dev.act(broker, "start")


@pytest.mark.parametrize("block", CURL_BLOCKS, ids=lambda b: f"line{b.line}")
def test_readme_curl_block_answers_as_shown(
    block: Block, live: tuple[dict[str, str], DevbrokerProcess]
) -> None:
    ports, dev = live
    last_id: str | None = None
    try:
        for command in commands(block):
            if not to_demo(command.argv):
                continue
            argv = pipeline_stages(command.argv)[0]  # what a pipe does with the answer is not checked
            if last_id is not None:
                argv = [re.sub(r"<id>|\{id\}", last_id, a) for a in argv]
            if any(re.search(r"<[^>]+>", a) for a in argv):
                pytest.fail(f"{where(block, command)}: a placeholder this test cannot fill: {command.text}")
            status, doc, err = run_curl(argv, ports)
            expected_status, expected = shown(command.output)
            if (
                expected_status is None
                and isinstance(expected, dict)
                and isinstance(expected.get("status"), int)
            ):
                expected_status = expected["status"]  # a problem+json document carries its status
            ok = status == expected_status if expected_status else 200 <= status < 300
            problem = None if ok else f"HTTP {status}, the README implies {expected_status or '2xx'}"
            if problem is None and expected is not None:
                problem = mismatch(expected, doc)
            assert problem is None, (
                f"{where(block, command)} drifted from the sidecar: {problem}\n"
                f"  command: {command.text}\n  answer:  HTTP {status} {json.dumps(doc)[:600]} {err}\n"
                f"  README:  {command.output or '(no answer shown: any 2xx)'}"
            )
            if isinstance(doc, dict) and isinstance(doc.get("id"), str):
                last_id = doc["id"]
    finally:
        reset(dev)


def where(block: Block, command: Command) -> str:
    return f"{block.where()}, command on line {command.line}"


def test_the_readme_has_curl_examples_for_the_api_and_devbroker() -> None:
    urls = " ".join(a for b in CURL_BLOCKS for c in commands(b) for a in c.argv)
    assert f"{SIDECAR}/v1/messages" in urls and ADMIN in urls
