"""One handle on the SQL database: engine, write transactions, reads.

SQLite needs care to behave under concurrency: WAL so readers never block the writer,
``BEGIN IMMEDIATE`` so a write transaction takes the write lock up front (instead of failing
half-way with "database is locked"), and an in-process lock so coroutines queue on an
asyncio primitive rather than on SQLite's busy-wait. PostgreSQL needs none of this: its row
locks and conditional UPDATEs give the compare-and-set semantics directly.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import (
    AbstractAsyncContextManager,
    AbstractContextManager,
    asynccontextmanager,
    contextmanager,
    nullcontext,
)
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

import orjson
from sqlalchemy import event, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DisconnectionError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from ira.core.commit import OutboxMessage
from ira.core.run import Claim, Run, Step
from ira.runtime.store import pg_fast, sqlite_driver, wal_checkpoint
from ira.runtime.store.pg_kept import KeptConnections
from ira.runtime.store.sqlite_writer import SQLiteWriter
from ira.runtime.store.wal_checkpoint import WalCheckpointer

log = logging.getLogger(__name__)
_WRITTEN = "ira_outbox_written"
_READER = "ira_reader"


class CommitListener(Protocol):
    """Hears of the outbox messages a transaction writes (eager dispatch, ``StepIntake``)."""

    def take(self, message: OutboxMessage) -> str | None:
        """While the transaction writes ``message``: will this process run it itself once the
        transaction commits? The name of the taker reserves it (it then gets no outbox row, see
        ``outbox.enqueue``); None leaves it to the relay."""

    async def taken(self, conn: AsyncConnection, message: OutboxMessage) -> None:
        """Still in the transaction, once the rest of its write went out (a taken message gets
        no row): what taking it means, in this same transaction (the intake claims the step here)."""

    def committed(self, messages: Sequence[OutboxMessage]) -> None:
        """Right after the commit: every message it wrote, the taken ones included."""

    def abandoned(self, messages: Sequence[OutboxMessage]) -> None:
        """The transaction did not commit (or its commit could not be confirmed): these
        messages, which this listener took, will not come to ``committed``."""


class ClaimsAtInsert(Protocol):
    """A ``CommitListener`` that lets the store write the step of a wake-up it took already
    claimed by it, in the step's own INSERT (a new run's READY steps: ``runs.create_run``),
    instead of claiming it in ``taken`` with an UPDATE of the row the same transaction just
    inserted. Optional: a listener without these methods is always asked to ``taken``."""

    def lease_at_insert(self, message: OutboxMessage) -> datetime | None:
        """The lease's end if the step of ``message`` (taken by this listener) may be written
        claimed by it; None: claim it in ``taken``, as usual."""

    def claimed_at_insert(self, message: OutboxMessage, claim: Claim, step: Step, run: Run) -> None:
        """Instead of ``taken``: the step of ``message`` was inserted claimed by ``claim``, as
        ``step``, in the run ``run`` the same transaction created."""

    def claimed_at_promotion(self, message: OutboxMessage, claim: Claim, step: Step, run: Run) -> None:
        """Instead of ``taken``: the step of ``message`` was claimed by ``claim`` as the same
        transaction readied it (PostgreSQL: ``folded_cas``), as ``step``; ``run`` as it left it."""


@dataclass
class _Written:
    """What one write transaction tells after it committed (kept in its connection's ``info``)."""

    listeners: list[CommitListener]
    messages: list[OutboxMessage] = field(default_factory=list)
    taken: dict[str, tuple[CommitListener, OutboxMessage]] = field(default_factory=dict)
    after_commit: list[Callable[[], None]] = field(default_factory=list)
    before_commit: list[Callable[[], Awaitable[None]]] = field(default_factory=list)
    after_end: list[Callable[[], None]] = field(default_factory=list)
    kept: dict[str, Any] = field(default_factory=dict)


def take_written(conn: AsyncConnection, messages: Sequence[OutboxMessage]) -> dict[str, str]:
    """Note outbox messages written in ``conn``'s transaction for the commit listeners; returns
    ``{message_id: taker}`` of those a listener of this process takes once it commits."""
    written: _Written | None = conn.info.get(_WRITTEN)
    if written is None:
        return {}
    written.messages.extend(messages)
    taken: dict[str, str] = {}
    for message in messages:
        for listener in written.listeners:
            taker = listener.take(message)
            if taker is not None:
                taken[message.envelope.message_id] = taker
                written.taken[message.envelope.message_id] = (listener, message)
                break
    return taken


def untake_written(conn: AsyncConnection, message_ids: Iterable[str]) -> None:
    """Undo ``take_written`` for the messages the transaction will not write after all (a
    statement that was to write them was refused and wrote nothing): the listeners that took
    one hear it abandoned, and the commit does not announce them."""
    written: _Written | None = conn.info.get(_WRITTEN)
    ids = set(message_ids)
    if written is None or not ids:
        return
    written.messages[:] = [m for m in written.messages if m.envelope.message_id not in ids]
    _tell_abandoned([written.taken.pop(i) for i in ids if i in written.taken])


async def settle_taken(conn: AsyncConnection, taken: dict[str, str],
                       claimed: Mapping[str, tuple[Claim, Step, Run]] | None = None, *, promoted: bool = False
                       ) -> None:
    """Let the listeners act, in ``conn``'s transaction, on the messages they took (``taken``);
    ``claimed``: those whose steps were inserted claimed already (``lease_at_insert``), or
    claimed as they were readied (``promoted``), by message id."""
    written: _Written | None = conn.info.get(_WRITTEN)
    if written is None:
        return
    for message_id in taken:
        listener, message = written.taken[message_id]
        done = claimed.get(message_id) if claimed else None
        if done is not None and promoted:
            listener.claimed_at_promotion(message, *done)  # type: ignore[attr-defined]
        elif done is not None:
            listener.claimed_at_insert(message, *done)  # type: ignore[attr-defined]
        else:
            await listener.taken(conn, message)


def taken_wakeup(conn: AsyncConnection, tenant_id: str, run_id: str, step_id: str
                 ) -> tuple[CommitListener, OutboxMessage] | None:
    """The listener that took, in ``conn``'s transaction so far, the wake-up of this step, and
    that message (``StepIntake.run_here``); None if no listener took one."""
    written: _Written | None = conn.info.get(_WRITTEN)
    for listener, message in written.taken.values() if written is not None else ():
        envelope = message.envelope
        if (envelope.tenant_id, envelope.payload.get("run_id"), envelope.payload.get("step_id")) == (
                tenant_id, run_id, step_id):
            return listener, message
    return None


def lease_at_insert(conn: AsyncConnection, message_id: str) -> datetime | None:
    """The lease's end under which the listener that took ``message_id`` in this transaction
    lets the store insert its step already claimed (``ClaimsAtInsert``); None if it does not."""
    written: _Written | None = conn.info.get(_WRITTEN)
    if written is None or message_id not in written.taken:
        return None
    listener, message = written.taken[message_id]
    ask: Callable[[OutboxMessage], datetime | None] | None = getattr(listener, "lease_at_insert", None)
    return ask(message) if ask is not None else None


def after_commit(conn: AsyncConnection, callback: Callable[[], None]) -> bool:
    """Call ``callback`` once ``conn``'s transaction (a ``Database.transaction``) committed;
    False (and no call) where the transaction is not one that can tell."""
    written: _Written | None = conn.info.get(_WRITTEN)
    if written is None:
        return False
    written.after_commit.append(callback)
    return True


def before_commit(conn: AsyncConnection, callback: Callable[[], Awaitable[None]]) -> bool:
    """Await ``callback`` in ``conn``'s transaction (a ``Database.transaction``) right before it
    commits, after the block's last statement: writes that waited for a later statement of the
    transaction and got none (an exception it raises rolls the transaction back). False (and no
    call) where the transaction is not one that can tell."""
    written: _Written | None = conn.info.get(_WRITTEN)
    if written is None:
        return False
    written.before_commit.append(callback)
    return True


def must_not_commit(conn: AsyncConnection, error: Exception) -> None:
    """``conn``'s transaction (a ``Database.transaction``) wrote what it must not keep: it raises
    ``error`` instead of committing, whatever its caller does after (a caller that caught an
    error of a statement and went on)."""

    async def refuse() -> None:
        raise error

    before_commit(conn, refuse)


def when_ended(conn: AsyncConnection, callback: Callable[[], None]) -> bool:
    """Call ``callback`` once ``conn``'s transaction (a ``Database.transaction``) ended, committed
    or not; False (and no call) where the transaction is not one that can tell."""
    written: _Written | None = conn.info.get(_WRITTEN)
    if written is None:
        return False
    written.after_end.append(callback)
    return True


def kept_by_transaction(conn: AsyncConnection) -> dict[str, Any] | None:
    """A dict that lives exactly as long as ``conn``'s transaction (a ``Database.transaction``),
    for what its writers keep between statements; dropped with it, committed or not (the
    connection's own ``info`` outlives it, into the next transaction on that connection). None
    outside one."""
    written: _Written | None = conn.info.get(_WRITTEN)
    return written.kept if written is not None else None


def tells_commit(conn: AsyncConnection) -> bool:
    """Whether ``after_commit`` would take a callback on ``conn``: ask before writing what
    only a callback registered after the write may report."""
    return conn.info.get(_WRITTEN) is not None


def is_reader(conn: AsyncConnection) -> bool:
    """Whether ``conn`` is a ``Database.reader``: what it reads is committed."""
    return bool(conn.info.get(_READER))


def normalize_url(url: str) -> str:
    """Accept the URLs people type (``postgresql://``, ``sqlite:///x.db``) and pick async drivers."""
    parsed = make_url(url)
    backend = parsed.get_backend_name()
    if backend == "postgresql":
        parsed = parsed.set(drivername="postgresql+asyncpg")
    elif backend == "sqlite":
        sqlite_driver.register()
        parsed = parsed.set(drivername=f"sqlite+{sqlite_driver.DRIVER}")
    else:
        raise ValueError(f"unsupported database {backend!r}: use sqlite or postgresql")
    return parsed.render_as_string(hide_password=False)


def _install_sqlite_hooks(engine: AsyncEngine) -> None:
    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # we issue BEGIN ourselves
        cursor = dbapi_connection.cursor()
        # wal_autocheckpoint=0: no commit checkpoints; the Database's WalCheckpointer does, on its thread;
        # journal_size_limit: the WAL file shrinks back when it starts over (wal_checkpoint.WAL_SIZE_LIMIT)
        for pragma in ("journal_mode=WAL", "synchronous=NORMAL", f"busy_timeout={sqlite_driver.BUSY_TIMEOUT_MS}",
                       "foreign_keys=ON", "wal_autocheckpoint=0",
                       f"journal_size_limit={wal_checkpoint.WAL_SIZE_LIMIT}"):
            cursor.execute(f"PRAGMA {pragma}")
        cursor.close()

    @event.listens_for(engine.sync_engine, "reset")
    def _on_reset(dbapi_connection: Any, _record: Any, state: Any) -> None:
        """The pool's reset on return (``pool_reset_on_return=None`` leaves it to this): roll
        back only a transaction that is still open. After a commit, or a read whose connection
        ended its transaction already, there is none, and a rollback would only cost a trip to
        aiosqlite's thread per transaction."""
        if state.asyncio_safe and sqlite_driver.is_in_transaction(dbapi_connection):
            dbapi_connection.rollback()


def _install_postgres_hooks(engine: AsyncEngine) -> None:
    @event.listens_for(engine.sync_engine, "checkout")
    def _on_checkout(dbapi_connection: Any, _record: Any, _proxy: Any) -> None:
        """A pooled connection the server closed (a restart, a failover, a terminated backend)
        is replaced before anything uses it: the pool takes the DisconnectionError as its cue
        to open a new one.

        This is the check ``pool_pre_ping`` made with three round trips (BEGIN, an empty
        statement, ROLLBACK) on every checkout, a quarter of a durable step's trips; asyncpg
        learns of the close from the socket, which the event loop reads while the connection
        idles in the pool, so asking it costs none. A connection cut so recently that its close
        is not read yet fails its first statement instead, as it could between a ping and that
        statement: SQLAlchemy reports a disconnect (``connection_invalidated``), which the
        callers retry (``bus.record.is_lost_connection``, the group commit), and drops the
        pool's other connections opened before it."""
        if dbapi_connection.driver_connection.is_closed():
            raise DisconnectionError("the server closed this pooled connection")


@contextmanager
def _marked(info: dict[Any, Any], key: str, value: object) -> Iterator[None]:
    """``info[key] = value`` while the block runs (a connection's dict, which outlives the block)."""
    info[key] = value
    try:
        yield
    finally:
        info.pop(key, None)


def _tell_abandoned(taken: Iterable[tuple[CommitListener, OutboxMessage]]) -> None:
    """Each listener hears which of the messages it took will not be written."""
    by_listener: dict[int, tuple[CommitListener, list[OutboxMessage]]] = {}
    for listener, message in taken:
        by_listener.setdefault(id(listener), (listener, []))[1].append(message)
    for listener, messages in by_listener.values():
        try:
            listener.abandoned(messages)
        except Exception:
            log.exception("a commit listener failed")


def json_dumps(value: Any) -> str:
    """A JSON column's value as text, through orjson: the standard library's ``json.dumps`` cost
    ~4.5 us per value, and triage writes two per alert (the alert's payload, the evaluation's
    basis). A value orjson refuses (an int past 64 bits, a non-string key) takes json's way."""
    try:
        return orjson.dumps(value).decode()
    except TypeError:
        return json.dumps(value)


class Database:
    """The store's connection to SQLite or PostgreSQL."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self.dialect = engine.dialect.name
        self._write_lock = asyncio.Lock() if self.dialect == "sqlite" else None
        self._writer = SQLiteWriter(engine, self._write_lock) if self._write_lock is not None else None
        self._pg_kept = KeptConnections(engine) if self.dialect == "postgresql" else None
        """PostgreSQL: write transactions and reads on kept connections (``pg_kept``)."""
        path = engine.url.database if self.dialect == "sqlite" else None
        self.wal_checkpointer = WalCheckpointer(path) if path and path != ":memory:" else None
        """SQLite file: checkpoints the WAL after commits, on its own thread (``wal_checkpoint``)."""
        self._listeners: list[CommitListener] = []
        self._relay_wakers: list[Callable[[], None]] = []

    @classmethod
    def create(cls, url: str, *, schema: str | None = None, pool_size: int = 20) -> Database:
        """Build (not connect) a database handle; ``schema`` isolates PostgreSQL tests.

        PostgreSQL: ``pool_size`` is the most connections the handle opens, a fixed pool. With an
        overflow beyond it (there was one of the same size), every connection returned while the
        pool held ``pool_size`` idle was closed, so each burst past that opened its connections
        anew: a backend forked, its caches filled and every statement prepared again (three approve
        bursts of 200 runs opened 54-114 connections for a limit of 40, now 42)."""
        url = normalize_url(url)
        options: dict[str, Any] = {"json_serializer": json_dumps}
        if url.startswith("sqlite"):
            database = make_url(url).database
            if database and database != ":memory:":
                Path(database).parent.mkdir(parents=True, exist_ok=True)
            # check_same_thread: a write transaction runs inline on the loop's thread (sqlite_driver)
            options["connect_args"] = {"timeout": 30, "check_same_thread": False}
            options["pool_reset_on_return"] = None  # _on_reset rolls back what is still open
        else:
            options.update(pool_size=pool_size, max_overflow=0)  # no pre-ping: _on_checkout
            if schema:
                options["connect_args"] = {"server_settings": {"search_path": schema}}
        engine = create_async_engine(url, **options)
        if engine.dialect.name == "sqlite":
            _install_sqlite_hooks(engine)
        else:
            _install_postgres_hooks(engine)
            engine = pg_fast.FastEngine(engine.sync_engine)  # statements on asyncpg's prepared statements
        return cls(engine)

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[AsyncConnection]:
        """A write transaction: commits when the block ends, rolls back on any error.

        Once it committed, the ``after_commit`` callbacks run and the listeners hear of the
        outbox messages it wrote; a transaction that did not commit announces nothing, and
        listeners that took a message (``take_written``) hear that it was abandoned.
        """
        written = _Written(listeners=list(self._listeners))
        try:
            async with self._committed(written) as conn:
                yield conn
        finally:  # last: whoever waits for this transaction's end finds what its commit told
            for ended in written.after_end:
                try:
                    ended()
                except Exception:
                    log.exception("an end-of-transaction callback failed")

    @asynccontextmanager
    async def _committed(self, written: _Written) -> AsyncIterator[AsyncConnection]:
        """``transaction`` up to its end callbacks: commit, then the after-commit callbacks and
        the listeners."""
        committed = False
        try:
            async with self._begin() as conn:
                # the pooled connection's dict, taken now: a cancelled statement invalidates the
                # connection, and reaching ``conn.info`` then would raise over the cancellation
                with _marked(conn.info, _WRITTEN, written), self._later(conn):
                    yield conn
                    for sending in written.before_commit:
                        await sending()
                    await pg_fast.flush_later(conn)  # the inserts still waiting, before COMMIT
            committed = True
        finally:
            if not committed:
                _tell_abandoned(written.taken.values())
        if self.wal_checkpointer is not None:
            self.wal_checkpointer.written()
        for callback in written.after_commit:
            try:
                callback()
            except Exception:
                log.exception("an after-commit callback failed")
        for listener in written.listeners if written.messages else ():
            try:
                listener.committed(written.messages)
            except Exception:  # the commit stands; the outbox row or the scanner still wakes the work
                log.exception("a commit listener failed")
        if self._relay_wakers and any(m.envelope.message_id not in written.taken for m in written.messages):
            for wake in self._relay_wakers:
                wake()

    def _later(self, conn: AsyncConnection) -> AbstractContextManager[None]:
        """PostgreSQL: the transaction's queue of inserts sent with its next statement
        (``pg_fast.write_later``)."""
        return _marked(conn.info, pg_fast.LATER, []) if self.dialect == "postgresql" else nullcontext()

    def _begin(self) -> AbstractAsyncContextManager[AsyncConnection]:
        """The transaction itself: SQLite's under the write lock (``SQLiteWriter``), PostgreSQL's
        on a kept connection (``KeptConnections``)."""
        if self._writer is not None:
            return self._writer.transaction()
        if self._pg_kept is not None:
            return self._pg_kept.transaction()
        return self.engine.begin()

    @contextmanager
    def listening(self, listener: CommitListener) -> Iterator[None]:
        """Hear of every committed outbox message while the block runs (a role's lifetime)."""
        self._listeners.append(listener)
        try:
            yield
        finally:
            self._listeners.remove(listener)

    @contextmanager
    def waking_relay(self, wake: Callable[[], None]) -> Iterator[None]:
        """Call ``wake`` right after each commit that wrote an outbox message no listener of this
        process took (its row waits for a relay) while the block runs (a relay's lifetime): the
        relay of this process publishes it then instead of at its next poll. Rows other processes
        write, and messages written outside ``outbox.enqueue`` and the run's commits (the
        webhook's alerts, which ``enqueue_new`` announces only when urgent), wait for the poll."""
        self._relay_wakers.append(wake)
        try:
            yield
        finally:
            self._relay_wakers.remove(wake)

    @asynccontextmanager
    async def reader(self) -> AsyncIterator[AsyncConnection]:
        """A read-only view; on SQLite it never waits for the writer; on PostgreSQL its reads
        run without a transaction around them (``pg_fast.reading_without_transaction``), on a
        kept connection (``pg_kept``)."""
        opened = self._pg_kept.read() if self._pg_kept is not None else self.engine.connect()
        async with opened as conn:
            with _marked(conn.info, _READER, True):  # the dict taken now, as in ``transaction``
                yield conn

    @asynccontextmanager
    async def standalone(self) -> AsyncIterator[AsyncConnection]:
        """A connection for writes whose every statement stands alone (each is atomic, none
        needs another's effect undone with it: the relay's lease of a batch, its mark of the
        batch sent). On PostgreSQL each statement commits on its own, on a kept connection in
        autocommit (``pg_kept``): one round trip where BEGIN, the statement and COMMIT were
        three. On SQLite a write transaction (its one writer's lock is the writers' order).
        No commit listeners hear of it: what it writes is no outbox message."""
        if self._pg_kept is None:
            async with self.transaction() as conn:
                yield conn
            return
        async with self._pg_kept.read() as conn:
            yield conn

    @asynccontextmanager
    async def snapshot(self) -> AsyncIterator[AsyncConnection]:
        """A reader for a caller that would only wait for its reads: on SQLite they run on the
        event loop's thread, like a write transaction's (``sqlite_driver.begin_writing``).

        A WAL reader never waits for a lock, so running inline blocks nothing but the loop, for
        as long as SQLite computes; the thread hop it saves is two wake-ups per statement, and
        on a loaded machine each wake-up waits for a core (measured in ``ira dev``'s triage
        child at load 8-11: ~0.15 of a core used while its batches waited on those hops).
        PostgreSQL: :meth:`reader`."""
        if self._writer is None:
            async with self.reader() as conn:
                yield conn
            return
        async with self.engine.connect() as conn:
            info = conn.info  # taken now, as in ``transaction``
            adapted = (await conn.get_raw_connection()).dbapi_connection
            assert isinstance(adapted, sqlite_driver.OneHopConnection)
            info[_READER] = True
            adapted.inline = True
            try:
                yield conn
            finally:
                try:
                    if not (conn.closed or conn.invalidated):
                        await conn.rollback()  # ends the read inline, before the pool sees the connection
                finally:
                    adapted.inline = False
                    info.pop(_READER, None)

    async def ping(self) -> None:
        """Raise if the database cannot answer a trivial query."""
        async with self.engine.connect() as conn:
            await conn.execute(text("SELECT 1"))

    async def close(self) -> None:
        if self.wal_checkpointer is not None:
            await asyncio.to_thread(self.wal_checkpointer.stop)
        if self._writer is not None:
            await self._writer.close()
        if self._pg_kept is not None:
            await self._pg_kept.close()
        await self.engine.dispose()
