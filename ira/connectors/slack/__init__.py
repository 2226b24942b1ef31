"""Slack: the Web API client (posting, updating, finding earlier posts), Block Kit rendering,
and verification of Slack's signed interaction requests."""
