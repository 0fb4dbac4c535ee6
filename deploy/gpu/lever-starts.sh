#!/usr/bin/env bash
# A lever measured across starts, on one GPU: the service (on its sglang engine, or on vllm-omni with TARGET=service)
# started once per variant, in the order given (A B A B, so that a start's own luck is seen as the spread between the
# A starts), each alone on the GPU, swept the same way, stopped, and its results kept under $OUT/<variant>/. Built on
# deploy/gpu/side-by-side.sh (its settings apply: PYTHON, WORK, CODEC_WEIGHTS, FRAMES, ...), whose compile caches every
# start after the first reuses.
#
#   VARIANTS="a1:A b1:B a2:A b2:B" LEVER_B="SPEECH_SGLANG__PREPROCESSING=cpu" deploy/gpu/lever-starts.sh
#
# On a host of two GPUs, TARGET=service-pair runs two variants at once, one a GPU, started together and swept
# interleaved level by level (one loaded at a time, the other idle: no neighbour's load inside a level), so a pair is
# measured in the same minutes; a second round with the GPUs swapped shows what the GPUs themselves differ by:
#
#   TARGET=service-pair VARIANTS="r1:A/B r2:B/A" BASE_ENV="CUDA_VISIBLE_DEVICES=0 CPUS=0-13 LOAD_CPUS=30-31" \
#     BASE_ENV_B="CUDA_VISIBLE_DEVICES=1 CPUS=14-27" LEVER_A="" LEVER_B="SPEECH_OMNI__FUSED_DEPENDENT_LAUNCH=true" ...
#
# TARGET=service-sglang-pair does the same on the sglang engine (`service-sglang` and `service-sglang-b`). A lever read
# against another server in the round after a cold start is not read at all: the first minutes after a cold start
# held both servers of a pair back by up to a quarter (benchmarks/gpu/2026-12-01-h200x2-sglang-prefill-graphs/), so
# a lever and its baseline share every round.
#
# Settings (environment):
#   VARIANTS                 name:LEVER words, run in order; the variant's settings are LEVER_<LEVER> (NAME=value words,
#                            empty for the baseline), added to BASE_ENV as the server's SERVICE_SGLANG_ENV (TARGET=
#                            service: SERVICE_ENV). A variant whose folder already holds results is refused (before
#                            anything starts)
#   TARGET=service-sglang    side-by-side.sh's target each variant starts: service-sglang (the service on sglang) or
#                            service (the service on vllm-omni: its request timeline at TIMELINE_LEVELS instead),
#                            or service-pair: the service on vllm-omni twice, `service` and `service-b`, each variant
#                            name:LEVER/LEVER_OF_B, the first lever's settings on BASE_ENV (SERVICE_ENV), the second's
#                            on BASE_ENV_B (SERVICE_B_ENV); results as for service, service-b's beside them with -b
#                            (start-phases-b.md, profile-c1-b.md); START_PYSPY follows `service` only. B's profile
#                            is A's with B_PROFILE_SET on top (side-by-side.sh): a round whose two sides run one
#                            profile and one lever says so (an A/A round) once ready. service-sglang-pair: the
#                            service on sglang twice, `service-sglang` and `service-sglang-b` (SERVICE_SGLANG_ENV,
#                            SERVICE_SGLANG_B_ENV), results as for service-sglang, service-sglang-b's with -b
#   PROFILE_SET_<LEVER>=""   TARGET=service: that lever's overrides of the profile (side-by-side.sh's PROFILE_SET,
#                            ';'-separated), added to PROFILE_SET's for each of its variants: a lever of the profile
#                            on one GPU, started in turn with its baseline. Refused before anything starts in a pair
#                            (its B profile is B_PROFILE_SET's) and on sglang (no profile)
#   BASE_ENV_B=""            the second server's settings (TARGET=service-pair, service-sglang-pair): its own GPU
#                            and cores. A pair whose BASE_ENV and BASE_ENV_B do not each name CUDA_VISIBLE_DEVICES,
#                            different ones, is refused before anything starts
#   BASE_ENV="CUDA_VISIBLE_DEVICES=0 CPUS=0-13 LOAD_CPUS=14-15"  every variant's settings (side-by-side.sh's words);
#                            CPUS pins the server, LOAD_CPUS the load tool, the benchmark and py-spy
#   OUT=/tmp/lever-starts    results: <variant>/ (side-by-side.sh's folders, its logs gzipped, start-phases.jsonl: the
#                            engine's own start phases from its log; TARGET=service: start-phases.md, every milestone
#                            of the start, deploy/gpu/omni_start_phases.py; cpu-*.txt, pyspy/, timeline/),
#                            progress.txt (one line per phase, with the time left; a failed step says its exit status)
#   UNTIL=""                 a deadline (seconds since the epoch): a variant starts only if its expected length fits
#                            before it, and its start waits no longer than the deadline allows, less its sweeps and
#                            stop (reckoned until a variant has swept every step, then the longest such so far and
#                            SWEEP_MARGIN_S; with SWITCH_ROUNDS always reckoned); the rest are skipped and say so
#   SWEEP_MARGIN_S=30        with UNTIL: what a start keeps back beyond the longest sweeps measured
#   MIN_START_S=90           with UNTIL: a variant whose start would be left less than this (the deadline less its
#                            sweeps) is skipped rather than started and stopped at once (a warm start of the omni
#                            engine takes 60-70 s)
#   FIRST_S=600 LATER_S=420  the expected length of the first variant (a cold start compiles) and of a later one until
#                            one has run; then the longest later one so far (the first's cold start is not a guide)
#   PYSPY=1                  sample the server's processes (py-spy: the thread holding the GIL) for 8 s in the middle
#                            of an extra steady c=32, after the reported levels, into pyspy/<pid>.txt.gz (py-spy's raw
#                            format), summarised in pyspy.md (deploy/gpu/pyspy_summary.py)
#   PYSPY_LEVEL=steady-c32   burst-c32: that level is instead a burst of 32 at once (96 requests), recorded for 4 s
#                            from just before the load tool starts: who holds the server's GIL while a burst arrives.
#                            c1: 16 requests one after another, recorded for 6 s from PYSPY_AFTER_S (default 1) after
#                            the load tool is launched: the Python of one stream's steps, no profiler in them. In a
#                            pair only these two run, recorded on A (the load tool runs A's requests first). Several
#                            levels, space-separated ("c1 burst-c32"), run one after another, each into
#                            pyspy-<level>/ and pyspy-<level>.md
#   START_PYSPY=0            1: py-spy records the server and every process it starts (--subprocesses --idle
#                            --threads, START_PYSPY_RATE=20 samples a second, every thread whatever it is doing) from
#                            the start until it is ready, into start-pyspy/, summarised in start-pyspy.md: where each
#                            process's threads spent the start (deploy/gpu/pyspy_summary.py --wall)
#   PROFILES=/tmp/profiles   each variant's request timeline is recorded under PROFILES/<variant> (emptied before its
#                            start; the service's SPEECH_PROFILER_DIR), then kept gzipped in $OUT/<variant>/timeline/
#                            (a sglang pair's second server's in timeline-b/)
#   TORCH_PROFILE=0          1: after the reported levels, profiles one c=1 request and one c=8 round with the
#                            engine's PyTorch profiler (vllm-omni's stages, set up at the start and idle until asked;
#                            sglang-omni's pipeline processes); the traces, under PROFILES/<variant>, are summarised
#                            (deploy/gpu/trace_summary.py) into profile-c1.md and profile-c8.md and deleted
#   PROFILE_LEVELS="1 8"     the levels TORCH_PROFILE=1 profiles, one round of each (c requests at once); empty: none
#                            (the omni engine's request timeline only)
#   SWEEPS="bench-first c1 burst-c8 burst-c32 burst-c32-ba steady-c8 steady-c32 bench-again"  the sweeps each
#                            variant runs once ready, in this order whatever the order given (a shorter round fits one
#                            more in a deadline); the request timeline, the profiles and py-spy have settings of their
#                            own. burst-c32-ba, in a pair only: the burst of 32 again with B's requests first (the
#                            load tool runs its targets in turn), so that a side worse in bursts is told apart from
#                            the one that goes second. steady-c64, only where named: 384 requests at 64 streams,
#                            spread as the steady levels' are, after steady c32. bench-c1 and bench-c8, only where
#                            named: vllm-omni's benchmark at 1 and at 8 streams (16 and 24 prompts), after c1: the
#                            referee where a lever changes only what few streams run
#   SWITCH_ROUNDS=""         TARGET=service: round:LEVERS words (LEVERS comma-separated among prompt_batch and
#                            frames_as_lists, or empty; each on in every variant's settings, as by default; a round
#                            runs without any lever it does not name), e.g. "a1:frames_as_lists
#                            s1:prompt_batch,frames_as_lists s2:prompt_batch,frames_as_lists a2:frames_as_lists" (the
#                            prompts built together against the profile shipped without them): each variant's
#                            server started with SPEECH_OMNI__LEVER_SWITCH_FILE (app/engines/omni/stage_plugins/
#                            lever_switch.py; the variant's own settings must turn those levers on), then its levels
#                            (bench-first to steady-c32, and the request timeline) swept once a round into
#                            $OUT/<variant>/<round>/, the round's levers written to the file first: a lever and its
#                            baseline in one start, level by level (deploy/gpu/rounds_table.py tables the rounds). The
#                            second benchmark, the profiles and py-spy run once, after the last round, in its state
#   ROUND_S=120              (30 more with steady-c64, 30 more with bench-c1 or bench-c8) with UNTIL and
#                            SWITCH_ROUNDS: a round is begun only if ROUND_S
#                            and what follows the rounds (the second benchmark, profiles, py-spy, the stop) fit
#                            before the deadline; the start is kept time for two rounds, and how many fit is said
#                            before the first
#   SWITCH_SETTLE_S=1        after the file is written, before the round's first level (the talker reads it every
#                            quarter second)
#   TIMELINE_LEVELS="1:16 32:64"  with TORCH_PROFILE=1 on the omni engine (TARGET=service, service-pair; levels given
#                            without it are refused before anything starts): before the
#                            profiles, the request timeline (app/engines/omni/stage_plugins/timeline.py) over each
#                            level:requests (all sent at once, c=1 one after another), its events kept gzipped in
#                            timeline/<server>-c<level>/, read by deploy/gpu/omni_timeline.py into
#                            timeline-c<level>.md (-b: service-b): where first audio and every window went between
#                            the server, the talker and code2wav; empty: none. level:requests:stagger spreads them
#                            over that many seconds a round, as a steady level (64:192:2), into c<level>-steady
#   PROFILE_FRAMES=100       the codec frames each request makes (EXTRA_BODY's max_new_tokens less the end token):
#                            the profiles' per-frame figures divide by it
#   PROFILE_EXTRA_BODY=""    the profiled rounds' request body in place of EXTRA_BODY, the sweeps keeping theirs: e.g.
#                            '{"stream_format": "audio", "max_new_tokens": 4}' with PROFILE_FRAMES=3, a window of a
#                            few steps, which a trace with Python stacks (SPEECH_OMNI__PROFILER_STACKS) can take
#   KEEP_TRACES=0            1: the profiles' traces are kept (gzipped) in traces/<server>-c<level>/ as well as
#                            summarised
#   TRACE_WAIT_S=60          the longest wait, after a profiled window, for its traces to stop growing (the same
#                            size over three looks SETTLE_S=3 apart)
#   SUMMARY_TIMEOUT_S=180    the longest a window's traces may take to summarise (TRACE_SUMMARY=
#                            deploy/gpu/trace_summary.py), and then to gzip where kept: beyond, given up and said in
#                            profile-c<level>.md, so that the round still stops and keeps its start phases
#   SERVER_PIDFILE=/tmp/speech-server-<its port>.pid   where side-by-side.sh records the server (its process group;
#                            the port: SERVICE_SGLANG_PORT=8007 or SERVICE_PORT=8000)
#   SERVER_B_PIDFILE=/tmp/speech-server-<its port>.pid   the same for a pair's second server (SERVICE_B_PORT=8003,
#                            or SERVICE_SGLANG_B_PORT=8008 in a sglang pair)
#   SIDE_BY_SIDE=deploy/gpu/side-by-side.sh   what starts, sweeps and stops the server
# What each variant runs, in order: vllm-omni's benchmark at c=32 (the first level after the start: a burst), c=1 (16
# requests one after another: the per-stream pace), bursts of 8 and 32 at once (speech-loadtest --stagger 0), steady
# c=8 and c=32 (--stagger 2; every thread's CPU ticks read before and after c=32), steady c=64 where named, the
# request timeline (sglang: over two c=32 bursts, deploy/gpu/sglang_timeline.py; omni with TORCH_PROFILE=1: at
# TIMELINE_LEVELS, deploy/gpu/omni_timeline.py), the benchmark's c=32 again (warm), the PyTorch profiles
# (TORCH_PROFILE=1), py-spy's level, then stop.
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=${OUT:-/tmp/lever-starts}
BASE_ENV=${BASE_ENV:-CUDA_VISIBLE_DEVICES=0 CPUS=0-13 LOAD_CPUS=14-15}
UNTIL=${UNTIL:-}
FIRST_S=${FIRST_S:-600}
LATER_S=${LATER_S:-420}
PYSPY=${PYSPY:-1}
PYSPY_LEVEL=${PYSPY_LEVEL:-steady-c32}
PYSPY_LEVEL_COUNT=$(wc -w <<<"$PYSPY_LEVEL")
for level in $PYSPY_LEVEL; do  # checked before anything starts
  case $level in
    steady-c32 | burst-c32 | c1) ;;
    *) echo "lever-starts: PYSPY_LEVEL: '$level' is not one of: steady-c32 burst-c32 c1" >&2; exit 64 ;;
  esac
done
PROFILES=${PROFILES:-/tmp/profiles}
TORCH_PROFILE=${TORCH_PROFILE:-0}
PROFILE_FRAMES=${PROFILE_FRAMES:-100}
TRACE_WAIT_S=${TRACE_WAIT_S:-60}
TRACE_SUMMARY=${TRACE_SUMMARY:-deploy/gpu/trace_summary.py}
SUMMARY_TIMEOUT_S=${SUMMARY_TIMEOUT_S:-180}
KEEP_TRACES=${KEEP_TRACES:-0}
SETTLE_S=${SETTLE_S:-3}
START_PYSPY=${START_PYSPY:-0}
START_PYSPY_RATE=${START_PYSPY_RATE:-20}
PYTHON=${PYTHON:-python3}
SBS=${SIDE_BY_SIDE:-deploy/gpu/side-by-side.sh}
TARGET=${TARGET:-service-sglang}
BASE_ENV_B=${BASE_ENV_B:-}
SERVERS=$TARGET  # side-by-side.sh's targets for each variant
case $TARGET in
  service-sglang) PORT=${SERVICE_SGLANG_PORT:-8007} ;;
  service) PORT=${SERVICE_PORT:-8000} ;;
  service-pair) PORT=${SERVICE_PORT:-8000} SERVERS="service service-b" ;;
  service-sglang-pair) PORT=${SERVICE_SGLANG_PORT:-8007} SERVERS="service-sglang service-sglang-b" ;;
  *) echo "lever-starts: TARGET=$TARGET is not service-sglang, service, service-pair or service-sglang-pair" >&2
    exit 64 ;;
esac
a_pair() { case $TARGET in *-pair) return 0 ;; *) return 1 ;; esac; }
on_sglang() { case $TARGET in service-sglang*) return 0 ;; *) return 1 ;; esac; }
PIDFILE=${SERVER_PIDFILE:-/tmp/speech-server-$PORT.pid}
B_PORT=${SERVICE_B_PORT:-8003}
on_sglang && B_PORT=${SERVICE_SGLANG_B_PORT:-8008}
PIDFILE_B=${SERVER_B_PIDFILE:-/tmp/speech-server-$B_PORT.pid}
START_WAIT_S=${START_WAIT_S:-1500}
MIN_START_S=${MIN_START_S:-90}
# what a variant's sweeps and stop take after its start (about 90 s on an H200, before py-spy's level and the second
# benchmark joined them), reckoned until a variant has swept; then what the longest sweeps took and SWEEP_MARGIN_S
SWEEP_ALLOWANCE_S=180
SWEEP_MARGIN_S=${SWEEP_MARGIN_S:-30}
PROFILE_LEVELS=${PROFILE_LEVELS-1 8}
timeline_asked=${TIMELINE_LEVELS:-}
TIMELINE_LEVELS=${TIMELINE_LEVELS-1:16 32:64}
ALL_SWEEPS="bench-first c1 bench-c1 bench-c8 burst-c8 burst-c32 burst-c32-ba steady-c8 steady-c32 steady-c64 bench-again"
DEFAULT_SWEEPS=${ALL_SWEEPS/ bench-c1 bench-c8/}
SWEEPS=${SWEEPS-${DEFAULT_SWEEPS/ steady-c64/}}  # 64 streams and the benchmark's low levels only where named
for sweep in $SWEEPS; do  # checked before anything starts
  case " $ALL_SWEEPS " in
    *" $sweep "*) ;;
    *) echo "lever-starts: SWEEPS: '$sweep' is not one of: $ALL_SWEEPS" >&2; exit 64 ;;
  esac
done
sweeps() { case " $SWEEPS " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }  # $1 a sweep: whether to run it
timeline_tag() {  # $1 a TIMELINE_LEVELS entry: its folders' and page's name, c<level> or c<level>-steady
  local level requests stagger
  IFS=: read -r level requests stagger <<<"$1"
  if [ "${stagger:-0}" = 0 ]; then echo "c$level"; else echo "c$level-steady"; fi
}
tags_seen=" "
for entry in $TIMELINE_LEVELS; do  # checked before anything starts
  [[ $entry =~ ^[0-9]+:[0-9]+(:[0-9]+)?$ ]] ||
    { echo "lever-starts: TIMELINE_LEVELS: '$entry' is not level:requests or level:requests:stagger" >&2; exit 64; }
  tag=$(timeline_tag "$entry")
  case $tags_seen in *" $tag "*)
    echo "lever-starts: TIMELINE_LEVELS: two levels of $tag (one would overwrite the other's timeline)" >&2; exit 64 ;;
  esac
  tags_seen="$tags_seen$tag "
done
# the omni engine records its timeline through the stages' profiler directory, set up only with TORCH_PROFILE=1:
# levels asked for without it would be left out of every start, unsaid
if [ -n "$timeline_asked" ] && [ "${TORCH_PROFILE}" != 1 ] && ! on_sglang; then
  echo "lever-starts: TIMELINE_LEVELS needs TORCH_PROFILE=1 on the omni engine (PROFILE_LEVELS= for the timeline" \
    "without the PyTorch profiles)" >&2
  exit 64
fi
SWITCH_ROUNDS=${SWITCH_ROUNDS:-}
SWITCH_SETTLE_S=${SWITCH_SETTLE_S:-1}
# the levers a lever switch file may name (app/engines/omni/stage_plugins/lever_switch.py's LEVERS), and the folders of
# a variant that a round may not be named as
SWITCHABLE="prompt_batch frames_as_lists"
SWITCH_DEFAULT_ON="prompt_batch frames_as_lists"  # of those, the ones on by default (OmniSettings')
VARIANT_FOLDERS=" logs timeline pyspy pyspy-steady-c32 pyspy-burst-c32 pyspy-c1 traces start-pyspy "
if [ -n "$SWITCH_ROUNDS" ]; then  # checked before anything starts
  if [ "$TARGET" != service ]; then
    echo "lever-starts: SWITCH_ROUNDS switches the omni engine's levers in one server: TARGET=service only" >&2
    exit 64
  fi
  alternatives=${SWITCHABLE// /|}
  rounds_seen=" "
  for round in $SWITCH_ROUNDS; do
    if ! [[ $round =~ ^[A-Za-z0-9][A-Za-z0-9._-]*:(($alternatives)(,($alternatives))*)?$ ]]; then
      echo "lever-starts: SWITCH_ROUNDS: '$round' is not round:LEVERS (LEVERS comma-separated among" \
        "${SWITCHABLE// /, }, or none)" >&2
      exit 64
    fi
    case $rounds_seen$VARIANT_FOLDERS in *" ${round%%:*} "*)
      echo "lever-starts: SWITCH_ROUNDS: the round '${round%%:*}' is named twice, or as a variant's folder" >&2
      exit 64 ;;
    esac
    rounds_seen="$rounds_seen${round%%:*} "
  done
fi
# steady-c64 (384 requests at about 25 a second): a start's levels, and each round's, take about 30 s more; the
# benchmark at 1 and 8 streams (its start and 16 or 24 prompts each) about 30 s more together
sweeps steady-c64 && SWEEP_ALLOWANCE_S=$((SWEEP_ALLOWANCE_S + 30))
{ sweeps bench-c1 || sweeps bench-c8; } && SWEEP_ALLOWANCE_S=$((SWEEP_ALLOWANCE_S + 30))
if [ -z "${ROUND_S:-}" ]; then  # a round's levels, unless set
  ROUND_S=120
  sweeps steady-c64 && ROUND_S=$((ROUND_S + 30))
  { sweeps bench-c1 || sweeps bench-c8; } && ROUND_S=$((ROUND_S + 30))
fi
# each profiled window, its traces written and summarised: about a minute
[ "$TORCH_PROFILE" = 1 ] && SWEEP_ALLOWANCE_S=$((SWEEP_ALLOWANCE_S + 60 * $(wc -w <<<"$PROFILE_LEVELS")))
# the omni engine's timeline levels (TORCH_PROFILE=1): about 20 s each
[ "$TORCH_PROFILE" = 1 ] && ! on_sglang &&
  SWEEP_ALLOWANCE_S=$((SWEEP_ALLOWANCE_S + 20 * $(wc -w <<<"$TIMELINE_LEVELS")))
# what follows the rounds: the second benchmark and the stop (about 30 s), each profiled window, py-spy's level
TAIL_S=$((30 + (TORCH_PROFILE == 1 ? 60 * $(wc -w <<<"$PROFILE_LEVELS") : 0)
  + (PYSPY == 1 ? 30 * PYSPY_LEVEL_COUNT : 0)))
# every round its levels and timeline again, about ROUND_S each beyond the first; a start is kept time for its second
# round only (a lever beside its baseline): each later round is begun only if it fits, and a start cut short for
# rounds that the deadline would skip anyway is given up while its server still loads
ROUND_COUNT=$(wc -w <<<"$SWITCH_ROUNDS")
[ -n "$SWITCH_ROUNDS" ] &&
  SWEEP_ALLOWANCE_S=$((SWEEP_ALLOWANCE_S + ROUND_S * ((ROUND_COUNT < 2 ? ROUND_COUNT : 2) - 1)))
# a pair's every level runs twice, one server after the other; its burst again, B first: about 10 s more a server
a_pair && SWEEP_ALLOWANCE_S=$((SWEEP_ALLOWANCE_S * 2 + 20))
export TARGETS=$SERVERS SWEEP_TARGETS=$SERVERS KV_WAIT_S=${KV_WAIT_S:-0}
RUN_PROFILE_SET=${PROFILE_SET:-}  # every variant's; a lever's PROFILE_SET_<LEVER> is added for its own

levers='[A-Za-z0-9_]+'
a_pair && levers='[A-Za-z0-9_]+/[A-Za-z0-9_]+'
for variant in ${VARIANTS:?name:LEVER words}; do  # every word checked before anything starts
  if ! [[ $variant =~ ^[A-Za-z0-9._-]+:$levers$ ]]; then
    echo "lever-starts: '$variant' is not name:LEVER$(a_pair && echo /LEVER) (LEVER:" \
      "letters, digits, _; its settings are LEVER_<LEVER>)" >&2
    exit 64
  fi
  levers_of=${variant#*:}
  for lever in ${levers_of/\// }; do  # a pair's two, split at the slash
    profile_set_name="PROFILE_SET_$lever"
    if [ "$TARGET" != service ] && [ -n "${!profile_set_name:-}" ]; then
      echo "lever-starts: $profile_set_name is for TARGET=service (a pair's B profile is B_PROFILE_SET's; the" \
        "sglang engine runs no profile)" >&2
      exit 64
    fi
  done
  if [ -n "$(ls -A "$ROOT/${variant%%:*}" 2>/dev/null)" ]; then
    echo "lever-starts: $ROOT/${variant%%:*} already holds results: name the variant anew, or choose another OUT" >&2
    exit 64
  fi
done
value_of() {  # $1 NAME=value words, $2 a NAME: its value (the last one, as `env` reads them), empty if none
  local word value=""
  for word in $1; do case $word in "$2="*) value=${word#*=} ;; esac; done
  echo "$value"
}
lever_on_in() {  # $1 a variant (name:LEVER), $2 a switchable lever: the variant's settings turn it on (set true, or
  # on by default and not set false)
  local lever_env_name="LEVER_${1#*:}"
  case $(value_of "$BASE_ENV ${!lever_env_name:-}" "SPEECH_OMNI__${2^^}") in
    true | True | TRUE | 1) return 0 ;;
    "") [[ " $SWITCH_DEFAULT_ON " == *" $2 "* ]] ;;
    *) return 1 ;;
  esac
}
if [ -n "$SWITCH_ROUNDS" ]; then  # a lever switched in rounds must be on by its setting, or each round measures none
  for switched in $(for round in $SWITCH_ROUNDS; do tr ',' ' ' <<<"${round#*:}"; done | tr ' ' '\n' | sort -u); do
    for variant in $VARIANTS; do
      if ! lever_on_in "$variant" "$switched"; then
        echo "lever-starts: SWITCH_ROUNDS switches $switched, which the variant ${variant%%:*} does not turn on" \
          "(SPEECH_OMNI__${switched^^}=true in its LEVER_${variant#*:} or BASE_ENV)" >&2
        exit 64
      fi
    done
  done
  # a lever on by a variant's settings is off in every round that does not name it: said, since a baseline round meant
  # as the profile shipped is then without a lever on by default
  for variant in $VARIANTS; do
    for lever in $SWITCHABLE; do
      lever_on_in "$variant" "$lever" || continue
      without=""
      for round in $SWITCH_ROUNDS; do [[ ",${round#*:}," == *",$lever,"* ]] || without="$without ${round%%:*}"; done
      [ -z "$without" ] || echo "lever-starts: ${variant%%:*}: $lever is on by its settings$(
        [[ " $SWITCH_DEFAULT_ON " == *" $lever "* ]] && echo " (by default)"), but off in the rounds that do not" \
        "name it:$without"
    done
  done
fi
# a pair's two servers each on a GPU of its own: on one, two sglang engines at their memory share cannot both start,
# and two omni services would measure each other
GPUS=$(value_of "$BASE_ENV" CUDA_VISIBLE_DEVICES) GPUS_B=$(value_of "$BASE_ENV_B" CUDA_VISIBLE_DEVICES)
if a_pair && { [ -z "$GPUS" ] || [ -z "$GPUS_B" ] || [ "$GPUS" = "$GPUS_B" ]; }; then
  echo "lever-starts: TARGET=$TARGET runs its servers on GPUs of their own: BASE_ENV and BASE_ENV_B each name" \
    "CUDA_VISIBLE_DEVICES, not the same (BASE_ENV: '$BASE_ENV', BASE_ENV_B: '$BASE_ENV_B')" >&2
  exit 64
fi
mkdir -p "$ROOT"
LOAD_CPUS=$(value_of "$BASE_ENV" LOAD_CPUS)
on_load_cpus() { if [ -n "$LOAD_CPUS" ]; then taskset -c "$LOAD_CPUS" "$@"; else "$@"; fi; }

progress() {
  local left=""
  [ -n "$UNTIL" ] && left=" ($((UNTIL - $(date +%s))) s left)"
  echo "$(date -u +%FT%TZ) $*$left" | tee -a "$ROOT/progress.txt"
}

step() {  # a label, then a command: runs it, says how it ended in the progress
  local label=$1 rc
  shift
  "$@"
  rc=$?
  if [ "$rc" = 0 ]; then progress "$name $label"; else progress "$name $label (failed, rc $rc)" && steps_failed=1; fi
}

pidfile_of() {  # $1 a server of the variant: where side-by-side.sh records it
  case $1 in service-b | service-sglang-b) echo "$PIDFILE_B" ;; *) echo "$PIDFILE" ;; esac
}

# The processes of a server's process group (side-by-side.sh starts it in a session of its own), but the compile
# workers and multiprocessing's resource tracker, which sit idle.
server_pids() {  # $1 a server (default: each server a variant runs)
  local group pid server
  for server in ${1:-$SERVERS}; do
    group=$(cat "$(pidfile_of "$server")" 2>/dev/null) || continue
    for pid in $(pgrep -g "$group"); do
      case $(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) in
        *compile_worker* | *resource_tracker*) ;;
        *) echo "$pid" ;;
      esac
    done
  done
}

# Every thread of the server's processes: tid, name, utime, stime (clock ticks), the last CPU it ran on; a pair's
# two servers each under a line that names it.
thread_ticks() {
  local pid server
  for server in $SERVERS; do
    a_pair && echo "# server $server"
    for pid in $(server_pids "$server"); do
      thread_table "$pid"
    done
  done
}

thread_table() {  # $1 a pid
  local pid=$1 task
  echo "# pid $pid: $(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | cut -c1-160)"
  for task in /proc/"$pid"/task/*; do
    # /proc/PID/task/TID/stat: the name is field 2 (in parentheses, may hold spaces); utime 14, stime 15, CPU 39
    sed -E 's/^([0-9]+) \((.*)\) (.*)$/\1|\2|\3/' "$task/stat" 2>/dev/null |
      awk -F'|' '{split($3, f, " "); printf "%s\t%s\t%s\t%s\t%s\n", $1, $2, f[12], f[13], f[37]}'
  done
}

pyspy_level() {  # $1 a level of PYSPY_LEVEL: an extra steady c=32 (or a burst of 32, or one stream), not reported,
  # with py-spy on every server process in its middle: which Python holds each process's GIL
  # (deploy/gpu/pyspy_summary.py reads it into pyspy$2.md); $2 the folder's and summary's suffix
  local level=$1 into="$OUT/pyspy$2" pid seconds=8 after=${PYSPY_AFTER_S:-4} load=(ROUNDS=1 CONCURRENCY=32 WARMUP=0)
  load_level() { (export "${load[@]}" && on_load_cpus "$SBS" sweep-closed >>"$OUT/sweeps.log" 2>&1) & }
  command -v py-spy >/dev/null || { progress "$name py-spy: not installed"; return 0; }
  mkdir -p "$into"
  case $level in
    burst-c32)  # py-spy first: a burst is over in a second or two
      seconds=4 after=0
      load+=(REQUESTS=96 "LOADTEST_ARGS=--stagger 0" SWEEP_NAME=pyspy-burst-c32) ;;
    c1)  # 16 requests of about 0.5 s each: the recording ends before A's last (in a pair, before B's first)
      seconds=6 after=${PYSPY_AFTER_S:-1}
      load+=(CONCURRENCY=1 REQUESTS=16 "LOADTEST_ARGS=--stagger 0" SWEEP_NAME=pyspy-c1) ;;
    *) load+=(REQUESTS=192 "LOADTEST_ARGS=--stagger 2" SWEEP_NAME=pyspy-c32) ;;
  esac
  [ "$level" = burst-c32 ] || load_level
  sleep "$after"  # steady: past the stagger, every worker sending
  # a pair's burst or c=1: A's requests go first (the load tool runs its targets in turn), so only A's are recorded
  for pid in $(server_pids "${SERVERS%% *}"); do
    # --idle: a GIL holder whose innermost frame looks idle (a wait, a select) is still a sample of the GIL held
    on_load_cpus timeout $((seconds + 12)) py-spy record --gil --idle --threads --nonblocking -r 200 -d "$seconds" \
      -f raw -o "$into/$pid.txt" --pid "$pid" >"$into/$pid.log" 2>&1 &
  done
  [ "$level" = burst-c32 ] && load_level
  wait
  for raw in "$into"/*.txt; do [ -f "$raw" ] && gzip -f "$raw"; done
  "$PYTHON" deploy/gpu/pyspy_summary.py "$into" --rate 200 --seconds "$seconds" \
    --names "$OUT/cpu-after-c32.txt" >"$into.md" 2>&1
}

start_pyspy() {  # $1 the pid the pid file held before the start: once it holds the new server's (however long the
  # start prepares first), py-spy on it and its processes until stopped (SIGINT: py-spy writes what it has)
  local before=$1 pid=""
  while :; do
    pid=$(cat "$PIDFILE" 2>/dev/null)
    [ -n "$pid" ] && [ "$pid" != "$before" ] && [ -d "/proc/$pid" ] && break
    sleep 0.2
  done
  mkdir -p "$OUT/start-pyspy"
  local spy=(py-spy record --subprocesses --idle --threads --nonblocking -r "$START_PYSPY_RATE" -f raw
    -o "$OUT/start-pyspy/$pid.txt" --pid "$pid")
  [ -n "$LOAD_CPUS" ] && spy=(taskset -c "$LOAD_CPUS" "${spy[@]}")
  # py-spy's Control-C handler refuses a SIGINT that is ignored, as it is in a background job and in whatever a
  # `nohup ... &` started: py-spy (the same pid, exec'd) is given SIGINT's default first
  exec "$PYTHON" -c 'import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execvp(sys.argv[1], sys.argv[1:])' \
    "${spy[@]}" >"$OUT/start-pyspy/$pid.log" 2>&1
}

start_pyspy_stop() {  # $1 start_pyspy's job: stopped, its recording gzipped and summarised
  kill -INT "$1" 2>/dev/null
  # a job still waiting for the pid file ignores SIGINT (a background job's): ended after py-spy's time to write
  for _ in 1 2 3 4 5 6 7 8 9 10; do kill -0 "$1" 2>/dev/null || break; sleep 0.5; done
  kill -TERM "$1" 2>/dev/null
  wait "$1" 2>/dev/null
  for raw in "$OUT"/start-pyspy/*.txt; do [ -f "$raw" ] && gzip -f "$raw"; done
  if compgen -G "$OUT/start-pyspy/*.txt.gz" >/dev/null; then
    "$PYTHON" deploy/gpu/pyspy_summary.py "$OUT/start-pyspy" --rate "$START_PYSPY_RATE" --wall >"$OUT/start-pyspy.md" 2>&1
  else
    progress "$name start py-spy: no recording (the pid file never named a new server, or py-spy wrote nothing)"
  fi
}

torch_profile() {  # $1 level, $2 requests: one closed round under the engine's profiler, its traces summarised per
  # codec frame (PROFILE_FRAMES a request) into profile-c<level>.md, then deleted (hundreds of MB; the summary is the
  # result)
  local level=$1 requests=$2 frames=$(($2 * PROFILE_FRAMES)) server traces body=()
  [ -n "${PROFILE_EXTRA_BODY:-}" ] && body=(EXTRA_BODY="$PROFILE_EXTRA_BODY")
  step "profile c$level" on_load_cpus env CONCURRENCY="$level" REQUESTS="$requests" SWEEP_NAME="c$level" \
    LOADTEST_ARGS="--stagger 0" "${body[@]}" "$SBS" profile >>"$OUT/sweeps.log" 2>&1
  for server in $SERVERS; do
    traces=$PROFILER_DIR/$server/c$level
    settled "$traces" "$TRACE_WAIT_S"
    local summary=$OUT/profile-c$level$(suffix "$server").md
    timeout "$SUMMARY_TIMEOUT_S" "$PYTHON" "$TRACE_SUMMARY" "$traces" --frames "$frames" >"$summary" 2>&1
    [ $? = 124 ] && echo "trace_summary.py stopped after $SUMMARY_TIMEOUT_S s (SUMMARY_TIMEOUT_S)" >>"$summary"
    if [ "$KEEP_TRACES" = 1 ]; then  # kept for a later look (tens of MB a trace, gzipped)
      (cd "$traces" && find . -type f -name '*.json*' | while read -r trace; do
        keep_gzipped "$trace" "$OUT/traces/$server-c$level/$trace"
      done)
    fi
    rm -rf "${traces:?}"
  done
}

suffix() {  # $1 a server: what its files' names carry (service-b's and service-sglang-b's: -b)
  case $1 in service-b | service-sglang-b) echo -b ;; esac
}

settled() {  # $1 a folder, $2 seconds at most: until its files stop growing (sglang-omni's pipeline processes each
  # write their traces after the stop has returned, a JSON file and then its gzip; vllm-omni's stages before it
  # returns): files there, and its size the same over three looks SETTLE_S apart
  local folder=$1 until=$(($(date +%s) + $2)) before="" now same=0
  while [ "$(date +%s)" -lt "$until" ]; do
    now=$(du -sb "$folder" 2>/dev/null | cut -f1)
    if [ -n "$now" ] && [ "$now" = "$before" ] && [ -n "$(find "$folder" -type f -print -quit)" ]; then
      same=$((same + 1))
      [ "$same" -ge 2 ] && return 0
    else same=0; fi
    before=$now
    sleep "$SETTLE_S"
  done
}

keep_gzipped() {  # $1 a file, $2 where its copy goes: gzipped there (with .gz added), a gzipped one as it is
  mkdir -p "$(dirname "$2")"
  case $1 in *.gz) cp "$1" "$2" ;; *) timeout "$SUMMARY_TIMEOUT_S" gzip -c "$1" >"$2.gz" ;; esac
}

omni_timeline() {  # the omni engine's request timeline over each of TIMELINE_LEVELS (level:requests, all at once, or
  # level:requests:stagger, spread as a steady level's), the phases of first audio and of every window read from it
  # (deploy/gpu/omni_timeline.py) into timeline-c<level>.md (a steady one's: timeline-c<level>-steady.md)
  local entry level requests stagger tag server folder events warmup
  for entry in $TIMELINE_LEVELS; do
    IFS=: read -r level requests stagger <<<"$entry"
    stagger=${stagger:-0} tag=$(timeline_tag "$entry")
    # at one stream, a warm-up request first (recorded too): the load tool's own first request, the first target's,
    # took 78-95 ms against 32-39 without one (benchmarks/gpu/2026-11-30-h200x2-fused-default/); a burst stays whole
    warmup=0 && [ "$level" = 1 ] && warmup=1
    step "timeline ${tag/-/ }" on_load_cpus env TIMELINE=1 CONCURRENCY="$level" REQUESTS="$requests" \
      PROFILE_WARMUP="$warmup" SWEEP_NAME="tl-$tag" LOADTEST_ARGS="--stagger $stagger" "$SBS" profile \
      >>"$OUT/sweeps.log" 2>&1
    sleep "${EVENTS_WAIT_S:-1}"  # the stages record until their next look at the run's flag (a quarter second)
    for server in $SERVERS; do
      folder=$PROFILER_DIR/$server/tl-$tag
      for events in "$folder"/events_*.jsonl; do  # as the run left them: deploy/gpu/omni_timeline.py reads the folder
        [ -f "$events" ] && keep_gzipped "$events" "$OUT/timeline/$server-$tag/$(basename "$events")"
      done
      "$PYTHON" deploy/gpu/omni_timeline.py "$folder" --requests >"$OUT/timeline-$tag$(suffix "$server").md" 2>&1
      rm -rf "${folder:?}"  # kept in timeline/
    done
  done
}

request_timeline() {  # sglang-omni's per-request events over two c=32 bursts, and the phases read from them (a
  # pair's second server's in timeline-b/)
  local server folder
  step "timeline" on_load_cpus env TIMELINE=1 CONCURRENCY=32 REQUESTS=64 SWEEP_NAME=tl-c32 LOADTEST_ARGS="--stagger 0" \
    "$SBS" profile >>"$OUT/sweeps.log" 2>&1
  sleep "${EVENTS_WAIT_S:-3}"  # the pipeline's processes write their events a moment after the stop
  for server in $SERVERS; do
    folder=$OUT/timeline$(suffix "$server")
    mkdir -p "$folder"
    find "$PROFILER_DIR/$server/tl-c32" -name 'events*.jsonl' 2>/dev/null | while read -r events; do
      keep_gzipped "$events" "$folder/$(basename "$events")"
    done
    "$PYTHON" deploy/gpu/sglang_timeline.py "$folder" --requests >"$folder/phases.txt" 2>&1
  done
}

finish() {  # after the stop, on every path: the engine's own start phases, then the logs side-by-side.sh kept, gzipped
  local server
  for server in $SERVERS; do
    grep -sE '"((sglang|omni) engine (starting|started|ready)|started)"' "$OUT/logs/$server.log" \
      >"$OUT/start-phases$(suffix "$server").jsonl"
    # vllm-omni's: every milestone of the start that the server and its stage processes logged
    on_sglang ||
      "$PYTHON" deploy/gpu/omni_start_phases.py "$OUT/logs/$server.log" >"$OUT/start-phases$(suffix "$server").md" 2>&1
  done
  for log in "$OUT"/logs/*.log; do [ -f "$log" ] && gzip -f "$log"; done
}

write_switch() {  # $1 a round's LEVERS (comma-separated), $2 the lever switch file: replaced whole, never read half
  tr ',' ' ' <<<"$1" >"$2.tmp" && mv "$2.tmp" "$2"
}

level_sweeps() {  # a variant's levels, from the first benchmark to the request timeline, into $OUT
  sweeps bench-first &&
    step "bench first-c32" on_load_cpus env CONCURRENCY=32 SWEEP_NAME=first-c32 "$SBS" sweep-bench \
      >>"$OUT/sweeps.log" 2>&1
  sweeps c1 && step "c1" on_load_cpus env ROUNDS=1 CONCURRENCY=1 REQUESTS=16 WARMUP=1 SWEEP_NAME=c1 "$SBS" \
    sweep-closed >>"$OUT/sweeps.log" 2>&1
  for level in 1 8; do  # the referee where few streams run (16 and 24 prompts: side-by-side.sh's BENCH_PROMPTS)
    sweeps "bench-c$level" && step "bench c$level" on_load_cpus env CONCURRENCY="$level" SWEEP_NAME="c$level" "$SBS" \
      sweep-bench >>"$OUT/sweeps.log" 2>&1
  done
  for level_requests in 8:32 32:96; do  # bursts: every worker sends at once
    level=${level_requests%:*}
    sweeps "burst-c$level" || continue
    step "burst c$level" on_load_cpus env ROUNDS=1 CONCURRENCY="$level" REQUESTS="${level_requests#*:}" WARMUP=4 \
      LOADTEST_ARGS="--stagger 0" SWEEP_NAME="burst-c$level" "$SBS" sweep-closed >>"$OUT/sweeps.log" 2>&1
  done
  # the same burst with B's requests first: in every pair so far B's side was the worse one in bursts, and B is also
  # the target the load tool runs second (a lone server has no order to tell apart)
  a_pair && sweeps burst-c32-ba &&
    step "burst c32, B first" on_load_cpus env ROUNDS=1 CONCURRENCY=32 REQUESTS=96 WARMUP=4 \
      LOADTEST_ARGS="--stagger 0" SWEEP_TARGETS="${SERVERS#* } ${SERVERS%% *}" SWEEP_NAME=burst-c32-ba "$SBS" \
      sweep-closed >>"$OUT/sweeps.log" 2>&1
  sweeps steady-c8 && step "steady c8" on_load_cpus env ROUNDS=1 CONCURRENCY=8 REQUESTS=64 WARMUP=4 \
    LOADTEST_ARGS="--stagger 2" SWEEP_NAME=c8 "$SBS" sweep-closed >>"$OUT/sweeps.log" 2>&1
  if sweeps steady-c32; then
    thread_ticks >"$OUT/cpu-before-c32.txt"
    step "steady c32" on_load_cpus env ROUNDS=1 CONCURRENCY=32 REQUESTS=128 WARMUP=8 LOADTEST_ARGS="--stagger 2" \
      SWEEP_NAME=c32 "$SBS" sweep-closed >>"$OUT/sweeps.log" 2>&1
    thread_ticks >"$OUT/cpu-after-c32.txt"
  fi
  sweeps steady-c64 && step "steady c64" on_load_cpus env ROUNDS=1 CONCURRENCY=64 REQUESTS=384 WARMUP=16 \
    LOADTEST_ARGS="--stagger 2" SWEEP_NAME=c64 "$SBS" sweep-closed >>"$OUT/sweeps.log" 2>&1
  on_sglang && request_timeline
  # the omni engine's, where its profiler directory is set (TORCH_PROFILE=1)
  ! on_sglang && [ -n "$PROFILER_DIR" ] && [ -n "$TIMELINE_LEVELS" ] && omni_timeline
}

expected=$FIRST_S first=1 longest_later=0 longest_swept=""
for variant in $VARIANTS; do
  name=${variant%%:*} lever=${variant#*:}
  lever_b=${lever#*/} lever=${lever%%/*}  # service-pair: service-b's lever after the slash
  lever_env_name="LEVER_$lever" lever_b_env_name="LEVER_$lever_b"
  lever_env=${!lever_env_name:-} lever_b_env=${!lever_b_env_name:-}
  profile_set_name="PROFILE_SET_$lever"
  lever_profile_set=${!profile_set_name:-}
  wait_s=$START_WAIT_S
  if [ -n "$UNTIL" ]; then
    if [ $(($(date +%s) + expected)) -gt "$UNTIL" ]; then
      progress "$name skipped: $expected s would not fit"
      continue
    fi
    # the reckoning (180 s and more) was twice what a warm start's sweeps took on an H200 (230 against 115 s,
    # benchmarks/gpu/2026-12-02-h200-omni-code2wav-cap-8), skipping a start that would have fit
    allowance=$SWEEP_ALLOWANCE_S
    [ -n "$longest_swept" ] && allowance=$((longest_swept + SWEEP_MARGIN_S))
    left=$((UNTIL - $(date +%s) - allowance))
    [ "$left" -lt "$wait_s" ] && wait_s=$left
    if [ "$wait_s" -lt "$MIN_START_S" ]; then  # it would be stopped before it could be ready
      progress "$name skipped: $wait_s s left for its start, under MIN_START_S=$MIN_START_S"
      continue
    fi
  fi
  began=$(date +%s)
  export OUT=$ROOT/$name PROFILER_DIR=$PROFILES/$name
  if on_sglang; then
    export SERVICE_SGLANG_ENV="$BASE_ENV${lever_env:+ $lever_env}"
    export SERVICE_SGLANG_B_ENV="$BASE_ENV_B${lever_b_env:+ $lever_b_env}"
  else  # vllm-omni: its stages' profiler, and its request timeline, only where asked for
    export SERVICE_ENV="$BASE_ENV${lever_env:+ $lever_env}" SERVICE_B_ENV="$BASE_ENV_B${lever_b_env:+ $lever_b_env}"
    if [ -n "$SWITCH_ROUNDS" ]; then  # the first round's levers in force from the start
      SERVICE_ENV="$SERVICE_ENV SPEECH_OMNI__LEVER_SWITCH_FILE=$ROOT/$name/lever-switch"
      read -r first_round _ <<<"$SWITCH_ROUNDS"
      mkdir -p "$ROOT/$name" && write_switch "${first_round#*:}" "$ROOT/$name/lever-switch"
    fi
    export PROFILE_SET="$RUN_PROFILE_SET${RUN_PROFILE_SET:+${lever_profile_set:+;}}$lever_profile_set"
    [ "$TORCH_PROFILE" = 1 ] || export PROFILER_DIR=""
  fi
  # the engine appends to its event files: an earlier run's must not join this one's
  [ -n "$PROFILER_DIR" ] && rm -rf "$PROFILER_DIR"
  mkdir -p "$OUT"
  echo "$name: lever $lever: ${lever_env:-(none)}" >"$OUT/lever.txt"
  [ -n "$lever_profile_set" ] && echo "$name: lever $lever's profile: $lever_profile_set" >>"$OUT/lever.txt"
  described="$lever: ${lever_env:-baseline}${lever_profile_set:+; profile $lever_profile_set}"
  if a_pair; then
    echo "$name: ${SERVERS#* }'s lever $lever_b: ${lever_b_env:-(none)}" >>"$OUT/lever.txt"
    described="$described; ${SERVERS#* } $lever_b: ${lever_b_env:-baseline}"
  fi
  progress "$name start ($described)"
  spy=""
  if [ "$START_PYSPY" = 1 ]; then
    if command -v py-spy >/dev/null; then
      before=$(cat "$PIDFILE" 2>/dev/null)  # read here: the job's own read could race the start writing it
      start_pyspy "$before" &
      spy=$!
    else progress "$name start py-spy: not installed"; fi
  fi
  START_WAIT_S=$wait_s $SBS start >"$OUT/start.log" 2>&1
  rc=$?
  [ -n "$spy" ] && start_pyspy_stop "$spy"
  if [ "$rc" != 0 ]; then
    # side-by-side.sh: 2, the server died or its engine failed to start; 3, still starting at the deadline
    if [ "$rc" = 3 ]; then progress "$name did not start within $wait_s s (start.log)"
    else progress "$name failed to start (rc $rc, start.log)"; fi
    $SBS stop >>"$OUT/start.log" 2>&1
    finish
    continue
  fi
  progress "$name ready"
  ready_at=$(date +%s) steps_failed=0
  # side-by-side.sh's B profile is A's with B_PROFILE_SET on top: PROFILE_SET alone changes both sides
  # (the sglang engine runs no profile: its levers are its settings)
  if a_pair && [ "$lever_env" = "$lever_b_env" ]; then
    if on_sglang; then progress "$name: A and B run one lever: an A/A round"
    elif cmp -s "$OUT/profile.yaml" "$OUT/profile-b.yaml"; then
      progress "$name: A and B run one profile and one lever: an A/A round (B_PROFILE_SET adds to PROFILE_SET)"
    fi
  fi
  : >"$OUT/sweeps.log"
  if [ -n "$SWITCH_ROUNDS" ]; then  # each round's levers written, then its levels into a folder of its own
    variant_name=$name variant_out=$OUT
    if [ -n "$UNTIL" ]; then  # said once, before the rounds: what the deadline will leave out
      fit=$(((UNTIL - $(date +%s) - TAIL_S) / ROUND_S))
      [ "$fit" -lt "$ROUND_COUNT" ] &&
        progress "$name: about $((fit < 0 ? 0 : fit)) of $ROUND_COUNT rounds of $ROUND_S s fit before the" \
          "deadline"
    fi
    for round in $SWITCH_ROUNDS; do
      # a round's levels take about ROUND_S (120 s on an H200): one that would leave too little before the deadline
      # for what follows the rounds (the second benchmark, the profiles, py-spy, the stop) is not begun
      if [ -n "$UNTIL" ] && [ $(($(date +%s) + ROUND_S + TAIL_S)) -gt "$UNTIL" ]; then
        progress "$variant_name/${round%%:*} round skipped: $ROUND_S s would not fit"
        continue
      fi
      write_switch "${round#*:}" "$variant_out/lever-switch"
      sleep "$SWITCH_SETTLE_S"
      name="$variant_name/${round%%:*}"
      progress "$name round: levers ${round#*:}"
      export OUT=$variant_out/${round%%:*}
      mkdir -p "$OUT" && : >"$OUT/sweeps.log"
      level_sweeps
      # py-spy's level, after the rounds, names the threads from the last steady level's reading
      for ticks in "$OUT"/cpu-*-c32.txt; do [ -f "$ticks" ] && cp "$ticks" "$variant_out/"; done
    done
    name=$variant_name
    export OUT=$variant_out
  else
    level_sweeps
  fi
  # the first level again, warm, on prompts of its own (sweep-bench moves its seed on): a cold start's first level
  # is to be within 1.2x of it (p95 first audio)
  sweeps bench-again && step "bench again-c32" on_load_cpus env CONCURRENCY=32 SWEEP_NAME=again-c32 "$SBS" sweep-bench \
    >>"$OUT/sweeps.log" 2>&1
  if [ "$TORCH_PROFILE" = 1 ]; then
    for level in $PROFILE_LEVELS; do torch_profile "$level" "$level" || break; done
  fi
  if [ "$PYSPY" = 1 ]; then  # a steady level loads one server at a time: a pair's other would be sampled idle
    for level in $PYSPY_LEVEL; do
      suffix=""  # one level: pyspy/ and pyspy.md, as ever; several: each its own
      [ "$PYSPY_LEVEL_COUNT" -gt 1 ] && suffix="-$level"
      if a_pair && [ "$level" != burst-c32 ] && [ "$level" != c1 ]; then
        progress "$name py-spy $level skipped (one server a level; not a pair)"
      else step "py-spy $level" pyspy_level "$level" "$suffix"; fi
    done
  fi
  $SBS stop >>"$OUT/sweeps.log" 2>&1
  finish
  spent=$(($(date +%s) - began)) swept=$(($(date +%s) - ready_at))
  # a guide to a later start's sweeps only where every step ran (a failed one can end at once) and without rounds
  # (a start is kept time for two, whatever number ran)
  if [ "$steps_failed" = 0 ] && [ -z "$SWITCH_ROUNDS" ] &&
    { [ -z "$longest_swept" ] || [ "$swept" -gt "$longest_swept" ]; }; then longest_swept=$swept; fi
  if [ "$first" = 1 ]; then  # later starts reuse its compile caches
    first=0 expected=$LATER_S
  elif [ "$spent" -gt "$longest_later" ]; then
    longest_later=$spent expected=$spent
  fi
  progress "$name stopped after $spent s"
done
progress "done"
