"""The approval rule, table-driven: which decision applies, which is a duplicate, which is refused."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from ira.coordinator.approval import Choice, DecisionCheck, RefusalCode, Shown, Verdict, judge
from ira.core.operation import Approval
from ira.core.states import ApprovalState

NOW = datetime(2026, 4, 29, 11, 0, tzinfo=UTC)
DRAFT = "sha256:draft-v1"


def approval(state: ApprovalState = ApprovalState.PENDING, *, by: str | None = None, reason: str | None = None,
             expires: timedelta = timedelta(minutes=10)) -> Approval:
    return Approval(approval_id="apr_1", tenant_id="acme", run_id="run_1", step_id="approve_ticket",
                    action="create_ticket", payload_hash=DRAFT, resource_version=3, required_role="approver",
                    state=state, expires_at=NOW + expires, decided_by=by, reason=reason, created_at=NOW)


def check(a: Approval, *, choice: Choice = Choice.APPROVE, who: str = "lead", roles: tuple[str, ...] = ("approver",),
          draft: str | None = DRAFT, version: int = 3, waiting: bool = True,
          shown: tuple[str, int] | None = None) -> DecisionCheck:
    return DecisionCheck(approval=a, choice=choice, principal=who, roles=frozenset(roles), now=NOW,
                         current_draft_ref=draft, current_resource_version=version, run_waiting_for_approval=waiting,
                         shown=Shown(payload_hash=shown[0], resource_version=shown[1]) if shown else None)


CASES = [
    ("valid approval", check(approval()), Verdict.APPLY, None),
    ("admin holds every role", check(approval(), roles=("admin",)), Verdict.APPLY, None),
    ("valid rejection", check(approval(), choice=Choice.REJECT), Verdict.APPLY, None),
    ("viewer", check(approval(), roles=("viewer",)), Verdict.REFUSE, RefusalCode.ROLE_MISSING),
    ("role checked first", check(approval(ApprovalState.APPROVED, by="x"), roles=()), Verdict.REFUSE,
     RefusalCode.ROLE_MISSING),
    ("expired, not yet swept", check(approval(expires=timedelta(0))), Verdict.REFUSE, RefusalCode.EXPIRED),
    ("expired by the timer", check(approval(ApprovalState.EXPIRED)), Verdict.REFUSE, RefusalCode.EXPIRED),
    ("draft changed", check(approval(), draft="sha256:draft-v2"), Verdict.REFUSE, RefusalCode.DRAFT_CHANGED),
    ("no draft any more", check(approval(), draft=None), Verdict.REFUSE, RefusalCode.DRAFT_CHANGED),
    ("incident moved on", check(approval(), version=4), Verdict.REFUSE, RefusalCode.RESOURCE_CHANGED),
    ("reject ignores drift", check(approval(), choice=Choice.REJECT, version=4), Verdict.APPLY, None),
    ("the button shows this draft", check(approval(), shown=(DRAFT, 3)), Verdict.APPLY, None),
    ("the button shows another draft", check(approval(), shown=("sha256:draft-v0", 3)), Verdict.REFUSE,
     RefusalCode.DRAFT_CHANGED),
    ("a reject button of another draft", check(approval(), choice=Choice.REJECT, shown=("sha256:draft-v0", 3)),
     Verdict.REFUSE, RefusalCode.DRAFT_CHANGED),
    ("the button shows another version", check(approval(), shown=(DRAFT, 2)), Verdict.REFUSE,
     RefusalCode.RESOURCE_CHANGED),
    ("run not waiting", check(approval(), waiting=False), Verdict.REFUSE, RefusalCode.NOT_WAITING),
    ("same click again", check(approval(ApprovalState.APPROVED, by="lead")), Verdict.DUPLICATE, None),
    ("someone else already", check(approval(ApprovalState.APPROVED, by="ann")), Verdict.REFUSE,
     RefusalCode.ALREADY_DECIDED),
    ("opposite decision", check(approval(ApprovalState.APPROVED, by="lead"), choice=Choice.REJECT), Verdict.REFUSE,
     RefusalCode.ALREADY_DECIDED),
    ("invalidated by an edit", check(approval(ApprovalState.INVALIDATED, reason="draft_changed")), Verdict.REFUSE,
     RefusalCode.DRAFT_CHANGED),
    ("invalidated by a new alert", check(approval(ApprovalState.INVALIDATED, reason="resource_changed")),
     Verdict.REFUSE, RefusalCode.RESOURCE_CHANGED),
    ("invalidated by a cancel", check(approval(ApprovalState.INVALIDATED, reason="cancelled")), Verdict.REFUSE,
     RefusalCode.RUN_ENDED),
]


@pytest.mark.parametrize(("name", "given", "verdict", "code"), CASES, ids=[c[0] for c in CASES])
def test_approval_rule(name: str, given: DecisionCheck, verdict: Verdict, code: RefusalCode | None) -> None:
    judgement = judge(given)
    assert (judgement.verdict, judgement.code) == (verdict, code)
