"""/ui (re-drive buttons) and /docs (Swagger's "Try it out") refuse to be framed by any site: without a
token (the loopback default, `make run`) a page could overlay a framed /ui and get a click on "Re-drive
all", a same-origin fetch the edge cannot tell apart. /docs keeps loading its own script and assets."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.app.conftest import Stack

# The GET a browser makes for <iframe src="http://127.0.0.1:9880/ui"> on https://evil.example.
FRAMED = {
    "sec-fetch-site": "cross-site",
    "sec-fetch-mode": "navigate",
    "sec-fetch-dest": "iframe",
    "referer": "https://evil.example/",
}


def assert_not_framed(headers: Any) -> None:
    assert headers.get("x-frame-options") == "DENY"
    assert headers.get("content-security-policy") == "frame-ancestors 'none'"


@pytest.mark.parametrize("path", ["/ui", "/docs"])
async def test_cross_site_frame_of_a_page_with_buttons_is_refused(stack: Stack, path: str) -> None:
    r = await stack.http.get(path, headers=FRAMED)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    assert_not_framed(r.headers)


async def test_docs_still_loads_its_own_assets(stack: Stack) -> None:
    page = await stack.http.get("/docs")
    assert "/docs/assets/swagger-ui-bundle.js" in page.text and "<script>" in page.text  # inline, allowed
    for asset in ("swagger-ui-bundle.js", "swagger-ui.css"):
        assert (await stack.http.get(f"/docs/assets/{asset}")).status_code == 200


async def test_the_token_pages_are_not_framed_either(make_stack: Callable[..., Any]) -> None:
    async with make_stack(auth_token="s3cret") as stack:
        refused = await stack.http.get("/ui", headers={"authorization": ""})
        assert refused.status_code == 401
        assert_not_framed(refused.headers)
        login = await stack.http.get("/ui", params={"token": "s3cret"}, follow_redirects=False)
        assert login.status_code == 303
        assert_not_framed(login.headers)
