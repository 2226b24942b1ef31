"""Shared fixtures: real services on 127.0.0.1, one isolated namespace per test."""

pytest_plugins = [
    "tests.store_fixtures",
]

pytest_plugins.append("tests.kafka_fixtures")  # kafka, private_kafka, bus_env
pytest_plugins.append("tests.redis_fixtures")  # redis_url, redis_prefix
pytest_plugins.append("tests.platform_fixtures")  # platform
