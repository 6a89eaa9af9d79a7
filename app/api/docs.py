"""/docs without a CDN: Swagger UI's assets come from the swagger-ui-bundle package and are served by
the sidecar itself, so the page works on a host without Internet access. Like /ui it may not be framed
by another site (clickjacking "Try it out"): only frame-ancestors is set, the page's own inline script
and assets load as before."""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles
from swagger_ui_bundle import swagger_ui_path

ASSETS = "/docs/assets"
# The HTML pages' answer to framing by any page (clickjacking): X-Frame-Options for old browsers.
NOT_FRAMED = {"x-frame-options": "DENY", "content-security-policy": "frame-ancestors 'none'"}


def offline_docs(app: FastAPI) -> None:
    """Serve /docs (create the app with ``docs_url=None``) and its assets under /docs/assets."""
    app.mount(ASSETS, StaticFiles(directory=str(swagger_ui_path)), name="swagger-ui")

    @app.get("/docs", include_in_schema=False)
    async def docs() -> HTMLResponse:
        page = get_swagger_ui_html(
            openapi_url=app.openapi_url or "/openapi.json",
            title=f"{app.title} - API",
            swagger_js_url=f"{ASSETS}/swagger-ui-bundle.js",
            swagger_css_url=f"{ASSETS}/swagger-ui.css",
            swagger_favicon_url=f"{ASSETS}/favicon-32x32.png",
        )
        page.headers.update(NOT_FRAMED)
        return page
