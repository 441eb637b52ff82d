# Two commands do everything on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# setuptools explains editable installs of a flat layout in a boxed UserWarning on every install; keep it quiet.
QUIET_BUILD := PYTHONWARNINGS=ignore::UserWarning

.PHONY: demo up test lint bench install install-dev services compose clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

install: $(BIN)/python  ## the service and its command, nothing for development
	$(QUIET_BUILD) $(BIN)/pip install --quiet -e .

install-dev: $(BIN)/python  ## everything the tests, linters and benchmarks need
	$(QUIET_BUILD) $(BIN)/pip install --quiet -e ".[dev,bench]"

demo: install  ## the main job on the embedded defaults: SQLite, an in-process worker, the bundled emulator
	$(BIN)/plimsoll demo

up: $(BIN)/honcho services  ## the whole service here without Docker: emulator, migrations, API, worker, Flower (Ctrl-C stops)
	VENV=$(VENV) bash scripts/up.sh

$(BIN)/honcho: | $(BIN)/python
	$(QUIET_BUILD) $(BIN)/pip install --quiet -e ".[up]"

services:  ## PostgreSQL and Redis at their local addresses: found, started, or said what is missing
	bash .ci/ensure-services

# tests/test_compose.py has Docker Compose itself validate docker-compose.yml (`config` needs no Docker daemon).
compose:  ## Docker Compose for the tests: found, installed from Debian when run as root, or said what is missing
	@command -v docker-compose >/dev/null || docker compose version >/dev/null 2>&1 \
	|| { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null \
	     && echo "Installing Debian's docker-compose ..." >&2 \
	     && DEBIAN_FRONTEND=noninteractive apt-get update -qq \
	     && DEBIAN_FRONTEND=noninteractive NEEDRESTART_SUSPEND=1 apt-get install -y -qq docker-compose >/dev/null; } \
	|| echo "No Docker Compose here, so tests/test_compose.py will fail: install it (apt-get install docker-compose)." >&2

test: install-dev services compose  ## the whole test suite against real PostgreSQL, Redis and a Celery worker
	$(BIN)/pytest -q

lint: install-dev
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy plimsoll models worker api cli emulator

bench: install-dev  ## the benchmarks, each printing its tables
	$(BIN)/python -m bench.estimator
	$(BIN)/python -m bench.fitting
	$(BIN)/python -m bench.three_failures
	$(BIN)/python -m bench.cost_frontier
	$(BIN)/python -m bench.budget_use
	$(BIN)/python -m bench.chaos --broker both

clean:
	rm -rf $(VENV) var .pytest_cache .mypy_cache .ruff_cache .hypothesis
