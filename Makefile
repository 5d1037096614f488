# Developer entry points. `make test` is what CI runs (through .ci/run).

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# Inside the venv, so deleting .venv also forces a reinstall.
STAMP  := $(VENV)/.install-stamp
# Only the directories that exist yet: ruff fails on a missing path.
SOURCES := $(wildcard taskiq_fanin local_redis tests benchmarks examples)

.PHONY: venv lint format test bench clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet -e '.[dev,bench]'
	@touch $@

lint: venv
	$(BIN)/ruff check $(SOURCES)
	$(BIN)/ruff format --check $(SOURCES)
	$(BIN)/mypy
	$(BIN)/lint-imports

format: venv
	$(BIN)/ruff check --fix $(SOURCES)
	$(BIN)/ruff format $(SOURCES)

# The tests start their own redis-server (and a 3-node cluster for the cluster
# tests) unless REDIS_URL names one; here we only check it can be found.
test: venv
	@if [ -z "$$REDIS_URL" ]; then \
	  for tool in redis-server redis-cli; do \
	    if ! command -v $$tool >/dev/null 2>&1; then \
	      echo "error: $$tool not found on PATH; the tests start their own Redis." >&2; \
	      echo "  Install it: sudo apt-get install redis-server redis-tools   (macOS: brew install redis)" >&2; \
	      echo "  or point REDIS_URL at a Redis server the tests may use (they never flush it)." >&2; \
	      exit 1; \
	    fi; \
	  done; \
	fi
	@$(MAKE) --no-print-directory lint
	$(BIN)/pytest -q

# Real taskiq workers against REDIS_URL, else a throwaway redis-server, else an
# embedded fakeredis; writes bench-results/. A quick run: make bench BENCH_ARGS=--quick
bench: venv
	$(BIN)/python -m benchmarks $(BENCH_ARGS)

clean:
	rm -rf build dist *.egg-info .mypy_cache .ruff_cache .pytest_cache
	find . -path ./$(VENV) -prune -o -type d -name __pycache__ -exec rm -rf {} +
