"""A run's log as people read it: the typed event, a sentence, and the raw data.

The API's event list, the SSE stream and the run page all build their event from
:func:`event_view`, so a page that renders the stream and one that renders the list show
the same words.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from ira.core.events import RunEventType as E
from ira.core.model import Model
from ira.core.run import RunEvent
from ira.readmodel.runs import get_summary
from ira.runtime.store import runs


class EventView(Model):
    run_seq: int
    event_id: str
    type: E
    at: datetime
    text: str
    """One sentence saying what happened, for people."""
    data: dict[str, Any]


class EventList(Model):
    events: tuple[EventView, ...]


def _get(data: Mapping[str, Any], key: str, default: str = "?") -> str:
    value = data.get(key)
    return default if value is None else str(value)


def _keys(tickets: object) -> list[str]:
    """Ticket keys from ``{operation kind: key}`` (or a plain list)."""
    values = tickets.values() if isinstance(tickets, Mapping) else tickets
    return [str(v) for v in values if v] if isinstance(values, Iterable) else []


def _turn(d: Mapping[str, Any]) -> str:
    head = f"{_get(d, 'step_id')} turn {_get(d, 'turn')}: "
    if not d.get("tool"):
        return head + f"{_get(d, 'decision', 'finished')}."
    outcome = "ok" if d.get("ok") else f"failed ({_get(d, 'error_code')})"
    return head + f"called {d['tool']}, {outcome}" + (", partial." if d.get("partial") else ".")


def _started(d: Mapping[str, Any]) -> str:
    """Which branches the run planned (older runs did not say: they planned all three)."""
    branches = d.get("branches", ["metrics", "logs", "runbooks"])
    if not branches:
        return "Investigation started with no branch: no data source is configured; drafting from the alert."
    names = [str(b) for b in branches]
    listed = names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"
    return f"Investigation started: {listed} branch{'es' if len(names) > 1 else ''}."


def _updated(d: Mapping[str, Any]) -> str:
    """One coalesced incident update: what changed, and whether the draft had to follow."""
    parts = [f"{d.get('events', 0)} alert event(s)"]
    parts += [f"{d[k]} {k}" for k in ("joined", "resolved", "refired") if d.get(k)]
    tail = "; all alerts resolved" if d.get("all_resolved") else ""
    tail += "; the draft's substance changed" if d.get("substantive") else ""
    return (f"Incident update {_get(d, 'seq')} ({_get(d, 'trigger')}): {', '.join(parts)}; "
            f"severity {_get(d, 'severity')}, incident version {_get(d, 'incident_version')}{tail}.")


_Sentence = Callable[[Mapping[str, Any]], str]

SENTENCES: dict[E, _Sentence] = {
    E.RUN_CREATED: lambda d: f"Run created for incident {_get(d, 'incident_id')}.",
    E.RUN_STARTED: lambda d: _started(d),
    E.RUN_COMPLETED: lambda d: "Run completed" + (f": ticket {', '.join(_keys(d['tickets']))}." if d.get("tickets")
                                                   else "."),
    E.RUN_FAILED: lambda d: f"Run failed: {_get(d, 'outcome')}.",
    E.RUN_CANCELLED: lambda d: f"Run cancelled by {_get(d, 'by', 'the platform')}"
                               + (f": “{d['reason']}”." if d.get("reason") else f" ({_get(d, 'outcome')})."),
    E.DECISION_REFUSED: lambda d: f"A second run request was refused: {_get(d, 'reason')}.",
    E.ALERT_DELIVERED: lambda d: f"An alert of the incident is {_get(d, 'status')} ({_get(d, 'reason')}; "
                                 f"incident version {_get(d, 'incident_version')}).",
    E.INCIDENT_UPDATED: lambda d: _updated(d),
    E.STEP_READY: lambda d: f"Step {_get(d, 'step_id')} is ready.",
    E.STEP_FAILED: lambda d: f"Step {_get(d, 'step_id')} failed: {_get(d, 'error')}.",
    E.AGENT_TURN: lambda d: _turn(d),
    E.PROPOSAL_DENIED: lambda d: f"{_get(d, 'step_id')}: a proposal was denied: {_get(d, 'reason')}.",
    E.BRANCH_FINISHED: lambda d: f"Branch {_get(d, 'step_id')} finished ({_get(d, 'stop_reason', 'done')}).",
    E.BRANCH_TIMED_OUT: lambda d: f"Branch {_get(d, 'step_id')} ran out of time.",
    E.BRANCH_ACCEPTED: lambda d: f"Branch {_get(d, 'branch')} accepted.",
    E.BRANCH_FAILED: lambda d: f"Required branch {_get(d, 'branch')} failed: {_get(d, 'reason')}.",
    E.BRANCH_MISSING: lambda d: f"Optional branch {_get(d, 'branch')} is missing: {_get(d, 'reason')}.",
    E.BRANCH_NOT_PLANNED: lambda d: f"Branch {_get(d, 'branch')} not planned: {_get(d, 'reason')}.",
    E.JOINED: lambda d: f"Branches joined: {_get(d, 'verdict')}.",
    E.REVIEW_DRAFT_ANYWAY: lambda d: f"{_get(d, 'principal')} chose to draft anyway, the gaps stated"
                                     + (f": “{d['note']}”." if d.get("note") else "."),
    E.REVIEW_RETRY_BRANCHES: lambda d: f"{_get(d, 'principal')} retried the failed branches "
                                       f"({', '.join(d.get('retried') or ()) or '?'})"
                                       + (f": “{d['note']}”." if d.get("note") else "."),
    E.REPORT_WRITTEN: lambda d: f"Report written: {_get(d, 'facts')} facts, {_get(d, 'hypotheses')} hypotheses.",
    E.DRAFT_WRITTEN: lambda d: f"Ticket draft v{_get(d, 'version')} written.",
    E.DRAFT_REVISED: lambda d: f"Ticket draft revised to v{_get(d, 'version')}.",
    E.APPROVAL_NOT_REQUIRED: lambda d: "The contract allows the ticket without approval.",
    E.APPROVAL_REQUESTED: lambda d: f"Approval requested from a {_get(d, 'required_role', 'approver')}.",
    E.APPROVAL_CHECKED: lambda d: "The approval still binds the current draft.",
    E.APPROVAL_APPROVED: lambda d: f"Approved by {_get(d, 'principal')}.",
    E.APPROVAL_REJECTED: lambda d: f"Rejected by {_get(d, 'principal')}.",
    E.APPROVAL_EXPIRED: lambda d: "The approval expired without a decision.",
    E.APPROVAL_INVALIDATED: lambda d: f"The approval no longer applies: {_get(d, 'reason')}.",
    E.APPROVAL_DECISION_REFUSED: lambda d: f"A {_get(d, 'decision', 'decision')} by {_get(d, 'principal')} "
                                           f"was refused: {_get(d, 'message', _get(d, 'code'))}.",
    E.OPERATION_INTENT_RECORDED: lambda d: "Ticket creation recorded (intent).",
    E.OPERATION_SUBMITTED: lambda d: "Ticket creation submitted to the ticket system.",
    E.OPERATION_HELD: lambda d: f"Ticket creation held: {_get(d, 'reason')}.",
    E.OPERATION_REFUSED: lambda d: f"Ticket creation refused: {_get(d, 'reason')}.",
    E.OPERATION_RETRY_AUTHORIZED: lambda d: "A retry of the ticket creation was authorized.",
    E.OPERATION_FAILED: lambda d: f"Ticket creation failed: {_get(d, 'reason')}.",
    E.OPERATION_UNKNOWN: lambda d: "Ticket creation outcome unknown; reconciling.",
    E.OPERATION_NOT_CREATED: lambda d: "Reconciliation: the ticket was not created.",
    E.OPERATION_RESUMED: lambda d: "Ticket creation resumed.",
    E.OPERATION_RECONCILING: lambda d: "The in-flight ticket creation is being reconciled.",
    E.OPERATION_CONFIRMED: lambda d: f"Ticket {_get(d, 'external_ref')} confirmed by its receipt.",
    E.OPERATION_MANUAL_REPAIR: lambda d: "Ticket creation needs a manual repair.",
    E.MANUAL_REPAIR_CLOSED: lambda d: f"Manual repair closed by {_get(d, 'principal')}: {_get(d, 'fact_state')}.",
    E.TICKET_CREATED: lambda d: f"Ticket {_get(d, 'key')} created.",
    E.VERIFICATION_BLOCKED: lambda d: "Verification blocked: an operation is in doubt.",
}


def describe(event_type: E, data: Mapping[str, Any]) -> str:
    """The sentence for one event; never raises on a payload missing a field."""
    try:
        return SENTENCES[event_type](data)
    except (KeyError, TypeError, ValueError):
        return event_type.value.replace("_", " ").capitalize() + "."


def event_view(event: RunEvent) -> EventView:
    return EventView(run_seq=event.run_seq, event_id=event.event_id, type=event.type, at=event.at,
                     text=describe(event.type, event.data), data=event.data)


def sse_frame(view: EventView) -> str:
    """``id:`` = run_seq, so a reconnect with ``Last-Event-ID`` resumes after it."""
    return f"id: {view.run_seq}\nevent: run-event\ndata: {view.model_dump_json()}\n\n"


async def list_events(
    conn: AsyncConnection, tenant_id: str, run_id: str, *, after: int = 0, limit: int = 1000,
) -> EventList:
    """The run's log after ``after``; NotFoundError for another tenant's run."""
    await get_summary(conn, tenant_id, run_id)
    found = await runs.list_events(conn, tenant_id, run_id, after=after, limit=limit)
    return EventList(events=tuple(event_view(e) for e in found))


def data_json(view: EventView) -> str:
    """The raw payload, indented, for the collapsible detail under the sentence."""
    return json.dumps(view.data, indent=2, sort_keys=True, default=str)
