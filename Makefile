# Two commands do everything on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
# Python keeps its compiled modules (__pycache__, ignored by git) and pytest its rewritten tests: where
# PYTHONDONTWRITEBYTECODE is set (this machine sets it), each of the suite's hundreds of processes compiled every
# module of ours again, 2.5 s of every pytest process's start (docs/development.md).
unexport PYTHONDONTWRITEBYTECODE
VENV ?= .venv
BIN := $(VENV)/bin
# setuptools explains editable installs of a flat layout in a boxed UserWarning on every install; keep it quiet.
QUIET_BUILD := PYTHONWARNINGS=ignore::UserWarning
# Every install comes from the lock files (exact versions with their hashes, the build backend included), so
# every machine builds the same program; pyproject.toml keeps the compatible ranges for people who install the
# package. `make lock` rewrites the locks after a change to pyproject.toml; `make upgrade` moves them on.
# pip installs uv alone (requirements/uv.txt), and uv the rest, compiling the bytecode as pip does: a fresh
# `make install-dev` took 18 s here, against 62 s with pip alone (docs/development.md).
PIP_LOCKED := $(BIN)/pip install --quiet --require-hashes --no-deps
UV_LOCKED := $(BIN)/uv pip install --python $(BIN)/python --quiet --require-hashes --no-deps --compile-bytecode
PIP_PROJECT := $(QUIET_BUILD) $(BIN)/pip install --quiet --no-deps --no-build-isolation
COMPILE := $(BIN)/uv pip compile --quiet --universal --python-version 3.11 --generate-hashes \
	--custom-compile-command "make lock"

.PHONY: demo up test check lint docs docs-config bench install install-dev install-up lock upgrade services compose chromium clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(BIN)/uv: $(BIN)/python
	$(PIP_LOCKED) -r requirements/uv.txt

install: $(BIN)/uv  ## the service and its command, nothing for development
	$(UV_LOCKED) -r requirements/service.txt
	$(PIP_PROJECT) -e .

install-dev: $(BIN)/uv  ## everything the tests, linters and benchmarks need
	$(UV_LOCKED) -r requirements/dev.txt
	$(PIP_PROJECT) -e .

lock: install-dev  ## requirements/*.txt from pyproject.toml, keeping every pinned version that still fits
	$(COMPILE) $(UPGRADE) --all-extras pyproject.toml requirements/build.in -o requirements/dev.txt
	$(COMPILE) requirements/uv.in --constraint requirements/dev.txt -o requirements/uv.txt
	$(COMPILE) pyproject.toml requirements/build.in --constraint requirements/dev.txt -o requirements/service.txt
	$(COMPILE) --extra up pyproject.toml requirements/build.in --constraint requirements/dev.txt -o requirements/up.txt

upgrade:  ## every dependency to its newest release, then the whole suite against them; commit the locks if green
	$(MAKE) lock UPGRADE=--upgrade
	git --no-pager diff --stat -- requirements/ || true
	$(MAKE) test

demo: install  ## the main job on the embedded defaults: SQLite, an in-process worker, the bundled emulator
	$(BIN)/plimsoll demo

# exec: no /bin/sh between make and scripts/up.sh, which a Ctrl-C would kill (make: *** Interrupt) before the
# script has said that everything stopped.
up: install-up services  ## the whole service here without Docker: emulator, migrations, API, worker, Flower (Ctrl-C stops)
	VENV=$(VENV) exec bash scripts/up.sh

install-up: $(BIN)/uv  ## the service plus honcho, which runs the Procfile
	$(UV_LOCKED) -r requirements/up.txt
	$(PIP_PROJECT) -e .

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

# tests/test_make_up.py screenshots Flower's task list with headless Chromium (docs/flower-tasks.png).
chromium:  ## headless Chromium for the tests: found, installed from Debian when run as root, or said what is missing
	@command -v chromium >/dev/null || command -v chromium-browser >/dev/null \
	|| { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null \
	     && echo "Installing Debian's chromium ..." >&2 \
	     && DEBIAN_FRONTEND=noninteractive apt-get update -qq \
	     && DEBIAN_FRONTEND=noninteractive DEBCONF_NOWARNINGS=yes NEEDRESTART_SUSPEND=1 apt-get install -y -qq chromium >/dev/null; } \
	|| echo "No Chromium here, so tests/test_make_up.py cannot screenshot Flower: install it (apt-get install chromium)." >&2

# The suite runs in TEST_PROCESSES pytest-xdist workers, each with a Redis database of its own (REDIS_URL in
# testbed/stack.py: PLIMSOLL_TEST_REDIS_URL's and the next ones), then the `serial` tests without xdist. Both
# passes run; either failing fails.
TEST_PROCESSES ?= 3  # more than the 2 cores of CI: much of the suite waits (rate limits, backoffs, workers starting)
PARALLEL := $(BIN)/pytest -q -n $(TEST_PROCESSES) --dist loadgroup

test: install-dev services compose chromium  ## the whole test suite against real PostgreSQL, Redis and Celery workers
	$(PARALLEL) -m "not serial"; parallel=$$?; \
	$(BIN)/pytest -q -m serial; serial=$$?; test $$parallel = 0 && test $$serial = 0

# The quick loop leaves out real workers, benchmark runs, fresh installs and the serial pass (timing goals and
# `make up`), and draws a fifth of each property test's cases (tests/examples.py).
check: install-dev services compose  ## the development loop: the suite but for real workers, benchmarks, installs and timing goals
	$(PARALLEL) -m "not serial and not worker and not bench and not install" --hypothesis-profile=check

lint: install-dev
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(MAKE) docs

# Offline: mkdocs.yml turns off the theme's web fonts and uses no plugin that fetches anything.
docs: install-dev  ## the documentation site from docs/ into site/; strict: a broken link or include fails it
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

docs-config: install-dev  ## docs/configuration.md again, from the settings class (models/settings.py)
	$(BIN)/python scripts/settings_page.py

bench: install-dev  ## the benchmarks, each printing its tables
	$(BIN)/python -m bench.estimator
	$(BIN)/python -m bench.fitting
	$(BIN)/python -m bench.three_failures
	$(BIN)/python -m bench.cost_frontier
	$(BIN)/python -m bench.budget_use
	$(BIN)/python -m bench.compaction
	$(BIN)/python -m bench.storage
	$(BIN)/python -m bench.worker_overhead
	$(BIN)/python -m bench.fleet --write
	$(BIN)/python -m bench.fleet_resilience --write
	$(BIN)/python -m bench.fleet_throughput --write
	$(BIN)/python -m bench.chaos --broker both
	$(BIN)/python -m bench.budgets --write
	$(BIN)/python -m bench.events --write
	$(BIN)/python -m bench.webhooks --write
	$(BIN)/python -m bench.retention --full --write

clean:
	rm -rf $(VENV) var site .pytest_cache .mypy_cache .ruff_cache .hypothesis build plimsoll/_scan.*.so
