"""The fault matrix's smoke subset, once each, in the default suite (``make faults`` runs all
cases five times). The cases run side by side: each has its own database, Redis and broker."""

from __future__ import annotations

import asyncio
from pathlib import Path

import asyncpg
import pytest

from tests.faults.matrix import CASES, run_case, summary, table
from tests.services import postgres_test_url, require_service

SMOKE = tuple(case for case in CASES if case.smoke)


@pytest.mark.slow
@pytest.mark.postgres
async def test_smoke_cases_keep_every_invariant(tmp_path: Path) -> None:
    await _require_postgres()
    results = await asyncio.gather(*(run_case(case, tmp_path / case.name) for case in SMOKE))
    print("\n" + table(list(results)))
    assert all(r.held for r in results), "\n".join(summary(r) for r in results)


async def _require_postgres() -> None:
    try:
        conn = await asyncpg.connect(postgres_test_url(), timeout=3)
    except (OSError, asyncpg.PostgresError) as exc:
        require_service("postgresql", f"{postgres_test_url()} unreachable: {exc}")
        return
    await conn.close()
