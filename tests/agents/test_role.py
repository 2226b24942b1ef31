"""The agents role on a real broker: a wake-up on ira.steps.v1 becomes a finished branch."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

from ira.agents.main import role
from ira.core.envelope import Topic, topic_name
from ira.core.investigation import BranchKind
from ira.core.states import StepState
from ira.runtime.platform import Platform
from ira.runtime.settings.agents import AgentsSettings, JsonlLogSettings
from ira.runtime.store import steps
from ira.runtime.wakeup import step_wakeup
from tests.agents import fixtures as fx
from tests.agents.scenario import TENANT, binding, create_branch_run
from tests.eventually import eventually


async def test_a_woken_logs_step_is_claimed_investigated_and_finished(platform: Platform, tmp_path: Path) -> None:
    logs = fx.write_logs(tmp_path / "app.jsonl")
    agents = AgentsSettings(jsonl_logs=JsonlLogSettings(paths=str(logs)))
    p = dataclasses.replace(platform, settings=platform.settings.model_copy(update={"agents": agents}))
    run_id = await create_branch_run(p.db, {BranchKind.LOGS: binding(BranchKind.LOGS, fx.START, fx.END)}, at=fx.NOW)
    stop = asyncio.Event()
    worker = asyncio.create_task(role.run(p, stop))
    try:
        wake = step_wakeup(TENANT, run_id, "logs", kind="logs", environment="prod", at=fx.NOW)
        await p.producer.publish(topic_name(Topic.STEPS, "prod"), wake.key, wake.envelope)

        async def finished() -> bool:
            async with p.db.reader() as conn:
                step = await steps.get_step(conn, TENANT, run_id, "logs")
            return step.state == StepState.DONE and step.result_ref is not None

        await eventually(finished, timeout=60, interval=0.2, message="logs step done")
    finally:
        stop.set()
        await asyncio.wait_for(worker, timeout=30)
