# The whole set-up is these targets: `make test` and `make run`.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
# Reinstall only when the packaging metadata changed (the install is editable).
STAMP := $(VENV)/.installed

.PHONY: test run lint clean soak

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install -e '.[spark,dev]'
	touch $(STAMP)

test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/python -m pytest

run: $(STAMP)
	$(BIN)/triomq demo

lint: $(STAMP)
	$(BIN)/ruff check .

soak: $(STAMP)
	TRIOMQ_SOAK=1 $(BIN)/python -m pytest -m soak

clean:
	rm -rf $(VENV) build *.egg-info
