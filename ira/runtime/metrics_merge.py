"""One ``/metrics`` for a tree of processes: this process's registry plus the expositions of
its child processes (``ira dev`` runs roles in ``ira worker`` children), merged by family.

Samples with the same name and labels are summed: counters and histograms of several gateway
processes add up to the tree's, and a gauge a role reports (a consumer's lag, its parked
records) comes from the one process that runs that consumer, so the sum is that value.
``_created`` samples keep the earliest time. A family keeps the help and type of whichever
process reported it first (they are the same code).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample


class _Families:
    """What ``generate_latest`` needs: something with ``collect()``."""

    def __init__(self, families: Iterable[Metric]) -> None:
        self._families = list(families)

    def collect(self) -> Iterator[Metric]:
        return iter(self._families)


def merged(own: CollectorRegistry, others: Sequence[str]) -> bytes:
    """``own``'s families with those parsed from ``others`` (Prometheus text), merged."""
    if not others:
        return generate_latest(own)
    families: dict[str, Metric] = {}
    values: dict[str, dict[tuple[str, tuple[tuple[str, str], ...]], Sample]] = {}
    sources: list[Iterable[Metric]] = [own.collect(), *(text_string_to_metric_families(text) for text in others)]
    for source in sources:
        for family in source:
            kept = families.setdefault(family.name, Metric(family.name, family.documentation, family.type,
                                                           family.unit))
            samples = values.setdefault(kept.name, {})
            for sample in family.samples:
                key = (sample.name, tuple(sorted(sample.labels.items())))
                before = samples.get(key)
                if before is None:
                    samples[key] = sample
                elif sample.name.endswith("_created"):
                    samples[key] = before._replace(value=min(before.value, sample.value))
                else:
                    samples[key] = before._replace(value=before.value + sample.value)
    for name, family in families.items():
        family.samples = list(values[name].values())
    return generate_latest(_Families(families.values()))  # type: ignore[arg-type]
