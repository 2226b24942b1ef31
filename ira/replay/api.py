"""``POST /v1/replays`` (admin) and ``GET /v1/replays[/{id}]``, scoped to the caller's tenant."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Depends, HTTPException
from fastapi.responses import JSONResponse

from ira.connectors.recorded import RecordingSet
from ira.core.errors import NotFoundError
from ira.core.ids import new_id
from ira.infra.bundle.format import BundleDocument
from ira.readmodel import detail, recording
from ira.readmodel.replay import BRANCHES, run_outcome
from ira.replay import store
from ira.replay.models import MAX_REPLAY_BODY, ReplayList, ReplayReport, ReplayRequest, ReplayView
from ira.replay.record import bundle_of
from ira.replay.watch import ReplayConfig
from ira.runtime.auth import Principal, authenticated_router, principal_for, requires
from ira.runtime.body import body_limit
from ira.runtime.bounds import IdPath
from ira.runtime.platform import Platform
from ira.runtime.store import artifacts

FINISHED_STEPS = frozenset({"done", "failed", "skipped"})


def build_replay_api(platform: Platform, config: ReplayConfig, *,
                     requested: Callable[[], None] = lambda: None) -> APIRouter:
    """``requested``: called once a replay is stored (wakes this process's replay loop)."""
    authenticate = principal_for(platform.settings)
    router = authenticated_router(authenticate, prefix="/v1")
    who = Depends(authenticate)
    db, clock = platform.db, platform.clock

    async def admin(caller: Principal = who) -> Principal:
        """Checked again after ``requires("admin")`` refused everyone else before the body was read."""
        caller.require("admin")
        return caller

    @router.post("/replays", tags=["replays"], status_code=202,
                 openapi_extra={**body_limit(MAX_REPLAY_BODY), **requires("admin")})
    async def start_replay(body: ReplayRequest, caller: Principal = Depends(admin)) -> JSONResponse:
        """Replay a bundle into ``staging`` (admin): its events go through the normal ingest path."""
        recording = RecordingSet(info=body.manifest, observations=body.observations, model_calls=body.model_calls,
                                 runbooks=body.runbooks)
        replay_id, now = new_id("rpl"), clock.now()
        async with db.transaction() as conn:
            if await store.active_count(conn) >= config.max_active:
                raise HTTPException(429, f"{config.max_active} replays are running; try again when one ends",
                                    headers={"Retry-After": "10"})
            ref = await artifacts.put_artifact(conn, caller.tenant_id, recording.model_dump_json().encode(),
                                               media_type="application/vnd.ira.recording+json",
                                               max_bytes=MAX_REPLAY_BODY, at=now)
            await store.create(conn, tenant_id=caller.tenant_id, replay_id=replay_id, bundle_id=body.manifest.bundle_id,
                               recording_ref=ref.ref, original=_original(body), events_total=len(body.events), at=now)
        requested()
        async with db.reader() as conn:
            view = await _view(conn, await store.get(conn, caller.tenant_id, replay_id))
        return JSONResponse(view.model_dump(mode="json"), status_code=202)

    @router.get("/runs/{run_id}/bundle", tags=["replays"], openapi_extra=requires("admin"))
    async def record_run(run_id: IdPath, caller: Principal = Depends(admin)) -> BundleDocument:
        """The run as a bundle (admin; ``ira record``): waiting or ended runs only (409 otherwise), redacted."""
        async with db.reader() as conn:
            try:
                material = await recording.run_material(conn, caller.tenant_id, run_id)
                outcome = await run_outcome(conn, caller.tenant_id, run_id)
                return bundle_of(material, outcome, redactor=platform.settings.redactor())
            except recording.NotRecordableError as exc:
                raise HTTPException(409, str(exc)) from exc

    @router.get("/replays", tags=["replays"])
    async def list_replays(caller: Principal = who) -> ReplayList:
        """The tenant's replays, newest first."""
        async with db.reader() as conn:
            return ReplayList(replays=tuple([await _view(conn, r) for r in await store.listed(conn, caller.tenant_id,
                                                                                               limit=100)]))

    @router.get("/replays/{replay_id}", tags=["replays"])
    async def get_replay(replay_id: IdPath, caller: Principal = who) -> ReplayView:
        """Progress (events sent, run state, branches finished) and, once settled, the comparison."""
        async with db.reader() as conn:
            return await _view(conn, await store.get(conn, caller.tenant_id, replay_id))

    return router


def _original(body: ReplayRequest) -> dict[str, Any]:
    return {"events": [e.model_dump(mode="json") for e in body.events], "speed": body.speed,
            "window_end": body.manifest.window_end.isoformat(), "environment": body.manifest.environment,
            "observations_from": body.observations_from,
            "outcome": body.outcome.model_dump(mode="json") if body.outcome else None,
            "expectations": body.expectations.model_dump(mode="json") if body.expectations else None}


async def _view(conn: Any, row: Any) -> ReplayView:
    run_state, finished, total = None, 0, 0
    if row.run_id:
        try:
            run = await detail.run_detail(conn, row.tenant_id, row.run_id)
        except NotFoundError:
            run = None
        if run is not None:
            run_state = run.state.value + (f" ({run.wait_kind.value})" if run.wait_kind else "")
            branches = [s for s in run.steps if s.kind in BRANCHES]
            total, finished = len(branches), sum(1 for s in branches if s.state.value in FINISHED_STEPS)
    return ReplayView(replay_id=row.replay_id, bundle_id=row.bundle_id, state=row.state,
                      observations_from=row.original.get("observations_from") or "recorded",
                      events_total=row.events_total, events_sent=row.events_sent, run_id=row.run_id,
                      run_state=run_state, branches_finished=finished, branches_total=total,
                      report=ReplayReport.model_validate(row.report) if row.report else None, error=row.error,
                      created_at=row.created_at, updated_at=row.updated_at)
