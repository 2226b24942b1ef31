"""``POST /slack/interactions``: Approve / Reject clicks from Slack, decided like the API's.

Order of work, each step refusing what it cannot trust:

1. the signature over the raw body and the timestamp's age (401 before anything is parsed);
2. the ``block_actions`` payload and the button's value (400 if malformed);
3. the Slack user mapped to a principal and roles (``slack.approvers``); an unmapped user is
   decided as a principal without roles, so the refusal lands on the run's log like any other;
4. the decision through :func:`record_decision`, idempotent on the Slack action id, bound to
   the draft hash and incident version the button carries (a button of an older draft, or a
   value that names a draft the approval does not bind, is refused); a click
   on an expired approval expires it now (what its timer would do a little later);
5. the 200 answer (Slack wants one within 3 s) — then, after it, the clicker is told
   ephemerally why a click was refused.

Reject asks for a reason first: the click (from a mapped user) opens a modal (``views.open``
with the click's ``trigger_id``, after the answer); its ``view_submission`` — signed and
verified like every interaction, the button's value in ``private_metadata`` — is the
decision, recorded with the reason through the same :func:`record_decision`. If Slack will
not open the modal, the click rejects without a reason and the clicker is told so.

The buttons of a run that needs a person (Draft anyway, Retry failed branches, Close with
note) are handled by :mod:`ira.coordinator.slack_review`.

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

from ira.connectors.slack import render
from ira.connectors.slack.errors import SlackRejectedError, SlackUnavailableError
from ira.connectors.slack.interactions import (
    APPROVE,
    CLOSE_REPAIR,
    REASON,
    REJECT,
    REJECT_REASON,
    REVIEW_ACTIONS,
    ActionValue,
    InteractionVerifier,
    ModalContext,
    ViewSubmission,
    parse_interaction,
)
from ira.coordinator import gate
from ira.coordinator.approval import Choice, Judgement, RefusalCode, Shown, Verdict, has_role
from ira.coordinator.decisions import record_decision
from ira.coordinator.deps import Deps
from ira.coordinator.slack_review import SlackReview
from ira.core.errors import ConcurrentUpdateError, InvalidMessageError, NotFoundError
from ira.core.model import Model
from ira.core.ports import ChatPoster
from ira.runtime.body import body_limit
from ira.runtime.http import error_response
from ira.runtime.settings import Settings
from ira.runtime.telemetry import Metrics

log = logging.getLogger(__name__)
MAX_BODY = 256 * 1024
"""Slack's interaction payloads are a few KiB (the message's blocks included)."""
MAX_REASON = 2000
UNMAPPED = "slack:"
"""Principal name prefix of a Slack user missing from ``slack.approvers`` (it holds no role)."""


class Click(Model):
    """One decision as Slack delivered it: a button click, or the modal a Reject click opened."""

    user: str
    value: ActionValue
    choice: Choice
    key: str
    """Idempotency: Slack's retries of one click (or one modal submission) carry the same key."""
    channel_id: str | None = None
    message_ts: str | None = None


class SlackInteractions:
    """The route's collaborators and the follow-up work it starts after answering."""

    def __init__(self, settings: Settings, deps: Deps, *, poster: ChatPoster, verifier: InteractionVerifier,
                 metrics: Metrics) -> None:
        self._settings, self._deps, self._poster, self._verifier = settings, deps, poster, verifier
        self._outcomes = Counter("ira_slack_interactions", "Slack interactions by outcome", ["outcome"],
                                 registry=metrics.registry)
        self.follow_ups: set[asyncio.Task[None]] = set()
        self._review = SlackReview(settings, deps, poster=poster, later=self._later,
                                   count=lambda outcome: self._outcomes.labels(outcome).inc())

    async def handle(self, body: bytes, headers: Mapping[str, str]) -> Response:
        if len(body) > MAX_BODY:
            return self._refuse(413, "too_large", f"an interaction is at most {MAX_BODY} bytes")
        if not self._verifier.is_valid(body, headers):
            return self._refuse(401, "invalid_signature", "bad or stale Slack signature")
        try:
            payload = parse_interaction(body)
            if isinstance(payload, ViewSubmission):
                return await self._submitted(payload)
            action = payload.action
            if action.action_id in REVIEW_ACTIONS:  # a run that needs a person (human review, manual repair)
                await self._review.click(payload)
                return Response(status_code=200)
            value = ActionValue.decode(action.value) if action.action_id in (APPROVE, REJECT) else None
        except InvalidMessageError as exc:
            return self._refuse(400, exc.code, str(exc))
        if value is None:  # a link button (Open run): nothing to decide
            return Response(status_code=200)
        click = Click(user=payload.user.id, value=value, choice=Choice(action.action_id),
                      key=f"{value.approval_id}:{payload.user.id}:{action.action_ts}",
                      channel_id=payload.container.channel_id, message_ts=payload.container.message_ts)
        if click.choice == Choice.REJECT and payload.trigger_id and self._may_decide(click.user):
            self._later(self._ask_reason(click, payload.trigger_id))  # the decision comes with the modal
            return Response(status_code=200)
        await self._settle(click)
        return Response(status_code=200)

    async def _settle(self, click: Click, *, reason: str | None = None, note: str | None = None) -> Judgement:
        """Decide, count, expire what is past its expiry, and tell the clicker why a refusal."""
        judgement = await self._decide(click, reason=reason)
        self._outcomes.labels(judgement.code or judgement.verdict.value).inc()
        if judgement.code == RefusalCode.EXPIRED:
            await self._expire(click.value.approval_id, tenant=self._tenant_of(click.user))
        told = self._why(click.user, judgement) if judgement.verdict == Verdict.REFUSE else note
        if told and click.channel_id:
            self._later(self._poster.tell(click.channel_id, click.user, text=told))
        return judgement

    async def _ask_reason(self, click: Click, trigger_id: str) -> None:
        """Reject opens a modal asking why; if Slack will not open it, reject without a reason."""
        context = ModalContext(value=click.value.encode(), channel_id=click.channel_id, message_ts=click.message_ts)
        modal = render.text_modal(
            callback_id=REJECT_REASON, title="Reject the draft", submit="Reject", block_id=REASON, optional=True,
            intro="No ticket will be created and the run ends. Say why, for the run's log and the message.",
            label="Reason", metadata=context.encode(), max_length=MAX_REASON)
        try:
            await self._poster.open_view(trigger_id, modal)
        except (SlackRejectedError, SlackUnavailableError) as exc:
            log.warning("could not open the reason modal (%s): rejecting without a reason", exc)
            await self._settle(click, note=f"Slack would not open the reason dialog ({getattr(exc, 'error', exc)}), "
                                           "so the draft was rejected without a reason.")

    async def _submitted(self, payload: ViewSubmission) -> Response:
        """A modal came back: the rejection's reason (decided now, closing the modal)."""
        if payload.view.callback_id == CLOSE_REPAIR:
            return await self._review.submitted(payload)
        if payload.view.callback_id != REJECT_REASON:
            raise InvalidMessageError(f"unknown modal {payload.view.callback_id[:40]!r}")
        context = ModalContext.decode(payload.view.private_metadata)
        value = ActionValue.decode(context.value)
        click = Click(user=payload.user.id, value=value, choice=Choice.REJECT,
                      key=f"{value.approval_id}:{payload.user.id}:view:{payload.view.id}",
                      channel_id=context.channel_id, message_ts=context.message_ts)
        await self._settle(click, reason=payload.view.input(REASON, REASON))
        return Response(status_code=200)

    async def _decide(self, click: Click, *, reason: str | None) -> Judgement:
        approver = self._settings.slack_approver(click.user)
        tenant = self._tenant_of(click.user)
        principal = approver.principal if approver else UNMAPPED + click.user
        roles = frozenset(r.value for r in approver.roles) if approver else frozenset[str]()
        try:
            _, judgement = await record_decision(
                self._deps, tenant_id=tenant, approval_id=click.value.approval_id, choice=click.choice,
                principal=principal, roles=roles, action_key=click.key, reason=reason,
                shown=Shown(payload_hash=click.value.draft_hash, resource_version=click.value.resource_version))
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

    def _may_decide(self, user: str) -> bool:
        """Worth asking for a reason: a mapped user with the approver role (anyone else's click
        is decided at once, so its refusal is recorded and told without a dialog first)."""
        approver = self._settings.slack_approver(user)
        return approver is not None and has_role(frozenset(r.value for r in approver.roles),
                                                 self._deps.config.approver_role)

    def _why(self, user: str, judgement: Judgement) -> str:
        if self._settings.slack_approver(user) is None:
            return (f"Your Slack user {user} is not mapped to an ira principal (`slack.approvers`), "
                    "so your click was not counted.")
        if judgement.code in _STALE:
            return (f"Not recorded ({judgement.code}): {judgement.message}. The message you clicked no longer shows "
                    "the draft to decide on; decide on the latest message in the run's thread.")
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


_STALE = frozenset({RefusalCode.DRAFT_CHANGED, RefusalCode.RESOURCE_CHANGED})


def build_slack_router(interactions: SlackInteractions) -> APIRouter:
    router = APIRouter(tags=["slack"])

    @router.post("/slack/interactions", include_in_schema=False, openapi_extra=body_limit(MAX_BODY))
    async def slack_interactions(request: Request) -> Response:
        """Slack's signed form post; verified on the raw body before anything is parsed."""
        return await interactions.handle(await request.body(), request.headers)

    return router
