"""What Jira and GitHub receive: fields mapped from the draft by configuration, the body in the
system's format, and the idempotency marks inside the create request itself."""

from __future__ import annotations

from datetime import UTC, datetime

from ira.connectors.tickets.mark import PROPERTY_KEY, key_tag, parse_marker
from ira.connectors.tickets.tenants import remote_ticket_system
from ira.core.clock import FrozenClock
from ira.core.ticket import TicketRequest
from ira.runtime.settings.tickets import TicketsSettings
from tests.fakes.github import FakeGitHub
from tests.fakes.jira import FakeJira
from tests.serving import serve

KEY = "sha256:" + "c0ffee" * 10 + "abcd"
REQUEST = TicketRequest(
    tenant_id="acme", title="[critical] order-service: p99 latency", severity="critical", service="order-service",
    incident_id="inc_1", labels={"run_id": "run_7"},
    body="Incident inc_1.\n\n## Facts\n- [metrics] p99 up 8x (prometheus; sha256:e1)\n\n## Hypotheses (not verified)\n"
         "- deploy v3 (confidence 0.80; evidence e1)")


async def test_jira_gets_mapped_fields_an_adf_body_and_both_marks() -> None:
    fake = FakeJira()
    async with serve(fake) as url:
        config = fake.settings(url)
        config["jira"] |= {"priorities": {"critical": "P1"}, "components": ["orders"], "labels": ["ira", "sev1"]}
        config["dashboard_url"] = "https://ira.acme.test/"
        ticket = await remote_ticket_system(TicketsSettings.model_validate(config), FrozenClock(
            datetime(2026, 4, 29, tzinfo=UTC))).create(REQUEST, idempotency_key=KEY, namespace="n", epoch=1)
    [issue] = fake.issues
    fields = issue.fields
    assert (fields["project"], fields["issuetype"], fields["priority"], fields["components"]) == (
        {"key": "OPS"}, {"name": "Task"}, {"name": "P1"}, [{"name": "orders"}])
    assert fields["labels"] == ["ira", "sev1", f"ira-{key_tag(KEY)}"] and fields["summary"] == REQUEST.title
    blocks = [(b["type"], b.get("attrs", {}).get("level")) for b in fields["description"]["content"]]
    assert blocks == [("paragraph", None), ("heading", 2), ("bulletList", None), ("heading", 2),
                      ("bulletList", None), ("paragraph", None)]
    link = fields["description"]["content"][-1]["content"][0]
    assert link["marks"][0]["attrs"]["href"] == "https://ira.acme.test/runs/run_7"
    assert issue.properties[PROPERTY_KEY] == {"tenant_id": "acme", "idempotency_key": KEY,
                                              "payload_hash": REQUEST.payload_hash(),
                                              "filed_at": "2026-04-29T00:00:00Z"}
    assert (ticket.key, ticket.url) == ("OPS-1", f"{url}/browse/OPS-1")


async def test_github_gets_labels_and_markdown_with_the_hidden_marker() -> None:
    fake = FakeGitHub()
    async with serve(fake) as url:
        ticket = await remote_ticket_system(fake.tickets(url + "/"), FrozenClock(datetime(2026, 4, 29, tzinfo=UTC))) \
            .create(REQUEST, idempotency_key=KEY, namespace="n", epoch=1)
    [issue] = fake.issues
    assert issue.labels == ["ira", f"ira:{key_tag(KEY)}"] and issue.title == REQUEST.title
    assert issue.body.startswith(REQUEST.body) and "<!-- ira-idempotency-key: {" in issue.body
    mark = parse_marker(issue.body)
    assert mark is not None and mark.is_for("acme", KEY) and mark.payload_hash == REQUEST.payload_hash()
    assert (ticket.key, ticket.url) == ("#1", "https://github.example/acme/ops/issues/1")
    assert fake.requests[-1].headers["authorization"] == f"Bearer {fake.token}"
