"""From a proposal to an observation: validate, check the binding, call the connector.

Nothing here raises for a tool problem: invalid arguments, a denial, a timeout or a refused
query all come back as an error observation with a machine-readable code and whether a retry
could help, so the policy can correct itself and the loop can stop on repetition.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from pydantic import ValidationError

from ira.agents.binding import check_proposal
from ira.agents.model import Observation, ToolProposal
from ira.agents.redact import Redactor
from ira.agents.tools import ToolDef, ToolOutput
from ira.connectors.bound import ConnectorSet
from ira.core.errors import PlatformError
from ira.core.investigation import BranchBinding

DENIED = "denied"
INVALID_ARGUMENTS = "invalid_arguments"


@dataclass(frozen=True)
class Checked:
    """A proposal that may run: its tool and validated arguments."""

    tool: ToolDef
    args: Any


def check(binding: BranchBinding, tools: dict[str, ToolDef], proposal: ToolProposal) -> Checked | Observation:
    """Validate against the tool's schema, then judge against the binding (in that order)."""
    tool = tools.get(proposal.tool)
    if tool is None or proposal.tool not in binding.tools:
        return denied(proposal.tool, f"tool {proposal.tool!r} is not bound to this branch")
    try:
        args = tool.args.model_validate(proposal.args)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "arguments"
        return failure(proposal.tool, INVALID_ARGUMENTS, f"{where}: {first['msg']}", retryable=False)
    reason = check_proposal(binding, tool.name, args)
    return Checked(tool, args) if reason is None else denied(proposal.tool, reason)


def denied(tool: str, reason: str) -> Observation:
    return failure(tool, DENIED, reason, retryable=False)


def failure(tool: str, code: str, message: str, *, retryable: bool, attempts: int = 0) -> Observation:
    return Observation(tool=tool, ok=False, summary=f"{code}: {message}", error_code=code, error_message=message,
                       retryable=retryable, attempts=attempts)


async def call(
    checked: Checked, connectors: ConnectorSet, binding: BranchBinding, *, timeout: timedelta, redactor: Redactor
) -> tuple[Observation, float]:
    """Run the tool under its retry contract; return the observation and the elapsed seconds."""
    started, attempts = time.monotonic(), 0
    deadline = started + max(timeout.total_seconds(), 0.001)
    while True:
        attempts += 1
        try:
            async with asyncio.timeout(max(deadline - time.monotonic(), 0.001)):
                output = await checked.tool.call(checked.args, connectors, binding)
            observed = _observed(checked.tool.name, output, origin=connectors.origin, attempts=attempts,
                                 redactor=redactor)
            return observed, _since(started)
        except TimeoutError:
            code, message, retryable = "timeout", f"no answer within {timeout.total_seconds():g}s", True
        except PlatformError as exc:
            code, message, retryable = exc.code, redactor.text(exc.message), exc.retryable
        contract = checked.tool.retry
        if code not in contract.retryable_codes or attempts >= contract.max_attempts or time.monotonic() >= deadline:
            obs = failure(checked.tool.name, code, message, retryable=retryable, attempts=attempts)
            return obs.model_copy(update={"origin": connectors.origin}), _since(started)
        await asyncio.sleep(min(0.2 * attempts, max(deadline - time.monotonic(), 0)))


def _since(started: float) -> float:
    return time.monotonic() - started


def _observed(tool: str, output: ToolOutput, *, origin: str, attempts: int, redactor: Redactor) -> Observation:
    return Observation(
        tool=tool, ok=True, summary=redactor.text(output.summary), origin=origin, query=redactor.text(output.query),
        window_start=output.start, window_end=output.end, partial=output.partial,
        data=redactor.value(output.result.model_dump(mode="json")), attempts=attempts)
