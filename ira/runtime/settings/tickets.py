"""The ``tickets:`` section: which ticket system a tenant files into, and how to reach it.

``tickets:`` at the top level is the default tenant's (the environment sets it: ``IRA_TICKETS``,
``IRA_JIRA_*``, ``IRA_GITHUB_*``); another tenant files into ``tenants.<name>.tickets`` or,
without one, into the builtin service. Never into the default tenant's project: a Jira project
or GitHub repository is named per tenant, so one tenant's incidents cannot land in another's.

Credentials are ``SecretStr``; ``auth_header_secrets`` adds the forms they take on the wire
(a basic-auth header is base64 of ``user:token``), so the log filter masks those too.
"""

from __future__ import annotations

import base64
from datetime import timedelta
from typing import Literal

from pydantic import Field, SecretStr, field_validator, model_validator

from ira.runtime.settings.section import Duration, Section

GITHUB_PUBLIC_API = "https://api.github.com/"
DEFAULT_PRIORITIES = {"critical": "Highest", "error": "High", "warning": "Medium", "info": "Low"}


def _http_url(value: str) -> str:
    if not value.startswith(("http://", "https://")):
        raise ValueError("must be an http:// or https:// URL")
    return value.rstrip("/") + "/"


class RemoteCallSettings(Section):
    """How patiently a ticket connector talks to its API."""

    timeout: Duration = timedelta(seconds=10)
    max_attempts: int = Field(default=4, ge=1, le=10)
    """Tries per call when the answer is 429 (or 5xx for a lookup)."""
    backoff: Duration = timedelta(milliseconds=500)
    """First retry delay without a ``Retry-After``; doubles per attempt."""
    max_retry_wait: Duration = timedelta(seconds=60)
    """A ``Retry-After`` longer than this is not waited out in-process: the call fails retryable."""


class JiraSettings(RemoteCallSettings):
    """Jira Cloud or Data Center, REST v3."""

    url: str
    """The site, e.g. ``https://acme.atlassian.net``."""
    user: str | None = None
    """The account's email: basic auth with ``token`` (an API token). None: ``token`` is a bearer PAT."""
    token: SecretStr
    project: str = Field(min_length=1)
    issue_type: str = "Task"
    priorities: dict[str, str] = Field(default_factory=lambda: dict(DEFAULT_PRIORITIES))
    """Draft severity -> Jira priority name; a severity not listed sends no priority."""
    labels: tuple[str, ...] = ("ira",)
    components: tuple[str, ...] = ()

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        return _http_url(value)


class GitHubSettings(RemoteCallSettings):
    """GitHub Issues (github.com or Enterprise Server)."""

    api_url: str = GITHUB_PUBLIC_API
    """With or without the trailing slash."""
    token: SecretStr
    repo: str = Field(pattern=r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")
    """``owner/name``."""
    labels: tuple[str, ...] = ("ira",)

    @field_validator("api_url")
    @classmethod
    def _url(cls, value: str) -> str:
        return _http_url(value)


class TicketsSettings(Section):
    """``kind`` picks the system; only its own section needs to be filled in."""

    kind: Literal["builtin", "jira", "github"] = "builtin"
    jira: JiraSettings | None = None
    github: GitHubSettings | None = None
    dashboard_url: str | None = None
    """Base of the run link written into each issue (``<dashboard_url>/runs/<run_id>``); None: no link."""

    @model_validator(mode="after")
    def _configured(self) -> TicketsSettings:
        if self.kind != "builtin" and getattr(self, self.kind) is None:
            raise ValueError(f"kind {self.kind} needs the {self.kind} section (url, token, ...)")
        return self

    def auth_header_secrets(self) -> frozenset[str]:
        """Credentials as they appear on the wire, beyond the raw token (for the log filter)."""
        if self.kind != "jira" or self.jira is None or self.jira.user is None:
            return frozenset()
        pair = f"{self.jira.user}:{self.jira.token.get_secret_value()}".encode()
        return frozenset({base64.b64encode(pair).decode()})


class TenantSettings(Section):
    """What one tenant configures apart from the default tenant."""

    tickets: TicketsSettings = TicketsSettings()
