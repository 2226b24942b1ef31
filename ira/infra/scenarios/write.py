"""Write a scenario as a bundle, in the format ``ira.infra.demo.bundle`` and the recorded
connectors read: ``bundle.json``, ``events.json``, ``observations.jsonl``, ``runbooks/``,
``expectations.json``, plus ``config.json`` (the service catalog's declared dependencies).

``observations.jsonl`` is what a recording of the scenario's world would hold: the answer of
its Prometheus to the discovery query and to every query an investigator may ask of a metric
the world has (the configured RED queries, the USE catalog; a configured query the world has
no metric for answers empty series, as Prometheus would), its log store to warning-and-worse
searches over the baseline, the incident part and the whole window, and its change store to
the window and a 24 h look-back.
"""

from __future__ import annotations

import json
import random
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from ira.agents.policies.signals import CATALOG, DISCOVERY, Signal
from ira.connectors.recorded import BundleInfo, Recording, log_key, query_key
from ira.core.signals import (
    Change,
    ChangeQuery,
    ChangeResult,
    LogLevel,
    LogLine,
    LogQuery,
    LogResult,
    MetricResult,
    MetricSeries,
)
from ira.infra.scenarios.world import STEP, Scenario
from ira.runtime.settings.agents import MetricQueries

TENANT, ENVIRONMENT = "demo", "prod"
RED = ("latency_p95", "latency_p99", "error_ratio", "version")
HISTOGRAM = "http_request_duration_seconds_bucket"
RED_METRICS = {"latency_p95": HISTOGRAM, "latency_p99": HISTOGRAM, "error_ratio": "http_requests_total",
               "version": "app_version_info"}
LOOKBACK = timedelta(hours=6)
"""The default change look-back (coordinator.change_lookback): what a recording with defaults holds."""
SPLIT_LEAD = timedelta(minutes=5)
LOG_LIMIT = 1000


def window(s: Scenario) -> tuple[datetime, datetime]:
    return s.alert_at - s.window_before, s.alert_at + timedelta(minutes=2)


def write_bundle(s: Scenario, directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    start, end = window(s)
    info = BundleInfo(bundle_id=s.bundle_id, tenant_id=TENANT, environment=ENVIRONMENT, service=s.service,
                      alert_name=s.alert_name, window_start=start, window_end=end, description=s.description,
                      version=s.version)
    (directory / "bundle.json").write_text(info.model_dump_json(indent=2) + "\n", encoding="utf-8")
    _json(directory / "events.json", events(s))
    _json(directory / "expectations.json", expectations(s))
    _json(directory / "config.json", {"dependencies": {} if s.dependencies_in_alert else
                                      {s.service: list(s.dependencies)}})
    rng = random.Random(s.bundle_id)
    rows = [*_metrics(s, rng), *_logs(s, rng), *_changes(s)]
    (directory / "observations.jsonl").write_text("".join(r.model_dump_json() + "\n" for r in rows), encoding="utf-8")
    books = directory / "runbooks"
    books.mkdir(exist_ok=True)
    for name, text in s.runbooks.items():
        (books / name).write_text(text, encoding="utf-8")


def _json(path: Path, value: Any) -> None:
    path.write_text(json.dumps(value, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def alert(s: Scenario) -> dict[str, Any]:
    labels = {"alertname": s.alert_name, "service": s.service, "severity": s.severity, "team": s.team}
    if s.version:
        labels["version"] = s.version
    annotations = {"summary": s.summary, "description": s.description,
                   "runbook_url": f"https://runbooks.example.internal/{s.service}/{s.alert_name}"}
    if s.dependencies_in_alert:
        annotations["depends_on"] = ",".join(s.dependencies)
    return {"status": "firing", "labels": labels, "annotations": annotations,
            "startsAt": _iso(s.alert_at), "endsAt": "0001-01-01T00:00:00Z",
            "generatorURL": "http://prometheus.example.internal/graph",
            "fingerprint": f"{random.Random(s.bundle_id).getrandbits(64):016x}"}


def events(s: Scenario) -> list[dict[str, Any]]:
    start, _ = window(s)
    found = [{"offset_seconds": max((c.minute * 60 + s.window_before.total_seconds()), 0.0), "kind": "change",
              "source_id": "changes", "path": "/v1/sources/change/changes",
              "payload": _change_payload(s, c, i)} for i, c in enumerate(s.changes)]
    found.append({"offset_seconds": s.window_before.total_seconds(), "kind": "alertmanager", "source_id": "am",
                  "path": "/v1/sources/alertmanager/am",
                  "payload": {"receiver": "ira", "status": "firing", "alerts": [alert(s)],
                              "groupLabels": {"alertname": s.alert_name}, "commonLabels": alert(s)["labels"],
                              "commonAnnotations": {}, "externalURL": "http://alertmanager.example.internal",
                              "version": "4", "groupKey": f"{{}}:{{alertname=\"{s.alert_name}\"}}"}})
    return sorted(found, key=lambda e: e["offset_seconds"])


def _change_payload(s: Scenario, c: Any, index: int) -> dict[str, Any]:
    return {"service": c.service or s.service, "version": c.version, "commit": c.commit, "actor": c.actor,
            "at": _iso(s.alert_at + timedelta(minutes=c.minute)), "id": f"chg-{s.bundle_id}-{index}",
            "description": c.description}


def expectations(s: Scenario) -> dict[str, Any]:
    e = s.expected
    return {"alert": s.alert_name, "service": s.service, "version": s.version, "branches": {},
            "scenario": {"kind": s.kind, "cause": list(e.cause), "cite": list(e.cite), "outcome": e.outcome,
                         "rival": list(e.rival), "injected": list(s.injected),
                         "dependencies": list(s.dependencies)}}


def _signal(key: str) -> Signal | None:
    return next((sig for sig in CATALOG if f"{sig.family}:{sig.needs[0]}" == key or sig.family == key), None)


def _metrics(s: Scenario, rng: random.Random) -> list[Recording]:
    start, end = window(s)
    rows: list[Recording] = []
    for svc in (s.service, *s.dependencies):
        names: set[str] = set()
        recorded: dict[str, Recording] = {}
        for key in sorted(k for (owner, k) in s.metrics if owner == svc):
            curve, sig = s.metrics[(svc, key)], _signal(key)
            query = sig.render(svc, "60s") if sig else _red(key, svc)
            names |= set(sig.needs) if sig else {RED_METRICS[key]}
            series = MetricSeries(labels={}, points=curve.points(rng, start, end, s.alert_at))
            recorded[query] = _range(query, start, end, (series,))
        if svc == s.service:
            names |= set(s.extra_metrics)
        if svc == s.service and s.versions:
            names.add("app_version_info")
            recorded[_red("version", svc)] = _range(_red("version", svc), start, end, _versions(s, start, end))
        for key in (*RED, "saturation"):  # what the configured queries find when the world lacks the metric
            recorded.setdefault(_red(key, svc), _range(_red(key, svc), start, end, ()))
        rows += recorded.values()
        rows.append(_discovery(svc, names | {"up"}, end))
    return rows


def _discovery(service: str, names: set[str], at: datetime) -> Recording:
    found = tuple(MetricSeries(labels={"__name__": n}, points=((at, 1.0),)) for n in sorted(names))
    query = DISCOVERY.replace("$service", service)
    return Recording(port="metrics.query", key=query_key(query), start=at, end=at, request={"query": query},
                     result=MetricResult(query=query, start=at, end=at, series=found).model_dump(mode="json"))


def _red(key: str, service: str) -> str:
    return str(getattr(MetricQueries(), key)).replace("$service", service).replace("$rate", "60s")


def _versions(s: Scenario, start: datetime, end: datetime) -> tuple[MetricSeries, ...]:
    found = []
    ordered = sorted(s.versions, key=lambda v: v[1])
    for i, (version, since) in enumerate(ordered):
        first = max(start, s.alert_at + timedelta(minutes=since))
        last = end if i + 1 == len(ordered) else s.alert_at + timedelta(minutes=ordered[i + 1][1] + 1)
        points, at = [], first
        while at <= min(last, end):
            points.append((at, 1.0))
            at += STEP
        found.append(MetricSeries(labels={"version": version}, points=tuple(points)))
    return tuple(found)


def _range(query: str, start: datetime, end: datetime, series: tuple[MetricSeries, ...]) -> Recording:
    result = MetricResult(query=query, start=start, end=end, step_seconds=STEP.total_seconds(), series=series)
    return Recording(port="metrics.query_range", key=query_key(query), start=start, end=end,
                     request={"query": query, "step_seconds": STEP.total_seconds()},
                     result=result.model_dump(mode="json"))


def _logs(s: Scenario, rng: random.Random) -> list[Recording]:
    start, end = window(s)
    lines = sorted((line for stream in s.logs for line in stream.lines(rng, s.alert_at, start, end)),
                   key=lambda x: x[0], reverse=True)
    split = s.alert_at - min(SPLIT_LEAD, (end - start) / 4)
    rows = []
    for lo, hi in ((start, split), (split, end), (start, end)):
        chosen = [LogLine(at=at, level=LogLevel(level), message=msg, service=s.service)
                  for at, level, msg in lines if lo <= at < hi and level in ("warning", "error", "critical")]
        query = LogQuery(service=s.service, start=lo, end=hi, min_level=LogLevel.WARNING, limit=LOG_LIMIT)
        result = LogResult(query=query, lines=tuple(chosen[:LOG_LIMIT]), total_matched=len(chosen),
                           partial=len(chosen) > LOG_LIMIT)
        rows.append(Recording(port="logs.search", key=log_key(query), start=lo, end=hi,
                              request=query.model_dump(mode="json"), result=result.model_dump(mode="json")))
    return rows


def _changes(s: Scenario) -> list[Recording]:
    start, end = window(s)
    rows = []
    for svc in (s.service, *s.dependencies):
        for lo in (start, end - LOOKBACK):
            mine = [(s.alert_at + timedelta(minutes=c.minute), c) for c in s.changes if (c.service or s.service) == svc]
            found = tuple(sorted((Change(service=svc, environment=ENVIRONMENT, at=at, version=c.version,
                                         commit=c.commit, actor=c.actor, description=c.description)
                                  for at, c in mine if lo <= at <= end), key=lambda c: c.at, reverse=True))
            query = ChangeQuery(tenant_id=TENANT, service=svc, environment=ENVIRONMENT, start=lo, end=end)
            rows.append(Recording(port="changes.list", key=svc, start=lo, end=end,
                                  request=query.model_dump(mode="json"),
                                  result=ChangeResult(query=query, changes=found).model_dump(mode="json")))
    return rows


def _iso(at: datetime) -> str:
    return at.isoformat().replace("+00:00", "Z")
