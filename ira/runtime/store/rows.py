"""Row <-> model mapping shared by the store modules."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy.engine import Row

from ira.core.run import Run, RunEvent, Step
from ira.runtime.store import run_traces


def run_from_row(row: Row[Any]) -> Run:
    """The run of ``row``; its trace context is remembered (``run_traces``)."""
    return run_from_mapping(row._mapping)


def run_from_mapping(m: Mapping[Any, Any]) -> Run:
    """The run of a row's mapping (``run_from_row``)."""
    run = Run(
        run_id=m["run_id"], tenant_id=m["tenant_id"], task_id=m["task_id"], workflow=m["workflow"],
        state=m["state"], wait_kind=m["wait_kind"], state_version=m["state_version"], last_seq=m["last_seq"],
        environment=m["environment"], contract=m["contract"], bindings=m["bindings"],
        incident_id=m["incident_id"], outcome=m["outcome"], created_at=m["created_at"], updated_at=m["updated_at"],
        traceparent=m.get("traceparent"),
    )
    run_traces.remember(run)
    return run


def step_from_row(row: Row[Any]) -> Step:
    return step_from_mapping(row._mapping)


def step_from_mapping(m: Mapping[Any, Any]) -> Step:
    return Step(
        tenant_id=m["tenant_id"], run_id=m["run_id"], step_id=m["step_id"], kind=m["kind"], state=m["state"],
        depends_on=tuple(m["depends_on"]), required=m["required"], owner=m["owner"],
        owner_epoch=m["owner_epoch"], lease_until=m["lease_until"], binding=m["binding"],
        result_ref=m["result_ref"], updated_at=m["updated_at"],
    )


def event_from_row(row: Row[Any]) -> RunEvent:
    m = row._mapping
    return RunEvent(
        tenant_id=m["tenant_id"], run_id=m["run_id"], run_seq=m["run_seq"], event_id=m["event_id"],
        type=m["type"], at=m["at"], data=m["data"],
    )
