"""What each CLI command does, as async functions the CLI runs (and tests can call)."""

from __future__ import annotations

import asyncio
import os
import socket
import sys
from collections.abc import Callable, Sequence
from contextlib import AsyncExitStack
from datetime import UTC, datetime, timedelta

import uvicorn

from ira.core.errors import ConfigError
from ira.runtime.children import ChildRoles, ready_line
from ira.runtime.devstart import clear_data_dir, port_hint, port_in_use, ready_block
from ira.runtime.devtree import PARENT_ENV, Parent, private_listener, shared_listener, url_of
from ira.runtime.fault import FaultPoints
from ira.runtime.logs import configure_logging
from ira.runtime.metrics_merge import merged
from ira.runtime.platform import Platform
from ira.runtime.readiness import ReadinessCheck, kafka_check, redis_check, run_checks
from ira.runtime.role import Role, doctor_checks, load_roles
from ira.runtime.settings import Settings
from ira.runtime.stack import open_platform
from ira.runtime.store.database import Database
from ira.runtime.store.migrate import pending, upgrade
from ira.runtime.supervisor import STOP_TIMEOUT, Supervision, build_http, install_stop_signals, supervise
from ira.runtime.telemetry import setup_tracing, shutdown_tracing

Say = Callable[[str], None]
GATEWAY = "gateway"
"""``ira doctor``'s bound per check: outside services (Slack) answer slower than a local database."""


async def run_dev(
    settings: Settings, *, say: Say, live: bool = False, demo: bool = False, fresh: bool = False,
) -> int:
    """``ira dev``: every role, the HTTP app and the embedded services; the roles of
    ``dev.processes`` in child processes (:mod:`ira.runtime.children`), the others in this one.

    ``demo`` binds the investigators to the bundled incident's recording and plays its source
    events once ira is ready: a complete run to watch without any outside system. ``fresh``
    deletes the data directory first. A taken HTTP port is found before anything starts.
    """
    configure_logging(settings.log_level, secrets=settings.secret_values(), log_format=settings.log_format)
    if port_in_use(settings.http.host, settings.http.port):
        print(port_hint(settings.http.host, settings.http.port), file=sys.stderr)
        return 1
    if fresh and (cleared := clear_data_dir(settings)) is not None:
        say(f"fresh     deleted {cleared}")
    if demo:
        settings = with_demo_recording(settings)
    tracer = setup_tracing(settings)
    roles = list(load_roles().values())
    counts = child_counts(settings, roles)
    supervision = Supervision()
    install_stop_signals(supervision)
    url = f"http://{settings.http.host}:{settings.http.port}"
    background: set[asyncio.Task[object]] = set()

    def on_ready() -> None:
        names = [f"{name} ({counts[name]} process{'es' if counts[name] > 1 else ''})" if name in counts
                 else name for name in [r.name for r in roles] + ([GATEWAY] if GATEWAY in counts else [])]
        say(f"ready     {url}  (roles: {', '.join(names)})")
        say(ready_block(settings, url=url, demo=demo))
        if demo:
            task = asyncio.create_task(play_demo(settings, url=url, speedup=30.0, say=say))
            task.add_done_callback(lambda done: _say_failure(done, say))
            background.add(task)

    try:
        async with AsyncExitStack() as stack:
            if live:
                settings = await start_live(stack, settings, url=url, say=say)
            platform = await stack.enter_async_context(open_platform(settings, embedded=True, say=say))
            listeners = dev_listeners(settings) if GATEWAY in counts else []
            parent_url = url_of(listeners[-1]) if listeners else ""
            server = build_http(platform, roles, supervision, tracer, listeners=listeners)
            loops: list[Role] = [role for role in roles if not counts.get(role.name)]
            if counts:
                children = ChildRoles(counts, env=lambda role: child_env(platform, role, parent_url=parent_url),
                                      say=say, stopping=supervision.requested,
                                      stop_timeout=settings.runtime.drain_timeout + STOP_TIMEOUT)
                platform.metrics.whole = lambda: whole_tree(platform, children)
                loops.append(children)
            code = await supervise(platform, loops, server=server, supervision=supervision, on_ready=on_ready)
    finally:
        for task in background:
            task.cancel()
        shutdown_tracing(tracer)
    say("stopped")
    return code


def _say_failure(task: asyncio.Task[object], say: Say) -> None:
    """A background task's unexpected error, said where the person reads (not lost with the task)."""
    if not task.cancelled() and (exc := task.exception()) is not None:
        say(f"demo      failed: {type(exc).__name__}: {exc}")


def child_counts(settings: Settings, roles: Sequence[Role]) -> dict[str, int]:
    """``dev.processes`` without the zeros; a role name that does not exist is a config error."""
    known = {role.name for role in roles} | {GATEWAY}
    for name in settings.dev.processes:
        if name not in known:
            raise ConfigError("dev.processes", f"unknown role {name!r}; known: {', '.join(sorted(known))}")
    return {name: count for name, count in settings.dev.processes.items() if count > 0}


def child_env(platform: Platform, role: str, *, parent_url: str) -> dict[str, str]:
    """A child's environment: this one's, pointed at the services this process started. A
    gateway child shares this process's HTTP port and learns its private URL
    (:mod:`ira.runtime.devtree`); another serves its ops endpoints on a free port. Each names
    its private address in its ``ready`` line."""
    settings = platform.settings
    env = {**os.environ, "IRA_KAFKA_BOOTSTRAP": platform.kafka_bootstrap, "IRA_REDIS_URL": platform.redis_url,
           "IRA_DATABASE_URL": settings.database_url, "IRA_DATA_DIR": str(settings.data_dir.resolve()),
           "IRA_HTTP_PORT": str(settings.http.port) if role == GATEWAY else "0", "IRA_ENV": settings.environment}
    if role == GATEWAY:
        env[PARENT_ENV] = parent_url
    return env


def dev_listeners(settings: Settings) -> list[socket.socket]:
    """The HTTP port, shared with the gateway children (``SO_REUSEPORT``), and a private port."""
    return [shared_listener(settings.http.host, settings.http.port), private_listener(settings.http.host)]


async def whole_tree(platform: Platform, children: ChildRoles) -> bytes:
    """``/metrics`` of ``ira dev``: this process's merged with every child's."""
    return merged(platform.metrics.registry, await children.metrics())


LIVE_FAULT_AFTER = 60.0
"""Seconds of healthy traffic before the live demo deploys the faulty v3."""


async def start_live(stack: AsyncExitStack, settings: Settings, *, url: str, say: Say) -> Settings:
    """Start the live demo (order-service, Prometheus, Alertmanager -> this ira) and point the
    investigators at it: real metrics, real logs, the demo runbooks."""
    from ira.infra.demo import RUNBOOKS_DIR
    from ira.infra.demo.live import missing_binaries, start_live_demo
    from ira.runtime.settings.agents import JsonlLogSettings, PrometheusSettings

    missing = missing_binaries()
    if missing:
        raise ConfigError("live", f"the live demo needs Debian's {' and '.join(missing)}: "
                                  f"apt-get install {' '.join(missing)}")
    home = (settings.data_dir / "live").resolve()
    home.mkdir(parents=True, exist_ok=True)
    demo = await start_live_demo(stack, home, webhook_base=url, service_args=(
        "--ira-url", url, "--fault-after", str(LIVE_FAULT_AFTER)))
    say(f"live      order-service {demo.service_url}, Prometheus {demo.prometheus_url}, "
        f"Alertmanager {demo.alertmanager_url}; v3 deploys in {LIVE_FAULT_AFTER:g}s")
    agents = settings.agents.model_copy(update={
        "prometheus": PrometheusSettings(url=demo.prometheus_url),
        "jsonl_logs": JsonlLogSettings(paths=str(demo.log_path)), "runbooks_dir": RUNBOOKS_DIR})
    return settings.model_copy(update={"agents": agents})


def with_demo_recording(settings: Settings) -> Settings:
    """Answer every investigator tool call from the bundled incident's recording."""
    from ira.infra.demo import DEMO_BUNDLE

    if settings.agents.recorded_bundle is not None:
        return settings
    agents = settings.agents.model_copy(update={"recorded_bundle": DEMO_BUNDLE})
    return settings.model_copy(update={"agents": agents})


async def play_demo(settings: Settings, *, url: str, speedup: float, say: Say) -> int:
    """``ira demo``: post the bundled incident's source events to the ira at ``url``."""
    import httpx

    from ira.infra.demo.bundle import load_bundle
    from ira.infra.demo.outcome import explain_demo
    from ira.infra.demo.play import play_bundle

    bundle = load_bundle()
    say(f"demo      playing {bundle.info.bundle_id}: {bundle.info.description}")
    since = datetime.now(UTC)
    token = next((t.token.get_secret_value() for t in settings.api_tokens), "")
    try:
        accepted = await play_bundle(bundle, base_url=url, settings=settings, speedup=speedup, say=say)
        say(f"demo      {len(accepted)} events accepted")
        async with httpx.AsyncClient(base_url=url, timeout=10, headers={"authorization": f"Bearer {token}"}) as api:
            await explain_demo(api, url=url, since=since, say=say)
    except (httpx.HTTPError, ValueError) as exc:
        say(f"demo      could not play the bundle: {exc}")
        return 1
    return 0


WORKER_BEFORE_READY = "worker.before_ready"


async def run_worker(settings: Settings, role_name: str, *, say: Say) -> int:
    """``ira worker --role``: one role's loop (or the gateway's HTTP) against external services."""
    configure_logging(settings.log_level, secrets=settings.secret_values(), log_format=settings.log_format,
                      role=role_name)
    roles = load_roles()
    if role_name != GATEWAY and role_name not in roles:
        raise ConfigError("role", f"unknown role {role_name!r}; known: {', '.join([GATEWAY, *roles])}")
    loops: list[Role] = [] if role_name == GATEWAY else [roles[role_name]]
    route_roles = list(roles.values()) if role_name == GATEWAY else []
    tracer = setup_tracing(settings, service_name=f"ira-{role_name}")
    supervision = Supervision()
    install_stop_signals(supervision)
    parent = Parent(os.environ[PARENT_ENV]) if role_name == GATEWAY and os.environ.get(PARENT_ENV) else None
    try:
        async with open_platform(settings, embedded=False, say=say) as platform:
            FaultPoints(settings.faults).hit(WORKER_BEFORE_READY)
            if parent is None:
                server = build_http(platform, route_roles, supervision, tracer)
            else:  # a gateway child of ira dev: on its port, ready with it, its whole /metrics
                platform.metrics.whole = parent.metrics(platform.metrics.render)
                server = build_http(platform, route_roles, supervision, tracer, listeners=dev_listeners(settings),
                                    checks={"ira dev": parent.ready})
            code = await supervise(platform, loops, server=server, supervision=supervision,
                                   on_ready=lambda: say(ready_line(role_name, bound_url(server))))
    finally:
        shutdown_tracing(tracer)
        if parent is not None:
            await parent.close()
    return code


def bound_url(server: uvicorn.Server) -> str:
    """Where ``server`` listens, privately if it has a private port (the last; its port may have
    been 0: any free one)."""
    return url_of(server.servers[-1].sockets[0])


async def upgrade_database(settings: Settings, *, say: Say) -> None:
    db = Database.create(settings.database_url)
    try:
        before = await pending(db)
        await upgrade(db)
        say(f"database schema is current ({len(before)} migration(s) applied)")
    finally:
        await db.close()


DOCTOR_TIMEOUT = timedelta(seconds=10)
"""Per check: a ticket system's check is two calls to a SaaS API, possibly far away."""


async def run_doctor(settings: Settings, *, say: Say) -> int:
    """Check each configured dependency; embedded ones are reported as such, not probed."""
    from redis.asyncio import Redis

    db = Database.create(settings.database_url)
    checks: dict[str, ReadinessCheck] = {"database": db.ping}
    redis = Redis.from_url(settings.redis_url) if settings.redis_url else None
    if redis is not None:
        checks["redis"] = redis_check(redis)
    if settings.kafka_bootstrap:
        checks["kafka"] = kafka_check(settings.kafka_bootstrap, settings.environment)
    checks |= doctor_checks(load_roles().values(), settings)
    failing = await run_checks(checks, timeout=DOCTOR_TIMEOUT)
    for name in checks:
        say(f"{name:9} {'FAIL ' + failing[name] if name in failing else 'ok'}")
    if "database" not in failing:
        say(await _schema_line(db))
    if redis is None:
        say("redis     embedded (started by `ira dev`)")
    if not settings.kafka_bootstrap:
        say("kafka     embedded (started by `ira dev`)")
    say(f"roles     {', '.join([GATEWAY, *load_roles()])}")
    await db.close()
    if redis is not None:
        await redis.aclose()
    return 1 if failing else 0


async def _schema_line(db: Database) -> str:
    """Pending migrations are not a failure: ``ira dev`` applies them when it starts (a worker
    needs ``ira db upgrade`` first, and says so)."""
    missing = await pending(db)
    if not missing:
        return "schema    current"
    return (f"schema    {len(missing)} migration(s) to apply: `ira dev` applies them on start; "
            "for `ira worker` run `ira db upgrade` first")
