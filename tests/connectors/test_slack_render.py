"""Block Kit rendering against Slack's limits, with a report far larger than they allow."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from ira.connectors.slack.interactions import ActionValue
from ira.connectors.slack.render import SlackMessage, approval_message, report_thread, status_line
from ira.core.chat import ApprovalMessage, ApprovalOutcome, ApprovalStatus, Finding

NOW = datetime(2026, 4, 29, 10, 40, tzinfo=UTC)
LIMITS = {"blocks": 50, "text": 3000, "header": 150, "field": 2000, "fields": 10, "button_text": 75,
          "button_value": 2000, "elements": 25}


def huge_report(**over: Any) -> ApprovalMessage:
    """300 facts and 80 hypotheses of 900 characters, a 60,000-character draft, markup to escape."""
    base = dict(
        run_id="run_1", incident_id="inc_1", approval_id="apr_1",
        title="order-service p99 latency above 2s <script>" * 20, severity="critical", service="order-service",
        environment="prod", opened_at=NOW - timedelta(minutes=75),
        facts=tuple(Finding(text=f"fact {i} " + "p99 went from 210ms to 2.1s & <more> " * 25, source="prometheus",
                            cites=(f"metrics-e{i}",)) for i in range(300)),
        hypotheses=tuple(Finding(text=f"hypothesis {i} " + "the v3 deploy saturated the pool " * 27,
                                 confidence=0.9 - i / 100, cites=tuple(f"e{j}" for j in range(40)))
                         for i in range(80)),
        missing=tuple(f"runbooks: timed out after 10m ({i})" for i in range(40)),
        draft_title="[critical] order-service: " + "latency " * 60, draft_body="line ```with fences``` <&>\n" * 2400,
        draft_version=3, draft_hash="sha256:" + "ab12" * 16, resource_version=2, approver_role="approver",
        expires_at=NOW + timedelta(minutes=30), run_url="http://ira.test/runs/run_1")
    return ApprovalMessage.model_validate({**base, **over})


def violations(message: SlackMessage) -> list[str]:
    found = [f"{len(message.blocks)} blocks"] if len(message.blocks) > LIMITS["blocks"] else []
    if len(message.text) > LIMITS["text"]:
        found.append("message text")
    for i, block in enumerate(message.blocks):
        found += [f"block {i}: {v}" for v in _block_violations(block)]
    return found


def _block_violations(block: dict[str, Any]) -> list[str]:
    found = []
    limit = LIMITS["header"] if block["type"] == "header" else LIMITS["text"]
    if "text" in block and len(block["text"]["text"]) > limit:
        found.append(f"{block['type']} text {len(block['text']['text'])}")
    fields = block.get("fields", [])
    if len(fields) > LIMITS["fields"] or any(len(f["text"]) > LIMITS["field"] for f in fields):
        found.append("fields")
    elements = block.get("elements", [])
    if len(elements) > LIMITS["elements"]:
        found.append("elements")
    for e in elements:
        if e.get("type") == "button" and (len(e["text"]["text"]) > LIMITS["button_text"]
                                          or len(e.get("value", "")) > LIMITS["button_value"]):
            found.append("button")
        if e.get("type") == "mrkdwn" and len(e["text"]) > LIMITS["text"]:
            found.append("context text")
    return found


@pytest.mark.parametrize("status", [None, ApprovalStatus(outcome=ApprovalOutcome.APPROVED, principal="lead",
                                                         chat_user="U0DEVLEAD", at=NOW, ticket_key="INC-1"),
                                    ApprovalStatus(outcome=ApprovalOutcome.REJECTED, principal="lead",
                                                   reason="not ours " * 500)])
def test_an_oversized_report_still_fits_slacks_limits(status: ApprovalStatus | None) -> None:
    message = approval_message(huge_report(), status, now=NOW)
    assert violations(message) == []
    assert len(message.blocks) <= 15, "the message keeps its fixed shape whatever the report holds"


def test_the_buttons_carry_the_approval_the_draft_hash_and_the_version() -> None:
    message = approval_message(huge_report(), now=NOW)
    [actions] = [b for b in message.blocks if b["type"] == "actions"]
    buttons = {e["action_id"]: e for e in actions["elements"]}
    assert ActionValue.decode(buttons["approve"]["value"]) == ActionValue(
        approval_id="apr_1", draft_hash="sha256:" + "ab12" * 16, resource_version=2)
    assert buttons["approve"]["value"] == buttons["reject"]["value"]
    assert (buttons["approve"]["style"], buttons["reject"]["style"]) == ("primary", "danger")
    context = str([b for b in message.blocks if b["type"] == "context"])
    assert "ab12ab12ab12" in context and "ab12ab12ab12a" not in context, "the hash's first 12 characters"


def test_the_message_says_what_a_person_needs_to_decide() -> None:
    text = str(approval_message(huge_report(facts=(Finding(text="p99 2.1s", source="prometheus",
                                                                  cites=("metrics-e1",)),)), now=NOW).blocks)
    for expected in ("critical", "order-service", "prod", "1h 15m", "p99 2.1s", "metrics-e1", "confidence 0.90",
                     "runbooks: timed out", "Draft ticket (v3)", "approver", "2026-04-29 11:10 UTC",
                     "http://ira.test/runs/run_1"):
        assert expected in text, expected
    assert "<script>" not in text and "&lt;script&gt;" in text, "report text cannot inject Slack markup"


def test_the_thread_holds_the_whole_report_in_messages_within_the_limits() -> None:
    msg = huge_report()
    thread = report_thread(msg)
    joined = "".join(b["text"]["text"] for m in thread for b in m.blocks)
    assert len(thread) > 1 and all(violations(m) == [] for m in thread)
    assert all(f"fact {i} " in joined for i in range(300)) and "hypothesis 79 " in joined
    assert "'''with fences'''" in joined and "```with" not in joined.replace("```line", "")


def test_an_approved_message_links_the_ticket_at_its_system() -> None:
    linked = ApprovalStatus(outcome=ApprovalOutcome.APPROVED, principal="lead", chat_user="U0DEVLEAD", at=NOW,
                            ticket_key="OPS-12", ticket_url="https://acme.atlassian.net/browse/OPS-12")
    builtin = linked.model_copy(update={"ticket_url": None, "ticket_key": "INC-1"})
    assert "→ ticket *<https://acme.atlassian.net/browse/OPS-12|OPS-12>*" in status_line(linked)
    assert "→ ticket *INC-1*" in status_line(builtin)
