"""Every parser of headers, cursors and forms, over arbitrary input: it answers or refuses
with ira's own error, and never raises anything else (which would be a 500)."""

from __future__ import annotations

import contextlib
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from starlette.requests import Request

from ira.core.errors import AuthenticationError, PermissionDeniedError
from ira.dashboard.login import InvalidFormError, client_key, form_field
from ira.runtime.auth import SESSION_COOKIE, bearer_token, csrf_token, is_csrf_valid, session_cookie
from ira.runtime.body import _content_length
from ira.runtime.bounds import MAX_SEQ, InvalidCursorError, parse_seq
from ira.runtime.session import is_cross_site, is_https

LATIN1 = st.binary(max_size=80)
"""A header value as the server hands it on: any bytes (ASGI headers are bytes, decoded latin-1)."""
PARSERS = settings(max_examples=300, derandomize=True, database=None)


def request_with(headers: list[tuple[bytes, bytes]], *, method: str = "POST", scheme: str = "http",
                 client: str = "127.0.0.1") -> Request:
    scope: dict[str, Any] = {"type": "http", "method": method, "path": "/", "headers": headers,
                             "scheme": scheme, "client": (client, 1234), "server": ("127.0.0.1", 80),
                             "query_string": b"", "root_path": ""}
    return Request(scope)


@PARSERS
@given(st.one_of(st.text(max_size=30), st.from_regex(r"\A[0-9]{1,25}\Z"), st.integers(-5, 2**40).map(str)))
def test_a_cursor_is_an_int_in_range_or_invalid_cursor(text: str) -> None:
    try:
        value = parse_seq(text)
    except InvalidCursorError:
        stripped = text.strip(" \t")
        assert not (stripped.isascii() and stripped.isdigit() and int(stripped) <= MAX_SEQ)
        return
    assert 0 <= value <= MAX_SEQ and value == int(text.strip(" \t"))


@PARSERS
@given(st.one_of(st.binary(max_size=200), st.text(max_size=100).map(lambda t: ("token=" + t).encode())))
def test_a_login_form_yields_a_field_or_invalid_form(body: bytes) -> None:
    try:
        token = form_field(body, "token")
    except InvalidFormError:
        return
    assert isinstance(token, str)


@PARSERS
@given(sent=st.text(max_size=80), session=st.text(min_size=1, max_size=80))
def test_a_csrf_header_is_valid_or_not_never_an_error(sent: str, session: str) -> None:
    assert is_csrf_valid(sent, session) == (sent == csrf_token(session))


@PARSERS
@given(origin=LATIN1, host=LATIN1, fetch_site=st.one_of(st.none(), LATIN1), forwarded=LATIN1, peer=st.sampled_from(
    ["127.0.0.1", "10.0.0.1"]))
def test_origin_and_proxy_headers_are_judged_never_an_error(
    origin: bytes, host: bytes, fetch_site: bytes | None, forwarded: bytes, peer: str,
) -> None:
    headers = [(b"origin", origin), (b"host", host), (b"x-forwarded-proto", forwarded),
               (b"x-forwarded-for", forwarded)]
    if fetch_site is not None:
        headers.append((b"sec-fetch-site", fetch_site))
    request = request_with(headers, client=peer)
    assert isinstance(is_cross_site(request), bool)
    assert isinstance(is_https(request, {"127.0.0.1"}), bool)
    assert isinstance(client_key(request, frozenset({"127.0.0.1"})), str)


@PARSERS
@given(authorization=LATIN1, cookie=LATIN1, csrf=LATIN1, method=st.sampled_from(["GET", "POST"]))
def test_credentials_are_read_or_refused_never_an_error(
    authorization: bytes, cookie: bytes, csrf: bytes, method: str,
) -> None:
    request = request_with([(b"authorization", authorization), (b"cookie", SESSION_COOKIE.encode() + b"=" + cookie),
                            (b"x-ira-csrf", csrf)], method=method)
    token = bearer_token(request)
    assert token is None or token
    with contextlib.suppress(AuthenticationError, PermissionDeniedError):
        assert session_cookie(request)


@PARSERS
@given(st.one_of(LATIN1, st.integers(0, 2**70).map(lambda n: str(n).encode())))
def test_a_content_length_is_a_number_or_refused(value: bytes) -> None:
    found = _content_length({"headers": [(b"content-length", value)]})
    assert found is None or (found >= 0 and found == int(value))
