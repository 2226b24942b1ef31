"""A Slack channel per tenant: ``slack.channels`` sends each tenant's notifications to its own
channel (``slack.channel`` is the default), and ``ira doctor`` checks every one of them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ira.core.errors import ConfigError
from ira.runtime.settings import Settings
from ira.runtime.store.database import Database
from tests.coordinator.harness import decision, envelope, run_for_incident
from tests.fakes.slack import BOT_TOKEN, CHANNEL_ID, SIGNING_SECRET, fake_slack
from tests.notifier.slack_rig import slack_rig
from tests.notifier.test_slack_doctor import doctor_lines

ACME, GLOBEX = "C0ACMEINC", "C0GLOBEXINC"


def drafts_in(rig_slack: object, channel: str) -> list[str]:
    """The incident ids of the approval messages posted top-level in ``channel``."""
    posts = rig_slack.top_level(channel)  # type: ignore[attr-defined]
    return [json.dumps(m["blocks"]) for m in posts if (m.get("blocks") or [{}])[0].get("type") == "header"]


async def test_each_tenants_draft_lands_in_its_own_channel(db: Database) -> None:
    async with slack_rig(db, channels={"acme": ACME, "globex": GLOBEX}) as rig:
        globex = decision("globex")
        await rig.pump.decide(envelope(globex))
        await rig.pump.drain()
        await rig.notify()
        acme_run = rig.run_id
        globex_run = await run_for_incident(db, globex.incident_id, tenant="globex")
        in_acme, in_globex = drafts_in(rig.slack, ACME), drafts_in(rig.slack, GLOBEX)
        in_default = rig.slack.posts(CHANNEL_ID)
    assert globex_run is not None
    assert len(in_acme) == 1 and acme_run in in_acme[0] and globex_run.run_id not in in_acme[0]
    assert len(in_globex) == 1 and globex_run.run_id in in_globex[0] and acme_run not in in_globex[0]
    assert in_default == [], "a tenant with its own channel posts nothing to the default one"


async def test_a_tenant_without_its_own_channel_posts_to_the_default(db: Database) -> None:
    async with slack_rig(db, channels={"globex": GLOBEX}) as rig:
        await rig.notify()
        [posted] = rig.approval_posts()
    assert rig.run_id in json.dumps(posted["blocks"]) and rig.slack.posts(GLOBEX) == []


def test_channel_for_a_tenant_falls_back_to_the_default_and_names_are_checked() -> None:
    slack = Settings.model_validate({"slack": {"channel": "#incidents", "channels": {"globex": GLOBEX}}}).slack
    assert (slack.channel_for("globex"), slack.channel_for("acme")) == (GLOBEX, "#incidents")
    assert slack.all_channels() == ("#incidents", GLOBEX)
    with pytest.raises((ConfigError, ValueError)):
        Settings.model_validate({"slack": {"channels": {"Not A Tenant": GLOBEX}}})


async def test_doctor_checks_membership_of_every_tenants_channel(tmp_path: Path) -> None:
    async with fake_slack() as slack:
        slack.messages[GLOBEX] = []  # the channel exists; the bot was never invited

        def settings() -> Settings:
            return Settings.model_validate({"database_url": f"sqlite:///{tmp_path}/ira.db", "slack": {
                "bot_token": BOT_TOKEN, "signing_secret": SIGNING_SECRET, "api_url": slack.url,
                "channel": CHANNEL_ID, "channels": {"globex": GLOBEX}}})

        missing = await doctor_lines(settings())
        slack.members.add(GLOBEX)
        fine = await doctor_lines(settings())
        checked = {c.args.get("channel") for c in slack.calls_of("conversations.info")}
    assert any(line.startswith("slack     FAIL") and "not_in_channel" in line and GLOBEX in line for line in missing)
    assert "slack     ok" in fine
    assert checked == {CHANNEL_ID, GLOBEX}
