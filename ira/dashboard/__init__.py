"""The dashboard: live web pages for runs, what needs a human, health; and the SSE event stream.

Server-rendered (Jinja2) from the same read models as the JSON API
(``ira.runtime.store.views``); a run page follows its event log live over SSE
(``/v1/runs/{id}/events/stream``, resumable by ``Last-Event-ID``). Decisions on approvals go
through the public API with the page's CSRF token, exactly as any other client would.
"""
