"""The Jinja environment of the pages: autoescaped templates and the filters of ``render``."""

from __future__ import annotations

from importlib.resources import files
from typing import Any

from fastapi.responses import HTMLResponse
from jinja2 import Environment, FileSystemLoader, select_autoescape

from ira.dashboard import render as r
from ira.dashboard.chart import chart

TEMPLATES = Environment(loader=FileSystemLoader(str(files("ira.dashboard") / "templates")),
                        autoescape=select_autoescape(["html"]))
TEMPLATES.filters.update(markdown=r.markdown, amount=r.amount, ago=r.ago, absolute=r.absolute, burn=r.burn,
                         dimension_name=r.dimension_name)
TEMPLATES.globals.update(chart=lambda series: chart([(s.labels, s.points) for s in series]))


PAGE_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
                               "img-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'none'; "
                               "form-action 'self'; frame-ancestors 'none'",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}
"""On every page: scripts only from /static (no inline script can run, so injected markup
cannot either), never framed (clickjacking of Approve), no MIME sniffing, no run URL leaked
to ticket links; pages hold tenant data, so no cache keeps them. Inline ``style=`` attributes
are allowed: they carry no script."""


def render_page(name: str, status_code: int = 200, **context: Any) -> HTMLResponse:
    return HTMLResponse(TEMPLATES.get_template(name).render(**context), status_code=status_code,
                        headers=PAGE_HEADERS)
