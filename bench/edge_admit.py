"""The webhook's Redis work alone: CPU per request of the edge admission (``ira.sources.dedupe``).

Each request does what a ``store`` webhook does in Redis: a CHECK (counted against its rate
window and alert bucket, its marks looked at), then a MARK of its keys, with ``--keys`` marks per
request (1: single alerts, 100: batches), ``--concurrency`` requests at a time sharing calls.
Prints one JSON line per concurrency: this process's CPU µs per request and the calls per
request. CPU, not wall time, is what compares on a shared machine: run two trees back to back
(``PYTHONPATH=<tree>``).

Usage: .venv/bin/python bench/edge_admit.py [--redis-url redis://127.0.0.1:6379/0] [--keys 1]
       [--requests 4000] [--concurrency 1,8,32]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
import uuid
from datetime import UTC, datetime, timedelta

from ira.runtime.settings import SourceSettings
from ira.runtime.settings.ingest import IngestSettings
from ira.runtime.stack import redis_client
from ira.sources.dedupe import CHECK, MARK, EdgeDedupe
from ira.sources.ratelimit import AlertLimits, rate_window

WINDOW = timedelta(minutes=5)


async def run(url: str, *, keys: int, requests: int, concurrencies: list[int]) -> None:
    redis = redis_client(url)
    dedupe = EdgeDedupe(redis, prefix=f"bench-edge-{uuid.uuid4().hex[:8]}:")
    source = SourceSettings.model_validate({"id": "am", "tenant": "bench", "kind": "alertmanager",
                                            "bearer_token": "x", "rate_limit_per_second": 1e6,
                                            "alerts_per_second": 1e9})
    limits = AlertLimits.of(source, IngestSettings())
    try:
        for concurrency in concurrencies:
            slots = asyncio.Semaphore(concurrency)

            async def one(number: int, concurrency: int = concurrency, slots: asyncio.Semaphore = slots) -> None:
                async with slots:
                    rate = rate_window(source, datetime.now(UTC), key_prefix=dedupe.source_prefix("am"), alerts=limits)
                    marks = [dedupe.key("am", f"{concurrency}-{number}-{i}") for i in range(keys)]
                    await dedupe.admit(rate, marks, window=WINDOW, op=CHECK)
                    await dedupe.admit(rate, marks, window=WINDOW, op=MARK)

            calls, cpu = dedupe.calls, time.process_time()
            await asyncio.gather(*(one(n) for n in range(requests)))
            print(json.dumps({"bench": "edge_admit", "keys": keys, "concurrency": concurrency, "requests": requests,
                              "cpu_us_per_request": round((time.process_time() - cpu) / requests * 1e6, 1),
                              "calls_per_request": round((dedupe.calls - calls) / requests, 3)}), flush=True)
    finally:
        await redis.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--keys", type=int, default=1, help="marks per request")
    parser.add_argument("--requests", type=int, default=4000)
    parser.add_argument("--concurrency", default="1,8,32", help="requests at a time, comma-separated")
    args = parser.parse_args()
    asyncio.run(run(args.redis_url, keys=args.keys, requests=args.requests,
                    concurrencies=[int(c) for c in args.concurrency.split(",")]))


if __name__ == "__main__":
    main()
