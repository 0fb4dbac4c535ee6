# Two commands on a fresh machine with Python >= 3.11 and make: `make run` and `make test`.
PYTHON ?= python3
UV_VERSION := 0.13.8
HOST ?= 0.0.0.0
PORT ?= 8000
export UV_PYTHON_DOWNLOADS := never
export UV_PROJECT_ENVIRONMENT := .venv

# uv from PATH when it is there, else a private copy installed from PyPI into .tools/.
UV := $(shell command -v uv 2>/dev/null || echo .tools/uv/bin/uv)

.PHONY: install run test test-unit test-e2e lint format clean

.tools/uv/bin/uv:
	$(PYTHON) -m venv .tools/uv
	.tools/uv/bin/pip install --quiet --disable-pip-version-check uv==$(UV_VERSION)

# .venv with the service, the embedded engine, the load tool and the test tools, exactly as uv.lock pins them.
install: $(if $(filter .tools/uv/bin/uv,$(UV)),.tools/uv/bin/uv)
	$(UV) sync --frozen --extra embedded --extra loadtest --python $(PYTHON)

run: install
	.venv/bin/speech-server --host $(HOST) --port $(PORT) --engine embedded

test: install
	.venv/bin/ruff check .
	.venv/bin/pytest -q

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
