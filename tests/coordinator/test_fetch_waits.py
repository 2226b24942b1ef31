"""The run requests' consumer polls on a fetch wait of its own: the embedded broker answers a
fetch when its wait ends, not when a record arrives, so that wait is a new run's first hop
(bench/README.md, 2026-12-04); steps come eagerly and updates may wait, so they keep theirs."""

from __future__ import annotations

from datetime import timedelta

from ira.connectors.tickets.builtin import BuiltinTicketSystem
from ira.coordinator.deps import Deps
from ira.coordinator.handlers import step_handlers
from ira.coordinator.worker import CoordinatorWorker
from ira.core.clock import FrozenClock
from ira.runtime.bus.consumer import ConsumerSettings
from ira.runtime.bus.producer import BusProducer
from ira.runtime.dispatch import StepDispatcher
from ira.runtime.store.database import Database
from tests.coordinator.harness import config
from tests.triage.builders import T0

NO_BROKER = "127.0.0.1:9"
"""Nothing listens here: the worker's consumers are never started in these tests."""
SETTINGS = ConsumerSettings(fetch_wait=timedelta(milliseconds=100), session_timeout=timedelta(seconds=2))


def coordinator(db: Database, **options: timedelta) -> CoordinatorWorker:
    clock = FrozenClock(T0)
    deps = Deps(db=db, clock=clock, config=config(), tickets=BuiltinTicketSystem(db, clock))
    dispatcher = StepDispatcher(db=db, clock=clock, handlers=step_handlers(deps), owner="coordinator-waits")
    return CoordinatorWorker(deps, dispatcher, bootstrap=NO_BROKER, producer=BusProducer(NO_BROKER),
                             consumer=SETTINGS, **options)


def test_run_requests_poll_on_their_own_fetch_wait(db: Database) -> None:
    worker = coordinator(db, decisions_fetch_wait=timedelta(milliseconds=20))
    assert worker.decisions.settings.fetch_wait == timedelta(milliseconds=20)
    assert worker.decisions.settings.session_timeout == SETTINGS.session_timeout  # only the wait is its own
    assert worker.updates.settings == worker.steps.settings == SETTINGS


def test_without_one_every_consumer_polls_alike(db: Database) -> None:
    worker = coordinator(db)
    assert worker.decisions.settings == worker.updates.settings == worker.steps.settings == SETTINGS
