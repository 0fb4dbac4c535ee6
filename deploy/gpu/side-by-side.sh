#!/usr/bin/env bash
# This service, vllm-omni's own `vllm serve --omni` and AsyncOmni alone (loadtest/engine_alone.py) on one GPU, each on
# a copy of a deploy profile (memory cut so that they fit; every request the same fixed length), swept interleaved by
# speech-loadtest. By default all three run the service's profile; `vllm serve` may run another one (OMNI_PROFILE, e.g.
# one of vllm-omni's own), and a second `vllm serve` (vllm-omni-b) a third. For a GPU host where vllm and vllm-omni
# are importable by $PYTHON (give PYTHONPATH).
#
#   deploy/gpu/side-by-side.sh all              start, sweep closed + open loop, stop
#   deploy/gpu/side-by-side.sh start            start what is not running yet, wait until all are ready
#   deploy/gpu/side-by-side.sh sweep            sweep-closed, then sweep-open
#   deploy/gpu/side-by-side.sh sweep-closed     closed loop at $CONCURRENCY
#   deploy/gpu/side-by-side.sh sweep-open       open loop at $RATES
#   deploy/gpu/side-by-side.sh sweep-bench      the referee: vllm-omni's own benchmark (`vllm bench serve --omni
#                                               --backend openai-audio-speech`) against each target at $CONCURRENCY
#   CONCURRENCY=8 SWEEP_NAME=c8 deploy/gpu/side-by-side.sh sweep-closed    one level per call, in $OUT/closed-c8
#   deploy/gpu/side-by-side.sh profile          with PROFILER_DIR: every target's PyTorch profiler on around one
#                                               closed-loop level ($CONCURRENCY, $REQUESTS, PROFILE_WARMUP=0
#                                               warm-up requests, recorded too), through its own routes; traces in
#                                               $PROFILER_DIR/<target>
#   deploy/gpu/side-by-side.sh status           what runs, what is ready
#   deploy/gpu/side-by-side.sh stop             stop them all, keep their logs in $OUT/logs
# Each phase can run on its own (e.g. one per command where a command's time is limited); `start` resumes where an
# earlier `start` stopped waiting (START_WAIT_S), since the servers run detached. `start` ends with status 3 when a
# server is still starting at its deadline, 2 at once when one died or (the service) says its engine failed. A sweep
# never overwrites an earlier one: its folder ($OUT/closed or $OUT/open, with -$SWEEP_NAME) gets -2, -3, ... when it
# already holds results.
#
# Settings (environment):
#   OUT=/tmp/side-by-side/results   results: closed/ and open/ (speech-loadtest's JSON, Markdown, plots,
#                                   targets.txt: which target is which URL, on which profile, and each server's
#                                   /metrics before and after: metrics-<target>-before.txt, read by
#                                   deploy/gpu/level_metrics.py into server-metrics.md; gpu-util.csv: every
#                                   GPU's utilization sampled every 250 ms while the level ran, gpu-util.md its
#                                   mean and share of samples at 90% or more a GPU; host-cpu.md: where the
#                                   host's CPU time went over the level, steal included), logs/, the profile
#                                   copies used (profile.yaml, profile-vllm-omni.yaml, ...), commands.txt, gpu.txt,
#                                   host.txt (each GPU's nearest cores and NUMA node, the host's NUMA nodes)
#   WORK=/tmp/side-by-side          model directory, profile copies, logs, compile cache (CACHE=$WORK/compile-cache)
#   MODEL_SIZE=0.6B                 the weight-less CustomVoice checkpoint's shape every target serves: 0.6B or 1.7B
#                                   ($WORK/model, or $WORK/model-1.7B, so that one size's directory is never reused)
#   PROFILE=deploy/vllm-omni/customvoice.yaml  the service's profile (service, service-b, service-c, alone): a path or
#                                   vllm-omni:NAME.yaml, a profile of the installed vllm-omni (bench_profile.py)
#   MEMORY=0.14                     every stage's share of the GPU in each copy, or per stage_id: 0:0.12,1:0.10
#   FRAMES=100                      codec frames per request, every copy
#   PROFILE_SET="stages.1.async_scheduling=false;connectors.connector_of_shared_memory.extra.decode_batch_max_size=16"
#                                   more overrides of the profile copy (deploy/gpu/bench_profile.py --set), ';'-separated
#   TARGETS="service vllm-omni alone"  which to run, in start order; SERVICE_PORT=8000 OMNI_PORT=8001 ALONE_PORT=8002
#   OMNI_PROFILE=$PROFILE           the profile `vllm-omni` runs, e.g. vllm-omni:qwen3_tts.yaml (upstream's default)
#   OMNI_PROFILE_SET=""             its copy's overrides, ';'-separated (with OMNI_PROFILE; without it the copy is the
#                                   service's profile with PROFILE_SET and OMNI_ON's overrides)
#   OMNI_MEMORY=$MEMORY             its copy's memory
#                                   `vllm-omni-b` is a second `vllm serve --omni` (OMNI_B_PORT=8005) on OMNI_B_PROFILE
#                                   (required for it), e.g. vllm-omni:qwen3_tts_high_concurrency_mrv2_single_gpu.yaml
#   OMNI_B_PROFILE_SET="" OMNI_B_MEMORY=$MEMORY   its copy's overrides and memory
#                                   `service-b` is a second instance of this service (SERVICE_B_PORT=8003) on profile
#                                   B: the same copy with B_PROFILE_SET's overrides on top (a lever A/B, interleaved)
#   B_PROFILE_SET=""                profile B's extra overrides, ';'-separated like PROFILE_SET
#   B_PROFILE=$PROFILE B_MEMORY=$MEMORY   profile B's source and memory, where B is another shipped profile (e.g.
#                                   deploy/vllm-omni/throughput.yaml beside customvoice.yaml)
#                                   `service-c` is a third instance (SERVICE_C_PORT=8004) on profile C: the copy with
#                                   C_PROFILE_SET's overrides on top (not B's), for two levers against one baseline
#   C_PROFILE_SET=""                profile C's extra overrides
#   SERVICE_ENV="" SERVICE_B_ENV="" SERVICE_C_ENV=""
#                                   more settings for `service` / `service-b` / `service-c`, as NAME=value words (no
#                                   spaces in a value), e.g.
#                                   SERVICE_B_ENV="SPEECH_OMNI__CUDA_MPS=true" (a lever that is a setting, not a profile)
#                                   `sglang` is sglang-omni's `sgl-omni serve` (SGLANG_PORT=8006) on the same model
#                                   directory: talker on random weights (load_format dummy), code2wav on the codec
#                                   weights there; installed into SGLANG_SITE (deploy/gpu/sglang-omni/carry.sh). Every
#                                   request runs to its max_new_tokens (app/engines/sglang/stage_plugins/process_start/sitecustomize.py masks the codec's
#                                   end-of-speech token, which no request field of 0.1.8 can do), and SGLANG_BODY is its
#                                   request body in place of EXTRA_BODY (it streams with "stream": true; max_new_tokens
#                                   counts frames, no end token)
#   SGLANG_SITE=/tmp/sglang-omni/site  SGLANG_MEMORY=0.6 (--mem-fraction-static)  SGLANG_ARGS="" (more serve flags)
#                                   `service-sglang` is this service on its sglang engine (SERVICE_SGLANG_PORT=8007):
#                                   sglang-omni in the server's process, the same model, weights and memory share as
#                                   `sglang`, fixed length (SPEECH_SGLANG__FIXED_LENGTH); SERVICE_SGLANG_ENV its more
#                                   settings, SERVICE_SGLANG_BODY its request body (max_new_tokens counts frames there).
#                                   `service-sglang-b` is a second one (SERVICE_SGLANG_B_PORT=8008, its settings
#                                   SERVICE_SGLANG_B_ENV, the same body): a lever of the sglang engine against the
#                                   engine as shipped, in the same minutes, each on a GPU of its own
#   SERVICE_SGLANG_BODY='{"stream_format": "audio", "max_new_tokens": 100}'
#   SGLANG_BODY='{"stream": true, "max_new_tokens": 100}'  SGLANG_BENCH_BODY: its --extra-body for vllm bench
#                                   (default: SGLANG_BODY's max_new_tokens)
#   OMNI_ENV="" OMNI_B_ENV=""       the same for `vllm-omni` / `vllm-omni-b` (SGLANG_ENV for `sglang`). On a host of several GPUs,
#                                   CUDA_VISIBLE_DEVICES=N among a server's settings gives it GPUs of its own (a
#                                   profile's `devices` count within them): each server alone on its GPU, or a
#                                   two-GPU profile beside another, swept interleaved all the same.
#                                   Two words among a server's settings are CPUs, not environment: CPUS=0-13 starts
#                                   the server on those cores (taskset: its processes inherit them), LOAD_CPUS=14-15
#                                   runs its load tool and benchmark there when sweeps run in parallel (PARALLEL=1), so
#                                   that servers swept at once share no core
#                                   `replicas` is not a server but `service` and `service-b` as one target, requests
#                                   sent to them in turn (two replicas on one GPU behind a round-robin balancer); list
#                                   it after both, e.g. TARGETS="service service-b vllm-omni replicas"
#   SWEEP_TARGETS=$TARGETS          the targets a sweep drives (e.g. "service replicas vllm-omni": service-b is then
#                                   idle except as a replica)
#   PARALLEL=0                      1: sweep-closed, sweep-open and sweep-bench drive every target from a process of
#                                   its own, all at once (servers each alone on their GPUs, and on their CPUs with
#                                   CPUS / LOAD_CPUS), into $OUT/<target>/ (its results and commands.txt; the sweep's
#                                   output in $OUT/<target>.log). 0: one process drives them in turn, interleaved
#   MPS=0                           1: run every server under CUDA MPS (`nvidia-cuda-mps-control -d` before the first
#                                   start, checked with one CUDA context; `stop` quits it), so that the kernels of
#                                   servers sharing the GPU run side by side rather than time-sliced
#   OMNI_ON=a                       without OMNI_PROFILE, the service's copy `vllm-omni` mirrors: a (PROFILE_SET), b
#                                   (with B_PROFILE_SET) or c (with C_PROFILE_SET), as its own copy at OMNI_MEMORY
#   CODEC_WEIGHTS=dummy             real: code2wav loads random weights written in the checkpoint's format
#                                   (deploy/gpu/codec_weights.py; its stage gets load_format auto by a stage override,
#                                   the talker keeps dummy), so that it sets itself up as with a real checkpoint: the
#                                   decoder's CUDA graphs and the profile's decode_* settings. With dummy, vLLM's
#                                   loader skips load_weights, where code2wav sets all of that up
#   FRONTEND_WEIGHTS=auto           real where service-sglang (or service-sglang-b) runs with
#                                   SPEECH_SGLANG__PREPROCESSING=cpu or gpu in its settings, else none. real: write
#                                   random weights for sglang-omni's prompt frontend in the checkpoint's format
#                                   (deploy/gpu/frontend_weights.py, with SGLANG_SITE), which its preprocessing stage
#                                   loads when it runs in a process of its own (sglang-omni's `preprocessing.process`); with CODEC_WEIGHTS=real, vllm-omni's
#                                   code2wav reads (and drops) this file too: real only for runs of the sglang targets
#   ALONE_STAGE_OVERRIDES=""        `alone`'s stage overrides (JSON). `alone` and `vllm serve` run vllm-omni's own
#                                   code2wav scheduler (vllm-omni 0.30 refuses scheduler_cls as a stage override; the
#                                   service registers its own in vllm-omni's pipeline registry)
#   NAME=qwen3-tts  VOICE=vivian    model id and voice for every target
#   CONCURRENCY=1,8,16,32,64  RATES=8,14  REQUESTS=64  WARMUP=8  DURATION=30  ROUNDS=2   the sweep
#   SWEEP_NAME=""                   a suffix for the sweep's folder ($OUT/closed-NAME), e.g. one per level where each
#                                   call of `sweep-closed` runs one (CONCURRENCY=32 SWEEP_NAME=c32)
#   BENCH_PROMPTS=3                 sweep-bench: prompts per level = BENCH_PROMPTS x its concurrency, at least 16;
#                                   its request body is the benchmark's own (pcm, `ignore_eos`) with VOICE and
#                                   EXTRA_BODY's other fields as --extra-body; every target, level by level in turn
#                                   (`alone` and `replicas` are not HTTP speech servers to it: skipped)
#   BENCH_SEED=""                   sweep-bench: the seed its random dataset is drawn from (--seed), one per level
#                                   (BENCH_SEED, BENCH_SEED+1, ...: the same for every target at a level). Empty: the
#                                   next ones after the last this WORK used ($WORK/bench-seed), so that no prompt
#                                   reaches a server twice (the benchmark's own default is seed 0 every call: a second
#                                   call repeats the first's prompts, all of them cached prefixes to sglang-omni)
#   BENCH_RATE=""                   sweep-bench: Poisson arrivals at this many requests a second (its
#                                   --request-rate), each level's concurrency then a cap; empty: all at once (inf)
#   PLAYBACK_BUFFER_MS=0            the modelled listener's jitter buffer (stalls); LOADTEST_ARGS: more options
#   PROFILER_DIR=""                 set when the servers start: each can run PyTorch's profiler on request, its traces
#                                   in $PROFILER_DIR/<target> (the service: SPEECH_PROFILER_DIR and its
#                                   /admin/profile routes; vllm serve: both stages' profiler_config in its copy, its
#                                   /start_profile; sgl-omni serve: SGLANG_TORCH_PROFILER_DIR, its /start_profile)
#   TIMELINE=""                     profile: 1 records the request timeline instead, on the service's targets that
#                                   keep one ({"timeline": true}; sgl-omni serve: its /start_request_profile), no trace
#   UNIQUE_TEXTS=1                  speech-loadtest --unique-texts: no prompt twice on a server, so that a server
#                                   caching prompt prefixes (sglang-omni) meets new text as the others do; 0: the
#                                   shipped texts as they are (as every run up to 2026-11-27's three-way sent them)
#   EXTRA_BODY='{"stream_format": "audio"}'  the JSON merged into every request (e.g. with "max_new_tokens": 101 for 100-frame
#                                   requests from servers started at a larger FRAMES)
#   LOG_KEEP_BYTES=20000000         `stop` keeps each server's log whole up to this size, else its first fifth (the
#                                   start's phases) and the rest from its end (vllm-omni's per-request summary tables
#                                   fill a log with about 4 kB a request)
#   START_WAIT_S=540                how long one `start` waits in all before it gives up (run it again to resume)
#   KV_WAIT_S=420                   the longest wait for a talker's KV cache line before starting the next anyway
#   PYTHON=python3
set -uo pipefail
cd "$(dirname "$0")/../.."
REPO=$PWD
PYTHON=${PYTHON:-python3}
PROC_STAT=${PROC_STAT:-/proc/stat}  # the host's CPU time counters (a stand-in in the tests)
WORK=${WORK:-/tmp/side-by-side}
OUT=${OUT:-$WORK/results}
CACHE=${CACHE:-$WORK/compile-cache}
PROFILE=${PROFILE:-deploy/vllm-omni/customvoice.yaml}
MEMORY=${MEMORY:-0.14}
FRAMES=${FRAMES:-100}
PROFILE_SET=${PROFILE_SET:-}
TARGETS=${TARGETS:-service vllm-omni alone}
SWEEP_TARGETS=${SWEEP_TARGETS:-$TARGETS}
SERVICE_ENV=${SERVICE_ENV:-}
SERVICE_B_ENV=${SERVICE_B_ENV:-}
SERVICE_C_ENV=${SERVICE_C_ENV:-}
OMNI_ENV=${OMNI_ENV:-}
OMNI_B_ENV=${OMNI_B_ENV:-}
SGLANG_ENV=${SGLANG_ENV:-}
SGLANG_PORT=${SGLANG_PORT:-8006}
SGLANG_SITE=${SGLANG_SITE:-/tmp/sglang-omni/site}
SGLANG_MEMORY=${SGLANG_MEMORY:-0.6}
SGLANG_ARGS=${SGLANG_ARGS:-}
SGLANG_BODY=${SGLANG_BODY:-'{"stream": true, "max_new_tokens": 100}'}
SGLANG_BENCH_BODY=${SGLANG_BENCH_BODY:-}
SERVICE_SGLANG_PORT=${SERVICE_SGLANG_PORT:-8007}
SERVICE_SGLANG_ENV=${SERVICE_SGLANG_ENV:-}
SERVICE_SGLANG_B_PORT=${SERVICE_SGLANG_B_PORT:-8008}
SERVICE_SGLANG_B_ENV=${SERVICE_SGLANG_B_ENV:-}
SERVICE_SGLANG_BODY=${SERVICE_SGLANG_BODY:-'{"stream_format": "audio", "max_new_tokens": 100}'}
MPS=${MPS:-0}
SERVICE_PORT=${SERVICE_PORT:-8000}
OMNI_PORT=${OMNI_PORT:-8001}
ALONE_PORT=${ALONE_PORT:-8002}
SERVICE_B_PORT=${SERVICE_B_PORT:-8003}
SERVICE_C_PORT=${SERVICE_C_PORT:-8004}
B_PROFILE_SET=${B_PROFILE_SET:-}
B_PROFILE=${B_PROFILE:-$PROFILE}
B_MEMORY=${B_MEMORY:-$MEMORY}
C_PROFILE_SET=${C_PROFILE_SET:-}
OMNI_ON=${OMNI_ON:-a}
OMNI_PROFILE=${OMNI_PROFILE:-}
OMNI_PROFILE_SET=${OMNI_PROFILE_SET:-}
OMNI_MEMORY=${OMNI_MEMORY:-$MEMORY}
OMNI_B_PROFILE=${OMNI_B_PROFILE:-}
OMNI_B_PROFILE_SET=${OMNI_B_PROFILE_SET:-}
OMNI_B_MEMORY=${OMNI_B_MEMORY:-$MEMORY}
OMNI_B_PORT=${OMNI_B_PORT:-8005}
SWEEP_NAME=${SWEEP_NAME:-}
ALONE_STAGE_OVERRIDES=${ALONE_STAGE_OVERRIDES:-}
CODEC_WEIGHTS=${CODEC_WEIGHTS:-dummy}
FRONTEND_WEIGHTS=${FRONTEND_WEIGHTS:-auto}
NAME=${NAME:-qwen3-tts}
VOICE=${VOICE:-vivian}
CONCURRENCY=${CONCURRENCY:-1,8,16,32,64}
RATES=${RATES:-8,14}
REQUESTS=${REQUESTS:-64}
WARMUP=${WARMUP:-8}
DURATION=${DURATION:-30}
ROUNDS=${ROUNDS:-2}
BENCH_PROMPTS=${BENCH_PROMPTS:-3}
BENCH_RATE=${BENCH_RATE:-}
BENCH_SEED=${BENCH_SEED:-}
PLAYBACK_BUFFER_MS=${PLAYBACK_BUFFER_MS:-0}
UNIQUE_TEXTS=${UNIQUE_TEXTS:-1}
PARALLEL=${PARALLEL:-0}
PROFILER_DIR=${PROFILER_DIR:-}
TIMELINE=${TIMELINE:-}
LOADTEST_ARGS=${LOADTEST_ARGS:-}
# vllm-omni's server streams raw pcm only when asked with the OpenAI field; this service accepts it too. With FRAMES
# set to the longest utterance, '{"stream_format": "audio", "max_new_tokens": 101}' makes every server's requests
# exactly 100 frames (vllm-omni 0.30 lowers min_tokens to a request's max_new_tokens; the service's fixed length
# follows it), so one start serves several lengths
EXTRA_BODY=${EXTRA_BODY:-'{"stream_format": "audio"}'}
START_WAIT_S=${START_WAIT_S:-540}
LOG_KEEP_BYTES=${LOG_KEEP_BYTES:-20000000}
KV_WAIT_S=${KV_WAIT_S:-420}
MODEL_SIZE=${MODEL_SIZE:-0.6B}
MODEL=$WORK/model
[ "$MODEL_SIZE" = 0.6B ] || MODEL=$WORK/model-$MODEL_SIZE
BENCH_PROFILE=$WORK/bench-profile.yaml
BENCH_PROFILE_B=$WORK/bench-profile-b.yaml
BENCH_PROFILE_C=$WORK/bench-profile-c.yaml
LOGS=$WORK/logs
KV_LINE="GPU KV cache size"  # vLLM logs it once a stage has profiled its memory and sized its KV cache

# one compile cache for every target: a later start reuses an earlier one's torch.compile / Triton work, and sglang's
# own caches (its JIT-built kernels: the code predictor's graphs wait 90 s for them cold), laid out as the service's
# SPEECH_SGLANG__COMPILE_CACHE_DIR lays them out
export VLLM_CACHE_ROOT=${VLLM_CACHE_ROOT:-$CACHE}
export TORCHINDUCTOR_CACHE_DIR=${TORCHINDUCTOR_CACHE_DIR:-$CACHE/inductor}
export TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-$CACHE/triton}
export SGLANG_CACHE_DIR=${SGLANG_CACHE_DIR:-$CACHE/sglang}
export SGLANG_JIT_CACHE_DIR=${SGLANG_JIT_CACHE_DIR:-$CACHE/sglang/jit}
# the checkout, for loadtest and for what a stage override may name (the service's code2wav scheduler)
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1

log() { echo "[side-by-side $(date -u +%T)] $*"; }

port_of() {
  case $1 in
    service) echo "$SERVICE_PORT" ;; service-b) echo "$SERVICE_B_PORT" ;; service-c) echo "$SERVICE_C_PORT" ;;
    vllm-omni) echo "$OMNI_PORT" ;; vllm-omni-b) echo "$OMNI_B_PORT" ;;
    alone) echo "$ALONE_PORT" ;; sglang) echo "$SGLANG_PORT" ;; service-sglang) echo "$SERVICE_SGLANG_PORT" ;;
    service-sglang-b) echo "$SERVICE_SGLANG_B_PORT" ;;
  esac
}
pidfile_of() {
  case $1 in
    service) echo "/tmp/speech-server-$SERVICE_PORT.pid" ;;
    service-b) echo "/tmp/speech-server-$SERVICE_B_PORT.pid" ;;
    service-c) echo "/tmp/speech-server-$SERVICE_C_PORT.pid" ;;
    vllm-omni) echo "/tmp/vllm-omni-$OMNI_PORT.pid" ;;
    vllm-omni-b) echo "/tmp/vllm-omni-$OMNI_B_PORT.pid" ;;  # as start-vllm-omni.sh names it
    alone) echo "/tmp/engine-alone-$ALONE_PORT.pid" ;;
    sglang) echo "/tmp/sglang-omni-$SGLANG_PORT.pid" ;;
    service-sglang) echo "/tmp/speech-server-$SERVICE_SGLANG_PORT.pid" ;;
    service-sglang-b) echo "/tmp/speech-server-$SERVICE_SGLANG_B_PORT.pid" ;;
  esac
}
settings_of() {  # $1 target: its own settings (NAME=value words), with PROFILER_DIR its profiler's directory
  local own="" profiler=""
  case $1 in
    service) own=$SERVICE_ENV ;; service-b) own=$SERVICE_B_ENV ;; service-c) own=$SERVICE_C_ENV ;;
    vllm-omni) own=$OMNI_ENV ;; vllm-omni-b) own=$OMNI_B_ENV ;; sglang) own=$SGLANG_ENV ;;
    service-sglang) own=$SERVICE_SGLANG_ENV ;; service-sglang-b) own=$SERVICE_SGLANG_B_ENV ;;
  esac
  if [ -n "$PROFILER_DIR" ]; then
    case $1 in
      service*) profiler="SPEECH_PROFILER_DIR=$PROFILER_DIR/$1" ;;
      sglang) profiler="SGLANG_TORCH_PROFILER_DIR=$PROFILER_DIR/$1" ;;
    esac
  fi
  echo "$own${own:+${profiler:+ }}$profiler"
}
env_of() {  # $1 target: its settings that are environment (CPUS and LOAD_CPUS are cores, not environment)
  local word words=()
  for word in $(settings_of "$1"); do case $word in CPUS=* | LOAD_CPUS=*) ;; *) words+=("$word") ;; esac; done
  echo "${words[*]}"
}
word_of() {  # $1 target, $2 NAME: the value of NAME=value among its settings, empty if none; given twice, the last
  # one, as `env` reads them
  local word value=""
  for word in $(settings_of "$1"); do case $word in "$2="*) value=${word#*=} ;; esac; done
  echo "$value"
}
pin_of() {  # $1 target: the words that start a command on its CPUS, its children with it (none: anywhere). Words put
  # before a plain command, not a function around it: in the background $! is then the command's own pid
  local cpus
  cpus=$(word_of "$1" CPUS)
  if [ -n "$cpus" ]; then echo "taskset -c $cpus"; fi
}
ready_path_of() { case $1 in vllm-omni | vllm-omni-b | sglang) echo /health ;; *) echo /ready ;; esac; }
body_of() {  # $1 target: its request body
  case $1 in sglang) echo "$SGLANG_BODY" ;; service-sglang*) echo "$SERVICE_SGLANG_BODY" ;; *) echo "$EXTRA_BODY" ;; esac
}  # $1 target: its request body
url_of() {
  case $1 in
    alone) echo "engine+http://127.0.0.1:$ALONE_PORT" ;;
    replicas) echo "http://127.0.0.1:$SERVICE_PORT,http://127.0.0.1:$SERVICE_B_PORT" ;;
    *) echo "http://127.0.0.1:$(port_of "$1")" ;;
  esac
}
servers() { local t; for t in $TARGETS; do [ "$t" = replicas ] || echo "$t"; done; }  # what runs as a process
log_of() { echo "$LOGS/$1.log"; }

running() {  # $1 target: its recorded process is alive
  local pid
  pid=$(cat "$(pidfile_of "$1")" 2>/dev/null) || return 1
  kill -0 "$pid" 2>/dev/null
}

is_ready() {  # $1 target: it answers its readiness path with 200 (python: no curl needed)
  [ "$1" = replicas ] && { is_ready service && is_ready service-b; return; }
  "$PYTHON" - "http://127.0.0.1:$(port_of "$1")$(ready_path_of "$1")" <<'PY' >/dev/null 2>&1
import sys, urllib.request
sys.exit(0 if urllib.request.urlopen(sys.argv[1], timeout=3).status == 200 else 1)
PY
}

engine_failed() {  # $1 target: the service, up, says its engine failed to start (/health: 503 engine_failed); it
  # stays up for its health checks, but is never to be ready
  case $1 in service | service-b | service-c | service-sglang*) ;; *) return 1 ;; esac
  "$PYTHON" - "http://127.0.0.1:$(port_of "$1")/health" <<'PY' >/dev/null 2>&1
import json, sys, urllib.error, urllib.request
try:
    urllib.request.urlopen(sys.argv[1], timeout=3)
except urllib.error.HTTPError as error:
    sys.exit(0 if error.code == 503 and json.load(error)["error"]["code"] == "engine_failed" else 1)
sys.exit(1)
PY
}

gpu_snapshot() {  # $1 what happened
  [ -f "$OUT/host.txt" ] || host_topology
  { echo "== $(date -u +%T) $1"; nvidia-smi --query-gpu=memory.used,memory.total,utilization.gpu --format=csv 2>&1; } \
    >>"$OUT/gpu.txt"
}

gpu_util_start() {  # $1 a level's folder: every GPU's utilization (the share of each sample's period a kernel ran)
  # sampled every 250 ms while the level runs, into gpu-util.csv (index, %)
  GPU_UTIL_PID=
  command -v nvidia-smi >/dev/null 2>&1 || return 0
  local lines=()  # each sample written as it is taken: a block buffer's samples die with the sampler
  command -v stdbuf >/dev/null 2>&1 && lines=(stdbuf -oL)
  "${lines[@]}" nvidia-smi --query-gpu=index,utilization.gpu --format=csv,noheader,nounits -lms 250 \
    >"$1/gpu-util.csv" 2>/dev/null &
  GPU_UTIL_PID=$!
  # started with SIGINT ignored (no job control here): an interrupted level stops it, then the run
  trap 'kill "$GPU_UTIL_PID" 2>/dev/null; exit 130' INT TERM
}

gpu_util_stop() {  # $1 a level's folder: the sampler stopped; each GPU's samples, mean and share at 90% or more in
  # gpu-util.md (the level's whole span, the load tool's warm-up with it)
  [ -n "${GPU_UTIL_PID:-}" ] || return 0
  trap - INT TERM
  kill "$GPU_UTIL_PID" 2>/dev/null
  wait "$GPU_UTIL_PID" 2>/dev/null
  GPU_UTIL_PID=
  awk -F', *' '$2 ~ /^[0-9]+$/ { n[$1]++; sum[$1] += $2; if ($2 >= 90) busy[$1]++ }
    END {
      print "| GPU | samples | mean utilization % | samples at 90% or more |"
      print "| --- | --- | --- | --- |"
      for (g in n) printf "| %s | %d | %.0f | %.0f%% |\n", g, n[g], sum[g] / n[g], 100 * busy[g] / n[g]
    }' "$1/gpu-util.csv" | { read -r head; read -r rule; printf '%s\n%s\n' "$head" "$rule"; sort -n -t'|' -k2; } \
    >"$1/gpu-util.md"
}

host_cpu_read() {  # $1 a file: the host's CPU time counters now (the first line of /proc/stat: every core's ticks)
  head -n 1 "$PROC_STAT" >"$1" 2>/dev/null || rm -f "$1"
}

host_cpu_table() {  # $1 a level's folder: where the host's CPU time went between host-cpu-before.txt and -after.txt,
  # in host-cpu.md: busy (user, nice, system, irq, softirq), waiting on I/O, and stolen (a virtual machine's cores
  # ready to run while its hypervisor ran something else: what makes one start of a server slower than the next on
  # the same host)
  [ -f "$1/host-cpu-before.txt" ] && [ -f "$1/host-cpu-after.txt" ] || return 0
  cat "$1/host-cpu-before.txt" "$1/host-cpu-after.txt" | awk '
    NR == 1 { for (i = 2; i <= 9; i++) before[i] = $i }
    NR == 2 { for (i = 2; i <= 9; i++) { d[i] = $i - before[i]; total += d[i] } }
    END {
      if (total <= 0) exit
      print "| host CPU busy % | iowait % | steal % |"
      print "| --- | --- | --- |"
      printf "| %.0f | %.1f | %.1f |\n", 100 * (d[2] + d[3] + d[4] + d[7] + d[8]) / total, 100 * d[6] / total,
        100 * d[9] / total
    }' >"$1/host-cpu.md"
}

host_topology() {  # once a run, into host.txt: which cores and NUMA node each GPU is near (nvidia-smi's matrix) and
  # the host's NUMA nodes, so that targets pinned to cores (CPUS) can be read against their GPU's side of the host
  {
    echo "== $(date -u +%T) nvidia-smi topo -m"
    nvidia-smi topo -m 2>&1
    echo "== lscpu"
    lscpu 2>&1 | grep -Ei '^(model name|socket|core|thread|cpu\(s\)|numa)'
  } >"$OUT/host.txt"
}

metrics_snapshot() {  # $1 a sweep's folder, $2 before|after: each target's /metrics there, where it has one (not
  # sgl-omni serve), so that a level's server-side figures (the event loop's lag, TTFA by phase) are its difference
  local target
  for target in $SWEEP_TARGETS; do
    case $target in replicas | alone | sglang) continue ;; esac
    "$PYTHON" - "http://127.0.0.1:$(port_of "$target")/metrics" "$1/metrics-$target-$2.txt" <<'PY' >/dev/null 2>&1
import sys, urllib.request
body = urllib.request.urlopen(sys.argv[1], timeout=5).read()
open(sys.argv[2], "wb").write(body)
PY
  done
}

bench_profile() {  # $1 the copy to write, $2 its overrides (';'-separated), $3 its source (PROFILE), $4 its memory
  local sets=() item items
  IFS=';' read -ra items <<<"$2"
  for item in "${items[@]}"; do [ -n "$item" ] && sets+=(--set "$item"); done
  "$PYTHON" deploy/gpu/bench_profile.py "${3:-$PROFILE}" "$1" --memory "${4:-$MEMORY}" --frames "$FRAMES" "${sets[@]}"
}

omni_copy() { echo "$WORK/bench-profile-$1.yaml"; }  # $1 vllm-omni or vllm-omni-b: the copy that server runs
omni_source() {  # $1 vllm-omni or vllm-omni-b: the profile its copy is made from, as given
  case $1 in
    vllm-omni-b) echo "$OMNI_B_PROFILE" ;;
    *) if [ -z "$OMNI_PROFILE" ] && [ "$OMNI_ON" = b ]; then echo "$B_PROFILE"; else echo "${OMNI_PROFILE:-$PROFILE}"; fi ;;
  esac
}

omni_profile() {  # $1 vllm-omni or vllm-omni-b: write its copy (a server that runs keeps the one it started on)
  local target=$1 sets memory
  if running "$target" && [ -f "$(omni_copy "$target")" ]; then return 0; fi
  if [ "$target" = vllm-omni-b ]; then
    [ -n "$OMNI_B_PROFILE" ] || { log "vllm-omni-b needs OMNI_B_PROFILE (its deploy profile)"; return 1; }
    sets=$OMNI_B_PROFILE_SET memory=$OMNI_B_MEMORY
  elif [ -n "$OMNI_PROFILE" ]; then
    if [ "$OMNI_ON" != a ]; then
      log "OMNI_ON=$OMNI_ON picks one of the service's copies; with OMNI_PROFILE, give OMNI_PROFILE_SET"; return 1
    fi
    sets=$OMNI_PROFILE_SET memory=$OMNI_MEMORY
  else  # the service's profile with the overrides of its copy a, b or c
    case $OMNI_ON in
      a) sets=$PROFILE_SET ;;
      b) sets="$PROFILE_SET;$B_PROFILE_SET" ;;
      c) sets="$PROFILE_SET;$C_PROFILE_SET" ;;
      *) log "OMNI_ON is a, b or c, not $OMNI_ON"; return 1 ;;
    esac
    memory=$OMNI_MEMORY
  fi
  if [ -n "$PROFILER_DIR" ]; then  # both stages' torch profiler, idle until /start_profile (no Python stacks)
    local stage config="{profiler: torch, torch_profiler_dir: $PROFILER_DIR/$target, torch_profiler_with_stack: false}"
    for stage in 0 1; do sets="$sets;stages.$stage.profiler_config=$config"; done
  fi
  bench_profile "$(omni_copy "$target")" "$sets" "$(omni_source "$target")" "$memory"
}

prepare() {
  mkdir -p "$WORK" "$OUT" "$LOGS" "$CACHE"
  [ -f "$MODEL/config.json" ] ||
    "$PYTHON" -m app.tools.qwen3_tts_model_dir "$MODEL" --variant custom_voice --size "$MODEL_SIZE" || return 1
  if [ "$CODEC_WEIGHTS" = real ] && [ ! -f "$MODEL/speech_tokenizer/model.safetensors" ]; then
    "$PYTHON" deploy/gpu/codec_weights.py "$MODEL" || return 1
  fi
  if [ "$FRONTEND_WEIGHTS" = auto ]; then  # a preprocessing process of its own loads the prompt's weights
    FRONTEND_WEIGHTS=none
    local where target
    for target in service-sglang service-sglang-b; do
      case " $TARGETS " in *" $target "*) ;; *) continue ;; esac
      where=$(word_of "$target" SPEECH_SGLANG__PREPROCESSING)
      case $where in cpu | gpu) FRONTEND_WEIGHTS=real ;; esac
    done
  fi
  if [ "$FRONTEND_WEIGHTS" = real ] && [ ! -f "$MODEL/prompt-frontend.safetensors" ]; then
    PYTHONPATH="$SGLANG_SITE:$PYTHONPATH" "$PYTHON" deploy/gpu/frontend_weights.py "$MODEL" || return 1
  fi
  local target keep=0
  for target in $(servers); do
    case $target in
      vllm-omni | vllm-omni-b) omni_profile "$target" || return 1 ;;  # a copy each
      *) running "$target" && keep=1 ;;
    esac
  done
  if [ $keep = 1 ] && [ -f "$BENCH_PROFILE" ]; then
    log "servers are running on $BENCH_PROFILE: kept as it is (stop them to change the profile)"; return 0
  fi
  bench_profile "$BENCH_PROFILE" "$PROFILE_SET" || return 1
  bench_profile "$BENCH_PROFILE_B" "$PROFILE_SET;$B_PROFILE_SET" "$B_PROFILE" "$B_MEMORY" || return 1
  # the service's three copies at once, like one profile: a target added while others run finds its copy
  bench_profile "$BENCH_PROFILE_C" "$PROFILE_SET;$C_PROFILE_SET" || return 1
  cp "$BENCH_PROFILE" "$OUT/profile.yaml" && cp "$BENCH_PROFILE_B" "$OUT/profile-b.yaml" || return 1
}

profile_of() {  # $1 a, b or c: that profile copy's path; the results keep profile C only once a target runs it
  case $1 in
    b) echo "$BENCH_PROFILE_B" ;;
    c) cp "$BENCH_PROFILE_C" "$OUT/profile-c.yaml" && echo "$BENCH_PROFILE_C" ;;
    *) echo "$BENCH_PROFILE" ;;
  esac
}

codec_overrides() {  # $1 stage overrides (JSON, may be empty): with CODEC_WEIGHTS=real, plus code2wav's load_format
  if [ "$CODEC_WEIGHTS" != real ]; then echo "$1"; return; fi
  "$PYTHON" -c 'import json, sys
overrides = json.loads(sys.argv[1] or "{}")
overrides.setdefault("1", {})["load_format"] = "auto"
print(json.dumps(overrides, separators=(",", ":")))' "$1"  # no spaces: it may travel as a NAME=value word
}

launch() {  # $1 target
  local log codec cpus
  log=$(log_of "$1")
  codec=$(codec_overrides "")
  cpus=$(word_of "$1" CPUS)
  [ -n "$cpus" ] && echo "$(date -u +%FT%TZ) $1: on cores $cpus (taskset -c $cpus)" >>"$OUT/commands.txt"
  case $1 in
    service | service-b | service-c)
      local profile settings
      settings=$(env_of "$1")
      profile=$(profile_of "${1#service-}")  # service-b: b, service-c: c, service: A's
      case " $settings " in  # stage overrides among the target's own settings are its own, under either name
        *" SPEECH_OMNI__STAGE_OVERRIDES="* | *" SPEECH_STAGE_OVERRIDES="*) ;;
        *) [ -n "$codec" ] && settings="SPEECH_OMNI__STAGE_OVERRIDES=$codec $settings" ;;
      esac
      echo "$(date -u +%FT%TZ) $1: source profile $(source_of "$1")" >>"$OUT/commands.txt"
      echo "$(date -u +%FT%TZ) $1: profile $profile, settings: ${settings:-none}" >>"$OUT/commands.txt"
      # fixed length: every request runs to the profile's max_tokens (FRAMES + 1); warm-up requests to their own
      # shellcheck disable=SC2086,SC2046  # the settings and the pinning are split into words on purpose
      $(pin_of "$1") env $settings PORT=$(port_of "$1") LOG=$log PYTHON=$PYTHON \
        SPEECH_OMNI__MODEL=$MODEL SPEECH_OMNI__LOAD_FORMAT=dummy \
        SPEECH_OMNI__DEPLOY_CONFIG=$profile SPEECH_OMNI__FIXED_LENGTH=true SPEECH_OMNI__SERVED_MODEL_NAME=$NAME \
        SPEECH_OMNI__COMPILE_CACHE_DIR=$CACHE deploy/gpu/start-server.sh
      ;;
    vllm-omni | vllm-omni-b)
      local profile extra=() settings
      settings=$(env_of "$1")
      profile=$(omni_copy "$1")
      cp "$profile" "$OUT/profile-$1.yaml" || return 1
      [ -n "$codec" ] && extra=(--stage-overrides "$codec")
      echo "$(date -u +%FT%TZ) $1: source profile $(omni_source "$1")" >>"$OUT/commands.txt"
      echo "$(date -u +%FT%TZ) $1: profile $profile, stage overrides ${codec:-none}, settings: ${settings:-none}" \
        >>"$OUT/commands.txt"
      # shellcheck disable=SC2086,SC2046  # the settings and the pinning are split into words on purpose
      $(pin_of "$1") env $settings PORT=$(port_of "$1") LOG=$log PYTHON=$PYTHON MODEL=$MODEL \
        DEPLOY_CONFIG=$profile LOAD_FORMAT=dummy \
        NAME=$NAME COMPILE_CACHE_DIR=$CACHE deploy/gpu/start-vllm-omni.sh "${extra[@]}"
      ;;
    sglang)
      local settings args
      settings=$(env_of sglang)
      [ -d "$SGLANG_SITE/sglang_omni" ] || { log "sglang: no sglang-omni in $SGLANG_SITE (deploy/gpu/sglang-omni/carry.sh)"; return 1; }
      # its talker, code predictor and codec decoder as it ships them; the talker on random weights
      args=(-m sglang_omni.cli serve --model-path "$MODEL" --port "$SGLANG_PORT" --tts_engine.engine.load_format dummy
        --skip-server-warmup --mem-fraction-static "$SGLANG_MEMORY")
      # shellcheck disable=SC2206  # SGLANG_ARGS is split into words on purpose
      args+=($SGLANG_ARGS)
      echo "$(date -u +%FT%TZ) sglang: $(printf '%q ' "$PYTHON" "${args[@]}"), settings: ${settings:-none}" >>"$OUT/commands.txt"
      # its own packages first, then the fixed-length patch; a taken port is an error, not another port; its talker's
      # process-group port claimed in the host's folder, as the service's engine does, whatever TMPDIR it has (a
      # folder given in the environment wins, as with the engine)
      # shellcheck disable=SC2086,SC2046  # the settings and the pinning are split into words on purpose
      $(pin_of sglang) env $settings \
        PYTHONPATH="$REPO/app/engines/sglang/stage_plugins/process_start:$SGLANG_SITE:$PYTHONPATH" \
        QWEN3_TTS_FIXED_LENGTH=1 SGLANG_OMNI_STRICT_PORT=1 SGLANG_OMNI_STARTUP_TIMEOUT=1800 HF_HUB_OFFLINE=1 \
        SGLANG_OMNI_PORT_CLAIM_DIR="${SGLANG_OMNI_PORT_CLAIM_DIR:-/tmp/sglang-omni-port-claims}" \
        setsid nohup "$PYTHON" "${args[@]}" >"$log" 2>&1 </dev/null &
      echo $! >"$(pidfile_of sglang)"
      echo "sgl-omni serve starting on port $SGLANG_PORT, pid $!, log $log"
      ;;
    service-sglang | service-sglang-b)
      local settings
      settings=$(env_of "$1")
      [ -d "$SGLANG_SITE/sglang_omni" ] || { log "$1: no sglang-omni in $SGLANG_SITE"; return 1; }
      echo "$(date -u +%FT%TZ) $1: memory $SGLANG_MEMORY, settings: ${settings:-none}" >>"$OUT/commands.txt"
      # shellcheck disable=SC2086,SC2046  # the settings and the pinning are split into words on purpose
      $(pin_of "$1") env $settings ENGINE=sglang PORT="$(port_of "$1")" LOG=$log \
        PYTHON=$PYTHON PYTHONPATH="$SGLANG_SITE:$PYTHONPATH" \
        SPEECH_SGLANG__MODEL=$MODEL SPEECH_SGLANG__LOAD_FORMAT=dummy SPEECH_SGLANG__FIXED_LENGTH=true \
        SPEECH_SGLANG__SERVED_MODEL_NAME=$NAME SPEECH_SGLANG__MEM_FRACTION_STATIC=$SGLANG_MEMORY HF_HUB_OFFLINE=1 \
        deploy/gpu/start-server.sh
      ;;
    alone)
      local overrides=() stage_overrides
      stage_overrides=$(codec_overrides "$ALONE_STAGE_OVERRIDES")
      [ -n "$stage_overrides" ] && overrides=(--stage-overrides "$stage_overrides")
      echo "$(date -u +%FT%TZ) alone: source profile $PROFILE" >>"$OUT/commands.txt"
      echo "$(date -u +%FT%TZ) alone: stage overrides ${stage_overrides:-none}" >>"$OUT/commands.txt"
      setsid nohup "$PYTHON" -m loadtest.engine_alone --model "$MODEL" --deploy-config "$BENCH_PROFILE" \
        --load-format dummy --served-model-name "$NAME" --compile-cache-dir "$CACHE" --port "$ALONE_PORT" \
        "${overrides[@]}" >"$log" 2>&1 </dev/null &
      echo $! >"$(pidfile_of alone)"
      echo "engine_alone starting on port $ALONE_PORT, pid $!, log $log"
      ;;
  esac
}

wait_for() {  # $1 target, $2 "kv" (its talker sized its KV cache) or "ready"; until the deadline $3 (epoch s)
  local target=$1 what=$2 deadline=$3 since
  since=$(date +%s)
  while true; do
    if [ "$what" = kv ] && grep -q "$KV_LINE" "$(log_of "$target")" 2>/dev/null; then
      log "$target: $(grep -m1 -o "$KV_LINE.*" "$(log_of "$target")")"; return 0
    fi
    if is_ready "$target"; then log "$target: ready"; return 0; fi
    if ! running "$target"; then
      log "$target died; the end of its log:"; tail -n 40 "$(log_of "$target")"; return 2
    fi
    if engine_failed "$target"; then
      log "$target: its engine failed to start; the end of its log:"; tail -n 40 "$(log_of "$target")"; return 2
    fi
    if [ "$what" = kv ] && [ $(( $(date +%s) - since )) -ge "$KV_WAIT_S" ]; then
      log "$target: no '$KV_LINE' line after $KV_WAIT_S s; starting the next one anyway"; return 0
    fi
    if [ "$(date +%s)" -ge "$deadline" ]; then return 1; fi
    sleep 3
  done
}

# the daemon answers on its control pipe (pgrep cannot tell: the name is longer than the 15 characters it matches)
mps_running() { echo get_server_list | timeout 10 nvidia-cuda-mps-control >/dev/null 2>&1; }
# `quit` returns once every client has gone: bounded, so that a leftover GPU process cannot hang `stop`
mps_quit() { echo quit | timeout 60 nvidia-cuda-mps-control; }

mps_start() {  # the MPS control daemon, before any CUDA context; proven by one context through it
  command -v nvidia-cuda-mps-control >/dev/null || { log "MPS=1 but nvidia-cuda-mps-control is not installed"; return 1; }
  if ! mps_running; then
    # its output to the log, not to this script's stdout, which a caller may be piping (a daemon holding the pipe)
    setsid nvidia-cuda-mps-control -d </dev/null >>"$LOGS/mps.log" 2>&1 || {
      log "nvidia-cuda-mps-control -d failed (see $LOGS/mps.log)"; return 1; }
    echo "$(date -u +%FT%TZ) nvidia-cuda-mps-control -d" >>"$OUT/commands.txt"
  fi
  if ! "$PYTHON" -c 'import torch; torch.zeros(1, device="cuda"); torch.cuda.synchronize()' >>"$LOGS/mps.log" 2>&1; then
    log "no CUDA context through MPS (see $LOGS/mps.log): quitting the daemon"
    mps_quit
    return 1
  fi
  log "MPS: $(echo get_server_list | nvidia-cuda-mps-control 2>&1 | head -1 | sed 's/^/server /')"
}

cmd_start() {
  prepare || { log "could not prepare the model directory and profile"; return 1; }
  if [ "$MPS" = 1 ]; then mps_start || return 1; fi
  local deadline=$(( $(date +%s) + START_WAIT_S )) target rc
  for target in $(servers); do
    if running "$target"; then
      log "$target: already running (pid $(cat "$(pidfile_of "$target")"))"
    else
      echo "$(date -u +%FT%TZ) start $target" >>"$OUT/commands.txt"
      launch "$target" || return 1
      gpu_snapshot "launched $target"
    fi
    # the next start waits until this one's memory profile is done, so that the two do not measure each other
    wait_for "$target" kv "$deadline"; rc=$?
    [ $rc -eq 2 ] && return 2
    [ $rc -eq 1 ] && { log "still starting after $START_WAIT_S s: run '$0 start' again to go on waiting"; return 3; }
  done
  for target in $(servers); do
    wait_for "$target" ready "$deadline"; rc=$?
    [ $rc -eq 2 ] && return 2
    [ $rc -eq 1 ] && { log "$target not ready yet: run '$0 start' again to go on waiting"; return 3; }
  done
  gpu_snapshot "all ready"
  log "all ready: $TARGETS"
}

sweep_folder() {  # $1 closed, open or bench: with -$SWEEP_NAME, then -2, -3, ... past folders that hold results already
  local base=$1${SWEEP_NAME:+-$SWEEP_NAME} n=2
  local name=$base
  while [ -e "$OUT/$name/results.json" ] || [ -e "$OUT/$name/README.md" ]; do name=$base-$n; n=$((n + 1)); done
  echo "$name"
}

source_of() {  # $1 a sweep target: the profile it runs, as given
  case $1 in
    vllm-omni | vllm-omni-b) omni_source "$1" ;;
    service-b) echo "$B_PROFILE" ;;
    sglang) echo "sglang-omni $(sglang_version)" ;;
    service-sglang*) echo "the service's sglang engine on sglang-omni $(sglang_version)" ;;
    *) echo "$PROFILE" ;;
  esac
}

sglang_version() { PYTHONPATH="$SGLANG_SITE" "$PYTHON" -c 'from importlib.metadata import version; print(version("sglang-omni"))' 2>/dev/null; }

loadtest() {  # $1 closed or open, then speech-loadtest's level arguments
  local name args=() bodies=() target asked=$1${SWEEP_NAME:+-$SWEEP_NAME}
  name=$(sweep_folder "$1")
  [ "$name" = "$asked" ] || log "$OUT/$asked holds results: this sweep goes to $OUT/$name"
  shift
  mkdir -p "$OUT/$name"  # OUT may be a fresh folder per sweep: the command line must land beside its results
  : >"$OUT/$name/targets.txt"
  for target in $SWEEP_TARGETS; do
    is_ready "$target" || { log "$target is not ready: run '$0 start' first"; return 1; }
    args+=(--target "$(url_of "$target")")
    bodies+=(--extra-body "$(body_of "$target")")
    # speech-loadtest names a target by its URL: this says which server each URL is, on which profile
    echo "$target $(url_of "$target") $(source_of "$target")" >>"$OUT/$name/targets.txt"
  done
  # vllm-omni's server streams raw pcm only when asked with the OpenAI field; this service accepts it too
  # one request body per target, in --target order
  args+=(--model "$NAME" --voice "$VOICE" --format pcm "${bodies[@]}"
    --warmup "$WARMUP" --rounds "$ROUNDS" --playback-buffer-ms "$PLAYBACK_BUFFER_MS" --no-progress --out "$OUT/$name"
    "$@")
  [ "$UNIQUE_TEXTS" = 1 ] && args+=(--unique-texts)
  # shellcheck disable=SC2206  # LOADTEST_ARGS is split into words on purpose
  args+=($LOADTEST_ARGS)
  local line
  line=$(printf '%q ' "$PYTHON" -m loadtest.cli "${args[@]}")  # quoted: the line can be run again as it is
  echo "$(date -u +%FT%TZ) $name: $(paste -sd ';' "$OUT/$name/targets.txt")" >>"$OUT/commands.txt"
  echo "$(date -u +%FT%TZ) $line" >>"$OUT/commands.txt"
  log "$line"
  gpu_snapshot "before $name"
  metrics_snapshot "$OUT/$name" before
  host_cpu_read "$OUT/$name/host-cpu-before.txt"
  gpu_util_start "$OUT/$name"
  "$PYTHON" -m loadtest.cli "${args[@]}"
  local rc=$?
  gpu_util_stop "$OUT/$name"
  host_cpu_read "$OUT/$name/host-cpu-after.txt"
  host_cpu_table "$OUT/$name"
  gpu_snapshot "after $name"
  metrics_snapshot "$OUT/$name" after
  if compgen -G "$OUT/$name/metrics-*-after.txt" >/dev/null; then  # the servers' side of the level, in one table
    "$PYTHON" deploy/gpu/level_metrics.py "$OUT/$name" >"$OUT/$name/server-metrics.md" 2>&1
  fi
  return $rc
}

cmd_sweep_closed() { loadtest closed --concurrency "$CONCURRENCY" --requests "$REQUESTS"; }
cmd_sweep_open() { loadtest open --rate "$RATES" --duration "$DURATION" --requests "$REQUESTS"; }

bench_body() {  # $1 target: the benchmark's --extra-body, the voice and its body's fields but how it streams (its own)
  local body
  body=$(body_of "$1")
  [ "$1" = sglang ] && [ -n "$SGLANG_BENCH_BODY" ] && body=$SGLANG_BENCH_BODY
  "$PYTHON" -c 'import json, sys
body = {"voice": sys.argv[1], **json.loads(sys.argv[2] or "{}")}
for own in ("stream_format", "stream"):
    body.pop(own, None)
print(json.dumps(body, separators=(",", ":")))' "$VOICE" "$body"
}

cmd_sweep_bench() {  # vllm-omni's own benchmark, each level against every target in turn, then one table
  local name level target body url log rc=0 bench
  name=$(sweep_folder bench)
  mkdir -p "$OUT/$name"
  # vllm-omni installed with --target has no `vllm` program: its CLI's main, as `vllm` would call it
  bench=(-c "import sys; from vllm_omni.entrypoints.cli.main import main; sys.argv[0] = 'vllm'; sys.exit(main())")
  : >"$OUT/$name/targets.txt"
  for target in $SWEEP_TARGETS; do
    case $target in alone | replicas) log "$target: not an HTTP speech server to vllm bench; skipped"; continue ;; esac
    echo "$target $(url_of "$target") $(source_of "$target")" >>"$OUT/$name/targets.txt"
  done
  local seed=${BENCH_SEED:-$(($(cat "$WORK/bench-seed" 2>/dev/null || echo 0) + 1))}
  for level in ${CONCURRENCY//,/ }; do
    [ -n "$BENCH_SEED" ] || { mkdir -p "$WORK" && echo "$seed" >"$WORK/bench-seed"; }  # taken before it is sent
    while read -r target url _; do
      is_ready "$target" || { log "$target is not ready: run '$0 start' first"; return 1; }
      log="$OUT/$name/c$level-$target.log"
      body=$(bench_body "$target") || return 1
      local prompts=$((BENCH_PROMPTS * level))
      [ "$prompts" -ge 16 ] || prompts=16  # a low level still gets a sample to take a p95 of
      local args=(bench serve --omni --backend openai-audio-speech --base-url "$url" --endpoint /v1/audio/speech
        --model "$NAME" --tokenizer "$MODEL" --dataset-name random --random-input-len 24 --random-output-len 1
        --seed "$seed" --num-prompts "$prompts" --max-concurrency "$level" --extra-body "$body"
        --percentile-metrics audio_ttfp,audio_rtf,e2el --metric-percentiles 50,95
        --save-result --result-dir "$OUT/$name" --result-filename "c$level-$target.json")
      [ -n "$BENCH_RATE" ] && args+=(--request-rate "$BENCH_RATE")
      echo "$(date -u +%FT%TZ) $name c=$level $target: $(printf '%q ' "$PYTHON" "${bench[@]}" "${args[@]}")" \
        >>"$OUT/commands.txt"
      log "vllm bench: c=$level${BENCH_RATE:+ at $BENCH_RATE req/s} against $target ($url)"
      gpu_snapshot "before $name c=$level $target"
      "$PYTHON" "${bench[@]}" "${args[@]}" >"$log" 2>&1 || { rc=$?; log "vllm bench failed on $target (see $log)"; }
    done <"$OUT/$name/targets.txt"
    seed=$((seed + 1))
  done
  "$PYTHON" deploy/gpu/bench_referee.py "$OUT/$name" >"$OUT/$name/README.md" && cat "$OUT/$name/README.md"
  return $rc
}

profile_call() {  # $1 target, $2 start or stop, $3 the run's name: its profiler, through the server's own route
  local path body
  case $1 in
    service*) path=/admin/profile/$2 body="{\"run_id\": \"$3\"${TIMELINE:+, \"timeline\": true}}" ;;
    sglang)  # its trace: $PROFILER_DIR/sglang/<run>/trace_pid*; its timeline: events_*.jsonl in that folder
      if [ -n "$TIMELINE" ]; then
        path=/${2}_request_profile body="{\"run_id\": \"$3\", \"event_dir\": \"$PROFILER_DIR/sglang/$3\"}"
      else path=/${2}_profile body="{\"run_id\": \"$3\"}"; fi ;;
    vllm-omni | vllm-omni-b) path=/${2}_profile body='{"stages": [0, 1]}' ;;  # each stage's folder: <time>_stage<N>_*
    *) log "$1 has no profiler route"; return 1 ;;
  esac
  echo "$(date -u +%FT%TZ) profile $3: POST $(url_of "$1")$path $body" >>"$OUT/commands.txt"
  # a stop answers once the traces are written (vllm-omni): minutes for a long window
  "$PYTHON" - "$(url_of "$1")$path" "$body" <<'PY'
import sys
import urllib.request

request = urllib.request.Request(sys.argv[1], sys.argv[2].encode(), {"Content-Type": "application/json"})
with urllib.request.urlopen(request, timeout=900) as answer:
    print(answer.status, answer.read().decode(errors="replace")[:300])
PY
}

cmd_profile() {  # every sweep target's profiler on around one closed-loop level; SWEEP_NAME names the run
  [ -n "$PROFILER_DIR" ] || { log "profile: set PROFILER_DIR when the servers start, and here"; return 1; }
  local run=${SWEEP_NAME:-profile} target targets=() started=() rc=0
  [[ $run =~ ^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$ ]] || { log "profile: SWEEP_NAME '$run' is not a run name"; return 1; }
  case $CONCURRENCY in *,*) log "profile: one level a window (CONCURRENCY=$CONCURRENCY)"; return 1 ;; esac
  for target in $SWEEP_TARGETS; do
    case $target in alone | replicas) log "$target: no profiler route; not profiled" ;; *) targets+=("$target") ;; esac
  done
  for target in "${targets[@]}"; do
    if profile_call "$target" start "$run"; then started+=("$target")
    else log "profile: $target's profiler did not start"; rc=1; break; fi
  done
  if [ $rc = 0 ]; then
    # a timeline: the service's stage processes start recording at their next look at its flag (every quarter of a
    # second), so that a request sent sooner could miss a stage's first events
    [ -n "${TIMELINE-}" ] && sleep 0.5
    WARMUP=${PROFILE_WARMUP:-0} ROUNDS=1 SWEEP_TARGETS="${targets[*]}" SWEEP_NAME=profile-$run cmd_sweep_closed || rc=1
  fi
  for target in "${started[@]}"; do profile_call "$target" stop "$run" || rc=1; done  # never left running
  log "profile $run: traces in $PROFILER_DIR/<target>"
  return $rc
}

in_parallel() {  # $1 a sweep (cmd_sweep_closed, cmd_sweep_open, cmd_sweep_bench): every target of SWEEP_TARGETS
  # from a process of its own, all at once, each on its LOAD_CPUS, into $OUT/<target>; fails where any one failed
  local target base=$OUT rc=0
  local -A pids=()
  set -m  # each sweep its own process group: an interrupted run stops every load tool with it
  trap 'for pid in "${pids[@]}"; do kill -TERM -- "-$pid" 2>/dev/null; done; exit 130' INT TERM
  for target in $SWEEP_TARGETS; do
    mkdir -p "$base/$target"
    (
      export SWEEP_TARGETS=$target OUT=$base/$target
      cpus=$(word_of "$target" LOAD_CPUS)
      if [ -n "$cpus" ]; then taskset -cp "$cpus" "$BASHPID" >/dev/null || exit 1; fi
      "$1"
    ) >>"$base/$target.log" 2>&1 &
    pids[$target]=$!
  done
  for target in $SWEEP_TARGETS; do
    if wait "${pids[$target]}"; then log "$target: done ($base/$target)"
    else rc=1; log "$target: the sweep failed; the end of $base/$target.log:"; tail -n 20 "$base/$target.log"; fi
  done
  trap - INT TERM
  set +m
  return $rc
}

sweep() { if [ "$PARALLEL" = 1 ]; then in_parallel "$1"; else "$1"; fi; }  # $1 the sweep

cmd_status() {
  local target
  for target in $(servers); do
    if is_ready "$target"; then echo "$target: ready on port $(port_of "$target")"
    elif running "$target"; then echo "$target: starting (log $(log_of "$target"))"
    else echo "$target: not running"; fi
  done
}

keep_log() {  # $1 a server's log, $2 its copy: whole up to LOG_KEEP_BYTES, else its start and its end, marked
  local size head
  size=$(stat -c %s "$1")
  if [ "$size" -le "$LOG_KEEP_BYTES" ]; then cp "$1" "$2"; return; fi
  head=$((LOG_KEEP_BYTES / 5))
  { head -c "$head" "$1"
    printf '\n[side-by-side: %s bytes of this log left out here]\n' $((size - LOG_KEEP_BYTES))
    tail -c $((LOG_KEEP_BYTES - head)) "$1"; } >"$2"
}

cmd_stop() {
  local target
  mkdir -p "$OUT/logs"
  for target in $(servers); do
    PIDFILE=$(pidfile_of "$target") deploy/gpu/stop-server.sh "$(port_of "$target")"
    [ -f "$(log_of "$target")" ] && keep_log "$(log_of "$target")" "$OUT/logs/$target.log"
  done
  if [ "$MPS" = 1 ] && mps_running; then  # MPS=1 here too: a daemon this script did not start is not its to quit
    mps_quit && log "MPS daemon quit"
  fi
  gpu_snapshot "stopped"
}

case ${1:-} in
  start) cmd_start ;;
  sweep) sweep cmd_sweep_closed && sweep cmd_sweep_open ;;
  sweep-closed) sweep cmd_sweep_closed ;;
  sweep-open) sweep cmd_sweep_open ;;
  sweep-bench) sweep cmd_sweep_bench ;;
  profile) sweep cmd_profile ;;
  status) cmd_status ;;
  stop) cmd_stop ;;
  all)
    cmd_start && sweep cmd_sweep_closed && sweep cmd_sweep_open
    rc=$?
    cmd_stop
    exit $rc
    ;;
  *) sed -n '2,20p' "$0"; exit 64 ;;
esac
