#!/usr/bin/env bash
# A lever measured across starts, on one GPU: the service on its sglang engine started once per variant, in the order
# given (A B A B, so that a start's own luck is seen as the spread between the A starts), each alone on the GPU, swept
# the same way, stopped, and its results kept under $OUT/<variant>/. Built on deploy/gpu/side-by-side.sh (its
# settings apply: PYTHON, WORK, CODEC_WEIGHTS, FRAMES, ...), whose compile caches every start after the first reuses.
#
#   VARIANTS="a1:A b1:B a2:A b2:B" LEVER_B="SPEECH_SGLANG__PREPROCESSING=cpu" deploy/gpu/lever-starts.sh
#
# Settings (environment):
#   VARIANTS                 name:LEVER words, run in order; the variant's settings are LEVER_<LEVER> (NAME=value words,
#                            empty for the baseline), added to BASE_ENV as the server's SERVICE_SGLANG_ENV
#   BASE_ENV="CUDA_VISIBLE_DEVICES=0 CPUS=0-13 LOAD_CPUS=14-15"  every variant's settings (side-by-side.sh's words)
#   OUT=/tmp/lever-starts    results: <variant>/ (side-by-side.sh's folders, its logs gzipped, start-phases.jsonl: the
#                            engine's own start phases from its log, cpu-*.txt, pyspy/, timeline/),
#                            progress.txt (one line per phase, with the time left)
#   UNTIL=""                 a deadline (seconds since the epoch): a variant starts only if the longest variant so far
#                            (or FIRST_S for the first) fits before it; the rest are skipped and say so
#   FIRST_S=600 LATER_S=420  the expected length of the first variant (a cold start compiles) and of a later one,
#                            until one has run (then the longest later one so far)
#   PYSPY=1                  sample every server process (py-spy, the threads holding the GIL) for 8 s of a c=32 burst
#   PROFILES=/tmp/profiles   each variant's request timeline is recorded under PROFILES/<variant> (the service's
#                            SPEECH_PROFILER_DIR), then kept gzipped in $OUT/<variant>/timeline/
#   SIDE_BY_SIDE=deploy/gpu/side-by-side.sh   what starts, sweeps and stops the server
# What each variant runs, in order: vllm-omni's benchmark at c=32 (the first level after the start: a burst), bursts of
# 8 and 32 at once (speech-loadtest --stagger 0), a steady c=32 (every thread's CPU ticks read before and after it), the
# request timeline over two c=32 bursts (deploy/gpu/sglang_timeline.py), then stop.
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=${OUT:-/tmp/lever-starts}
BASE_ENV=${BASE_ENV:-CUDA_VISIBLE_DEVICES=0 CPUS=0-13 LOAD_CPUS=14-15}
UNTIL=${UNTIL:-}
FIRST_S=${FIRST_S:-600}
LATER_S=${LATER_S:-420}
PYSPY=${PYSPY:-1}
PROFILES=${PROFILES:-/tmp/profiles}
PYTHON=${PYTHON:-python3}
SBS=${SIDE_BY_SIDE:-deploy/gpu/side-by-side.sh}
export TARGETS=service-sglang KV_WAIT_S=${KV_WAIT_S:-0} START_WAIT_S=${START_WAIT_S:-1500}
mkdir -p "$ROOT"

progress() {
  local left=""
  [ -n "$UNTIL" ] && left=" ($((UNTIL - $(date +%s))) s left)"
  echo "$(date -u +%FT%TZ) $*$left" | tee -a "$ROOT/progress.txt"
}

# Every thread of every process in the server's process group: name, utime, stime (clock ticks), the last CPU it ran on.
thread_ticks() {
  local group pid task
  group=$(cat "/tmp/speech-server-${SERVICE_SGLANG_PORT:-8007}.pid" 2>/dev/null) || return 0
  for pid in $(pgrep -g "$group"); do
    echo "# pid $pid: $(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | cut -c1-160)"
    for task in /proc/"$pid"/task/*; do
      # /proc/PID/task/TID/stat: the name is field 2 (in parentheses, may hold spaces); utime 14, stime 15, CPU 39
      sed -E 's/^([0-9]+) \((.*)\) (.*)$/\1|\2|\3/' "$task/stat" 2>/dev/null |
        awk -F'|' '{split($3, f, " "); printf "%s\t%s\t%s\t%s\t%s\n", $1, $2, f[12], f[13], f[37]}'
    done
  done
}

pyspy_burst() {  # samples while the burst it runs beside is under way
  local group pid
  command -v py-spy >/dev/null || { progress "$1 py-spy: not installed"; return 0; }
  group=$(cat "/tmp/speech-server-${SERVICE_SGLANG_PORT:-8007}.pid" 2>/dev/null) || return 0
  mkdir -p "$2"
  for pid in $(pgrep -g "$group"); do
    timeout 20 py-spy record --gil --nonblocking -r 200 -d 8 -f raw -o "$2/$pid.txt" --pid "$pid" \
      >"$2/$pid.log" 2>&1 &
  done
}

expected=$FIRST_S first=1 longest_later=0
for variant in ${VARIANTS:?name:LEVER words}; do
  name=${variant%%:*} lever=${variant#*:}
  lever_env_name="LEVER_$lever"
  lever_env=${!lever_env_name:-}
  if [ -n "$UNTIL" ] && [ $(($(date +%s) + expected)) -gt "$UNTIL" ]; then
    progress "$name skipped: $expected s would not fit"
    continue
  fi
  began=$(date +%s)
  export OUT=$ROOT/$name PROFILER_DIR=$PROFILES/$name SERVICE_SGLANG_ENV="$BASE_ENV $lever_env"
  mkdir -p "$OUT"
  echo "$name: lever $lever: ${lever_env:-(none)}" >"$OUT/lever.txt"
  progress "$name start ($lever: ${lever_env:-baseline})"
  if ! $SBS start >"$OUT/start.log" 2>&1; then
    progress "$name did not start (start.log)"
    $SBS stop >>"$OUT/start.log" 2>&1
    continue
  fi
  progress "$name ready"
  CONCURRENCY=32 SWEEP_NAME=first-c32 $SBS sweep-bench >"$OUT/sweeps.log" 2>&1
  progress "$name bench first-c32"
  for level_requests in 8:32 32:96; do  # bursts: every worker sends at once
    level=${level_requests%:*}
    [ "$PYSPY" = 1 ] && [ "$level" = 32 ] && pyspy_burst "$name" "$OUT/pyspy"
    ROUNDS=1 CONCURRENCY=$level REQUESTS=${level_requests#*:} WARMUP=4 LOADTEST_ARGS="--stagger 0" \
      SWEEP_NAME=burst-c$level $SBS sweep-closed >>"$OUT/sweeps.log" 2>&1
  done
  wait
  progress "$name bursts c8 c32"
  thread_ticks >"$OUT/cpu-before-c32.txt"
  ROUNDS=1 CONCURRENCY=32 REQUESTS=128 WARMUP=8 LOADTEST_ARGS="--stagger 2" SWEEP_NAME=c32 \
    $SBS sweep-closed >>"$OUT/sweeps.log" 2>&1
  thread_ticks >"$OUT/cpu-after-c32.txt"
  progress "$name steady c32"
  TIMELINE=1 CONCURRENCY=32 REQUESTS=64 SWEEP_NAME=tl-c32 LOADTEST_ARGS="--stagger 0" $SBS profile >>"$OUT/sweeps.log" 2>&1
  sleep "${EVENTS_WAIT_S:-3}"  # the pipeline's processes write their events a moment after the stop
  mkdir -p "$OUT/timeline"
  find "$PROFILER_DIR/service-sglang/tl-c32" -name 'events*.jsonl' 2>/dev/null | while read -r events; do
    gzip -c "$events" >"$OUT/timeline/$(basename "$events").gz"
  done
  "$PYTHON" deploy/gpu/sglang_timeline.py "$OUT/timeline" --requests >"$OUT/timeline/phases.txt" 2>&1
  progress "$name timeline"
  $SBS stop >>"$OUT/sweeps.log" 2>&1
  # the engine's own start phases, then the logs side-by-side.sh kept, gzipped (the talker's pace is in them)
  cat "$OUT"/logs/*.log 2>/dev/null | grep -E '"(sglang engine (starting|ready)|started)"' >"$OUT/start-phases.jsonl"
  for log in "$OUT"/logs/*.log; do [ -f "$log" ] && gzip -f "$log"; done
  spent=$(($(date +%s) - began))
  if [ "$first" = 1 ]; then  # later starts reuse its compile caches
    first=0 expected=$LATER_S
  elif [ "$spent" -gt "$longest_later" ]; then
    longest_later=$spent expected=$spent
  fi
  progress "$name stopped after $spent s"
done
progress "done"
