"""Pure analysis the rule policies share: before/after shifts of a series, log templates.

No I/O and no clock: given the same observations, the same evidence comes out.
"""

from __future__ import annotations

import re
import statistics
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from ira.core.signals import LogLine

_UUID = re.compile(r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b")
_HEX = re.compile(r"\b(?:0x)?[0-9a-fA-F]{12,}\b")
_IP = re.compile(r"\b\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?\b")
_QUOTED = re.compile(r"\"[^\"]*\"|'[^']*'")
_NUMBER = re.compile(r"(?<![A-Za-z])[-+]?\d+(?:\.\d+)?(?:ms|s|%)?")
_MIXED = re.compile(r"\b(?=\w*\d)(?=\w*[A-Za-z])\w{6,}\b")
_MEASURE = re.compile(r"\d+(?:ms|s)")


@dataclass(frozen=True)
class Shift:
    """How a series moved: its typical value before the split, its peak and last value after."""

    baseline: float
    peak: float
    last: float
    jump_at: datetime | None
    """The first time the value left its baseline band (None if it never did)."""

    @property
    def ratio(self) -> float:
        return self.peak / self.baseline if self.baseline > 0 else float("inf") if self.peak > 0 else 1.0


def shift_of(points: Sequence[tuple[datetime, float]], split: datetime, *, factor: float = 2.0,
             floor: float = 0.0) -> Shift | None:
    """Compare the median before ``split`` with the values after it; None without both sides.

    The onset is a robust change point: the first of ``SUSTAIN`` points in a row above the level
    the window started at (median of its first points) by more than ``factor - 1`` times that
    level, four MADs of it and ``floor``, whichever is largest (or the last two or more points,
    when the window ends during the jump). A ramp that starts in the baseline (a leak) gets its
    true, early onset; a single spike gets none. With fewer than
    three points before the split the first third of the points stands in as the baseline."""
    before = [v for t, v in points if t < split]
    after = [(t, v) for t, v in points if t >= split]
    if len(before) < 3 and len(points) >= 6:
        third = len(points) // 3
        before, after = [v for _, v in points[:third]], list(points[third:])
    if not before or not after:
        return None
    baseline = statistics.median(before)
    early = [v for _, v in points[: max(3, len(points) // 6)]]
    level = min(baseline, statistics.median(early))
    spread = 1.4826 * statistics.median(abs(v - statistics.median(early)) for v in early)
    band = level + max((factor - 1) * abs(level), 4 * spread, floor)
    return Shift(baseline=baseline, peak=max(v for _, v in after), last=after[-1][1], jump_at=_onset(points, band))


SUSTAIN = 3


def _onset(points: Sequence[tuple[datetime, float]], band: float) -> datetime | None:
    run: list[datetime] = []
    for t, v in points:
        run = [*run, t] if v > band else []
        if len(run) >= min(SUSTAIN, len(points) // 3 or 1):
            return run[0]
    return run[0] if len(run) >= 2 else None  # still above at the window's end: the jump is under way


def template_of(message: str) -> str:
    """The message with its variable parts masked: counts group by what kind of line it is."""
    text = _UUID.sub("<id>", message)
    text = _HEX.sub("<id>", text)
    text = _IP.sub("<addr>", text)
    text = _QUOTED.sub("<s>", text)
    text = _MIXED.sub(lambda m: m.group() if _MEASURE.fullmatch(m.group()) else "<id>", text)
    text = _NUMBER.sub("<n>", text)
    return " ".join(text.split())[:300]


def count_templates(lines: Iterable[LogLine]) -> tuple[Counter[str], dict[str, LogLine]]:
    """Lines per template, and one example line of each."""
    counts: Counter[str] = Counter()
    examples: dict[str, LogLine] = {}
    for line in lines:
        key = template_of(line.message)
        counts[key] += 1
        examples.setdefault(key, line)
    return counts, examples


def hm(at: datetime | None) -> str:
    return "?" if at is None else at.strftime("%Y-%m-%dT%H:%M:%SZ")


def pct(value: float) -> str:
    return f"{value * 100:.1f}%"
