"""`ira dev` and the CLI as a person runs them: a real process, real signals."""

from __future__ import annotations

import json
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
    dev = DevProcess(tmp_path, "dev")
    try:
        await dev.ready()
        helpers = descendants_and_holders(dev.proc.pid, str(tmp_path / "data"))
        assert helpers, "expected the embedded broker and redis to run beside ira dev"
        dev.proc.send_signal(signal.SIGINT)
        assert dev.proc.wait(timeout=60) == 0, dev.log_text()[-2000:]
        await eventually(lambda: not alive(helpers), timeout=10, message=f"children {helpers} gone")
        assert "ready" in dev.log_text()
    finally:
        dev.close()


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


async def test_kill_9_leaves_no_broker_and_the_next_start_adopts_the_redis(tmp_path: Path) -> None:
    # Given ira dev killed with SIGKILL (no cleanup at all)
    data = tmp_path / "data"
    first = DevProcess(tmp_path, "first")
    await first.ready()
    broker = first.broker_pid()
    redis_pid = json.loads((data / "redis" / "server.json").read_text())["pid"]
    first.proc.kill()
    first.proc.wait()
    second: DevProcess | None = None
    try:
        # Then the broker died with it (death signal), while the daemonized Redis is left running
        await eventually(lambda: not alive({broker}), timeout=10, message="the broker died with ira")
        assert alive({redis_pid})

        # When ira dev starts again on the same data dir, it adopts that Redis instead of a second one
        second = DevProcess(tmp_path, "second")
        await second.ready()
        assert json.loads((data / "redis" / "server.json").read_text())["pid"] == redis_pid
        assert "adopted the embedded Redis" in second.log_text()
        helpers = descendants_and_holders(second.proc.pid, str(data))
        second.proc.send_signal(signal.SIGINT)
        assert second.proc.wait(timeout=60) == 0, second.log_text()[-2000:]
        await eventually(lambda: not alive(helpers | {redis_pid}), timeout=10, message="nothing left after a stop")
    finally:
        if second is not None:
            second.close()
        first.close()
        for pid in alive({redis_pid}):  # a failure above must not leave the daemonized Redis behind
            os.kill(pid, signal.SIGKILL)


class DevProcess:
    """``ira dev`` on ``tmp_path/data``, its output in ``tmp_path/<name>.log``."""

    def __init__(self, tmp_path: Path, name: str) -> None:
        self.port, self.log_path = free_port(), tmp_path / f"{name}.log"
        self._log = self.log_path.open("w")
        self.proc = subprocess.Popen([ira_command(), "dev"], cwd=tmp_path, stdout=self._log, stderr=subprocess.STDOUT,
                                     env=env_for(tmp_path, IRA_HTTP_PORT=str(self.port)))

    def log_text(self) -> str:
        return self.log_path.read_text()

    async def ready(self) -> None:
        async def check() -> bool:
            assert self.proc.poll() is None, self.log_text()[-2000:]
            try:
                async with httpx.AsyncClient() as client:
                    return (await client.get(f"http://127.0.0.1:{self.port}/readyz", timeout=2)).status_code == 200
            except httpx.TransportError:
                return False

        await eventually(check, timeout=90, interval=0.25, message="/readyz 200")

    def broker_pid(self) -> int:
        children = descendants_and_holders(self.proc.pid, str(self.log_path.parent / "data"))
        return next(pid for pid in children if "tansu" in _cmd(pid))

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._log.close()


def _cmd(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return ""
