"""The ingest use-case: one webhook request in, its events safe, or nothing.

authenticate -> parse and validate -> normalize -> alerts per request (413) -> rate limits
(requests and alerts) + dedupe (one Redis call)
-> make every fresh event safe (:mod:`ira.sources.accept`: the store's outbox, or the
broker's acks) -> 202.

All or nothing per request: the answer is 202 only after every event the request brought is
safe; otherwise the sender gets 503 + Retry-After and no dedupe mark remains for an event
that is not, so its retry is accepted rather than taken for a duplicate. Events made safe
before a failure come again with the same ``event_id`` (ids are deterministic), which the
outbox or triage's inbox drops.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from ira.core.alert import SourceKind
from ira.core.clock import Clock
from ira.core.errors import NotFoundError
from ira.runtime.settings import SourceSettings
from ira.runtime.settings.ingest import IngestSettings
from ira.sources import alertmanager, change, generic, grafana
from ira.sources.accept import Acceptance, Event
from ira.sources.auth import Credentials, authenticate
from ira.sources.context import SourceContext
from ira.sources.dedupe import EdgeDedupe
from ira.sources.ratelimit import AlertLimits, rate_window

Normalizer = Callable[[bytes, SourceContext], Sequence[Event]]
NORMALIZERS: Mapping[SourceKind, Normalizer] = {
    SourceKind.ALERTMANAGER: alertmanager.events,
    SourceKind.GRAFANA: grafana.events,
    SourceKind.GENERIC: generic.events,
    SourceKind.CHANGE: change.events,
}


@dataclass(frozen=True)
class IngestRequest:
    """One POST as the use-case sees it: path parameters, credentials, the raw body."""

    kind: str
    source_id: str
    body: bytes
    credentials: Credentials


@dataclass(frozen=True)
class IngestResult:
    """The 202 body. ``event_ids`` lists every event of the request in payload order, accepted
    or duplicate (a duplicate's id is the id of the copy accepted before it)."""

    accepted: int
    duplicates: int
    event_ids: list[str]

    def to_json(self) -> bytes:
        return json.dumps({"accepted": self.accepted, "duplicates": self.duplicates,
                           "event_ids": self.event_ids}).encode()


class Ingest:
    """Accepts webhook requests for the configured ``sources``; see the module docstring."""

    def __init__(self, *, sources: Sequence[SourceSettings], dedupe: EdgeDedupe, acceptance: Acceptance,
                 clock: Clock, limits: IngestSettings | None = None) -> None:
        self._sources = {source.id: source for source in sources}
        defaults = limits or IngestSettings()
        self._alert_limits = {source.id: AlertLimits.of(source, defaults) for source in sources}
        self._dedupe, self._acceptance, self._clock = dedupe, acceptance, clock

    def source(self, kind: str, source_id: str) -> SourceSettings:
        """The configured source; NotFoundError (404) if unknown or configured as another kind."""
        source = self._sources.get(source_id)
        if source is None or source.kind.value != kind:
            raise NotFoundError(f"no {kind} source {source_id!r}")
        return source

    def is_known(self, source_id: str) -> bool:
        return source_id in self._sources

    async def handle(self, request: IngestRequest) -> IngestResult:
        """Run the whole use-case; raises ira errors the route maps to 4xx/503."""
        source = self.source(request.kind, request.source_id)
        now = self._clock.now()
        authenticate(source, request.credentials, request.body, now=now)
        ctx = SourceContext(tenant_id=source.tenant, source_id=source.id, source_kind=source.kind,
                            received_at=now, default_environment=source.default_environment)
        events = NORMALIZERS[source.kind](request.body, ctx)
        alert_limits = self._alert_limits[source.id]
        alert_limits.check_request(len(events))
        keys = [self._dedupe.key(source.id, event.event_id) for event in events]
        rate = rate_window(source, now, key_prefix=self._dedupe.source_prefix(source.id), alerts=alert_limits)
        accepted = sum(await self._acceptance.accept(rate, events, keys, window=source.dedupe_window))
        return IngestResult(accepted=accepted, duplicates=len(events) - accepted,
                            event_ids=[event.event_id for event in events])
