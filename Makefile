# ira — `make run` starts the whole platform on this machine, `make test` runs the suite.
# Both create .venv when it is missing and reinstall only when pyproject.toml changed.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.ira-installed
BENCH_OPS ?= 200
PYTEST_ARGS ?=

.PHONY: run test lint bench faults

run: $(STAMP)
	$(VENV)/bin/ira dev --demo

test: $(STAMP)
	$(PY) -m pytest $(PYTEST_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy ira

# The fault matrix (tests/faults/): every case FAULT_REPETITIONS times against real processes,
# PostgreSQL, Redis and a Tansu broker; prints the table of what held. `make test` runs its
# smoke cases once.
FAULT_REPETITIONS ?= 5

faults: $(STAMP)
	$(PY) -m tests.faults --repetitions $(FAULT_REPETITIONS)

# Smoke-runs every benchmark with a small workload; figures go to stdout as JSON lines.
BENCHES := store sqlite_processes bus steps engine triage noise runs investigate investigation ingest slack storm poison replay idle

bench: $(STAMP)
	@for name in $(BENCHES); do \
	  echo "== bench/$$name.py (--ops $(BENCH_OPS))" >&2; \
	  $(PY) "bench/$$name.py" --ops $(BENCH_OPS) || exit 1; \
	done
	@echo "== bench/ingest.py --pipeline --compare-alertmanager (--ops $(BENCH_OPS))" >&2
	@$(PY) bench/ingest.py --pipeline --compare-alertmanager --ops $(BENCH_OPS)

$(PY):
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null || { \
	  echo "ira needs Python 3.11 or newer, but '$(PYTHON)' is: $$($(PYTHON) --version 2>&1 || echo 'not installed')." >&2; \
	  echo "Install Python 3.11+ and run e.g.: make PYTHON=python3.11 $(MAKECMDGOALS)" >&2; \
	  exit 1; }
	$(PYTHON) -m venv $(VENV) || { \
	  echo "Could not create $(VENV); on Debian/Ubuntu install the venv module: apt-get install python3-venv" >&2; \
	  exit 1; }

# The stamp is older than pyproject.toml exactly when the dependencies may have changed.
$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install --quiet -e '.[dev]'
	@touch $@
