"""``POST /slack/interactions``: Approve / Reject clicks from Slack, decided like the API's.

Order of work, each step refusing what it cannot trust:

1. the signature over the raw body and the timestamp's age (401 before anything is parsed);
2. the ``block_actions`` payload and the button's value (400 if malformed);
3. the Slack user mapped to a principal and roles (``slack.approvers``); an unmapped user is
   decided as a principal without roles, so the refusal lands on the run's log like any other;
4. the decision through :func:`record_decision`, idempotent on the Slack action id; a click
   on an expired approval expires it now (what its timer would do a little later);
5. the 200 answer (Slack wants one within 3 s) — then, after it, the clicker is told
   ephemerally why a click was refused.

The message itself is updated by the notifier: every decision (from Slack, the API or the
dashboard) commits an ``approval_decided`` notification, and the notifier re-renders the
message from the read model. The route lives with the approval API because a click *is* a
decision command; the Slack client (``ira.connectors.slack``) is shared with the notifier,
and neither service imports the other.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine, Mapping
from typing import Any

from fastapi import APIRouter, Request, Response
from prometheus_client import Counter

from ira.connectors.slack.errors import SlackRejectedError, SlackUnavailableError
from ira.connectors.slack.interactions import (
    APPROVE,
    REJECT,
    ActionValue,
    BlockActions,
    InteractionVerifier,
    parse_block_actions,
)
from ira.coordinator import gate
from ira.coordinator.approval import Choice, Judgement, RefusalCode, Verdict
from ira.coordinator.decisions import record_decision
from ira.coordinator.deps import Deps
from ira.core.errors import ConcurrentUpdateError, InvalidMessageError, NotFoundError
from ira.core.ports import ChatPoster
from ira.runtime.http import error_response
from ira.runtime.settings import Settings
from ira.runtime.telemetry import Metrics

log = logging.getLogger(__name__)
MAX_BODY = 256 * 1024
"""Slack's interaction payloads are a few KiB (the message's blocks included)."""
UNMAPPED = "slack:"
"""Principal name prefix of a Slack user missing from ``slack.approvers`` (it holds no role)."""


class SlackInteractions:
    """The route's collaborators and the follow-up work it starts after answering."""

    def __init__(self, settings: Settings, deps: Deps, *, poster: ChatPoster, verifier: InteractionVerifier,
                 metrics: Metrics) -> None:
        self._settings, self._deps, self._poster, self._verifier = settings, deps, poster, verifier
        self._outcomes = Counter("ira_slack_interactions", "Slack interactions by outcome", ["outcome"],
                                 registry=metrics.registry)
        self.follow_ups: set[asyncio.Task[None]] = set()

    async def handle(self, body: bytes, headers: Mapping[str, str]) -> Response:
        if len(body) > MAX_BODY:
            return self._refuse(413, "too_large", f"an interaction is at most {MAX_BODY} bytes")
        if not self._verifier.is_valid(body, headers):
            return self._refuse(401, "invalid_signature", "bad or stale Slack signature")
        try:
            payload = parse_block_actions(body)
            action = payload.action
            value = ActionValue.decode(action.value) if action.action_id in (APPROVE, REJECT) else None
        except InvalidMessageError as exc:
            return self._refuse(400, exc.code, str(exc))
        if value is None:  # a link button (Open run): nothing to decide
            return Response(status_code=200)
        judgement = await self._decide(payload, value)
        self._outcomes.labels(judgement.code or judgement.verdict.value).inc()
        if judgement.code == RefusalCode.EXPIRED:
            await self._expire(value.approval_id, tenant=self._tenant_of(payload.user.id))
        if judgement.verdict == Verdict.REFUSE and payload.container.channel_id:
            self._later(self._poster.tell(payload.container.channel_id, payload.user.id,
                                          text=self._why(payload, judgement)))
        return Response(status_code=200)

    async def _decide(self, payload: BlockActions, value: ActionValue) -> Judgement:
        approver = self._settings.slack_approver(payload.user.id)
        tenant = self._tenant_of(payload.user.id)
        principal = approver.principal if approver else UNMAPPED + payload.user.id
        roles = frozenset(r.value for r in approver.roles) if approver else frozenset[str]()
        key = f"{value.approval_id}:{payload.user.id}:{payload.action.action_ts}"
        try:
            _, judgement = await record_decision(
                self._deps, tenant_id=tenant, approval_id=value.approval_id, choice=Choice(payload.action.action_id),
                principal=principal, roles=roles, action_key=key)
        except NotFoundError:
            return Judgement.refuse(RefusalCode.NOT_WAITING, "no such approval")
        return judgement

    async def _expire(self, approval_id: str, *, tenant: str) -> None:
        """The same expiry as the approval's timer: the run ends, the notifier updates the message."""
        try:
            async with self._deps.db.transaction() as conn:
                await gate.expire(conn, tenant, approval_id, config=self._deps.config, at=self._deps.clock.now())
        except ConcurrentUpdateError:
            log.info("approval %s was expired concurrently (its timer)", approval_id)

    def _why(self, payload: BlockActions, judgement: Judgement) -> str:
        if self._settings.slack_approver(payload.user.id) is None:
            return (f"Your Slack user {payload.user.id} is not mapped to an ira principal (`slack.approvers`), "
                    "so your click was not counted.")
        return f"Not recorded ({judgement.code}): {judgement.message}"

    def _tenant_of(self, slack_user: str) -> str:
        approver = self._settings.slack_approver(slack_user)
        return (approver.tenant if approver else None) or self._settings.tenant

    def _later(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(self._guarded(work))
        self.follow_ups.add(task)
        task.add_done_callback(self.follow_ups.discard)

    async def _guarded(self, work: Coroutine[Any, Any, None]) -> None:
        try:
            await work
        except (SlackRejectedError, SlackUnavailableError, NotFoundError) as exc:
            log.warning("slack interaction follow-up failed: %s", exc)

    def _refuse(self, status: int, code: str, message: str) -> Response:
        log.warning("slack interaction refused: %s", code)
        self._outcomes.labels(code).inc()
        return error_response(status, code, message)


def build_slack_router(interactions: SlackInteractions) -> APIRouter:
    router = APIRouter(tags=["slack"])

    @router.post("/slack/interactions", include_in_schema=False)
    async def slack_interactions(request: Request) -> Response:
        """Slack's signed form post; verified on the raw body before anything is parsed."""
        return await interactions.handle(await request.body(), request.headers)

    return router
