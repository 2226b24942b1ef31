"""Accepted means stored: ``ira dev`` killed whole during a burst, or its broker replaced
mid-ingest, loses none of the alerts it answered 202, and triage applies each exactly once."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest

from ira.infra.tansu import EmbeddedKafka
from tests.e2e.devprocess import Burst, DevProcess, until_triaged
from tests.eventually import eventually
from tests.sources.harness import AM, AM_TOKEN, bearer, distinct_alert

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


async def test_killed_between_the_commit_and_the_202_the_retry_is_a_stored_duplicate(tmp_path: Path) -> None:
    # Given ira dev armed to die right after a request's events are committed
    dev = DevProcess.on(tmp_path, IRA_FAULTS="ingest.after_commit")
    await dev.start()
    body = distinct_alert(1)
    try:
        # When a request's commit succeeds and the process dies before answering
        with pytest.raises(httpx.TransportError):
            async with httpx.AsyncClient() as client:
                await client.post(f"{dev.base_url}{AM}", content=body, headers=bearer(AM_TOKEN), timeout=30)
        dev.kill()

        # Then the sender's retry is answered "duplicate" (it is stored) and triage applies it once
        del dev.env["IRA_FAULTS"]
        await dev.start()
        retry = Burst()
        await retry.post(dev.base_url, [body], connections=1)
        assert not retry.accepted and len(retry.answered) == 1
        evaluated = await until_triaged(dev.database_url, set(retry.answered))
    finally:
        await dev.stop()
    assert list(evaluated.values()) == [1]


async def test_killed_after_triage_applied_before_its_offset_commit_applies_each_alert_once(tmp_path: Path) -> None:
    # Given ira dev armed to die once triage committed a batch and before Kafka hears of it
    dev = DevProcess.on(tmp_path, IRA_FAULTS="consumer.triage.after_apply")
    await dev.start()
    burst = Burst()
    try:
        await burst.post(dev.base_url, [distinct_alert(n) for n in range(50)], connections=5)
        await eventually(lambda: dev.proc is not None and dev.proc.poll() is not None, timeout=60,
                         message="the fault point hit")
        dev.kill()  # the rest of the group (broker, redis) goes with it

        # When it starts again (a new, empty broker: the scanner re-sends whatever triage lacks)
        del dev.env["IRA_FAULTS"]
        await dev.start()
        evaluated = await until_triaged(dev.database_url, set(burst.answered))
    finally:
        await dev.stop()
    # Then every accepted alert (the process may die mid-burst) has exactly one evaluation
    assert burst.accepted and set(evaluated) == set(burst.answered) and set(evaluated.values()) == {1}
