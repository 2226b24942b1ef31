"""Write every generated scenario as a bundle: ``python -m ira.infra.scenarios OUT_DIR [--variants N]``."""

from __future__ import annotations

import argparse
from pathlib import Path

from ira.infra.scenarios.catalog import SCENARIOS
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


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("out", type=Path, nargs="?", default=Path("scenarios"))
    parser.add_argument("--variants", type=int, default=0, help="seeded variants per scenario")
    args = parser.parse_args()
    for path in generate(args.out, variants=args.variants):
        print(path)
