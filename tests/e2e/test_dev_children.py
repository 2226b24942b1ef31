"""``ira dev`` with triage in a child process (``dev.processes``, the default): the child is an
``ira worker --role triage`` that is restarted when it dies, dies with ``ira dev``, logs with
its role named, is stopped first on a clean stop, and alerts accepted meanwhile end in incidents."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
from pathlib import Path

import httpx
import pytest

from tests.e2e.devprocess import Burst, DevProcess, dev_config, until_triaged
from tests.eventually import eventually
from tests.processes import alive
from tests.sources.harness import distinct_alert

pytestmark = pytest.mark.slow


def triage_children(parent: int) -> set[int]:
    """Live children of ``parent`` that are ``ira worker --role triage``."""
    found = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if int(stat[1]) == parent and stat[0] != "Z" and b"worker" in cmdline and b"triage" in cmdline:
            found.add(int(pid))
    return found


def one_triage_child(dev: DevProcess) -> int:
    assert dev.proc is not None
    children = triage_children(dev.proc.pid)
    assert len(children) == 1, children
    return children.pop()


async def triage_reports_metrics(dev: DevProcess) -> bool:
    """The child's consumer gauges reach ``ira dev``'s ``/metrics``."""
    async with httpx.AsyncClient() as client:
        text = (await client.get(f"{dev.base_url}/metrics", timeout=5)).text
    return 'ira_consumer_lag_messages{consumer="triage"' in text and 'ira_parked_messages{consumer="triage"}' in text


async def test_a_killed_triage_child_is_restarted_and_alerts_accepted_after_end_triaged(tmp_path: Path) -> None:
    # Given ira dev (triage in its own process), logging JSON at INFO
    dev = DevProcess.on(tmp_path, IRA_LOG_LEVEL="INFO", IRA_LOG_FORMAT="json")
    await dev.start()
    try:
        first = one_triage_child(dev)
        await eventually(lambda: triage_reports_metrics(dev), timeout=30, message="triage's gauges in /metrics")

        # When its triage child is killed with SIGKILL
        os.kill(first, signal.SIGKILL)

        # Then ira dev starts another one, which gets ready again
        await eventually(lambda: triage_children(dev.proc.pid) - {first}, timeout=30,  # type: ignore[union-attr]
                         message="a new triage child")
        await dev.wait_ready()
        assert dev.proc is not None and dev.proc.poll() is None

        # And alerts accepted now are triaged (by the new child)
        burst = Burst()
        await burst.post(dev.base_url, [distinct_alert(n) for n in range(200)], connections=8)
        assert len(burst.accepted) == 200
        evaluated = await until_triaged(dev.database_url, set(burst.answered), timeout=60)
        assert set(evaluated.values()) == {1}
    finally:
        await dev.stop()
    output = dev.log()
    assert f"triage[1] (pid {first}) exited with -9; restarting" in (tmp_path / "dev1.log").read_text()
    # the child's own log lines reach ira dev's output, naming its role
    child_lines = [json.loads(line) for line in (tmp_path / "dev1.log").read_text().splitlines()
                   if line.startswith("{") and '"role": "triage"' in line]
    assert child_lines, output


async def test_kill_9_of_ira_dev_leaves_no_triage_child(tmp_path: Path) -> None:
    # Given ira dev with its triage child
    dev = DevProcess.on(tmp_path)
    await dev.start()
    try:
        child = one_triage_child(dev)

        # When only ira dev itself is killed with SIGKILL (not its process group)
        assert dev.proc is not None
        dev.proc.kill()
        dev.proc.wait(timeout=30)

        # Then the child dies with it
        await eventually(lambda: not alive({child}), timeout=15, message="the triage child died with ira dev")
    finally:
        dev.kill()


async def test_a_clean_stop_stops_the_child_first_and_loses_nothing_accepted(tmp_path: Path) -> None:
    # Given ira dev taking a burst
    dev = DevProcess.on(tmp_path)
    await dev.start()
    burst = Burst()
    try:
        child = one_triage_child(dev)
        posting = asyncio.create_task(burst.post(dev.base_url, [distinct_alert(n) for n in range(1500)]))
        await eventually(lambda: len(burst.accepted) >= 300 or posting.done(), timeout=60, message="300 accepted")

        # When it is stopped with Ctrl-C mid-burst
        assert dev.proc is not None
        dev.proc.send_signal(signal.SIGINT)
        await asyncio.wait_for(posting, 60)
        assert await asyncio.to_thread(dev.proc.wait, 60) == 0, dev.log()
        assert not alive({child})

        # Then after a restart every alert answered 202 is triaged exactly once
        await dev.start()
        evaluated = await until_triaged(dev.database_url, set(burst.answered))
    finally:
        await dev.stop()
    assert set(evaluated) == set(burst.answered) and set(evaluated.values()) == {1}
    # the child stopped (and drained) before ira dev said it stopped
    lines = (tmp_path / "dev1.log").read_text().splitlines()
    assert lines.index("triage[1] stopped (exit 0)") < lines.index("stopped"), lines[-30:]


async def test_a_child_that_dies_before_it_is_ready_stops_ira_dev_loudly(tmp_path: Path) -> None:
    # Given ira dev whose triage worker dies before it gets ready (a fault point only a worker has)
    dev = DevProcess.on(tmp_path, IRA_FAULTS="worker.before_ready")
    dev.launch()

    # Then ira dev exits 1 saying which child failed, instead of restarting it forever
    assert dev.proc is not None
    assert await asyncio.to_thread(dev.proc.wait, 60) == 1
    assert "before it was ready" in dev.log() and "triage[1]" in dev.log()
    dev.kill()


def gateway_dev(home: Path, gateways: int) -> DevProcess:
    """ira dev with triage and ``gateways`` gateway processes in children."""
    dev = DevProcess.on(home)
    dev.env["IRA_CONFIG"] = str(dev_config(home / "ira.yaml", dev={"processes": {"triage": 1, "gateway": gateways}}))
    return dev


def private_urls(dev: DevProcess, role: str) -> list[str]:
    """The private addresses the children of ``role`` named in their ``ready`` lines."""
    log = (dev.home / f"dev{dev.starts}.log").read_text()
    return re.findall(rf"^{role}\[\d+\] ready\s+role {role} at (\S+)$", log, re.M)


async def accepted_of(url: str, **params: str) -> float:
    """``ira_source_events_accepted_total`` as ``url`` tells it, over a new connection."""
    async with httpx.AsyncClient() as client:
        text = (await client.get(f"{url}/metrics", params=params, timeout=5)).text
    found = re.search(r'^ira_source_events_accepted_total\{source="am"\} (\S+)$', text, re.M)
    return float(found.group(1)) if found else 0.0


async def test_gateway_processes_share_the_port_and_metrics_count_the_whole_tree(tmp_path: Path) -> None:
    # Given ira dev with two gateway processes beside its own on the one port
    dev = gateway_dev(tmp_path, 2)
    await dev.start()
    try:
        await eventually(lambda: len(private_urls(dev, "gateway")) == 2, timeout=30, message="two gateways ready")
        gateways = private_urls(dev, "gateway")

        # When 300 alerts are posted on 16 connections
        burst = Burst()
        await burst.post(dev.base_url, [distinct_alert(n) for n in range(300)], connections=16)
        assert len(burst.accepted) == 300

        # Then the gateway processes took some of them (connections spread over the port's listeners)
        own = [await accepted_of(url, scope="process") for url in gateways]
        assert 0 < sum(own) <= 300, own
        # And /metrics on the shared port counts all 300 whichever process answers, with triage's gauges
        for _ in range(8):
            assert await accepted_of(dev.base_url) == 300
        assert await triage_reports_metrics(dev)
        # And every one of them ends triaged
        evaluated = await until_triaged(dev.database_url, set(burst.answered), timeout=60)
        assert set(evaluated.values()) == {1}
    finally:
        await dev.stop()
