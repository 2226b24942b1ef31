"""Envelopes: what is poison, what is a topic's physical name."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from ira.core.envelope import Envelope, Topic, topic_name
from ira.core.errors import InvalidMessageError


def test_round_trip() -> None:
    env = Envelope(message_id="m1", type="step.ready", tenant_id="acme",
                   occurred_at=datetime(2026, 4, 29, tzinfo=UTC), payload={"run_id": "r1"})
    assert Envelope.from_bytes(env.to_bytes()) == env


@pytest.mark.parametrize(("raw", "where"), [
    (b"", "empty"),
    (b"not json", "envelope"),
    (b'{"message_id": "m", "type": "t", "tenant_id": "a"}', "occurred_at"),
    (b'{"message_id": "m", "type": "t", "tenant_id": "a", "occurred_at": "2026-04-29T00:00:00"}', "occurred_at"),
])
def test_unreadable_values_are_poison(raw: bytes, where: str) -> None:
    with pytest.raises(InvalidMessageError) as err:
        Envelope.from_bytes(raw)
    assert where in str(err.value)


def test_a_newer_schema_is_refused_not_guessed() -> None:
    raw = (b'{"message_id": "m", "type": "t", "tenant_id": "a", "schema_version": 99,'
           b' "occurred_at": "2026-04-29T00:00:00Z"}')
    with pytest.raises(InvalidMessageError, match="schema_version 99"):
        Envelope.from_bytes(raw)


def test_staging_topics_are_prefixed() -> None:
    assert topic_name(Topic.ALERTS, "prod") == "ira.alerts.v1"
    assert topic_name(Topic.ALERTS, "staging") == "staging.ira.alerts.v1"


def test_core_imports_no_io_library() -> None:
    """The layout rule of DESIGN.md §2, checked: core/ stays pure."""
    import ast
    from pathlib import Path

    import ira.core

    forbidden = {"sqlalchemy", "aiokafka", "redis", "httpx", "fastapi", "asyncpg", "aiosqlite", "faust", "slack_sdk"}
    for path in Path(ira.core.__file__).parent.glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            assert not {n.split(".")[0] for n in names} & forbidden, f"{path.name} imports I/O"
