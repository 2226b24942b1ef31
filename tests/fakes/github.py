"""A fake GitHub REST API with the endpoints ira uses: create an issue, list a repository's
issues filtered by labels (``?labels=a,b&state=all``), ``/user`` and ``/repos/{owner}/{repo}``.
It checks the bearer token, refuses a create without a title (422, GitHub's validation body)
and a label longer than GitHub's 50 characters."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from tests.fakes.ticketing import Answer, FakeRequest, FakeTicketApi

LABEL_LIMIT = 50


@dataclass
class GitHubIssue:
    number: int
    title: str
    body: str
    labels: list[str]
    created_at: str
    searchable: bool = True


@dataclass
class FakeGitHub(FakeTicketApi):
    repo: str = "acme/ops"
    token: str = "ghp_fake_secret_token"
    push: bool = True
    """Whether the token may set labels (GitHub drops them silently otherwise)."""
    issues: list[GitHubIssue] = field(default_factory=list)
    base_url: str = "https://github.example"

    def __post_init__(self) -> None:
        super().__init__()

    def settings(self, url: str) -> dict[str, Any]:
        return {"kind": "github", "github": {"api_url": url, "token": self.token, "repo": self.repo,
                                             "backoff": "50ms", "timeout": "5s"}}

    def operation(self, request: FakeRequest) -> str:
        if request.path == f"/repos/{self.repo}/issues":
            return "create" if request.method == "POST" else "search"
        return "user" if request.path == "/user" else "repo"

    def authorized(self, request: FakeRequest) -> bool:
        return request.headers.get("authorization") == f"Bearer {self.token}"

    def error(self, status: int, message: str) -> Answer:
        return Answer(status, {"message": message, "documentation_url": "https://docs.github.com/rest"})

    def handle(self, request: FakeRequest) -> Answer:
        op = self.operation(request)
        if op == "create":
            return self._create(request.body or {})
        if op == "search":
            wanted = [w for w in request.query.get("labels", "").split(",") if w]
            found = [i for i in self.issues if i.searchable and all(w in i.labels for w in wanted)]
            return Answer(200, [self._view(i) for i in found[: int(request.query.get("per_page", "30"))]])
        if op == "user":
            return Answer(200, {"login": "ira-bot", "id": 1})
        if request.path != f"/repos/{self.repo}":
            return self.error(404, "Not Found")
        return Answer(200, {"full_name": self.repo, "has_issues": True, "permissions": {"push": self.push}})

    def _create(self, body: dict[str, Any]) -> Answer:
        if not body.get("title"):
            return Answer(422, {"message": "Validation Failed",
                                "errors": [{"resource": "Issue", "code": "missing_field", "field": "title"}]})
        labels = [str(name) for name in body.get("labels") or []]
        if any(len(name) > LABEL_LIMIT for name in labels):
            return Answer(422, {"message": "Validation Failed",
                                "errors": [{"resource": "Label", "code": "invalid", "field": "name"}]})
        issue = GitHubIssue(number=len(self.issues) + 1, title=body["title"], body=str(body.get("body") or ""),
                            labels=labels, created_at=datetime.now(UTC).isoformat(timespec="seconds"),
                            searchable=not self.faults.hide_new)
        self.issues.append(issue)
        return Answer(201, self._view(issue))

    def _view(self, issue: GitHubIssue) -> dict[str, Any]:
        return {"number": issue.number, "title": issue.title, "body": issue.body, "state": "open",
                "labels": [{"name": n} for n in issue.labels], "created_at": issue.created_at,
                "html_url": f"{self.base_url}/{self.repo}/issues/{issue.number}"}
