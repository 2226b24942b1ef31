"""The ``agents:`` section: investigator limits, connectors, and the policy of each branch.

Kept in its own module (runtime may not import ``ira.agents``), self-contained so that
``model.py`` can import it without a cycle. Every LLM credential is a ``SecretStr`` inside a
tuple of models, so ``Settings.secret_values()`` finds it for the log filter and redaction.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, model_validator

from ira.runtime.settings.section import Duration, Section


class LlmProviderSettings(Section):
    """One model endpoint: OpenAI-compatible (OpenAI, vLLM, Ollama, LiteLLM...) or Anthropic."""

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9_.-]{0,62}$")
    kind: Literal["openai", "anthropic"]
    model: str
    base_url: str | None = None
    """None: the SDK's default (the vendor's public API)."""
    api_key: SecretStr | None = None
    max_output_tokens: int = Field(default=1024, ge=16, le=32_000)
    timeout: Duration = timedelta(seconds=60)


class ModelPrice(Section):
    """What one model costs, in micro-dollars per million tokens (0.15 $/Mtok = 150000)."""

    model: str
    input_per_mtok_micros: int = Field(ge=0)
    output_per_mtok_micros: int = Field(ge=0)


class BranchPolicySettings(Section):
    """Which policy drives a branch: the deterministic rules, or a configured LLM provider."""

    policy: Literal["rules", "llm"] = "rules"
    provider: str | None = None
    """The ``agents.llm_providers`` entry to use when ``policy: llm``."""


class MetricQueries(Section):
    """PromQL templates of the metrics rules; ``$service`` and ``$rate`` are filled in."""

    latency_p95: str = ('histogram_quantile(0.95, sum by (le) '
                        '(rate(http_request_duration_seconds_bucket{service="$service"}[$rate])))')
    latency_p99: str = ('histogram_quantile(0.99, sum by (le) '
                        '(rate(http_request_duration_seconds_bucket{service="$service"}[$rate])))')
    error_ratio: str = ('(sum(rate(http_requests_total{service="$service",status=~"5.."}[$rate])) or vector(0)) '
                        '/ sum(rate(http_requests_total{service="$service"}[$rate]))')
    saturation: str = ('max(db_pool_connections_in_use{service="$service"} '
                       '/ db_pool_connections_max{service="$service"})')
    version: str = 'max by (version) (app_version_info{service="$service"})'


class MetricsBranchSettings(BranchPolicySettings):
    min_rate_window: Duration = timedelta(minutes=1)
    """Shortest ``rate()`` window; longer windows get ``4 x step``."""
    queries: MetricQueries = MetricQueries()


class LogsBranchSettings(BranchPolicySettings):
    limit: int = Field(default=1000, ge=10, le=5000)
    """Lines fetched per search (window and baseline each)."""


class PrometheusSettings(Section):
    url: str
    timeout: Duration = timedelta(seconds=10)
    max_bytes: int = Field(default=5 * 1024 * 1024, ge=1024)
    max_series: int = Field(default=50, ge=1)


class LokiSettings(Section):
    url: str
    timeout: Duration = timedelta(seconds=10)
    service_label: str = "service"


class JsonlLogSettings(Section):
    paths: str
    """A glob of JSON-lines files, e.g. ``/var/log/order-service/*.jsonl``."""


class AgentsSettings(Section):
    """Investigators: loop limits, connectors, and per-branch policy."""

    concurrency: int = Field(default=8, ge=1, le=256)
    """Branch steps one agents process runs at once."""
    max_turns: int = Field(default=28, ge=1, le=200)
    no_progress_repeats: int = Field(default=3, ge=2, le=20)
    """The same action with the same observation this many times stops the branch."""
    max_denials: int = Field(default=3, ge=1, le=50)
    tool_timeout: Duration = timedelta(seconds=15)
    observation_chars: int = Field(default=6000, ge=500, le=200_000)
    """How much of one observation an LLM is shown."""
    redact: tuple[SecretStr, ...] = ()
    """Extra strings never to show a model or store in an artifact (configured secrets are added)."""
    prometheus: PrometheusSettings | None = None
    loki: LokiSettings | None = None
    jsonl_logs: JsonlLogSettings | None = None
    runbooks_dir: Path | None = None
    recorded_bundle: Path | None = None
    """A scenario bundle: every tool answers from its recording (replay, the demo)."""
    metrics: MetricsBranchSettings = MetricsBranchSettings()
    logs: LogsBranchSettings = LogsBranchSettings()
    runbooks: BranchPolicySettings = BranchPolicySettings()
    llm_providers: tuple[LlmProviderSettings, ...] = ()
    prices: tuple[ModelPrice, ...] = ()

    @model_validator(mode="after")
    def _providers_exist(self) -> AgentsSettings:
        names = {p.name for p in self.llm_providers}
        for branch in ("metrics", "logs", "runbooks"):
            chosen: BranchPolicySettings = getattr(self, branch)
            if chosen.policy == "llm" and chosen.provider not in names:
                raise ValueError(f"{branch}.provider must name one of llm_providers (got {chosen.provider!r})")
        return self

    def configured_sources(self) -> frozenset[str]:
        """The branches whose data source is configured (a recording answers every branch):
        the coordinator plans only these, and states the others as gaps."""
        if self.recorded_bundle is not None:
            return frozenset({"metrics", "logs", "runbooks"})
        found = {"metrics"} if self.prometheus is not None else set()
        if self.loki is not None or self.jsonl_logs is not None:
            found.add("logs")
        if self.runbooks_dir is not None:
            found.add("runbooks")
        return frozenset(found)

    def provider(self, name: str) -> LlmProviderSettings:
        return next(p for p in self.llm_providers if p.name == name)

    def price(self, model: str) -> ModelPrice | None:
        return next((p for p in self.prices if p.model == model), None)
