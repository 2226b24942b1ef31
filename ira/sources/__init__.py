"""sources: the webhook edge (DESIGN.md §1 step 1).

Receivers for Alertmanager, Grafana, the generic signed schema and change events, each
normalized into core's events with a stable identity; edge dedupe and rate limits in Redis;
every accepted event produced to ``ira.alerts.v1`` before the sender hears 202.

* ``main``       the role (``routers``, ``run``) and ``build_lane``: the only wiring
* ``api``        the HTTP endpoint (a lane ahead of FastAPI) and the status of every refusal
* ``ingest``     the use-case: authenticate, normalize, dedupe, produce, all or nothing
* ``auth``       bearer tokens and HMAC signatures (``sign`` for senders)
* ``dedupe``, ``ratelimit``  Redis marks and the rate counter, one Redis call per request
* ``alertmanager``, ``grafana``, ``generic``, ``change``  payload models + pure normalizers
* ``identity``, ``labels``, ``context``, ``payload``  the pure pieces they share
"""
