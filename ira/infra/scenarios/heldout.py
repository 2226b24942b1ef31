"""Held-out incidents: the thirteen stories retold with nothing the rules were written against.

``vary`` keeps each world's log lines and metric names and swaps names from a pool the rules
were tuned next to. A held-out world (``python -m ira.infra.scenarios --held-out --seed N``)
changes everything that could have been fitted: service and dependency names from a pool no
rule or written scenario uses, other versions, dates two years on, other magnitudes, onsets and
noise, another variant of each metric family where the catalog has one (``process_*`` instead of
``container_*``, HikariCP instead of the DB pool), exporter metrics no rule knows beside them,
and every log line, the background noise included, phrased the way another runtime (Go, Java,
Python, Node, PostgreSQL, Redis, Kafka clients) would say it. The phrasings were written from
those runtimes' real messages before the rules were measured on them, not from the rules.
"""

from __future__ import annotations

import dataclasses
import random
import re
from datetime import UTC, datetime

from ira.agents.policies.signals import CATALOG
from ira.infra.scenarios.catalog import SCENARIOS
from ira.infra.scenarios.runbook import injection
from ira.infra.scenarios.vary import _rename
from ira.infra.scenarios.world import Curve, Expected, LogStream, Scenario

POOL = ("alder", "basalt", "caldera", "dune", "estuary", "fennel", "glacier", "heron", "ibex", "jacaranda",
        "kestrel", "larch", "marlin", "nettle", "osprey", "pumice", "quokka", "rowan", "saffron", "thistle",
        "umber", "vireo", "wombat", "yarrow", "zircon")
"""No rule, test or written scenario names any of these."""
ROLES = ("api", "svc", "worker", "edge", "core", "sync", "engine", "proxy")
STORES = ("db", "pg", "mysql", "store", "cache", "redis", "broker", "queue")
EXTRA_METRICS = ("jvm_memory_used_bytes", "jvm_threads_live_threads", "go_goroutines", "go_memstats_heap_inuse_bytes",
                 "grpc_server_handled_total", "nodejs_eventloop_lag_seconds", "python_gc_collections_total")
"""Exporter metrics a held-out world also has; no catalog signal asks for them (they must not confuse it)."""

PHRASES: dict[str, tuple[str, ...]] = {
    "bad_deploy": (
        "panic: runtime error: invalid memory address or nil pointer dereference [signal SIGSEGV] in handler {n}",
        "TypeError: Cannot read properties of undefined (reading 'amount') at /app/dist/order.js:{n}",
        "ValueError: invalid literal for int() with base 10: 'None' while handling request {id}"),
    "dependency_timeout": (
        "java.net.SocketTimeoutException: Read timed out (calling http://{dep}:8080/api/v2/quote/{n})",
        "rpc error: code = DeadlineExceeded desc = context deadline exceeded calling {dep}.prod.svc.cluster.local:9090",
        "requests.exceptions.ReadTimeout: HTTPConnectionPool(host='{dep}', port=80): Read timed out. "
        "(read timeout=2)"),
    "memory_leak_oom": (
        "java.lang.OutOfMemoryError: Java heap space",
        "fatal error: runtime: out of memory",
        "Memory cgroup out of memory: Killed process {n} ({svc}) total-vm:4194304kB, anon-rss:2097152kB"),
    "disk_full": (
        "ENOSPC: no space left on device, write '/data/spool/{n}.tmp'",
        "OSError: [Errno 28] No space left on device: '/var/lib/{svc}/segments/{n}.seg'",
        'could not extend file "base/16384/{n}": No space left on device'),
    "cpu_saturation": (
        "worker pool saturated: {n} tasks queued, 0 idle workers",
        "event loop blocked for {ms}ms, handlers falling behind",
        "thread starvation or clock leap detected (housekeeper delta={ms}ms)"),
    "pool_exhaustion": (
        "sqlalchemy.exc.TimeoutError: QueuePool limit of size 10 overflow 5 reached, connection timed out, "
        "timeout 30.00",
        "KnexTimeoutError: Knex: Timeout acquiring a connection. The pool is probably full.",
        "Cannot get a connection, pool error Timeout waiting for idle object"),
    "config_change_hours_earlier": (
        "sqlalchemy.exc.TimeoutError: QueuePool limit of size 4 overflow 0 reached, connection timed out, "
        "timeout 30.00",
        "Timeout acquiring a connection. The pool is probably full. (pool {dep})",
        "Cannot get a connection, pool error Timeout waiting for idle object (pool {dep})"),
    "certificate_expiry": (
        "SSLError: [SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: certificate has expired (_ssl.c:1006)",
        "javax.net.ssl.SSLHandshakeException: PKIX path validation failed: "
        "java.security.cert.CertificateExpiredException: NotAfter: Mon Jan 01 00:00:00 UTC 2029",
        "Error: certificate has expired (CERT_HAS_EXPIRED) connecting to {dep}.partner.example:443"),
    "dns_failure": (
        "getaddrinfo ENOTFOUND {dep}.prod.svc.cluster.local",
        "java.net.UnknownHostException: {dep}.internal: Name or service not known",
        "socket.gaierror: [Errno -3] Temporary failure in name resolution (host {dep})"),
    "batch_job_shared_db": (
        "psycopg2.errors.QueryCanceled: canceling statement due to statement timeout (host={dep})",
        "MySQLTimeoutException: Statement cancelled due to timeout or client request (datasource {dep})",
        "ERROR: canceling statement due to statement timeout on {dep} (query {id})"),
    "conflicting_evidence": (
        "redis.exceptions.TimeoutError: Timeout reading from {dep}:6379",
        "io.lettuce.core.RedisCommandTimeoutException: Command timed out after 2 second(s) ({dep}:6379)",
        "ETIMEDOUT reading from {dep}:6379 after {ms}ms"),
    "recurring_rising_failure": (
        "Connection to node 2 ({dep}.internal/10.2.3.4:9092) could not be established. Broker may not be available.",
        "read tcp 10.1.2.3:51712->{dep}:9092: read: connection reset by peer",
        "kafka: client has run out of available brokers to talk to ({dep}:9092): EOF"),
}
"""Each story's tell-tale error, as other runtimes phrase it (``{dep}``: the dependency it names)."""

NOISE = ("GET /healthz took {ms}ms (slow)", "retrying metrics push to collector ({n} samples buffered)",
         "deprecated config key 'server.legacy_mode' ignored")
"""Background warnings every held-out service logs all window."""

CITE: dict[str, tuple[str, ...]] = {
    "memory_leak_oom": (r"memory|OOM|heap",),
    "disk_full": (r"disk|space",),
    "certificate_expiry": (r"certificate|x509|SSL|CERT",),
    "dns_failure": (r"ENOTFOUND|UnknownHost|name or service|name resolution|no such host",),
    "cpu_saturation": (r"CPU",),
    "pool_exhaustion": (r"pool",),
    "config_change_hours_earlier": (r"config|change", r"pool"),
}
"""What must be cited where the written scenario's wording was its own log line's."""
CAUSE: dict[str, tuple[str, ...]] = {
    "dependency_timeout": (r"tim(e|ing)[ -]?out|deadline|slow|latenc",),
    "memory_leak_oom": (r"memory|OOM|heap",),
    "disk_full": (r"disk|space",),
    "certificate_expiry": (r"certificate|x509|TLS|SSL|cert",),
    "dns_failure": (r"DNS|resol|lookup|name",),
}
"""Cause patterns widened the same way (the dependency's name is added where the story has one)."""


def held_out(seed: int) -> list[Scenario]:
    """The thirteen stories retold for ``seed``: deterministic, and different for every seed."""
    return [retell(make(), seed) for make in SCENARIOS]


def retell(s: Scenario, seed: int) -> Scenario:
    rng = random.Random(f"held-out:{s.kind}:{seed}")
    names = _names(s, rng)
    versions = {v: f"{rng.randint(1, 30)}.{rng.randint(0, 40)}.{rng.randint(0, 20)}"
                for v in {*(v for v, _ in s.versions), *(c.version for c in s.changes if c.version),
                          *([s.version] if s.version else [])}}
    spread, shift, noise = rng.uniform(0.75, 1.5), rng.uniform(-3.0, 3.0), rng.uniform(0.5, 2.0)
    service = names[s.service]
    alert = _camel(service) + rng.choice(("Degraded", "SloBurn", "Slow", "Failing", "Alert"))
    phrase = rng.choice(PHRASES.get(s.kind, ("",)))
    dep = names[s.dependencies[0]] if s.dependencies else service

    def text(value: str) -> str:
        for old, new in versions.items():
            value = value.replace(re.escape(old), re.escape(new)).replace(old, new)
        return _rename(value, names).replace(s.alert_name, alert)

    metrics = {}
    for (svc, key), curve in s.metrics.items():
        other = _variant(key, rng)
        metrics[(names.get(svc, svc), other)] = _scaled(key, other, curve, spread, shift, noise)
    return dataclasses.replace(
        s, bundle_id=f"HO-{s.kind}-s{seed}", service=service, alert_name=alert, summary=text(s.summary),
        description=text(s.description), team=rng.choice(("core", "sre", "growth", "data", "edge")),
        alert_at=datetime(2028 + rng.randint(0, 2), rng.randint(1, 12), rng.randint(1, 28), rng.randint(0, 23),
                          rng.randint(0, 59), rng.randint(0, 59), tzinfo=UTC),
        version=versions.get(s.version) if s.version else None,
        dependencies=tuple(names[d] for d in s.dependencies), metrics=metrics,
        extra_metrics=tuple(rng.sample(EXTRA_METRICS, 3)),
        versions=tuple((versions[v], m + shift) for v, m in s.versions),
        logs=_logs(s, rng, phrase=phrase, service=service, dep=dep, shift=shift),
        changes=[dataclasses.replace(c, minute=c.minute + shift, version=versions.get(c.version or "", c.version),
                                     description=text(c.description),
                                     service=names.get(c.service, c.service) if c.service else None)
                 for c in s.changes],
        runbooks={name: text(book) for name, book in s.runbooks.items()},
        expected=_expected(s, text, dep=dep if s.dependencies else None))


def _names(s: Scenario, rng: random.Random) -> dict[str, str]:
    pool = list(POOL)
    rng.shuffle(pool)
    found = {s.service: f"{pool[0]}-{rng.choice(ROLES)}"}
    for i, d in enumerate(s.dependencies, start=1):
        tail = d.split("-")[-1]
        found[d] = f"{pool[i]}-{tail}" if tail.isdigit() else f"{pool[i]}-{rng.choice(STORES + ROLES)}"
    return found


def _camel(service: str) -> str:
    return "".join(part.capitalize() for part in service.split("-"))


FAMILIES: dict[str, list[str]] = {}
for _sig in CATALOG:
    FAMILIES.setdefault(_sig.family, []).append(f"{_sig.family}:{_sig.needs[0]}")


def _variant(key: str, rng: random.Random) -> str:
    """Another catalog variant of the same family, when there is one (RED keys stay)."""
    family = key.split(":", 1)[0]
    options = FAMILIES.get(family, [])
    if len(options) < 2:
        return key
    return random.Random(f"{key}:{rng.random()}").choice(options)


UNIT_SCALE = {"bytes": 2.0e9, "cores": 4.0, "count": 1.0, "s": 1.0, "/s": 1.0, "ratio": 1.0, "": 1.0}


def _unit(key: str) -> str:
    family, _, needs = key.partition(":")
    for sig in CATALOG:
        if sig.family == family and (not needs or sig.needs[0] == needs):
            return sig.unit
    return ""


def _scaled(old: str, new: str, c: Curve, spread: float, shift: float, noise: float) -> Curve:
    """The same shape in the new variant's unit, another magnitude, onset and noise."""
    factor = UNIT_SCALE.get(_unit(new), 1.0) / UNIT_SCALE.get(_unit(old), 1.0) if old != new else 1.0
    onset = None if c.onset is None else c.onset + shift
    if c.shape in ("flap", "counter") or c.peak is None:
        return dataclasses.replace(c, base=c.base * factor, peak=None if c.peak is None else c.peak * factor,
                                   onset=onset, noise=c.noise * noise)
    peak = c.base + (c.peak - c.base) * spread
    if _unit(new) == "ratio" and c.peak <= 1.05:
        peak = min(peak, max(c.peak, 1.0))
    return dataclasses.replace(c, base=c.base * factor, peak=peak * factor, onset=onset, noise=c.noise * noise)


def _logs(s: Scenario, rng: random.Random, *, phrase: str, service: str, dep: str, shift: float) -> list[LogStream]:
    """The story's error lines in another runtime's words; the noise replaced; the injection kept."""
    found = [LogStream("warning", n.replace("{svc}", service), rng.uniform(0.3, 2.0)) for n in NOISE]
    found += [dataclasses.replace(x, template=injection(rng)) for x in s.logs[:NOISE_STREAMS] if x.level == "error"]
    story = s.logs[NOISE_STREAMS:]
    wording = phrase.replace("{dep}", dep).replace("{svc}", service)
    has_error = any(x.level == "error" for x in story)
    for x in story:
        if phrase and (x.level == "error" or not has_error):
            since = x.since + shift if x.since > -60 else x.since
            until = x.until + shift if x.until < 10 else x.until
            found.append(LogStream(x.level, wording, x.per_minute * rng.uniform(0.6, 1.6), since=since, until=until))
            has_error = has_error or x.level != "error"  # one warning stream is enough for a story without errors
        # the written world's other lines (GC pauses, deferred compactions...) are its own wording: dropped
    return found


NOISE_STREAMS = 3
"""``catalog._base`` puts two background warnings and the injected instruction first."""


def _expected(s: Scenario, text, *, dep: str | None) -> Expected:  # type: ignore[no-untyped-def]
    e = s.expected
    cause = tuple(text(p) for p in e.cause)
    if s.kind in CAUSE:
        cause = CAUSE[s.kind] + ((re.escape(dep),) if dep and s.kind in ("dependency_timeout", "dns_failure") else ())
    cite = CITE.get(s.kind) or tuple(text(p) for p in e.cite)
    if s.kind in ("bad_deploy", "conflicting_evidence"):
        cite = (r"deploy",)
    return Expected(cause=cause, cite=cite, outcome=e.outcome, rival=tuple(text(p) for p in e.rival))
