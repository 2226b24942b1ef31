"""ira: a self-hosted, event-driven incident platform.

Packages are rooms (see DESIGN.md §2): ``core`` is the pure shared language, ``runtime`` the
plumbing every role shares, and the service packages (``sources``, ``triage``, ``coordinator``,
``agents``, ``notifier``, ``dashboard``) talk to each other only through topics and the store.
"""
