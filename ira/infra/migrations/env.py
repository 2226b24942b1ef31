"""Alembic environment. ira runs it through ``ira.runtime.store.migrate`` with a live
connection (``config.attributes["connection"]``), so it works inside an event loop."""

from __future__ import annotations

from alembic import context

from ira.runtime.store.schema import metadata

connection = context.config.attributes.get("connection")
if connection is None:
    raise SystemExit("run migrations with `ira db upgrade`, not the alembic command")

context.configure(
    connection=connection,
    target_metadata=metadata,
    render_as_batch=True,  # SQLite can only ALTER through table copies
    compare_type=True,
)
with context.begin_transaction():
    context.run_migrations()
