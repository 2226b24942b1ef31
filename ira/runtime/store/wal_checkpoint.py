"""SQLite's WAL checkpoints on a thread of their own, never inside a write transaction's commit.

By default SQLite checkpoints on the commit that grows the WAL past 1,000 pages: that commit
copies the WAL's pages into the database file and fsyncs both (``synchronous=NORMAL`` fsyncs
only there). A write transaction commits on the event loop's thread
(``sqlite_driver.begin_writing``), so one commit in ~100 stopped every coroutine of the
process for 5-50 ms: measured under bench/start_cpu.py (a burst of 300 runs, loaded
machine), commits over 2 ms were 73 % of all commit time (1,058 of 1,448 ms) and the p99 commit
took 11 ms against a p50 of 0.13 ms.

So the store's connections have ``wal_autocheckpoint=0`` and this thread, one per
``Database`` on a SQLite file, runs a PASSIVE checkpoint after writes, at most every
``interval``: it copies what no reader still needs, waits for no lock and takes none that a
writer or a reader waits for (SQLite's checkpoint lock only keeps two checkpoints apart: one
that finds another running, another process's, returns busy and is tried again later). The
GIL is released while SQLite works, so the copy and its fsyncs use the other core instead of
the event loop. Durability is unchanged: a commit is in the WAL either way, and a crash
before a checkpoint is recovered from the WAL as before.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from pathlib import Path

log = logging.getLogger(__name__)

WAL_SIZE_LIMIT = 64 * 1024 * 1024
"""Bytes of WAL file SQLite keeps once the WAL starts over (``PRAGMA journal_size_limit``).

SQLite starts the WAL over from its beginning only when a writer begins while every frame has
been copied and no reader still reads from the WAL; under steady load that moment is rare, so
the WAL grows past what the checkpoints copied (bench/engine.py's ira on SQLite: 51 MB after
warming up and 100 runs one at a time, 219 MB after a burst of 300, 372 MB after approving
them, every frame of it checkpointed). Without a limit the file then stays at its largest size
for good, on the machine's disk; with one, the writer that starts the WAL over truncates it to
the limit. A limit above what a checkpoint interval writes means no truncate-and-regrow churn."""

INTERVAL = 0.5
"""Seconds between checkpoints while writes come in. A checkpoint's cost is mostly fixed (the WAL's
and the database file's fsyncs, a walk of the WAL index) plus the pages it copies, of which the hot
ones (an index's inner pages, a table's last page) are copied once however often they were
written since the last: every 0.1 s, the checkpointer was 9.6-11.7 % of the triage child's
samples and 8.9 % of the ``ira`` process's while triage drained batches of 100 in ``ira dev``;
every 0.5 s, 5.5-6.5 % and 4.1 % (every 1 s, 4.2 % and 3.4 %: little more). At bench/engine.py's
~3,400 WAL frames a second that is ~1,700 frames a checkpoint, near SQLite's own 1,000-page
threshold."""


class WalCheckpointer:
    """Checkpoints one SQLite database file after writes (module docstring).

    ``written()`` is what a committing thread calls: it sets a flag and never waits."""

    def __init__(self, path: str, *, interval: float = INTERVAL) -> None:
        self._path, self._interval = path, interval
        self._wanted = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self.last: tuple[int, int, int] | None = None
        """The last checkpoint's (busy, frames in the WAL, frames checkpointed), for tests and gauges."""
        self.runs = 0

    def written(self) -> None:
        """A write transaction committed: checkpoint soon (starts the thread on first use)."""
        self._wanted.set()
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name=f"ira-wal-checkpoint {self._path}", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """End the thread after one last checkpoint of what was written (bounded by its run)."""
        self._stopping.set()
        self._wanted.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None

    def _loop(self) -> None:
        try:
            # mode=rw: a file removed meanwhile (a test's directory at its end) is not created again
            conn = sqlite3.connect(Path(self._path).resolve().as_uri() + "?mode=rw", uri=True, timeout=0,
                                   isolation_level=None)
        except sqlite3.Error:
            log.exception("cannot open %s for checkpoints: the WAL grows until the last connection closes", self._path)
            return
        try:
            while True:
                self._wanted.wait()
                stopping = self._stopping.is_set()
                self._wanted.clear()
                self._checkpoint(conn)
                if stopping or self._stopping.wait(self._interval):
                    if self._wanted.is_set():
                        self._checkpoint(conn)  # what was committed since, before the thread ends
                    return
        finally:
            conn.close()

    def _checkpoint(self, conn: sqlite3.Connection) -> None:
        try:
            row = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        except sqlite3.Error as error:  # another process checkpointing, the file gone at shutdown
            log.debug("checkpoint of %s skipped: %s", self._path, error)
            self._wanted.set()  # try again after the interval
            return
        self.runs += 1
        self.last = (int(row[0]), int(row[1]), int(row[2]))
