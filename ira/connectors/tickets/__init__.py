"""Ticket systems: the builtin SQL-backed one (the default); Jira and GitHub arrive later."""
