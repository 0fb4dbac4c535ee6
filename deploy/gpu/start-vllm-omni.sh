#!/usr/bin/env bash
# Start vllm-omni's own OpenAI server (`vllm serve MODEL --omni`) detached, in its own session, the way
# start-server.sh starts this service: the baseline of a side-by-side benchmark, on the service's deploy profile or
# on one of vllm-omni's own (deploy/gpu/bench_profile.py copies one with its base_config flattened, e.g.
# vllm-omni:qwen3_tts.yaml, so that the copy reads the same outside vllm_omni/deploy).
#   MODEL=DIR (or DUMMY_VARIANT=custom_voice|base: write a weight-less Qwen3-TTS model directory, random weights, of
#                  the shape DUMMY_SIZE names: 0.6B, the default, or 1.7B)
#   DEPLOY_CONFIG  deploy profile (default deploy/vllm-omni/customvoice.yaml)
#   PORT (default 8001), LOG (default /tmp/vllm-omni-PORT.log), NAME (served model name, default the directory's name)
#   LOAD_FORMAT    vLLM load_format (dummy with DUMMY_VARIANT)
#   COMPILE_CACHE_DIR  one directory for vLLM's, Inductor's and Triton's compile caches (share it with the service)
#   STAGE_INIT_TIMEOUT=900 INIT_TIMEOUT=1200  seconds per stage and in all, the service's defaults (vllm-omni's own,
#                  300 and 600, can run out on a cold start beside other servers: the per-device start lock counts too)
# Further arguments go to `vllm serve`. Ready when GET /health answers 200:
#   READY_PATH=/health PIDFILE=/tmp/vllm-omni-8001.pid deploy/gpu/wait-ready.sh 8001 900
set -euo pipefail
cd "$(dirname "$0")/../.."
PORT=${PORT:-8001}
LOG=${LOG:-/tmp/vllm-omni-$PORT.log}
PYTHON=${PYTHON:-python3}
DEPLOY_CONFIG=${DEPLOY_CONFIG:-deploy/vllm-omni/customvoice.yaml}
if [ -n "${DUMMY_VARIANT:-}" ]; then
  DUMMY_SIZE=${DUMMY_SIZE:-0.6B}
  MODEL=${MODEL:-/tmp/qwen3-tts-${DUMMY_SIZE,,}-$DUMMY_VARIANT}
  "$PYTHON" -m app.tools.qwen3_tts_model_dir "$MODEL" --variant "$DUMMY_VARIANT" --size "$DUMMY_SIZE"
  LOAD_FORMAT=${LOAD_FORMAT:-dummy}
fi
: "${MODEL:?set MODEL to a Qwen3-TTS model directory (or DUMMY_VARIANT)}"
NAME=${NAME:-$(basename "$MODEL")}
# what the service sets for its own engine: spawned stage processes, nothing fetched at run time
export VLLM_WORKER_MULTIPROC_METHOD=${VLLM_WORKER_MULTIPROC_METHOD:-spawn}
export HF_HUB_OFFLINE=${HF_HUB_OFFLINE:-1} TRANSFORMERS_OFFLINE=${TRANSFORMERS_OFFLINE:-1}
export VLLM_NO_USAGE_STATS=${VLLM_NO_USAGE_STATS:-1} DO_NOT_TRACK=${DO_NOT_TRACK:-1}
export VLLM_LOGGING_COLOR=${VLLM_LOGGING_COLOR:-0}  # plain text in the log (vllm-omni forces colour otherwise)
if [ -n "${COMPILE_CACHE_DIR:-}" ]; then
  export VLLM_CACHE_ROOT=${VLLM_CACHE_ROOT:-$COMPILE_CACHE_DIR}
  export TORCHINDUCTOR_CACHE_DIR=${TORCHINDUCTOR_CACHE_DIR:-$COMPILE_CACHE_DIR/inductor}
  export TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-$COMPILE_CACHE_DIR/triton}
fi
# the checkout: a profile or --stage-overrides may name its classes (the service's code2wav scheduler)
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
args=(serve "$MODEL" --omni --deploy-config "$DEPLOY_CONFIG" --host "${HOST:-127.0.0.1}" --port "$PORT"
  --served-model-name "$NAME" --stage-init-timeout "${STAGE_INIT_TIMEOUT:-900}"
  --init-timeout "${INIT_TIMEOUT:-1200}")
[ -n "${LOAD_FORMAT:-}" ] && args+=(--load-format "$LOAD_FORMAT")
setsid nohup "$PYTHON" -m vllm_omni.entrypoints.cli.main "${args[@]}" "$@" >"$LOG" 2>&1 </dev/null &
echo $! >"/tmp/vllm-omni-$PORT.pid"
echo "vllm serve --omni starting on port $PORT, pid $!, log $LOG"
