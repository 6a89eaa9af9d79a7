"""The walkthrough's helpers (tools/demo_lib.sh), against a fake sidecar: a step stops with one line when
the sidecar answering is not the one `make run` started or when its result is not what its heading says,
and the delayed message's step waits until it is SENT instead of showing it still SCHEDULED."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import orjson

from tests.deploy.paths import REPO
from tests.pipeline.http_double import Reply, Request, serve

LIB = REPO / "tools" / "demo_lib.sh"


def _bash(script: str, api: str, run: Path) -> subprocess.CompletedProcess[str]:
    env = {"API": api, "RUN": str(run), "BIN": str(Path(sys.executable).parent), "POLL_S": "0.01"}
    return subprocess.run(
        ["bash", "-c", f"set -euo pipefail\nsource {LIB}\n{script}"],
        capture_output=True, text=True, check=False, timeout=60, env={"PATH": "/usr/bin:/bin", **env},
    )  # fmt: skip


def _sidecar(store: Path, statuses: list[str], gets: list[str]) -> Callable[[Request], Reply]:
    """/v1/admin/stats names ``store``; /v1/messages/M answers the next of ``statuses`` (then the last)."""

    def handle(req: Request) -> Reply:
        gets.append(req.path)
        if req.path == "/v1/admin/stats":
            return Reply(200, orjson.dumps({"store": str(store)}))
        status = statuses.pop(0) if len(statuses) > 1 else statuses[0]
        return Reply(200, orjson.dumps({"id": "M", "status": status}))

    return handle


def _run_dir(tmp_path: Path, pid: int) -> Path:
    run = tmp_path / ".run"
    (run / "data" / "store").mkdir(parents=True)
    (run / "sidecar.pid").write_text(f"{pid}\n")
    return run


def test_the_delayed_message_step_waits_until_it_is_sent(tmp_path: Path) -> None:
    run, gets = _run_dir(tmp_path, 1), []
    steps = 'until_sent M\nshow "curl -s $API/v1/messages/M"\nexpect \'"status":"SENT"\''
    with serve(_sidecar(run / "data" / "store", ["SCHEDULED"] * 3 + ["SENT"], gets)) as api:
        result = _bash(steps, api, run)
    assert result.returncode == 0, result.stderr
    assert result.stdout.endswith('{"id":"M","status":"SENT"}\n\n')
    assert gets == ["/v1/messages/M"] * 5  # three SCHEDULED, the SENT one, and the one shown


def test_a_result_unlike_its_heading_stops_the_walkthrough_in_one_line(tmp_path: Path) -> None:
    result = _bash(
        'shown=\'{"status":"SENT"}\'; expect \'"status":"SPOOLED"\'\necho after', "http://x", tmp_path
    )
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr == 'make run: expected "status":"SPOOLED", got: {"status":"SENT"}\n'


def test_a_step_checks_the_sidecar_is_the_one_started_here(tmp_path: Path) -> None:
    alive = subprocess.Popen(["sleep", "60"])
    try:
        run, gets = _run_dir(tmp_path, alive.pid), []
        with serve(_sidecar(run / "data" / "store", ["SENT"], gets)) as api:
            ok = _bash('step "Send one message"', api, run)
        with serve(_sidecar(tmp_path / "elsewhere" / "store", ["SENT"], gets)) as api:
            other = _bash('step "Send one message"\necho after', api, run)
    finally:
        alive.kill()
        alive.wait()
    assert ok.returncode == 0 and "== Send one message" in ok.stdout, ok.stderr
    assert (other.returncode, other.stdout) == (1, "")
    assert other.stderr == (
        f"make run: the sidecar on {api} is not the one make run started "
        f"(its store is not {run}/data/store)\n"
    )
    # and once the process it started has exited, whatever answers on the port
    dead = _bash('step "Send one message"', "http://127.0.0.1:1", _run_dir(tmp_path / "gone", alive.pid))
    assert dead.returncode == 1
    assert dead.stderr == f"make run: the sidecar exited: see {tmp_path / 'gone' / '.run'}/sidecar.log\n"


def test_send_prints_the_answer_checks_its_status_and_keeps_its_id(tmp_path: Path) -> None:
    run, gets = _run_dir(tmp_path, 1), []
    with serve(_sidecar(run / "data" / "store", ["SPOOLED"], gets)) as api:
        ok = _bash('send SPOOLED \'{"topic":"Orders","body":"b"}\'\necho "id=$sent_id"', api, run)
        wrong = _bash('send SENT \'{"topic":"Orders","body":"b"}\'\necho after', api, run)
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout == '{"id":"M","status":"SPOOLED"}\nid=M\n'
    assert (wrong.returncode, wrong.stdout) == (1, '{"id":"M","status":"SPOOLED"}\n')
    assert wrong.stderr == 'make run: expected "status":"SENT", got: {"id":"M","status":"SPOOLED"}\n'
