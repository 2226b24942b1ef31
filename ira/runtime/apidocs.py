"""``/docs`` that works offline, and the lanes in the OpenAPI document.

Swagger UI's script and stylesheet come from the ``swagger-ui-bundle`` wheel, served under
``/docs/assets``: FastAPI's default page loads them from a CDN, which an air-gapped or
offline install (or a strict proxy) never reaches. Lanes are served ahead of FastAPI, so
FastAPI cannot see them; each lane may carry its OpenAPI path item, merged in here, so the
webhook every sender posts to is in the document like any other route.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

if TYPE_CHECKING:
    from ira.runtime.http import Lane

ASSETS = "/docs/assets"


def install_docs(app: FastAPI, lanes: Sequence[Lane]) -> None:
    """Serve ``/docs`` from local assets; add the lanes' path items to ``/openapi.json``."""
    import swagger_ui_bundle  # the wheel holds the Swagger UI build; nothing is fetched

    app.mount(ASSETS, StaticFiles(directory=swagger_ui_bundle.swagger_ui_path), name="docs-assets")

    @app.get("/docs", include_in_schema=False)
    async def docs() -> HTMLResponse:
        return get_swagger_ui_html(openapi_url=app.openapi_url or "/openapi.json", title=f"{app.title} API",
                                   swagger_js_url=f"{ASSETS}/swagger-ui-bundle.js",
                                   swagger_css_url=f"{ASSETS}/swagger-ui.css",
                                   swagger_favicon_url=f"{ASSETS}/favicon-32x32.png")

    documented = [lane for lane in lanes if lane.openapi]
    if not documented:
        return
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = build()
            for lane in documented:
                schema.setdefault("paths", {})[lane.route] = dict(lane.openapi or {})
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
