"""Canary secrets: planted where secrets really turn up, they never leave ira (issue #16).

Given distinct random canaries in an env-style assignment echoed by a log line
(``STRIPE_API_KEY=sk_live_<canary>``), a configured API token (config file) and the Slack
signing secret (``IRA_SLACK_SIGNING_SECRET``) echoed bare by a log line and a runbook, an
alert's annotations (and so its title), a runbook's PEM key and Slack token, an approver's
reason and the model's own tool arguments; when a real run goes end to end (coordinator and
real agents on the store, the logs branch driven by an LLM through the fake OpenAI server, the
runbooks branch by rules, Slack as the approval channel, the builtin ticket system); then no
canary is in any artifact, run event, log line, exported span, model request, the ticket, or
a Slack call. With the redactor disabled, every one of those sinks carries some.
"""

from __future__ import annotations

import io
import json
import logging
import secrets
import shutil
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Tracer
from sqlalchemy import select

from ira.agents.main import build_connectors, build_handlers
from ira.connectors.slack.client import SlackChatPoster, build_web_client
from ira.connectors.tickets.builtin import BuiltinTicketSystem
from ira.connectors.tickets.schema import tickets
from ira.coordinator.config import WorkflowConfig
from ira.coordinator.deps import Deps
from ira.coordinator.handlers import step_handlers
from ira.core.clock import FrozenClock
from ira.core.decision import IncidentDecision
from ira.core.states import RunState, WaitKind
from ira.infra.demo import RUNBOOKS_DIR
from ira.notifier.slack import SlackChannel
from ira.notifier.webhook import NoChannel
from ira.notifier.worker import Notifier
from ira.runtime.dispatch import StepDispatcher
from ira.runtime.logs import configure_logging
from ira.runtime.settings import Settings, load_settings
from ira.runtime.store.database import Database
from ira.runtime.store.schema import artifacts, events
from ira.runtime.telemetry import setup_tracing, shutdown_tracing
from tests.coordinator.harness import T0, Pump, api, decision, envelope, run_for_incident
from tests.fakes.llm import FakeLlm, Reply
from tests.fakes.slack import BOT_TOKEN, CHANNEL_ID, SIGNING_SECRET, FakeSlack, fake_slack
from tests.serving import serve

LEAD_TOKEN = "acme-lead-token"
WINDOW = (T0 - timedelta(minutes=30), T0)


def _canary() -> str:
    return "cnry" + secrets.token_hex(12)


@dataclass(frozen=True)
class Canaries:
    """One random value per place a secret was planted."""

    env_log: str = field(default_factory=_canary)
    """``STRIPE_API_KEY=sk_live_<canary>`` in a log line."""
    configured: str = field(default_factory=_canary)
    """A configured API token (config file), echoed bare (no ``key=``) by a log line and a runbook."""
    from_env: str = field(default_factory=_canary)
    """The Slack signing secret, set by ``IRA_SLACK_SIGNING_SECRET``, echoed bare by a log line."""
    annotation: str = field(default_factory=_canary)
    """``DB_PASSWORD=<canary>`` in the alert's summary (and so the incident title)."""
    annotation_auth: str = field(default_factory=_canary)
    """``Authorization: Bearer <canary>`` in the alert's description."""
    log_token: str = field(default_factory=_canary)
    """``ghp_<canary>`` in a log line."""
    runbook_key: str = field(default_factory=_canary)
    """A PEM private key in a runbook."""
    runbook_slack: str = field(default_factory=_canary)
    """``xoxb-<canary>`` in a runbook."""
    reason: str = field(default_factory=_canary)
    """``PASSWORD=<canary>`` pasted into the approver's reason."""
    model_echo: str = field(default_factory=_canary)
    """A secret the model itself writes into tool arguments (one call denied, one run)."""

    def all(self) -> dict[str, str]:
        return dict(vars(self))


def _log_line(minutes: float, level: str, message: str) -> str:
    at = (T0 - timedelta(minutes=minutes)).isoformat().replace("+00:00", "Z")
    return json.dumps({"ts": at, "level": level, "service": "order-service", "message": message}) + "\n"


def plant_logs(path: Path, c: Canaries) -> Path:
    rows = [_log_line(20 - m, "info", f"GET /orders/ord_{m:04d} 200 in 120ms") for m in range(10)]
    rows += [_log_line(4 - i / 10, "error", "db pool timeout: could not acquire connection within 2500ms")
             for i in range(10)]
    rows += [_log_line(3, "error", f"payment client init failed: STRIPE_API_KEY=sk_live_{c.env_log} rejected"),
             _log_line(2.5, "error", f"upstream auth refused credential {c.configured}"),
             _log_line(2.2, "error", f"webhook verification used {c.from_env}"),
             _log_line(2, "error", f"git fetch failed with ghp_{c.log_token}0123")]
    path.write_text("".join(rows))
    return path


def plant_runbooks(directory: Path, c: Canaries) -> Path:
    shutil.copytree(RUNBOOKS_DIR, directory)
    for runbook in directory.glob("*.md"):
        runbook.write_text(runbook.read_text() + (
            f"\n## Access\nUse the service key:\n-----BEGIN RSA PRIVATE KEY-----\nMIIEow{c.runbook_key}\n"
            f"-----END RSA PRIVATE KEY-----\nPost to Slack with xoxb-1111-{c.runbook_slack} or the bot token "
            f"{c.configured}.\n"))
    return directory


def canary_settings(tmp_path: Path, c: Canaries, *, llm_url: str, slack_url: str) -> Settings:
    """A config file (JSON is YAML) with the environment on top, as ``ira`` loads it."""
    path = tmp_path / "ira.yaml"
    path.write_text(json.dumps(canary_config(tmp_path, c, llm_url=llm_url, slack_url=slack_url)))
    return load_settings({"IRA_CONFIG": str(path), "IRA_SLACK_SIGNING_SECRET": c.from_env})


def canary_config(tmp_path: Path, c: Canaries, *, llm_url: str, slack_url: str) -> dict[str, Any]:
    return {
        "database_url": "sqlite:///unused.db", "tenant": "acme",
        "api_tokens": [{"token": LEAD_TOKEN, "principal": "lead", "roles": ["approver"]},
                       {"token": c.configured, "principal": "bot", "roles": ["viewer"]}],
        "slack": {"bot_token": BOT_TOKEN, "signing_secret": SIGNING_SECRET, "api_url": slack_url,
                  "channel": CHANNEL_ID, "approvers": [
                      {"slack_user": "U0DEVLEAD", "principal": "lead", "roles": ["approver"]}]},
        "agents": {"jsonl_logs": {"paths": str(plant_logs(tmp_path / "app.jsonl", c))},
                   "runbooks_dir": str(plant_runbooks(tmp_path / "runbooks", c)),
                   "logs": {"policy": "llm", "provider": "fake"},
                   "llm_providers": [{"name": "fake", "kind": "openai", "model": "gpt-fake",
                                      "base_url": f"{llm_url}/v1", "api_key": "sk-fake-provider-key-0000"}]}}


def canary_decision(c: Canaries) -> IncidentDecision:
    d = decision()
    summary = f"order-service p99 latency above 2s (DB_PASSWORD={c.annotation})"
    alert = d.alert.model_copy(update={"annotations": {
        "summary": summary, "description": f"probe with curl -H 'Authorization: Bearer {c.annotation_auth}'",
        "runbook_url": "https://runbooks.example/order-service"}})
    return d.model_copy(update={"alert": alert, "title": summary})


def llm_script(c: Canaries) -> list[Reply]:
    """Out of scope with an echoed secret (denied), the real search (cited), an echoed secret in
    an allowed search (matches nothing), then finish."""
    search = {"service": "order-service", "start": WINDOW[0].isoformat(), "end": WINDOW[1].isoformat(),
              "min_level": "error", "text": None, "limit": 50}
    return [Reply(tool="logs__search", arguments=search | {"service": "payment-service",
                                                           "text": f"STRIPE_API_KEY=sk_live_{c.model_echo}"}),
            Reply(tool="logs__search", arguments=search),
            Reply(tool="logs__search", arguments=search | {"text": f"token={c.model_echo}"}),
            Reply(tool="finish", arguments={"summary": "pool exhaustion", "hypotheses": [
                {"statement": "the DB pool is exhausted", "confidence": 0.7, "evidence_turns": [2],
                 "unverified": []}]})]


@dataclass
class Seen:
    """Everything that left the run, as text, by where it went."""

    sinks: dict[str, str] = field(default_factory=dict)
    run_state: tuple[RunState, WaitKind | None] | None = None
    ticket_keys: list[str] = field(default_factory=list)


@asynccontextmanager
async def captured_logs(settings: Settings) -> AsyncIterator[io.StringIO]:
    root, stream = logging.getLogger(), io.StringIO()
    level = root.level
    handler = configure_logging("DEBUG", secrets=settings.secret_values(), stream=stream)
    try:
        yield stream
    finally:
        root.removeHandler(handler)
        root.setLevel(level)


async def drive_run(db: Database, tmp_path: Path, c: Canaries) -> Seen:
    fake, exporter, seen = FakeLlm(llm_script(c)), InMemorySpanExporter(), Seen()
    async with AsyncExitStack() as stack:
        llm_url = await stack.enter_async_context(serve(fake.openai_app()))
        slack: FakeSlack = await stack.enter_async_context(fake_slack())
        settings = canary_settings(tmp_path, c, llm_url=llm_url, slack_url=slack.url)
        logs = await stack.enter_async_context(captured_logs(settings))
        tracing = setup_tracing(settings, install=False, exporter=exporter)
        stack.callback(shutdown_tracing, tracing)
        clock = FrozenClock(T0)
        pump = await build_pump(db, settings, clock=clock, stack=stack, tracer=tracing.get_tracer("ira.agents"))
        deps = pump.deps
        poster = SlackChatPoster(build_web_client(BOT_TOKEN, api_url=slack.url), redactor=settings.redactor())
        notifier = Notifier(db, NoChannel(clock), clock, others=[
            SlackChannel(poster, db, channel=CHANNEL_ID, clock=clock, chat_users={"lead": "U0DEVLEAD"})],
            max_attempts=2, backoff=timedelta(milliseconds=10))

        d = canary_decision(c)
        await pump.decide(envelope(d))
        await pump.drain(timeout=60)
        waiting = await run_for_incident(db, d.incident_id)
        assert waiting is not None and (waiting.state, waiting.wait_kind) == (RunState.WAITING, WaitKind.APPROVAL), (
            waiting)
        await notify_all(notifier, pump)
        async with api(deps, settings=settings) as client:
            approval = (await client.get(f"/v1/runs/{waiting.run_id}",
                                         headers={"authorization": f"Bearer {LEAD_TOKEN}"})).json()["approvals"][0]
            answer = await client.post(f"/v1/approvals/{approval['approval_id']}/decision",
                                       headers={"authorization": f"Bearer {LEAD_TOKEN}"},
                                       json={"decision": "approve", "reason": f"ok; PASSWORD={c.reason}"})
            assert answer.status_code == 200, answer.text
        await pump.drain(timeout=60)
        await notify_all(notifier, pump)
        done = await run_for_incident(db, d.incident_id)
        assert done is not None
        seen.run_state = (done.state, done.wait_kind)
        seen.sinks = await stored(db) | {
            "logs": logs.getvalue(), "spans": "\n".join(s.to_json() for s in exporter.get_finished_spans()),
            "model requests": json.dumps(fake.requests), "slack": json.dumps([call.args for call in slack.calls])}
        async with db.reader() as conn:
            rows = (await conn.execute(select(tickets.c.key, tickets.c.title, tickets.c.body))).all()
        seen.ticket_keys = [r.key for r in rows]
        seen.sinks["ticket"] = json.dumps([[r.title, r.body] for r in rows])
        assert len(fake.requests) == 4, "the LLM-driven logs branch ran its script"
    return seen


async def build_pump(db: Database, settings: Settings, *, clock: FrozenClock, stack: AsyncExitStack,
                     tracer: Tracer) -> Pump:
    """The coordinator and the real agents (connectors and policies from ``settings``), in-process."""
    deps = Deps(db=db, clock=clock, config=WorkflowConfig.from_settings(settings),
                tickets=BuiltinTicketSystem(db, clock))
    connectors = await build_connectors(settings.agents, db, stack)
    handlers = build_handlers(settings, db=db, clock=clock, connectors=connectors, tracer=tracer)
    lease = timedelta(seconds=30)
    agents = StepDispatcher(db=db, clock=clock, handlers=handlers, owner="agents-test", lease=lease)
    coordinator = StepDispatcher(db=db, clock=clock, handlers=step_handlers(deps), owner="coordinator-test",
                                 lease=lease)
    pump = Pump(db, deps, [coordinator, agents])
    stack.push_async_callback(pump.close)
    return pump


async def notify_all(notifier: Notifier, pump: Pump) -> None:
    while pump.deliveries:
        await notifier.handle(pump.deliveries.pop(0))


async def stored(db: Database) -> dict[str, str]:
    async with db.reader() as conn:
        blobs = (await conn.execute(select(artifacts.c.body))).scalars().all()
        data = (await conn.execute(select(events.c.type, events.c.data))).all()
    return {"artifacts": "\n".join(b.decode("utf-8", "replace") for b in blobs),
            "run events": json.dumps([[t, d] for t, d in data])}


SINKS = ("artifacts", "run events", "logs", "spans", "model requests", "ticket", "slack")


async def test_planted_secrets_never_leave_a_run(db: Database, tmp_path: Path) -> None:
    c = Canaries()
    result = await drive_run(db, tmp_path, c)

    assert result.run_state == (RunState.COMPLETED, None)
    assert result.ticket_keys == ["INC-1"]
    assert all(result.sinks[s] for s in SINKS), [s for s in SINKS if not result.sinks[s]]
    leaks = {sink: sorted(name for name, value in c.all().items() if value in result.sinks[sink]) for sink in SINKS}
    found = {sink: names for sink, names in leaks.items() if names}
    assert not found, f"planted secrets left the run: {found}"
