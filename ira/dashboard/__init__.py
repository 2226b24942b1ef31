"""The dashboard: every GET of the API, and the live web pages for the person on call.

Both read through the one read model (:mod:`ira.readmodel`): ``api.py`` serves it as JSON (runs,
events and their SSE stream, report, draft, incidents, tickets, artifacts), ``pages.py``
renders it server-side (Jinja2, autoescaped). A run page follows its event log live over SSE
(resumable by ``Last-Event-ID``). Decisions go through the coordinator's public commands with
the page's CSRF token, exactly as any other client's would.
"""
