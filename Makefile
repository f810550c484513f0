# The whole set-up is these targets: `make run` and `make test`.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
# Two installs, each redone only when the packaging metadata or a C extension's
# source changed (the install is editable; the extensions are built by it):
# `make run` installs what the demonstration needs, `make test` adds the test
# tools and the Spark extra (pyspark alone is some 400 MB).
RUN_STAMP := $(VENV)/.installed-run
TEST_STAMP := $(VENV)/.installed-test
PACKAGING := pyproject.toml setup.py $(wildcard framework/protocol/*.c framework/protocol/*.h)

.PHONY: test run lint clean soak test-busy ali-ons rocketmq-java rocketmq-go rocketmq-server

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --upgrade pip

$(RUN_STAMP): $(PACKAGING) | $(BIN)/python
	$(BIN)/pip install -e .
	touch $@

# A test install holds everything a run install does.
$(TEST_STAMP): $(PACKAGING) | $(BIN)/python
	$(BIN)/pip install -e '.[spark,dev]'
	touch $@ $(RUN_STAMP)

# ali-ons, the Node.js RocketMQ client tests/compat/ runs against triomq, at the
# version its package-lock.json pins: installed again only when that file
# changes, and only where node is (without node those tests skip). The lock
# file is a wildcard: tests/test_setup.py plans `make test` in a folder holding
# the Makefile alone.
ALI_ONS := tests/compat/ali_ons
ALI_ONS_STAMP := $(ALI_ONS)/node_modules/.installed
NODE := $(shell command -v node)

$(ALI_ONS_STAMP): $(wildcard $(ALI_ONS)/package-lock.json)
	cd $(ALI_ONS) && npm ci --no-audit --no-fund
	touch $@

ali-ons: $(ALI_ONS_STAMP)

# RocketMQ's own Java client and mqadmin (tests/compat/test_rocketmq_java.py and
# test_rocketmq_mqadmin.py), at the
# versions its pom.xml pins: built again only when the pom or the scenarios change,
# and only where mvn is (without it those tests skip; so they do, saying why, where
# Maven Central cannot be reached).
ROCKETMQ_JAVA := tests/compat/rocketmq_java
ROCKETMQ_JAVA_STAMP := $(ROCKETMQ_JAVA)/target/.built
MVN := $(shell command -v mvn)

$(ROCKETMQ_JAVA_STAMP): $(wildcard $(ROCKETMQ_JAVA)/pom.xml $(ROCKETMQ_JAVA)/src/main/*/*.xml $(ROCKETMQ_JAVA)/src/main/java/triomq/compat/*.java)
	sh $(ROCKETMQ_JAVA)/build.sh

rocketmq-java: $(ROCKETMQ_JAVA_STAMP)

# RocketMQ's own name server, broker and controller (tests/compat/rocketmq_server.py),
# at the version its pom.xml pins, run from their jars: resolved again only when the pom
# changes, and only where mvn is (without it, or Maven Central, those tests skip).
ROCKETMQ_SERVER := tests/compat/rocketmq_server
ROCKETMQ_SERVER_CLASSPATH := $(ROCKETMQ_SERVER)/target/classpath.txt

$(ROCKETMQ_SERVER_CLASSPATH): $(wildcard $(ROCKETMQ_SERVER)/pom.xml)
	sh $(ROCKETMQ_SERVER)/build.sh

rocketmq-server: $(ROCKETMQ_SERVER_CLASSPATH)

# RocketMQ's Go client (tests/compat/test_rocketmq_go.py), at the versions go.mod and
# go.sum pin: built again only when they or the program change, and only where go is.
ROCKETMQ_GO := tests/compat/rocketmq_go
ROCKETMQ_GO_BINARY := $(ROCKETMQ_GO)/bin/rocketmqgo
GO := $(shell command -v go)

$(ROCKETMQ_GO_BINARY): $(wildcard $(ROCKETMQ_GO)/go.mod $(ROCKETMQ_GO)/go.sum $(ROCKETMQ_GO)/*.go)
	sh $(ROCKETMQ_GO)/build.sh

rocketmq-go: $(ROCKETMQ_GO_BINARY)

# import-linter and mypy find a package by its folder, and framework/ and
# plugins/ are one package (triomq, triomq.plugins) only once installed: they
# read a view of it in build/, linked file by file (pyproject.toml has their
# settings; their reports name the view's paths, framework/ being triomq/).
VIEW := build/import-view

define lint_steps
	$(BIN)/ruff check .
	rm -rf $(VIEW) && mkdir -p $(VIEW) && cp -rs $(CURDIR)/framework $(VIEW)/triomq \
		&& cp -rs $(CURDIR)/plugins $(VIEW)/triomq/plugins
	PYTHONPATH=$(VIEW) $(BIN)/lint-imports --no-cache
	$(BIN)/mypy
endef

test: $(TEST_STAMP) $(if $(NODE),ali-ons) $(if $(MVN),rocketmq-java rocketmq-server) \
		$(if $(GO),rocketmq-go)
	$(lint_steps)
	$(BIN)/python -m pytest

run: $(RUN_STAMP)
	$(BIN)/triomq demo

lint: $(TEST_STAMP)
	$(lint_steps)

# Long seeded simulation sweeps (several minutes each); opt-in, not part of `make test`.
# The test install: on a terminal they draw their progress with rich.
soak: $(TEST_STAMP)
	$(BIN)/triomq sim --seeds 10000 --start 1000
	$(BIN)/triomq sim --cluster --seeds 2000 --start 1000
	$(BIN)/triomq sim --acting --seeds 2000 --start 1000

# The suite must not depend on scheduling luck: run it RUNS times (default 5)
# beside a busy loop on every core, as a busy CI machine would; opt-in. (A
# plain `make`, not $(MAKE): `make -n test-busy` must not start the loops.)
RUNS ?= 5
test-busy: $(TEST_STAMP)
	@hogs=""; for core in $$(seq $$(nproc)); do \
		$(BIN)/python -c 'while True: pass' & hogs="$$hogs $$!"; done; \
	trap 'kill $$hogs' EXIT; \
	for run in $$(seq $(RUNS)); do \
		echo "== make test beside $$(nproc) busy loops: run $$run of $(RUNS)"; \
		make --no-print-directory test || exit 1; \
	done

clean:
	rm -rf $(VENV) build *.egg-info $(ALI_ONS)/node_modules
