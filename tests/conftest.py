"""Shared fixtures: real services on 127.0.0.1, one isolated namespace per test."""

pytest_plugins = [
    "tests.store_fixtures",
]
