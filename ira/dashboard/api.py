"""``GET /v1/runs/{run_id}/events/stream``: the run's event log as server-sent events."""


from typing import Annotated

from fastapi import APIRouter, Depends, Header, Request
from fastapi.responses import StreamingResponse

from ira.dashboard.stream import event_stream
from ira.runtime.auth import Principal, principal_for
from ira.runtime.platform import Platform
from ira.runtime.store import runs


def build_stream_api(platform: Platform) -> APIRouter:
    router = APIRouter(tags=["runs"])
    Caller = Annotated[Principal, Depends(principal_for(platform.settings))]

    @router.get("/v1/runs/{run_id}/events/stream")
    async def stream(run_id: str, request: Request, caller: Caller, after: int = 0,
                     last_event_id: Annotated[str | None, Header()] = None) -> StreamingResponse:
        """SSE; ``id:`` = run_seq; resumes after ``Last-Event-ID`` (or ``?after=``)."""
        async with platform.db.reader() as conn:
            await runs.get_run(conn, caller.tenant_id, run_id)  # 404 for another tenant's run
        start = int(last_event_id) if last_event_id and last_event_id.isdigit() else after
        frames = event_stream(platform.db, caller.tenant_id, run_id, after=start,
                              disconnected=request.is_disconnected)
        return StreamingResponse(frames, media_type="text/event-stream",
                                 headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})

    return router
