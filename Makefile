# The two commands of the README: `make serve` and `make test`. Both set up .venv first.

# The interpreter .venv is built with: .ci/python picks one (PYTHON=... overrides).
PYTHON ?= $(shell bash .ci/python)
VENV := .venv
# What is installed: serving needs the runtime dependencies only; the tests and the linters
# need the [dev] extras too (pytest, Playwright, mypy, the providers' SDKs, ...).
RUNTIME := $(VENV)/.installed-runtime
DEV := $(VENV)/.installed-dev
PIP := $(VENV)/bin/pip install --disable-pip-version-check --progress-bar on

.PHONY: serve test lint clean-db

$(RUNTIME): pyproject.toml
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	@echo "== installing onejob and its runtime dependencies into $(VENV) (pip's progress below)"
	$(PIP) -e .
	touch $(RUNTIME)

$(DEV): pyproject.toml
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	@echo "== installing onejob with the test tools ('.[dev]') into $(VENV) (pip's progress below)"
	$(PIP) -e '.[dev]'
	touch $(DEV) $(RUNTIME)

## Run the gateway on SQLite (./onejob.db) with the bundled simulator, at http://127.0.0.1:8000
serve: $(RUNTIME)
	$(VENV)/bin/onejob serve

## Run the test suite (installs nginx and chromium if missing; PostgreSQL tests skip when no
## server answers; .ci/run requires it)
test: $(DEV)
	bash .ci/system-packages
	$(VENV)/bin/pytest -n auto
	@if command -v node >/dev/null 2>&1; then \
	  cd clients/js && ONEJOB_PYTHON=$(CURDIR)/$(VENV)/bin/python node --test test/; \
	else echo "node is missing: the JS client's tests (clients/js) did not run"; fi

## Lint and type-check the packages
lint: $(DEV)
	$(VENV)/bin/ruff check gateway providers contracts certify scenarios reports cli bench tests
	$(VENV)/bin/ruff format --check gateway providers contracts certify scenarios reports cli bench tests
	$(VENV)/bin/mypy
	$(VENV)/bin/ruff check clients/python examples
	$(VENV)/bin/ruff format --check clients/python examples
	cd clients/python && ../../$(VENV)/bin/mypy
	$(VENV)/bin/mypy --strict examples/button/serve.py

## Delete the local SQLite database
clean-db:
	rm -f onejob.db onejob.db-shm onejob.db-wal
