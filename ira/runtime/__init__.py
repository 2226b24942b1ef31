"""Plumbing every role shares: the SQL store, the Kafka bus, Redis, the outbox relay, the
scanner, telemetry, settings, process supervision and the ``ira`` CLI.

Knows nothing of alerts, incidents or Slack: roles plug in through the ``ira.roles`` entry
point group and receive a :class:`~ira.runtime.platform.Platform` of ready clients.
"""
