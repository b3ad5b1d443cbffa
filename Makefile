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

## Lint and type-check the packages
lint: $(STAMP)
	$(VENV)/bin/ruff check gateway providers contracts certify scenarios reports cli bench tests
	$(VENV)/bin/ruff format --check gateway providers contracts certify scenarios reports cli bench tests
	$(VENV)/bin/mypy

## Delete the local SQLite database
clean-db:
	rm -f onejob.db onejob.db-shm onejob.db-wal
