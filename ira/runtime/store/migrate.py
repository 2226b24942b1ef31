"""Bring a database to the newest schema with Alembic (``ira db upgrade``, tests, ``ira dev``)."""

from __future__ import annotations

from importlib.resources import files
from typing import Any

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

from ira.runtime.store.database import Database


def _config(connection: Any = None) -> Config:
    config = Config()
    config.set_main_option("script_location", str(files("ira.infra") / "migrations"))
    config.attributes["connection"] = connection
    return config


async def upgrade(db: Database, revision: str = "heads") -> None:
    """Apply every migration up to ``revision`` (idempotent: a current database is left alone).

    "heads": each service package keeps its tables on its own branch off the runtime's base,
    so packages can add migrations without a shared chain.
    """

    def run(sync_connection: Any) -> None:
        command.upgrade(_config(sync_connection), revision)

    async with db.engine.begin() as conn:
        await conn.run_sync(run)


async def pending(db: Database) -> list[str]:
    """Revisions not yet applied: ``/readyz`` and ``ira doctor`` report a stale schema."""

    def check(sync_connection: Any) -> list[str]:
        current = set(MigrationContext.configure(sync_connection).get_current_heads())
        script = ScriptDirectory.from_config(_config())
        applied = {r.revision for r in script.iterate_revisions(tuple(current), "base")} if current else set()
        return sorted(r.revision for r in script.walk_revisions() if r.revision not in applied)

    async with db.engine.connect() as conn:
        return await conn.run_sync(check)
