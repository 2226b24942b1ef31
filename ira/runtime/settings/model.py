"""The shape of ira's configuration: frozen pydantic sections, validated as a whole.

Every section forbids unknown keys, so a typo in ``ira.yaml`` is an error naming the key
instead of a setting silently ignored. Secrets are ``SecretStr`` so they never print.
"""

from __future__ import annotations

import hmac
import re
from collections.abc import Iterator
from datetime import timedelta
from enum import StrEnum
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    Field,
    SecretStr,
    ValidationInfo,
    field_validator,
    model_validator,
)
from sqlalchemy.engine import make_url

from ira.core import limits
from ira.core.alert import SourceKind
from ira.core.budget import BudgetDimension
from ira.core.redact import Redactor
from ira.runtime.settings.agents import AgentsSettings
from ira.runtime.settings.ingest import IngestSettings
from ira.runtime.settings.section import NAME, Duration, Section
from ira.runtime.settings.tickets import TenantSettings, TicketsSettings
from ira.runtime.settings.triage import TriageSettings
from ira.runtime.store.database import normalize_url


class AccessRole(StrEnum):
    """What a principal may do: approvers decide approvals, viewers only read."""

    ADMIN = "admin"
    APPROVER = "approver"
    VIEWER = "viewer"


class Grant(Section):
    """What a credential entitles its holder to: a principal name and roles."""

    principal: str = Field(min_length=1)
    roles: frozenset[AccessRole]


class ApiToken(Grant):
    """A bearer token for ``/v1/*`` and the dashboard."""

    token: SecretStr = Field(min_length=8)
    tenant: str | None = Field(default=None, pattern=NAME)
    """The only tenant this token sees; None means the configured default tenant."""


class SlackApprover(Grant):
    """A Slack user whose button clicks count as decisions of ``principal``."""

    slack_user: str = Field(min_length=1)
    tenant: str | None = Field(default=None, pattern=NAME)
    """The tenant whose approvals this user decides; None means the configured default tenant."""


class HttpSettings(Section):
    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=0, le=65535)
    """0: any free port (the child processes of ``ira dev`` serve their ops endpoints there and
    say which in their ``ready`` line)."""
    header_timeout: Duration = timedelta(seconds=10)
    """A request's headers must arrive within this (slow clients are cut off)."""
    body_timeout: Duration = timedelta(seconds=30)
    """Longest wait for the next piece of a request body."""
    session_ttl: Duration = timedelta(hours=12)
    """How long a dashboard login lasts."""
    trusted_proxies: tuple[str, ...] = ()
    """Peer addresses whose ``X-Forwarded-Proto: https`` makes the session cookie ``Secure``."""
    login_failures_per_minute: int = Field(default=10, ge=1)
    """Failed logins a client may make in a minute before ``/login`` answers 429."""


class KafkaSettings(Section):
    partitions: int = Field(default=3, ge=1)
    replication_factor: int = Field(default=1, ge=1)
    session_timeout: Duration = timedelta(seconds=10)
    enable_idempotence: bool = False
    """Off by default: the embedded broker (Tansu) has no idempotent producer."""


class SourceSettings(Section):
    """One sender of alerts, authenticated by a bearer token or an HMAC secret."""

    id: str = Field(pattern=NAME)
    kind: SourceKind
    tenant: str = Field(pattern=NAME)
    """Defaults to the top-level ``tenant``."""
    bearer_token: SecretStr | None = None
    hmac_secret: SecretStr | None = None
    default_environment: str | None = None
    """Used for alerts that carry no environment label."""
    rate_limit_per_second: float = Field(default=100.0, gt=0)
    """Requests per second; one request counts once however many alerts it carries."""
    max_alerts_per_request: int | None = Field(default=None, ge=1, le=limits.ALERTS_PER_REQUEST_MAX)
    """None: ``ingest.max_alerts_per_request``."""
    alerts_per_second: float | None = Field(default=None, gt=0)
    """None: ``ingest.alerts_per_second``."""
    dedupe_window: Duration = timedelta(minutes=15)

    @model_validator(mode="after")
    def _one_credential(self) -> SourceSettings:
        if (self.bearer_token is None) == (self.hmac_secret is None):
            raise ValueError("set exactly one of bearer_token or hmac_secret")
        return self


class SlackSettings(Section):
    bot_token: SecretStr | None = None
    signing_secret: SecretStr | None = None
    api_url: str = "https://slack.com/api/"
    channel: str = "#incidents"
    """A channel id (``C0123ABCD``), or ``#name`` (looked up once with ``conversations.list``).
    The default: every tenant without an entry in ``channels`` posts here."""
    channels: dict[str, str] = Field(default_factory=dict)
    """Tenant -> its own channel (id or ``#name``), so one tenant's drafts never show in another's."""
    approvers: tuple[SlackApprover, ...] = ()
    dashboard_url: str = "http://127.0.0.1:8080"
    """Where people open ira's dashboard: messages link a run as ``<dashboard_url>/runs/<run_id>``."""

    @property
    def enabled(self) -> bool:
        """Slack is used only when both the bot token and the signing secret are configured."""
        return self.bot_token is not None and self.signing_secret is not None

    @field_validator("channels")
    @classmethod
    def _tenant_channels(cls, channels: dict[str, str]) -> dict[str, str]:
        for tenant, channel in channels.items():
            if not re.match(NAME, tenant):
                raise ValueError(f"tenant name {tenant!r} must match {NAME}")
            if not channel.strip():
                raise ValueError(f"tenant {tenant}: the channel is empty")
        return channels

    def channel_for(self, tenant_id: str) -> str:
        """Where ``tenant_id``'s notifications go: its own channel, else the default."""
        return self.channels.get(tenant_id, self.channel)

    def all_channels(self) -> tuple[str, ...]:
        """Every configured channel once, the default first (what ``ira doctor`` checks)."""
        return tuple(dict.fromkeys((self.channel, *self.channels.values())))


class TelemetrySettings(Section):
    trace_url: str | None = None
    """Where a trace can be opened, ``{trace_id}`` filled in (``http://127.0.0.1:16686/trace/{trace_id}``
    for a local Jaeger): the run page links a run's trace there (``IRA_TRACE_URL``)."""

    @field_validator("trace_url")
    @classmethod
    def _template(cls, value: str | None) -> str | None:
        if value is not None and (not value.startswith(("http://", "https://")) or "{trace_id}" not in value):
            raise ValueError("must be an http:// or https:// URL holding {trace_id}")
        return value

    def link(self, trace_id: str | None) -> str | None:
        return self.trace_url.replace("{trace_id}", trace_id) if self.trace_url and trace_id else None


class ConsumerTuning(Section):
    """How a consumer treats a record that fails, and how often an idle one asks the broker
    (``consumer:``); the same for every role."""

    max_hold: Duration = timedelta(seconds=1)
    """Longest a partition waits on a transiently failing record (retried in place with backoff);
    after that the record is parked in the store, tried again from there, and the partition moves on."""
    park_poll: Duration = timedelta(seconds=1)
    """How often each consumer tries its due parked records again (and refreshes its park gauges)."""
    max_unexpected_attempts: int = Field(default=5, ge=1, le=100)
    """Tries for a failure outside ira's error tree (a bug) before the record is dead-lettered."""
    idle_fetch_wait: Duration = timedelta(milliseconds=500)
    """The fetch wait of a consumer that fetches with a shorter one (the coordinator's: run
    requests 20 ms, updates and step wake-ups 100 ms) once it has had no record for
    ``idle_after``: the embedded broker answers a fetch only when its wait ends, so a short wait
    is a poll, and idle polls were most of an idle ``ira dev``'s CPU. The first record after a
    quiet spell arrives within this; the fetch that brings it puts the short wait back. Apache
    Kafka answers on arrival: there it costs no latency."""
    idle_after: Duration = timedelta(seconds=10)
    """How long without a record before a consumer fetches with ``idle_fetch_wait``."""


class RuntimeTuning(Section):
    """Knobs of the shared machinery (relay, scanner, leases); defaults suit one machine."""

    relay_batch_size: int = Field(default=500, ge=1, le=10_000)
    """Outbox rows a relay pass claims and publishes together: bigger passes make fewer claim and
    mark-sent transactions and bigger produce requests (bench/README.md: 100 -> 500 cut the
    pipeline's CPU per alert ~18 % while triage drained a backlog of batches)."""
    relay_pack_alerts: bool = True
    """Publish a relay pass's alert rows as one Kafka record per partition (a pack that every
    consumer unpacks into its rows: ``ira.runtime.bus.pack``) instead of a record per alert.
    Off: a record per alert, for an outside reader of ``ira.alerts.v1`` that wants plain envelopes."""
    relay_poll_interval: Duration = timedelta(milliseconds=200)
    """How often an idle relay looks for rows other processes wrote; a commit of its own process
    that leaves a row wakes it at once (``Database.waking_relay``), one of another process too
    with ``relay_doorbell``."""
    relay_doorbell: bool = True
    """A process without a relay rings a Redis channel after a commit that left a row to relay,
    and every relay listens (``ira.runtime.doorbell``): another process's run request, step
    wake-up or notification goes out at once instead of at the relay's next poll. A hint only:
    without it (or with Redis away) the poll still finds every row."""
    outbox_claim_lease: Duration = timedelta(seconds=30)
    scanner_interval: Duration = timedelta(seconds=5)
    step_lease: Duration = timedelta(seconds=30)
    drain_timeout: Duration = timedelta(seconds=20)
    """On SIGINT/SIGTERM: longest wait for in-flight requests, consumers and the relay to go quiet."""
    resend_after: Duration = timedelta(seconds=30)
    """A sent message its consumer has not applied this long after is sent again (then 2x, 4x, 8x)."""


DEV_PROCESSES_MAX = 16


class DevSettings(Section):
    """How ``ira dev`` spreads its roles over processes (``ira worker --role`` children)."""

    processes: dict[str, int] = Field(default_factory=lambda: {"triage": 1})
    """Role -> how many child processes run it instead of the main process (0: in the main
    process). Default: triage in one child, so triaging an alert storm does not share one
    core's event loop with the gateway (bench/README.md). ``gateway``: that many extra
    processes serve the webhook routes on the main HTTP port (SO_REUSEPORT)."""

    @field_validator("processes")
    @classmethod
    def _counts(cls, value: dict[str, int]) -> dict[str, int]:
        for role, count in value.items():
            if not 0 <= count <= DEV_PROCESSES_MAX:
                raise ValueError(f"{role}: between 0 and {DEV_PROCESSES_MAX} processes")
        return value


def _dims(**amounts: int) -> dict[BudgetDimension, int]:
    return {BudgetDimension(name): amount for name, amount in amounts.items()}


class CoordinatorSettings(Section):
    """The incident workflow's knobs: investigation window, deadlines, budgets."""

    window_before: Duration = timedelta(minutes=30)
    """Branches look at ``alert start - window_before`` up to now."""
    branch_deadline: Duration = timedelta(minutes=10)
    """A branch still running this long after the run started is timed out."""
    operation_deadline: Duration = timedelta(minutes=5)
    """An external action not confirmed by then goes to reconciliation, then to a person."""
    on_required_failure: Literal["human_review", "fail"] = "human_review"
    """A required branch that failed: wait for a person, or fail the run."""
    change_lookback: Duration = timedelta(hours=6)
    """Deploys and config changes are listed this far back from now (a change hours earlier counts)."""
    dependencies: dict[str, tuple[str, ...]] = Field(default_factory=dict)
    """The service catalog: service -> the services it depends on (their metrics are read too)."""
    root_budget: dict[BudgetDimension, int] = Field(default_factory=lambda: _dims(
        steps=96, tool_calls=120, model_tokens=300_000, cost_micros=5_000_000, wall_ms=3_600_000))
    branch_budget: dict[BudgetDimension, int] = Field(default_factory=lambda: _dims(
        steps=28, tool_calls=36, model_tokens=80_000, cost_micros=1_500_000, wall_ms=900_000))
    """Each branch's slice of the root (three branches draw at once)."""
    max_concurrent_steps: int = Field(default=16, ge=1, le=1000)
    staging_auto_approve: bool = False
    """Staging runs (replays) only: their ticket draft is approved by ira itself (recorded as such), so a
    replay goes on to its sandbox ticket and completion; a production run is never auto-approved."""

    @model_validator(mode="after")
    def _slices_fit(self) -> CoordinatorSettings:
        for dim, amount in self.branch_budget.items():
            if dim not in self.root_budget or 3 * amount > self.root_budget[dim]:
                raise ValueError(f"three branch slices of {dim.value} must fit in root_budget.{dim.value}")
        return self


class NotifierSettings(Section):
    """Where notifications go; with no webhook_url a delivery is recorded as failed."""

    webhook_url: str | None = None
    webhook_secret: SecretStr | None = None
    """Signs every body: ``X-Ira-Signature: sha256=HMAC(secret, timestamp + "." + body)``."""
    timeout: Duration = timedelta(seconds=5)
    max_attempts: int = Field(default=4, ge=1, le=20)
    backoff: Duration = timedelta(milliseconds=200)
    """First retry delay; doubles per attempt."""

    @model_validator(mode="after")
    def _signed(self) -> NotifierSettings:
        if self.webhook_url is not None:
            if not self.webhook_url.startswith(("http://", "https://")):
                raise ValueError("webhook_url must be an http:// or https:// URL")
            if self.webhook_secret is None:
                raise ValueError("webhook_secret is required with webhook_url")
        return self


class Settings(Section):
    """The whole configuration of one ira process."""

    tenant: str = Field(default="demo", pattern=NAME)
    environment: Literal["prod", "staging"] = "prod"
    data_dir: Path = Path(".ira")
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    log_format: Literal["auto", "json", "text"] = "auto"
    """``auto``: short text lines (warnings and errors only) on a terminal, JSON otherwise."""
    http: HttpSettings = HttpSettings()
    database_url: str
    """Defaults to ``sqlite:///<data_dir>/ira.db``."""
    redis_url: str | None = None
    """None: ``ira dev`` starts an embedded Redis under ``data_dir``."""
    kafka_bootstrap: str | None = None
    """None: ``ira dev`` starts the embedded Tansu broker."""
    kafka: KafkaSettings = KafkaSettings()
    sources: tuple[SourceSettings, ...] = ()
    ingest: IngestSettings = IngestSettings()
    """When the webhook answers 202: after the store's commit (default) or the broker's ack."""
    api_tokens: tuple[ApiToken, ...] = ()
    slack: SlackSettings = SlackSettings()
    approval_expiry: Duration = timedelta(minutes=30)
    otel_endpoint: str | None = None
    telemetry: TelemetrySettings = TelemetrySettings()
    artifact_max_bytes: int = Field(default=1024 * 1024, ge=1)
    runtime: RuntimeTuning = RuntimeTuning()
    dev: DevSettings = DevSettings()
    """``ira dev`` only: which roles run in child processes."""
    consumer: ConsumerTuning = ConsumerTuning()
    """Failing records: held at most ``max_hold``, then parked and retried from the store."""
    agents: AgentsSettings = AgentsSettings()
    """Investigators: loop limits, connectors, per-branch policy (rules or an LLM)."""
    coordinator: CoordinatorSettings = CoordinatorSettings()
    notifier: NotifierSettings = NotifierSettings()
    triage: TriageSettings = TriageSettings()
    """Grouping, run threshold, quiet period, cooldown, noise control, silences."""
    tickets: TicketsSettings = TicketsSettings()
    """The default tenant's ticket system (``IRA_TICKETS``, ``IRA_JIRA_*``, ``IRA_GITHUB_*``)."""
    tenants: dict[str, TenantSettings] = Field(default_factory=dict)
    """Other tenants' own settings, by tenant name (their ticket system)."""
    faults: frozenset[str] = frozenset()
    """Test-only fault points, armed by name (``IRA_FAULTS=a,b``)."""

    @model_validator(mode="before")
    @classmethod
    def _derive(cls, data: Any) -> Any:
        """Fill what depends on other keys: the SQLite path, each source's tenant."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        if data.get("database_url") is None:
            data_dir = Path(str(data.get("data_dir", cls.model_fields["data_dir"].default)))
            data["database_url"] = f"sqlite:///{data_dir / 'ira.db'}"
        tenant = data.get("tenant", cls.model_fields["tenant"].default)
        if isinstance(data.get("sources"), list):
            data["sources"] = [{"tenant": tenant, **s} if isinstance(s, dict) else s for s in data["sources"]]
        return data

    @field_validator("ingest")
    @classmethod
    def _durable_ack(cls, value: IngestSettings, info: ValidationInfo) -> IngestSettings:
        """``kafka_bootstrap`` is validated before ``ingest`` (field order), so it is in ``info.data``."""
        if value.ack == "broker" and not info.data.get("kafka_bootstrap"):
            raise ValueError("ack: broker needs an external Kafka (kafka_bootstrap) that replicates what it "
                             "acknowledges; the embedded broker keeps records in memory only, so a 202 after its "
                             "ack could be lost: use ack: store")
        return value

    @field_validator("log_level", mode="before")
    @classmethod
    def _upper(cls, value: Any) -> Any:
        return value.upper() if isinstance(value, str) else value

    @field_validator("database_url")
    @classmethod
    def _database(cls, value: str) -> str:
        normalize_url(value)  # raises ValueError naming what is unsupported
        return value

    @field_validator("redis_url")
    @classmethod
    def _redis(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError("must start with redis://, rediss:// or unix://")
        return value

    @field_validator("kafka_bootstrap")
    @classmethod
    def _bootstrap(cls, value: str | None) -> str | None:
        servers = value.split(",") if value is not None else []
        for server in (s.strip() for s in servers):
            host, _, port = server.rpartition(":")
            if not (host and port.isdigit()):
                raise ValueError(f"expected host:port[,host:port...], got {server!r}")
        return value

    @field_validator("otel_endpoint")
    @classmethod
    def _otel(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError("must be an http:// or https:// URL (OTLP over HTTP)")
        return value

    @field_validator("sources", "api_tokens")
    @classmethod
    def _unique(cls, entries: tuple[Any, ...]) -> tuple[Any, ...]:
        keys = [e.id if isinstance(e, SourceSettings) else e.token.get_secret_value() for e in entries]
        if len(set(keys)) != len(keys):
            raise ValueError("entries must be unique (source id / token appears twice)")
        return entries

    @field_validator("tenants")
    @classmethod
    def _tenant_names(cls, tenants: dict[str, TenantSettings]) -> dict[str, TenantSettings]:
        for name in tenants:
            if not re.match(NAME, name):
                raise ValueError(f"tenant name {name!r} must match {NAME}")
        return tenants

    def tickets_for(self, tenant_id: str) -> TicketsSettings:
        """A tenant's ticket system: its own entry, the top-level one for the default tenant,
        else builtin (never another tenant's project)."""
        if tenant_id in self.tenants:
            return self.tenants[tenant_id].tickets
        return self.tickets if tenant_id == self.tenant else TicketsSettings()

    def ticket_tenants(self) -> dict[str, TicketsSettings]:
        """Every tenant with a configured ticket system (the default tenant always)."""
        return {self.tenant: self.tickets} | {name: t.tickets for name, t in self.tenants.items()}

    def source(self, source_id: str) -> SourceSettings | None:
        return next((s for s in self.sources if s.id == source_id), None)

    def grant_for_api_token(self, token: str) -> ApiToken | None:
        """Compares every token in constant time, so timing never reveals a near match."""
        found = None
        for entry in self.api_tokens:
            if hmac.compare_digest(entry.token.get_secret_value().encode(), token.encode()):
                found = entry
        return found

    def slack_approver(self, slack_user: str) -> SlackApprover | None:
        return next((a for a in self.slack.approvers if a.slack_user == slack_user), None)

    def secret_values(self) -> frozenset[str]:
        """Every secret in the configuration, for the log filter that masks them."""
        found = {s.get_secret_value() for s in _secrets(self)}
        found |= {make_url(self.database_url).password or ""}
        found |= {s for t in self.ticket_tenants().values() for s in t.auth_header_secrets()}
        return frozenset(s for s in found if s)

    def redactor(self) -> Redactor:
        """The one redactor, knowing every configured secret (and masking secret-shaped text)."""
        return Redactor(self.secret_values())


def _secrets(value: Any) -> Iterator[SecretStr]:
    if isinstance(value, SecretStr):
        yield value
    elif isinstance(value, BaseModel):
        for name in type(value).model_fields:
            yield from _secrets(getattr(value, name))
    elif isinstance(value, tuple | dict):
        for item in value.values() if isinstance(value, dict) else value:
            yield from _secrets(item)
