"""Jira (REST v3) as a TicketSystem: ``POST /rest/api/3/issue``, found again by JQL.

The create request carries both marks of ``mark.py`` itself: the label ``ira-<tag>`` and the
issue entity property ``ira.idempotency`` (``properties`` of the create body), so a create
whose answer was lost leaves an issue that a lookup can find and confirm. The lookup is
``POST /rest/api/3/search/jql`` on ``project = P AND labels = "ira-<tag>"`` asking for that
property; an issue whose property names another tenant or key is not ours.

Fields come from the configuration: project, issue type, priority (the draft's severity
through ``priorities``), labels and components; the body is ADF with a link to the run.
Authentication: basic (account email + API token) or a bearer personal access token.
"""

from __future__ import annotations

import base64
from typing import Any

from ira.connectors.tickets.adf import to_adf
from ira.connectors.tickets.mark import PROPERTY_KEY, IssueMark, key_tag
from ira.connectors.tickets.marked import MarkedTicketSystem, RunLink
from ira.connectors.tickets.remote import RemoteApi
from ira.core.clock import Clock
from ira.core.errors import ConnectorRejectedError
from ira.core.ticket import Ticket, TicketRequest
from ira.runtime.settings.tickets import JiraSettings

SYSTEM = "jira"
SUMMARY_LIMIT = 255


def jira_auth_headers(config: JiraSettings) -> dict[str, str]:
    """Basic with the account email, else bearer (a Data Center personal access token)."""
    token = config.token.get_secret_value()
    if config.user is None:
        return {"Authorization": f"Bearer {token}"}
    return {"Authorization": "Basic " + base64.b64encode(f"{config.user}:{token}".encode()).decode()}


class JiraTicketSystem(MarkedTicketSystem):
    """Issues in one Jira project; the client's base URL is the site (``config.url``)."""

    name = SYSTEM

    def __init__(self, api: RemoteApi, config: JiraSettings, clock: Clock, *, run_link: RunLink | None = None) -> None:
        super().__init__(clock)
        self._api, self._config, self._run_link = api, config, run_link

    async def find_by_key(self, tenant_id: str, idempotency_key: str) -> Ticket | None:
        jql = f'project = "{self._config.project}" AND labels = "{label_of(idempotency_key)}" ORDER BY created ASC'
        response = await self._api.call("POST", "rest/api/3/search/jql", json={
            "jql": jql, "fields": ["summary"], "properties": [PROPERTY_KEY], "maxResults": 50})
        for issue in response.json().get("issues") or []:
            mark = _mark_of(issue)
            if mark is not None and mark.is_for(tenant_id, idempotency_key):
                return mark.ticket(system=SYSTEM, key=issue["key"], title=str(issue["fields"].get("summary", "")),
                                   url=self._browse(issue["key"]))
        return None

    async def _file(self, request: TicketRequest, mark: IssueMark) -> Ticket:
        response = await self._api.call("POST", "rest/api/3/issue", json=self._issue(request, mark),
                                        resend_on_5xx=False)
        key = response.json().get("key")
        if not isinstance(key, str):
            raise ConnectorRejectedError(SYSTEM, "the create answer has no issue key")
        return mark.ticket(system=SYSTEM, key=key, title=_summary(request), url=self._browse(key))

    async def check(self) -> None:
        """``/myself`` answers for these credentials and the project is visible to them."""
        await self._api.call("GET", "rest/api/3/myself")
        await self._api.call("GET", f"rest/api/3/project/{self._config.project}")

    def _issue(self, request: TicketRequest, mark: IssueMark) -> dict[str, Any]:
        c = self._config
        fields: dict[str, Any] = {
            "project": {"key": c.project}, "issuetype": {"name": c.issue_type}, "summary": _summary(request),
            "description": to_adf(request.body, link=self._link(request)),
            "labels": [*c.labels, label_of(mark.idempotency_key)],
        }
        if request.severity in c.priorities:
            fields["priority"] = {"name": c.priorities[request.severity]}
        if c.components:
            fields["components"] = [{"name": name} for name in c.components]
        return {"fields": fields, "properties": [{"key": PROPERTY_KEY, "value": mark.model_dump(mode="json")}]}

    def _link(self, request: TicketRequest) -> tuple[str, str] | None:
        run_id = request.labels.get("run_id")
        url = self._run_link(run_id) if run_id and self._run_link else None
        return (f"ira run {run_id}", url) if run_id and url else None

    def _browse(self, key: str) -> str:
        return f"{self._config.url}browse/{key}"


def label_of(idempotency_key: str) -> str:
    return f"ira-{key_tag(idempotency_key)}"


def _summary(request: TicketRequest) -> str:
    return request.title[:SUMMARY_LIMIT]


def _mark_of(issue: dict[str, Any]) -> IssueMark | None:
    value = (issue.get("properties") or {}).get(PROPERTY_KEY)
    try:
        return IssueMark.model_validate(value) if isinstance(value, dict) else None
    except ValueError:
        return None
