# topiclake: `make run` serves the gateway, `make test` runs the tests. Both install what they need.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
JARS_STAMP := $(VENV)/.jars-stamp
CONSOLE_VENDOR := src/topiclake/console/vendor
CONSOLE_STAMP := $(VENV)/.console-vendor-stamp
AZURITE := tools/azurite
AZURITE_STAMP := $(AZURITE)/node_modules/.installed-stamp
PYTEST_ARGS ?=
PYTEST_XDIST ?= -n auto --dist loadgroup
# mypy's incremental cache outside the checkout: a fresh clone checks only what changed (~1 s, not ~20)
MYPY_CACHE ?= $(HOME)/.cache/topiclake/mypy

.PHONY: install browser run test lint format bench bench-smoke bench-sustained bench-report clean tools-wrk bench-cluster tools-azurite npm

install: $(STAMP) $(JARS_STAMP) $(CONSOLE_STAMP) $(AZURITE_STAMP)

# pip compiles every installed module to bytecode one file after another; compileall does the same on every
# core (-j 0): the bytecode must be there, since a process started with PYTHONDONTWRITEBYTECODE=1 never
# writes it and would compile each module it imports at every start (docs/decisions.md).
$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check --no-compile --upgrade pip
	$(PY) -m pip install -q --disable-pip-version-check --no-compile -e '.[spark,dev]'
	$(PY) -m compileall -q -j 0 $(VENV)/lib
	touch $@

# Delta's and S3A's Spark jars: resolved once from Maven Central into ~/.cache/topiclake/jars, offline afterwards.
$(JARS_STAMP): $(STAMP)
	$(PY) -m topiclake.jobs.jars resolve
	touch $@

# The web console's browser libraries (htmx, uPlot), pinned by package-lock.json, into a node_modules/ that is
# not committed; the broker serves them at /ui/vendor/. Without npm the console says what is missing.
$(CONSOLE_STAMP): $(STAMP) $(CONSOLE_VENDOR)/package.json $(CONSOLE_VENDOR)/package-lock.json | npm
	@if command -v npm >/dev/null; then npm ci --prefix $(CONSOLE_VENDOR) --no-audit --no-fund --ignore-scripts; \
	else echo "npm not found: the console at /ui will run without charts and live updates"; fi
	touch $@

# Azurite, Microsoft's Azure Storage emulator (issue 29 item 4), pinned by tools/azurite/package-lock.json, into a
# node_modules/ that is not committed; tests/storage runs the Azure warehouse tests against it (skipped without npm).
$(AZURITE_STAMP): $(AZURITE)/package.json $(AZURITE)/package-lock.json | npm
	@if command -v npm >/dev/null; then npm ci --prefix $(AZURITE) --no-audit --no-fund --ignore-scripts; \
	else echo "npm not found: the Azure (Azurite) storage tests will be skipped"; mkdir -p $(AZURITE)/node_modules; fi
	touch $@

tools-azurite: $(AZURITE_STAMP)

# npm for the two targets above: Debian's nodejs and npm when the machine has none.
npm:
	@command -v npm >/dev/null || { apt-get update -q && apt-get install -y -q nodejs npm; } || \
	  echo "could not install npm (apt-get): the console runs without charts, the Azure tests are skipped"

# Headless Chromium and its driver (Debian's packages) for the console's browser tests (tests/console).
browser:
	@command -v chromium >/dev/null && command -v chromedriver >/dev/null || \
	  { apt-get update -q && apt-get install -y -q chromium chromium-driver; }

run: install
	$(VENV)/bin/topiclake serve

# Three workers for every two cores (pytest-xdist, tests/conftest.py): Spark's tests share one worker and one session, a module-scoped fixture's
# tests share a worker (tests/conftest.py); PYTEST_XDIST="-n 0" runs in one process. Kafka's Java tools map the
# classes of a class-data-sharing archive made once per machine into ~/.cache/topiclake/cds (tests/jvm_cds.py);
# Java programs of the tests are compiled once into ~/.cache/topiclake/java-classes.
test: install browser tools-wrk
	$(PY) tests/jvm_cds.py
	$(PY) -m pytest $(PYTEST_XDIST) --durations=30 $(PYTEST_ARGS)

lint: install
	$(VENV)/bin/ruff check src tests bench
	$(VENV)/bin/ruff format --check src tests bench
	MYPY_CACHE_DIR=$(MYPY_CACHE) $(VENV)/bin/mypy

format: install
	$(VENV)/bin/ruff check --fix src tests bench
	$(VENV)/bin/ruff format src tests bench

bench: install tools-wrk
	$(PY) bench/core_commit.py
	$(PY) bench/http_bench.py
	$(PY) bench/http_wrk.py

bench-smoke: install tools-wrk
	$(PY) bench/core_commit.py --smoke
	$(PY) bench/http_bench.py --smoke
	$(PY) bench/http_wrk.py --smoke
	$(PY) bench/sustained.py --smoke

# Publish bench/results/*.md (not committed) to docs/benchmarks.md (committed, linked from the README).
bench-report:
	$(PY) bench/report.py

# Issue 8: 10 minutes of continuous produce + a consumer group + a reader (SUSTAINED_ARGS="--minutes 2").
bench-sustained: install
	$(PY) bench/sustained.py $(SUSTAINED_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache data spark-warehouse

# Issue 12: wrk (Debian), the compiled load generator of bench/cluster_bench.py, installed when missing.
tools-wrk:
	@command -v wrk >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq wrk; }

# Issue 12: produce throughput/p99 with 1, 2 and 3 brokers and failover time (CLUSTER_BENCH_ARGS="--smoke").
bench-cluster: install tools-wrk
	$(PY) bench/cluster_bench.py $(CLUSTER_BENCH_ARGS)
