# The two commands of the README: `make demo` and `make test`. Both set up a fresh machine
# (venv, Python deps, Kafka jars from Maven Central, Debian's redis-server) and are fast the
# second time: every step is cached under ignored paths (.venv/, .state/).
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: demo test check floors setup test-tools down clean

# uv installs the packages: the same resolution as pip's, in a third of pip's time (its cache,
# ~/.cache/uv, serves the next clone). Compiled to bytecode as pip does: where
# PYTHONDONTWRITEBYTECODE is set, every process would otherwise compile what it imports. uv
# reads neither pip.conf nor PIP_*: PIP_INDEX_URL is passed on, the system's CA store is
# trusted, and if uv cannot install, pip does.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --disable-pip-version-check 'uv>=0.5,<1' \
	  && UV_NATIVE_TLS=1 $(if $(PIP_INDEX_URL),UV_INDEX_URL='$(PIP_INDEX_URL)') \
	    $(BIN)/uv pip install -q --compile-bytecode --python $(BIN)/python -e '.[dev]' \
	  || $(BIN)/pip install -q --disable-pip-version-check -e '.[dev]'
	touch $@

# The codec's readers compiled with Cython (schemas/native.py): rebuilt when the generator or
# the schemas change; a stale or missing build only means the pure-Python readers.
NATIVE_STAMP := $(VENV)/.native-stamp
$(NATIVE_STAMP): $(STAMP) $(wildcard schemas/*.avsc) schemas/rules.py schemas/avro_io.py \
		schemas/avro_read.py schemas/codegen.py schemas/reader_source.py schemas/readers.py \
		schemas/native.py schemas/native_build.py
	$(BIN)/python -m schemas.native_build
	touch $@

setup: $(STAMP) $(NATIVE_STAMP)
	$(BIN)/dsh setup

demo: setup
	$(BIN)/dsh demo

# mypy's cache outside the checkout: a fresh clone on the same machine checks only what differs
# (a cold run is a minute of CPU). It keys every module by its content, so clones share it.
MYPY_CACHE_DIR ?= $(HOME)/.cache/dsh-pipeline/mypy

check: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	MYPY_CACHE_DIR='$(MYPY_CACHE_DIR)' $(BIN)/mypy
	$(BIN)/lint-imports

# Validators the manifest tests call (promtool, docker-compose 1.x parses compose files without
# an engine), openssl (the TLS test's certificates) and iptables (the network faults' packet
# loss); installed from Debian's packages when missing and we may, else those tests skip or fail
# saying what is missing. Toxiproxy, the network faults' proxy, is a Go module: built once into
# .state/tools from the Go module proxy (proxy.golang.org), with Debian's Go (golang-go; the
# module needs Go 1.17) when no `go` is installed and we may; without Go the suite cannot run.
TOXIPROXY_VERSION := v2.5.0
TOXIPROXY := .state/tools/toxiproxy-server-$(TOXIPROXY_VERSION)

$(TOXIPROXY):
	@if ! command -v go >/dev/null; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	      --no-install-recommends golang-go >/dev/null; \
	  else echo "error: Toxiproxy is built with Go: install it (apt-get install golang-go)" >&2; \
	    exit 1; fi; \
	fi
	mkdir -p .state/tools/build
	GOBIN=$(CURDIR)/.state/tools/build go install \
	  github.com/Shopify/toxiproxy/v2/cmd/server@$(TOXIPROXY_VERSION)
	mv .state/tools/build/server $@

test-tools: $(TOXIPROXY)
	@if ! command -v promtool >/dev/null || ! command -v docker-compose >/dev/null \
	    || ! command -v openssl >/dev/null || ! command -v iptables >/dev/null; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	      --no-install-recommends prometheus docker-compose openssl iptables >/dev/null) \
	      || echo "warning: could not install promtool/docker-compose/openssl/iptables"; \
	  else echo "note: promtool/docker-compose/openssl/iptables missing; their checks will skip or fail"; fi; \
	fi
	@# Debian's Chromium: the session inspector's browser tests drive it with Playwright (no
	@# browser download).
	@if ! command -v chromium >/dev/null; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	      --no-install-recommends chromium >/dev/null) \
	      || echo "warning: could not install chromium"; \
	  else echo "note: chromium missing; the inspector's browser tests will skip"; fi; \
	fi

# Three workers: the reliability suite, the network faults and the test modules side by side
# (tests/conftest.py hands them out). PYTEST_WORKERS=0 runs it all in this process, one test
# after another. Then the soak's three minutes alone: its load would slow whatever ran beside it.
PYTEST_WORKERS ?= 3
test: setup test-tools check
	$(BIN)/pytest -n $(PYTEST_WORKERS) -m "not soak"
	$(BIN)/pytest -m soak
	$(MAKE) -s floors

# The unit tests again at the lowest versions pyproject.toml allows (uv's lowest-direct
# resolution, in a venv of its own): code that starts using a newer library's API fails here,
# not on a user's machine that has the older one. Only the native readers are shared (built
# by the main venv's Cython).
FLOORS_VENV := .state/floors-venv
floors: $(STAMP) $(NATIVE_STAMP)
	rm -rf $(FLOORS_VENV) && $(PYTHON) -m venv $(FLOORS_VENV)
	UV_NATIVE_TLS=1 $(if $(PIP_INDEX_URL),UV_INDEX_URL='$(PIP_INDEX_URL)') \
	  $(BIN)/uv pip install -q --python $(FLOORS_VENV)/bin/python --resolution lowest-direct \
	  -e '.[dev]'
	$(FLOORS_VENV)/bin/pytest -q -p no:cacheprovider -n 2 tests/unit

down: $(STAMP)
	$(BIN)/dsh down

clean: down
	rm -rf .state $(VENV)
