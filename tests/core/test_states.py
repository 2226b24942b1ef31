"""State tables: what every object may and may not do."""

from __future__ import annotations

import pytest

from ira.core.errors import IllegalTransitionError
from ira.core.states import (
    FINISHED_STEP_STATES,
    RUN_TRANSITIONS,
    TERMINAL_RUN_STATES,
    ApprovalState,
    OperationFact,
    RunState,
    StepState,
    check_approval_transition,
    check_operation_transition,
    check_run_transition,
    check_step_transition,
)


@pytest.mark.parametrize(("current", "target"), [
    (RunState.PENDING, RunState.RUNNING),
    (RunState.RUNNING, RunState.WAITING),
    (RunState.WAITING, RunState.RUNNING),
    (RunState.RUNNING, RunState.COMPLETED),
    (RunState.WAITING, RunState.CANCELLED),
])
def test_allowed_run_moves(current: RunState, target: RunState) -> None:
    assert check_run_transition(current, target) is target


@pytest.mark.parametrize("terminal", sorted(TERMINAL_RUN_STATES))
def test_terminal_runs_never_go_back_to_running(terminal: RunState) -> None:
    with pytest.raises(IllegalTransitionError) as err:
        check_run_transition(terminal, RunState.RUNNING)
    assert err.value.code == "illegal_transition" and terminal.value in str(err.value)


def test_terminal_states_are_exactly_completed_failed_cancelled() -> None:
    assert {RunState.COMPLETED, RunState.FAILED, RunState.CANCELLED} == TERMINAL_RUN_STATES
    assert set(RUN_TRANSITIONS) == set(RunState)


@pytest.mark.parametrize(("current", "target", "ok"), [
    (StepState.BLOCKED, StepState.READY, True),
    (StepState.READY, StepState.RUNNING, True),
    (StepState.RUNNING, StepState.READY, True),  # release
    (StepState.RUNNING, StepState.DONE, True),
    (StepState.BLOCKED, StepState.RUNNING, False),  # must become READY first
    (StepState.DONE, StepState.READY, False),
])
def test_step_moves(current: StepState, target: StepState, ok: bool) -> None:
    if ok:
        assert check_step_transition(current, target) is target
    else:
        with pytest.raises(IllegalTransitionError):
            check_step_transition(current, target)


def test_finished_steps() -> None:
    assert {StepState.DONE, StepState.FAILED, StepState.SKIPPED} == FINISHED_STEP_STATES


def test_operation_cannot_skip_submitted() -> None:
    with pytest.raises(IllegalTransitionError):
        check_operation_transition(OperationFact.INTENT_RECORDED, OperationFact.CONFIRMED_SUCCESS)
    assert check_operation_transition(OperationFact.UNKNOWN, OperationFact.CONFIRMED_SUCCESS)


def test_a_decided_approval_cannot_be_decided_again() -> None:
    with pytest.raises(IllegalTransitionError):
        check_approval_transition(ApprovalState.REJECTED, ApprovalState.APPROVED)
    assert check_approval_transition(ApprovalState.APPROVED, ApprovalState.INVALIDATED)


def test_enum_values_serialize_lower_case() -> None:
    assert RunState.WAITING.value == "waiting" and OperationFact.CONFIRMED_SUCCESS.value == "confirmed_success"
