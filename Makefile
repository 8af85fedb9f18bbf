# The two commands of the README: `make demo` and `make test`. Both set up a fresh machine
# (venv, Python deps, Kafka jars from Maven Central, Debian's redis-server) and are fast the
# second time: every step is cached under ignored paths (.venv/, .state/).
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: demo test check setup down clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --disable-pip-version-check --upgrade pip
	$(BIN)/pip install -q --disable-pip-version-check -e '.[dev]'
	touch $@

setup: $(STAMP)
	$(BIN)/dsh setup

demo: setup
	$(BIN)/dsh demo

check: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports

test: setup check
	$(BIN)/pytest

down: $(STAMP)
	$(BIN)/dsh down

clean: down
	rm -rf .state $(VENV)
