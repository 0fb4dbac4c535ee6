#!/usr/bin/env bash
# Install the service with the omni engine, its word aligner and the load tool on a GPU host
# (Linux x86_64, CUDA 13 driver).
# With uv: exactly the versions in uv.lock, into .venv. Without: pip into the current Python environment.
set -euo pipefail
cd "$(dirname "$0")/../.."
if command -v uv >/dev/null 2>&1; then
  uv sync --frozen --extra omni --extra align --extra loadtest
  echo "installed into .venv; activate it with: source .venv/bin/activate"
else
  python3 -m pip install ".[omni,align,loadtest]" pytest
fi
