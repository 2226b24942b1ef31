"""Triage: alerts into incidents, with evaluations that say why (DESIGN.md §1 step 2).

Public API:

* :data:`ira.triage.main.role` — the ``triage`` role (consumer of ``ira.alerts.v1``, the
  incidents API, the quiet-incident sweep and the faust noise worker child).
* :class:`ira.triage.worker.TriageHandler` — the inbox handler and the consumer's batch
  hooks (``start`` reads for the whole batch, ``finish`` writes for it).
* :func:`ira.triage.decide.decide`, :func:`ira.core.grouping.group_key`,
  :func:`ira.triage.silence.find_silence` — the pure rules.
* Tables ``alerts``, ``incidents``, ``changes`` (:mod:`ira.triage.tables`; migration
  ``0002_triage``); evaluations in the runtime's ``decisions`` table.
"""
