"""A fake Jira Cloud (REST v3) with the endpoints ira uses: create issue (with entity
``properties``), JQL search (``project = "X" AND labels = "Y"``), ``/myself`` and
``/project/{key}``. It checks credentials (basic email+token or bearer) and the parts of a
create that Jira itself would refuse: unknown project, missing summary, a description that
is not ADF, labels with spaces."""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from tests.fakes.ticketing import Answer, FakeRequest, FakeTicketApi

_CLAUSE = re.compile(r'(\w+)\s*=\s*"([^"]*)"')


@dataclass
class JiraIssue:
    id: str
    key: str
    fields: dict[str, Any]
    properties: dict[str, Any]
    created: str
    searchable: bool = True


@dataclass
class FakeJira(FakeTicketApi):
    project: str = "OPS"
    user: str | None = "ira@example.com"
    token: str = "jira-secret-token"
    issues: list[JiraIssue] = field(default_factory=list)

    def __post_init__(self) -> None:
        super().__init__()

    def settings(self, url: str) -> dict[str, Any]:
        return {"kind": "jira", "jira": {"url": url, "user": self.user, "token": self.token, "project": self.project,
                                         "backoff": "50ms", "timeout": "5s"}}

    def operation(self, request: FakeRequest) -> str:
        if request.path == "/rest/api/3/issue" and request.method == "POST":
            return "create"
        if request.path == "/rest/api/3/search/jql":
            return "search"
        return request.path.rsplit("/", 1)[-1] if "myself" in request.path else "project"

    def authorized(self, request: FakeRequest) -> bool:
        if self.user is None:
            return request.headers.get("authorization") == f"Bearer {self.token}"
        pair = base64.b64encode(f"{self.user}:{self.token}".encode()).decode()
        return request.headers.get("authorization") == f"Basic {pair}"

    def error(self, status: int, message: str) -> Answer:
        return Answer(status, {"errorMessages": [message], "errors": {}})

    def handle(self, request: FakeRequest) -> Answer:
        op = self.operation(request)
        if op == "create":
            return self._create(request.body)
        if op == "search":
            return self._search(request.body)
        if op == "myself":
            return Answer(200, {"accountId": "5b10a", "emailAddress": self.user, "active": True})
        key = request.path.rsplit("/", 1)[-1]
        if key != self.project:
            return self.error(404, f"No project could be found with key '{key}'.")
        return Answer(200, {"id": "10000", "key": key, "name": "Operations"})

    def _create(self, body: dict[str, Any]) -> Answer:
        fields = body.get("fields") or {}
        problems = _problems(fields, self.project)
        if problems:
            return Answer(400, {"errorMessages": [], "errors": problems})
        number = len(self.issues) + 1
        issue = JiraIssue(id=str(10000 + number), key=f"{self.project}-{number}", fields=fields,
                          properties={p["key"]: p["value"] for p in body.get("properties") or []},
                          created=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.000+0000"),
                          searchable=not self.faults.hide_new)
        self.issues.append(issue)
        return Answer(201, {"id": issue.id, "key": issue.key, "self": f"/rest/api/3/issue/{issue.id}"})

    def _search(self, body: dict[str, Any]) -> Answer:
        jql = str(body.get("jql", "")).split(" ORDER BY ")[0]
        clauses = _CLAUSE.findall(jql)
        if not clauses or len(clauses) != jql.count("="):
            return Answer(400, {"errorMessages": [f"Error in the JQL Query: {jql}"], "errors": {}})
        found = [i for i in self.issues if i.searchable and all(_matches(i, f, v) for f, v in clauses)]
        wanted = body.get("properties") or []
        return Answer(200, {"issues": [
            {"id": i.id, "key": i.key, "fields": {f: i.fields.get(f) for f in body.get("fields") or []},
             "properties": {k: i.properties[k] for k in wanted if k in i.properties}}
            for i in found[: int(body.get("maxResults", 50))]]})


def _matches(issue: JiraIssue, name: str, value: str) -> bool:
    if name == "project":
        return bool(issue.key.startswith(value + "-"))
    if name == "labels":
        return value in (issue.fields.get("labels") or [])
    return False


def _problems(fields: dict[str, Any], project: str) -> dict[str, str]:
    problems = {}
    if (fields.get("project") or {}).get("key") != project:
        problems["project"] = "valid project is required"
    if not fields.get("summary"):
        problems["summary"] = "You must specify a summary of the issue."
    description = fields.get("description")
    if description is not None and (not isinstance(description, dict) or description.get("type") != "doc"):
        problems["description"] = "Operation value must be an Atlassian Document (see the Atlassian Document Format)"
    if any(" " in label for label in fields.get("labels") or []):
        problems["labels"] = "The label can't contain spaces."
    return problems
