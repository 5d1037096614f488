# Developer entry points. `make test`, then `make test-lowest`, is what CI runs
# (through .ci/run).

# `make test` runs on CPython 3.11 where the machine has it (python3.11 on
# PATH, else pyenv's), else on python3; `make test-lowest` on 3.10 (below).
# These two are the Pythons pyproject.toml's classifiers name (a test holds
# them to it).
PYTHON ?= $(or $(shell for py in python3.11 \
    "$${PYENV_ROOT:-$$HOME/.pyenv}"/versions/3.11*/bin/python3.11; do \
    "$$py" -c '' 2>/dev/null && { echo "$$py"; break; }; done),python3)
VENV   := .venv
BIN    := $(VENV)/bin
# Inside the venv, so deleting .venv also forces a reinstall.
STAMP  := $(VENV)/.install-stamp
# Only the directories that exist yet: ruff fails on a missing path.
SOURCES := $(wildcard taskiq_fanin local_redis tests benchmarks examples)
# The test and lint tools, pinned; the runtime dependencies are not in it.
TOOLS  := constraints/tools.txt

# The tests run in PYTEST_WORKERS processes (pytest-xdist), each taking the
# next test as it finishes one: most tests wait on servers and workers rather
# than compute, so more processes than cores pays (docs/development.md has
# the measurements). PYTEST_WORKERS=0 runs them all in this process.
PYTEST_WORKERS ?= 4
PYTEST := pytest -q -n $(PYTEST_WORKERS) --dist worksteal

# `make test-lowest`: the tests in a venv of their own with every runtime
# dependency at its floor in pyproject.toml (the dev tools as in .venv), on the
# lowest Python requires-python allows where this machine has one: python3.10 on
# PATH, else pyenv's 3.10, else $(PYTHON). The target prints which it ran.
LOWEST_VENV   := .venv-lowest
LOWEST_BIN    := $(LOWEST_VENV)/bin
LOWEST_STAMP  := $(LOWEST_VENV)/.install-stamp
LOWEST_PYTHON ?= $(or $(shell for py in python3.10 \
    "$${PYENV_ROOT:-$$HOME/.pyenv}"/versions/3.10*/bin/python3.10; do \
    "$$py" -c '' 2>/dev/null && { echo "$$py"; break; }; done),$(PYTHON))

# name==floor for each runtime requirement of the installed project, and of its
# `web` extra (the page's server), read from its metadata; a requirement without
# a `>=` stops the run, having none to pin.
define FLOOR_PINS
import re, sys
from importlib.metadata import requires
pins = {}
for req in requires("taskiq-fanin") or []:
    extra = re.search(r"extra\s*==\s*['\"](\w+)", req)
    if extra is not None and extra[1] != "web":
        continue
    floor = re.match(r"([A-Za-z0-9._-]+)[^;]*?>=\s*([^,;\s]+)", req)
    if floor is None:
        sys.exit(f"{req}: no floor (>=) for $(LOWEST_VENV) to pin")
    pins[floor[1]] = floor[2]
for name, version in pins.items():
    print(f"{name}=={version}")
endef
export FLOOR_PINS

.PHONY: venv lint format system-packages test test-fast test-lowest bench clean

venv: $(STAMP)

$(STAMP): pyproject.toml $(TOOLS)
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet -c $(TOOLS) -e '.[dev,bench]'
	@touch $@

lint: venv
	$(BIN)/ruff check $(SOURCES)
	$(BIN)/ruff format --check $(SOURCES)
	$(BIN)/mypy
	$(BIN)/lint-imports

format: venv
	$(BIN)/ruff check --fix $(SOURCES)
	$(BIN)/ruff format $(SOURCES)

$(LOWEST_STAMP): pyproject.toml $(TOOLS)
	@test -x $(LOWEST_BIN)/python || $(LOWEST_PYTHON) -m venv $(LOWEST_VENV)
	$(LOWEST_BIN)/python -m pip install --quiet --no-deps -e .
	$(LOWEST_BIN)/python -c "$$FLOOR_PINS" > $(LOWEST_VENV)/floors.txt
	$(LOWEST_BIN)/python -m pip install --quiet -c $(LOWEST_VENV)/floors.txt \
	  -c $(TOOLS) -e '.[dev]'
	$(LOWEST_BIN)/python -m pip check
	@touch $@

# What the tests need from the system, installed with apt-get when missing (as
# root, or through sudo; else it says what to install): redis-server and
# redis-cli, unless REDIS_URL names a Redis (the tests start their own, and a
# 3-node cluster for the cluster tests), and Debian's Chromium for the web
# page's tests. The benchmarks need the Redis alone.
system-packages:
	@.ci/system-packages $(if $(REDIS_URL),,redis) chromium

test: system-packages venv
	@$(MAKE) --no-print-directory lint
	$(BIN)/$(PYTEST)

# The quick edit-test loop: the tests that need no redis-server, no worker, no
# fault rig and no cluster (fakeredis only; the marks are set in
# tests/conftest.py from what each test uses), nor the package index (the
# wheel's install into an empty venv, half a minute alone), without the lint.
FAST_TESTS := not redis_server and not workers and not faults and not cluster \
    and not network

test-fast: venv
	$(BIN)/$(PYTEST) -m "$(FAST_TESTS)"

# The tests of the docs, the packaging and the public surface (marker
# `surface`) read files, not the dependencies: they run once, in `make test`.
test-lowest: system-packages $(LOWEST_STAMP)
	@echo "$(LOWEST_VENV): $$($(LOWEST_BIN)/python --version)," \
	  "$$(tr '\n' ' ' < $(LOWEST_VENV)/floors.txt)"
	$(LOWEST_BIN)/$(PYTEST) -m "not surface"

# Real taskiq workers against REDIS_URL, else a throwaway redis-server (apt-get
# installs it when missing), else an embedded fakeredis; writes bench-results/.
# A quick run: make bench BENCH_ARGS=--quick
bench: venv
	@.ci/system-packages $(if $(REDIS_URL),,redis) || \
	  echo "make bench: no redis-server: an embedded fakeredis stands in, which times nothing"
	$(BIN)/python -m benchmarks $(BENCH_ARGS)

clean:
	rm -rf build dist *.egg-info .mypy_cache .ruff_cache .pytest_cache
	find . \( -path ./$(VENV) -o -path ./$(LOWEST_VENV) \) -prune \
	  -o -type d -name __pycache__ -exec rm -rf {} +
