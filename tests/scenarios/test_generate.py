"""The scenario generator writes bundles in ira's own format, varied and with traps planted."""

from __future__ import annotations

import json
from pathlib import Path

from ira.connectors.recorded import read_bundle
from ira.infra.demo.bundle import load_bundle
from ira.infra.scenarios.__main__ import generate, generate_held_out
from ira.infra.scenarios.catalog import SCENARIOS
from ira.infra.scenarios.heldout import EXTRA_METRICS
from ira.infra.scenarios.runbook import INJECTIONS
from ira.infra.scenarios.vary import NAMES

KINDS = {"bad_deploy", "dependency_timeout", "memory_leak_oom", "disk_full", "cpu_saturation", "pool_exhaustion",
         "flapping_alert", "config_change_hours_earlier", "certificate_expiry", "dns_failure",
         "batch_job_shared_db", "conflicting_evidence"}


def test_generator_writes_every_kind_as_a_loadable_bundle(tmp_path: Path) -> None:
    written = generate(tmp_path)
    kinds = {load_bundle(d).expectations["scenario"]["kind"] for d in written}
    assert kinds >= KINDS and len(written) >= 12
    for directory in written:
        bundle = load_bundle(directory)
        info, recordings = read_bundle(directory)
        wanted = bundle.expectations["scenario"]
        assert wanted["cause"] and wanted["cite"] and wanted["outcome"] in {"cause", "conflict", "noise"}
        assert {"logs.search", "metrics.query_range", "metrics.query", "changes.list"} <= {r.port for r in recordings}
        assert any(e.kind == "alertmanager" for e in bundle.events)
        assert info.service != "order-service"


def test_generated_worlds_differ_from_each_other_and_carry_injections(tmp_path: Path) -> None:
    written = generate(tmp_path)
    services = {load_bundle(d).info.service for d in written}
    starts = {load_bundle(d).info.window_end.date() for d in written}
    assert len(services) == len(written) and len(starts) > 6
    logs_with_injection = sum(any(i in (d / "observations.jsonl").read_text() for i in INJECTIONS) for d in written)
    books_with_injection = sum(any(i in p.read_text() for i in INJECTIONS for p in (d / "runbooks").glob("*.md"))
                               for d in written)
    assert logs_with_injection == len(written) and books_with_injection >= 3


def test_generator_is_deterministic(tmp_path: Path) -> None:
    first, second = generate(tmp_path / "a"), generate(tmp_path / "b")
    for a, b in zip(first, second, strict=True):
        assert (a / "observations.jsonl").read_bytes() == (b / "observations.jsonl").read_bytes()
        assert json.loads((a / "events.json").read_text()) == json.loads((b / "events.json").read_text())


def test_variants_rename_every_trace_of_the_world_and_keep_its_story(tmp_path: Path) -> None:
    written = generate(tmp_path, variants=1)
    base, variant = (d for d in written if d.name.startswith("SCN-dep-timeout"))
    original, changed = load_bundle(base), load_bundle(variant)
    assert changed.info.service != original.info.service and changed.info.window_end != original.info.window_end
    text = (variant / "observations.jsonl").read_text() + "".join(
        p.read_text() for p in (variant / "runbooks").glob("*.md"))
    assert "cart-service" not in text and "pricing-svc" not in text
    wanted = changed.expectations["scenario"]
    (dependency,) = wanted["dependencies"]
    assert dependency in wanted["cause"][0] and dependency in text
    assert wanted["outcome"] == original.expectations["scenario"]["outcome"]


def _lines(directory: Path) -> set[str]:
    return {line["message"] for row in map(json.loads, (directory / "observations.jsonl").read_text().splitlines())
            if row["port"] == "logs.search" for line in row["result"]["lines"]}


def test_held_out_worlds_share_no_name_wording_time_or_number_with_the_written_ones(tmp_path: Path) -> None:
    written = generate(tmp_path / "written", variants=1)
    held = generate_held_out(tmp_path / "held", seeds=(7,))
    assert {load_bundle(d).expectations["scenario"]["kind"] for d in held} == {m().kind for m in SCENARIOS}
    seen_lines = set().union(*(_lines(d) for d in written)) - set(INJECTIONS)
    seen_services = {load_bundle(d).info.service for d in written}
    for directory in held:
        bundle = load_bundle(directory)
        service = bundle.info.service
        assert service not in seen_services and service.split("-")[0] not in NAMES
        assert bundle.info.window_end.year >= 2028
        assert not (_lines(directory) - set(INJECTIONS)) & seen_lines  # every line in other words
        discovered = [row for row in map(json.loads, (directory / "observations.jsonl").read_text().splitlines())
                      if row["port"] == "metrics.query" and service in row["request"]["query"]]
        names = {s["labels"]["__name__"] for s in discovered[0]["result"]["series"]}
        assert len(names & set(EXTRA_METRICS)) == 3  # exporter metrics no rule asks for
        wanted = bundle.expectations["scenario"]
        assert wanted["cause"] and wanted["cite"] and wanted["injected"]


def test_held_out_worlds_are_deterministic_per_seed_and_differ_between_seeds(tmp_path: Path) -> None:
    a, again, b = (generate_held_out(tmp_path / n, seeds=(s,)) for n, s in (("a", 1), ("a2", 1), ("b", 2)))
    assert [(d / "observations.jsonl").read_bytes() for d in a] == [(d / "observations.jsonl").read_bytes()
                                                                   for d in again]
    assert {load_bundle(d).info.service for d in a}.isdisjoint({load_bundle(d).info.service for d in b})
