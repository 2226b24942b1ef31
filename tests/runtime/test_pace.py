"""A consumer that fetches with a short wait relaxes it once quiet (:mod:`ira.runtime.bus.pace`)."""

from __future__ import annotations

from datetime import timedelta

from ira.runtime.bus.pace import FetchPace

BUSY, IDLE, AFTER = timedelta(milliseconds=20), timedelta(milliseconds=500), timedelta(seconds=10)


def pace() -> FetchPace:
    return FetchPace(busy_wait=BUSY, idle_wait=IDLE, idle_after=AFTER, quiet_since=100.0)


def test_a_consumer_that_had_no_record_since_its_start_goes_idle_after_idle_after() -> None:
    p = pace()
    assert p.after_fetch(False, 105.0) is None and p.wait == BUSY
    assert p.after_fetch(False, 110.0) == IDLE and p.wait == IDLE
    assert p.after_fetch(False, 111.0) is None  # said once


def test_a_record_puts_the_short_wait_back_at_once_and_the_quiet_counts_from_it() -> None:
    p = pace()
    p.after_fetch(False, 110.0)
    assert p.after_fetch(True, 112.0) == BUSY and p.wait == BUSY
    assert p.after_fetch(True, 113.0) is None  # busy already
    assert p.after_fetch(False, 122.9) is None  # 9.9 s after the last record
    assert p.after_fetch(False, 123.0) == IDLE
