"""Settings: the dev defaults of DESIGN.md §10, YAML + environment, and errors that name the key."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from pydantic import ValidationError

from ira.core.alert import SourceKind
from ira.core.errors import ConfigError
from ira.runtime.settings import AccessRole, Settings, load_settings, render_config_template
from ira.runtime.wiring import consumer_settings


@pytest.fixture(autouse=True)
def _empty_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No stray ./ira.yaml from the repository may leak into a test."""
    monkeypatch.chdir(tmp_path)


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def config_error(env: dict[str, str], path: Path | None = None) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        load_settings(env, path)
    return caught.value


def test_dev_defaults_match_the_design_contract() -> None:
    settings = load_settings({})

    assert settings.tenant == "demo"
    assert settings.environment == "prod"
    assert (settings.http.host, settings.http.port) == ("127.0.0.1", 8080)
    assert settings.data_dir == Path(".ira")
    assert settings.database_url == "sqlite:///.ira/ira.db"
    assert (settings.redis_url, settings.kafka_bootstrap, settings.otel_endpoint) == (None, None, None)
    assert (settings.kafka.partitions, settings.kafka.enable_idempotence) == (3, False)
    assert settings.approval_expiry == timedelta(minutes=30)
    assert settings.artifact_max_bytes == 1024 * 1024
    assert settings.faults == frozenset()


def test_dev_sources_have_the_documented_credentials() -> None:
    sources = {s.id: s for s in load_settings({}).sources}

    assert {i: s.kind for i, s in sources.items()} == {
        "am": SourceKind.ALERTMANAGER, "grafana": SourceKind.GRAFANA,
        "generic": SourceKind.GENERIC, "changes": SourceKind.CHANGE,
    }
    bearer = {i: s.bearer_token.get_secret_value() for i, s in sources.items() if s.bearer_token}
    assert bearer == {"am": "dev-am-token", "grafana": "dev-grafana-token", "changes": "dev-change-token"}
    hmac_secret = sources["generic"].hmac_secret
    assert hmac_secret is not None and hmac_secret.get_secret_value() == "dev-generic-secret"
    assert all(s.tenant == "demo" and s.dedupe_window == timedelta(minutes=15) for s in sources.values())


def test_dev_principals_have_the_documented_roles() -> None:
    settings = load_settings({})

    admin, viewer = settings.grant_for_api_token("dev-admin-token"), settings.grant_for_api_token("dev-viewer-token")
    lead = settings.slack_approver("U0DEVLEAD")

    assert admin is not None and (admin.principal, admin.roles) == ("admin", {AccessRole.ADMIN, AccessRole.APPROVER})
    assert viewer is not None and (viewer.principal, viewer.roles) == ("viewer", {AccessRole.VIEWER})
    assert lead is not None and (lead.principal, lead.roles) == ("lead", {AccessRole.APPROVER})
    assert settings.grant_for_api_token("dev-admin-tokeX") is None


def test_the_init_template_loads_to_the_dev_defaults(tmp_path: Path) -> None:
    written = write(tmp_path / "ira.yaml", render_config_template())

    assert load_settings({}, written) == load_settings({})
    assert "#" in render_config_template()  # it is the commented file people edit


def test_yaml_file_then_environment_overrides(tmp_path: Path) -> None:
    path = write(tmp_path / "prod.yaml", """
tenant: acme
http: {port: 9000}
sources:
  - {id: am, kind: alertmanager, bearer_token: a-long-token, dedupe_window: 90s}
runtime: {step_lease: 1m, relay_poll_interval: 500ms}
""")
    env = {"IRA_HTTP_PORT": "9100", "IRA_DATA_DIR": "/var/lib/ira", "IRA_FAULTS": "relay.after_publish, ,x",
           "IRA_ENV": "staging", "IRA_SLACK_BOT_TOKEN": "xoxb-1", "IRA_REDIS_URL": ""}

    settings = load_settings(env, path)

    assert (settings.tenant, settings.http.port, settings.environment) == ("acme", 9100, "staging")
    assert settings.database_url == "sqlite:////var/lib/ira/ira.db"  # follows the data dir
    assert settings.faults == {"relay.after_publish", "x"}
    assert settings.redis_url is None  # an empty variable counts as unset
    assert settings.slack.bot_token is not None and settings.slack.bot_token.get_secret_value() == "xoxb-1"
    source = settings.source("am")
    assert source is not None and (source.tenant, source.dedupe_window) == ("acme", timedelta(seconds=90))
    assert (settings.runtime.step_lease, settings.runtime.relay_poll_interval) == (
        timedelta(minutes=1), timedelta(milliseconds=500))


def test_a_config_file_never_inherits_dev_credentials(tmp_path: Path) -> None:
    settings = load_settings({}, write(tmp_path / "ira.yaml", "tenant: acme\n"))

    assert settings.sources == () and settings.api_tokens == () and settings.slack.approvers == ()


def test_config_file_is_found_by_ira_config_and_in_the_working_directory(tmp_path: Path) -> None:
    write(tmp_path / "ira.yaml", "tenant: here\n")
    other = write(tmp_path / "other.yaml", "tenant: there\n")

    assert load_settings({}).tenant == "here"
    assert load_settings({"IRA_CONFIG": str(other)}).tenant == "there"
    assert config_error({"IRA_CONFIG": str(tmp_path / "missing.yaml")}).key == "IRA_CONFIG"


@pytest.mark.parametrize(
    ("variable", "value", "key"),
    [
        ("IRA_HTTP_PORT", "notaport", "http.port"),
        ("IRA_HTTP_PORT", "70000", "http.port"),
        ("IRA_ENV", "dev", "environment"),
        ("IRA_DATABASE_URL", "mysql://root@127.0.0.1/ira", "database_url"),
        ("IRA_REDIS_URL", "http://127.0.0.1:6379", "redis_url"),
        ("IRA_KAFKA_BOOTSTRAP", "broker-without-port", "kafka_bootstrap"),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "127.0.0.1:4318", "otel_endpoint"),
        ("IRA_LOG_LEVEL", "loud", "log_level"),
    ],
)
def test_invalid_environment_value_names_the_key_and_variable(variable: str, value: str, key: str) -> None:
    error = config_error({variable: value})

    assert error.key == key
    assert variable in error.message


@pytest.mark.parametrize(
    ("yaml_text", "key", "words"),
    [
        ("bogus: 1\n", "bogus", "Extra inputs"),
        ("http: {bogus: 1}\n", "http.bogus", "Extra inputs"),
        ("sources:\n  - {id: a, kind: alertmanager, bearer_token: t}\n  - {id: b, kind: pager, bearer_token: t}\n",
         "sources.1.kind", "alertmanager"),
        ("sources:\n  - {id: a, kind: generic, bearer_token: t, hmac_secret: s}\n", "sources.0", "exactly one"),
        ("sources:\n  - {id: a, kind: generic}\n", "sources.0", "exactly one"),
        ("sources:\n  - {id: a, kind: change, bearer_token: t}\n  - {id: a, kind: change, bearer_token: u}\n",
         "sources", "unique"),
        ("approval_expiry: soon\n", "approval_expiry", "duration"),
        ("approval_expiry: -5m\n", "approval_expiry", ""),
        ("api_tokens:\n  - {token: dev-admin-token, principal: a, roles: [superuser]}\n", "api_tokens.0.roles",
         "admin"),
    ],
)
def test_invalid_yaml_names_the_dotted_key(tmp_path: Path, yaml_text: str, key: str, words: str) -> None:
    error = config_error({}, write(tmp_path / "ira.yaml", yaml_text))

    assert error.key.startswith(key)
    assert words in error.message


def test_unparseable_yaml_names_the_file(tmp_path: Path) -> None:
    path = write(tmp_path / "ira.yaml", "http: [unclosed\n")

    assert config_error({}, path).key == str(path)


def test_a_rejected_credential_is_not_echoed(tmp_path: Path) -> None:
    path = write(tmp_path / "ira.yaml", "api_tokens:\n  - {token: s3cret, principal: a, roles: [viewer]}\n")

    error = config_error({}, path)

    assert error.key == "api_tokens.0.token"
    assert "s3cret" not in str(error)


def test_settings_are_frozen_and_secrets_do_not_print() -> None:
    settings = load_settings({})

    with pytest.raises(ValidationError):
        settings.tenant = "other"  # type: ignore[misc]
    assert "dev-am-token" not in repr(settings)
    assert {"dev-am-token", "dev-generic-secret", "dev-admin-token"} <= settings.secret_values()


def test_database_password_counts_as_a_secret() -> None:
    settings = load_settings({"IRA_DATABASE_URL": "postgresql://ira:pg-pass-1@db:5432/ira"})

    assert "pg-pass-1" in settings.secret_values()
    assert isinstance(settings, Settings)


def test_a_quiet_consumers_fetch_wait_comes_from_the_config_to_every_consumer(tmp_path: Path) -> None:
    """``consumer.idle_fetch_wait`` and ``consumer.idle_after`` reach the runners' settings: the
    coordinator's short-polling consumers take them (its run requests' own wait kept)."""
    assert (load_settings({}).consumer.idle_fetch_wait, load_settings({}).consumer.idle_after) == (
        timedelta(milliseconds=500), timedelta(seconds=10))
    written = write(tmp_path / "ira.yaml", render_config_template().replace(
        "idle_fetch_wait: 500ms", "idle_fetch_wait: 2s").replace("idle_after: 10s", "idle_after: 1m"))
    tuned = consumer_settings(load_settings({}, written), fetch_wait=timedelta(milliseconds=100))
    assert (tuned.fetch_wait, tuned.idle_fetch_wait, tuned.idle_after) == (
        timedelta(milliseconds=100), timedelta(seconds=2), timedelta(minutes=1))
