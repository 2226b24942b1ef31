"""Roles: the units ``ira dev`` and ``ira worker --role`` run.

A role is found through the ``ira.roles`` entry point group, so runtime/ never imports a
service package: ``sources`` registers ``gateway``, ``triage`` registers ``triage``, and so on.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Protocol, cast

if TYPE_CHECKING:
    from ira.runtime.http import Route
    from ira.runtime.platform import Platform
    from ira.runtime.readiness import ReadinessCheck
    from ira.runtime.settings import Settings

ENTRY_POINT_GROUP = "ira.roles"


class Role(Protocol):
    """One job of the platform: optional HTTP routes plus an optional background loop."""

    name: str

    def routers(self, platform: Platform) -> Sequence[Route]:
        """Routers and lanes this role adds to the HTTP app (empty if none)."""
        ...

    async def run(self, platform: Platform, stop: asyncio.Event) -> None:
        """Work until ``stop`` is set, then return after releasing what it holds."""
        ...


class DoctorChecks(Protocol):
    """A role that can say whether the outside systems it is configured for work (``ira doctor``)."""

    def doctor_checks(self, settings: Settings) -> dict[str, ReadinessCheck]:
        """Check name -> check; each raises with a one-line reason when something is wrong."""
        ...


def doctor_checks(roles: Iterable[object], settings: Settings) -> dict[str, ReadinessCheck]:
    """The checks of every role that offers some."""
    found: dict[str, ReadinessCheck] = {}
    for role in roles:
        if callable(getattr(role, "doctor_checks", None)):
            found |= cast(DoctorChecks, role).doctor_checks(settings)
    return found


def load_roles() -> dict[str, Role]:
    """Every installed role by name, in a stable order."""
    found = {ep.name: ep.load() for ep in entry_points(group=ENTRY_POINT_GROUP)}
    return dict(sorted(found.items()))
