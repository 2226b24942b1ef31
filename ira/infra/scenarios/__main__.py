"""Write every generated scenario as a bundle: ``python -m ira.infra.scenarios OUT_DIR [--variants N]``,
or the held-out worlds of seeds: ``python -m ira.infra.scenarios OUT_DIR --held-out --seed N [--seed M ...]``."""

from __future__ import annotations

import argparse
from pathlib import Path

from ira.infra.scenarios.catalog import SCENARIOS
from ira.infra.scenarios.heldout import held_out
from ira.infra.scenarios.vary import vary
from ira.infra.scenarios.write import write_bundle


def generate(out: Path, *, variants: int = 0) -> list[Path]:
    """The thirteen worlds, each followed by ``variants`` seeded variants of it (other names,
    days, magnitudes, onsets and noise)."""
    written = []
    for make in SCENARIOS:
        base = make()
        for scenario in (base, *(vary(base, seed) for seed in range(1, variants + 1))):
            write_bundle(scenario, out / scenario.bundle_id)
            written.append(out / scenario.bundle_id)
    return written


HELD_OUT_SEEDS = (1, 2, 3)


def generate_held_out(out: Path, *, seeds: tuple[int, ...] = HELD_OUT_SEEDS) -> list[Path]:
    """The thirteen stories retold per seed with names, metrics, wording, times and numbers the rules
    were not written against (:mod:`heldout`)."""
    written = []
    for seed in seeds:
        for scenario in held_out(seed):
            write_bundle(scenario, out / scenario.bundle_id)
            written.append(out / scenario.bundle_id)
    return written


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("out", type=Path, nargs="?", default=Path("scenarios"))
    parser.add_argument("--variants", type=int, default=0, help="seeded variants per scenario")
    parser.add_argument("--held-out", action="store_true", help="the held-out worlds instead (see heldout.py)")
    parser.add_argument("--seed", type=int, action="append", help="held-out seed (repeatable; default 1 2 3)")
    args = parser.parse_args()
    paths = generate_held_out(args.out, seeds=tuple(args.seed or HELD_OUT_SEEDS)) if args.held_out \
        else generate(args.out, variants=args.variants)
    for path in paths:
        print(path)
