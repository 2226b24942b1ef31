"""The Prometheus connector against a real Prometheus: ranges, instants, refusals, limits."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
import pytest_asyncio

from ira.connectors.http import ResponseTooLargeError
from ira.connectors.prometheus import PrometheusMetricSource
from ira.core.errors import ConnectorRejectedError, ConnectorUnavailableError
from tests.observability import scrape_config, start_prometheus
from tests.processes import free_port

pytestmark = pytest.mark.slow
TWO_SERIES = 'vector(1) or label_replace(vector(2), "kind", "second", "", "")'


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def prometheus(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[str]:
    async with start_prometheus(tmp_path_factory.mktemp("prom"), scrape_config({})) as url:
        yield url


async def test_range_and_instant_queries(prometheus: str) -> None:
    now = datetime.now(UTC)
    async with httpx.AsyncClient(base_url=prometheus, timeout=5) as client:
        source = PrometheusMetricSource(client)
        ranged = await source.query_range("vector(0.21)", start=now - timedelta(seconds=10), end=now,
                                          step=timedelta(seconds=1))
        instant = await source.query(TWO_SERIES, at=now)
    assert len(ranged.series) == 1 and len(ranged.series[0].points) >= 10
    assert {v for _, v in ranged.series[0].points} == {0.21} and not ranged.partial
    assert sorted(s.points[0][1] for s in instant.series) == [1.0, 2.0]


async def test_a_bad_query_is_rejected_with_prometheus_reason(prometheus: str) -> None:
    async with httpx.AsyncClient(base_url=prometheus, timeout=5) as client:
        with pytest.raises(ConnectorRejectedError, match="bad_data"):
            await PrometheusMetricSource(client).query("sum(", at=datetime.now(UTC))


async def test_too_many_series_are_cut_and_marked_partial(prometheus: str) -> None:
    async with httpx.AsyncClient(base_url=prometheus, timeout=5) as client:
        result = await PrometheusMetricSource(client, max_series=1).query(TWO_SERIES, at=datetime.now(UTC))
    assert len(result.series) == 1 and result.partial and "kept the first 1" in result.warnings[0]


async def test_a_body_over_the_limit_is_refused(prometheus: str) -> None:
    now = datetime.now(UTC)
    async with httpx.AsyncClient(base_url=prometheus, timeout=5) as client:
        with pytest.raises(ResponseTooLargeError):
            await PrometheusMetricSource(client, max_bytes=1024).query_range(
                "vector(1)", start=now - timedelta(minutes=10), end=now, step=timedelta(seconds=1))


async def test_an_unreachable_prometheus_is_retryable(tmp_path: Path) -> None:
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{free_port()}", timeout=2) as client:
        with pytest.raises(ConnectorUnavailableError) as caught:
            await PrometheusMetricSource(client).query("up", at=datetime.now(UTC))
    assert caught.value.retryable
