"""PostgreSQL: the plan of a run as this process's last commit of it left it, so that the next
commit that finishes a step is one statement.

A fenced commit that finishes a step sent two: the step's UPDATE, which locks the run and reads
the part of its plan the step can ready (``step_changes.apply_fenced``), then the compare-and-set
writing what that plan made ready (``folded_cas``). Where this process made the run's last
commit, it knows the plan already: the run's creation inserted it, and each commit changed it by
the step changes it wrote. A commit on a known plan sends one statement: the compare-and-set
expecting the version that plan is of, with the fenced step's UPDATE and its attempt's end
riding in it (``folded_cas.folded_bump(fenced=...)``). Every change that can ready a step (a step
finished or added, a promotion) is a commit, which moves the run's version, so the run at that
version has that plan; only claims and leases change without one, and no promotion reads them.
A compare-and-set refused (the run moved: a commit made elsewhere) writes nothing, and the
commit goes the usual way in the same transaction.

A plan is remembered for other transactions only once the commit that made it committed (a
rolled-back version could be reached again by another history), and forgotten once a commit of
the run is made without it. One transaction at a time takes a run's plan: a second waits for
the first to end (instead of for the run's row, where it would then be refused) if it has sent
nothing yet, so holds no lock the first could wait for, else goes the usual way; so does a
commit of a run nobody here created (another process's, or one from before a restart).
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from sqlalchemy.ext.asyncio import AsyncConnection

from ira.core.commit import NewStep, StepChange
from ira.core.states import TERMINAL_RUN_STATES, RunState
from ira.runtime.store.database import after_commit, kept_by_transaction, when_ended
from ira.runtime.store.pg_fast import began

MAX_RUNS = 10_000
"""Runs whose plans a process keeps (the least recently committed go first): a few hundred bytes each."""


class PlanRow(NamedTuple):
    """What a promotion reads of a step (``core.plan.PlanStep``) and its wake-up needs."""

    step_id: str
    kind: str
    state: str
    depends_on: tuple[str, ...]
    environment: str


@dataclass(frozen=True, slots=True)
class KnownPlan:
    """A run's steps as its commit to ``version`` left them."""

    version: int
    rows: tuple[PlanRow, ...]

    def after(self, version: int, changes: Iterable[StepChange], added: Sequence[NewStep] = ()) -> KnownPlan:
        """The plan once a commit applied on this one wrote ``changes`` and ``added`` (to ``version``)."""
        by_step = {c.step_id: c for c in changes}
        environment = self.rows[0].environment if self.rows else ""
        rows = [r if (c := by_step.get(r.step_id)) is None else
                r._replace(state=c.state, depends_on=r.depends_on if c.depends_on is None else tuple(c.depends_on))
                for r in self.rows]
        rows += [PlanRow(s.step_id, s.kind, s.state, tuple(s.depends_on), environment) for s in added]
        return KnownPlan(version, tuple(sorted(rows)))


def of_new_run(version: int, environment: str, new_steps: Sequence[NewStep]) -> KnownPlan:
    return KnownPlan(version, tuple(sorted(PlanRow(s.step_id, s.kind, s.state, tuple(s.depends_on), environment)
                                           for s in new_steps)))


_PLANS: OrderedDict[tuple[str, str], KnownPlan] = OrderedDict()
_TAKEN: dict[tuple[str, str], _Taker] = {}
"""Runs whose plan an open transaction took."""
_MINE = "ira.known_plans"
"""``kept_by_transaction`` key: the plans this transaction wrote, by run."""
WAITS = 3
"""How many takers' ends a transaction waits for before it goes the usual way."""
WAIT_LIMIT = 1.0
"""Seconds a transaction waits here for the end of the one that took the plan before it goes the
usual way: its statement then waits for the run's row, where the database sees who waits for
whom. Commits of a run last milliseconds; a taker held longer (a transaction that took the plan
and then waits for a connection the waiters hold) must not hold them all with it."""


@dataclass(eq=False, slots=True)
class _Taker:
    """The open transaction that took a run's plan (by its kept dict), and its end."""

    transaction: int
    ended: asyncio.Event


async def take(conn: AsyncConnection, tenant_id: str, run_id: str) -> KnownPlan | None:
    """The run's plan for a commit in ``conn``'s transaction: as this transaction's last commit
    of it left it, else as the last committed one left it. Another open transaction that took it
    is waited for (it commits the run next, then this one on what it left) only by a transaction
    that has sent nothing yet, so holds no lock that one could be waiting for; one that has goes
    the usual way (None), as after ``WAITS`` takers."""
    kept = kept_by_transaction(conn)
    if kept is None:
        return None
    key = (tenant_id, run_id)
    mine: dict[tuple[str, str], KnownPlan | None] = kept.setdefault(_MINE, {})
    if key in mine:
        return mine[key]
    for _ in range(WAITS):
        plan, taker = _PLANS.get(key), _TAKEN.get(key)
        if plan is None:
            return None
        if taker is None:
            _mark(conn, key, id(kept))
            return plan
        if taker.transaction == id(kept):
            return plan
        if began(conn):
            return None
        try:
            async with asyncio.timeout(WAIT_LIMIT):
                await taker.ended.wait()
        except TimeoutError:
            return None
    return None


def _mark(conn: AsyncConnection, key: tuple[str, str], transaction: int) -> None:
    """``conn``'s transaction takes the run's plan until it ends."""
    taker = _TAKEN[key] = _Taker(transaction, asyncio.Event())
    when_ended(conn, lambda: _untake(key, taker))


def _untake(key: tuple[str, str], taker: _Taker) -> None:
    if _TAKEN.get(key) is taker:
        del _TAKEN[key]
    taker.ended.set()


def created(conn: AsyncConnection, tenant_id: str, run_id: str, plan: KnownPlan) -> None:
    """A new run's plan, as its creation in ``conn``'s transaction inserted it."""
    kept = kept_by_transaction(conn)
    if kept is None:
        return
    key = (tenant_id, run_id)
    kept.setdefault(_MINE, {})[key] = plan
    after_commit(conn, lambda: _keep(key, plan))


def committed(conn: AsyncConnection, tenant_id: str, run_id: str, *, base: KnownPlan | None, version: int,
              changes: Iterable[StepChange], added: Sequence[NewStep] = (), state: RunState | None = None) -> None:
    """A commit in ``conn``'s transaction took the run to ``version`` writing ``changes`` and
    ``added``; ``base``: the plan it applied on, if known. The transaction's next commits of the
    run know the plan it left where ``base`` was the version before; once it committed, the plan
    remembered for other transactions moves on the same way (a version missed on the way, a
    commit made elsewhere, and it is forgotten). An ended run's is forgotten: it readies nothing."""
    kept = kept_by_transaction(conn)
    if kept is None:
        return
    key, ended = (tenant_id, run_id), state in TERMINAL_RUN_STATES
    changes = tuple(changes)
    kept.setdefault(_MINE, {})[key] = base.after(version, changes, added) \
        if base is not None and base.version == version - 1 and not ended else None
    after_commit(conn, lambda: _advance(key, version, changes, added, ended))


def _keep(key: tuple[str, str], plan: KnownPlan) -> None:
    _PLANS[key] = plan
    _PLANS.move_to_end(key)
    while len(_PLANS) > MAX_RUNS:
        _PLANS.popitem(last=False)


def _advance(key: tuple[str, str], version: int, changes: Sequence[StepChange], added: Sequence[NewStep],
             ended: bool) -> None:
    current = _PLANS.get(key)
    if current is None or current.version >= version:
        return
    if ended or current.version != version - 1:
        del _PLANS[key]
        return
    _keep(key, current.after(version, changes, added))


def forget_all() -> None:
    """Tests: start from nothing known."""
    _PLANS.clear()
    _TAKEN.clear()
