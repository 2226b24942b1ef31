"""`ira replay` against a real `ira dev`: a bundle's events go through the gateway into staging,
the whole pipeline runs, and the comparison and verdict come back; staging runs stay out of
production's lists; two replays of one bundle decide the same things; unmet expectations and
unrunnable replays have their own exit codes; a bundle of another tenant, service and alert works."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from ira.infra.demo import DEMO_BUNDLE
from tests.e2e.devprocess import DevProcess
from tests.processes import ira_command
from tests.services import require_service
from tests.store_fixtures import postgres_test_url

pytestmark = pytest.mark.slow
ADMIN = {"authorization": "Bearer dev-admin-token"}
_VOLATILE = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z?|\b[a-z]{2,5}_[0-9a-f]{20,}\b"
                       r"|sha256:[0-9a-f]{64}")


@asynccontextmanager
async def dev_on(tmp_path: Path, **env: str) -> AsyncIterator[DevProcess]:
    (tmp_path / "home").mkdir()
    process = DevProcess.on(tmp_path / "home", **env)
    await process.start()
    try:
        yield process
    finally:
        await process.stop()


@pytest.fixture
async def dev(tmp_path: Path) -> AsyncIterator[DevProcess]:
    async with dev_on(tmp_path) as process:
        yield process


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
async def dev_on_each_backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[DevProcess]:
    """``ira dev`` on its SQLite file, or on a fresh PostgreSQL database dropped afterwards."""
    if request.param == "sqlite":
        async with dev_on(tmp_path) as process:
            yield process
        return
    name = f"replay_{uuid.uuid4().hex[:10]}"
    try:
        admin = await asyncpg.connect(postgres_test_url(), timeout=5)
    except (OSError, asyncpg.PostgresError) as exc:
        require_service("postgresql", f"{postgres_test_url()} unreachable: {exc}")
    await admin.execute(f'CREATE DATABASE "{name}"')
    await admin.close()
    try:
        async with dev_on(tmp_path, IRA_DATABASE_URL=postgres_test_url().rsplit("/", 1)[0] + f"/{name}") as process:
            yield process
    finally:
        admin = await asyncpg.connect(postgres_test_url(), timeout=5)
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


async def replay(dev: DevProcess, bundle: Path) -> tuple[int, list[str]]:
    proc = await asyncio.create_subprocess_exec(
        ira_command(), "replay", "--bundle", str(bundle), "--url", dev.base_url, "--token", "dev-admin-token",
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out, _ = await asyncio.wait_for(proc.communicate(), timeout=300)
    lines = out.decode().splitlines()
    print("\n".join(lines), file=sys.stderr)
    assert proc.returncode is not None
    return proc.returncode, lines


def without_ids_and_times(value: Any) -> Any:
    return json.loads(_VOLATILE.sub("<x>", json.dumps(value)))


def rewritten(source: Path, target: Path, name: str, **changes: Any) -> Path:
    shutil.copytree(source, target)
    data = json.loads((target / name).read_text())
    (target / name).write_text(json.dumps({**data, **changes}))
    return target


async def test_replays_of_a_bundle_run_in_staging_and_compare(dev_on_each_backend: DevProcess,
                                                              tmp_path: Path) -> None:
    dev = dev_on_each_backend
    failing = rewritten(DEMO_BUNDLE, tmp_path / "failing", "expectations.json",
                        ticket_draft_mentions=["order-service", "nowhere-in-the-draft"])
    (code, lines), (failing_code, failing_lines) = await asyncio.gather(replay(dev, DEMO_BUNDLE),
                                                                         replay(dev, failing))
    assert code == 0, lines
    assert lines[-1].startswith("PASS: replay rpl_") and "expectations met" in lines[-1]
    assert any(line.startswith("progress  events 2/2, run waiting (approval), branches finished 3/3")
               for line in lines)
    assert any(re.match(r"branch metrics\s+yes\s+done \| done", line) for line in lines)

    assert failing_code == 1, failing_lines
    assert "unmet     draft: does not mention 'nowhere-in-the-draft'" in failing_lines
    assert failing_lines[-1].startswith("FAIL: ") and "1 expectation(s) unmet" in failing_lines[-1]

    async with httpx.AsyncClient(base_url=dev.base_url, headers=ADMIN, timeout=10) as api:
        assert (await api.get("/v1/runs")).json()["runs"] == []  # staging never mixes with production
        assert (await api.get("/v1/incidents")).json()["incidents"] == []
        incidents = (await api.get("/v1/incidents", params={"environment": "staging"})).json()["incidents"]
        assert len(incidents) == 2 and {i["environment"] for i in incidents} == {"staging"}
        staging = (await api.get("/v1/runs", params={"environment": "staging"})).json()["runs"]
        assert len(staging) == 2 and {r["environment"] for r in staging} == {"staging"}
        replays = (await api.get("/v1/replays")).json()["replays"]
        assert [r["state"] for r in replays] == ["finished", "finished"]
        first, second = (r["report"]["outcome"] for r in replays)
        for outcome in (first, second):
            outcome.pop("duration_seconds")
        assert without_ids_and_times(first) == without_ids_and_times(second)  # deterministic
        assert first["draft_body"] and first["hypotheses"] and first["facts"]
        page = (await api.get("/replays")).text  # the dashboard: the comparison side by side, marked staging
        assert all(r["replay_id"] in page for r in replays) and "staging" in page
        assert page.count("observations recorded") == 2  # where each replay's observations came from
        assert {r["observations_from"] for r in replays} == {"recorded"}
        one = (await api.get(f"/replays/{replays[0]['replay_id']}")).text  # a replay's own page
        assert replays[0]["replay_id"] in one and replays[1]["replay_id"] not in one
        assert "observations recorded" in one and "staging" in one
        assert (await api.get("/replays/rpl_nowhere")).status_code == 404
        assert lines[-1].split(": ", 1)[1].split(";")[0].replace("(", "") in page.replace("(", "")
        assert staging[0]["run_id"] not in (await api.get("/runs")).text
        assert staging[0]["run_id"] in (await api.get("/runs", params={"environment": "staging"})).text


async def test_a_bundle_of_another_tenant_service_and_alert_replays(dev: DevProcess, tmp_path: Path) -> None:
    subprocess.run([sys.executable, "-m", "ira.infra.scenarios", str(tmp_path / "scenarios")], check=True,
                   capture_output=True)
    scenario = next(p for p in sorted((tmp_path / "scenarios").iterdir()) if (p / "bundle.json").exists())
    bundle = rewritten(scenario, tmp_path / "acme", "bundle.json", tenant_id="acme")
    service = json.loads((bundle / "bundle.json").read_text())["service"]
    assert service != "order-service"
    code, lines = await replay(dev, bundle)
    assert code == 0, lines
    assert lines[-1].startswith("PASS: ")
    async with httpx.AsyncClient(base_url=dev.base_url, headers=ADMIN, timeout=10) as api:
        [run] = (await api.get("/v1/runs", params={"environment": "staging"})).json()["runs"]
        assert run["service"] == service


async def test_a_replay_that_cannot_run_exits_2(tmp_path: Path) -> None:
    broken = rewritten(DEMO_BUNDLE, tmp_path / "broken", "bundle.json", format_version=9)
    proc = subprocess.run([ira_command(), "replay", "--bundle", str(broken), "--url", "http://127.0.0.1:9"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert f"{broken}/bundle.json: format_version: unknown version 9 (known: 1, 2)" in proc.stdout
    assert proc.stdout.splitlines()[-1].startswith("ERROR: ")
    unreachable = subprocess.run([ira_command(), "replay", "--bundle", str(DEMO_BUNDLE), "--url",
                                  "http://127.0.0.1:9"], capture_output=True, text=True, timeout=60)
    assert unreachable.returncode == 2 and unreachable.stdout.splitlines()[-1].startswith("ERROR: ")
