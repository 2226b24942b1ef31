"""The trace context of the runs this process read or wrote, remembered (bounded).

A run's ``traceparent`` is written once, when ``runs.create_run`` inserts the row, and never
changed; a commit stamps its outbox messages with it (``runtrace.parent_for``). Known here, the
messages can be written by the run's compare-and-set statement itself on PostgreSQL
(``folded_cas``), before that statement returns the row; unknown (a run this process has not
read since it started, or forgot), they are written after it, as on SQLite.
"""

from __future__ import annotations

from collections import OrderedDict

from ira.core.run import Run

LIMIT = 10_000
"""Runs remembered, the least recently seen forgotten first (~1 MB at most)."""

_KNOWN: OrderedDict[tuple[str, str], str | None] = OrderedDict()


def remember(run: Run) -> None:
    key = (run.tenant_id, run.run_id)
    _KNOWN[key] = run.traceparent
    _KNOWN.move_to_end(key)
    if len(_KNOWN) > LIMIT:
        _KNOWN.popitem(last=False)


def known(tenant_id: str, run_id: str) -> tuple[bool, str | None]:
    """(whether the run's trace context is known here, that context: None for a run without)."""
    key = (tenant_id, run_id)
    if key not in _KNOWN:
        return False, None
    return True, _KNOWN[key]


def forget(tenant_id: str, run_id: str) -> None:
    """As if this process had never seen the run (a fresh process, or one that forgot it)."""
    _KNOWN.pop((tenant_id, run_id), None)
