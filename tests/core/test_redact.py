"""The one redactor: configured values and secret-shaped text masked, ordinary text left alone."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ira.core import redact
from ira.core.redact import MASK, Redactor

CANARY = "c4n4ry7Qz9Xw"


@pytest.mark.parametrize("text", [
    f"STRIPE_API_KEY=sk_live_{CANARY}",
    f"export STRIPE_API_KEY={CANARY}",
    f"GITHUB_TOKEN={CANARY} next",
    f"WEBHOOK_SECRET: {CANARY}",
    f"DB_PASSWORD={CANARY}",
    f"PASSWORD={CANARY}",
    f"password: {CANARY}",
    f'{{"api_key": "{CANARY}", "user": "x"}}',
    f"{{'client_secret': '{CANARY} with spaces'}}",
    f'"{{\\"api_key\\": \\"{CANARY}\\"}}"',
    f"Authorization: Bearer {CANARY}",
    f"authorization=Basic {CANARY}",
    f"Authorization: {CANARY}",
    f"curl -H 'Bearer {CANARY}'",
    f"key sk_test_{CANARY}",
    f"ghp_{CANARY}{CANARY}",
    f"github_pat_{CANARY}_{CANARY}",
    f"xoxb-1234-{CANARY}",
    f"xoxp-1234-{CANARY}",
    f"xapp-1-{CANARY}",
    f"AKIA{CANARY.upper()[:12]}ABCD",
    f"eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ{CANARY}.{CANARY}sig",
    f"-----BEGIN RSA PRIVATE KEY-----\nMIIE{CANARY}\n-----END RSA PRIVATE KEY-----",
    f"-----BEGIN OPENSSH PRIVATE KEY-----\nb3Bl{CANARY} (cut off)",
    f"postgresql://ira:{CANARY}@db:5432/ira",
])
def test_secret_shaped_text_is_masked(text: str) -> None:
    masked = Redactor().text(text)
    assert CANARY not in masked.upper() and CANARY.upper()[:12] not in masked
    assert MASK in masked


@pytest.mark.parametrize("text", [
    "p99 latency 2.3s on order-service after deploy v2.4.1",
    "idempotency_key=run_1:create_ticket group_key=order-service",
    "input_tokens: 900 max_tokens=1000",
    "sha256:0123456789abcdef0123456789abcdef",
    "HikariPool-1 - Connection is not available, request timed out after 30000ms",
])
def test_ordinary_text_is_left_alone(text: str) -> None:
    assert Redactor().text(text) == text


def test_configured_values_are_masked_longest_first_and_short_ones_ignored() -> None:
    redactor = Redactor(["dev-admin-token", "dev-admin-token-2", "abc"])
    assert redactor.text("a dev-admin-token-2 b dev-admin-token c abc") == f"a {MASK} b {MASK} c abc"


def test_values_keep_their_structure_and_mask_secret_named_keys() -> None:
    data = {"summary": f"STRIPE_API_KEY=sk_live_{CANARY}", "api_key": CANARY, "tokens": 5,
            "idempotency_key": "k-1", "rows": [f"Bearer {CANARY}", 3]}
    masked = Redactor().value(data)
    assert CANARY not in json.dumps(masked)
    assert masked["tokens"] == 5 and masked["idempotency_key"] == "k-1" and masked["rows"][1] == 3
    assert masked["api_key"] == MASK and masked["summary"] == f"STRIPE_API_KEY={MASK}"


def test_masking_twice_changes_nothing() -> None:
    once = Redactor(["dev-am-token"]).text(f"Authorization: Bearer dev-am-token PASSWORD={CANARY}")
    assert Redactor(["dev-am-token"]).text(once) == once


_SECRET_CHARS = st.text(alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./+", min_size=8,
                        max_size=40)
_FORMS = ("STRIPE_API_KEY={s}", "export GITHUB_TOKEN={s}", "DB_PASSWORD: {s}", 'json {{"api_key": "{s}"}}',
          "Authorization: Bearer {s}", "password={s}&next=1", "postgres://u:{s}@h/db", "{s}")


@settings(max_examples=300, deadline=None, derandomize=True)
@given(secret=_SECRET_CHARS, form=st.sampled_from(_FORMS), before=st.text(max_size=30), after=st.text(max_size=30))
def test_a_secret_in_any_surrounding_text_is_masked_and_masking_is_stable(
    secret: str, form: str, before: str, after: str
) -> None:
    """Shape forms mask their value; a bare value is masked because it is configured."""
    redactor = Redactor([secret])
    text = f"{before} {form.format(s=secret)} {after}"
    once = redactor.text(text)
    assert secret not in once
    assert redactor.text(once) == once


@settings(max_examples=300, deadline=None, derandomize=True)
@given(secret=_SECRET_CHARS.filter(lambda s: "/" not in s), form=st.sampled_from(_FORMS[:-1]),
       before=st.text(max_size=30), after=st.text(max_size=30))
def test_a_secret_shaped_assignment_is_masked_without_configuration(
    secret: str, form: str, before: str, after: str
) -> None:
    text = f"{before} {form.format(s=secret)} {after}"
    assert secret not in Redactor().text(text).replace(before, "").replace(after, "")


# The redactor skips a pass only where it cannot match (too short with no "=" or ":", or without
# the literal a costly pattern's every match holds) and memoizes short text: these pin that each
# kind still gets through on its own, with nothing else in the text for another pattern to catch.
@pytest.mark.parametrize("token", [
    f"sk_live_{CANARY}", f"rk_test_{CANARY}", f"pk_live_{CANARY}", f"sk-proj-{CANARY}{CANARY}",
    f"sk-ant-{CANARY}{CANARY}", f"sk-{CANARY}{CANARY}", f"github_pat_{CANARY}{CANARY}",
    *(f"gh{kind}_{CANARY}{CANARY}" for kind in "pousr"), f"glpat-{CANARY}{CANARY}",
    *(f"xox{kind}-{CANARY}" for kind in "abeprs"), f"xapp-{CANARY}", f"AKIA{CANARY.upper()[:12]}ABCD",
    f"ASIA{CANARY.upper()[:12]}ABCD", f"AIza{CANARY}{CANARY}{CANARY[:11]}", f"eyJ{CANARY}.{CANARY}.{CANARY}",
    f"-----BEGIN PRIVATE KEY-----{CANARY}-----END PRIVATE KEY-----",
])
def test_every_token_kind_alone_is_masked(token: str) -> None:
    assert Redactor().text(token) == MASK
    assert Redactor().text(f"seen {token}") == f"seen {MASK}"


@pytest.mark.parametrize(("text", "masked"), [
    ("basic abcdefgh", f"basic {MASK}"),  # 14 characters, no "=" or ":": the shortest scheme
    ("xoxb-abcdefghij", MASK),  # 15: the shortest token
    ("PWD=abcd", f"PWD={MASK}"),
    ("Api-Key:x", f"Api-Key:{MASK}"),
    ("u://a:b@h", f"u://a:{MASK}@h"),
])
def test_the_shortest_secret_shapes_are_masked(text: str, masked: str) -> None:
    assert Redactor().text(text) == masked


def test_every_kind_in_one_string_is_masked_in_order() -> None:
    text = (f"Authorization: Bearer {CANARY}1 STRIPE_API_KEY={CANARY}2 token ghp_{CANARY}3{CANARY} "
            f"then Basic {CANARY}4 at postgres://u:{CANARY}5@db, password: '{CANARY}6'")
    assert Redactor().text(text) == (
        f"Authorization: Bearer {MASK} STRIPE_API_KEY={MASK} token {MASK} "
        f"then Basic {MASK} at postgres://u:{MASK}@db, password: '{MASK}'")


def test_memoized_and_long_text_is_masked_and_configured_values_stay_per_redactor() -> None:
    text = f"title GITHUB_TOKEN={CANARY}"
    assert Redactor().text(text) == Redactor().text(text) == f"title GITHUB_TOKEN={MASK}"
    assert Redactor().text("x" * 5000 + text) == "x" * 5000 + f"title GITHUB_TOKEN={MASK}"
    assert Redactor([CANARY]).text(f"id {CANARY}") == f"id {MASK}"
    assert Redactor().text(f"id {CANARY}") == f"id {CANARY}"


def _every_pass(text: str) -> str:
    """The five passes with no skipping: what the redactor's shortcuts must agree with."""
    text = redact._TOKENS.sub(MASK, text)
    for pattern in (redact._AUTHORIZATION, redact._ASSIGNED, redact._SCHEME, redact._URL_PASSWORD):
        text = pattern.sub(redact._keep_key, text)
    return text


@settings(max_examples=400, deadline=None, derandomize=True)
@given(st.lists(st.sampled_from([
    "Authorization", "authorization:", "Bearer ", "basic ", "://", "u:", "p@", "h/", "=", ": ", "TOKEN",
    "api_key", "sk_live_", "xoxb-", "2026-12-03T12:00:00+00:00", "run_1a2b3c", " ", '"', "'", CANARY,
]), max_size=12).map("".join))
def test_skipped_passes_change_nothing(text: str) -> None:
    """A pass is skipped only where it cannot match: the result is the five passes' own."""
    assert redact._mask_shapes(text) == _every_pass(text)
