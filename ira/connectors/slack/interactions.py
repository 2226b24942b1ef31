"""Slack's interaction requests: the signature check on the raw body, then the payload.

Slack POSTs ``application/x-www-form-urlencoded`` with one field, ``payload``, holding JSON,
signed ``v0=HMAC-SHA256(signing_secret, "v0:<X-Slack-Request-Timestamp>:<raw body>")``.
Nothing is parsed before the signature and the timestamp (at most 5 minutes old) verify:
a forged, replayed-with-a-new-timestamp or tampered body never reaches the parser. That holds
for both kinds ira reads: ``block_actions`` (a button click) and ``view_submission`` (a modal
submitted, e.g. the reason for a rejection).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qs

from pydantic import ConfigDict, Field, ValidationError
from slack_sdk.signature import Clock as SlackClock
from slack_sdk.signature import SignatureVerifier

from ira.core.clock import Clock
from ira.core.errors import InvalidMessageError
from ira.core.model import Model

APPROVE = "approve"
REJECT = "reject"
REJECT_REASON = "reject_reason"
"""``callback_id`` of the modal asking why a draft is rejected."""
REASON = "reason"
"""``block_id`` and ``action_id`` of the modal's text input."""
DRAFT_ANYWAY = "draft_anyway"
RETRY_FAILED = "retry_failed"
CLOSE_REPAIR = "close_repair"
"""A run that needs a person: the buttons (``value`` = the work item id) and, for
``close_repair``, the ``callback_id`` of the modal asking for the note."""
NOTE = "note"
EXTERNAL_REF = "external_ref"
REVIEW_ACTIONS = frozenset({DRAFT_ANYWAY, RETRY_FAILED, CLOSE_REPAIR})
_SEPARATOR = "|"


class ActionValue(Model):
    """What an Approve / Reject button carries: the approval and the exact draft it shows."""

    approval_id: str
    draft_hash: str
    resource_version: int

    def encode(self) -> str:
        return _SEPARATOR.join((self.approval_id, self.draft_hash, str(self.resource_version)))

    @classmethod
    def decode(cls, value: str) -> ActionValue:
        parts = value.split(_SEPARATOR)
        if len(parts) != 3 or not parts[2].isdigit():
            raise InvalidMessageError(f"not an approval button value: {value[:80]!r}")
        return cls(approval_id=parts[0], draft_hash=parts[1], resource_version=int(parts[2]))


class _Loose(Model):
    """Slack adds fields over time: keep what is read, ignore the rest."""

    model_config = ConfigDict(frozen=True, extra="ignore")


class SlackUser(_Loose):
    id: str
    username: str | None = None
    team_id: str | None = None


class SlackAction(_Loose):
    action_id: str
    value: str = ""
    action_ts: str
    block_id: str | None = None


class SlackMessageShown(_Loose):
    """The message the button belongs to, as Slack shows it (its blocks, to update it)."""

    ts: str | None = None
    text: str = ""
    blocks: tuple[dict[str, Any], ...] = ()


class SlackContainer(_Loose):
    channel_id: str | None = None
    message_ts: str | None = None
    thread_ts: str | None = None


class BlockActions(_Loose):
    """A ``block_actions`` interaction: a person clicked a button of one of our messages."""

    type: str
    user: SlackUser
    actions: tuple[SlackAction, ...] = Field(min_length=1)
    container: SlackContainer = SlackContainer()
    trigger_id: str | None = None
    message: SlackMessageShown | None = None

    @property
    def action(self) -> SlackAction:
        return self.actions[0]


class SlackView(_Loose):
    """The submitted modal: ``private_metadata`` is what ira put there when opening it."""

    id: str
    callback_id: str = ""
    private_metadata: str = ""
    state: dict[str, Any] = Field(default_factory=dict)

    def input(self, block_id: str, action_id: str) -> str | None:
        """A text input's value (None when left empty)."""
        found = (self.state.get("values") or {}).get(block_id, {}).get(action_id, {})
        value = found.get("value") if isinstance(found, dict) else None
        return (str(value).strip() or None) if value is not None else None


class ViewSubmission(_Loose):
    """A ``view_submission`` interaction: a person submitted one of our modals."""

    type: str
    user: SlackUser
    view: SlackView


class ModalContext(Model):
    """What a modal carries in ``private_metadata``: the button it was opened from and where."""

    value: str
    channel_id: str | None = None
    message_ts: str | None = None

    def encode(self) -> str:
        return self.model_dump_json(exclude_none=True)

    @classmethod
    def decode(cls, metadata: str) -> ModalContext:
        try:
            return cls.model_validate_json(metadata)
        except ValidationError as exc:
            raise InvalidMessageError("not a modal ira opened (private_metadata)") from exc


class _ClockAdapter(SlackClock):
    """slack-sdk's verifier asks a clock for the time; ours is injected (tests freeze it)."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock

    def now(self) -> float:
        return self._clock.now().timestamp()


class InteractionVerifier:
    """Checks ``X-Slack-Signature`` over the raw body and the timestamp's age (5 minutes)."""

    def __init__(self, signing_secret: str, clock: Clock) -> None:
        self._verifier = SignatureVerifier(signing_secret, clock=_ClockAdapter(clock))

    def is_valid(self, body: bytes, headers: Mapping[str, str]) -> bool:
        timestamp = _header(headers, "x-slack-request-timestamp")
        if timestamp is None or not timestamp.isdigit():
            return False
        return self._verifier.is_valid(body=body, timestamp=timestamp, signature=_header(headers, "x-slack-signature"))

    def sign(self, body: bytes, timestamp: int) -> str:
        """What Slack would send (for the fake and the tests)."""
        return str(self._verifier.generate_signature(timestamp=str(timestamp), body=body))


def parse_block_actions(body: bytes) -> BlockActions:
    """The verified form body's ``payload`` as a ``block_actions``; InvalidMessageError otherwise."""
    parsed = parse_interaction(body)
    if not isinstance(parsed, BlockActions):
        raise InvalidMessageError(f"unsupported interaction type {parsed.type!r}")
    return parsed


def parse_interaction(body: bytes) -> BlockActions | ViewSubmission:
    """The verified form body's ``payload``: a click or a submitted modal; InvalidMessageError otherwise."""
    try:
        fields = parse_qs(body.decode("utf-8"), strict_parsing=True)
        payload = json.loads(fields["payload"][0])
        kind = payload.get("type") if isinstance(payload, dict) else None
        if kind == "block_actions":
            return BlockActions.model_validate(payload)
        if kind == "view_submission":
            return ViewSubmission.model_validate(payload)
    except (UnicodeDecodeError, ValueError, KeyError, AttributeError, ValidationError) as exc:
        raise InvalidMessageError(f"not a Slack interaction payload: {type(exc).__name__}") from exc
    raise InvalidMessageError(f"unsupported interaction type {str(kind)[:40]!r}")


def _header(headers: Mapping[str, str], name: str) -> str | None:
    return next((v for k, v in headers.items() if k.lower() == name), None)
