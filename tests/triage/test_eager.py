"""Eager triage: the urgent alert (a new group's first) that a gateway of this process commits is
triaged right after that commit, with no relay and no broker, unless an older alert of its key
may still be on its way (per-key order); the broker's copy is then an inbox duplicate."""

from __future__ import annotations

from datetime import UTC, datetime

from ira.core.alert import AlertEvent, DecisionKind
from ira.core.clock import FrozenClock
from ira.core.envelope import Topic, topic_name
from ira.runtime.bus.consumer import ConsumerRunner
from ira.runtime.bus.eager import EagerStats
from ira.runtime.bus.producer import BusProducer
from ira.runtime.bus.record import Outcome
from ira.runtime.store import outbox
from ira.runtime.store.database import Database
from ira.sources.message import event_message
from ira.triage.main import CONSUMER, eager_alerts
from tests.eventually import eventually
from tests.triage.builders import T0, alert
from tests.triage.harness import ENV, evaluations, handler

NO_BROKER = "127.0.0.1:9"
"""Nothing listens here: the consumer is never started in these tests."""
TOPIC = topic_name(Topic.ALERTS, ENV)


def triage_consumer(db: Database) -> ConsumerRunner:
    triage = handler(FrozenClock(T0))
    return ConsumerRunner(bootstrap=NO_BROKER, group_id="ira-triage-eager", topics=[TOPIC], name=CONSUMER,
                          handler=triage, producer=BusProducer(NO_BROKER), dlq_topic="dlq", db=db, batch_hooks=triage)


async def accept(db: Database, *alerts_and_urgency: tuple[AlertEvent, bool]) -> None:
    """What the gateway's store commit does: the alerts' outbox rows, in one transaction."""
    async with db.transaction() as conn:
        await outbox.enqueue_new(conn, [event_message(TOPIC, a, urgent=u) for a, u in alerts_and_urgency],
                                 at=datetime.now(UTC))


async def test_a_new_groups_first_alert_is_triaged_right_after_the_gateways_commit(db: Database) -> None:
    runner = triage_consumer(db)
    eager = eager_alerts(runner, db, environment=ENV)
    first, follow_up = alert(fingerprint="fp-1"), alert(fingerprint="fp-2")
    with eager.listening(db):
        await accept(db, (first, True), (follow_up, False))
        found = await eventually(lambda: evaluations(db), timeout=10)
    assert [(e["event_id"], e["decision"]) for e in found] == [(first.event_id, DecisionKind.CREATE_RUN)]
    assert eager.stats == EagerStats(applied=1)  # the follow-up waits for the broker, as ever
    # the broker's copy of the urgent alert, when it comes, is a duplicate
    copy = event_message(TOPIC, first, urgent=True)
    assert await runner.apply_local(copy.envelope, topic=TOPIC, key=copy.key) == Outcome.DUPLICATE


async def test_an_urgent_alert_never_overtakes_an_older_alert_of_its_key(db: Database) -> None:
    runner = triage_consumer(db)
    eager = eager_alerts(runner, db, environment=ENV)
    older = alert(fingerprint="fp-1", at=T0)
    await accept(db, (older, False))  # not relayed, not triaged yet
    with eager.listening(db):
        await accept(db, (alert(fingerprint="fp-1", source_event_id="again"), True))
        await eventually(lambda: eager.stats.skipped == 1, timeout=10)
    assert await evaluations(db) == [] and eager.stats == EagerStats(skipped=1)
