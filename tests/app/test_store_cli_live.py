"""``rocksidecar store`` against a running sidecar (through its admin API), and offline once it stopped;
``stats`` and ``inspect`` include scheduled messages."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from rocksidecar.app.cli import main
from rocksidecar.retry.policy import RetryPolicy
from rocksidecar.retry.store import RetryStore
from rocksidecar.storage.rocks import RELEASE_WAITS_S
from tests.app.conftest import Stack
from tests.retry.conftest import record


def store(data_dir: Path, *args: str) -> int:
    return main(["store", "--data-dir", str(data_dir), *args])


async def run(capsys: pytest.CaptureFixture[str], data_dir: Path, *args: str) -> tuple[int, str, str]:
    code = await asyncio.to_thread(store, data_dir, *args)  # the sidecar answers on this event loop
    out = capsys.readouterr()
    return code, out.out, out.err


async def test_the_cli_goes_through_the_running_sidecar(
    make_stack: Callable[..., Any],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    data_dir = tmp_path / "data"
    async with make_stack(retry_default=RetryPolicy((600.0,), 1000)) as stack:
        # the sidecar holds the store in this process: see held_in_this_process (not for the offline
        # part below, whose open must wait for the stopped sidecar's handle to go)
        monkeypatch.setattr("rocksidecar.storage.rocks.RELEASE_WAITS_S", ())
        monkeypatch.setenv("ROCKSIDECAR_HTTP_ADDR", f"127.0.0.1:{stack.service.http.port}")
        await stack.stop_brokers()
        ids = [await _post(stack, {"topic": "C", "body": f"m{i}"}) for i in range(3)]
        later = await _post(stack, {"topic": "C", "body": "later", "delayMs": 3_600_000})
        capsys.readouterr()

        code, out, err = await run(capsys, data_dir, "stats")
        assert code == 0 and "pending: 3" in out and "scheduled: 1" in out and "dead: 0" in out
        assert "in use" not in err  # not a stale secondary view: the live numbers

        code, out, _ = await run(capsys, data_dir, "inspect", ids[0])
        doc = orjson.loads(out)
        assert code == 0 and doc["retry"]["state"] == "SPOOLED" and len(doc["retry"]["history"]) == 1
        code, out, _ = await run(capsys, data_dir, "inspect", later)
        assert orjson.loads(out)["scheduled"]["state"] == "SCHEDULED"

        code, out, _ = await run(capsys, data_dir, "dead", "list")
        assert code == 0 and out == "none\n"

        for id_ in ids[:2]:
            status = stack.service.retry.get(id_)
            assert status is not None
            pending = stack.service.retry.pending_record(status.key)
            assert pending is not None
            await stack.service.retry.bury(status.key, pending, "retries exhausted")
        code, out, _ = await run(capsys, data_dir, "dead", "list")
        assert code == 0 and len(out.splitlines()) == 2 and "retries exhausted" in out
        code, out, _ = await run(capsys, data_dir, "dead", "redrive", "--all")
        assert code == 0 and "re-drove 2" in out
        assert stack.service.retry.stats().dead == 0

        await stack.start_brokers()
        await stack.service.recovery.wait()
        code, out, _ = await run(capsys, data_dir, "replay", "--topic", "C")
        assert code == 0
        await stack.service.recovery.wait()
        await stack.service.replay.wait_idle()
        assert stack.service.retry.stats().pending == 0

        code, _, err = await run(capsys, data_dir, "stats", "--url", "http://127.0.0.1:1")
        assert code == 1 and "no sidecar answers at http://127.0.0.1:1" in err
    monkeypatch.setattr("rocksidecar.storage.rocks.RELEASE_WAITS_S", RELEASE_WAITS_S)

    # stopped: the same commands work offline, scheduled messages included
    code, out, err = await run(capsys, data_dir, "stats")
    assert code == 0 and "pending: 0" in out and "scheduled: 1" in out and "in use" not in err
    code, out, _ = await run(capsys, data_dir, "inspect", later)
    assert code == 0 and orjson.loads(out)["state"] == "SCHEDULED"


@pytest.mark.usefixtures("held_in_this_process")
async def test_a_sidecar_holding_another_store_is_not_used(
    stack: Stack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("ROCKSIDECAR_HTTP_ADDR", f"127.0.0.1:{stack.service.http.port}")
    other = tmp_path / "other"
    held = RetryStore.open(other / "store")  # another process's store, held open
    try:
        await held.spool(record("MINE"))
        code, out, err = await run(capsys, other, "stats")
        assert code == 0 and "pending: 1" in out and "in use by a running sidecar" in err
        code, _, err = await run(capsys, other, "dead", "redrive", "--all")
        assert code == 1 and "give its address with --url" in err
    finally:
        await held.close()


async def _post(stack: Stack, doc: dict[str, Any]) -> str:
    r = await stack.http.post("/v1/messages", json=doc)
    assert r.status_code == 202, r.text
    return str(r.json()["id"])


COMMANDS = [["stats"], ["inspect", "X"], ["dead", "list"], ["dead", "redrive", "--all"], ["replay"]]


async def test_a_sidecar_that_wants_a_token_is_named_not_passed_by(
    make_stack: Callable[..., Any],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A 401 from the sidecar holding the store is one line naming ROCKSIDECAR_AUTH_TOKEN and exit 1: not
    "its API does not answer" (redrive), nor a quiet read-only view of the store (stats)."""
    data_dir = tmp_path / "data"
    async with make_stack(auth_token="s3cret") as stack:
        monkeypatch.setattr("rocksidecar.storage.rocks.RELEASE_WAITS_S", ())  # see the test above
        monkeypatch.setenv("ROCKSIDECAR_HTTP_ADDR", f"127.0.0.1:{stack.service.http.port}")
        monkeypatch.delenv("ROCKSIDECAR_AUTH_TOKEN", raising=False)
        for command in COMMANDS:
            code, out, err = await run(capsys, data_dir, *command)
            assert (code, out) == (1, ""), command
            assert err.splitlines() == [
                f"rocksidecar store: the sidecar at http://127.0.0.1:{stack.service.http.port} requires a "
                "token (it answered 401): set ROCKSIDECAR_AUTH_TOKEN to its token"
            ], command
        monkeypatch.setenv("ROCKSIDECAR_AUTH_TOKEN", "wrong")
        code, _, err = await run(capsys, data_dir, "dead", "redrive", "--all")
        assert code == 1 and err.endswith("answered 401: ROCKSIDECAR_AUTH_TOKEN is not its token\n")
        monkeypatch.setenv("ROCKSIDECAR_AUTH_TOKEN", "s3cret")
        code, out, err = await run(capsys, data_dir, "stats")
        assert code == 0 and "pending: 0" in out and "in use" not in err
    monkeypatch.setattr("rocksidecar.storage.rocks.RELEASE_WAITS_S", RELEASE_WAITS_S)
