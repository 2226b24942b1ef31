"""Runbooks: front matter, BM25 ranking, service scoping, version applicability."""

from __future__ import annotations

import pytest

from ira.connectors.runbooks import FileRunbookSource, version_in_range, words
from ira.core.signals import RunbookQuery
from ira.infra.demo import RUNBOOKS_DIR


@pytest.mark.parametrize(("version", "spec", "expected"), [
    ("v3", ">=3.0,<4.0", True), ("v3.2.1", ">=3.0,<4.0", True), ("v2.9", ">=3.0,<4.0", False),
    ("v3", ">=2.0,<3.0", False), ("2.4.0", "2.x", True), ("3.0", "2.*", False), ("v3", "3", True),
    ("v3", None, True), ("v4", "!=4", False), ("garbage", ">=1", False), ("v3", "==3.0", True),
])
def test_version_in_range(version: str, spec: str | None, expected: bool) -> None:
    assert version_in_range(version, spec) is expected


def test_words_split_alert_names() -> None:
    assert words("OrderServiceHighLatency") == ["order", "service", "high", "latency"]
    assert words("order-service") == ["order", "service"]


async def test_demo_runbooks_rank_v3_first_flag_v2_and_skip_other_services() -> None:
    source = FileRunbookSource(RUNBOOKS_DIR)
    result = await source.search(RunbookQuery(service="order-service", alert="OrderServiceHighLatency",
                                              text="db pool timeout latency", version="v3"))
    ids = [h.runbook.runbook_id for h in result.hits]
    assert ids[:2] == ["order-service-db-pool-v3", "order-service-latency-v2"]
    assert "payment-service-latency" not in ids and "generic-latency" in ids
    applies = {h.runbook.runbook_id: h.applies for h in result.hits}
    assert applies["order-service-db-pool-v3"] is True and applies["order-service-latency-v2"] is False
    assert result.hits[0].runbook.causes and result.hits[0].runbook.path == "order-service-db-pool-v3.md"


async def test_without_a_version_applicability_is_unknown() -> None:
    result = await FileRunbookSource(RUNBOOKS_DIR).search(RunbookQuery(service="order-service", alert="X"))
    assert result.hits and all(h.applies is None for h in result.hits)


async def test_an_empty_query_finds_nothing_and_a_missing_directory_is_empty(tmp_path) -> None:  # type: ignore[no-untyped-def]
    assert (await FileRunbookSource(RUNBOOKS_DIR).search(RunbookQuery())).hits == ()
    assert (await FileRunbookSource(tmp_path / "none").search(RunbookQuery(text="latency"))).hits == ()
