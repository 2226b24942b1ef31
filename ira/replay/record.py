"""A run as a bundle (``ira record``): its source events, tool calls, runbooks and outcome.

Built from what the store holds (``ira.readmodel.recording``) and redacted whole on the way
out: a bundle leaves the installation (shared, committed to a team's incident library), so no
secret may be in it, whether it came in an alert's labels, a tool's answer, a runbook or a
model's reply.
"""

from __future__ import annotations

from collections.abc import Iterator

from ira.connectors.recorded import RUNBOOKS_PORT, RecordedError, Recording
from ira.connectors.recorded_tools import runbook_files, tool_recording
from ira.core.alert import AlertEvent, ChangeEvent
from ira.core.redact import Redactor
from ira.core.replay import Outcome
from ira.infra.bundle.format import CURRENT_VERSION, BundleDocument, Manifest, ModelCall, SourceEvent
from ira.infra.bundle.sourced import alert_source_event, change_source_event
from ira.readmodel.recording import NotRecordableError, RecordedBranch, RecordedTurn, RunMaterial


def bundle_of(material: RunMaterial, outcome: Outcome, *, redactor: Redactor) -> BundleDocument:
    """The run as a bundle; NotRecordableError when the store holds no source event of it to replay."""
    events = _events(material)
    if not events:
        raise NotRecordableError(f"run {material.run_id}: no alert or change of it is stored, nothing to replay")
    observations = tuple(_recordings(material.branches))
    document = BundleDocument(
        manifest=_manifest(material), events=events, observations=observations,
        model_calls=_model_calls(material.branches),
        runbooks=runbook_files([o.result for o in observations if o.port == RUNBOOKS_PORT and o.result]),
        outcome=outcome)
    return BundleDocument.model_validate(redactor.value(document.model_dump(mode="json")))


def _manifest(material: RunMaterial) -> Manifest:
    bindings = material.bindings
    first = material.branches[0].binding if material.branches else None
    labels = bindings.get("alert_labels") or {}
    return Manifest(
        format_version=CURRENT_VERSION, bundle_id=material.run_id, tenant_id=material.tenant_id,
        environment=material.environment, service=bindings.get("service") or "",
        alert_name=bindings.get("alert_name") or "",
        window_start=first.window_start if first else material.created_at,
        window_end=first.window_end if first else material.created_at,
        description=f"recorded from run {material.run_id}: {bindings.get('title') or ''}".strip(),
        version=labels.get("version"), source_run_id=material.run_id)


def _events(material: RunMaterial) -> tuple[SourceEvent, ...]:
    """Alerts and changes in the order they arrived, offsets from the first arrival."""
    arrivals: list[AlertEvent | ChangeEvent] = sorted([*material.alerts, *material.changes],
                                                      key=lambda item: item.received_at)
    if not arrivals:
        return ()
    start = arrivals[0].received_at
    return tuple(_event(item, offset=round((item.received_at - start).total_seconds(), 3)) for item in arrivals)


def _event(item: AlertEvent | ChangeEvent, *, offset: float) -> SourceEvent:
    if isinstance(item, AlertEvent):
        return alert_source_event(item, offset_seconds=offset)
    return change_source_event(item, offset_seconds=offset)


def _recordings(branches: tuple[RecordedBranch, ...]) -> Iterator[Recording]:
    for branch in branches:
        for turn in branch.turns:
            recording = _recording(turn)
            if recording is not None:
                yield recording


def _recording(turn: RecordedTurn) -> Recording | None:
    decision, observation = turn.decision, turn.observation
    if decision.get("kind") != "tool" or observation is None:
        return None
    error = None
    if not observation.get("ok"):
        error = RecordedError(code=observation.get("error_code") or "error",
                              message=observation.get("error_message") or "",
                              retryable=bool(observation.get("retryable")))
    elif not observation.get("data"):
        return None  # too large to keep: nothing to answer with
    return tool_recording(str(decision.get("tool")), dict(decision.get("args") or {}),
                          result=None if error else observation["data"], error=error,
                          partial=bool(observation.get("partial")))


def _model_calls(branches: tuple[RecordedBranch, ...]) -> tuple[ModelCall, ...]:
    """Every model call an LLM policy made, by request fingerprint (the first reply of equal ones),
    with its reply and usage; the provider errors a request got before that reply (or instead of
    it) ride along in order, so a failed call replays as the same error."""
    found: dict[str, ModelCall] = {}
    for branch in branches:
        for turn in branch.turns:
            fingerprint, reply, error = (turn.decision.get(k) for k in ("_fingerprint", "_reply", "_error"))
            if not isinstance(fingerprint, str):
                continue
            known = found.get(fingerprint)
            if known is not None and known.response is not None:
                continue
            errors = known.errors if known else ()
            if isinstance(reply, dict):
                usage = {k: v for k, v in (reply.get("usage") or {}).items() if isinstance(v, int)}
                found[fingerprint] = ModelCall(fingerprint=fingerprint, response=reply, usage=usage, errors=errors,
                                               branch=branch.kind.value)
            elif isinstance(error, dict):
                failure = RecordedError(code=str(error.get("code") or "error"), message=str(error.get("message") or ""),
                                        retryable=bool(error.get("retryable")))
                found[fingerprint] = ModelCall(fingerprint=fingerprint, errors=(*errors, failure),
                                               branch=branch.kind.value)
    return tuple(found.values())
