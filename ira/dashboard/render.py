"""How values read on the pages: Markdown made safe, durations and budgets in human units,
relative ages. Pure; registered as Jinja filters by ``pages.py``.

Markdown is rendered by markdown-it in CommonMark mode with raw HTML switched off, so a
ticket body that contains ``<script>`` shows the text ``<script>`` and never runs it; links
with a ``javascript:`` (or other unsafe) scheme are not made into links.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from markdown_it import MarkdownIt
from markupsafe import Markup

from ira.core.budget import BudgetDimension

_MARKDOWN = MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False})


def markdown(text: str) -> Markup:
    """HTML for ``text``; raw HTML in the source is escaped, never passed through."""
    return Markup(_MARKDOWN.render(text))  # noqa: S704 - markdown-it escapes (html=False)


def amount(value: int, dimension: str) -> str:
    """``wall_ms`` as seconds, ``cost_micros`` as dollars, tokens and counts grouped."""
    if dimension == BudgetDimension.WALL_MS:
        return duration(timedelta(milliseconds=value))
    if dimension == BudgetDimension.COST_MICROS:
        return f"${value / 1_000_000:,.2f}"
    return f"{value:,}"


UNITS = {BudgetDimension.STEPS: "steps", BudgetDimension.TOOL_CALLS: "tool calls",
         BudgetDimension.MODEL_TOKENS: "model tokens", BudgetDimension.COST_MICROS: "cost",
         BudgetDimension.WALL_MS: "wall time"}


def dimension_name(dimension: str) -> str:
    return UNITS.get(BudgetDimension(dimension), dimension) if dimension in set(BudgetDimension) else dimension


def duration(span: timedelta) -> str:
    seconds = int(abs(span.total_seconds()))
    if seconds < 60:
        return f"{abs(span.total_seconds()):.1f} s" if seconds < 10 else f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s" if seconds < 600 else f"{seconds // 60} min"
    if seconds < 86400:
        return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"
    return f"{seconds // 86400} d {seconds % 86400 // 3600} h"


def ago(at: datetime | None, now: datetime | None = None) -> str:
    """``3 min ago`` (the page's script keeps it current; the absolute time is the title)."""
    if at is None:
        return ""
    span = (now or datetime.now(UTC)) - at
    if span < timedelta(seconds=45):
        return "just now" if span >= timedelta(0) else "in " + duration(-span)
    return duration(span).split(" ")[0] + " " + duration(span).split(" ")[1] + " ago"


def absolute(at: datetime | None) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC") if at else ""


def burn(used: int, limit: int) -> int:
    """Percent of the limit used (reserved counts as used), 0–100."""
    return 0 if limit <= 0 else max(0, min(100, round(100 * used / limit)))
