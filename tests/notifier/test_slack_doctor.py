"""``ira doctor`` probes Slack when it is configured: the bot token and the channel membership."""

from __future__ import annotations

from pathlib import Path

import httpx

from ira.runtime.http import create_app
from ira.runtime.platform import Platform
from ira.runtime.process import run_doctor
from ira.runtime.settings import Settings
from tests.fakes.slack import BOT_TOKEN, SIGNING_SECRET, fake_slack


def settings(tmp_path: Path, api_url: str, *, token: str = BOT_TOKEN, channel: str = "#incidents") -> Settings:
    return Settings.model_validate({
        "database_url": f"sqlite:///{tmp_path}/ira.db", "slack": {
            "bot_token": token, "signing_secret": SIGNING_SECRET, "api_url": api_url, "channel": channel}})


async def doctor_lines(s: Settings) -> list[str]:
    lines: list[str] = []
    await run_doctor(s, say=lines.append)
    return lines


async def test_doctor_says_slack_is_ok_when_the_bot_is_in_the_channel(tmp_path: Path) -> None:
    async with fake_slack() as slack:
        lines = await doctor_lines(settings(tmp_path, slack.url))
        methods = [c.method for c in slack.calls]
    assert "slack     ok" in lines
    assert methods[:1] == ["auth.test"] and "conversations.info" in methods


async def test_doctor_names_a_bad_token_and_a_missing_membership(tmp_path: Path) -> None:
    async with fake_slack() as slack:
        bad_token = await doctor_lines(settings(tmp_path, slack.url, token="xoxb-wrong"))
        slack.members.clear()
        not_member = await doctor_lines(settings(tmp_path, slack.url))
    assert any(line.startswith("slack     FAIL") and "invalid_auth" in line for line in bad_token)
    assert any(line.startswith("slack     FAIL") and "not_in_channel" in line for line in not_member)


async def test_doctor_leaves_slack_alone_when_it_is_not_configured(tmp_path: Path) -> None:
    lines = await doctor_lines(Settings.model_validate({"database_url": f"sqlite:///{tmp_path}/ira.db"}))
    assert not any(line.startswith("slack") for line in lines)


async def test_without_slack_the_interactions_route_is_absent(platform: Platform) -> None:
    """With no bot token and signing secret (the default), `make run` has no Slack at all."""
    from ira.coordinator.main import role as coordinator
    from ira.notifier.main import build_slack_channel

    app = create_app(metrics=platform.metrics, routers=list(coordinator.routers(platform)))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://ira") as client:
        answer = await client.post("/slack/interactions", content=b"payload=%7B%7D")
    assert not platform.settings.slack.enabled and build_slack_channel(platform) is None
    assert answer.status_code == 404
