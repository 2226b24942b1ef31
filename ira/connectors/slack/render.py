"""Block Kit for ira's messages: pure functions of ``ira.core.chat`` models.

Slack refuses a message over its limits (``invalid_blocks``), which would turn a long
report into no message at all. So every text is cut to its limit here, and the approval
message has a fixed shape (at most ~12 blocks whatever the report holds): the top facts and
hypotheses, an excerpt of the draft, and the full report in thread replies, each reply a
message of at most 50 blocks.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import Any

from ira.connectors.slack.interactions import APPROVE, REJECT, ActionValue
from ira.core.chat import ApprovalMessage, ApprovalOutcome, ApprovalStatus, Finding
from ira.core.model import Model

MAX_BLOCKS = 50
MAX_TEXT = 3000
"""A section's text, and the message's fallback ``text`` as ira writes it."""
MAX_HEADER = 150
MAX_FIELD = 2000
MAX_BUTTON_TEXT = 75
MAX_BUTTON_VALUE = 2000
MAX_URL = 3000
TOP_FACTS = 5
TOP_HYPOTHESES = 3
DRAFT_EXCERPT = 1200
FINDING_EXCERPT = 300
MAX_CITES = 6
HASH_PREFIX = 12

Block = dict[str, Any]


class SlackMessage(Model):
    """One message: the notification ``text`` (and screen-reader fallback) and its blocks."""

    text: str
    blocks: tuple[Block, ...]


def cut(text: str, limit: int) -> str:
    """``text`` within ``limit`` characters, saying that it was cut."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def approval_message(msg: ApprovalMessage, status: ApprovalStatus | None = None, *,
                     now: datetime | None = None) -> SlackMessage:
    """The draft to decide on; with a settled ``status``, the same message without buttons."""
    pending = status is None or status.outcome == ApprovalOutcome.PENDING
    blocks: list[Block] = [_header(f"Approve ticket: {msg.draft_title}" if pending else msg.draft_title)]
    if not pending and status is not None:
        blocks.append(_section(status_line(status)))
    blocks += [_incident(msg, now=now), *_findings(msg), _draft(msg)]
    if msg.missing:
        blocks.append(_section("*Missing branches*\n" + "\n".join(f"• {m}" for m in msg.missing)))
    blocks.append(_context(_binding_line(msg)))
    if pending:
        blocks.append(_buttons(msg))
    elif msg.run_url:
        blocks.append({"type": "actions", "elements": [_link_button("Open run", msg.run_url)]})
    return _message(f"{msg.draft_title}: " + (
        "approval needed" if pending else status_line(status)), blocks)  # type: ignore[arg-type]


def status_line(status: ApprovalStatus) -> str:
    """One line on what became of the approval (mrkdwn)."""
    who = f"<@{status.chat_user}> ({status.principal})" if status.chat_user else (status.principal or "someone")
    at = f" at {_clock(status.at)}" if status.at else ""
    key = _escape(status.ticket_key or "")
    shown = f"<{status.ticket_url[:MAX_URL]}|{key}>" if status.ticket_url else key
    ticket = f" → ticket *{shown}*" if status.ticket_key else ""
    lines = {
        ApprovalOutcome.APPROVED: f":white_check_mark: Approved by {who}{at}{ticket or ' → creating the ticket'}",
        ApprovalOutcome.REJECTED: f":x: Rejected by {who}{at}" + (f": {status.reason}" if status.reason else ""),
        ApprovalOutcome.EXPIRED: f":hourglass: Expired{at}: nobody decided in time; no ticket was created",
        ApprovalOutcome.SUPERSEDED: ":arrows_counterclockwise: Invalidated: the draft changed"
                                    + (f" ({status.reason})" if status.reason else "")
                                    + "; the new draft is in the thread",
        ApprovalOutcome.ENDED: ":black_square_for_stop: The run ended"
                               + (f": {status.reason}" if status.reason else ""),
        ApprovalOutcome.PENDING: "Waiting for a decision",
    }
    return lines[status.outcome]


def report_thread(msg: ApprovalMessage) -> list[SlackMessage]:
    """The full report and draft as thread replies, each within Slack's limits."""
    parts = [_section(t) for t in _chunks(_full_report(msg), MAX_TEXT)]
    return [_message(f"Full report for {msg.incident_id} ({i + 1}/{-(-len(parts) // MAX_BLOCKS)})",
                     list(parts[start:start + MAX_BLOCKS]))
            for i, start in enumerate(range(0, len(parts), MAX_BLOCKS))]


def notice(title: str, lines: Sequence[str], *, run_url: str | None = None,
           buttons: Sequence[Block] = ()) -> SlackMessage:
    """A short notification (ticket created, run completed, run needs a person); plain text in."""
    body = "\n".join(_escape(line) for line in lines)
    blocks: list[Block] = [_section(f"*{_escape(title)}*" + ("\n" + body if body else ""))]
    elements = [*buttons, *([_link_button("Open run", run_url)] if run_url else [])]
    if elements:
        blocks.append({"type": "actions", "elements": elements[:25]})
    return _message(title, blocks)


MAX_MODAL_TITLE = 24
MAX_METADATA = 3000
MAX_INPUT = 3000


def text_modal(*, callback_id: str, title: str, submit: str, intro: str, label: str, metadata: str,
               block_id: str, optional: bool, max_length: int = MAX_INPUT,
               extra_inputs: Sequence[Block] = ()) -> Block:
    """A modal asking for one text (a rejection's reason, a repair's note); what it is about
    travels in ``private_metadata`` and comes back with the ``view_submission``."""
    text_input: Block = {"type": "input", "block_id": block_id, "optional": optional, "label": _plain(label, 2000),
                         "element": {"type": "plain_text_input", "action_id": block_id, "multiline": True,
                                     "max_length": max_length}}
    return {"type": "modal", "callback_id": callback_id, "title": _plain(title, MAX_MODAL_TITLE),
            "submit": _plain(submit, MAX_MODAL_TITLE), "close": _plain("Cancel", MAX_MODAL_TITLE),
            "private_metadata": metadata[:MAX_METADATA],
            "blocks": [_section(intro), text_input, *extra_inputs]}


def line_input(block_id: str, label: str, *, optional: bool, max_length: int) -> Block:
    """A one-line text input for :func:`text_modal`'s ``extra_inputs``."""
    return {"type": "input", "block_id": block_id, "optional": optional, "label": _plain(label, 2000),
            "element": {"type": "plain_text_input", "action_id": block_id, "max_length": max_length}}


def action_button(text: str, action_id: str, value: str, *, style: str | None = None) -> Block:
    button: Block = {"type": "button", "action_id": action_id, "text": _plain(text, MAX_BUTTON_TEXT),
                     "value": cut(value, MAX_BUTTON_VALUE)}
    if style:
        button["style"] = style
    return button


def settled_notice(text: str, blocks: Sequence[Block], outcome: str) -> SlackMessage:
    """A notice whose buttons were used: the same blocks without its actions, and what was done."""
    kept = [dict(b) for b in blocks if b.get("type") != "actions"][: MAX_BLOCKS - 1]
    return _message(text, [*kept, _context(outcome)])


def _message(text: str, blocks: list[Block]) -> SlackMessage:
    return SlackMessage(text=cut(text, MAX_TEXT), blocks=tuple(blocks[:MAX_BLOCKS]))


def _header(text: str) -> Block:
    return {"type": "header", "text": _plain(text, MAX_HEADER)}


def _section(text: str) -> Block:
    return {"type": "section", "text": {"type": "mrkdwn", "text": cut(text, MAX_TEXT)}}


def _context(text: str) -> Block:
    return {"type": "context", "elements": [{"type": "mrkdwn", "text": cut(text, MAX_TEXT)}]}


def _plain(text: str, limit: int) -> dict[str, Any]:
    return {"type": "plain_text", "text": cut(text, limit), "emoji": True}


def _incident(msg: ApprovalMessage, *, now: datetime | None) -> Block:
    title = f"<{msg.run_url}|{_escape(msg.title)}>" if msg.run_url else _escape(msg.title)
    fields = [("Severity", msg.severity), ("Service", msg.service or "—"), ("Environment", msg.environment or "—"),
              ("Age", _age(msg.opened_at, now) if msg.opened_at else "—")]
    return {"type": "section", "text": {"type": "mrkdwn", "text": cut(f"*Incident* {title} (`{msg.incident_id}`)",
                                                                       MAX_TEXT)},
            "fields": [{"type": "mrkdwn", "text": cut(f"*{k}*\n{_escape(v)}", MAX_FIELD)} for k, v in fields]}


def _findings(msg: ApprovalMessage) -> Iterator[Block]:
    if msg.facts:
        yield _section(_listing("Facts", msg.facts, TOP_FACTS))
    if msg.hypotheses:
        yield _section(_listing("Hypotheses (not verified)", msg.hypotheses, TOP_HYPOTHESES))


def _listing(title: str, items: Sequence[Finding], top: int) -> str:
    more = len(items) - top
    lines = [f"• {_finding(f, text_limit=FINDING_EXCERPT)}" for f in items[:top]]
    tail = [f"_…and {more} more in the thread_"] if more > 0 else []
    return f"*{title}*\n" + "\n".join(lines + tail)


def _finding(f: Finding, *, text_limit: int) -> str:
    """The statement cut to ``text_limit``; its confidence and what it cites always shown."""
    confidence = f" — confidence {f.confidence:.2f}" if f.confidence is not None else ""
    source = f" `{cut(f.source, 80)}`" if f.source else ""
    shown = ", ".join(cut(c, 60) for c in f.cites[:MAX_CITES])
    more = f" +{len(f.cites) - MAX_CITES}" if len(f.cites) > MAX_CITES else ""
    cites = f" (cites {shown}{more})" if f.cites else ""
    return f"{cut(_escape(f.text), text_limit)}{confidence}{source}{cites}"


def _draft(msg: ApprovalMessage) -> Block:
    body = cut(_fence(msg.draft_body), DRAFT_EXCERPT)
    return _section(f"*Draft ticket (v{msg.draft_version})*: {cut(_escape(msg.draft_title), 300)}\n```{body}```")


def _binding_line(msg: ApprovalMessage) -> str:
    return (f"Approver role *{msg.approver_role}* · expires {_clock(msg.expires_at)} · draft `"
            f"{msg.draft_hash.removeprefix('sha256:')[:HASH_PREFIX]}` · incident version {msg.resource_version}")


def _buttons(msg: ApprovalMessage) -> Block:
    value = ActionValue(approval_id=msg.approval_id, draft_hash=msg.draft_hash,
                        resource_version=msg.resource_version).encode()
    elements = [action_button("Approve", APPROVE, value, style="primary"),
                action_button("Reject", REJECT, value, style="danger")]
    if msg.run_url:
        elements.append(_link_button("Open run", msg.run_url))
    return {"type": "actions", "block_id": f"approval:{msg.approval_id}"[:255], "elements": elements}


def _link_button(text: str, url: str) -> Block:
    return {"type": "button", "action_id": "open_run", "text": _plain(text, MAX_BUTTON_TEXT), "url": url[:MAX_URL]}


def _full_report(msg: ApprovalMessage) -> list[str]:
    lines = [f"*Report for {msg.incident_id}* — {_escape(msg.title)}", "*Facts*"]
    lines += [f"• {_finding(f, text_limit=MAX_TEXT // 2)}" for f in msg.facts] or ["• none"]
    lines += ["*Hypotheses (not verified)*"] + (
        [f"• {_finding(h, text_limit=MAX_TEXT // 2)}" for h in msg.hypotheses] or ["• none"])
    if msg.missing:
        lines += ["*Missing branches*"] + [f"• {m}" for m in msg.missing]
    lines += [f"*Draft ticket (v{msg.draft_version})*: {_escape(msg.draft_title)}"]
    body = [_fence(line) for line in msg.draft_body.splitlines()]
    return lines + [f"```{chunk}```" for chunk in _chunks(body, MAX_TEXT - 6)]


def _chunks(lines: Sequence[str], limit: int) -> list[str]:
    """Lines packed into texts of at most ``limit`` characters (a longer line is cut)."""
    chunks: list[str] = []
    current = ""
    for line in (cut(x, limit) for x in lines):
        if current and len(current) + 1 + len(line) > limit:
            chunks.append(current)
            current = line
        else:
            current = f"{current}\n{line}" if current else line
    return [*chunks, current] if current else chunks


def _escape(text: str) -> str:
    """Slack's three control characters in mrkdwn."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _fence(text: str) -> str:
    return _escape(text).replace("```", "'''")


def _clock(at: datetime) -> str:
    return at.strftime("%Y-%m-%d %H:%M UTC")


def _age(opened: datetime, now: datetime | None) -> str:
    if now is None:
        return f"since {_clock(opened)}"
    minutes = max(0, int((now - opened).total_seconds() // 60))
    return f"{minutes // 60}h {minutes % 60}m" if minutes >= 60 else f"{minutes}m"
