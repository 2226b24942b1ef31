"""``ira doctor`` checks each configured Jira/GitHub ticket system and says what is wrong in one line."""

from __future__ import annotations

from pathlib import Path

from ira.runtime.process import run_doctor
from ira.runtime.settings import Settings
from ira.runtime.store.database import Database
from ira.runtime.store.migrate import upgrade
from tests.fakes.github import FakeGitHub
from tests.fakes.jira import FakeJira
from tests.serving import serve


async def test_doctor_says_per_tenant_whether_its_ticket_system_works(tmp_path: Path) -> None:
    # Given a migrated database, acme on Jira (right credentials, a project that does not exist),
    # globex on GitHub with a token GitHub does not know, initech on GitHub that works, and
    # hooli on GitHub with a read-only token
    url = f"sqlite:///{tmp_path / 'ira.db'}"
    db = Database.create(url)
    await upgrade(db)
    await db.close()
    jira, github, read_only = FakeJira(), FakeGitHub(), FakeGitHub(push=False)
    async with serve(jira) as jira_url, serve(github) as github_url, serve(read_only) as read_only_url:
        wrong_token = github.settings(github_url)
        wrong_token["github"]["token"] = "ghp_revoked"
        settings = Settings.model_validate({
            "database_url": url, "tenant": "acme",
            "tickets": jira.settings(jira_url) | {"jira": jira.settings(jira_url)["jira"] | {"project": "NOPE"}},
            "tenants": {"globex": {"tickets": wrong_token}, "initech": {"tickets": github.settings(github_url)},
                        "hooli": {"tickets": read_only.settings(read_only_url)}}})
        # When the doctor runs
        lines: list[str] = []
        code = await run_doctor(settings, say=lines.append)
    # Then each ticket system has one line saying what is wrong, and the exit code says so
    by_name = {line.split(")")[0] + ")": line for line in lines if line.startswith("tickets")}
    assert code == 1 and len(by_name) == 4
    assert "FAIL" in by_name["tickets acme (jira)"] and "HTTP 404: No project could be found with key 'NOPE'" \
        in by_name["tickets acme (jira)"]
    assert "HTTP 401: authentication required" in by_name["tickets globex (github)"]
    assert by_name["tickets initech (github)"].endswith(" ok")
    assert "no push access to acme/ops" in by_name["tickets hooli (github)"]
    assert [r.path for r in jira.requests] == ["/rest/api/3/myself", "/rest/api/3/project/NOPE"]
    assert not any("ghp_" in line or jira.token in line for line in lines)
