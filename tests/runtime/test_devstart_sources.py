"""``ira dev``'s ready block says which investigator sources are configured (the others get no branch)."""

from __future__ import annotations

from ira.runtime.devstart import ready_block
from ira.runtime.settings import Settings


def block(agents: dict[str, object]) -> str:
    settings = Settings.model_validate({"database_url": "sqlite:///unused.db", "agents": agents})
    return ready_block(settings, url="http://127.0.0.1:8080", demo=False)


def test_the_ready_block_names_the_configured_sources_and_the_missing_ones() -> None:
    assert "sources     none configured: runs draft the ticket from the alert alone" in block({})
    assert "sources     logs   (not configured: metrics, runbooks)" in block({"jsonl_logs": {"paths": "/x/*.jsonl"}})
    assert "sources     logs, metrics, runbooks\n" in block({"recorded_bundle": "/tmp/bundle"})
