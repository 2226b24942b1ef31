"""Approval rules, pure: may this principal's decision apply to this approval, now?

An approval authorizes one exact thing: the draft whose hash it binds, for the incident at
the version it binds, decided by someone with the required role before it expires. Any
drift refuses the decision with a machine-readable code (answered as 409 and recorded as an
event); a repeated identical click is recognized as the same decision, not a new one.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from ira.core.model import Model
from ira.core.operation import Approval
from ira.core.states import ApprovalState


class Choice(StrEnum):
    APPROVE = "approve"
    REJECT = "reject"


class RefusalCode(StrEnum):
    ROLE_MISSING = "role_missing"
    ALREADY_DECIDED = "already_decided"
    EXPIRED = "expired"
    DRAFT_CHANGED = "draft_changed"
    RESOURCE_CHANGED = "resource_changed"
    RUN_ENDED = "run_ended"
    NOT_WAITING = "not_waiting"


class Verdict(StrEnum):
    APPLY = "apply"
    DUPLICATE = "duplicate"  #: the same principal repeating the decision already recorded
    REFUSE = "refuse"


class Shown(Model):
    """The draft a person saw when deciding (a chat button carries it): a decision applies only
    to an approval that binds exactly this draft at exactly this incident version."""

    payload_hash: str
    resource_version: int


class DecisionCheck(Model):
    """Everything the rule looks at, read in the decision's transaction."""

    approval: Approval
    choice: Choice
    principal: str
    roles: frozenset[str]
    now: datetime
    current_draft_ref: str | None
    current_resource_version: int
    run_waiting_for_approval: bool
    shown: Shown | None = None
    """None when the channel shows the approval as it is now (the API, the dashboard)."""


class Judgement(Model):
    verdict: Verdict
    code: RefusalCode | None = None
    message: str = ""

    @classmethod
    def refuse(cls, code: RefusalCode, message: str) -> Judgement:
        return cls(verdict=Verdict.REFUSE, code=code, message=message)


_TARGET = {Choice.APPROVE: ApprovalState.APPROVED, Choice.REJECT: ApprovalState.REJECTED}
_CLOSED = {ApprovalState.EXPIRED: RefusalCode.EXPIRED}
_CODES = frozenset(c.value for c in RefusalCode)


def target_state(choice: Choice) -> ApprovalState:
    return _TARGET[choice]


def has_role(roles: frozenset[str], required: str) -> bool:
    return required in roles or "admin" in roles


def judge(check: DecisionCheck) -> Judgement:
    """The first rule that fails decides the refusal; order matters and is the table below."""
    a = check.approval
    if not has_role(check.roles, a.required_role):
        return Judgement.refuse(RefusalCode.ROLE_MISSING, f"{check.principal} lacks the {a.required_role} role")
    if check.shown is not None and check.shown.payload_hash != a.payload_hash:
        return Judgement.refuse(RefusalCode.DRAFT_CHANGED,
                                f"the button shows draft {_short(check.shown.payload_hash)}, "
                                f"the approval binds draft {_short(a.payload_hash)}")
    if check.shown is not None and check.shown.resource_version != a.resource_version:
        return Judgement.refuse(RefusalCode.RESOURCE_CHANGED,
                                f"the button shows incident version {check.shown.resource_version}, "
                                f"the approval binds version {a.resource_version}")
    if a.state != ApprovalState.PENDING:
        return _settled(check)
    if check.now >= a.expires_at:
        return Judgement.refuse(RefusalCode.EXPIRED, f"the approval expired at {a.expires_at.isoformat()}")
    if not check.run_waiting_for_approval:
        return Judgement.refuse(RefusalCode.NOT_WAITING, "the run is not waiting for this approval")
    if check.choice == Choice.APPROVE:
        if check.current_draft_ref != a.payload_hash:
            return Judgement.refuse(RefusalCode.DRAFT_CHANGED, "the draft changed after approval was asked")
        if check.current_resource_version != a.resource_version:
            return Judgement.refuse(RefusalCode.RESOURCE_CHANGED,
                                    f"the incident is at version {check.current_resource_version}, "
                                    f"the approval was asked for {a.resource_version}")
    return Judgement(verdict=Verdict.APPLY)


def _short(payload_hash: str) -> str:
    return payload_hash.removeprefix("sha256:")[:12]


def _settled(check: DecisionCheck) -> Judgement:
    a = check.approval
    if a.state == _TARGET[check.choice] and a.decided_by == check.principal:
        return Judgement(verdict=Verdict.DUPLICATE, message=f"already {a.state.value} by {a.decided_by}")
    if a.state in _CLOSED:
        return Judgement.refuse(_CLOSED[a.state], f"the approval is {a.state.value}")
    if a.state == ApprovalState.INVALIDATED:
        code = RefusalCode(a.reason) if a.reason in _CODES else RefusalCode.RUN_ENDED
        return Judgement.refuse(code, f"the approval was invalidated: {a.reason}")
    return Judgement.refuse(RefusalCode.ALREADY_DECIDED, f"already {a.state.value} by {a.decided_by}")
