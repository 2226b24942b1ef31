"""GitHub Issues as a TicketSystem: ``POST /repos/{owner}/{repo}/issues``, found again by label.

The create request carries the configured labels plus ``ira:<tag>`` and a Markdown body that
ends with the hidden marker ``<!-- ira-idempotency-key: {...} -->`` (``mark.py``). The lookup
lists the repository's issues with that label (``GET /repos/{owner}/{repo}/issues?labels=``,
open and closed) and keeps the one whose marker names this tenant and key. The label filter
of the issues list is used rather than ``/search/issues`` because search is served from an
index that lags behind a create; a lookup right after a lost answer must see the issue.
"""

from __future__ import annotations

from typing import Any

from ira.connectors.tickets.mark import IssueMark, key_tag, parse_marker, render_marker
from ira.connectors.tickets.marked import MarkedTicketSystem, RunLink
from ira.connectors.tickets.remote import RemoteApi
from ira.core.clock import Clock
from ira.core.errors import ConnectorRejectedError
from ira.core.ticket import Ticket, TicketRequest
from ira.runtime.settings.tickets import GitHubSettings

SYSTEM = "github"
PAGE = 100


def github_headers(config: GitHubSettings) -> dict[str, str]:
    return {"Authorization": f"Bearer {config.token.get_secret_value()}",
            "Accept": "application/vnd.github+json", "X-GitHub-Api-Version": "2022-11-28"}


class GitHubTicketSystem(MarkedTicketSystem):
    """Issues in one repository; the client's base URL is the API (``config.api_url``)."""

    name = SYSTEM

    def __init__(self, api: RemoteApi, config: GitHubSettings, clock: Clock, *,
                 run_link: RunLink | None = None) -> None:
        super().__init__(clock)
        self._api, self._config, self._run_link = api, config, run_link

    async def find_by_key(self, tenant_id: str, idempotency_key: str) -> Ticket | None:
        response = await self._api.call("GET", f"repos/{self._config.repo}/issues", params={
            "labels": label_of(idempotency_key), "state": "all", "sort": "created", "direction": "asc",
            "per_page": str(PAGE)})
        for issue in response.json():
            mark = parse_marker(issue.get("body"))
            if mark is not None and mark.is_for(tenant_id, idempotency_key):
                return _ticket(issue, mark)
        return None

    async def _file(self, request: TicketRequest, mark: IssueMark) -> Ticket:
        response = await self._api.call("POST", f"repos/{self._config.repo}/issues", resend_on_5xx=False, json={
            "title": request.title, "body": self._body(request, mark),
            "labels": [*self._config.labels, label_of(mark.idempotency_key)]})
        issue = response.json()
        if not isinstance(issue.get("number"), int):
            raise ConnectorRejectedError(SYSTEM, "the create answer has no issue number")
        return _ticket(issue, mark)

    async def check(self) -> None:
        """``/user`` answers for the token and the repository is visible with issues enabled, and
        the token may set labels: without push access GitHub silently drops the labels of a new
        issue, so ira could never find its issues again by key."""
        await self._api.call("GET", "user")
        repo = (await self._api.call("GET", f"repos/{self._config.repo}")).json()
        if repo.get("has_issues") is False:
            raise ConnectorRejectedError(SYSTEM, f"issues are disabled in {self._config.repo}")
        if (repo.get("permissions") or {}).get("push") is False:
            raise ConnectorRejectedError(SYSTEM, f"the token has no push access to {self._config.repo}: "
                                                 "GitHub would drop the labels ira finds its issues by")

    def _body(self, request: TicketRequest, mark: IssueMark) -> str:
        run_id = request.labels.get("run_id")
        url = self._run_link(run_id) if run_id and self._run_link else None
        link = [f"[ira run {run_id}]({url})", ""] if url else []
        return "\n".join([request.body, "", *link, render_marker(mark)])


def label_of(idempotency_key: str) -> str:
    return f"ira:{key_tag(idempotency_key)}"


def _ticket(issue: dict[str, Any], mark: IssueMark) -> Ticket:
    return mark.ticket(system=SYSTEM, key=f"#{issue['number']}", title=str(issue.get("title", "")),
                       url=issue.get("html_url"))
