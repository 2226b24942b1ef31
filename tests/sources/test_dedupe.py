"""The edge script on a real Redis: requests of one source that arrive together share a call,
and each still gets its own count and its own marks."""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta

import pytest
from redis.asyncio import Redis

from ira.sources.dedupe import CHECK, EdgeDedupe
from ira.sources.errors import EdgeUnavailableError
from ira.sources.ratelimit import RateWindow
from tests.eventually import eventually

WINDOW = timedelta(minutes=15)


def rate(dedupe: EdgeDedupe, *, limit: int = 1_000) -> RateWindow:
    return RateWindow(source_id="am", key=f"{dedupe.source_prefix('am')}rate:1", limit=limit, window_ms=1000,
                      ends_at_ms=2000, now_ms=1500)


async def test_concurrent_requests_share_one_call_and_keep_their_own_answers(redis: Redis, redis_prefix: str) -> None:
    dedupe = EdgeDedupe(redis, prefix=redis_prefix)
    keys = [dedupe.key("am", f"event-{n % 50}") for n in range(100)]  # the second 50 repeat the first

    answers = await asyncio.gather(*(dedupe.admit(rate(dedupe), [key], window=WINDOW) for key in keys))

    assert dedupe.calls == 1
    assert [a.count for a in answers] == list(range(1, 101))  # counted once each, in arrival order
    assert [a.fresh for a in answers] == [[True]] * 50 + [[False]] * 50


async def test_requests_over_the_rate_in_a_shared_call_mark_nothing(redis: Redis, redis_prefix: str) -> None:
    dedupe = EdgeDedupe(redis, prefix=redis_prefix)
    keys = [[dedupe.key("am", f"event-{n}-{i}") for i in range(3)] for n in range(5)]

    answers = await asyncio.gather(*(dedupe.admit(rate(dedupe, limit=3), k, window=WINDOW) for k in keys))

    assert [(a.count, a.fresh) for a in answers] == [(n, [n <= 3] * 3) for n in range(1, 6)]
    assert await redis.exists(*keys[3], *keys[4]) == 0
    assert await redis.exists(*keys[0]) == 3


async def test_the_marks_of_a_request_cancelled_while_waiting_are_released(redis: Redis, redis_prefix: str) -> None:
    dedupe = EdgeDedupe(redis, prefix=redis_prefix)
    key = dedupe.key("am", "event-cancelled")
    waiting = asyncio.create_task(dedupe.admit(rate(dedupe), [key], window=WINDOW))
    await asyncio.sleep(0)  # it queued its ask; the call has not been made yet
    waiting.cancel()

    with pytest.raises(asyncio.CancelledError):
        await waiting
    await eventually(lambda: dedupe.calls == 1)

    async def released() -> bool:
        return await redis.exists(key) == 0

    await eventually(released)
    assert (await dedupe.admit(rate(dedupe), [key], window=WINDOW)).fresh == [True]  # the retry is accepted


async def test_redis_down_fails_every_waiting_request() -> None:
    gone = Redis(host="127.0.0.1", port=1, socket_connect_timeout=1)
    dedupe = EdgeDedupe(gone)
    try:
        results = await asyncio.gather(*(dedupe.admit(rate(dedupe), [f"k{n}"], window=WINDOW) for n in range(3)),
                                       return_exceptions=True)
    finally:
        await gone.aclose()

    assert [type(r) for r in results] == [EdgeUnavailableError] * 3


async def test_stopping_the_admission_answers_the_requests_waiting_on_it() -> None:
    silent = await asyncio.start_server(lambda reader, writer: None, "127.0.0.1", 0)  # accepts, never answers
    redis = Redis(host="127.0.0.1", port=silent.sockets[0].getsockname()[1], socket_timeout=30)
    dedupe = EdgeDedupe(redis)
    try:
        waiting = [asyncio.create_task(dedupe.admit(rate(dedupe), [f"k{n}"], window=WINDOW)) for n in range(3)]
        [caller] = await eventually(lambda: [t for t in asyncio.all_tasks() if t.get_name() == "edge-admit-am"])
        caller.cancel()  # what a stopping gateway does to its tasks
        results = await asyncio.wait_for(asyncio.gather(*waiting, return_exceptions=True), 5)
    finally:
        await redis.aclose()
        silent.close()

    assert [type(r) for r in results] == [EdgeUnavailableError] * 3


async def test_marks_are_asked_without_waiting_and_set_before_a_later_check(redis: Redis, redis_prefix: str) -> None:
    dedupe = EdgeDedupe(redis, prefix=redis_prefix)
    key = dedupe.key("am", "event-marked")

    dedupe.mark(rate(dedupe), [key], window=WINDOW)  # what a request does once its events are stored
    assert dedupe.calls == 0  # it did not wait for Redis: its 202 can go out now
    later = await dedupe.admit(rate(dedupe), [key], window=WINDOW, op=CHECK)  # a copy sent after that 202

    assert later.fresh == [False]  # checked after the mark was set
    assert await redis.exists(key) == 1


async def test_marks_that_cannot_be_set_are_logged(caplog: pytest.LogCaptureFixture) -> None:
    gone = Redis(host="127.0.0.1", port=1, socket_connect_timeout=1)
    dedupe = EdgeDedupe(gone)
    try:
        with caplog.at_level(logging.WARNING, logger="ira.sources.dedupe"):
            dedupe.mark(rate(dedupe), ["k1", "k2"], window=WINDOW)
            await eventually(lambda: "could not set dedupe mark(s) after the commit" in caplog.text)
    finally:
        await gone.aclose()
