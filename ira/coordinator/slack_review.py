"""Slack's buttons on a run that needs a person: the actions the run page offers for the work
item, done through the very functions the HTTP commands call.

* human review (a required branch failed): **Draft anyway** (:func:`control.draft_anyway`, as
  ``POST /v1/work-items/{id}/draft-anyway``) and **Retry failed branches**
  (:func:`control.retry_failed_branches`, as ``POST /v1/work-items/{id}/retry``);
* manual repair: **Close with note** opens a modal; its signed ``view_submission`` closes the
  repair with the note as evidence (:func:`reconcile.close_with_note`, as
  ``POST /v1/work-items/{id}/close``).

Only approvers may use them (a Slack user mapped in ``slack.approvers`` holding the approver
role, as the API's ``caller.require("approver")``); anyone else is told so ephemerally and
nothing changes. A click is idempotent per Slack action (an inbox row in the action's
transaction), so Slack's retry of one click does it once. Once done, the notice loses its
buttons and says who chose what.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Response
from fastapi.responses import JSONResponse

from ira.connectors.slack import render
from ira.connectors.slack.errors import SlackRejectedError, SlackUnavailableError
from ira.connectors.slack.interactions import (
    CLOSE_REPAIR,
    DRAFT_ANYWAY,
    EXTERNAL_REF,
    NOTE,
    RETRY_FAILED,
    BlockActions,
    ModalContext,
    ViewSubmission,
)
from ira.coordinator import control, records
from ira.coordinator.approval import has_role
from ira.coordinator.deps import Deps
from ira.coordinator.reconcile import close_with_note
from ira.core.chat import ChatRef
from ira.core.errors import DomainError, NotFoundError
from ira.core.ports import ChatPoster
from ira.runtime.bus.inbox import record_inbox_many
from ira.runtime.settings import Settings, SlackApprover

log = logging.getLogger(__name__)
APPROVER = "approver"
REVIEW_CONSUMER = "review-actions"
"""The inbox consumer name under which Slack action ids of these buttons are remembered."""
NOTE_MIN, NOTE_MAX, EXTERNAL_REF_MAX = 3, 4000, 200
"""As ``CloseRepairBody`` of the HTTP API."""
_LABELS = {DRAFT_ANYWAY: "Draft anyway", RETRY_FAILED: "Retry failed branches", CLOSE_REPAIR: "Closed with a note"}
_MAX_KEY = 200

Later = Callable[[Coroutine[Any, Any, None]], None]


class SlackReview:
    """Handles the work-item buttons and the close modal; ``later`` runs follow-ups after the answer."""

    def __init__(self, settings: Settings, deps: Deps, *, poster: ChatPoster, later: Later,
                 count: Callable[[str], None]) -> None:
        self._settings, self._deps, self._poster, self._later, self._count = settings, deps, poster, later, count

    async def click(self, payload: BlockActions) -> None:
        action, user, channel = payload.action, payload.user.id, payload.container.channel_id
        approver, refusal = self._approver(user)
        if approver is None:
            self._count("review_refused")
            self._tell(channel, user, refusal)
            return
        if action.action_id == CLOSE_REPAIR:
            context = ModalContext(value=action.value, channel_id=channel, message_ts=payload.container.message_ts)
            self._later(self._ask_note(payload.trigger_id, context, user,
                                       tenant=approver.tenant or self._settings.tenant))
            return
        tenant = approver.tenant or self._settings.tenant
        try:
            done = await self._act(action.action_id, tenant, action.value, principal=approver.principal,
                                   key=f"{action.value}:{user}:{action.action_ts}")
        except (DomainError, NotFoundError) as exc:
            self._count("review_not_done")
            self._tell(channel, user, f"Not done: {exc}")
            return
        self._count("review_done" if done else "duplicate")
        if done:
            self._settled(payload, f":white_check_mark: {_LABELS[action.action_id]}: chosen by <@{user}> "
                                   f"({approver.principal})")

    async def submitted(self, payload: ViewSubmission) -> Response:
        """The close modal came back: close the repair with the note (refusals told ephemerally)."""
        context = ModalContext.decode(payload.view.private_metadata)
        user, channel = payload.user.id, context.channel_id
        approver, refusal = self._approver(user)
        if approver is None:
            self._count("review_refused")
            self._tell(channel, user, refusal)
            return Response(status_code=200)
        note = payload.view.input(NOTE, NOTE) or ""
        external_ref = payload.view.input(EXTERNAL_REF, EXTERNAL_REF)
        if not NOTE_MIN <= len(note) <= NOTE_MAX or len(external_ref or "") > EXTERNAL_REF_MAX:
            return JSONResponse({"response_action": "errors", "errors": {
                NOTE: f"Say what you found ({NOTE_MIN}–{NOTE_MAX} characters)."}})
        try:
            op, _ = await close_with_note(self._deps, approver.tenant or self._settings.tenant, context.value,
                                          note=note, external_ref=external_ref, principal=approver.principal)
        except (DomainError, NotFoundError) as exc:
            self._count("review_not_done")
            self._tell(channel, user, f"Not done: {exc}")
            return Response(status_code=200)
        self._count("review_done")
        self._tell(channel, user, f"Manual repair closed: operation {op.operation_id} is {op.fact_state.value}"
                                  + (f" ({op.external_ref})" if op.external_ref else "") + "; the run resumes.")
        return Response(status_code=200)

    def _approver(self, user: str) -> tuple[SlackApprover | None, str]:
        """The mapped approver, or None and what to tell the clicker."""
        approver = self._settings.slack_approver(user)
        if approver is None:
            return None, (f"Your Slack user {user} is not mapped to an ira principal (`slack.approvers`), "
                          "so your click was not counted.")
        if not has_role(frozenset(r.value for r in approver.roles), APPROVER):
            return None, f"Only approvers may do this: {approver.principal} lacks the {APPROVER} role."
        return approver, ""

    async def _act(self, action_id: str, tenant: str, work_item_id: str, *, principal: str, key: str) -> bool:
        """Draft anyway or retry, once per Slack action; False when this action was done before."""
        act = {DRAFT_ANYWAY: control.draft_anyway, RETRY_FAILED: control.retry_failed_branches}[action_id]
        now = self._deps.clock.now()
        async with self._deps.db.transaction() as conn:
            if not await record_inbox_many(conn, consumer=REVIEW_CONSUMER, keys=[(tenant, _fit(key))], at=now):
                return False
            await act(conn, tenant, work_item_id, principal=principal, note="chosen in Slack",
                      config=self._deps.config, at=now)
        return True

    async def _ask_note(self, trigger_id: str | None, context: ModalContext, user: str, *, tenant: str) -> None:
        """The close dialog, with what to look up (the work item's suggested query) as the run page shows it."""
        try:
            async with self._deps.db.reader() as conn:
                facts = (await records.get_work_item(conn, tenant, context.value))["facts"] or {}
        except NotFoundError:
            facts = {}
        lookup = f"\nLook it up: `{facts['suggested_query']}`" if facts.get("suggested_query") else ""
        modal = render.text_modal(
            callback_id=CLOSE_REPAIR, title="Close manual repair", submit="Close", block_id=NOTE, optional=False,
            intro="Say what you found in the ticket system. The note is kept as the evidence, and the run "
                  "resumes from it: with the ticket's key the ticket counts as created, without it as not created."
                  + lookup,
            label="What you found", metadata=context.encode(), max_length=NOTE_MAX,
            extra_inputs=[render.line_input(EXTERNAL_REF, "The ticket's key, if it exists (e.g. INC-77)",
                                            optional=True, max_length=EXTERNAL_REF_MAX)])
        try:
            if trigger_id is None:
                raise SlackRejectedError("no_trigger_id")
            await self._poster.open_view(trigger_id, modal)
        except (SlackRejectedError, SlackUnavailableError) as exc:
            log.warning("could not open the close modal: %s", exc)
            if context.channel_id:
                await self._poster.tell(context.channel_id, user, text=(
                    f"Slack would not open the note dialog ({getattr(exc, 'error', exc)}); nothing was closed. "
                    "Close the repair on the run page."))

    def _settled(self, payload: BlockActions, outcome: str) -> None:
        """The notice without its buttons, saying what was chosen (when Slack sent its blocks)."""
        channel, ts = payload.container.channel_id, payload.container.message_ts
        shown = payload.message
        if channel is None or ts is None or shown is None or not shown.blocks:
            self._tell(channel, payload.user.id, outcome)
            return
        message = render.settled_notice(shown.text or outcome, shown.blocks, outcome)
        self._later(self._poster.update(ChatRef(channel=channel, ts=ts), text=message.text, blocks=message.blocks))

    def _tell(self, channel: str | None, user: str, text: str) -> None:
        if channel:
            self._later(self._poster.tell(channel, user, text=text))


def _fit(key: str) -> str:
    return key if len(key) <= _MAX_KEY else hashlib.sha256(key.encode()).hexdigest()
