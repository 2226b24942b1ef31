"""The approved ticket body (ira's small Markdown) as Atlassian Document Format for Jira v3.

Jira REST v3 takes descriptions only as ADF. ira's drafts use three shapes (see
``coordinator.report.render_body``): ``## headings``, ``- list items`` (facts and hypotheses
with their evidence) and plain paragraphs; each maps to its ADF node. Text stays text: nothing
in a draft (which quotes alert labels and log lines) can turn into markup in Jira.
"""

from __future__ import annotations

from typing import Any

Node = dict[str, Any]


def to_adf(markdown: str, *, link: tuple[str, str] | None = None) -> Node:
    """The document; ``link`` = (text, url) appends a paragraph linking to the run."""
    content: list[Node] = []
    items: list[Node] = []
    for line in markdown.splitlines():
        if line.startswith("- "):
            items.append({"type": "listItem", "content": [_paragraph(line[2:])]})
            continue
        if items:
            content.append({"type": "bulletList", "content": items})
            items = []
        if line.startswith("#"):
            level = min(len(line) - len(line.lstrip("#")), 6)
            content.append({"type": "heading", "attrs": {"level": level}, "content": _text(line.lstrip("# "))})
        elif line.strip():
            content.append(_paragraph(line))
    if items:
        content.append({"type": "bulletList", "content": items})
    if link is not None:
        text, url = link
        content.append({"type": "paragraph", "content": [
            {"type": "text", "text": text, "marks": [{"type": "link", "attrs": {"href": url}}]}]})
    return {"type": "doc", "version": 1, "content": content}


def _paragraph(text: str) -> Node:
    return {"type": "paragraph", "content": _text(text)}


def _text(text: str) -> list[Node]:
    return [{"type": "text", "text": text}] if text else []

