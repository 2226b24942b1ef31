"""The ``ira`` command: ``dev``, ``worker``, ``init``, ``db upgrade``, ``doctor``, ``bundle check``, ``record``,
``replay``.

The composition root: it reads the environment and the config file, builds one Platform and
hands it to the roles. Every command exits non-zero with a message naming the config key
when the configuration is invalid.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Coroutine
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer

from ira.core.errors import ConfigError
from ira.runtime.devstart import port_hint, port_in_use
from ira.runtime.settings import DEFAULT_CONFIG_FILE, Settings, load_settings, render_config_template

app = typer.Typer(help="ira: alerts in, durable investigations, approved tickets out.", no_args_is_help=True,
                  add_completion=False, pretty_exceptions_enable=False)
db_app = typer.Typer(help="Database schema commands.", no_args_is_help=True)
app.add_typer(db_app, name="db")
bundle_app = typer.Typer(help="Scenario bundle commands.", no_args_is_help=True)
app.add_typer(bundle_app, name="bundle")


def say(message: str) -> None:
    """Progress for people, on stdout (logs go to stderr as JSON)."""
    print(message, flush=True)


def settings_or_exit() -> Settings:
    try:
        return load_settings(os.environ)
    except ConfigError as exc:
        _config_exit(exc)


def _config_exit(exc: ConfigError) -> NoReturn:
    print(f"ira: invalid config: {exc.message}", file=sys.stderr)  # the message starts with the key
    raise typer.Exit(2) from exc


def run(coro: Coroutine[Any, Any, int | None]) -> NoReturn:
    """Run a command's coroutine; a config problem found late still exits 2 with the key."""
    try:
        code = asyncio.run(coro)
    except ConfigError as exc:
        _config_exit(exc)
    raise typer.Exit(code or 0)


@app.command()
def dev(live: Annotated[bool, typer.Option(help="Also start the live demo (needs prometheus/alertmanager).")]
        = False,
        demo: Annotated[bool, typer.Option(help="Play the bundled incident once ready (what `make run` does).")]
        = False,
        fresh: Annotated[bool, typer.Option(help="Delete the data directory (IRA_DATA_DIR, .ira/) first: "
                                                 "a new database, so the demo runs again.")] = False) -> None:
    """Everything in one process on the embedded stack (Tansu broker, Redis, SQLite)."""
    settings = settings_or_exit()
    if port_in_use(settings.http.host, settings.http.port):  # before the heavy imports and any service
        print(port_hint(settings.http.host, settings.http.port), file=sys.stderr)
        raise typer.Exit(1)
    from ira.runtime.process import run_dev

    run(run_dev(settings, say=say, live=live, demo=demo, fresh=fresh))


@app.command("demo")
def demo_command(url: Annotated[str, typer.Option(help="The running ira to play it into.")]
                 = "http://127.0.0.1:8080",
                 speedup: Annotated[float, typer.Option(help="Compress the recorded gaps this many times.")]
                 = 30.0) -> None:
    """Play the bundled incident ALR-20260429-017 into a running ira (its sources, as recorded)."""
    from ira.runtime.process import play_demo

    run(play_demo(settings_or_exit(), url=url, speedup=speedup, say=say))


@app.command()
def worker(role: Annotated[str, typer.Option(help="gateway, or a role from `ira doctor` (relay, scanner, ...).")]
           ) -> None:
    """Run one role against external Kafka, Redis and the database (scale-out)."""
    from ira.runtime.process import run_worker

    run(run_worker(settings_or_exit(), role, say=say))


@app.command()
def init(path: Annotated[Path, typer.Option(help="Where to write the config.")] = Path(DEFAULT_CONFIG_FILE),
         force: Annotated[bool, typer.Option(help="Overwrite an existing file.")] = False) -> None:
    """Write a commented ira.yaml with the development defaults."""
    if path.exists() and not force:
        print(f"ira: {path} exists; pass --force to overwrite", file=sys.stderr)
        raise typer.Exit(1)
    path.write_text(render_config_template())
    say(f"wrote {path}: edit it, then `ira dev` (or set IRA_CONFIG={path})")


@db_app.command("upgrade")
def db_upgrade() -> None:
    """Apply every pending migration to IRA_DATABASE_URL (or the dev SQLite file)."""
    from ira.runtime.process import upgrade_database

    run(upgrade_database(settings_or_exit(), say=say))


@app.command()
def doctor() -> None:
    """Say what is configured and what is reachable; exit 1 if something is not."""
    from ira.runtime.process import run_doctor

    run(run_doctor(settings_or_exit(), say=say))


@bundle_app.command("check")
def bundle_check(directory: Annotated[Path, typer.Argument(help="The bundle directory.")]) -> None:
    """Validate a bundle; list every problem (file, where, why) and exit 1 if there is one."""
    from ira.infra.bundle import check_bundle, load_bundle

    problems = check_bundle(directory)
    for problem in problems:
        say(f"{directory}/{problem}")
    if problems:
        say(f"invalid: {len(problems)} problem(s)")
        raise typer.Exit(1)
    bundle = load_bundle(directory)
    say(f"ok: {bundle.manifest.bundle_id} (format_version {bundle.manifest.format_version}, "
        f"{len(bundle.events)} events, {len(bundle.observations)} observations, {len(bundle.runbooks)} runbooks)")


DEV_URL = "http://127.0.0.1:8080"


def api_token(token: str | None) -> str:
    """``--token``, else ``IRA_TOKEN``, else the first configured API token (the dev admin token)."""
    if token:
        return token
    if os.environ.get("IRA_TOKEN"):
        return os.environ["IRA_TOKEN"]
    return next((t.token.get_secret_value() for t in settings_or_exit().api_tokens), "")


@app.command()
def record(run_id: Annotated[str, typer.Argument(help="The run to record (waiting or ended).")],
           out: Annotated[Path, typer.Option(help="The bundle directory to write (must not exist or be empty).")],
           url: Annotated[str, typer.Option(help="The running ira that holds the run.")] = DEV_URL,
           token: Annotated[str | None, typer.Option(help="Admin API token (default $IRA_TOKEN, "
                                                          "else the dev admin token).")] = None) -> None:
    """Export a run as a scenario bundle (its events, tool calls, runbooks and outcome), redacted.

    Exit 0: written and valid (`ira bundle check` passes); 2: could not be recorded.
    """
    from ira.replay.client import record_run

    raise typer.Exit(asyncio.run(record_run(run_id, out, url=url, token=api_token(token), say=say)))


@app.command()
def replay(bundle: Annotated[Path | None, typer.Option(help="The bundle directory to replay.")] = None,
           run_id: Annotated[str | None, typer.Option("--run", help="A waiting or ended run of the target ira: "
                                                                    "recorded, then replayed.")] = None,
           observations: Annotated[str, typer.Option(help="recorded: the bundle's tool results (and model calls); "
                                                          "live: the target's configured connectors (and models).")]
           = "recorded",
           speed: Annotated[float, typer.Option(help="Compress the recorded gaps this many times; "
                                                     "0 sends everything at once.")] = 0.0,
           url: Annotated[str, typer.Option(help="The running ira to replay into.")] = DEV_URL,
           token: Annotated[str | None, typer.Option(help="Admin API token (default $IRA_TOKEN, "
                                                          "else the dev admin token).")] = None) -> None:
    """Replay a bundle (or a run) into the staging environment of a running ira and compare with the original.

    Exit 0: finished and the bundle's expectations (if any) met; 1: not met; 2: could not run.
    """
    from ira.replay.client import ReplayOptions, replay_bundle, replay_run

    if (bundle is None) == (run_id is None) or observations not in ("recorded", "live"):
        say("ERROR: give exactly one of --bundle DIR and --run RUN_ID; --observations is recorded or live")
        raise typer.Exit(2)
    options = ReplayOptions(url=url, token=api_token(token), speed=speed,
                            observations="live" if observations == "live" else "recorded")
    started = replay_bundle(bundle, options, say=say) if bundle else replay_run(str(run_id), options, say=say)
    raise typer.Exit(asyncio.run(started))


def main() -> None:
    app()


if __name__ == "__main__":  # ``python -m ira.runtime.cli``: how ``ira dev`` starts its children
    main()
