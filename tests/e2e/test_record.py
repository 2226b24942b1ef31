"""`ira record` against a real `ira dev`: a production run of a non-demo tenant, service and alert is
exported as a bundle (no planted secret in it), `ira bundle check` accepts it, and replaying it in
staging reproduces the original's decisions, branches, report and draft."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from ira.core.timeshift import retime
from ira.infra.bundle import load_bundle
from tests.e2e.devprocess import DevProcess
from tests.e2e.test_replay import replay
from tests.eventually import eventually
from tests.fakes.llm import FakeLlm, Reply
from tests.processes import ira_command
from tests.serving import serve

pytestmark = pytest.mark.slow
TENANT = "acme-payments"
ADMIN = {"authorization": "Bearer dev-admin-token"}
TOKENS = {"am": "dev-am-token", "changes": "dev-change-token"}
CANARIES = {
    "label": "AKIAQ7CANARYLABEL9X2",
    "annotation": "ghp_CanaryAnnotationToken0123456789abcd",
    "configured": "canary-configured-7f3e9a",
    "tool": "canary-log-password-51c2",
    "runbook": "sk_live_CanaryRunbookKey8d7e6f5a",
    "model": "sk-proj-CanaryModelReply0123456789",
}
"""Each shaped like a secret the redactor knows (or configured as one): none may reach a bundle."""


def planted(scenario: Path, target: Path) -> Path:
    """The scenario with a canary secret in an alert label and annotation, a log line and a runbook."""
    shutil.copytree(scenario, target)
    events = json.loads((target / "events.json").read_text())
    for event in events:
        for alert in event["payload"].get("alerts", ()):
            alert["labels"]["build_ref"] = CANARIES["label"]
            alert["annotations"]["note"] = f"auth via {CANARIES['annotation']} ({CANARIES['configured']})"
    (target / "events.json").write_text(json.dumps(events))
    lines = (target / "observations.jsonl").read_text().splitlines()
    for i, line in enumerate(lines):
        entry = json.loads(line)
        if entry["port"] == "logs.search" and entry["result"]["lines"]:
            entry["result"]["lines"][0]["message"] += f" db password={CANARIES['tool']}"
            lines[i] = json.dumps(entry)
    (target / "observations.jsonl").write_text("\n".join(lines) + "\n")
    for book in (target / "runbooks").iterdir():
        book.write_text(book.read_text() + f"\nSTRIPE_API_KEY={CANARIES['runbook']}\n")
    return target


def scenario_bundle(tmp_path: Path) -> Path:
    subprocess.run([sys.executable, "-m", "ira.infra.scenarios", str(tmp_path / "scenarios")], check=True,
                   capture_output=True)
    return planted(tmp_path / "scenarios" / "SCN-bad-deploy", tmp_path / "scenario")


async def started(tmp_path: Path, recording: Path, *, sections: dict[str, dict[str, Any]] | None = None,
                  **agents: Any) -> DevProcess:
    """``ira dev`` of tenant ``TENANT`` whose investigators answer from ``recording`` (its configured
    connectors), with ``agents`` settings and other ``sections``' settings on top."""
    (tmp_path / "home").mkdir()
    dev = DevProcess.on(tmp_path / "home")
    config_path = Path(dev.env["IRA_CONFIG"])
    config = yaml.safe_load(config_path.read_text())
    config["tenant"] = TENANT
    config["agents"].update(recorded_bundle=str(recording), redact=[CANARIES["configured"]], **agents)
    for name, values in (sections or {}).items():
        config[name] = {**config.get(name, {}), **values}
    config_path.write_text(yaml.safe_dump(config))
    await dev.start()
    return dev


@pytest.fixture
async def dev(tmp_path: Path) -> AsyncIterator[DevProcess]:
    process = await started(tmp_path, scenario_bundle(tmp_path))
    try:
        yield process
    finally:
        await process.stop()


async def production_run(dev: DevProcess, bundle: Path) -> dict[str, Any]:
    """The bundle's events posted to production as its sources would, now; its run once it waits."""
    recorded = load_bundle(bundle)
    shift = datetime.now(UTC) - recorded.manifest.window_end
    async with httpx.AsyncClient(base_url=dev.base_url, timeout=10) as client:
        for event in recorded.events:
            answer = await client.post(event.path, json=retime(event.payload, shift),
                                       headers={"authorization": f"Bearer {TOKENS[event.source_id]}"})
            assert answer.status_code == 202, answer.text

        async def waiting() -> dict[str, Any]:
            runs = (await client.get("/v1/runs", headers=ADMIN)).json()["runs"]
            assert len(runs) == 1 and runs[0]["state"] == "waiting", runs
            return dict(runs[0])

        return await eventually(waiting, timeout=120, interval=0.5)


async def ira(*args: str) -> tuple[int, list[str]]:
    proc = await asyncio.create_subprocess_exec(ira_command(), *args, stdout=subprocess.PIPE,
                                                stderr=subprocess.STDOUT)
    out, _ = await asyncio.wait_for(proc.communicate(), timeout=120)
    lines = out.decode().splitlines()
    print("\n".join(lines), file=sys.stderr)
    assert proc.returncode is not None
    return proc.returncode, lines


async def test_a_recorded_run_is_a_valid_bundle_without_secrets_that_replays_as_it_ran(
        dev: DevProcess, tmp_path: Path) -> None:
    run = await production_run(dev, tmp_path / "scenario")
    out = tmp_path / "recorded"

    code, lines = await ira("record", run["run_id"], "--out", str(out), "--url", dev.base_url)

    assert code == 0, lines
    assert lines[-1].startswith(f"recorded  run {run['run_id']} -> {out}")
    text = "\n".join(p.read_text() for p in sorted(out.rglob("*")) if p.is_file())
    assert not [name for name, canary in CANARIES.items() if canary in text]
    assert "[REDACTED]" in text
    code, lines = await ira("bundle", "check", str(out))
    assert code == 0 and lines[-1].startswith(f"ok: {run['run_id']} (format_version 2"), lines
    bundle = load_bundle(out)
    assert (bundle.manifest.tenant_id, bundle.manifest.service, bundle.manifest.alert_name) == (
        TENANT, "checkout-api", "CheckoutApiLatencyHigh")
    assert bundle.manifest.source_run_id == run["run_id"]
    assert [e.kind for e in bundle.events] == ["change", "alertmanager"]
    assert {o.port for o in bundle.observations} >= {"metrics.query_range", "logs.search", "runbooks.search"}
    assert bundle.runbooks and bundle.outcome is not None
    assert bundle.outcome.run_state == "waiting (approval)" and bundle.outcome.draft_body
    assert set(bundle.outcome.branches) == {"metrics", "logs", "runbooks"}

    code, lines = await replay(dev, out)

    assert code == 0, lines
    assert re.match(rf"PASS: replay rpl_\w+ of {run['run_id']} ended waiting \(approval\); 0 difference", lines[-1])
    compared = [line for line in lines if re.match(r"^(branch |draft |top hypotheses|facts|triage)", line)]
    assert compared and all(re.match(r"^.+?\s+yes\s", line) for line in compared), compared


async def test_a_run_still_running_or_unknown_is_not_recorded(dev: DevProcess, tmp_path: Path) -> None:
    code, lines = await ira("record", "run_doesnotexist", "--out", str(tmp_path / "none"), "--url", dev.base_url)
    assert code == 2 and "404" in lines[-1] and lines[-1].startswith("ERROR: ")
    assert not (tmp_path / "none").exists()


def retold(bundle: Path, old: str, new: str, *, expect_evidence: str) -> None:
    """The bundle's recorded log answers say ``new`` where the run saw ``old``; a team expects ``new``."""
    path = bundle / "observations.jsonl"
    path.write_text("".join(line.replace(old, new) if '"logs.search"' in line else line
                            for line in path.read_text().splitlines(keepends=True)))
    (bundle / "expectations.json").write_text(json.dumps(
        {"branches": {"logs": {"evidence_contains": [expect_evidence]}}}))


async def test_a_run_replays_in_one_go_and_live_observations_come_from_the_configured_connectors(
        dev: DevProcess, tmp_path: Path) -> None:
    run = await production_run(dev, tmp_path / "scenario")
    url = ("--url", dev.base_url, "--token", "dev-admin-token")

    code, lines = await ira("replay", "--run", run["run_id"], *url)

    assert code == 0, lines
    assert lines[0].startswith(f"recorded  run {run['run_id']}: 2 events")
    assert any(line.startswith("progress  events 2/2, run waiting (approval), branches finished 3/3") for line in lines)
    assert re.match(r"PASS: .* 0 difference\(s\) from the original; no expectations", lines[-1]), lines[-1]

    bundle = tmp_path / "retold"
    assert (await ira("record", run["run_id"], "--out", str(bundle), *url))[0] == 0
    retold(bundle, "NullPointerException", "OutOfMemoryError", expect_evidence="OutOfMemoryError")

    code, recorded = await ira("replay", "--bundle", str(bundle), "--observations", "recorded", *url)
    assert code == 0, recorded
    assert "(observations recorded)" in recorded[0] and "OutOfMemoryError" in "\n".join(recorded)
    assert re.match(r"PASS: .* [1-9]\d* difference\(s\) from the original; expectations met", recorded[-1])

    code, live = await ira("replay", "--bundle", str(bundle), "--observations", "live", *url)
    assert code == 1, live
    assert "(observations live)" in live[0] and "OutOfMemoryError" not in "\n".join(live[:-3])
    assert "unmet     logs: no evidence mentions 'OutOfMemoryError'" in live
    assert re.match(r"FAIL: .* 0 difference\(s\) from the original; 1 expectation\(s\) unmet", live[-1])

    async with httpx.AsyncClient(base_url=dev.base_url, headers=ADMIN, timeout=10) as api:  # the dashboard says which
        listed = (await api.get("/v1/replays")).json()["replays"]
        by_source = {r["observations_from"]: r["replay_id"] for r in listed if r["bundle_id"] == listed[0]["bundle_id"]}
        assert set(by_source) == {"recorded", "live"}, listed
        page = (await api.get("/replays")).text
        assert "observations live" in page and "observations recorded" in page
        for source, replay_id in by_source.items():
            assert f"observations {source}" in (await api.get(f"/replays/{replay_id}")).text


@pytest.mark.parametrize("args", [(), ("--bundle", "x", "--run", "run_x"), ("--run", "run_x", "--observations", "y")])
async def test_replay_takes_one_of_a_bundle_or_a_run_and_recorded_or_live(args: tuple[str, ...]) -> None:
    code, lines = await ira("replay", *args, "--url", "http://127.0.0.1:9")
    assert code == 2 and lines[-1].startswith("ERROR: give exactly one of --bundle DIR and --run RUN_ID")


def logs_investigation(body: dict[str, Any]) -> Reply:
    """The model's first move: search the warning and error logs of the branch's whole window."""
    start, end = re.search(r"time window (\S+) \.\. (\S+) \(UTC\)", json.dumps(body)).groups()  # type: ignore[union-attr]
    return Reply(tool="logs__search", arguments={"service": "checkout-api", "start": start, "end": end,
                                                  "min_level": "warning", "text": None, "limit": 200})


CONCLUSION = Reply(tool="finish", arguments={"summary": f"debug key {CANARIES['model']} seen", "hypotheses": [
    {"statement": "the 4.3.0 deploy broke PriceCalculator", "confidence": 0.8, "evidence_refs": ["logs-1-obs"],
     "unverified": ["rollback not tried"]}]}, input_tokens=700, output_tokens=90)


async def llm_dev(tmp_path: Path, llm: str) -> DevProcess:
    """ira dev whose logs branch is an LLM policy on the fake OpenAI-compatible provider at ``llm``."""
    return await started(tmp_path, scenario_bundle(tmp_path), logs={"policy": "llm", "provider": "fake"},
                         llm_providers=[{"name": "fake", "kind": "openai", "model": "gpt-fake",
                                         "base_url": f"{llm}/v1", "api_key": "sk-test-not-a-secret-0000"}])


async def test_an_llm_investigation_is_recorded_and_replays_from_its_recorded_model_calls(tmp_path: Path) -> None:
    fake = FakeLlm([logs_investigation, CONCLUSION])
    async with serve(fake.openai_app()) as llm:
        dev = await llm_dev(tmp_path, llm)
        try:
            run = await production_run(dev, tmp_path / "scenario")
            assert len(fake.requests) == 2, json.dumps(fake.requests[1]["messages"][-2:])[:3000]
            out = tmp_path / "recorded"
            assert (await ira("record", run["run_id"], "--out", str(out), "--url", dev.base_url))[0] == 0

            bundle = load_bundle(out)
            assert [c.branch for c in bundle.model_calls] == ["logs", "logs"]
            assert all(c.fingerprint.startswith("sha256:") and c.usage for c in bundle.model_calls)
            assert bundle.outcome is not None
            assert bundle.outcome.branches["logs"].hypotheses == ["the 4.3.0 deploy broke PriceCalculator"]
            text = "\n".join(p.read_text() for p in sorted(out.rglob("*")) if p.is_file())
            assert CANARIES["model"] not in text and "debug key [REDACTED] seen" in text

            code, lines = await replay(dev, out)

            assert code == 0, lines
            assert len(fake.requests) == 2  # every model call answered from the recording
            assert re.match(r"PASS: .* 0 difference\(s\) from the original", lines[-1]), lines[-1]
            assert any(re.match(r"branch logs\s+yes\s+done \| done", line) for line in lines)
        finally:
            await dev.stop()


async def test_a_model_call_the_provider_failed_is_recorded_and_replays_as_that_error(tmp_path: Path) -> None:
    """The provider refuses the first call (HTTP 400): the turn is invalid with its error and the
    branch asks again. The bundle keeps that error with the request's fingerprint, before the reply
    the same request got next, and a replay fails and then answers the same way, without a provider."""
    conclusion = Reply(tool="finish", arguments={"summary": "seen", "hypotheses": [  # turn 1 failed: logs are turn 2
        {"statement": "the 4.3.0 deploy broke PriceCalculator", "confidence": 0.8, "evidence_refs": ["logs-2-obs"]}]})
    fake = FakeLlm([Reply(status=400), logs_investigation, conclusion])
    async with serve(fake.openai_app()) as llm:
        dev = await llm_dev(tmp_path, llm)
        try:
            run = await production_run(dev, tmp_path / "scenario")
            assert len(fake.requests) == 3, json.dumps(fake.requests[-1]["messages"][-2:])[:3000]
            out = tmp_path / "recorded"
            assert (await ira("record", run["run_id"], "--out", str(out), "--url", dev.base_url))[0] == 0

            failed, concluded = load_bundle(out).model_calls
            assert [e.code for e in failed.errors] == ["connector_rejected"] and "HTTP 400" in failed.errors[0].message
            assert failed.response is not None and not concluded.errors  # the retry of that request answered

            code, lines = await replay(dev, out)

            assert code == 0, lines
            assert len(fake.requests) == 3  # the failure and the answers came from the recording
            assert re.match(r"PASS: .* 0 difference\(s\) from the original", lines[-1]), lines[-1]
            assert any(re.match(r"branch logs\s+yes\s+done \| done", line) for line in lines)
            async with httpx.AsyncClient(base_url=dev.base_url, headers=ADMIN, timeout=10) as api:
                staging = (await api.get("/v1/runs", params={"environment": "staging"})).json()["runs"]
                events = (await api.get(f"/v1/runs/{staging[0]['run_id']}/events")).text
            assert "connector_rejected" in events  # the replayed branch saw the provider's error
        finally:
            await dev.stop()
