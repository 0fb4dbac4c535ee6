#!/usr/bin/env bash
# Start `speech-server --engine omni` detached, in its own session, so it outlives this shell (a cold start takes
# minutes). Settings come from SPEECH_* variables; PORT (default 8000) and LOG choose where it listens and logs.
# DUMMY_VARIANT=custom_voice|base: write a weight-less Qwen3-TTS 0.6B model directory and use random weights.
set -euo pipefail
cd "$(dirname "$0")/../.."
PORT=${PORT:-8000}
LOG=${LOG:-/tmp/speech-server-$PORT.log}
PYTHON=${PYTHON:-python3}
export SPEECH_DEPLOY_CONFIG=${SPEECH_DEPLOY_CONFIG:-deploy/vllm-omni/customvoice.yaml}
if [ -n "${DUMMY_VARIANT:-}" ]; then
  export SPEECH_MODEL=${SPEECH_MODEL:-/tmp/qwen3-tts-0.6b-$DUMMY_VARIANT}
  "$PYTHON" -m app.tools.qwen3_tts_model_dir "$SPEECH_MODEL" --variant "$DUMMY_VARIANT"
  export SPEECH_LOAD_FORMAT=dummy
fi
: "${SPEECH_MODEL:?set SPEECH_MODEL to a Qwen3-TTS model directory (or DUMMY_VARIANT)}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"  # the stage processes import app.engines.omni_stage_fix
setsid nohup "$PYTHON" -m app.cli --engine omni --host "${HOST:-127.0.0.1}" --port "$PORT" >"$LOG" 2>&1 </dev/null &
echo $! >"/tmp/speech-server-$PORT.pid"
echo "speech-server (omni) starting on port $PORT, pid $!, log $LOG"
