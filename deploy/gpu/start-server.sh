#!/usr/bin/env bash
# Start `speech-server --engine omni` (ENGINE=sglang: its sglang engine) detached, in its own session, so it outlives
# this shell (a cold start takes minutes). Settings come from SPEECH_* variables; PORT (default 8000) and LOG choose
# where it listens and logs.
# DUMMY_VARIANT=custom_voice|base: write a weight-less Qwen3-TTS model directory and use random weights; DUMMY_SIZE
# (0.6B, the default, or 1.7B) picks the checkpoint shape it copies.
# CODEC_WEIGHTS=real (with DUMMY_VARIANT): code2wav loads random weights written in the checkpoint's own format
# (deploy/gpu/codec_weights.py) with load_format auto, so that it sets itself up as with a real checkpoint (decoder
# CUDA graphs, its dtype, the profile's decode_* settings); the talker stays on random weights. Sets
# SPEECH_OMNI__STAGE_OVERRIDES unless it is set already.
# ENGINE=sglang: sglang-omni must be importable (PYTHONPATH); the model is SPEECH_SGLANG__MODEL, and with DUMMY_VARIANT
# its talker runs on random weights while the codec decoder, which sglang-omni always loads from the directory, gets
# random weights in the checkpoint's format.
set -euo pipefail
cd "$(dirname "$0")/../.."
PORT=${PORT:-8000}
LOG=${LOG:-/tmp/speech-server-$PORT.log}
PYTHON=${PYTHON:-python3}
# The settings this script defaults take their old flat names too (SPEECH_DEPLOY_CONFIG, ...: the server still reads
# them), so that a default here never overrides what a caller gave under the old name.
ENGINE=${ENGINE:-omni}
if [ "$ENGINE" = sglang ]; then
  if [ -n "${DUMMY_VARIANT:-}" ]; then
    DUMMY_SIZE=${DUMMY_SIZE:-0.6B}
    export SPEECH_SGLANG__MODEL=${SPEECH_SGLANG__MODEL:-/tmp/qwen3-tts-${DUMMY_SIZE,,}-$DUMMY_VARIANT}
    "$PYTHON" -m app.tools.qwen3_tts_model_dir "$SPEECH_SGLANG__MODEL" --variant "$DUMMY_VARIANT" --size "$DUMMY_SIZE"
    [ -f "$SPEECH_SGLANG__MODEL/speech_tokenizer/model.safetensors" ] || "$PYTHON" deploy/gpu/codec_weights.py "$SPEECH_SGLANG__MODEL"
    export SPEECH_SGLANG__LOAD_FORMAT=${SPEECH_SGLANG__LOAD_FORMAT:-dummy}
  fi
  : "${SPEECH_SGLANG__MODEL:?set SPEECH_SGLANG__MODEL to a Qwen3-TTS model directory (or DUMMY_VARIANT)}"
  export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
  setsid nohup "$PYTHON" -m app.cli --engine sglang --host "${HOST:-127.0.0.1}" --port "$PORT" >"$LOG" 2>&1 </dev/null &
  echo $! >"/tmp/speech-server-$PORT.pid"
  echo "speech-server (sglang) starting on port $PORT, pid $!, log $LOG"
  exit 0
fi
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
