"""Synthesis across branches: candidate causes linked to evidence of several branches, in time.

The branches hand back evidence with structured ``data`` (metric shifts with onset, changes,
log templates with the cause class and entity they name, runbooks with their causes). Here:

* **Symptoms** are the service's own latency and errors; their onset is when the incident began.
* **Candidates** are what could cause them: a deploy or config change, a saturated resource of
  the service, a degraded declared dependency, a cause named by new or rising log lines.
* **Links** merge candidates that are one story: log lines naming a dependency join that
  dependency's metrics; "no space left" joins the disk; OOM lines join memory; a change joins
  the service's own saturated resources and new errors that started after it, when it came
  shortly before the onset or its description names that resource (a pool size change hours
  earlier). A change never explains a dependency's own metrics.
* **Confidence** comes from the evidence: independent branches supporting, time order (before
  or at the onset supports; starting after the symptoms contradicts), a runbook cause whose
  check the data confirms. Two unlinked candidates close in confidence stay side by side,
  neither confirmed. With no candidate and no abnormal symptom, the finding is that nothing
  moved (a flapping alert), stated with the stable signals as evidence.

Pure: no I/O, no clock. Every statement names only what its cited evidence names.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from ira.core.investigation import Evidence

SYMPTOMS = frozenset({"latency", "latency_p99", "errors"})
GROUPS = {"memory": "memory", "restarts": "memory", "oom": "memory", "cpu": "cpu", "throttling": "cpu",
          "disk": "disk", "fds": "fds", "pool": "pool", "connections": "pool"}
LOG_GROUPS = {"memory": "memory", "disk": "disk", "pool": "pool"}
"""Log causes that are about the service's own resources (the rest name a dependency or host)."""
WORDS = {"memory": ("memory", "heap", "xmx", "gc", "oom", "leak"), "cpu": ("cpu", "thread", "worker", "traffic"),
         "disk": ("disk", "volume", "space", "retention", "wal"),
         "pool": ("pool", "connection", "max_size", "hikari", "maximumpoolsize"),
         "fds": ("file descriptor", "ulimit", "nofile")}
CAUSE_WORDS = {"timeout": "calls to it time out", "unreachable": "it is unreachable or drops connections",
               "tls": "TLS to it fails on its certificate", "dns": "DNS resolution of it fails",
               "crash": "new errors", "memory": "OOM or memory pressure lines", "disk": "no space left",
               "pool": "pool timeouts"}
DEPLOY_LEAD = timedelta(minutes=30)
SLACK = timedelta(minutes=2)
CONFLICT_GAP = 0.2
CONFLICT_CAP = 0.55
_WORD = re.compile(r"[a-z0-9_]+")


@dataclass(frozen=True)
class Item:
    evidence: Evidence
    branch: str

    @property
    def data(self) -> Mapping[str, Any]:
        return self.evidence.data

    @property
    def id(self) -> str:
        return self.evidence.evidence_id


@dataclass
class Candidate:
    key: str
    kind: str
    """``change``, ``resource``, ``dependency``, ``log``, ``symptom`` or ``noise``."""
    subject: str
    """The service, dependency or change it is about (named in its cited evidence)."""
    causes: list[Item] = field(default_factory=list)
    effects: list[Item] = field(default_factory=list)
    onset: datetime | None = None
    confidence: float = 0.0
    unverified: list[str] = field(default_factory=list)
    runbooks: list[str] = field(default_factory=list)
    absorbed: list[Candidate] = field(default_factory=list)
    statement: str = ""

    @property
    def evidence_ids(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(i.id for i in (*self.causes, *self.effects)))

    @property
    def branches(self) -> set[str]:
        return {i.branch for i in self.causes}


@dataclass(frozen=True)
class Synthesis:
    candidates: tuple[Candidate, ...]
    notes: tuple[str, ...]
    used: frozenset[str]
    """Evidence ids some candidate cites (branch hypotheses citing these are subsumed)."""


def parse_time(value: object) -> datetime | None:
    if not isinstance(value, str) or not value or value == "?":
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def synthesize(items: Sequence[Item], *, service: str | None, alert_started_at: datetime | None) -> Synthesis:
    own = service or ""
    symptoms = [i for i in items if _metric(i) and i.data.get("service") == own and i.data.get("family") in SYMPTOMS]
    moved = [i for i in symptoms if i.data.get("abnormal")]
    onset = min((t for t in (parse_time(i.data.get("onset")) for i in moved) if t), default=alert_started_at)
    found = _resources(items, own) + _dependencies(items, own) + _logs(items, own)
    found = _link_logs(found)
    found = _changes(items, own, found, onset=onset)
    notes = _runbooks(items, found)
    negative = [i for i in items if i.data.get("kind") == "none"]
    for c in found:
        c.effects += moved
        if c.kind != "change":
            c.effects += negative
        _score(c, onset=onset)
    if not found:
        found = [_nothing(symptoms, moved, negative, own)]
    ranked = sorted(found, key=lambda c: (-c.confidence, c.key))
    notes += _conflict(ranked)
    for c in ranked:
        c.statement = c.statement or _phrase(c, own, onset)
    used = frozenset(e for c in ranked for e in c.evidence_ids)
    return Synthesis(candidates=tuple(ranked), notes=tuple(notes), used=used)


def _metric(item: Item) -> bool:
    return "family" in item.data and "service" in item.data


def _resources(items: Sequence[Item], own: str) -> list[Candidate]:
    groups: dict[str, Candidate] = {}
    for i in items:
        group = GROUPS.get(str(i.data.get("family")))
        if not _metric(i) or i.data.get("service") != own or group is None or not i.data.get("abnormal"):
            continue
        c = groups.setdefault(group, Candidate(key=f"resource:{group}", kind="resource", subject=group))
        c.causes.append(i)
    strong = {g: c for g, c in groups.items()
              if any(i.data.get("saturated") or i.data.get("unit") == "count" for i in c.causes)}
    traffic = [i for i in items if _metric(i) and i.data.get("family") == "traffic" and i.data.get("abnormal")
               and i.data.get("service") == own]
    if "cpu" in strong:
        strong["cpu"].effects += traffic
    return list(strong.values())


def _dependencies(items: Sequence[Item], own: str) -> list[Candidate]:
    groups: dict[str, Candidate] = {}
    for i in items:
        dep = str(i.data.get("service"))
        if _metric(i) and dep != own and i.data.get("abnormal"):
            groups.setdefault(dep, Candidate(key=f"dependency:{dep}", kind="dependency", subject=dep)).causes.append(i)
    return list(groups.values())


def _logs(items: Sequence[Item], own: str) -> list[Candidate]:
    groups: dict[str, Candidate] = {}
    for i in items:
        cause = i.data.get("cause")
        if not cause:
            continue
        entity = str(i.data.get("entity") or "")
        key = f"log:{cause}:{entity}"
        groups.setdefault(key, Candidate(key=key, kind="log", subject=entity or own)).causes.append(i)
    return list(groups.values())


def _link_logs(found: list[Candidate]) -> list[Candidate]:
    """Log candidates join the resource or dependency they name."""
    kept = []
    for c in found:
        target = None
        if c.kind == "log":
            cause = str(c.causes[0].data.get("cause"))
            target = next((r for r in found if r.kind == "resource" and LOG_GROUPS.get(cause) == r.subject), None)
            target = target or next((d for d in found if d.kind == "dependency" and _names(c.subject, d.subject)), None)
        if target is None:
            kept.append(c)
        else:
            target.causes += c.causes
    return kept


def _names(entity: str, dependency: str) -> bool:
    return bool(entity) and (dependency.lower() in entity.lower() or entity.lower().split(".")[0] == dependency.lower())


def _changes(items: Sequence[Item], own: str, found: list[Candidate], *, onset: datetime | None) -> list[Candidate]:
    """A change that came shortly before the onset, or that names a resource that saturated, leads
    the story: the service's own resources and new errors after it become its mechanism."""
    changes = [i for i in items if i.data.get("kind") in ("deploy", "config change") and i.data.get("service") == own]
    versions = [i for i in items if len(i.data.get("versions") or ()) > 1]  # type: ignore[arg-type]
    for change in sorted(changes, key=lambda i: str(i.data.get("at")), reverse=True):
        at = parse_time(change.data.get("at"))
        if at is None or onset is None or at > onset + timedelta(minutes=1):
            continue
        near = onset - DEPLOY_LEAD <= at
        text = set(_WORD.findall(str(change.data.get("description") or "").lower()))
        named = [c for c in found if c.kind in ("resource", "log") and any(w in text for w in WORDS.get(
            c.subject if c.kind == "resource" else LOG_GROUPS.get(str(c.causes[0].data.get("cause")), ""), ()))]
        if not near and not named:
            continue
        mechanism = [c for c in found if c.kind == "resource" or (c.kind == "log" and (
            LOG_GROUPS.get(str(c.causes[0].data.get("cause"))) or c.causes[0].data.get("cause") == "crash"))]
        mechanism = [c for c in mechanism if _starts_after(c, at)] if near else named
        lead = Candidate(key=f"change:{change.id}", kind="change", subject=str(change.data.get("version") or ""),
                         causes=[change] + (versions if change.data.get("kind") == "deploy" else []), onset=at)
        lead.unverified.append("the change precedes the onset in time; causation was not tested")
        if not near:
            hours = (onset - at).total_seconds() / 3600
            lead.unverified.append(f"the change is {hours:.1f} h before the onset; linked because it names "
                                   f"{', '.join(sorted({m.subject for m in named}))}")
        for m in mechanism:
            lead.absorbed.append(m)
            lead.effects += m.causes
        return [lead] + [c for c in found if c not in mechanism]
    return found


def _starts_after(c: Candidate, at: datetime) -> bool:
    times = [t for t in (_onset_of(i) for i in c.causes) if t]
    return bool(times) and min(times) >= at - timedelta(minutes=1)


def _onset_of(item: Item) -> datetime | None:
    """When it started: a metric's or log template's ``onset`` (None: unknown, e.g. a failure that
    recurs through the baseline), else a change's time."""
    for key in ("onset", "at"):
        if key in item.data:
            return parse_time(item.data.get(key))
    return None


def _runbooks(items: Sequence[Item], found: list[Candidate]) -> list[str]:
    """A runbook cause is promoted only when a candidate the data supports matches it."""
    notes = []
    for book in (i for i in items if i.data.get("causes") and i.data.get("applies") is not False):
        unconfirmed = []
        for cause in book.data["causes"]:  # type: ignore[attr-defined]
            match = next((c for c in found if _matches(str(cause).lower(), c)), None)
            if match is None:
                unconfirmed.append(str(cause))
            else:
                match.effects.append(book)
                match.runbooks.append(f"runbook {book.data.get('runbook_id')} lists it: {cause}")
        if unconfirmed:
            notes.append(f"runbook {book.data.get('runbook_id')} lists causes the data did not confirm: "
                         + "; ".join(unconfirmed))
    return notes


def _matches(text: str, c: Candidate) -> bool:
    words = set(_WORD.findall(text))
    subjects = [c.subject, *(a.subject for a in c.absorbed)]
    if c.kind == "change" and words & {"deploy", "release", "change", "config", "configuration"}:
        return True
    return any(s and (s.lower() in text or any(w in words for w in WORDS.get(s, ()))) for s in subjects)


def _score(c: Candidate, *, onset: datetime | None) -> None:
    confidence = 0.35 + 0.15 * (len(c.branches) - 1)
    if any(i.data.get("saturated") or i.data.get("cause") or i.data.get("unit") == "count" for i in c.causes):
        confidence += 0.1
    c.onset = c.onset or min((t for t in (_onset_of(i) for i in c.causes) if t), default=None)
    if c.kind == "change":
        confidence += 0.15 if not any("h before the onset" in u for u in c.unverified) else 0.05
        confidence += 0.1 if c.absorbed else 0.0
    elif c.onset is not None and onset is not None and c.onset > onset + SLACK:
        confidence -= 0.15
        c.unverified.append("it started after the symptoms: it may be a consequence, not the cause")
    elif c.onset is not None and onset is not None:
        confidence += 0.1
    confidence += 0.05 if c.runbooks else 0.0
    c.confidence = round(min(max(confidence, 0.05), 0.85), 2)


def _conflict(ranked: list[Candidate]) -> list[str]:
    if len(ranked) < 2 or ranked[0].kind == "noise":
        return []
    a, b = ranked[0], ranked[1]
    if a.confidence - b.confidence > CONFLICT_GAP or b.confidence < 0.4:
        return []
    for c in (a, b):
        c.confidence = min(c.confidence, CONFLICT_CAP)
        c.unverified.append("conflicting evidence: another cause fits the data as well; neither is confirmed")
    return [f"conflicting causes, neither confirmed: {a.key} and {b.key} (compare their onsets and evidence)"]


def _nothing(symptoms: list[Item], moved: list[Item], negative: list[Item], own: str) -> Candidate:
    if moved:
        c = Candidate(key="symptom", kind="symptom", subject=own, effects=moved + negative, confidence=0.3)
        c.unverified.append("no change, saturated resource, degraded dependency or log line naming a cause was found")
        return c
    c = Candidate(key="noise", kind="noise", subject=own, effects=symptoms + negative, confidence=0.5)
    c.unverified.append("a fault outside the observed signals cannot be excluded")
    return c


def _phrase(c: Candidate, own: str, onset: datetime | None) -> str:
    return {"change": _phrase_change, "resource": _phrase_resource, "dependency": _phrase_dependency,
            "log": _phrase_log, "symptom": _phrase_symptom, "noise": _phrase_noise}[c.kind](c, own, onset)


def _peaks(items: Sequence[Item], limit: int = 3) -> str:
    shown = [f"{i.data.get('label')} {i.data.get('peak_text')}" for i in items if _metric(i)][:limit]
    return ", ".join(shown)


def _phrase_change(c: Candidate, own: str, onset: datetime | None) -> str:
    change = c.causes[0].data
    what = f"{change.get('kind')} of {own}" + (f" {change.get('version')}" if change.get("version") else "")
    desc = f" ({change.get('description')})" if change.get("kind") == "config change" and change.get("description") \
        else ""
    gap = _gap(c.onset, onset)
    then = [_peaks([i for m in c.absorbed for i in m.causes])] if c.absorbed else []
    logs = sorted({str(i.data.get("cause")) for m in c.absorbed for i in m.causes if i.data.get("cause")})
    then += [f"log lines: {', '.join(CAUSE_WORDS.get(x, x) for x in logs)}"] if logs else []
    mechanism = f"; then {'; '.join(t for t in then if t)}" if any(then) else ""
    return f"The {what}{desc} at {change.get('at')}{gap} is the likely cause{mechanism}"


def _gap(at: datetime | None, onset: datetime | None) -> str:
    if at is None or onset is None:
        return ""
    minutes = (onset - at).total_seconds() / 60
    span = f"{minutes / 60:.1f} h" if minutes >= 90 else f"{minutes:.0f} min"
    return f", {span} before the onset at {onset.strftime('%Y-%m-%dT%H:%M:%SZ')}"


def _phrase_resource(c: Candidate, own: str, onset: datetime | None) -> str:
    name = {"memory": f"{own} is running out of memory", "cpu": f"CPU saturation of {own}",
            "disk": f"the disk of {own} is full", "fds": f"{own} runs out of file descriptors",
            "pool": f"connection pool exhaustion in {own}"}.get(c.subject, f"{c.subject} of {own} is saturated")
    logs = sorted({str(i.data.get("cause")) for i in c.causes if i.data.get("cause")})
    lines = f"; log lines: {', '.join(CAUSE_WORDS.get(x, x) for x in logs)}" if logs else ""
    traffic = [i for i in c.effects if i.data.get("family") == "traffic"]
    load = f", under a rise of {_peaks(traffic, 1)}" if traffic else ""
    return f"{name}: {_peaks(c.causes)}{_since(c)}{load}{lines}"


def _since(c: Candidate) -> str:
    return f" (from {c.onset.strftime('%Y-%m-%dT%H:%M:%SZ')})" if c.onset else ""


def _phrase_dependency(c: Candidate, own: str, onset: datetime | None) -> str:
    logs = sorted({str(i.data.get("cause")) for i in c.causes if i.data.get("cause")})
    lines = f"; {own} logs name it: {', '.join(CAUSE_WORDS.get(x, x) for x in logs)}" if logs else ""
    return f"dependency {c.subject} of {own} is degraded: {_peaks(c.causes)}{_since(c)}{lines}"


def _phrase_log(c: Candidate, own: str, onset: datetime | None) -> str:
    cause = str(c.causes[0].data.get("cause"))
    lines = sum(int(str(i.data.get("window_count") or 0)) for i in c.causes)
    subject = c.subject if c.subject and c.subject != own else f"a dependency of {own}"
    text = {"timeout": f"{subject} is timing out: calls from {own} exceed their deadline",
            "unreachable": f"{subject} is unreachable or drops connections from {own}",
            "tls": f"TLS to {subject} fails: certificate problem (expired or not valid)",
            "dns": f"DNS resolution of {subject} fails (lookup errors)",
            "crash": f"new errors in {own}: {c.subject if c.subject != own else 'not seen in the baseline'}",
            "memory": f"{own} is running out of memory", "disk": f"the disk of {own} is full",
            "pool": f"connection pool exhaustion in {own}"}.get(cause, f"{cause} in {own}")
    return f"{text} ({lines} log lines{_since(c)})"


def _phrase_symptom(c: Candidate, own: str, onset: datetime | None) -> str:
    return (f"{own}: {_peaks(c.effects)} without an identified cause (no change, saturated resource, degraded "
            "dependency or log line naming a cause found)")


def _phrase_noise(c: Candidate, own: str, onset: datetime | None) -> str:
    stable = ", ".join(str(i.data.get("label")) for i in c.effects if _metric(i)) or "its signals"
    return (f"no abnormal shift found: {stable} of {own} stayed within the baseline; the alert is likely "
            "flapping around its threshold (noise)")
