"""Send a bundle's source events through the normal ingest path, marked as a staging replay.

Each event is re-timed so the incident happens now (which also makes every alert a new
identity), every label set in it gets ``environment=staging`` plus the replay's and the
recording's labels, and it is POSTed to the gateway's endpoint for that source with the
source's own token, exactly as the source would have sent it. A source the target does not
have is replaced by one of the same kind of the replay's tenant; none is an error.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import httpx

from ira.core.replay import RECORDING_LABEL, REPLAY_LABEL, STAGING
from ira.core.timeshift import retime
from ira.infra.bundle.format import SourceEvent
from ira.runtime.settings import Settings
from ira.runtime.settings.model import SourceSettings


class ReplaySendError(Exception):
    """An event could not be sent (no source to send it through, or the gateway refused it)."""

    def __init__(self, message: str, *, retryable: bool = False) -> None:
        super().__init__(message)
        self.retryable = retryable


def mark(value: Any, labels: dict[str, str]) -> Any:
    """``labels`` added to every label set inside ``value`` (alerts, common and group labels)."""
    if isinstance(value, dict):
        return {k: ({**v, **labels} if k.lower().endswith("labels") and isinstance(v, dict) else mark(v, labels))
                for k, v in value.items()}
    if isinstance(value, list):
        return [mark(v, labels) for v in value]
    return value


def staging_payload(event: SourceEvent, *, shift: timedelta, replay_id: str,
                    recording_ref: str | None) -> dict[str, Any]:
    """``recording_ref`` None: no recording label, so the branches ask the configured connectors (live)."""
    labels = {"environment": STAGING, REPLAY_LABEL: replay_id} | ({RECORDING_LABEL: recording_ref}
                                                                   if recording_ref else {})
    payload = mark(retime(event.payload, shift), labels)
    if "service" in payload and "labels" not in payload:  # a change event: its environment is a field
        payload["environment"] = STAGING
        if payload.get("id"):  # its own identity per replay, not production's change deduplicated away
            payload["id"] = f"{payload['id']}:{replay_id}"[:200]
    return dict(payload)


def source_for(settings: Settings, event: SourceEvent, tenant_id: str) -> SourceSettings:
    named = settings.source(event.source_id)
    if named is not None and named.kind == event.kind and named.tenant == tenant_id and named.bearer_token is not None:
        return named
    found = next((s for s in settings.sources if s.kind == event.kind and s.tenant == tenant_id
                  and s.bearer_token is not None), None)
    if found is None:
        raise ReplaySendError(f"no {event.kind} source of tenant {tenant_id} with a bearer token to send "
                              f"event {event.source_id!r} through")
    return found


async def send_event(client: httpx.AsyncClient, settings: Settings, event: SourceEvent, *, tenant_id: str,
                     payload: dict[str, Any]) -> None:
    source = source_for(settings, event, tenant_id)
    assert source.bearer_token is not None
    path = event.path if source.id == event.source_id else f"/v1/sources/{source.kind}/{source.id}"
    try:
        response = await client.post(path, json=payload,
                                     headers={"authorization": f"Bearer {source.bearer_token.get_secret_value()}"})
    except httpx.HTTPError as exc:
        raise ReplaySendError(f"{path}: {exc}", retryable=True) from exc
    if response.status_code >= 300:
        raise ReplaySendError(f"{path} answered {response.status_code}: {response.text[:300]}",
                              retryable=response.status_code in (429, 503))
