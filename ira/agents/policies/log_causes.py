"""What a log line says went wrong, and with what: a small lexicon of failure phrases by
cause class, and the entity the line names (a declared dependency, a host, a file system path).

Pure and conservative: a line matches a class only by an explicit failure phrase, so a line
that merely talks about causes ("the root cause is ...", an injected instruction) names none.
The class and entity are data for hypotheses phrased in ira's own words; the line itself is
only ever quoted as evidence.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Cause:
    name: str
    phrases: tuple[str, ...]
    statement: str
    """ira's words; ``{service}`` and ``{entity}`` are filled in."""
    confidence: float


CAUSES: tuple[Cause, ...] = (
    Cause("disk", ("no space left on device", "disk full", "enospc", "disk quota exceeded"),
          "the disk of {service} is full{at_entity}: writes fail with no space left", 0.55),
    Cause("memory", ("out of memory", "outofmemoryerror", "oomkilled", "oom-kill", "cannot allocate memory",
                     "signal 9", "gc overhead"), "{service} is running out of memory (OOM kills, GC pressure)", 0.5),
    Cause("tls", ("x509", "certificate has expired", "certificate verify failed", "tls handshake", "ssl handshake"),
          "TLS to {entity} fails: certificate problem (expired or not valid)", 0.55),
    Cause("dns", ("no such host", "nxdomain", "name or service not known", "name resolution", "could not resolve host",
                  "unknownhostexception", "enotfound", "eai_again", "servfail", "getaddrinfo"),
          "DNS resolution of {entity} fails (lookup errors)", 0.55),
    Cause("pool", ("connection is not available", "pool exhausted", "could not acquire connection",
                   "free connection from pool", "too many connections", "pool timeout"),
          "connection pool exhaustion in {service}: requests time out waiting for a connection{at_entity}", 0.55),
    Cause("timeout", ("timed out", "timeout", "deadline exceeded"),
          "{entity} is timing out: calls from {service} exceed their deadline", 0.45),
    Cause("unreachable", ("connection refused", "connection reset", "unreachable", "no route to host",
                          "broken pipe", "econnrefused", "econnreset", "ehostunreach", "could not be established",
                          "out of available", "may not be available"),
          "{entity} is unreachable or drops connections from {service}", 0.45),
    Cause("crash", ("exception", "panic:", "segmentation fault", "traceback"),
          "new errors in {service} code: {entity}", 0.35),
)
_HOST = re.compile(r"(?<![\w/.-])([a-z][a-z0-9-]*(?:\.[a-z0-9-]+)+)(?::\d+)?")
_PATH = re.compile(r"(?<![\w.])(/[\w.-]+(?:/[\w.-]+)+)")
_EXCEPTION = re.compile(r"\b([A-Z]\w*(?:Exception|Error))\b")
_FILE_SUFFIXES = (".log", ".yaml", ".yml", ".json", ".java", ".py", ".go", ".conf")


_POOL_TROUBLE = ("timeout", "timed out", "exhausted", "full", "limit", "waiting")


def cause_of(message: str) -> Cause | None:
    text = message.lower()
    if "pool" in text and "connection" in text and any(t in text for t in _POOL_TROUBLE):
        return next(c for c in CAUSES if c.name == "pool")  # a connection pool timing out, in any client's words
    return next((c for c in CAUSES if any(p in text for p in c.phrases)), None)


def entity_of(message: str, cause: Cause, *, dependencies: tuple[str, ...]) -> str | None:
    """What the line names: a declared dependency first, then a host, a path (disk) or an exception."""
    text = message.lower()
    named = next((d for d in dependencies if d.lower() in text), None)
    if named:
        return named
    if cause.name == "disk":
        path = _PATH.search(message)
        return path[1] if path else None
    if cause.name == "crash":
        found = _EXCEPTION.search(message)
        return found[1] if found else None
    hosts = [h for h in _HOST.findall(text) if not h.endswith(_FILE_SUFFIXES) and not _qualified_name(h)]
    return hosts[0] if hosts else None


_PACKAGE_ROOTS = ("java.", "javax.", "jdk.", "sun.", "kotlin.", "scala.", "org.", "com.", "io.", "net.")


def _qualified_name(name: str) -> bool:
    """A dotted name that is code, not a host: a package-qualified class (``java.net.UnknownHostException``)
    or module path ending in an exception or error (``sqlalchemy.exc.TimeoutError``, lowered here)."""
    return name.startswith(_PACKAGE_ROOTS) or name.rsplit(".", 1)[-1].endswith(("exception", "error"))


def statement(cause: Cause, *, service: str, entity: str | None) -> str:
    fallback = {"crash": "an error not seen in the baseline"}.get(cause.name, f"a dependency of {service}")
    return cause.statement.format(service=service, entity=entity or fallback,
                                  at_entity=f" ({entity})" if entity else "")
