"""A run's material as a bundle, without a running ira: tool calls become recordings (refused ones
do not), model calls are kept by fingerprint, everything is redacted, and a run with no stored
source event is not recordable."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from ira.core.alert import AlertEvent, AlertStatus, Severity, SourceKind
from ira.core.investigation import BranchBinding, BranchKind
from ira.core.redact import Redactor
from ira.core.replay import Outcome
from ira.core.states import RunState
from ira.readmodel.recording import NotRecordableError, RecordedBranch, RecordedTurn, RunMaterial
from ira.replay.record import bundle_of

T0 = datetime(2026, 9, 14, 16, 0, tzinfo=UTC)
SECRET = "AKIAQ7CANARYUNIT0042"


def material(*, alerts: bool = True) -> RunMaterial:
    binding = BranchBinding(tenant_id="globex", environment="prod", service="billing", incident_id="inc_1",
                            alert_name="QueueBacklog", window_start=T0, window_end=T0 + timedelta(minutes=30),
                            tools=("logs.search",), budget={}, deadline=T0 + timedelta(hours=1))
    search = {"service": "billing", "start": T0.isoformat(), "end": (T0 + timedelta(minutes=30)).isoformat()}
    turns = (
        RecordedTurn(turn=1, decision={"kind": "tool", "tool": "logs.search", "args": search,
                                       "_fingerprint": "sha256:a",
                                       "_reply": {"model": "m", "usage": {"input_tokens": 9, "output_tokens": 3}}},
                     observation={"tool": "logs.search", "ok": True, "data": {"lines": [], "total_matched": 0}}),
        RecordedTurn(turn=2, decision={"kind": "tool", "tool": "logs.search", "args": {"service": "other"}},
                     observation={"tool": "logs.search", "ok": False, "error_code": "denied", "error_message": "no"}),
        RecordedTurn(turn=3, decision={"kind": "tool", "tool": "logs.search", "args": search},
                     observation={"tool": "logs.search", "ok": False, "error_code": "connector_unavailable",
                                  "error_message": "loki: HTTP 503", "retryable": True}),
    )
    alert = AlertEvent(event_id="evt_1", tenant_id="globex", source_id="am", source_kind=SourceKind.ALERTMANAGER,
                       source_event_id="s1", fingerprint="f1", status=AlertStatus.FIRING, name="QueueBacklog",
                       severity=Severity.HIGH, labels={"alertname": "QueueBacklog", "service": "billing",
                                                       "key": SECRET}, starts_at=T0, received_at=T0)
    return RunMaterial(tenant_id="globex", run_id="run_1", state=RunState.WAITING, environment="prod",
                       incident_id="inc_1", bindings={"service": "billing", "alert_name": "QueueBacklog"},
                       created_at=T0, updated_at=T0, alerts=(alert,) if alerts else (), changes=(),
                       branches=(RecordedBranch(step_id="logs", kind=BranchKind.LOGS, binding=binding, turns=turns),))


def test_calls_become_recordings_and_model_calls_and_secrets_are_masked() -> None:
    bundle = bundle_of(material(), Outcome(run_state="waiting (approval)"), redactor=Redactor())

    assert [(o.port, o.error.code if o.error else "ok") for o in bundle.observations] == [
        ("logs.search", "ok"), ("logs.search", "connector_unavailable")]
    assert [(c.fingerprint, c.usage, c.branch) for c in bundle.model_calls] == [
        ("sha256:a", {"input_tokens": 9, "output_tokens": 3}, "logs")]
    assert (bundle.manifest.tenant_id, bundle.manifest.service, bundle.manifest.source_run_id) == (
        "globex", "billing", "run_1")
    assert SECRET not in bundle.model_dump_json()


def test_a_run_without_a_stored_source_event_is_not_recordable() -> None:
    with pytest.raises(NotRecordableError):
        bundle_of(material(alerts=False), Outcome(), redactor=Redactor())
