# Everyday commands. Every tool runs from the project virtualenv .venv, installed from the
# lock file requirements/dev.lock by scripts/install.sh (`make install`); CI runs
# `bash scripts/test.sh` (`make test`), which installs the same way.
#
#   make install   .venv from the lock (idempotent: about a second when in sync)
#   make lock      re-resolve requirements/dev.lock after a change to pyproject.toml,
#                  keeping the other pins; `make lock UPGRADE=1` moves everything to the
#                  newest versions the ranges allow
#   make check     lint + types;  make fast   pure tests;  make engine   engine tests
#   make test      the whole suite as CI runs it;  make bench   the simulator benchmark
#   make pre-commit  install the git hooks of .pre-commit-config.yaml

VENV := .venv
BIN := $(VENV)/bin
PYTHON := $(BIN)/python
WHEELS ?= /opt/wheels
WORKERS ?= 2
# The fast lane's environment: no engine may be reached (tests/conftest.py).
PURE := DOCKER_HOST=unix:///nonexistent/flowcon-fast-lane.sock FLOWCON_PURE_LANE=1

.PHONY: help venv install lock lint format types check fast engine test bench pre-commit

help:
	@sed -n 's/^#   //p' Makefile

venv install:
	bash scripts/install.sh

# torch is locked to its CPU build from $(WHEELS) (requirements/torch-cpu.in); the lock is
# for Linux x86_64 and Python 3.11, the CI machine. --upgrade only with UPGRADE=1.
lock: $(BIN)/uv
	$(BIN)/uv pip compile pyproject.toml requirements/torch-cpu.in \
		--extra dev --extra elastic --find-links $(WHEELS) \
		--python-version 3.11 --python-platform x86_64-unknown-linux-gnu \
		--custom-compile-command "make lock" $(if $(UPGRADE),--upgrade) \
		--quiet -o requirements/dev.lock

$(BIN)/uv:
	bash scripts/install.sh

lint:
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format:
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

types:
	$(BIN)/mypy

check: lint types

# Pure tests as the fast lane runs them (the calibration included, first).
fast:
	$(PURE) $(PYTHON) -m pytest -m "not docker and not swarm and not alone" -n $(WORKERS) --dist worksteal

# Engine tests, one at a time (they share the engine): starts the engine and builds the
# local images first, as the engine lane does.
engine:
	bash scripts/test.sh -m "docker or swarm or alone"

test:
	bash scripts/test.sh

# The simulator's ratios and speed on every trace and policy (no engine). The others, each
# with --help: bench_policies.py (no engine); bench_agent.py, bench_allocator.py,
# bench_rescale.py, bench_replay.py (on the engine).
bench:
	$(PYTHON) benchmarks/bench_simulator.py --all

pre-commit:
	$(BIN)/pre-commit install
