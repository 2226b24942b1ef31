"""What triage decides about one alert event, and why. Pure functions over plain facts.

The rules, in precedence order (the first that applies wins)::

    silenced                      -> ignore / silenced       (basis: silence_id)
    older than the incident's     -> ignore / stale
      last state of this alert
    resolved, alert not firing    -> ignore / resolved_without_incident
      in any open incident
    a run is active and the group -> ignore / flapping       (basis: run_id, the noise verdict or the
      is flapping                    follow-ups' flips counted in SQL; the incident still records
                                     the state, the run is not told)
    a run is active for the       -> deliver / run_subscribed (basis: run_id)
      incident (its subscription)
    resolved, no active run       -> ignore / resolved_without_run
    below the severity threshold  -> ignore / below_threshold
    the group is flapping/storming-> ignore / flapping | storm (basis: the noise verdict)
    a run for the group key       -> ignore / cooldown       (basis: last_run_at, cooldown_until)
      inside the cooldown
    otherwise                     -> create_run / new_incident | reinvestigate

A duplicate (same source identity seen before) is known only when its row is refused, so
it has its own function, :func:`duplicate`. The effect on the incident (open one, change it,
only link the alert, or nothing) is decided separately by :func:`incident_effect`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Literal

from pydantic import AwareDatetime

from ira.core.alert import SEVERITY_RANK, AlertStatus, DecisionKind, Severity
from ira.core.model import Model
from ira.core.states import IncidentStatus


class Reason(StrEnum):
    NEW_INCIDENT = "new_incident"
    REINVESTIGATE = "reinvestigate"
    """An open incident without an active run gets an alert at/above the threshold after the cooldown."""
    RUN_SUBSCRIBED = "run_subscribed"
    DUPLICATE = "duplicate"
    STALE = "stale"
    RESOLVED_WITHOUT_INCIDENT = "resolved_without_incident"
    RESOLVED_WITHOUT_RUN = "resolved_without_run"
    BELOW_THRESHOLD = "below_threshold"
    SILENCED = "silenced"
    FLAPPING = "flapping"
    STORM = "storm"
    COOLDOWN = "cooldown"


class Effect(StrEnum):
    """What the event does to its group's incident."""

    NONE = "none"
    """Not part of any incident (silenced, resolved without one, duplicate)."""
    OPEN = "open"
    LINK = "link"
    """Recorded with the incident but changes nothing (stale)."""
    JOIN = "join"
    """Changes the open incident: its version moves."""


@dataclass(frozen=True, slots=True)
class AlertState:
    """The incident's last recorded state of one alert (by fingerprint).

    This and :class:`IncidentState` and :class:`Case` are plain dataclasses, not models: they
    never cross a boundary (built by triage from an alert and records already validated), and a
    model's validation per event was a measurable share of triage's CPU per alert."""

    status: AlertStatus
    at: datetime


@dataclass(frozen=True, slots=True)
class IncidentState:
    """The open incident of the alert's group key, as read in the deciding transaction."""

    incident_id: str
    version: int
    firing_count: int
    alert: AlertState | None = None
    """This alert's last state in the incident; None if it has not been part of it."""
    active_run_id: str | None = None
    """A run for this incident that is not completed, failed or cancelled: the subscription."""


class NoiseVerdict(Model):
    """The windowed noise state of a group key (written by the faust worker; advisory)."""

    kind: Literal["flapping", "storm"]
    until: AwareDatetime
    transitions: int
    alerts: int
    window_seconds: float


class FollowUpFlips(Model):
    """The firing<->resolved flips of an active run's follow-ups in the current window, this
    event included: counted in SQL (``incident_updates``), so flapping is decided for follow-ups
    even when the advisory noise state is off or behind."""

    transitions: int
    since: AwareDatetime
    window_seconds: float


class Policy(Model):
    threshold: Severity = Severity.WARNING
    cooldown: timedelta = timedelta(minutes=30)
    flapping_transitions: int = 6
    """Follow-up flips within the window that make the group flapping (``triage.noise.flapping_transitions``)."""


@dataclass(frozen=True, slots=True)
class Case:
    """Everything one decision may look at."""

    status: AlertStatus
    severity: Severity
    state_at: datetime
    now: datetime
    incident: IncidentState | None = None
    last_run_at: datetime | None = None
    """When the group key last asked for a run (the cooldown's anchor), from SQL."""
    silence_id: str | None = None
    noise: NoiseVerdict | None = None
    flips: FollowUpFlips | None = None
    """Set for a follow-up to an active run."""


@dataclass(frozen=True, slots=True)
class Decision:
    """A rule's verdict about one event (internal: a dataclass, one built per event by the rules
    from values they hold; the stored ``Evaluation`` is the model that crosses boundaries)."""

    decision: DecisionKind
    reason: Reason
    basis: dict[str, object] = field(default_factory=dict)


def _ignore(reason: Reason, **basis: object) -> Decision:
    return Decision(decision=DecisionKind.IGNORE, reason=reason, basis=basis)


def is_stale(last: AlertState | None, status: AlertStatus, at: datetime) -> bool:
    """Older than the last recorded state; at the same instant a resolve beats a firing."""
    if last is None:
        return False
    return at < last.at or (at == last.at and last.status == AlertStatus.RESOLVED and status == AlertStatus.FIRING)


def _silenced(case: Case, policy: Policy) -> Decision | None:
    return _ignore(Reason.SILENCED, silence_id=case.silence_id) if case.silence_id else None


def _stale(case: Case, policy: Policy) -> Decision | None:
    last = case.incident.alert if case.incident else None
    if last is None or not is_stale(last, case.status, case.state_at):
        return None
    return _ignore(Reason.STALE, last_status=last.status.value, last_state_at=last.at.isoformat(),
                   state_at=case.state_at.isoformat())


def _resolved_unknown(case: Case, policy: Policy) -> Decision | None:
    if case.status != AlertStatus.RESOLVED or (case.incident and case.incident.alert):
        return None
    return _ignore(Reason.RESOLVED_WITHOUT_INCIDENT)


def _flapping_follow_up(case: Case, policy: Policy) -> Decision | None:
    """A flapping group's follow-ups are not delivered: each flip would tell the run again what it
    already knows (one run, one draft, flapping decisions). A storm's are: they are news (folded).
    Either signal decides: the flips counted in SQL, or the advisory windowed noise verdict."""
    if case.incident is None or case.incident.active_run_id is None:
        return None
    run_id, flips, noise = case.incident.active_run_id, case.flips, case.noise
    if noise is not None and noise.kind == "flapping" and noise.until > case.now:
        return _ignore(Reason.FLAPPING, run_id=run_id, noise=noise.model_dump(mode="json"))
    if flips is not None and flips.transitions >= policy.flapping_transitions:
        return _ignore(Reason.FLAPPING, run_id=run_id, flips=flips.model_dump(mode="json"),
                       flapping_transitions=policy.flapping_transitions)
    return None


def _deliver(case: Case, policy: Policy) -> Decision | None:
    if case.incident is None or case.incident.active_run_id is None:
        return None
    return Decision(decision=DecisionKind.DELIVER, reason=Reason.RUN_SUBSCRIBED,
                    basis={"run_id": case.incident.active_run_id})


def _resolved_without_run(case: Case, policy: Policy) -> Decision | None:
    return _ignore(Reason.RESOLVED_WITHOUT_RUN) if case.status == AlertStatus.RESOLVED else None


def _below_threshold(case: Case, policy: Policy) -> Decision | None:
    if SEVERITY_RANK[case.severity] >= SEVERITY_RANK[policy.threshold]:
        return None
    return _ignore(Reason.BELOW_THRESHOLD, threshold=policy.threshold.value)


def _noisy(case: Case, policy: Policy) -> Decision | None:
    noise = case.noise
    if noise is None or noise.until <= case.now:
        return None
    reason = Reason.FLAPPING if noise.kind == "flapping" else Reason.STORM
    return _ignore(reason, noise=noise.model_dump(mode="json"))


def _cooldown(case: Case, policy: Policy) -> Decision | None:
    if case.last_run_at is None or case.now >= case.last_run_at + policy.cooldown:
        return None
    return _ignore(Reason.COOLDOWN, last_run_at=case.last_run_at.isoformat(),
                   cooldown_until=(case.last_run_at + policy.cooldown).isoformat())


_RULES: tuple[Callable[[Case, Policy], Decision | None], ...] = (
    _silenced, _stale, _resolved_unknown, _flapping_follow_up, _deliver, _resolved_without_run, _below_threshold,
    _noisy, _cooldown,
)


def decide(case: Case, policy: Policy) -> Decision:
    """The first rule that applies; a run is asked for only when none does."""
    for rule in _RULES:
        decision = rule(case, policy)
        if decision is not None:
            return decision
    reason = Reason.NEW_INCIDENT if case.incident is None else Reason.REINVESTIGATE
    return Decision(decision=DecisionKind.CREATE_RUN, reason=reason, basis={"threshold": policy.threshold.value})


def needs_noise(case: Case) -> bool:
    """A possible run request, or a follow-up to an active run (flapping stops its delivery),
    looks at the noise state; read once per batch for all its groups."""
    return wants_noise(case.status, case.silence_id, case.incident)


def wants_noise(status: AlertStatus, silence_id: str | None, incident: IncidentState | None) -> bool:
    """:func:`needs_noise` of a case with these facts, before it is built (it is built once, with
    its noise verdict, not built again with it)."""
    has_run = incident is not None and incident.active_run_id is not None
    return silence_id is None and (status == AlertStatus.FIRING or has_run)


def duplicate(first_event_id: str) -> Decision:
    """The source identity was applied before (under ``first_event_id``): nothing changes."""
    return _ignore(Reason.DUPLICATE, first_event_id=first_event_id)


def incident_effect(case: Case, decision: Decision) -> Effect:
    """How the event touches its group's incident, given what was decided about it."""
    if decision.reason in (Reason.SILENCED, Reason.RESOLVED_WITHOUT_INCIDENT, Reason.DUPLICATE):
        return Effect.NONE
    if decision.reason == Reason.STALE:
        return Effect.LINK
    return Effect.OPEN if case.incident is None else Effect.JOIN


def firing_delta(last: AlertState | None, status: AlertStatus) -> int:
    """How the incident's count of firing alerts moves when this alert takes ``status``."""
    was_firing = last is not None and last.status == AlertStatus.FIRING
    is_firing = status == AlertStatus.FIRING
    return int(is_firing) - int(was_firing)


def max_severity(current: Severity, new: Severity) -> Severity:
    return new if SEVERITY_RANK[new] > SEVERITY_RANK[current] else current


def status_for(firing_count: int) -> IncidentStatus:
    return IncidentStatus.OPEN if firing_count > 0 else IncidentStatus.RESOLVED
