# The two quickstart commands: `make demo` and `make test`. Both set up .venv first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# The image is tagged with the package's version, as deploy/k8s/base/kustomization.yaml names it.
IMAGE ?= parley
VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)

$(BIN)/parley: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ".[dev]"
	touch $(BIN)/parley

.PHONY: setup demo test test-fast lint bench docs image
setup: $(BIN)/parley

demo: setup
	$(BIN)/parley demo

# One pytest process per core (pytest-xdist): every test has its own key prefix, queue,
# tmp dir and ports, and most of an e2e test's time is its processes starting and waiting.
# Work stealing: with xdist's default scheduling the tests handed out last queue up on one
# process while the others sit idle.
test: setup
	$(BIN)/pytest -q -n auto --dist worksteal

# The edit loop: the unit and integration layers (pure, fakeredis and the local Redis),
# in about two minutes; `make test` (what CI runs) adds the processes.
test-fast: setup
	$(BIN)/pytest -q tests/unit tests/integration

lint: setup
	$(BIN)/ruff check parley coordinator workers shared tests benchmarks
	$(BIN)/mypy parley

bench: setup
	$(BIN)/python -m benchmarks.run_all

# The docs site, offline, into site/; any warning fails it. The reference pages are made
# from the code (docs/gen/reference.py). The two variables silence MkDocs 2 notices.
docs: setup
	NO_MKDOCS_2_WARNING=1 DISABLE_MKDOCS_2_WARNING=true $(BIN)/mkdocs build --strict --quiet

image:
	docker build --tag $(IMAGE):$(VERSION) .
