"""`ira dev` and the CLI as a person runs them: a real process, real signals."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
from pathlib import Path

import httpx

from tests.eventually import eventually
from tests.processes import alive, descendants_and_holders, free_port, ira_command


def env_for(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("IRA_")}
    env.update(IRA_DATA_DIR=str(tmp_path / "data"), **extra)
    return env


async def test_ira_dev_gets_ready_and_sigint_leaves_no_child(tmp_path: Path) -> None:
    port = free_port()
    log = (tmp_path / "dev.log").open("w")
    proc = subprocess.Popen([ira_command(), "dev"], cwd=tmp_path, env=env_for(tmp_path, IRA_HTTP_PORT=str(port)),
                            stdout=log, stderr=subprocess.STDOUT)
    try:
        async def ready() -> bool:
            assert proc.poll() is None, (tmp_path / "dev.log").read_text()[-2000:]
            try:
                async with httpx.AsyncClient() as client:
                    return (await client.get(f"http://127.0.0.1:{port}/readyz", timeout=2)).status_code == 200
            except httpx.TransportError:
                return False

        await eventually(ready, timeout=60, interval=0.25, message="/readyz 200")
        helpers = descendants_and_holders(proc.pid, str(tmp_path / "data"))
        assert helpers, "expected the embedded broker and redis to run beside ira dev"
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0, (tmp_path / "dev.log").read_text()[-2000:]
        await eventually(lambda: not alive(helpers), timeout=10, message=f"children {helpers} gone")
        assert "ready" in (tmp_path / "dev.log").read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()


def test_invalid_config_exits_non_zero_naming_the_key_once(tmp_path: Path) -> None:
    result = subprocess.run([ira_command(), "doctor"], cwd=tmp_path, capture_output=True, text=True, timeout=60,
                            env=env_for(tmp_path, IRA_HTTP_PORT="notaport"))
    assert result.returncode == 2
    assert result.stderr.count("http.port") == 1 and "IRA_HTTP_PORT" in result.stderr


def test_a_taken_port_exits_1_with_a_hint_before_starting_anything(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run([ira_command(), "dev", "--demo"], cwd=tmp_path, capture_output=True, text=True,
                                timeout=60, env=env_for(tmp_path, IRA_HTTP_PORT=str(port)))
    assert result.returncode == 1
    assert f"127.0.0.1:{port} is already in use" in result.stderr and f"IRA_HTTP_PORT={port + 1}" in result.stderr
    assert not (tmp_path / "data").exists(), "no broker, Redis or database was started"


def test_init_then_doctor_reports_no_failure_for_a_database_dev_would_migrate(tmp_path: Path) -> None:
    env = env_for(tmp_path)
    assert subprocess.run([ira_command(), "init"], cwd=tmp_path, timeout=60, env=env).returncode == 0
    doctor = subprocess.run([ira_command(), "doctor"], cwd=tmp_path, capture_output=True, text=True, timeout=60,
                            env=env)
    assert doctor.returncode == 0 and "FAIL" not in doctor.stdout, doctor.stdout
    assert "to apply: `ira dev` applies them" in doctor.stdout


def test_invalid_yaml_value_names_its_key(tmp_path: Path) -> None:
    (tmp_path / "ira.yaml").write_text("sources:\n  - id: am\n    kind: nagios\n    bearer_token: abcdefgh\n")
    result = subprocess.run([ira_command(), "doctor"], cwd=tmp_path, capture_output=True, text=True, timeout=60,
                            env=env_for(tmp_path, IRA_CONFIG=str(tmp_path / "ira.yaml")))
    assert result.returncode == 2
    assert "sources.0.kind" in result.stderr


def test_unknown_worker_role_is_refused(tmp_path: Path) -> None:
    result = subprocess.run([ira_command(), "worker", "--role", "nope"], cwd=tmp_path, capture_output=True,
                            text=True, timeout=60, env=env_for(tmp_path))
    assert result.returncode == 2 and "role" in result.stderr and "relay" in result.stderr


def test_init_writes_a_config_that_loads(tmp_path: Path) -> None:
    target = tmp_path / "ira.yaml"
    assert subprocess.run([ira_command(), "init", "--path", str(target)], cwd=tmp_path, timeout=60,
                          env=env_for(tmp_path)).returncode == 0
    assert "dev-am-token" in target.read_text()
    again = subprocess.run([ira_command(), "init", "--path", str(target)], cwd=tmp_path, capture_output=True,
                           text=True, timeout=60, env=env_for(tmp_path))
    assert again.returncode == 1 and "--force" in again.stderr


def test_db_upgrade_then_doctor_reports_a_current_schema(tmp_path: Path) -> None:
    env = env_for(tmp_path)
    before = subprocess.run([ira_command(), "doctor"], cwd=tmp_path, capture_output=True, text=True, timeout=60,
                            env=env)
    assert before.returncode == 0 and "migration(s) to apply" in before.stdout
    upgraded = subprocess.run([ira_command(), "db", "upgrade"], cwd=tmp_path, capture_output=True, text=True,
                              timeout=60, env=env)
    assert upgraded.returncode == 0, upgraded.stderr
    after = subprocess.run([ira_command(), "doctor"], cwd=tmp_path, capture_output=True, text=True, timeout=60,
                           env=env)
    assert after.returncode == 0 and "database  ok" in after.stdout, after.stdout + after.stderr
    assert "schema    current" in after.stdout
