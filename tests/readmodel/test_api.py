"""Every GET of the read model over HTTP: runs, detail, events, report, draft, artifacts, tickets.

Given a run waiting for approval (real coordinator steps, scripted investigators, real SQL),
each view answers from the same tables the commands wrote, only for the caller's tenant.
"""

from __future__ import annotations

from ira.core.report import TicketDraft
from ira.runtime.store import artifacts
from ira.runtime.store.database import Database
from tests.coordinator.harness import api, auth
from tests.coordinator.test_approvals import decide, waiting_for_approval


async def test_run_list_and_detail_lead_with_the_incident(db: Database) -> None:
    pump, deps, _, d, run_id, approval = await waiting_for_approval(db)
    async with api(deps) as client:
        waiting = await client.get("/v1/runs", headers=auth("viewer"), params={"wait_kind": "approval"})
        [listed] = waiting.json()["runs"]
        by_incident = (await client.get("/v1/runs", headers=auth("viewer"),
                                        params={"incident_id": d.incident_id})).json()["runs"]
        detail = (await client.get(f"/v1/runs/{run_id}", headers=auth("viewer"))).json()
    await pump.close()
    assert (listed["run_id"], listed["title"], listed["service"], listed["severity"]) == (
        run_id, d.title, d.service, d.severity)
    assert listed["ticket"] is None and [r["run_id"] for r in by_incident] == [run_id]
    assert {s["step_id"] for s in detail["steps"]} >= {"metrics", "logs", "runbooks", "join", "approve_ticket"}
    assert all(s["attempts"] >= 1 for s in detail["steps"] if s["state"] == "done")
    [shown] = detail["approvals"]
    assert (shown["approval_id"], shown["state"], shown["required_role"]) == (
        approval.approval_id, "pending", "approver")
    assert [v["version"] for v in detail["drafts"]] == [1]
    assert set(detail["budget"]["tool_calls"]) == {"limit", "reserved", "settled"}
    assert set(detail["budget_slices"]) == {"metrics", "logs", "runbooks"}


async def test_events_read_as_sentences_with_their_typed_data(db: Database) -> None:
    pump, deps, _, d, run_id, _ = await waiting_for_approval(db)
    async with api(deps) as client:
        events = (await client.get(f"/v1/runs/{run_id}/events", headers=auth("viewer"))).json()["events"]
        later = (await client.get(f"/v1/runs/{run_id}/events", headers=auth("viewer"), params={"after": 3})).json()
    await pump.close()
    assert [e["run_seq"] for e in events] == list(range(1, len(events) + 1))
    assert events[0]["type"] == "RUN_CREATED" and events[0]["text"] == f"Run created for incident {d.incident_id}."
    assert events[-1]["type"] == "APPROVAL_REQUESTED" and "approver" in events[-1]["text"]
    assert all(e["text"] and not e["text"].endswith("?.") for e in events)
    assert [e["run_seq"] for e in later["events"]][0] == 4


async def test_draft_is_the_ticket_exactly_as_it_will_be_filed(db: Database) -> None:
    pump, deps, _, _, run_id, approval = await waiting_for_approval(db)
    async with api(deps) as client:
        draft = (await client.get(f"/v1/runs/{run_id}/draft", headers=auth("viewer"))).json()
        raw = await client.get(f"/v1/artifacts/{draft['ref']}", headers=auth("viewer"))
    await pump.close()
    stored = TicketDraft.model_validate_json(raw.content)
    assert raw.headers["content-type"].startswith("application/json")
    assert (draft["title"], draft["body"]) == (stored.request.title, stored.request.body)
    assert draft["approval"]["approval_id"] == approval.approval_id and approval.payload_hash == draft["ref"]
    assert (draft["version"], draft["versions"], draft["ticket"]) == (1, 1, None)


async def test_report_labels_match_between_facts_hypotheses_and_the_ticket_body(db: Database) -> None:
    pump, deps, _, _, run_id, _ = await waiting_for_approval(db)
    async with api(deps) as client:
        report = (await client.get(f"/v1/runs/{run_id}/report", headers=auth("viewer"))).json()
        draft = (await client.get(f"/v1/runs/{run_id}/draft", headers=auth("viewer"))).json()
    await pump.close()
    labels = [f["label"] for f in report["facts"]]
    assert labels and len(set(labels)) == len(labels) and all(len(label) <= 3 for label in labels)
    assert {b["branch"]: b["status"] for b in report["branches"]} == {
        "metrics": "accepted", "logs": "accepted", "runbooks": "accepted"}
    for label in labels:
        assert f"**{label}**" in draft["body"]
    for h in report["hypotheses"]:
        assert set(h["evidence_labels"]) <= set(labels) and ", ".join(h["evidence_labels"]) in draft["body"]
    assert "sha256:" not in draft["body"]


async def test_after_approval_the_views_show_who_decided_and_the_ticket(db: Database) -> None:
    pump, deps, _, d, run_id, approval = await waiting_for_approval(db)
    async with api(deps) as client:
        assert (await decide(client, approval.approval_id)).status_code == 200
        await pump.drain()
        [ticket] = (await client.get("/v1/tickets", headers=auth("viewer"))).json()["tickets"]
        summary = (await client.get("/v1/runs", headers=auth("viewer"))).json()["runs"][0]
        draft = (await client.get(f"/v1/runs/{run_id}/draft", headers=auth("viewer"))).json()
    await pump.close()
    assert (ticket["key"], ticket["run_id"], ticket["incident_id"]) == ("INC-1", run_id, d.incident_id)
    assert (summary["state"], summary["ticket"]) == ("completed", "INC-1")
    assert (draft["approval"]["state"], draft["approval"]["decided_by"], draft["ticket"]) == (
        "approved", "lead", "INC-1")
    assert ticket["title"] == draft["title"] and ticket["body"] == draft["body"]


async def test_another_tenant_sees_nothing_of_the_run(db: Database) -> None:
    pump, deps, _, _, run_id, _ = await waiting_for_approval(db)
    async with api(deps) as client:
        draft_ref = (await client.get(f"/v1/runs/{run_id}/draft", headers=auth("viewer"))).json()["ref"]
        answers = [await client.get(path, headers=auth("other")) for path in (
            f"/v1/runs/{run_id}", f"/v1/runs/{run_id}/report", f"/v1/runs/{run_id}/draft",
            f"/v1/runs/{run_id}/events", f"/v1/artifacts/{draft_ref}")]
        listed = (await client.get("/v1/runs", headers=auth("other"))).json()["runs"]
        tickets = (await client.get("/v1/tickets", headers=auth("other"))).json()["tickets"]
    await pump.close()
    assert [a.status_code for a in answers] == [404] * 5
    assert all(a.json()["errors"][0]["code"] == "not_found" for a in answers)
    assert listed == [] and tickets == []
    async with db.reader() as conn:  # the artifact exists, just not for "globex"
        assert (await artifacts.get_artifact(conn, "acme", draft_ref))[0].ref == draft_ref


async def test_report_and_draft_before_synthesis_are_not_found(db: Database) -> None:
    from tests.coordinator.harness import build, decision, envelope

    pump, deps = build(db, behaviour={"metrics": "hang"})
    await pump.decide(envelope(decision()))
    await pump.drain()
    async with api(deps) as client:
        [run] = (await client.get("/v1/runs", headers=auth("viewer"))).json()["runs"]
        report = await client.get(f"/v1/runs/{run['run_id']}/report", headers=auth("viewer"))
        draft = await client.get(f"/v1/runs/{run['run_id']}/draft", headers=auth("viewer"))
    await pump.close()
    assert (report.status_code, draft.status_code) == (404, 404)
    assert "no report yet" in report.json()["errors"][0]["message"]
