"""``rocksidecar store``: stats, inspect, dead list/export/redrive, and behaviour while the sidecar runs."""

from __future__ import annotations

import asyncio
import http.server
import threading
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from rocksidecar.app.cli import main
from rocksidecar.retry.record import RetryRecord
from rocksidecar.retry.store import RetryStore
from tests.retry.conftest import record


async def _seed(data_dir: Path) -> dict[str, bytes]:
    store = RetryStore.open(data_dir / "store")
    keys = {}
    for id_ in ("P1", "D1", "D2"):
        keys[id_] = await store.spool(record(id_), store.now_ms() + 60_000)
    for id_ in ("D1", "D2"):
        keys[id_] = await store.bury(keys[id_], record(id_).failed(1, "SystemBusy"), "retries exhausted")
    binary = RetryRecord(id="BIN", topic="t", body=b"\x00\xff")
    keys["BIN"] = await store.bury(await store.spool(binary), binary, "not retriable")
    await store.close()
    return keys


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path


@pytest.fixture
def seeded(data_dir: Path) -> dict[str, bytes]:
    return asyncio.run(_seed(data_dir))


def store_cli(data_dir: Path, *args: str) -> int:
    return main(["store", "--data-dir", str(data_dir), *args])


def test_stats(data_dir: Path, seeded: dict[str, bytes], capsys: pytest.CaptureFixture[str]) -> None:
    assert store_cli(data_dir, "stats") == 0
    out = capsys.readouterr().out
    assert "pending: 1" in out
    assert "dead: 3" in out
    assert "oldest due:" in out


def test_data_dir_from_environment(
    data_dir: Path,
    seeded: dict[str, bytes],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("ROCKSIDECAR_DATA_DIR", str(data_dir))
    assert main(["store", "stats"]) == 0
    assert "dead: 3" in capsys.readouterr().out


def test_missing_store_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert store_cli(tmp_path / "nowhere", "stats") == 1
    assert "no store at" in capsys.readouterr().err
    assert not (tmp_path / "nowhere").exists()  # looking did not create one


def test_inspect_by_id_and_by_key(
    data_dir: Path, seeded: dict[str, bytes], capsys: pytest.CaptureFixture[str]
) -> None:
    assert store_cli(data_dir, "inspect", "P1") == 0
    doc = orjson.loads(capsys.readouterr().out)
    assert (doc["state"], doc["record"]["body_text"]) == ("SPOOLED", "body of P1")
    assert store_cli(data_dir, "inspect", "D1") == 0
    doc = orjson.loads(capsys.readouterr().out)
    assert (doc["state"], doc["reason"], doc["attempts"]) == ("DEAD", "retries exhausted", 1)
    assert store_cli(data_dir, "inspect", seeded["D2"].decode()) == 0
    assert orjson.loads(capsys.readouterr().out)["id"] == "D2"
    assert store_cli(data_dir, "inspect", "nope") == 1


def test_inspect_and_stats_show_a_message_waiting_behind_its_keys_first(
    data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A message of a sharding key spooled after another of its key waits behind it (retry.lanes): it is
    pending all the same, SPOOLED with its head's next attempt, and its record is shown."""

    async def seed() -> int:
        store = RetryStore.open(data_dir / "store")
        due = store.now_ms() + 60_000
        await store.spool(record("HEAD", sharding_key="k"), due)
        await store.spool(record("NEXT", sharding_key="k"))
        await store.close()
        return due

    due = asyncio.run(seed())
    assert store_cli(data_dir, "inspect", "NEXT") == 0
    doc = orjson.loads(capsys.readouterr().out)
    assert (doc["state"], doc["next_attempt_at_ms"], doc["record"]["body_text"]) == (
        "SPOOLED",
        due,
        "body of NEXT",
    )
    assert store_cli(data_dir, "stats") == 0
    assert "pending: 2" in capsys.readouterr().out


def test_dead_list_and_export(
    data_dir: Path, seeded: dict[str, bytes], capsys: pytest.CaptureFixture[str]
) -> None:
    assert store_cli(data_dir, "dead", "list") == 0
    lines = capsys.readouterr().out.splitlines()
    assert sorted(line.split()[1] for line in lines) == ["BIN", "D1", "D2"]
    died = [line.split()[0] for line in lines]
    assert died == sorted(died)  # oldest first (ties within a millisecond in key order)
    out = data_dir / "dead.jsonl"
    assert store_cli(data_dir, "dead", "export", "--out", str(out)) == 0
    assert "exported 3" in capsys.readouterr().err
    docs = [orjson.loads(line) for line in out.read_text().splitlines()]
    by_id = {d["id"]: d for d in docs}
    assert by_id["BIN"]["body_text"] is None
    assert by_id["BIN"]["body_base64"] == "AP8="
    assert by_id["D1"]["history"] == [{"at_ms": 1, "error": "SystemBusy"}]


def test_an_empty_dead_list_says_none(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    asyncio.run(RetryStore.open(data_dir / "store").close())
    assert store_cli(data_dir, "dead", "list") == 0
    assert capsys.readouterr().out == "none\n"
    assert store_cli(data_dir, "dead", "list", "--json") == 0
    assert capsys.readouterr().out == ""  # JSON lines: no line that is not one


def test_redrive_by_id_then_all(
    data_dir: Path, seeded: dict[str, bytes], capsys: pytest.CaptureFixture[str]
) -> None:
    assert store_cli(data_dir, "dead", "redrive", "--id", "D1") == 0
    assert store_cli(data_dir, "dead", "redrive", "--id", "D1") == 1  # nothing left to re-drive
    assert store_cli(data_dir, "dead", "redrive", "--all") == 0
    assert "re-drove 2" in capsys.readouterr().out
    capsys.readouterr()
    assert store_cli(data_dir, "stats") == 0
    out = capsys.readouterr().out
    assert "pending: 4" in out
    assert "dead: 0" in out


@pytest.mark.usefixtures("held_in_this_process")
async def test_while_the_sidecar_holds_the_store(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    await _seed(data_dir)
    running = RetryStore.open(data_dir / "store")  # the sidecar
    try:
        await running.spool(record("LIVE"))
        code = await asyncio.to_thread(store_cli, data_dir, "stats")
        captured = capsys.readouterr()
        assert code == 0
        assert "pending: 2" in captured.out  # includes what the running sidecar just wrote
        assert "in use by a running sidecar" in captured.err
        code = await asyncio.to_thread(store_cli, data_dir, "dead", "redrive", "--all")
        assert code == 1
        assert "open in a running sidecar" in capsys.readouterr().err
        assert running.dead_count == 3
    finally:
        await running.close()


def test_a_store_shared_with_other_column_families(
    data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The sidecar keeps the idempotency store's column families in the same directory."""
    from rocksidecar.retry.keys import COLUMN_FAMILIES
    from rocksidecar.storage.kv import Put
    from rocksidecar.storage.rocks import RocksKV

    asyncio.run(_seed(data_dir))
    kv = RocksKV.open(data_dir / "store", [*COLUMN_FAMILIES, "idem"])
    kv.write([Put("idem", b"k", b"v")], sync=True)
    kv.close()
    assert store_cli(data_dir, "stats") == 0
    assert "dead: 3" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["dead", "list", "--limit", "-1"], "--limit"),  # a traceback from islice() before
        (["dead", "list", "--limit", "99999999999999999999"], "--limit"),
        (["dead", "list", "--limit", "0"], "--limit"),
        (["inspect", "\udcff"], "ID_OR_KEY"),  # argv bytes not UTF-8: a UnicodeEncodeError traceback
    ],
)
def test_bad_arguments_are_one_line_naming_them(
    data_dir: Path, seeded: dict[str, bytes], capsys: pytest.CaptureFixture[str], args: list[str], said: str
) -> None:
    with pytest.raises(SystemExit) as exit_:
        store_cli(data_dir, *args)
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and said in err.splitlines()[-1] and "Traceback" not in err


def _one_line(err: str, *said: str) -> None:
    assert err.count("\n") == 1 and err.startswith("rocksidecar store: ") and "Traceback" not in err, err
    assert all(part in err for part in said), err


@pytest.mark.parametrize("where", ["no/such/dir.jsonl", "."])  # a missing directory; a directory
def test_export_to_an_unwritable_path_is_one_line(
    data_dir: Path, seeded: dict[str, bytes], capsys: pytest.CaptureFixture[str], where: str
) -> None:
    out = data_dir / where
    assert store_cli(data_dir, "dead", "export", "--out", str(out)) == 1  # an OSError traceback before
    _one_line(capsys.readouterr().err, f"cannot write {out}")
    assert not (data_dir / "no").exists()


def _answering(body: bytes) -> Iterator[str]:
    """Something that is not this sidecar on a port: it answers every GET and POST 200 with ``body``."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_POST = do_GET

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.fixture
def web_page() -> Iterator[str]:
    yield from _answering(b"<html>hello</html>")


@pytest.fixture
def other_sidecar() -> Iterator[str]:
    """Another sidecar's admin API (another store), or any JSON of another shape."""
    yield from _answering(b'{"store": "/some/other/sidecar/store"}')


COMMANDS = [["stats"], ["dead", "redrive", "--all"], ["replay"]]


@pytest.mark.parametrize("command", COMMANDS)
def test_a_url_that_answers_no_json_is_one_line(
    data_dir: Path, seeded: dict[str, bytes], web_page: str, command: list[str],
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    assert store_cli(data_dir, "--url", web_page, *command) == 1  # a JSONDecodeError traceback before
    _one_line(capsys.readouterr().err, web_page, "something other than JSON")


MISSING = ["'retry'", "'redriven'", "'pending'"]  # the field each command's answer lacks


@pytest.mark.parametrize(("command", "missing"), list(zip(COMMANDS, MISSING, strict=True)))
def test_a_url_that_answers_other_json_is_one_line(
    data_dir: Path, seeded: dict[str, bytes], other_sidecar: str, command: list[str], missing: str,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    assert store_cli(data_dir, "--url", other_sidecar, *command) == 1  # a KeyError traceback before
    _one_line(capsys.readouterr().err, other_sidecar, f"no {missing}")


def test_replay_when_another_sidecar_holds_the_default_port_is_one_line(
    data_dir: Path, seeded: dict[str, bytes], other_sidecar: str, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    monkeypatch.setenv("ROCKSIDECAR_HTTP_ADDR", other_sidecar.removeprefix("http://"))
    assert store_cli(data_dir, "replay") == 1  # an AssertionError traceback before
    _one_line(capsys.readouterr().err, f"{other_sidecar} does not hold the store", "--url")


BODY = 1024 * 1024


async def _seed_big(data_dir: Path, n: int) -> None:
    store = RetryStore.open(data_dir / "store")
    for i in range(n):
        rec = RetryRecord(id=f"BIG{i}", topic="t", body=b"x" * BODY)
        await store.bury(await store.spool(rec), rec, "not retriable")
    await store.close()


def test_dead_list_does_not_hold_every_body(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    asyncio.run(_seed_big(data_dir, 64))
    tracemalloc.start()
    try:
        assert store_cli(data_dir, "dead", "list", "--limit", "1000") == 0
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(capsys.readouterr().out.splitlines()) == 64
    # a line per letter needs its header, not 64 MiB of bodies at once (192 MiB at peak before)
    assert peak < 16 * BODY, f"peak {peak / BODY:.0f} MiB to list 64 one-MiB dead letters"
    assert store_cli(data_dir, "dead", "list", "--limit", "3") == 0
    assert [line.split()[1] for line in capsys.readouterr().out.splitlines()] == ["BIG0", "BIG1", "BIG2"]
