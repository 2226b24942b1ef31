"""Duties: what a supervised process's loops report about themselves, so that ``/readyz`` and
a stop can tell "handling accepted work" from "merely started".

A :class:`Duty` is one loop that handles work other parts have already accepted (a consumer,
the outbox relay). It says when it is *ready* (a consumer: joined its group and got its
assignment — not merely constructed, which is ~half a session timeout earlier on Tansu) and
whether it is *idle* (a consumer: its last fetch found nothing and no record is in hand; the
relay: its last pass moved no row). The supervisor answers ``/readyz`` 200 only when every
duty is ready, and a stop waits until every duty has stayed idle for a while.

Loops find the roster through a context variable that the supervisor sets when it creates
the role tasks, so the many places that build consumers (each role's composition root) need
no new argument; outside a supervisor (unit tests) a duty is detached and reports to nobody.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import timedelta

QUIET_FOR = timedelta(seconds=1.5)
"""How long every duty must stay idle, with no work done meanwhile, to count as drained: longer
than a consumer's fetch wait (0.5 s) plus a relay poll, so a message in flight between a
relay and a consumer is seen as work, not as silence."""


@dataclass
class Duty:
    """One loop's self-report; the loop writes it, the supervisor reads it."""

    name: str
    ready: bool = False
    idle: bool = False
    done: int = 0
    """Units of work finished so far: quiet means this stopped moving, not only ``idle`` now."""
    finished: bool = False

    def is_ready(self) -> bool:
        return self.ready and not self.finished

    def report(self, *, idle: bool, done: int = 0) -> None:
        self.idle, self.done = idle, self.done + done


class DutyRoster:
    """The duties of one process."""

    def __init__(self) -> None:
        self._duties: list[Duty] = []
        self.settled = False
        """Set by the supervisor once the roles had their start and every duty was ready."""

    def enlist(self, name: str) -> Duty:
        duty = Duty(name)
        self._duties.append(duty)
        return duty

    def unready(self) -> list[str]:
        """Names of duties not (or no longer) ready; a finished loop is not handling work."""
        return [d.name for d in self._duties if not d.is_ready()]

    def busy(self) -> list[str]:
        return [d.name for d in self._duties if not d.finished and not d.idle]

    def _work_done(self) -> int:
        return sum(d.done for d in self._duties)

    async def settle(self, *, within: timedelta, steady_for: timedelta = timedelta(milliseconds=300)) -> bool:
        """Wait until every duty is ready and no new one enlisted for ``steady_for`` (a role may
        build its consumer after a first await); sets :attr:`settled`. False on timeout."""
        deadline = time.monotonic() + within.total_seconds()
        since, count = time.monotonic(), -1
        while time.monotonic() < deadline:
            if self.unready() or len(self._duties) != count:
                since, count = time.monotonic(), len(self._duties)
            elif time.monotonic() - since >= steady_for.total_seconds():
                self.settled = True
                return True
            await asyncio.sleep(0.05)
        return False

    async def quiet(self, *, within: timedelta, quiet_for: timedelta = QUIET_FOR) -> bool:
        """Wait until every duty has been idle, with no work done, for ``quiet_for``; False if
        ``within`` passed first (the caller stops anyway: the deadline is the operator's)."""
        deadline = time.monotonic() + within.total_seconds()
        since, seen = None, -1
        while time.monotonic() < deadline:
            now, done = time.monotonic(), self._work_done()
            if self.busy() or done != seen:
                since, seen = None, done
            elif since is None:
                since = now
            elif now - since >= quiet_for.total_seconds():
                return True
            await asyncio.sleep(0.05)
        return False

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        """Tasks created inside this block report to this roster."""
        token = _current.set(self)
        try:
            yield
        finally:
            _current.reset(token)


_current: ContextVar[DutyRoster | None] = ContextVar("ira_duty_roster", default=None)


def enlist(name: str) -> Duty:
    """A duty on the roster of the supervisor that started this task (detached if none)."""
    roster = _current.get()
    return roster.enlist(name) if roster is not None else Duty(name)
