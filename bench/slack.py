"""Slack approvals: how long the three Slack steps of the walk take, against the Slack Web API
fake on loopback (``tests/fakes/slack.py``) with an optional added latency per call.

* ``approval_post``     — the notifier handles ``approval_requested``: read model -> Block Kit ->
                          ``chat.postMessage`` (+ the report's thread replies) -> receipt;
* ``interaction_ack``   — a signed click on ``/slack/interactions`` until its 200 (signature,
                          parse, user mapping, the decision committed; Slack wants <= 3 s);
* ``message_update``    — the notifier handles ``approval_decided``: read model -> ``chat.update``.

Prints one JSON line per step: p50 / p99 / max in ms over ``--ops`` runs (one run each).
Usage: ``python bench/slack.py --ops 20 [--latency-ms 50] [--backend postgresql --database-url ...]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scratch import scratch_database  # noqa: E402

from tests.notifier.slack_rig import slack_rig  # noqa: E402


async def one_run(db, latency: float) -> dict[str, float]:  # type: ignore[no-untyped-def]
    async with slack_rig(db, latency=latency) as rig:
        t0 = time.perf_counter()
        await rig.notify()
        t1 = time.perf_counter()
        [posted] = rig.approval_posts()
        body = rig.click_body(posted)
        t2 = time.perf_counter()
        answer = await rig.click(posted, body=body)
        t3 = time.perf_counter()
        assert answer.status_code == 200
        await rig.pump.drain()
        decided = [i for i, d in enumerate(rig.pump.deliveries) if d.payload["kind"] == "approval_decided"]
        t4 = time.perf_counter()
        await rig.notifier.handle(rig.pump.deliveries[decided[0]])
        t5 = time.perf_counter()
    return {"approval_post": t1 - t0, "interaction_ack": t3 - t2, "message_update": t5 - t4}


def summary(name: str, seconds: list[float], **extra: object) -> str:
    ms = sorted(s * 1000 for s in seconds)
    p99 = ms[min(len(ms) - 1, round(0.99 * (len(ms) - 1)))]
    return json.dumps({"bench": "slack", "step": name, "n": len(ms), "p50_ms": round(statistics.median(ms), 1),
                       "p99_ms": round(p99, 1), "max_ms": round(ms[-1], 1), **extra})


async def main(args: argparse.Namespace) -> None:
    samples: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        async with scratch_database(args.backend, args.database_url, Path(tmp)) as db:
            for _ in range(args.ops):
                for name, took in (await one_run(db, args.latency_ms / 1000)).items():
                    samples.setdefault(name, []).append(took)
    for name, seconds in samples.items():
        print(summary(name, seconds, backend=args.backend, slack_latency_ms=args.latency_ms), flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ops", type=int, default=20, help="runs, one approval each")
    parser.add_argument("--latency-ms", type=float, default=0.0, help="added to every Slack API call")
    parser.add_argument("--backend", choices=["sqlite", "postgresql"], default="sqlite")
    parser.add_argument("--database-url", default=None)
    asyncio.run(main(parser.parse_args()))
