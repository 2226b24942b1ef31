"""Prometheus HTTP API (``/api/v1/query``, ``/api/v1/query_range``) as a ``MetricSource``.

Read-only and idempotent; timeouts and 5xx are retryable, a bad query (HTTP 400/422
``bad_data``) is not. Answers are bounded twice: the body by ``max_bytes`` (a larger one is
refused, it cannot be parsed in part) and the result by ``max_series`` (the rest is cut and
the result marked ``partial``). Prometheus' own ``warnings`` also mark a result partial.
"""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx

from ira.connectors.http import get_json_limited
from ira.core.errors import ConnectorRejectedError, ConnectorUnavailableError
from ira.core.signals import READ_ONLY_RETRY, MetricResult, MetricSeries, RetryContract

SYSTEM = "prometheus"


class PrometheusMetricSource:
    """``client`` carries the base URL and timeout; nothing here builds connections."""

    retry: RetryContract = READ_ONLY_RETRY

    def __init__(self, client: httpx.AsyncClient, *, max_bytes: int = 5 * 1024 * 1024, max_series: int = 50) -> None:
        self._client, self._max_bytes, self._max_series = client, max_bytes, max_series

    async def query_range(self, query: str, *, start: datetime, end: datetime, step: timedelta) -> MetricResult:
        params = {"query": query, "start": _ts(start), "end": _ts(end), "step": f"{step.total_seconds():g}"}
        data = await self._get("/api/v1/query_range", params)
        return self._result(data, query=query, start=start, end=end, step=step.total_seconds())

    async def query(self, query: str, *, at: datetime) -> MetricResult:
        data = await self._get("/api/v1/query", {"query": query, "time": _ts(at)})
        return self._result(data, query=query, start=at, end=at, step=None)

    async def _get(self, path: str, params: dict[str, str]) -> dict[str, Any]:
        status, body = await get_json_limited(self._client, SYSTEM, path, params=params, max_bytes=self._max_bytes)
        try:
            payload = json.loads(body)
        except ValueError as exc:
            raise ConnectorUnavailableError(SYSTEM, f"HTTP {status}: answer is not JSON") from exc
        if status >= 400 or payload.get("status") != "success":
            raise ConnectorRejectedError(SYSTEM, f"{payload.get('errorType', status)}: {payload.get('error', '')}")
        return payload

    def _result(
        self, payload: dict[str, Any], *, query: str, start: datetime, end: datetime, step: float | None
    ) -> MetricResult:
        data = payload.get("data") or {}
        raw = _as_series(data.get("resultType"), data.get("result"))
        cut = len(raw) > self._max_series
        warnings = tuple(str(w) for w in payload.get("warnings") or ())
        if cut:
            warnings += (f"{len(raw)} series, kept the first {self._max_series}",)
        return MetricResult(query=query, start=start, end=end, step_seconds=step,
                            series=tuple(raw[: self._max_series]), partial=cut or bool(payload.get("warnings")),
                            warnings=warnings)


def _ts(at: datetime) -> str:
    return f"{at.timestamp():.3f}"


def _as_series(kind: str | None, result: Any) -> list[MetricSeries]:
    """Matrix, vector and scalar answers, all as series of points."""
    if kind == "matrix":
        return [MetricSeries(labels=r.get("metric", {}), points=_points(r.get("values", []))) for r in result or []]
    if kind == "vector":
        return [MetricSeries(labels=r.get("metric", {}), points=_points([r["value"]])) for r in result or []]
    if kind == "scalar" and result:
        return [MetricSeries(points=_points([result]))]
    return []


def _points(pairs: list[list[Any]]) -> tuple[tuple[datetime, float], ...]:
    """Finite points only: NaN (no traffic for a quantile) and Inf carry no comparable value
    and would not survive JSON; Prometheus sends them as strings, which float() reads."""
    found = ((float(t), float(v)) for t, v in pairs)
    return tuple((datetime.fromtimestamp(t, UTC), v) for t, v in found if math.isfinite(v))
