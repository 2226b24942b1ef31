"""The bundle format: the demo bundle reads as version 1; broken bundles say exactly what is wrong."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ira.infra.bundle import BundleError, BundleExistsError, check_bundle, load_bundle, write_bundle
from ira.infra.bundle.schema import SCHEMA_FILE, render
from ira.infra.demo import DEMO_BUNDLE
from ira.runtime.cli import app


@pytest.fixture
def bundle(tmp_path: Path) -> Path:
    copy = tmp_path / "bundle"
    shutil.copytree(DEMO_BUNDLE, copy)
    return copy


def check(directory: Path) -> tuple[int, list[str]]:
    result = CliRunner().invoke(app, ["bundle", "check", str(directory)])
    return result.exit_code, result.output.splitlines()


def test_the_demo_bundle_is_valid_and_reads_as_version_1() -> None:
    loaded = load_bundle(DEMO_BUNDLE)
    assert loaded.manifest.format_version == 1
    assert [e.kind for e in loaded.events] == ["change", "alertmanager"]
    assert loaded.outcome is not None and set(loaded.outcome.branches) == {"metrics", "logs", "runbooks"}
    code, lines = check(DEMO_BUNDLE)
    assert code == 0 and lines[-1].startswith("ok: ALR-20260429-017 (format_version 1, 2 events, 8 observations")


def test_a_missing_file_is_named(bundle: Path) -> None:
    (bundle / "events.json").unlink()
    code, lines = check(bundle)
    assert code == 1
    assert f"{bundle}/events.json: missing file" in lines


def test_bad_json_says_where(bundle: Path) -> None:
    (bundle / "bundle.json").write_text('{"bundle_id": "x",\n  oops}')
    code, lines = check(bundle)
    assert code == 1
    assert any(line.startswith(f"{bundle}/bundle.json: bad JSON: ") and "line 2" in line for line in lines)


def test_an_unknown_version_is_refused(bundle: Path) -> None:
    manifest = json.loads((bundle / "bundle.json").read_text())
    (bundle / "bundle.json").write_text(json.dumps({**manifest, "format_version": 7}))
    code, lines = check(bundle)
    assert code == 1
    assert f"{bundle}/bundle.json: format_version: unknown version 7 (known: 1, 2)" in lines


def test_an_observation_without_request_names_its_line(bundle: Path) -> None:
    path = bundle / "observations.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    del rows[2]["request"]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    code, lines = check(bundle)
    assert code == 1
    assert f"{bundle}/observations.jsonl line 3: request: field required" in lines


def test_an_observation_has_a_result_or_an_error_and_errors_need_version_2(bundle: Path) -> None:
    path = bundle / "observations.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    rows[0] = {**rows[0], "result": None, "error": {"code": "connector_unavailable", "message": "503"}}
    rows[1] = {**rows[1], "error": {"code": "x", "message": "y"}}
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    problems = [str(p) for p in check_bundle(bundle)]
    assert "observations.jsonl entry 1: error: recorded errors need format_version 2" in problems
    assert any(p.startswith("observations.jsonl line 2: ") and "exactly one of result or error" in p
               for p in problems)
    manifest = json.loads((bundle / "bundle.json").read_text())
    (bundle / "bundle.json").write_text(json.dumps({**manifest, "format_version": 2}))
    assert [str(p) for p in check_bundle(bundle)] == [p for p in problems if "entry 1" not in p]


def test_every_problem_is_listed_at_once(bundle: Path) -> None:
    (bundle / "events.json").write_text("[]")
    (bundle / "expectations.json").write_text('{"branches": {"metrics": {"stop_reason": 3}}}')
    with pytest.raises(BundleError) as raised:
        load_bundle(bundle)
    assert {p.path for p in raised.value.problems} == {"events.json",
                                                      "expectations.json: branches.metrics.stop_reason"}


def test_a_bundle_of_another_tenant_service_and_alert_is_valid(bundle: Path) -> None:
    manifest = json.loads((bundle / "bundle.json").read_text())
    (bundle / "bundle.json").write_text(json.dumps({**manifest, "tenant_id": "acme", "service": "billing-api",
                                                    "alert_name": "BillingErrors", "format_version": 2}))
    assert check_bundle(bundle) == []
    assert load_bundle(bundle).manifest.service == "billing-api"


def test_schema_file_matches_the_models() -> None:
    """``python -m ira.infra.bundle.schema`` regenerates it; the documented format is the checked one."""
    assert SCHEMA_FILE.read_text() == render()
    schema = json.loads(SCHEMA_FILE.read_text())
    assert schema["properties"]["bundle.json"]["properties"]["format_version"]["default"] == 1


def test_a_written_bundle_reads_back_the_same_and_an_existing_directory_is_not_overwritten(tmp_path: Path) -> None:
    document = load_bundle(DEMO_BUNDLE).document
    document = document.model_copy(update={"manifest": document.manifest.model_copy(update={"format_version": 2})})

    written = write_bundle(document, tmp_path / "copy")

    assert load_bundle(written).document == document
    assert check(written)[0] == 0
    with pytest.raises(BundleExistsError):
        write_bundle(document, written)
    assert not (tmp_path / "copy.partial").exists()
