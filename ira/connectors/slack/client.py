"""``SlackChatPoster``: ira's ChatPoster over slack-sdk's ``AsyncWebClient``.

Every post carries message metadata ``{"event_type": "ira_notification", "event_payload":
{"key": ...}}``; ``find_posted`` reads the channel's history (or a thread's replies) with
metadata to find it again, which is how a retry after a lost answer avoids a second post.
slack-sdk's own retry handlers are switched off: a blind retry of ``chat.postMessage`` is
exactly the double post this module exists to prevent; the notifier decides when to retry.
Every text and block posted passes the redactor: a Slack message is where a secret would
leave for good.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from slack_sdk.web.async_client import AsyncWebClient

from ira.connectors.slack.errors import SlackRejectedError, map_slack_errors
from ira.core.chat import ChatRef
from ira.core.redact import Redactor

METADATA_EVENT = "ira_notification"
_HISTORY_PAGES = 5
_PAGE_SIZE = 200


def build_web_client(token: str, *, api_url: str, timeout_seconds: int = 10) -> AsyncWebClient:
    """slack-sdk joins ``base_url`` and the method name as strings: it must end with a slash."""
    base = api_url if api_url.endswith("/") else api_url + "/"
    return AsyncWebClient(token=token, base_url=base, timeout=timeout_seconds, retry_handlers=[])


class SlackChatPoster:
    """Posts, updates and finds messages; errors come out as ira's (``errors.py``)."""

    def __init__(self, client: AsyncWebClient, *, redactor: Redactor | None = None) -> None:
        self._client = client
        self._redactor = redactor or Redactor()
        self._channel_ids: dict[str, str] = {}

    async def post(self, channel: str, *, text: str, blocks: Sequence[Mapping[str, Any]], key: str,
                   thread_ts: str | None = None) -> ChatRef:
        async with map_slack_errors():
            answer = await self._client.chat_postMessage(
                channel=channel, text=self._redactor.text(text), blocks=self._blocks(blocks), thread_ts=thread_ts,
                unfurl_links=False,
                metadata={"event_type": METADATA_EVENT, "event_payload": {"key": key}})
        return ChatRef(channel=str(answer["channel"]), ts=str(answer["ts"]), thread_ts=thread_ts)

    async def update(self, ref: ChatRef, *, text: str, blocks: Sequence[Mapping[str, Any]]) -> None:
        async with map_slack_errors():
            await self._client.chat_update(channel=ref.channel, ts=ref.ts, text=self._redactor.text(text),
                                           blocks=self._blocks(blocks))

    def _blocks(self, blocks: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        return [self._redactor.value(dict(b)) for b in blocks]

    async def find_posted(self, channel: str, *, key: str, since: datetime,
                          thread_ts: str | None = None) -> ChatRef | None:
        channel_id = await self.channel_id(channel)
        cursor: str | None = None
        for _ in range(_HISTORY_PAGES):
            page = await self._page(channel_id, since=since, thread_ts=thread_ts, cursor=cursor)
            for message in page.get("messages") or []:
                if _key_of(message) == key:
                    return ChatRef(channel=channel_id, ts=str(message["ts"]), thread_ts=thread_ts)
            cursor = (page.get("response_metadata") or {}).get("next_cursor") or None
            if cursor is None:
                return None
        return None

    async def tell(self, channel: str, user: str, *, text: str) -> None:
        async with map_slack_errors():
            await self._client.chat_postEphemeral(channel=channel, user=user, text=self._redactor.text(text))

    async def open_view(self, trigger_id: str, view: Mapping[str, Any]) -> None:
        """``views.open``: a modal in front of the person who clicked (``trigger_id`` lives 3 s)."""
        async with map_slack_errors():
            await self._client.views_open(trigger_id=trigger_id, view=dict(view))

    async def check(self, channel: str) -> str:
        """``auth.test`` and membership of ``channel``: what ``ira doctor`` reports."""
        async with map_slack_errors():
            who = await self._client.auth_test()
            channel_id = await self.channel_id(channel)
            info = await self._client.conversations_info(channel=channel_id)
        member = bool((info.get("channel") or {}).get("is_member"))
        if not member:
            raise SlackRejectedError("not_in_channel")
        return f"bot {who.get('user')} in team {who.get('team')}, member of {channel} ({channel_id})"

    async def channel_id(self, channel: str) -> str:
        """A channel id (``C...``) as is; a ``#name`` looked up once through ``conversations.list``."""
        if not channel.startswith("#"):
            return channel
        if channel not in self._channel_ids:
            self._channel_ids[channel] = await self._lookup(channel[1:])
        return self._channel_ids[channel]

    async def _lookup(self, name: str) -> str:
        cursor: str | None = None
        for _ in range(_HISTORY_PAGES * 4):
            async with map_slack_errors():
                page = await self._client.conversations_list(
                    types="public_channel,private_channel", limit=_PAGE_SIZE, cursor=cursor, exclude_archived=True)
            for found in page.get("channels") or []:
                if found.get("name") == name:
                    return str(found["id"])
            cursor = (page.get("response_metadata") or {}).get("next_cursor") or None
            if cursor is None:
                break
        raise SlackRejectedError("channel_not_found")

    async def _page(self, channel_id: str, *, since: datetime, thread_ts: str | None,
                    cursor: str | None) -> Mapping[str, Any]:
        oldest = f"{since.timestamp():.6f}"
        async with map_slack_errors():
            if thread_ts is None:
                answer = await self._client.conversations_history(
                    channel=channel_id, oldest=oldest, include_all_metadata=True, limit=_PAGE_SIZE, cursor=cursor)
            else:
                answer = await self._client.conversations_replies(
                    channel=channel_id, ts=thread_ts, oldest=oldest, include_all_metadata=True, limit=_PAGE_SIZE,
                    cursor=cursor)
        return answer.data if isinstance(answer.data, dict) else {}


def _key_of(message: Mapping[str, Any]) -> str | None:
    metadata = message.get("metadata") or {}
    if metadata.get("event_type") != METADATA_EVENT:
        return None
    return (metadata.get("event_payload") or {}).get("key")
