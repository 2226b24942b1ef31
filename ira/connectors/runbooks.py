"""A directory of markdown runbooks as a ``RunbookSource``, ranked with SQLite FTS5 (BM25).

Each runbook starts with YAML front matter::

    ---
    id: order-service-db-pool-v3
    title: order-service latency from DB pool exhaustion (v3)
    services: [order-service]
    alerts: [OrderServiceHighLatency]
    versions: ">=3.0,<4.0"
    symptoms: [latency, db pool, timeout]
    causes: [pool too small for v3's per-request transactions]
    ---

The index lives in memory and is built once, on first use, in a worker thread. Runbooks
written for another service are never returned; ones naming no service are generic and may
be. A runbook's ``versions`` range is checked against the version the service runs now, so a
v2 runbook is reported as not applying when the service runs v3 rather than silently trusted.
"""

from __future__ import annotations

import asyncio
import re
import sqlite3
import threading
from pathlib import Path
from typing import Any

import yaml

from ira.core.signals import READ_ONLY_RETRY, RetryContract, Runbook, RunbookHit, RunbookQuery, RunbookResult

_FRONT = re.compile(r"\A---\s*\n(.*?)\n---\s*\n?(.*)\Z", re.DOTALL)
_WORD = re.compile(r"[A-Za-z0-9]+")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_WEIGHTS = (4.0, 3.0, 3.0, 2.0, 1.0)  # title, services, alerts, symptoms, body
SERVICE_BOOST, ALERT_BOOST = 5.0, 5.0


def load_runbook(path: Path, root: Path) -> Runbook:
    text = path.read_text(encoding="utf-8")
    match = _FRONT.match(text)
    meta: dict[str, Any] = (yaml.safe_load(match[1]) or {}) if match else {}
    body = match[2] if match else text
    return Runbook(
        runbook_id=str(meta.get("id") or path.stem), title=str(meta.get("title") or path.stem),
        path=str(path.relative_to(root)), services=_strings(meta.get("services", meta.get("service"))),
        alerts=_strings(meta.get("alerts", meta.get("alert"))),
        versions=None if meta.get("versions") is None else str(meta["versions"]),
        symptoms=_strings(meta.get("symptoms")), causes=_strings(meta.get("causes")), body=body.strip())


def _strings(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    return tuple(str(v) for v in value) if isinstance(value, list) else (str(value),)


def words(text: str | None) -> list[str]:
    """Search words: CamelCase and kebab-case split, lower case (``HighLatency`` -> high, latency)."""
    return [w.lower() for w in _WORD.findall(_CAMEL.sub(" ", text or ""))]


class FileRunbookSource:
    retry: RetryContract = READ_ONLY_RETRY

    def __init__(self, directory: Path) -> None:
        self._dir = directory
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = None
        self._books: list[Runbook] = []

    async def search(self, query: RunbookQuery) -> RunbookResult:
        return await asyncio.to_thread(self._search, query)

    def _search(self, query: RunbookQuery) -> RunbookResult:
        with self._lock:
            db = self._index()
            terms = sorted({*words(query.alert), *words(query.service), *words(query.text)})
            if not terms:
                return RunbookResult(query=query)
            match = " OR ".join(f'"{t}"' for t in terms)
            rows = db.execute("SELECT rowid, bm25(books, ?, ?, ?, ?, ?) FROM books WHERE books MATCH ?",
                              (*_WEIGHTS, match)).fetchall()
        hits = [self._hit(self._books[rowid], -rank, query) for rowid, rank in rows]
        kept = sorted((h for h in hits if h is not None), key=lambda h: (-h.score, h.runbook.runbook_id))
        return RunbookResult(query=query, hits=tuple(kept[: query.limit]))

    def _hit(self, book: Runbook, score: float, query: RunbookQuery) -> RunbookHit | None:
        if query.service and book.services and query.service not in book.services:
            return None  # written for another service
        score += SERVICE_BOOST if query.service in book.services else 0.0
        score += ALERT_BOOST if query.alert and query.alert in book.alerts else 0.0
        applies = None if query.version is None else version_in_range(query.version, book.versions)
        return RunbookHit(runbook=book, score=round(score, 4), applies=applies)

    def _index(self) -> sqlite3.Connection:
        if self._db is not None:
            return self._db
        db = sqlite3.connect(":memory:", check_same_thread=False)
        db.execute("CREATE VIRTUAL TABLE books USING fts5(title, services, alerts, symptoms, body)")
        paths = sorted(self._dir.rglob("*.md")) if self._dir.is_dir() else []
        self._books = [load_runbook(p, self._dir) for p in paths]
        db.executemany("INSERT INTO books(rowid, title, services, alerts, symptoms, body) VALUES (?, ?, ?, ?, ?, ?)", [
            (i, " ".join(words(b.title)), " ".join(words(" ".join(b.services))),
             " ".join(words(" ".join(b.alerts))), " ".join(words(" ".join(b.symptoms))), " ".join(words(b.body)))
            for i, b in enumerate(self._books)])
        self._db = db
        return db


def _numbers(version: str) -> tuple[int, ...]:
    """``v3.1.0`` -> (3, 1, 0); the leading numeric components only."""
    parts = []
    for piece in version.strip().lstrip("vV").split("."):
        digits = re.match(r"\d+", piece)
        if digits is None:
            break
        parts.append(int(digits[0]))
    return tuple(parts)


def _clause(version: tuple[int, ...], clause: str) -> bool:
    match = re.fullmatch(r"\s*(>=|<=|==|!=|>|<)?\s*v?([0-9][0-9.]*)(\.[x*])?\s*", clause)
    if match is None:
        return False
    op, wanted, wildcard = match[1], _numbers(match[2]), match[3]
    if op is None or (op == "==" and wildcard):
        return version[: len(wanted)] == wanted  # "3", "2.x", "==2.*": same leading numbers
    width = max(len(version), len(wanted))
    a, b = version + (0,) * (width - len(version)), wanted + (0,) * (width - len(wanted))
    return {">=": a >= b, "<=": a <= b, ">": a > b, "<": a < b, "==": a == b, "!=": a != b}[op]


def version_in_range(version: str, spec: str | None) -> bool:
    """Whether ``version`` satisfies ``spec`` (comma = and); a runbook without a range applies."""
    if spec is None:
        return True
    numbers = _numbers(version)
    return bool(numbers) and all(_clause(numbers, c) for c in spec.split(",") if c.strip())
