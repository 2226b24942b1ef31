"""Write every generated scenario as a bundle: ``python -m ira.infra.scenarios OUT_DIR``."""

from __future__ import annotations

import sys
from pathlib import Path

from ira.infra.scenarios.catalog import SCENARIOS
from ira.infra.scenarios.write import write_bundle


def generate(out: Path) -> list[Path]:
    written = []
    for make in SCENARIOS:
        scenario = make()
        write_bundle(scenario, out / scenario.bundle_id)
        written.append(out / scenario.bundle_id)
    return written


if __name__ == "__main__":
    for path in generate(Path(sys.argv[1] if len(sys.argv) > 1 else "scenarios")):
        print(path)
