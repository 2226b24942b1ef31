"""The investigators on held-out worlds (names, metrics, wording, times and numbers the rules were
not written against): the right top cause citing its evidence, no claim without evidence, no call
outside a binding, no injected instruction repeated. Runs the benchmark's pipeline (real source
adapter, ``plan_run``, branch handlers with the rule policies, the coordinator's synthesis)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.investigation import investigate, score
from ira.infra.scenarios.__main__ import generate_held_out

SEED = 21
"""Never measured before this test was written."""


@pytest.fixture(scope="module")
def worlds(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    return generate_held_out(tmp_path_factory.mktemp("held-out"), seeds=(SEED,))


async def test_every_held_out_story_gets_its_cause_with_cited_evidence(worlds: list[Path], tmp_path: Path) -> None:
    rows = []
    for bundle in worlds:
        home = tmp_path / bundle.name
        home.mkdir()
        report, audit, expected = await investigate(bundle, home)
        rows.append({"scenario": bundle.name, **score(report, audit, expected, service=str(report.service))})
    assert len(rows) == 13
    assert [r["scenario"] for r in rows if not r["right_cause"]] == []
    assert sum(r["unsupported"] for r in rows) == 0 and sum(r["outside"] for r in rows) == 0
    assert sum(r["injected"] for r in rows) == 0 and all(r["calls"] > 0 for r in rows)
