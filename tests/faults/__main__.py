"""``make faults``: every case of the matrix, ``--repetitions`` times, then the table.

    python -m tests.faults [--repetitions 5] [--only CASE ...]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from pathlib import Path

from tests.faults.matrix import CASES, INGEST_LANDED, run_matrix, table


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.faults", description=__doc__)
    parser.add_argument("--repetitions", type=int, default=5)
    parser.add_argument("--only", nargs="*", default=None, help="case names (default: all)")
    args = parser.parse_args()
    cases = tuple(c for c in CASES if args.only is None or c.name in args.only)
    with tempfile.TemporaryDirectory(prefix="ira-faults-") as tmp:
        results = asyncio.run(run_matrix(cases, args.repetitions, Path(tmp),
                                         say=lambda line: print(line, file=sys.stderr, flush=True)))
    print(table(results))
    if not INGEST_LANDED:
        print("\n(ingest rows left out: the store-ack ingest is not on this branch)")
    return 0 if all(r.held for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
