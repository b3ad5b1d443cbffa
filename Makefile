# The two commands of the README: `make serve` and `make test`. Both set up .venv first.

# The interpreter .venv is built with: .ci/python picks one (PYTHON=... overrides).
PYTHON ?= $(shell bash .ci/python)
VENV := .venv
STAMP := $(VENV)/.installed

.PHONY: serve test lint clean-db

$(STAMP): pyproject.toml
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q -e '.[dev]'
	touch $(STAMP)

## Run the gateway on SQLite (./onejob.db) with the bundled simulator, at http://127.0.0.1:8000
serve: $(STAMP)
	$(VENV)/bin/onejob serve

## Run the test suite (installs nginx and chromium if missing; PostgreSQL tests skip when no
## server answers; .ci/run requires it)
test: $(STAMP)
	bash .ci/system-packages
	$(VENV)/bin/pytest -n auto
	@if command -v node >/dev/null 2>&1; then \
	  cd clients/js && ONEJOB_PYTHON=$(CURDIR)/$(VENV)/bin/python node --test test/; \
	else echo "node is missing: the JS client's tests (clients/js) did not run"; fi

## Lint and type-check the packages
lint: $(STAMP)
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
