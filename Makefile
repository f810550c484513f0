# The whole set-up is these targets: `make test` and `make run`.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
# Reinstall only when the packaging metadata or a C extension's source changed
# (the install is editable; the extensions are built by it).
STAMP := $(VENV)/.installed
C_SOURCES := $(wildcard framework/protocol/*.c framework/protocol/*.h)

.PHONY: test run lint clean soak

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --upgrade pip

$(STAMP): pyproject.toml $(C_SOURCES) | $(BIN)/python
	$(BIN)/pip install -e '.[spark,dev]'
	touch $(STAMP)

test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/python -m pytest

run: $(STAMP)
	$(BIN)/triomq demo

lint: $(STAMP)
	$(BIN)/ruff check .

# Long seeded simulation sweeps (several minutes each); opt-in, not part of `make test`.
soak: $(STAMP)
	$(BIN)/triomq sim --seeds 10000 --start 1000
	$(BIN)/triomq sim --cluster --seeds 2000 --start 1000

clean:
	rm -rf $(VENV) build *.egg-info
