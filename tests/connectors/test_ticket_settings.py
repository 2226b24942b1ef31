"""Choosing a tenant's ticket system: the ``tickets:`` section, ``tenants.<t>.tickets`` and the
environment of DESIGN.md §10; credentials masked in logs, also as the wire's basic-auth form."""

from __future__ import annotations

import base64
import io
import json
import logging
from pathlib import Path

import pytest

from ira.core.errors import ConfigError
from ira.runtime.logs import configure_logging
from ira.runtime.settings import load_settings
from ira.runtime.settings.tickets import GITHUB_PUBLIC_API

JIRA_ENV = {"IRA_TICKETS": "jira", "IRA_JIRA_URL": "https://acme.atlassian.net", "IRA_JIRA_USER": "ira@acme.test",
            "IRA_JIRA_TOKEN": "jira-api-token-1", "IRA_JIRA_PROJECT": "OPS"}


@pytest.fixture(autouse=True)
def _empty_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)


def test_the_default_tenant_files_into_jira_from_the_environment() -> None:
    settings = load_settings(JIRA_ENV)
    tickets = settings.tickets_for("demo")
    assert tickets.kind == "jira" and tickets.jira is not None
    assert (tickets.jira.url, tickets.jira.user, tickets.jira.project) == (
        "https://acme.atlassian.net/", "ira@acme.test", "OPS")
    assert tickets.jira.token.get_secret_value() == "jira-api-token-1"


@pytest.mark.parametrize("api_url", [None, "https://ghe.acme.test/api/v3", "https://ghe.acme.test/api/v3/"])
def test_github_api_url_defaults_to_the_public_api_and_tolerates_a_trailing_slash(api_url: str | None) -> None:
    env = {"IRA_TICKETS": "github", "IRA_GITHUB_TOKEN": "ghp_secret", "IRA_GITHUB_REPO": "acme/ops"}
    github = load_settings(env | ({"IRA_GITHUB_API_URL": api_url} if api_url else {})).tickets_for("demo").github
    assert github is not None and github.repo == "acme/ops"
    assert github.api_url == (GITHUB_PUBLIC_API if api_url is None else "https://ghe.acme.test/api/v3/")


def test_other_tenants_use_their_own_entry_or_builtin_never_the_default_tenants(tmp_path: Path) -> None:
    config = tmp_path / "ira.yaml"
    config.write_text("tenant: acme\ntenants:\n  globex:\n    tickets:\n      kind: github\n"
                      "      github: {token: ghp_globex, repo: globex/incidents}\n")
    settings = load_settings(JIRA_ENV | {"IRA_CONFIG": str(config)})
    assert settings.tickets_for("acme").kind == "jira"
    assert settings.tickets_for("globex").kind == "github"
    assert settings.tickets_for("initech").kind == "builtin"
    assert {"ghp_globex", "jira-api-token-1"} <= settings.secret_values()


@pytest.mark.parametrize(("env", "key"), [
    ({"IRA_TICKETS": "jira"}, "tickets"),
    ({"IRA_TICKETS": "github", "IRA_GITHUB_TOKEN": "t", "IRA_GITHUB_REPO": "not-a-repo"}, "tickets.github.repo"),
    (JIRA_ENV | {"IRA_JIRA_URL": "acme.atlassian.net"}, "tickets.jira.url"),
    ({"IRA_TICKETS": "servicenow"}, "tickets.kind"),
])
def test_an_incomplete_ticket_config_names_its_key(env: dict[str, str], key: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(env)
    assert caught.value.key == key


def test_jira_credentials_are_masked_in_logs_also_as_a_basic_auth_header() -> None:
    settings = load_settings(JIRA_ENV)
    header = base64.b64encode(b"ira@acme.test:jira-api-token-1").decode()
    stream = io.StringIO()
    configure_logging(secrets=settings.secret_values(), stream=stream)
    try:
        logging.getLogger("ira.test").warning("sent Authorization: Basic %s with token %s", header,
                                              "jira-api-token-1")
    finally:
        configure_logging(stream=io.StringIO())
    line = json.loads(stream.getvalue().splitlines()[-1])
    assert header not in line["message"] and "jira-api-token-1" not in line["message"]
