"""Slack's side of an interaction: the form body it POSTs for a button click, and its signature."""

from __future__ import annotations

import hashlib
import hmac
import json
import time
import urllib.parse
from typing import Any


def block_actions_body(*, user: str, action_id: str, value: str, channel: str, message_ts: str,
                       action_ts: str | None = None, thread_ts: str | None = None,
                       message: dict[str, Any] | None = None) -> bytes:
    """What Slack sends when ``user`` clicks the button ``action_id`` of the message at ``message_ts``."""
    payload: dict[str, Any] = {
        "type": "block_actions", "user": {"id": user, "username": user.lower(), "team_id": "T0FAKE"},
        "api_app_id": "A0IRA", "token": "legacy-verification-token", "trigger_id": "1.2.3",
        "team": {"id": "T0FAKE", "domain": "fake"},
        "container": {"type": "message", "message_ts": message_ts, "channel_id": channel, "is_ephemeral": False,
                      **({"thread_ts": thread_ts} if thread_ts else {})},
        "channel": {"id": channel, "name": "incidents"},
        "message": {"ts": message_ts, "type": "message", **({"text": message.get("text", ""),
                                                             "blocks": message.get("blocks") or []}
                                                            if message else {})},
        "response_url": "https://hooks.slack.invalid/actions/T0FAKE/1/x",
        "actions": [{"action_id": action_id, "block_id": "approval", "type": "button", "value": value,
                     "action_ts": action_ts or f"{time.time():.6f}", "text": {"type": "plain_text",
                                                                             "text": action_id.title()}}],
    }
    return urllib.parse.urlencode({"payload": json.dumps(payload)}).encode()


def view_submission_body(*, user: str, view: dict[str, Any], inputs: dict[str, str]) -> bytes:
    """What Slack sends when ``user`` submits the modal ``view`` (as opened) with ``inputs``
    (block_id -> text; ira's inputs use the same id for the block and the element)."""
    values = {block: {block: {"type": "plain_text_input", "value": text}} for block, text in inputs.items()}
    payload: dict[str, Any] = {
        "type": "view_submission", "user": {"id": user, "username": user.lower(), "team_id": "T0FAKE"},
        "api_app_id": "A0IRA", "token": "legacy-verification-token", "trigger_id": "4.5.6",
        "team": {"id": "T0FAKE", "domain": "fake"},
        "view": {"id": view["id"], "type": "modal", "callback_id": view.get("callback_id", ""),
                 "private_metadata": view.get("private_metadata", ""), "hash": "1.abc",
                 "state": {"values": values}},
    }
    return urllib.parse.urlencode({"payload": json.dumps(payload)}).encode()


def signed_headers(secret: str, body: bytes, *, timestamp: int | None = None) -> dict[str, str]:
    """``X-Slack-Signature: v0=HMAC-SHA256(secret, "v0:<ts>:<body>")`` and the timestamp."""
    ts = str(int(time.time()) if timestamp is None else timestamp)
    digest = hmac.new(secret.encode(), b"v0:" + ts.encode() + b":" + body, hashlib.sha256).hexdigest()
    return {"content-type": "application/x-www-form-urlencoded", "x-slack-request-timestamp": ts,
            "x-slack-signature": f"v0={digest}"}


def buttons_of(message: dict[str, Any]) -> dict[str, str]:
    """The posted message's decision buttons: action_id -> value."""
    return {e["action_id"]: e["value"] for b in message.get("blocks") or [] if b.get("type") == "actions"
            for e in b["elements"] if "value" in e}
