# The two commands a newcomer needs:
#   make run   - set up and run the whole system on its embedded default
#   make test  - set up and run the test suite against PostgreSQL and Redis
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

# Test services (started by tests/ensure-services.sh when they are not running).
TEST_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/gpurenthub
TEST_REDIS_URL ?= redis://127.0.0.1:6379
PYTEST_ARGS ?=
# Parallel pytest-xdist workers, each with its own test database, Redis databases
# (config/settings_test.py) and chain nodes; 0 runs the tests in this one process.
TEST_WORKERS ?= 2

# Translation catalogs: the committed .po files compile to .mo files (build output,
# not committed) with Babel, so no GNU gettext is needed to build.
PO_FILES := $(wildcard */locale/*/LC_MESSAGES/*.po)
MO_FILES := $(PO_FILES:.po=.mo)

.PHONY: run test install lock check lint clean services chain-nodes browser nginx promtool messages screenshots bench test-django-newest test-matrix

# requirements.lock is the whole resolved set (make lock), so pip installs it as listed
# (--no-deps: nothing to resolve) and `pip check` then proves nothing is missing; modules
# are compiled to bytecode when first imported rather than all at install (--no-compile):
# on the 2-core machine a fresh install takes about 42 s instead of 129 s.
$(STAMP): requirements.lock pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check --upgrade pip
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps --no-compile -r requirements.lock
	$(PY) -m pip check
	@touch $(STAMP)

%.mo: %.po $(STAMP)
	$(VENV)/bin/pybabel compile --statistics -i $< -o $@

messages: $(MO_FILES)

install: $(STAMP) $(MO_FILES)

# The sandbox's nodes (litecoind, anvil, monerod) are installed when they can be; without them make run
# still runs, with the loopback Solana node alone to pay into. The server answers once LTC and SOL are
# up; ETH and XMR join when ready. SANDBOX_OFF=XMR make run leaves XMR out (about 630 MB less).
run: install
	@bash tests/ensure-chain-nodes.sh || echo "make run: no sandbox nodes (see above); running without them"
	DEBUG=$${DEBUG:-1} $(PY) manage.py serve_local

services:
	@bash tests/ensure-services.sh

# Chain nodes the chain tests start (litecoind in regtest).
chain-nodes:
	@bash tests/ensure-chain-nodes.sh

# Debian's Chromium and its WebDriver for the browser tests (tests/browser.py).
browser:
	@bash tests/ensure-browser.sh

# Debian's nginx for tests/deploy/test_nginx.py, which runs deploy/'s site file in front of gunicorn.
nginx:
	@bash tests/deploy/ensure-nginx.sh

# Debian's prometheus package for its promtool: tests/observability/test_alerts.py checks and
# unit-tests deploy/prometheus/alerts.yml with it.
promtool:
	@bash tests/observability/ensure-promtool.sh

test: install services chain-nodes browser nginx promtool
	DATABASE_URL=$(TEST_DATABASE_URL) TEST_REDIS_URL=$(TEST_REDIS_URL) \
	  $(PY) -m pytest -n $(TEST_WORKERS) --dist worksteal $(PYTEST_ARGS)

# The same suite on the newest Django release (requirements-django-newest.txt) beside the pinned
# LTS that make test runs: a second virtual environment, .venv-django-newest, on a Python 3.12 or
# later (tests/ensure-newest-django.sh says which it takes). make test-matrix runs both, one after
# the other; each takes about as long as make test.
test-django-newest: install services chain-nodes browser nginx promtool
	@bash tests/ensure-newest-django.sh
	DATABASE_URL=$(TEST_DATABASE_URL) TEST_REDIS_URL=$(TEST_REDIS_URL) \
	  .venv-django-newest/bin/python -m pytest -n $(TEST_WORKERS) --dist worksteal $(PYTEST_ARGS)

test-matrix: test test-django-newest

# The pictures in docs/: the checkout page (docs/checkout/: new, seen, paid, expired; phone and
# desktop width) and the staff admin (docs/admin/, 1,400 pixels), taken by the headless browser
# against a test database.
screenshots: install services browser
	DATABASE_URL=$(TEST_DATABASE_URL) TEST_REDIS_URL=$(TEST_REDIS_URL) \
	  $(PY) -m pytest -q tests/billing/checkout_screenshots.py tests/rentals/admin_screenshots.py

# Speed under load (docs/operations.md#performance): a throwaway PostgreSQL database, the
# production gunicorn settings, wrk at 16 connections against every hot endpoint and a bare
# DRF view in three rounds (the median kept), pgbench, a worker's memory; about 5 minutes; cleans up
# after itself. BENCH_ARGS="--scale-out" for the
# two-instance trial. Installs wrk and pgbench (Debian packages) when missing (bench/ensure-tools.sh).
BENCH_POSTGRES_URL ?= postgres://postgres@127.0.0.1:5432/postgres
BENCH_ARGS ?=
bench: install services
	bench/ensure-tools.sh
	BENCH_POSTGRES_URL=$(BENCH_POSTGRES_URL) $(PY) bench/load.py $(BENCH_ARGS)

# Static checks: lint and formatting (ruff), which way imports point (import-linter, contracts
# in .importlinter) and type hints (mypy, [tool.mypy] in pyproject.toml). .ci/run runs them before the tests.
lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports --no-cache
	$(VENV)/bin/mypy

check: lint
	DEBUG=1 $(PY) manage.py check
	DEBUG=1 $(PY) manage.py makemigrations --check --dry-run

# Re-resolve the pinned dependency set from pyproject.toml (run after editing it).
lock:
	rm -rf .venv-lock && $(PYTHON) -m venv .venv-lock
	.venv-lock/bin/pip install --quiet --disable-pip-version-check --upgrade pip
	.venv-lock/bin/pip install --quiet --disable-pip-version-check ".[test]"
	.venv-lock/bin/pip freeze --exclude-editable | grep -v '^gpurenthub' > requirements.lock
	rm -rf .venv-lock build *.egg-info

clean:
	rm -rf $(VENV) .venv-django-newest staticfiles .pytest_cache $(MO_FILES)

# The restore test alone (docs/operations.md#the-restore-test): deploy/backup/'s scripts against a
# throwaway PostgreSQL with WAL archiving and a litecoind regtest node; under a minute. make test
# runs it too.
.PHONY: backup-test
backup-test: install services chain-nodes
	DATABASE_URL=$(TEST_DATABASE_URL) TEST_REDIS_URL=$(TEST_REDIS_URL) \
	  $(PY) -m pytest -p no:xdist -q tests/deploy/test_backup.py

# The multi-host trial (docs/operations.md#a-multi-host-trial): network namespaces on this machine
# for db, web1, web2, work1, work2, edge and the LTC regtest chain, each running what deploy/
# installs; a light load through edge while web1 is cut off, work1 is killed holding a watcher's
# lease, PostgreSQL and Redis restart and nginx reloads; per-phase figures and invariants. Root;
# about 8 minutes; removes its namespaces, processes and files at the end.
# CLUSTER_ARGS="--phase-seconds 30 --keep-logs DIR".
CLUSTER_ARGS ?=
.PHONY: cluster-trial
cluster-trial: install services chain-nodes nginx
	bench/ensure-cluster-tools.sh
	$(PY) bench/cluster.py $(CLUSTER_ARGS)
