# Two commands on a fresh machine with Python >= 3.11 and make: `make run` and `make test`.
PYTHON ?= python3
UV_VERSION := 0.13.8
# `make run` serves this machine only; HOST=0.0.0.0 listens on every interface. The server's own SPEECH_HOST,
# SPEECH_PORT and SPEECH_ENGINE are passed on (flags would override them); HOST and PORT win over them.
HOST ?= $(or $(SPEECH_HOST),127.0.0.1)
PORT ?= $(or $(SPEECH_PORT),8000)
export UV_PYTHON_DOWNLOADS := never
export UV_PROJECT_ENVIRONMENT := .venv

# uv from PATH when it is there, else a private copy installed from PyPI into .tools/.
UV := $(shell command -v uv 2>/dev/null || echo .tools/uv/bin/uv)

.PHONY: install run test test-unit test-e2e lint format clean k8s-sync image

.tools/uv/bin/uv:
	$(PYTHON) -m venv .tools/uv
	.tools/uv/bin/pip install --quiet --disable-pip-version-check uv==$(UV_VERSION)

# What `make install` puts in .venv: the embedded engine, the load tool and (unless SYNC_FLAGS=--no-dev) the test
# tools. The container images run this same target with other EXTRAS (see Dockerfile).
EXTRAS ?= --extra embedded --extra loadtest
SYNC_FLAGS ?=
# The suite in this many pytest processes, each taking whole files (their servers are module fixtures): most of an
# e2e test's time is spent waiting on a server, so two processes finish it in about two thirds of the time on two
# cores (933 s to 590 s on a two-core machine). 0: all in this one process.
TEST_WORKERS ?= 2

# .venv exactly as uv.lock pins it.
install: $(if $(filter .tools/uv/bin/uv,$(UV)),.tools/uv/bin/uv)
	$(UV) sync --frozen $(EXTRAS) $(SYNC_FLAGS) --python $(PYTHON)

run: install
	.venv/bin/speech-server --host $(HOST) --port $(PORT) --engine $(or $(SPEECH_ENGINE),embedded)

# The docs site is built strictly first: a broken link or anchor, a page missing from the nav, or a settings table
# that no longer renders fails the tests (site/ is git-ignored). Not --quiet: mkdocs then drops the warnings that
# --strict counts, and passes.
test: install
	.venv/bin/ruff check .
	NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict --site-dir site
	.venv/bin/pytest -q -n $(TEST_WORKERS) --dist loadfile --durations=15  # the slowest named, to keep it in its time

test-unit: install
	.venv/bin/pytest -q tests/unit

test-e2e: install
	.venv/bin/pytest -q tests/e2e

lint: install
	.venv/bin/ruff check . && .venv/bin/ruff format --check .

format: install
	.venv/bin/ruff format . && .venv/bin/ruff check --fix .

clean:
	rm -rf .venv .tools .pytest_cache .ruff_cache

# Copies of deploy/ files that the Kubernetes manifests embed (kustomize reads only files under k8s/).
k8s-sync: install
	.venv/bin/python k8s/sync.py

# The CPU image, with podman or docker (the first found; CONTAINER_TOOL=docker to choose). IMAGE_BUILD_FLAGS reach the
# build command, e.g. IMAGE_BUILD_FLAGS="--isolation chroot" for podman inside a container or VM that cannot start one.
CONTAINER_TOOL ?= $(shell command -v podman 2>/dev/null || command -v docker 2>/dev/null)
IMAGE ?= speech-service:cpu
IMAGE_BUILD_FLAGS ?=

image:
	@test -n "$(CONTAINER_TOOL)" || { echo "make image: needs podman or docker" >&2; exit 1; }
	$(CONTAINER_TOOL) build --target cpu -t $(IMAGE) $(IMAGE_BUILD_FLAGS) .
