"""The ``agents`` role: the composition root of the investigators.

Builds the connectors and policies from ``settings.agents``, one branch handler per kind
(``metrics``, ``logs``, ``runbooks``), the step dispatcher, and a consumer of step wake-ups
(plain mode: the claim is the dedupe). Wake-ups are handed to a bounded pool so that the three
branches of a run (one partition: keyed by run) investigate at the same time. The offset may
thus be committed before a branch finishes; if the process dies, the step's lease expires and
the scanner wakes it again, and the new owner replays the committed turns.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field, replace
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
from opentelemetry import trace
from opentelemetry.trace import Tracer

from ira.agents.handler import BranchHandler
from ira.agents.loop import BranchLoop, LoopLimits
from ira.agents.policies import Policy
from ira.agents.policies.rules import rule_policy
from ira.agents.redact import Redactor
from ira.connectors.bound import ConnectorSet
from ira.connectors.deployments import SqlChangeSource
from ira.connectors.logs.jsonl import JsonlLogSource
from ira.connectors.logs.loki import LokiLogSource
from ira.connectors.prometheus import PrometheusMetricSource
from ira.connectors.recorded import RecordingSet, recorded_connectors, write_recording
from ira.connectors.runbooks import FileRunbookSource
from ira.core.clock import Clock
from ira.core.envelope import Topic
from ira.core.investigation import BranchBinding, BranchKind
from ira.core.replay import RECORDING_LABEL, STAGING
from ira.runtime.dispatch import StepHandler
from ira.runtime.intake import StepIntake
from ira.runtime.settings import Settings
from ira.runtime.settings.agents import AgentsSettings, LlmProviderSettings
from ira.runtime.store.artifacts import get_artifact
from ira.runtime.store.database import Database

if TYPE_CHECKING:
    from fastapi import APIRouter

    from ira.runtime.platform import Platform

log = logging.getLogger(__name__)

GROUP_ID = "ira-agents"


async def _http(stack: AsyncExitStack, url: str, timeout: timedelta) -> httpx.AsyncClient:
    return await stack.enter_async_context(httpx.AsyncClient(base_url=url, timeout=timeout.total_seconds()))


@dataclass
class StagingRecordings:
    """A staging replay's branches answer from the recording its alert names, never from live systems.

    The recording is an artifact (written by the replay service); it is laid out once as a bundle
    directory under ``directory`` and its connectors kept for the next branch of the same replay.
    """

    db: Database
    directory: Path
    keep: int = 16
    _cache: dict[tuple[str, str], ConnectorSet] = field(default_factory=dict)

    async def __call__(self, binding: BranchBinding) -> ConnectorSet | None:
        ref = binding.labels.get(RECORDING_LABEL)
        if binding.environment != STAGING or not ref:
            return None
        key = (binding.tenant_id, ref)
        if key not in self._cache:
            async with self.db.reader() as conn:
                _, body = await get_artifact(conn, binding.tenant_id, ref)
            folder = self.directory / binding.tenant_id / ref.replace(":", "-")
            folder.parent.mkdir(parents=True, exist_ok=True)
            write_recording(RecordingSet.model_validate_json(body), folder)
            while len(self._cache) >= self.keep:
                self._cache.pop(next(iter(self._cache)))
            self._cache[key] = recorded_connectors(folder)
        return self._cache[key]


async def build_connectors(settings: AgentsSettings, db: Database, stack: AsyncExitStack) -> ConnectorSet:
    """Live connectors from the configuration (or a recording, which then answers everything)."""
    if settings.recorded_bundle is not None:
        return recorded_connectors(settings.recorded_bundle)
    metrics: PrometheusMetricSource | None = None
    logs: LokiLogSource | JsonlLogSource | None = None
    if (prom := settings.prometheus) is not None:
        metrics = PrometheusMetricSource(await _http(stack, prom.url, prom.timeout), max_bytes=prom.max_bytes,
                                         max_series=prom.max_series)
    if (loki := settings.loki) is not None:
        logs = LokiLogSource(await _http(stack, loki.url, loki.timeout), service_label=loki.service_label)
    elif settings.jsonl_logs is not None:
        logs = JsonlLogSource(settings.jsonl_logs.paths)
    runbooks = FileRunbookSource(settings.runbooks_dir) if settings.runbooks_dir else None
    return ConnectorSet(metrics=metrics, logs=logs, runbooks=runbooks, changes=SqlChangeSource(db))


def llm_client(provider: LlmProviderSettings):  # type: ignore[no-untyped-def]
    """The SDK client of a provider; retries are the loop's business, so the SDK makes none."""
    key = provider.api_key.get_secret_value() if provider.api_key else "unset"
    timeout = provider.timeout.total_seconds()
    if provider.kind == "anthropic":
        import anthropic

        from ira.connectors.llm.anthropic import AnthropicChatClient

        return AnthropicChatClient(anthropic.AsyncAnthropic(api_key=key, base_url=provider.base_url,
                                                            timeout=timeout, max_retries=0))
    import openai

    from ira.connectors.llm.openai import OpenAiChatClient

    return OpenAiChatClient(openai.AsyncOpenAI(api_key=key, base_url=provider.base_url, timeout=timeout,
                                               max_retries=0))


def build_policy(kind: BranchKind, settings: AgentsSettings, *, redactor: Redactor | None = None,
                 tracer: Tracer | None = None) -> Policy:
    section = getattr(settings, kind.value)
    if section.policy == "rules":
        return rule_policy(kind, section)
    from ira.agents.policies.llm import LlmPolicy

    provider = settings.provider(section.provider)
    return LlmPolicy(client=llm_client(provider), provider=provider, price=settings.price(provider.model),
                     observation_chars=settings.observation_chars, redactor=redactor or Redactor(),
                     tracer=tracer or trace.get_tracer("ira.agents"))


def build_handlers(
    settings: Settings, *, db: Database, clock: Clock, connectors: ConnectorSet, tracer: Tracer | None = None,
) -> dict[str, StepHandler]:
    """One handler per branch; ``tracer`` (the global provider's by default) traces tool calls and model calls."""
    agents = settings.agents
    redactor = settings.redactor()  # every SecretStr of the settings, ``agents.redact`` included
    limits = LoopLimits(max_turns=agents.max_turns, no_progress_repeats=agents.no_progress_repeats,
                        max_denials=agents.max_denials, tool_timeout=agents.tool_timeout,
                        artifact_max_bytes=settings.artifact_max_bytes)
    tracer = tracer or trace.get_tracer("ira.agents")
    policies = {kind: build_policy(kind, agents, redactor=redactor, tracer=tracer) for kind in BranchKind}

    def loop_for(kind: BranchKind) -> BranchLoop:
        return BranchLoop(db=db, clock=clock, policy=policies[kind], connectors=connectors, redactor=redactor,
                          limits=limits, tracer=tracer)

    return {kind.value: BranchHandler(kind=kind, db=db, clock=clock, loop_for=loop_for,
                                      artifact_max_bytes=settings.artifact_max_bytes) for kind in BranchKind}


class AgentsRole:
    """``ira worker --role agents``."""

    name = "agents"

    def routers(self, platform: Platform) -> Sequence[APIRouter]:
        return ()

    async def run(self, platform: Platform, stop: asyncio.Event) -> None:
        from ira.runtime.wiring import build_consumer, build_dispatcher

        async with AsyncExitStack() as stack:
            connectors = replace(await build_connectors(platform.settings.agents, platform.db, stack),
                                 route=StagingRecordings(platform.db, platform.settings.data_dir / "recordings"))
            handlers = build_handlers(platform.settings, db=platform.db, clock=platform.clock, connectors=connectors)
            intake = StepIntake(build_dispatcher(platform, "agents", handlers), platform.settings.agents.concurrency)
            consumer = build_consumer(platform, name="agents-steps", topics=[Topic.STEPS], handler=intake.wakeup,
                                      inbox=False, group_id=GROUP_ID)
            try:
                with intake.eager(platform.db):  # branches a commit of this process readied start at once
                    await consumer.run(stop)
            finally:
                await intake.drain()  # running branches go back to others when their leases expire


role = AgentsRole()
