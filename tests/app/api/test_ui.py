"""The /ui status page and the offline /docs: served without any CDN, behind the same auth, showing the
numbers the admin API reports; rendered in a real headless Chromium (Debian's ``chromium``) when the
machine has it (``make install`` installs it when run as root)."""

from __future__ import annotations

import asyncio
import re
import shutil
import struct
import tempfile
import zlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from rocksidecar.retry.policy import RetryPolicy
from tests.app.conftest import Stack

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="Debian's chromium is not installed (make install apt-installs it as root)"
)
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)
CHROMIUM_TIMEOUT_S = 60.0
NUMBER = re.compile(r'data-k="([^"]+)">([^<]*)<')


@pytest.fixture
async def busy(make_stack: Callable[..., Any]) -> AsyncIterator[Stack]:
    """A sidecar with something in every section: sent, spooled, dead and scheduled messages."""
    async with make_stack(retry_default=RetryPolicy((600.0,), 1000)) as stack:
        for i in range(3):
            assert (
                await stack.http.post("/v1/messages", json={"topic": "U", "body": f"{i}"})
            ).status_code == 200
        for i in range(2):
            r = await stack.http.post(
                "/v1/messages", json={"topic": "U", "body": "later", "delayMs": 60_000 * (i + 1)}
            )
            assert r.status_code == 202
        await stack.stop_brokers()
        ids = []
        for i in range(4):
            r = await stack.http.post("/v1/messages", json={"topic": "U", "body": f"down {i}"})
            ids.append(r.json()["id"])
        status = stack.service.retry.get(ids[0])
        assert status is not None
        record = stack.service.retry.pending_record(status.key)
        assert record is not None
        await stack.service.retry.bury(status.key, record, "retries exhausted after 10")
        stack.service.sample_history()
        yield stack


def numbers(page: str) -> dict[str, str]:
    return dict(NUMBER.findall(page))


def as_number(text: str) -> float:
    return float(text.replace(",", ""))


def assert_matches_api(shown: dict[str, str], stats: dict[str, Any]) -> None:
    assert as_number(shown["retry-pending"]) == stats["retry"]["pending"] == 3
    assert as_number(shown["retry-dead"]) == stats["retry"]["dead"] == 1
    assert as_number(shown["scheduled-pending"]) == stats["scheduled"]["pending"] == 2
    for broker in stats["brokers"]:
        assert shown[f"broker-state-{broker['broker']}"] == broker["state"] == "isolated"


def assert_offline(page: str) -> None:
    """Nothing the page loads comes from another host."""
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page), "the page loads from another host"


async def test_the_page_shows_what_the_api_reports(busy: Stack) -> None:
    page = await busy.http.get("/ui")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    stats = (await busy.http.get("/v1/admin/stats")).json()
    shown = numbers(page.text)
    assert_matches_api(shown, stats)
    assert as_number(shown["messages-sent"]) == 3 and as_number(shown["messages-spooled"]) == 4
    assert page.text.count("data-redrive=") == 1 and "Re-drive all" in page.text
    assert_offline(page.text)
    assert "<svg" in page.text  # the charts are inline


async def test_the_redrive_button_endpoint(busy: Stack) -> None:
    [dead] = (await busy.http.get("/v1/admin/retries", params={"state": "dead"})).json()["items"]
    r = await busy.http.post("/ui/redrive", json={"id": dead["id"]})
    assert r.status_code == 200 and r.json() == {
        "redriven": 1,
        "skipped": 0,
        "stillDead": 0,
        "nextCursor": None,
    }
    assert busy.service.retry.stats().dead == 0
    bad = await busy.http.post("/ui/redrive", json={"id": "nope"})
    assert bad.status_code == 404 and bad.json()["field"] == "id"


async def test_the_page_needs_the_token(make_stack: Callable[..., Any]) -> None:
    async with make_stack(auth_token="s3cret") as stack:
        del stack.http.headers["authorization"]
        assert (await stack.http.get("/ui")).status_code == 401
        assert (await stack.http.get("/ui", params={"token": "wrong"})).status_code == 401
        assert (await stack.http.post("/ui/redrive", json={"all": True})).status_code == 401
        login = await stack.http.get("/ui", params={"token": "s3cret"})
        assert login.status_code == 303 and login.headers["location"] == "/ui"
        assert (
            "rocksidecar_token=s3cret" in login.headers["set-cookie"]
            and "HttpOnly" in login.headers["set-cookie"]
        )
        cookie = {"cookie": "rocksidecar_token=s3cret"}
        assert (await stack.http.get("/ui", headers=cookie)).status_code == 200
        bearer = {"authorization": "Bearer s3cret"}
        assert (await stack.http.get("/ui", headers=bearer)).status_code == 200


@pytest.mark.parametrize("scheme", ["bearer", "BEARER", "Bearer"])
async def test_the_page_takes_the_scheme_in_any_case_as_the_api_does(
    make_stack: Callable[..., Any], scheme: str
) -> None:
    async with make_stack(auth_token="s3cret") as stack:
        header = {"authorization": f"{scheme} s3cret"}
        assert (await stack.http.get("/v1/admin/stats", headers=header)).status_code == 200
        assert (await stack.http.get("/ui", headers=header)).status_code == 200
        r = await stack.http.post("/ui/redrive", headers=header, json={"id": "nope"})
        assert r.status_code == 404 and r.json()["field"] == "id"  # past the token check
        wrong = {"authorization": f"{scheme} s3cre"}
        assert (await stack.http.get("/ui", headers=wrong)).status_code == 401


async def test_docs_are_served_without_a_cdn(stack: Stack) -> None:
    docs = await stack.http.get("/docs")
    assert docs.status_code == 200
    assert_offline(docs.text)
    assert "/docs/assets/swagger-ui-bundle.js" in docs.text
    js = await stack.http.get("/docs/assets/swagger-ui-bundle.js")
    css = await stack.http.get("/docs/assets/swagger-ui.css")
    assert js.status_code == css.status_code == 200 and len(js.content) > 100_000


async def chromium(*args: str) -> bytes:
    """Run headless Chromium with a fresh profile; its stdout."""
    assert CHROMIUM is not None
    with tempfile.TemporaryDirectory(prefix="rocksidecar-chromium-") as profile:
        proc = await asyncio.create_subprocess_exec(
            CHROMIUM,
            *FLAGS,
            f"--user-data-dir={profile}",
            *args,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        try:
            out, err = await asyncio.wait_for(proc.communicate(), CHROMIUM_TIMEOUT_S)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            raise
    assert proc.returncode == 0, err.decode(errors="replace")[-2000:]
    return out


def png_size_and_colours(png: bytes) -> tuple[int, int, int]:
    """Width, height and how many distinct bytes the image data has (1-2 for a blank page)."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", png[16:24])
    data, at = b"", 8
    while at < len(png):
        length, kind = struct.unpack(">I4s", png[at : at + 8])
        if kind == b"IDAT":
            data += png[at + 8 : at + 8 + length]
        at += 12 + length
    return width, height, len(set(zlib.decompress(data)))


@needs_chromium
async def test_chromium_renders_the_numbers_the_api_reports(busy: Stack, tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{busy.service.http.port}/ui"
    dom = (await chromium("--dump-dom", url)).decode()
    stats = (await busy.http.get("/v1/admin/stats")).json()
    assert_matches_api(numbers(dom), stats)
    assert "Dead letters" in dom and "Scheduled messages by due time" in dom
    shot = tmp_path / "ui.png"
    await chromium("--window-size=1280,1600", "--hide-scrollbars", f"--screenshot={shot}", url)
    width, height, colours = png_size_and_colours(shot.read_bytes())
    assert (width, height) == (1280, 1600)
    assert colours > 20  # text, tables and charts drawn, not a blank or error page


@needs_chromium
async def test_chromium_renders_docs_offline(stack: Stack) -> None:
    url = f"http://127.0.0.1:{stack.service.http.port}/docs"
    assert (await stack.http.get("/openapi.json")).status_code == 200
    dom = (await chromium("--virtual-time-budget=10000", "--dump-dom", url)).decode()
    # Swagger UI's script built the operations from /openapi.json (the served HTML has none of them);
    # Swagger UI 4 could not read FastAPI's OpenAPI 3.1 and showed "Unable to render this definition".
    assert "Send one message" in dom and "opblock" in dom and "Unable to render" not in dom
