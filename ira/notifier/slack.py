"""The Slack channel: one notification -> one Slack message (plus best-effort thread replies).

``ok`` + ``ts`` is ``accepted`` (Slack cannot prove a person read it). ``ratelimited`` and
5xx are retried after Slack's Retry-After; ``invalid_auth``, ``channel_not_found``,
``not_in_channel`` and every other definite no are ``failed`` with ``permanent: true`` (the
dashboard's health page lists them). A retry first looks for the earlier post by its
notification id in the message metadata, so an answer lost after Slack applied the post
never becomes a second message.

A run has one thread: its first approval message is the root. A revised draft edits that
message (``chat.update``: the new draft and its buttons replace the old ones, whose clicks the
gate refuses as stale) instead of posting another, so a run whose incident keeps changing is
still one message; ticket, completion and needs-a-person notices are replies in its thread.
An edit is idempotent, so a retry after a lost answer needs no search.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import timedelta

from ira.connectors.slack import render
from ira.connectors.slack.errors import SlackRejectedError, SlackUnavailableError
from ira.connectors.slack.interactions import CLOSE_REPAIR, DRAFT_ANYWAY, RETRY_FAILED
from ira.core.chat import ApprovalMessage, ApprovalOutcome, ApprovalStatus, ChatRef
from ira.core.clock import Clock
from ira.core.delivery import Notification, NotificationKind, Receipt
from ira.core.errors import NotFoundError
from ira.core.ports import ChatPoster
from ira.core.states import DeliveryState
from ira.notifier import store
from ira.notifier.approval_view import approval_status, load_approval, ticket_url
from ira.notifier.store import Posted
from ira.runtime.store.database import Database

log = logging.getLogger(__name__)
SLACK = "slack"
FIND_WINDOW = timedelta(minutes=5)
"""How far before the notification's creation a retry looks for its earlier post."""


class SlackChannel:
    """Sends notifications to Slack through a ChatPoster: each tenant's to its own channel
    (``slack.channels``), the others' to the default one (``slack.channel``)."""

    name = SLACK

    def __init__(self, poster: ChatPoster, db: Database, *, channel: str, clock: Clock,
                 chat_users: Mapping[str, str] | None = None, channels: Mapping[str, str] | None = None) -> None:
        """``channel`` is the default; ``channels`` maps a tenant to its own channel."""
        self._poster, self._db, self._channel, self._clock = poster, db, channel, clock
        self._channels = dict(channels or {})
        self._chat_users = dict(chat_users or {})
        """principal -> Slack user id, to mention who decided."""

    async def send(self, notification: Notification, *, attempt: int = 0) -> tuple[Receipt, bool]:
        try:
            ref = await self._deliver(notification, retry=attempt > 0)
        except SlackRejectedError as exc:
            return self._receipt(DeliveryState.FAILED, error=exc.error, permanent=True), False
        except SlackUnavailableError as exc:
            state = DeliveryState.UNKNOWN if exc.maybe_applied else DeliveryState.FAILED
            wait = exc.retry_after.total_seconds() if exc.retry_after else None
            return self._receipt(state, error=exc.error, retry_after=wait), True
        except NotFoundError as exc:  # nothing to show (the run or its draft is gone): nothing was sent
            return self._receipt(DeliveryState.FAILED, error=exc.code, reason=str(exc)), False
        return self._receipt(DeliveryState.ACCEPTED, channel_id=ref.channel, ts=ref.ts, thread_ts=ref.thread_ts), False

    async def _deliver(self, n: Notification, *, retry: bool) -> ChatRef:
        earlier = await self._earlier(n)
        roots = [p for p in earlier if p.notification.kind == NotificationKind.APPROVAL_REQUESTED]
        if n.kind == NotificationKind.APPROVAL_REQUESTED:
            return await self._approval(n, roots, retry=retry)
        asked = _asked(roots, n.data.get("approval_id"))
        if n.kind == NotificationKind.APPROVAL_DECIDED and asked is not None:
            await self._render(asked)  # the decision shows on the message that asked for it
            return asked.ref
        ref = await self._post_once(n, _notice(n), thread=roots[0].ref if roots else None, retry=retry)
        if asked is not None and n.kind in _SETTLING:
            await self._best_effort(self._render(asked))
        return ref

    async def _approval(self, n: Notification, roots: Sequence[Posted], *, retry: bool) -> ChatRef:
        msg, status = await self._view(n)
        rendered = render.approval_message(msg, status, now=self._clock.now())
        if roots:  # a revised draft: the run's approval message shows it (and its buttons) instead
            ref = roots[-1].ref
            await self._poster.update(ref, text=rendered.text, blocks=rendered.blocks)
            return ref
        ref = await self._post_once(n, rendered, thread=None, retry=retry)
        await self._best_effort(self._report(n, msg, ref))
        return ref

    async def _view(self, n: Notification) -> tuple[ApprovalMessage, ApprovalStatus | None]:
        """The approval's message and, once it is no longer pending, what became of it."""
        async with self._db.reader() as conn:
            msg, approval, detail = await load_approval(conn, n.tenant_id, n.run_id or "", str(n.data["approval_id"]),
                                                        run_url=n.data.get("run_url"))
            url = await ticket_url(conn, n.tenant_id, n.run_id or "") if detail.ticket else None
        status = approval_status(approval, now=self._clock.now(), ticket_key=detail.ticket,
                                 chat_users=self._chat_users, ticket_url=url)
        return msg, None if status.outcome == ApprovalOutcome.PENDING else status

    async def _render(self, posted: Posted) -> None:
        """Re-render an approval message from the approval's current state."""
        msg, status = await self._view(posted.notification)
        message = render.approval_message(msg, status, now=self._clock.now())
        await self._poster.update(posted.ref, text=message.text, blocks=message.blocks)

    async def _post_once(self, n: Notification, message: render.SlackMessage, *, thread: ChatRef | None,
                         retry: bool) -> ChatRef:
        channel = thread.channel if thread else self._channels.get(n.tenant_id, self._channel)
        thread_ts = thread.ts if thread else None
        if retry:
            found = await self._poster.find_posted(channel, key=n.notification_id, since=n.created_at - FIND_WINDOW,
                                                   thread_ts=thread_ts)
            if found is not None:
                log.info("notification %s was posted before its answer got lost: %s", n.notification_id, found.ts)
                return found
        return await self._poster.post(channel, text=message.text, blocks=message.blocks, key=n.notification_id,
                                       thread_ts=thread_ts)

    async def _report(self, n: Notification, msg: ApprovalMessage, root: ChatRef) -> None:
        for i, part in enumerate(render.report_thread(msg)):
            await self._poster.post(root.channel, text=part.text, blocks=part.blocks,
                                    key=f"{n.notification_id}:report:{i}", thread_ts=root.ts)

    async def _earlier(self, n: Notification) -> list[Posted]:
        if n.run_id is None:
            return []
        async with self._db.reader() as conn:
            found = await store.posted_for_run(conn, n.tenant_id, n.run_id, channel=SLACK)
        return [p for p in found if p.notification.notification_id != n.notification_id]

    async def _best_effort(self, work: Awaitable[None]) -> None:
        """Thread replies and updates decorate an accepted post; their failure is logged, not retried."""
        try:
            await work
        except (SlackRejectedError, SlackUnavailableError, NotFoundError) as exc:
            log.warning("slack follow-up failed: %s", exc)

    def _receipt(self, state: DeliveryState, **detail: object) -> Receipt:
        kept = {k: v for k, v in detail.items() if v is not None}
        return Receipt(at=self._clock.now(), state=state, detail={"channel": self.name, **kept})


_SETTLING = frozenset({NotificationKind.APPROVAL_DECIDED, NotificationKind.TICKET_CREATED,
                       NotificationKind.RUN_COMPLETED, NotificationKind.APPROVAL_EXPIRED})
"""Kinds after which the run's approval message shows its final state."""


_PAST = {"approve": "approved", "reject": "rejected"}


def _asked(roots: Sequence[Posted], approval_id: object) -> Posted | None:
    """The message that asked for ``approval_id``; else the run's latest approval message."""
    named = [p for p in roots if p.notification.data.get("approval_id") == approval_id]
    return named[-1] if named else (roots[-1] if roots else None)


def _review_buttons(d: Mapping[str, object]) -> list[render.Block]:
    """What the run page offers for the work item, as buttons (value: the work item id)."""
    item = d.get("work_item_id")
    if not isinstance(item, str):
        return []
    if d.get("reason") == "human_review":
        return [render.action_button("Draft anyway", DRAFT_ANYWAY, item, style="primary"),
                render.action_button("Retry failed branches", RETRY_FAILED, item)]
    if d.get("reason") == "manual_repair":
        return [render.action_button("Close with note", CLOSE_REPAIR, item, style="primary")]
    return []


def _notice(n: Notification) -> render.SlackMessage:
    d = n.data
    run_url = d.get("run_url")
    title = str(d.get("title") or n.run_id or "")
    texts: dict[str, Callable[[], render.SlackMessage]] = {
        NotificationKind.RUN_COMPLETED: lambda: render.notice(
            f"Run completed: {title}", [f"Ticket {k}" for k in (d.get("tickets") or {}).values()]
            + [f"Missing branches: {', '.join(d['missing_branches'])}"] * bool(d.get("missing_branches")),
            run_url=run_url),
        NotificationKind.TICKET_CREATED: lambda: render.notice(
            f"Ticket {d.get('ticket_key')} created", [title], run_url=run_url),
        NotificationKind.RUN_NEEDS_HUMAN: lambda: render.notice(
            f"A run needs a person ({d.get('reason', 'human review')})", [str(d.get('summary') or title)],
            run_url=run_url, buttons=_review_buttons(d)),
        NotificationKind.APPROVAL_EXPIRED: lambda: render.notice(
            "Approval expired: no ticket was created", [title], run_url=run_url),
        NotificationKind.APPROVAL_DECIDED: lambda: render.notice(
            f"Approval {_PAST.get(str(d.get('decision')), d.get('decision'))} by {d.get('principal')}", [title],
            run_url=run_url),
    }
    build = texts.get(n.kind, lambda: render.notice(f"{n.kind}: {title}", [], run_url=run_url))
    return build()
