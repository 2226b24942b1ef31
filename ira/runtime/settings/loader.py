"""Where the configuration comes from: a YAML file (or the dev defaults), then the environment.

Nothing here reads ``os.environ``: the composition root passes it, tests pass dicts.
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib.resources import files
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from ira.core.errors import ConfigError
from ira.runtime.settings.model import Settings

CONFIG_FILE_ENV = "IRA_CONFIG"
DEFAULT_CONFIG_FILE = Path("ira.yaml")
ENV_KEYS: Mapping[str, str] = {
    "IRA_DATA_DIR": "data_dir",
    "IRA_ENV": "environment",
    "IRA_LOG_LEVEL": "log_level",
    "IRA_LOG_FORMAT": "log_format",
    "IRA_HTTP_HOST": "http.host",
    "IRA_HTTP_PORT": "http.port",
    "IRA_DATABASE_URL": "database_url",
    "IRA_REDIS_URL": "redis_url",
    "IRA_KAFKA_BOOTSTRAP": "kafka_bootstrap",
    "IRA_SLACK_BOT_TOKEN": "slack.bot_token",
    "IRA_SLACK_SIGNING_SECRET": "slack.signing_secret",
    "IRA_SLACK_API_URL": "slack.api_url",
    "IRA_SLACK_CHANNEL": "slack.channel",
    "IRA_SLACK_DASHBOARD_URL": "slack.dashboard_url",
    "OTEL_EXPORTER_OTLP_ENDPOINT": "otel_endpoint",
    "IRA_TRACE_URL": "telemetry.trace_url",
    "IRA_FAULTS": "faults",
    "IRA_INGEST_ACK": "ingest.ack",
    "IRA_INGEST_MAX_ALERTS_PER_REQUEST": "ingest.max_alerts_per_request",
    "IRA_INGEST_ALERTS_PER_SECOND": "ingest.alerts_per_second",
    "IRA_NOTIFIER_WEBHOOK_URL": "notifier.webhook_url",
    "IRA_NOTIFIER_WEBHOOK_SECRET": "notifier.webhook_secret",
    "IRA_TICKETS": "tickets.kind",
    "IRA_JIRA_URL": "tickets.jira.url",
    "IRA_JIRA_USER": "tickets.jira.user",
    "IRA_JIRA_TOKEN": "tickets.jira.token",
    "IRA_JIRA_PROJECT": "tickets.jira.project",
    "IRA_GITHUB_API_URL": "tickets.github.api_url",
    "IRA_GITHUB_TOKEN": "tickets.github.token",
    "IRA_GITHUB_REPO": "tickets.github.repo",
}
"""Environment variable -> dotted settings key (DESIGN.md §10). An empty value counts as unset."""

_SECRET_KEYS = frozenset({"token", "bearer_token", "hmac_secret", "bot_token", "signing_secret", "webhook_secret",
                          "database_url", "redis_url"})
"""Keys whose rejected value is never echoed in an error message (it may be a credential)."""


def render_config_template() -> str:
    """The commented development config that ``ira init`` writes (and ``ira dev`` defaults to)."""
    return files("ira.runtime.settings").joinpath("template.yaml").read_text(encoding="utf-8")


def load_settings(env: Mapping[str, str], path: Path | None = None) -> Settings:
    """The effective configuration: ``path``, ``$IRA_CONFIG``, ``./ira.yaml`` or the dev
    defaults, then the environment on top. Raises ConfigError naming the offending key."""
    data = _read_config(_config_path(env, path))
    origins = _apply_env(data, env)
    try:
        return Settings.model_validate(data)
    except ValidationError as exc:
        raise _config_error(exc, origins) from exc


def _config_path(env: Mapping[str, str], path: Path | None) -> Path | None:
    if path is None and env.get(CONFIG_FILE_ENV):
        path = Path(env[CONFIG_FILE_ENV])
        if not path.is_file():
            raise ConfigError(CONFIG_FILE_ENV, f"no such file: {path}")
    if path is not None and not path.is_file():
        raise ConfigError(str(path), "no such file")
    return path or (DEFAULT_CONFIG_FILE if DEFAULT_CONFIG_FILE.is_file() else None)


def _read_config(path: Path | None) -> dict[str, Any]:
    try:
        text = render_config_template() if path is None else path.read_text(encoding="utf-8")
        data = yaml.safe_load(text)
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(str(path), f"cannot read: {exc}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(str(path), "the file must hold a mapping of keys")
    return data


def _apply_env(data: dict[str, Any], env: Mapping[str, str]) -> dict[str, str]:
    """Write the environment's values into ``data``; returns dotted key -> variable name."""
    origins = {}
    for name, dotted in ENV_KEYS.items():
        if not env.get(name):
            continue
        *parents, leaf = dotted.split(".")
        node = data
        for part in parents:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(part, "must be a mapping")
        value = env[name]
        node[leaf] = [f.strip() for f in value.split(",") if f.strip()] if leaf == "faults" else value
        origins[dotted] = name
    return origins


def _config_error(exc: ValidationError, origins: Mapping[str, str]) -> ConfigError:
    """One ConfigError for the first problem, the others listed in its message."""
    problems = [(".".join(str(p) for p in e["loc"]) or "config", _describe(e)) for e in exc.errors()]
    key, message = problems[0]
    if key in origins:
        message += f" (from {origins[key]})"
    if len(problems) > 1:
        message += "; also " + "; ".join(f"{k}: {m}" for k, m in problems[1:])
    return ConfigError(key, message)


def _describe(error: Mapping[str, Any]) -> str:
    message = str(error["msg"]).removeprefix("Value error, ")
    shown = error.get("input")
    secret = bool(error["loc"]) and error["loc"][-1] in _SECRET_KEYS
    if isinstance(shown, str | int | float) and not secret and error["type"] != "missing" and len(str(shown)) <= 80:
        message += f" (got {shown!r})"
    return message
