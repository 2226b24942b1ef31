"""Accepted means stored: ``ira dev`` killed whole during a burst, or its broker replaced
mid-ingest, loses none of the alerts it answered 202, and triage applies each exactly once."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from ira.infra.tansu import EmbeddedKafka
from tests.e2e.devprocess import Burst, DevProcess, until_triaged
from tests.eventually import eventually
from tests.sources.harness import distinct_alert

pytestmark = pytest.mark.slow


async def test_sigkill_during_a_burst_loses_no_accepted_alert(tmp_path: Path) -> None:
    # Given ira dev taking a burst of 1,500 distinct alerts on 32 connections
    dev = DevProcess.on(tmp_path)
    await dev.start()
    burst = Burst()
    try:
        posting = asyncio.create_task(burst.post(dev.base_url, [distinct_alert(n) for n in range(1500)]))

        # When the whole process group is SIGKILLed in the middle of it
        await eventually(lambda: len(burst.accepted) >= 300 or posting.done(), timeout=60, message="300 accepted")
        dev.kill()
        await asyncio.wait_for(posting, 30)
        assert 300 <= len(burst.accepted) < 1500, "the kill should land mid-burst"

        # Then after a restart every alert answered 202 is triaged, each exactly once
        await dev.start()
        evaluated = await until_triaged(dev.database_url, set(burst.answered))
    finally:
        await dev.stop()
    assert set(burst.accepted.values()) == {1}  # no alert was accepted by two requests
    assert set(evaluated) == set(burst.answered) and set(evaluated.values()) == {1}


async def test_broker_replaced_mid_ingest_loses_nothing_and_resending_is_not_lost(
    private_kafka: EmbeddedKafka, tmp_path: Path
) -> None:
    # Given ira dev on a broker of its own (the embedded kind: memory only) taking a burst
    dev = DevProcess.on(tmp_path, IRA_KAFKA_BOOTSTRAP=private_kafka.bootstrap)
    await dev.start()
    bodies = [distinct_alert(n) for n in range(1200)]
    burst = Burst()
    try:
        posting = asyncio.create_task(burst.post(dev.base_url, bodies))

        # When the broker is killed and an empty one takes its place mid-burst
        await eventually(lambda: len(burst.accepted) >= 300 or posting.done(), timeout=60, message="300 accepted")
        await private_kafka.kill()
        await private_kafka.start()
        await asyncio.wait_for(posting, 120)

        # Then every alert answered 202 reaches triage, exactly once
        evaluated = await until_triaged(dev.database_url, set(burst.answered))
        assert set(evaluated.values()) == {1}

        # And re-sending them all is answered "duplicate" because each is stored, not lost
        again = Burst()
        await again.post(dev.base_url, bodies)
        assert not again.accepted and again.refused == 0
        assert set(again.answered) == set(burst.answered)
    finally:
        await dev.stop()
    assert burst.refused == 0 and len(burst.accepted) == len(bodies)  # the broker never was the commit point
