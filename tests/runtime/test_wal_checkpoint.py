"""SQLite's WAL is checkpointed on the Database's own thread, never by a commit (store/wal_checkpoint.py).

What must hold: a write transaction's commit copies nothing into the database file (that copy
and its fsyncs stalled the event loop for 5-50 ms once in ~100 commits); the checkpointer
thread does it soon after the writes; closing the Database ends the thread.
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from sqlalchemy import text

from ira.runtime.store.database import Database
from ira.runtime.store.wal_checkpoint import WalCheckpointer
from tests.eventually import eventually

PAYLOAD = "x" * 3000  # a row of most of a 4 KiB page: 1,500 rows are well past SQLite's 1,000-page threshold


@asynccontextmanager
async def _blobs_db(path: Path) -> AsyncIterator[Database]:
    """A SQLite file with a table of blobs (its connections get the pragmas in force when they open)."""
    db = Database.create(f"sqlite:///{path}")
    try:
        async with db.transaction() as conn:
            await conn.execute(text("CREATE TABLE blobs (id INTEGER PRIMARY KEY, body TEXT NOT NULL)"))
        yield db
    finally:
        await db.close()


@pytest.fixture
async def sqlite_db(tmp_path: Path):  # type: ignore[no-untyped-def]
    async with _blobs_db(tmp_path / "ira.db") as db:
        yield db, tmp_path / "ira.db"


async def _write(db: Database, rows: int) -> None:
    for _ in range(0, rows, 100):
        async with db.transaction() as conn:
            await conn.execute(text("INSERT INTO blobs (body) VALUES (:body)"), [{"body": PAYLOAD}] * 100)


def _copied_all(checkpointer: WalCheckpointer, frames: int = 0) -> bool:
    """The last checkpoint ran unhindered and copied every frame of a WAL of at least ``frames``."""
    last = checkpointer.last
    return last is not None and last[0] == 0 and last[1] == last[2] and last[1] >= frames


def _checkpointer_threads() -> list[threading.Thread]:
    return [thread for thread in threading.enumerate() if thread.name.startswith("ira-wal-checkpoint")]


async def test_commits_leave_the_wal_to_the_checkpointer(sqlite_db) -> None:  # type: ignore[no-untyped-def]
    db, path = sqlite_db
    checkpointer = db.wal_checkpointer
    assert checkpointer is not None
    checkpointer.stop()  # nothing checkpoints now but a commit, if commits still did
    checkpointer.written = lambda: None  # type: ignore[method-assign]
    size = path.stat().st_size
    await _write(db, 1500)
    assert path.stat().st_size == size, "a commit copied the WAL into the database file"
    assert Path(f"{path}-wal").stat().st_size > 1000 * 4096


async def test_the_checkpointer_copies_the_writes_soon_after_them(sqlite_db) -> None:  # type: ignore[no-untyped-def]
    db, path = sqlite_db
    checkpointer = db.wal_checkpointer
    assert checkpointer is not None
    size = path.stat().st_size
    await _write(db, 1500)

    await eventually(lambda: _copied_all(checkpointer) and path.stat().st_size > size + 1000 * 4096, timeout=10)
    assert _checkpointer_threads()
    async with db.reader() as conn:  # the rows are where they were, read through the database
        assert (await conn.execute(text("SELECT count(*) FROM blobs"))).scalar_one() == 1500


async def test_closing_the_database_ends_its_checkpointer(tmp_path: Path) -> None:
    db = Database.create(f"sqlite:///{tmp_path / 'ira.db'}")
    async with db.transaction() as conn:
        await conn.execute(text("CREATE TABLE t (n INTEGER)"))
    assert db.wal_checkpointer is not None and any(str(tmp_path) in t.name for t in _checkpointer_threads())
    await db.close()
    assert not any(str(tmp_path) in t.name for t in _checkpointer_threads())


async def test_the_wal_file_shrinks_back_once_sqlite_starts_it_over(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Under load SQLite seldom finds the moment to start the WAL over, so the file grows past
    what was checkpointed; once it does start over, the file is cut back to the limit instead
    of staying at its largest size on disk."""
    limit = 256 * 1024
    monkeypatch.setattr("ira.runtime.store.wal_checkpoint.WAL_SIZE_LIMIT", limit)
    path = tmp_path / "ira.db"
    async with _blobs_db(path) as db:
        checkpointer = db.wal_checkpointer
        assert checkpointer is not None
        async with db.reader() as conn:
            await conn.execute(text("SELECT 1"))  # the reader pool's connection exists (and is idle)
        await _write(db, 500)  # one write transaction per 100 rows: ~2 MB of WAL in a quiet process
        assert Path(f"{path}-wal").stat().st_size > 1024 * 1024
        await eventually(lambda: _copied_all(checkpointer, frames=500), timeout=10)  # a page a row
        async with db.transaction() as conn:  # no reader on the WAL: this writer starts it over
            await conn.execute(text("INSERT INTO blobs (body) VALUES (:body)"), [{"body": PAYLOAD}] * 10)
        assert Path(f"{path}-wal").stat().st_size <= limit
        async with db.reader() as conn:
            assert (await conn.execute(text("SELECT count(*) FROM blobs"))).scalar_one() == 510
