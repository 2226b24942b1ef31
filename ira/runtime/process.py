"""What each CLI command does, as async functions the CLI runs (and tests can call)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from ira.core.errors import ConfigError
from ira.runtime.logs import configure_logging
from ira.runtime.readiness import DEFAULT_CHECK_TIMEOUT, kafka_check, redis_check, run_checks
from ira.runtime.role import Role, load_roles
from ira.runtime.settings import Settings
from ira.runtime.stack import open_platform
from ira.runtime.store.database import Database
from ira.runtime.store.migrate import pending, upgrade
from ira.runtime.supervisor import build_http, install_stop_signals, supervise
from ira.runtime.telemetry import setup_tracing, shutdown_tracing

Say = Callable[[str], None]
GATEWAY = "gateway"


async def run_dev(settings: Settings, *, say: Say, live: bool = False) -> int:
    """``ira dev``: every role, the HTTP app and the embedded services in one process."""
    configure_logging(settings.log_level, secrets=settings.secret_values())
    tracer = setup_tracing(settings)
    roles = list(load_roles().values())
    stop = asyncio.Event()
    install_stop_signals(stop)
    try:
        async with open_platform(settings, embedded=True, say=say) as platform:
            server = build_http(platform, roles, tracer)
            url = f"http://{settings.http.host}:{settings.http.port}"
            code = await supervise(platform, roles, server=server, stop=stop,
                                   on_ready=lambda: say(f"ready     {url}  (roles: {', '.join(r.name for r in roles)};"
                                                        " Ctrl-C to stop)"))
    finally:
        shutdown_tracing(tracer)
    say("stopped")
    return code


async def run_worker(settings: Settings, role_name: str, *, say: Say) -> int:
    """``ira worker --role``: one role's loop (or the gateway's HTTP) against external services."""
    configure_logging(settings.log_level, secrets=settings.secret_values())
    roles = load_roles()
    if role_name != GATEWAY and role_name not in roles:
        raise ConfigError("role", f"unknown role {role_name!r}; known: {', '.join([GATEWAY, *roles])}")
    loops: list[Role] = [] if role_name == GATEWAY else [roles[role_name]]
    route_roles = list(roles.values()) if role_name == GATEWAY else []
    tracer = setup_tracing(settings, service_name=f"ira-{role_name}")
    stop = asyncio.Event()
    install_stop_signals(stop)
    try:
        async with open_platform(settings, embedded=False, say=say) as platform:
            server = build_http(platform, route_roles, tracer)
            code = await supervise(platform, loops, server=server, stop=stop,
                                   on_ready=lambda: say(f"ready     role {role_name}"))
    finally:
        shutdown_tracing(tracer)
    return code


async def upgrade_database(settings: Settings, *, say: Say) -> None:
    db = Database.create(settings.database_url)
    try:
        before = await pending(db)
        await upgrade(db)
        say(f"database schema is current ({len(before)} migration(s) applied)")
    finally:
        await db.close()


async def run_doctor(settings: Settings, *, say: Say) -> int:
    """Check each configured dependency; embedded ones are reported as such, not probed."""
    from redis.asyncio import Redis

    db = Database.create(settings.database_url)
    checks = {"database": _database_check(db)}
    redis = Redis.from_url(settings.redis_url) if settings.redis_url else None
    if redis is not None:
        checks["redis"] = redis_check(redis)
    if settings.kafka_bootstrap:
        checks["kafka"] = kafka_check(settings.kafka_bootstrap, settings.environment)
    failing = await run_checks(checks, timeout=DEFAULT_CHECK_TIMEOUT)
    for name in checks:
        say(f"{name:9} {'FAIL ' + failing[name] if name in failing else 'ok'}")
    if redis is None:
        say("redis     embedded (started by `ira dev`)")
    if not settings.kafka_bootstrap:
        say("kafka     embedded (started by `ira dev`)")
    say(f"roles     {', '.join([GATEWAY, *load_roles()])}")
    await db.close()
    if redis is not None:
        await redis.aclose()
    return 1 if failing else 0


def _database_check(db: Database):  # type: ignore[no-untyped-def]
    async def check() -> None:
        await db.ping()
        missing = await pending(db)
        if missing:
            raise ConfigError("database_url", f"{len(missing)} migration(s) pending: run `ira db upgrade`")

    return check
