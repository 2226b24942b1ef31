"""Outside services the tests need: skip when absent locally, FAIL when absent in CI."""

from __future__ import annotations

import os

import pytest


def require_service(name: str, reason: str) -> None:
    """A missing service skips a test on a laptop but must not pass silently in CI."""
    message = f"{name} is not available: {reason}"
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)
