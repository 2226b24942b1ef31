"""The read model: one typed view of runs, incidents, reports, drafts and tickets (DESIGN.md §8a).

Every GET of the API, every dashboard page, the SSE stream and Slack's rendering of a draft
read through these functions and models, so no two readers can disagree about a run.
Writes stay with the package that decides them (the coordinator's commands, triage's
evaluations); this package only reads.

Where it sits: it imports ``core``, ``runtime`` and the *table declarations* of the packages
that own the tables it reads (``ira.triage.tables``, ``ira.coordinator.schema``,
``ira.connectors.tickets.schema``: leaf modules that import nothing but the store's
metadata). It imports no service logic, and no service but the dashboard (the read side)
and the notifier's message rendering imports it; ``tests/readmodel/test_layering.py``
holds both rules.

Modules:

* :mod:`.runs` — ``RunSummary`` (incident-first: title, service, severity, ticket) and lists.
* :mod:`.detail` — ``RunDetail``: steps with attempts, approvals, operations, budget in human
  units, deliveries, work items, draft versions.
* :mod:`.events` — ``EventView``: the typed event with a sentence a person can read.
* :mod:`.incidents` — ``IncidentView`` / ``IncidentDetail``: alerts, evaluations, runs, tickets.
* :mod:`.reports` — ``ReportView`` (facts with their evidence rendered) and ``DraftView``.
* :mod:`.tickets` — ``TicketView`` of the builtin ticket service.
"""
