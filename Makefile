# Two entry points: `make up` (the local stack) and `make test` (the whole suite). Both set up everything.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)

.PHONY: up test setup images host-tools clean

setup: $(STAMP) host-tools

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev,train]'
	rm -f $(VENV)/.installed-*
	touch $@

host-tools:
	@command -v debootstrap >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap; }

images: setup
	$(BIN)/regrow images build

test: images
	$(BIN)/pytest

up: images
	$(BIN)/regrow bench sandbox --repetitions 5

clean:
	rm -rf $(VENV) .pytest_cache
