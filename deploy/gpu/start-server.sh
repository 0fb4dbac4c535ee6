#!/usr/bin/env bash
# Start `speech-server --engine omni` detached, in its own session, so it outlives this shell (a cold start takes
# minutes). Settings come from SPEECH_* variables; PORT (default 8000) and LOG choose where it listens and logs.
# DUMMY_VARIANT=custom_voice|base: write a weight-less Qwen3-TTS model directory and use random weights; DUMMY_SIZE
# (0.6B, the default, or 1.7B) picks the checkpoint shape it copies.
# CODEC_WEIGHTS=real (with DUMMY_VARIANT): code2wav loads random weights written in the checkpoint's own format
# (deploy/gpu/codec_weights.py) with load_format auto, so that it sets itself up as with a real checkpoint (decoder
# CUDA graphs, its dtype, the profile's decode_* settings); the talker stays on random weights. Sets
# SPEECH_OMNI__STAGE_OVERRIDES unless it is set already.
set -euo pipefail
cd "$(dirname "$0")/../.."
PORT=${PORT:-8000}
LOG=${LOG:-/tmp/speech-server-$PORT.log}
PYTHON=${PYTHON:-python3}
# The settings this script defaults take their old flat names too (SPEECH_DEPLOY_CONFIG, ...: the server still reads
# them), so that a default here never overrides what a caller gave under the old name.
export SPEECH_OMNI__DEPLOY_CONFIG=${SPEECH_OMNI__DEPLOY_CONFIG:-${SPEECH_DEPLOY_CONFIG:-deploy/vllm-omni/customvoice.yaml}}
export SPEECH_OMNI__MODEL=${SPEECH_OMNI__MODEL:-${SPEECH_MODEL:-}}
if [ -n "${DUMMY_VARIANT:-}" ]; then
  DUMMY_SIZE=${DUMMY_SIZE:-0.6B}
  export SPEECH_OMNI__MODEL=${SPEECH_OMNI__MODEL:-/tmp/qwen3-tts-${DUMMY_SIZE,,}-$DUMMY_VARIANT}
  "$PYTHON" -m app.tools.qwen3_tts_model_dir "$SPEECH_OMNI__MODEL" --variant "$DUMMY_VARIANT" --size "$DUMMY_SIZE"
  export SPEECH_OMNI__LOAD_FORMAT=dummy
  if [ "${CODEC_WEIGHTS:-dummy}" = real ]; then
    [ -f "$SPEECH_OMNI__MODEL/speech_tokenizer/model.safetensors" ] || "$PYTHON" deploy/gpu/codec_weights.py "$SPEECH_OMNI__MODEL"
    export SPEECH_OMNI__STAGE_OVERRIDES=${SPEECH_OMNI__STAGE_OVERRIDES:-${SPEECH_STAGE_OVERRIDES:-'{"1":{"load_format":"auto"}}'}}
  fi
fi
: "${SPEECH_OMNI__MODEL:?set SPEECH_OMNI__MODEL to a Qwen3-TTS model directory (or DUMMY_VARIANT)}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"  # the code2wav stage process imports the service's scheduler
setsid nohup "$PYTHON" -m app.cli --engine omni --host "${HOST:-127.0.0.1}" --port "$PORT" >"$LOG" 2>&1 </dev/null &
echo $! >"/tmp/speech-server-$PORT.pid"
echo "speech-server (omni) starting on port $PORT, pid $!, log $LOG"
