"""The tool registry: name -> argument model (its strict JSON schema) + the connector call.

Only these names exist; a branch is offered the ones its binding lists and its kind owns.
Arguments are validated by the same model the schema is generated from, so what a model is
shown and what the loop accepts cannot drift. Tenant and environment are never arguments:
they come from the binding, so no proposal can name another tenant.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from pydantic import AwareDatetime, Field

from ira.connectors.bound import ConnectorSet
from ira.core.errors import ConnectorRejectedError
from ira.core.investigation import BranchBinding, BranchKind
from ira.core.model import Model
from ira.core.signals import READ_ONLY_RETRY, ChangeQuery, LogLevel, LogQuery, RetryContract, RunbookQuery


class ToolNotConfiguredError(ConnectorRejectedError):
    code = "not_configured"


class PromQueryRangeArgs(Model):
    query: str = Field(min_length=1, max_length=2000, description="PromQL; must select service=\"<service>\"")
    start: AwareDatetime
    end: AwareDatetime
    step_seconds: float = Field(ge=1, le=3600)


class PromQueryArgs(Model):
    query: str = Field(min_length=1, max_length=2000, description="PromQL; must select service=\"<service>\"")
    at: AwareDatetime


class DeploymentsArgs(Model):
    service: str
    start: AwareDatetime
    end: AwareDatetime


class LogSearchArgs(Model):
    service: str
    start: AwareDatetime
    end: AwareDatetime
    min_level: Literal["debug", "info", "warning", "error", "critical"] | None = None
    text: str | None = Field(default=None, max_length=200)
    limit: int = Field(default=200, ge=1, le=2000)


class RunbookSearchArgs(Model):
    service: str
    alert: str | None = None
    text: str | None = Field(default=None, max_length=300)
    version: str | None = None
    limit: int = Field(default=5, ge=1, le=10)


@dataclass(frozen=True)
class ToolOutput:
    result: Model
    query: str
    start: datetime | None
    end: datetime | None
    partial: bool
    summary: str


Call = Callable[[Any, ConnectorSet, BranchBinding], Awaitable[ToolOutput]]


@dataclass(frozen=True)
class ToolDef:
    name: str
    description: str
    args: type[Model]
    call: Call
    retry: RetryContract = READ_ONLY_RETRY

    def schema(self) -> dict[str, Any]:
        return strict_schema(self.args)


def strict_schema(model: type[Model]) -> dict[str, Any]:
    """The model's JSON schema in the strict form providers accept: references inlined, every
    property required (optional ones are nullable), no extra properties, no titles or defaults."""
    schema = model.model_json_schema()
    return _strict(schema, schema.get("$defs", {}))


def _strict(spec: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    if "$ref" in spec:
        return _strict(defs[spec["$ref"].rsplit("/", 1)[-1]], defs)
    out = {k: v for k, v in spec.items() if k not in ("title", "default", "$defs", "description")
           or (k == "description" and isinstance(v, str))}
    if "anyOf" in out:
        out["anyOf"] = [_strict(s, defs) for s in out["anyOf"]]
    if "items" in out:
        out["items"] = _strict(out["items"], defs)
    if out.get("type") == "object" and "properties" in out:
        out["properties"] = {name: _strict(s, defs) for name, s in out["properties"].items()}
        out["required"] = list(out["properties"])
        out["additionalProperties"] = False
    return out


def _need(value: Any, name: str) -> Any:
    if value is None:
        raise ToolNotConfiguredError(name, "no connector is configured for this tool")
    return value


async def _query_range(a: PromQueryRangeArgs, c: ConnectorSet, b: BranchBinding) -> ToolOutput:
    r = await _need(c.metrics, "prometheus").query_range(a.query, start=a.start, end=a.end,
                                                         step=timedelta(seconds=a.step_seconds))
    return ToolOutput(r, a.query, a.start, a.end, r.partial, f"{len(r.series)} series")


async def _query(a: PromQueryArgs, c: ConnectorSet, b: BranchBinding) -> ToolOutput:
    r = await _need(c.metrics, "prometheus").query(a.query, at=a.at)
    return ToolOutput(r, a.query, a.at, a.at, r.partial, f"{len(r.series)} series")


async def _deployments(a: DeploymentsArgs, c: ConnectorSet, b: BranchBinding) -> ToolOutput:
    q = ChangeQuery(tenant_id=b.tenant_id, service=a.service, environment=b.environment, start=a.start, end=a.end)
    r = await _need(c.changes, "deployments").list_changes(q)
    return ToolOutput(r, f"changes service={a.service}", a.start, a.end, r.partial, f"{len(r.changes)} changes")


async def _logs(a: LogSearchArgs, c: ConnectorSet, b: BranchBinding) -> ToolOutput:
    q = LogQuery(service=a.service, start=a.start, end=a.end, text=a.text, limit=a.limit,
                 min_level=LogLevel(a.min_level) if a.min_level else None)
    r = await _need(c.logs, "logs").search(q)
    text = f'service={a.service} level>={a.min_level or "any"} text={a.text or ""!r}'
    return ToolOutput(r, text, a.start, a.end, r.partial, f"{r.total_matched} lines matched")


async def _runbooks(a: RunbookSearchArgs, c: ConnectorSet, b: BranchBinding) -> ToolOutput:
    q = RunbookQuery(service=a.service, alert=a.alert, text=a.text, version=a.version, limit=a.limit)
    r = await _need(c.runbooks, "runbooks").search(q)
    text = f"service={a.service} alert={a.alert} text={a.text!r} version={a.version}"
    return ToolOutput(r, text, None, None, False, f"{len(r.hits)} runbooks")


TOOLS: dict[str, ToolDef] = {t.name: t for t in (
    ToolDef("prometheus.query_range", "Run a PromQL range query over part of the incident window.",
            PromQueryRangeArgs, _query_range),
    ToolDef("prometheus.query", "Run an instant PromQL query at one time inside the incident window.",
            PromQueryArgs, _query),
    ToolDef("deployments.list", "List deploys and config changes of the service in a time range.",
            DeploymentsArgs, _deployments),
    ToolDef("logs.search", "Search the service's logs in a time range, by minimum level and text.",
            LogSearchArgs, _logs),
    ToolDef("runbooks.search", "Find runbooks for the service by alert name and symptoms; says which "
            "apply to the version the service runs.", RunbookSearchArgs, _runbooks),
)}

BRANCH_TOOLS: dict[BranchKind, tuple[str, ...]] = {
    BranchKind.METRICS: ("prometheus.query_range", "prometheus.query", "deployments.list"),
    BranchKind.LOGS: ("logs.search",),
    BranchKind.RUNBOOKS: ("runbooks.search",),
}


def bound_tools(kind: BranchKind, binding: BranchBinding) -> dict[str, ToolDef]:
    """The tools a branch may be offered: named by its binding AND owned by its kind."""
    return {name: TOOLS[name] for name in BRANCH_TOOLS[kind] if name in binding.tools}
