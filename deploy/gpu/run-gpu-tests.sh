#!/usr/bin/env bash
# Run tests/gpu against live omni servers: SPEECH_GPU_URL (CustomVoice) and/or SPEECH_GPU_CLONE_URL (Base).
set -euo pipefail
cd "$(dirname "$0")/../.."
exec "${PYTHON:-python3}" -m pytest -q -rs -p no:cacheprovider tests/gpu "$@"
