"""The binding check: code, not prompt, decides whether a proposal may run.

Every proposal, from a rule or a model, passes here after its arguments validated and before
any budget is reserved or byte is sent. A proposal is denied when it names a tool the branch
is not bound to, another service, or a time outside the binding's window (deploys and config
changes: its change look-back). PromQL is checked structurally: every selector must carry
``service="<bound service>"`` (or a declared dependency of it) and nothing may reach outside the
window (``offset``, ``@``, range selectors longer than the window).
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import Any

from ira.core.investigation import BranchBinding

_BLOCK = re.compile(r"\{[^{}]*\}")
_SERVICE_MATCHER = re.compile(r"""\bservice\s*(=~|!~|!=|=)\s*("(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`)""")
_STRING = re.compile(r""""(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`""")
_GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", re.IGNORECASE)
_RANGE = re.compile(r"\[([^\]]*)\]")
_IDENT = re.compile(r"(?<![0-9.A-Za-z_:])[A-Za-z_:][A-Za-z0-9_:]*")
_KEYWORDS = frozenset({"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or",
                       "unless", "inf", "nan"})
_DURATION = re.compile(r"(\d+)(ms|s|m|h|d|w|y)")
_UNIT = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}
METRIC_TOOLS = frozenset({"prometheus.query_range", "prometheus.query"})
"""Tools that may also read the declared dependencies of the bound service."""
CHANGE_TOOLS = frozenset({"deployments.list"})
"""Tools that may reach back to the binding's change look-back."""
SAFE_SERVICE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")


def check_proposal(binding: BranchBinding, tool: str, args: Any) -> str | None:
    """None when the validated ``args`` for ``tool`` stay inside the binding; else why not."""
    if tool not in binding.tools:
        return f"tool {tool!r} is not bound to this branch"
    service = getattr(args, "service", None)
    allowed = binding.services if tool in METRIC_TOOLS else binding.services[:1]
    if service is not None and binding.service is not None and service not in allowed:
        return f"service {service!r} is outside the binding (only {', '.join(map(repr, allowed))})"
    window = _window_problem(binding, args, earliest=binding.changes_since if tool in CHANGE_TOOLS else None)
    if window:
        return window
    query = getattr(args, "query", None)
    if query is not None and binding.service is not None:
        return promql_problem(query, binding.services, binding.window_end - binding.window_start)
    return None


def _window_problem(binding: BranchBinding, args: Any, *, earliest: datetime | None = None) -> str | None:
    times = [getattr(args, name) for name in ("start", "end", "at") if getattr(args, name, None) is not None]
    first = min(earliest, binding.window_start) if earliest else binding.window_start
    for at in times:
        if not first <= at <= binding.window_end:
            return f"time {_iso(at)} is outside the window {_iso(first)}..{_iso(binding.window_end)}"
    start, end = getattr(args, "start", None), getattr(args, "end", None)
    if start is not None and end is not None and start > end:
        return "start is after end"
    return None


def promql_problem(query: str, services: str | tuple[str, ...], longest: timedelta) -> str | None:
    """Why ``query`` could read beyond ``services`` (the bound one first, then declared dependencies)
    or the window, or None if it cannot."""
    allowed = (services,) if isinstance(services, str) else services
    service = allowed[0]
    blocks = _BLOCK.findall(query)
    if not blocks:
        return f'query selects no labels; every selector needs service="{service}"'
    for block in blocks:
        problem = _block_problem(block, allowed)
        if problem:
            return problem
    rest = _GROUPING.sub(" ", _STRING.sub("S", _BLOCK.sub("§", query)))
    if re.search(r"(?<![A-Za-z0-9_:])(offset|@)(?![A-Za-z0-9_:])", rest):
        return "offset and @ modifiers may reach outside the window"
    for spec in _RANGE.findall(rest):
        if _seconds(spec) > longest.total_seconds():
            return f"range [{spec}] is longer than the window"
    rest = _RANGE.sub(" ", rest)
    for match in _IDENT.finditer(rest):
        after = rest[match.end():].lstrip()
        if not after.startswith(("(", "§")) and match.group().lower() not in _KEYWORDS and match.group() != "S":
            return f'selector {match.group()} has no service="{service}" matcher'
    return None


def _block_problem(block: str, allowed: tuple[str, ...]) -> str | None:
    matchers = _SERVICE_MATCHER.findall(block)
    if not matchers:
        return f'selector {block} has no service="{allowed[0]}" matcher'
    for op, quoted in matchers:
        if op != "=" or quoted[1:-1] not in allowed:
            return f"selector {block} matches service {op} {quoted}, only {', '.join(map(repr, allowed))} bound"
    return None


def _seconds(spec: str) -> float:
    return sum(int(n) * _UNIT[u] for part in spec.split(":")[:1] for n, u in _DURATION.findall(part))


def _iso(at: datetime) -> str:
    return at.isoformat().replace("+00:00", "Z")
