"""The bounds of what a request may carry: cursors, ids and free text, checked at the edge.

A number or string that reaches SQL unchecked can still break the request after validation:
``after=99999999999999999999999`` is a valid Python int that SQLite cannot bind
(OverflowError) and PostgreSQL refuses for an ``INTEGER`` column; a NUL byte in an id is
refused by PostgreSQL's text type. Each is a 500 that the client caused. So every cursor is
an integer in ``0..MAX_SEQ``, every id a bounded run of printable ASCII, every free text a
bounded string, and anything else is a 422 with the one error shape, decided before a query
runs.

Header values are parsed with :func:`parse_seq`, a strict ASCII-digit parser: ``str.isdigit``
accepts ``"²"`` and other Unicode digits that ``int()`` refuses.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Path, Query

from ira.core.errors import InvalidMessageError

MAX_SEQ = 2**31 - 1
"""The largest ``run_seq`` cursor: the column is a 32-bit ``INTEGER`` on PostgreSQL."""
MAX_ID_LENGTH = 200
ID_PATTERN = r"^[\x21-\x7e]+$"
"""Printable ASCII without spaces: every id ira makes, and no NUL or control bytes."""
MAX_REASON_LENGTH = 4000
"""A person's free text on a command (a decision's or a cancel's reason, a note)."""

SeqCursor = Annotated[int, Query(ge=0, le=MAX_SEQ, description="a run_seq: 0..2^31-1")]
IdPath = Annotated[str, Path(min_length=1, max_length=MAX_ID_LENGTH, pattern=ID_PATTERN)]
IdQuery = Annotated[str | None, Query(min_length=1, max_length=MAX_ID_LENGTH, pattern=ID_PATTERN)]


class InvalidCursorError(InvalidMessageError):
    """A ``run_seq`` cursor that is not an integer in ``0..MAX_SEQ`` (422)."""

    code = "invalid_cursor"


def parse_seq(text: str, *, name: str = "cursor") -> int:
    """``text`` as a run_seq: ASCII digits only, at most ``MAX_SEQ``; InvalidCursorError otherwise."""
    digits = text.strip(" \t")
    if not digits or len(digits) > len(str(MAX_SEQ)) or not (digits.isascii() and digits.isdigit()):
        raise InvalidCursorError(f"{name} must be an integer from 0 to {MAX_SEQ}")
    value = int(digits)
    if value > MAX_SEQ:
        raise InvalidCursorError(f"{name} must be an integer from 0 to {MAX_SEQ}")
    return value
