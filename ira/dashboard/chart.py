"""A metric series as a small inline SVG chart: geometry only, no I/O. Pure.

Server-side, so the decision page needs no charting library and shows the series even with
scripts off; the template draws the polyline and labels these numbers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

WIDTH, HEIGHT, PAD = 320.0, 80.0, 4.0


@dataclass(frozen=True)
class Line:
    points: str
    """SVG ``points`` attribute of one series."""
    labels: dict[str, str]


@dataclass(frozen=True)
class Chart:
    lines: tuple[Line, ...]
    low: float
    high: float
    start: datetime
    end: datetime
    width: float = WIDTH
    height: float = HEIGHT


def chart(series: Sequence[tuple[dict[str, str], Sequence[tuple[datetime, float]]]]) -> Chart | None:
    """All series on shared axes; None when there is nothing to draw."""
    every = [p for _, points in series for p in points]
    if not every:
        return None
    start, end = min(t for t, _ in every), max(t for t, _ in every)
    low, high = min(v for _, v in every), max(v for _, v in every)
    span_t = (end - start).total_seconds() or 1.0
    span_v = (high - low) or 1.0

    def xy(t: datetime, v: float) -> str:
        x = PAD + (WIDTH - 2 * PAD) * (t - start).total_seconds() / span_t
        y = HEIGHT - PAD - (HEIGHT - 2 * PAD) * (v - low) / span_v
        return f"{x:.1f},{y:.1f}"

    lines = tuple(Line(points=" ".join(xy(t, v) for t, v in points), labels=labels) for labels, points in series)
    return Chart(lines=lines, low=low, high=high, start=start, end=end)
