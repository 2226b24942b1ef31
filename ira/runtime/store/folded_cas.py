"""PostgreSQL: a run commit's compare-and-set and the events it appends, in one statement.

On PostgreSQL a statement's cost in a durable step is mostly its round trip and SQLAlchemy's
execution around it (~130 µs of CPU each here, the database's share a fraction of that), not
the SQL. The events a commit appends are numbered from the ``last_seq`` its compare-and-set
returns, so they ride in that UPDATE as a data-modifying CTE: ``INSERT INTO events .. SELECT``
from the UPDATE's returned row joined with the drafts (``unnest .. WITH ORDINALITY``, one array
per column). A refused compare-and-set returns no row, so no event is written, and the caller
raises as before (``runs._explain_refusal``); numbering stays gapless because it is computed
from the very row the UPDATE locked and wrote. SQLite keeps two statements (its CTEs cannot
modify data).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from functools import cache
from typing import Any

from sqlalchemy import JSON, Integer, String, Text, bindparam, cast, column, func, insert, select, true
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.sql import Select, Update

from ira.core.commit import EventDraft
from ira.core.ids import new_event_id
from ira.core.redact import Redactor
from ira.runtime.store.schema import events


@cache
def bump_with_events(bump: Update) -> Select[Any]:
    """``bump`` (the compare-and-set, ``RETURNING`` the run's columns) with the INSERT of its
    events: the same row back, or none if refused. Built once per shape of ``bump``."""
    bumped = bump.cte("bumped")
    drafts = func.unnest(
        bindparam("e_ids", type_=ARRAY(String)), bindparam("e_types", type_=ARRAY(String)),
        bindparam("e_data", type_=ARRAY(Text)),
    ).table_valued(column("event_id", String), column("type", String), column("data", Text),
                   with_ordinality="ord").render_derived(name="drafts")
    first = bumped.c.last_seq - bindparam("n_events", type_=Integer)
    appended = insert(events).from_select(
        ["tenant_id", "run_id", "run_seq", "event_id", "type", "at", "data"],
        select(bumped.c.tenant_id, bumped.c.run_id, first + drafts.c.ord, drafts.c.event_id, drafts.c.type,
               bindparam("now", type_=events.c.at.type), cast(drafts.c.data, JSON))
        .select_from(bumped.join(drafts, true())),
    ).cte("appended")
    return select(bumped).add_cte(appended)


def event_params(drafts: Sequence[EventDraft], shapes: Redactor) -> dict[str, object]:
    """The drafts as ``bump_with_events``' arrays; data masked by shape, as every event write is."""
    return {"e_ids": [new_event_id() for _ in drafts], "e_types": [d.type.value for d in drafts],
            "e_data": [json.dumps(shapes.value(d.data)) for d in drafts]}
