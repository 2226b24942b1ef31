"""Roles: the units ``ira dev`` and ``ira worker --role`` run.

A role is found through the ``ira.roles`` entry point group, so runtime/ never imports a
service package: ``sources`` registers ``gateway``, ``triage`` registers ``triage``, and so on.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Protocol, runtime_checkable

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


@runtime_checkable
class ChecksOutside(Protocol):
    """A role that talks to an outside service ``ira doctor`` should probe (Slack, ...)."""

    def doctor_checks(self, settings: Settings) -> Mapping[str, ReadinessCheck]:
        """Checks by name for what ``settings`` configures; empty when nothing is."""
        ...


def load_roles() -> dict[str, Role]:
    """Every installed role by name, in a stable order."""
    found = {ep.name: ep.load() for ep in entry_points(group=ENTRY_POINT_GROUP)}
    return dict(sorted(found.items()))
