"""The binding check: code, not prompt, decides whether a proposal may run.

Every proposal, from a rule or a model, passes here after its arguments validated and before
any budget is reserved or byte is sent. A proposal is denied when it names a tool the branch
is not bound to, another service, or a time outside the binding's window. PromQL is checked
structurally: every selector must carry ``service="<bound service>"`` and nothing may reach
outside the window (``offset``, ``@``, range selectors longer than the window).
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
SAFE_SERVICE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")


def check_proposal(binding: BranchBinding, tool: str, args: Any) -> str | None:
    """None when the validated ``args`` for ``tool`` stay inside the binding; else why not."""
    if tool not in binding.tools:
        return f"tool {tool!r} is not bound to this branch"
    service = getattr(args, "service", None)
    if service is not None and binding.service is not None and service != binding.service:
        return f"service {service!r} is outside the binding (only {binding.service!r})"
    window = _window_problem(binding, args)
    if window:
        return window
    query = getattr(args, "query", None)
    if query is not None and binding.service is not None:
        return promql_problem(query, binding.service, binding.window_end - binding.window_start)
    return None


def _window_problem(binding: BranchBinding, args: Any) -> str | None:
    times = [getattr(args, name) for name in ("start", "end", "at") if getattr(args, name, None) is not None]
    for at in times:
        if not binding.window_start <= at <= binding.window_end:
            return f"time {_iso(at)} is outside the window {_iso(binding.window_start)}..{_iso(binding.window_end)}"
    start, end = getattr(args, "start", None), getattr(args, "end", None)
    if start is not None and end is not None and start > end:
        return "start is after end"
    return None


def promql_problem(query: str, service: str, longest: timedelta) -> str | None:
    """Why ``query`` could read beyond ``service`` or the window, or None if it cannot."""
    blocks = _BLOCK.findall(query)
    if not blocks:
        return f'query selects no labels; every selector needs service="{service}"'
    for block in blocks:
        problem = _block_problem(block, service)
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


def _block_problem(block: str, service: str) -> str | None:
    matchers = _SERVICE_MATCHER.findall(block)
    if not matchers:
        return f'selector {block} has no service="{service}" matcher'
    for op, quoted in matchers:
        if op != "=" or quoted[1:-1] != service:
            return f"selector {block} matches service {op} {quoted}, only {service!r} is bound"
    return None


def _seconds(spec: str) -> float:
    return sum(int(n) * _UNIT[u] for part in spec.split(":")[:1] for n, u in _DURATION.findall(part))


def _iso(at: datetime) -> str:
    return at.isoformat().replace("+00:00", "Z")
