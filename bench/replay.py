"""Benchmark: the demo bundle replayed end to end into staging (JSON lines; goal < 30 s).

Usage: python bench/replay.py [--bundle DIR] [--replays N] [--fast] [--ops N]

Starts ``ira dev`` (dev defaults, fresh data dir, a free port on 127.0.0.1), waits for
``/readyz``, then runs ``ira replay --bundle DIR`` (speed 0: every event at once) N times in a
row and prints one line per replay: seconds from the command's start to its verdict, the
exit code and the verdict. The first replay also pays for the consumers' first fetches. Then
``ira record`` of the last replay's run (seconds, what the bundle holds) and ``ira replay --run``
of it (record and replay in one go). ``--ops N`` is the smoke run of ``make bench``: the fast
settings and N // 200 replays (at least one).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import yaml

from ira.infra.demo import DEMO_BUNDLE
from ira.runtime.settings import render_config_template

IRA = str(Path(sys.executable).with_name("ira"))
FAST = "--fast" in sys.argv


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_ready(url: str, proc: subprocess.Popen[bytes], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit("ira dev exited before it was ready")
        try:
            if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.25)
    raise SystemExit("ira dev was not ready in time")


def fast_config(path: Path) -> Path:
    """The dev defaults with the embedded broker's group joins short (Tansu takes about half the
    session timeout to join) and an eager relay."""
    config = yaml.safe_load(render_config_template())
    config["kafka"]["session_timeout"] = "2s"
    config["runtime"].update(relay_poll_interval="50ms", scanner_interval="500ms")
    path.write_text(yaml.safe_dump(config))
    return path


def replay_once(bundle: Path, url: str) -> dict[str, object]:
    started = time.monotonic()
    done = subprocess.run([IRA, "replay", "--bundle", str(bundle), "--url", url, "--token", "dev-admin-token"],
                          capture_output=True, text=True, timeout=600)
    lines = done.stdout.splitlines()
    return {"bench": "replay", "bundle": bundle.name, "config": "fast" if FAST else "dev defaults",
            "seconds": round(time.monotonic() - started, 2),
            "exit": done.returncode, "verdict": lines[-1] if lines else done.stderr[-300:], "goal_seconds": 30}


def last_staging_run(url: str) -> str:
    runs = httpx.get(f"{url}/v1/runs", params={"environment": "staging", "limit": 1},
                     headers={"authorization": "Bearer dev-admin-token"}, timeout=10).json()["runs"]
    return str(runs[0]["run_id"])


def record_once(run_id: str, url: str, out: Path) -> dict[str, object]:
    started = time.monotonic()
    done = subprocess.run([IRA, "record", run_id, "--out", str(out), "--url", url, "--token", "dev-admin-token"],
                          capture_output=True, text=True, timeout=120)
    lines = done.stdout.splitlines()
    return {"bench": "record", "config": "fast" if FAST else "dev defaults", "seconds": round(time.monotonic() -
            started, 2), "exit": done.returncode, "said": lines[-1] if lines else done.stderr[-300:]}


def replay_run_once(run_id: str, url: str) -> dict[str, object]:
    started = time.monotonic()
    done = subprocess.run([IRA, "replay", "--run", run_id, "--url", url, "--token", "dev-admin-token"],
                          capture_output=True, text=True, timeout=600)
    lines = done.stdout.splitlines()
    return {"bench": "replay", "from": "run (record + replay)", "config": "fast" if FAST else "dev defaults",
            "seconds": round(time.monotonic() - started, 2), "exit": done.returncode,
            "verdict": lines[-1] if lines else done.stderr[-300:], "goal_seconds": 30}


def main() -> None:
    global FAST
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bundle", type=Path, default=DEMO_BUNDLE)
    parser.add_argument("--replays", type=int, default=2)
    parser.add_argument("--fast", action="store_true",
                        help="~2 s Kafka sessions and a 50 ms relay, as the end-to-end tests run ira dev")
    parser.add_argument("--ops", type=int, default=None,
                        help="smoke run (make bench): the fast settings and ops // 200 replays, at least one")
    args = parser.parse_args()
    if args.ops is not None:
        args.fast, args.replays = True, max(1, args.ops // 200)
    FAST = args.fast
    home = Path(tempfile.mkdtemp(prefix="ira-bench-replay-"))
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("IRA_")}
    env.update(IRA_DATA_DIR=str(home / "data"), IRA_HTTP_PORT=str(port), IRA_LOG_LEVEL="WARNING")
    if args.fast:
        env["IRA_CONFIG"] = str(fast_config(home / "ira.yaml"))
    with (home / "dev.log").open("wb") as log:
        proc = subprocess.Popen([IRA, "dev"], cwd=home, env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url, proc)
        for _ in range(args.replays):
            print(json.dumps(replay_once(args.bundle, url)), flush=True)
        run_id = last_staging_run(url)
        print(json.dumps(record_once(run_id, url, home / "recorded")), flush=True)
        print(json.dumps(replay_run_once(run_id, url)), flush=True)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
