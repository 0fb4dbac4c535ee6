#!/usr/bin/env bash
# N replicas of the speech service behind HAProxy (deploy/fleet/haproxy.cfg.in) on one host: embedded replicas on the
# CPU, or omni replicas one per GPU.
#
#   deploy/fleet/fleet.sh start              start the replicas not running yet and HAProxy; wait until all are ready
#   deploy/fleet/fleet.sh restart I          SIGTERM replica I (it drains: its streams finish, HAProxy stops sending it
#                                            work within a second), start it again, wait until HAProxy sees it up
#   deploy/fleet/fleet.sh rolling-restart    restart every replica in turn
#   deploy/fleet/fleet.sh kill I             SIGKILL replica I (a crash: the streams it holds are cut)
#   deploy/fleet/fleet.sh kill-stage I [P]   SIGKILL the processes under replica I whose command line holds P (default
#                                            StageEngineCoreProc_stage1: vllm-omni 0.30's code2wav stage process, titled
#                                            VLLM::StageEngineCoreProc_stage1_...): its replica leaves the pool
#   deploy/fleet/fleet.sh status             each replica's state, and HAProxy's
#   deploy/fleet/fleet.sh stop               stop HAProxy and every replica (each drains first)
#
# Settings (environment):
#   REPLICAS=3                   how many
#   ENGINE=embedded              embedded, or omni: replica I gets CUDA_VISIBLE_DEVICES=I (one GPU each) and the
#                                SPEECH_OMNI__* settings of this environment (SPEECH_OMNI__MODEL, ...)
#   FRONT=127.0.0.1:8000         where HAProxy listens (the fleet's one address)
#   STATS=127.0.0.1:8404         HAProxy's stats page (each replica's state: /stats;csv)
#   BASE_PORT=8100               replica I listens on 127.0.0.1:BASE_PORT+I
#   BALANCE=leastconn            HAProxy's balance algorithm (roundrobin for comparison)
#   WORK=/tmp/speech-fleet       haproxy.cfg, pid files, logs (replica-I.log, haproxy.log)
#   SPEECH_SERVER=speech-server  the service's command;  HAPROXY=haproxy  HAProxy's;  PYTHON=python3
#   START_WAIT_S=600             how long a start waits for readiness (an omni replica's cold start takes minutes)
#   Registered voices live in SPEECH_VOICE_STORE: give every replica the same directory (the default is per user, the
#   same on one host), so that a voice registered through the fleet is found on every replica.
set -uo pipefail
cd "$(dirname "$0")/../.."
REPLICAS=${REPLICAS:-3}
ENGINE=${ENGINE:-embedded}
FRONT=${FRONT:-127.0.0.1:8000}
STATS=${STATS:-127.0.0.1:8404}
BASE_PORT=${BASE_PORT:-8100}
BALANCE=${BALANCE:-leastconn}
WORK=${WORK:-/tmp/speech-fleet}
SPEECH_SERVER=${SPEECH_SERVER:-speech-server}
HAPROXY=${HAPROXY:-haproxy}
PYTHON=${PYTHON:-python3}
START_WAIT_S=${START_WAIT_S:-600}

log() { echo "[fleet $(date -u +%T)] $*"; }
port_of() { echo $((BASE_PORT + $1)); }
pidfile_of() { echo "$WORK/replica-$1.pid"; }
replicas() { seq 0 $((REPLICAS - 1)); }

running() {  # $1 a pid file: its process is alive
  local pid
  pid=$(cat "$1" 2>/dev/null) || return 1
  kill -0 "$pid" 2>/dev/null
}

ready() {  # $1 replica: /ready answers 200
  "$PYTHON" - "http://127.0.0.1:$(port_of "$1")/ready" <<'PY' >/dev/null 2>&1
import sys, urllib.request
sys.exit(0 if urllib.request.urlopen(sys.argv[1], timeout=2).status == 200 else 1)
PY
}

wait_ready() {  # $1 replica
  local deadline=$(( $(date +%s) + START_WAIT_S ))
  until ready "$1"; do
    running "$(pidfile_of "$1")" || { log "replica $1 exited; the end of its log:"; tail -n 30 "$WORK/replica-$1.log"; return 1; }
    [ "$(date +%s)" -lt "$deadline" ] || { log "replica $1 not ready after $START_WAIT_S s"; return 1; }
    sleep 0.2
  done
}

start_replica() {  # $1 replica
  local settings=()
  [ "$ENGINE" = omni ] && settings=(CUDA_VISIBLE_DEVICES="$1")
  env "${settings[@]}" setsid nohup "$SPEECH_SERVER" --engine "$ENGINE" --host 127.0.0.1 --port "$(port_of "$1")" \
    >>"$WORK/replica-$1.log" 2>&1 </dev/null &
  echo $! >"$(pidfile_of "$1")"
  log "replica $1 starting on port $(port_of "$1"), pid $!"
}

stop_replica() {  # $1 replica: SIGTERM (a drain), then wait for the exit
  local pidfile pid
  pidfile=$(pidfile_of "$1")
  running "$pidfile" || return 0
  pid=$(cat "$pidfile")
  kill -TERM "$pid"
  while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
  log "replica $1 drained and exited"
}

write_config() {
  local servers="" i
  for i in $(replicas); do servers+="    server r$i 127.0.0.1:$(port_of "$i") check"$'\n'; done
  "$PYTHON" - "$WORK/haproxy.cfg" "$FRONT" "$STATS" "$BALANCE" "$servers" <<'PY'
import sys
out, bind, stats, balance, servers = sys.argv[1:]
text = open("deploy/fleet/haproxy.cfg.in").read()
for key, value in {"@BIND@": bind, "@STATS@": stats, "@BALANCE@": balance, "@SERVERS@": servers.rstrip("\n")}.items():
    text = text.replace(key, value)
open(out, "w").write(text)
PY
}

haproxy_state() {  # $1 replica: its state in HAProxy (UP, DOWN, ...), from the stats page
  "$PYTHON" - "http://$STATS/stats;csv" "r$1" <<'PY' 2>/dev/null
import csv, io, sys, urllib.request
rows = csv.DictReader(io.StringIO(urllib.request.urlopen(sys.argv[1], timeout=2).read().decode().lstrip("# ")))
print(next((r["status"] for r in rows if r["pxname"] == "replicas" and r["svname"] == sys.argv[2]), "?"))
PY
}

haproxy_up() {  # $1 replica: wait until HAProxy sends it work (its health check passed `rise` times)
  local deadline=$(( $(date +%s) + 30 ))
  until [ "$(haproxy_state "$1")" = UP ]; do
    [ "$(date +%s)" -lt "$deadline" ] || { log "HAProxy does not see replica $1 up"; return 1; }
    sleep 0.2
  done
}

cmd_start() {
  mkdir -p "$WORK"
  command -v "$HAPROXY" >/dev/null || { log "$HAPROXY is not installed (Debian: apt-get install haproxy)"; return 1; }
  local i
  for i in $(replicas); do running "$(pidfile_of "$i")" || start_replica "$i"; done
  for i in $(replicas); do wait_ready "$i" || return 1; done
  if ! running "$WORK/haproxy.pid"; then
    write_config
    "$HAPROXY" -c -f "$WORK/haproxy.cfg" >/dev/null || { log "haproxy.cfg does not check"; return 1; }
    setsid nohup "$HAPROXY" -f "$WORK/haproxy.cfg" -db >>"$WORK/haproxy.log" 2>&1 </dev/null &
    echo $! >"$WORK/haproxy.pid"
  fi
  for i in $(replicas); do haproxy_up "$i" || return 1; done
  log "fleet of $REPLICAS ready at http://$FRONT ($BALANCE)"
}

cmd_restart() {  # $1 replica
  stop_replica "$1"
  start_replica "$1"
  wait_ready "$1" || return 1
  haproxy_up "$1"
  log "replica $1 back in the pool"
}

cmd_status() {
  local i
  for i in $(replicas); do
    if ready "$i"; then echo "replica $i: ready on port $(port_of "$i")"
    elif running "$(pidfile_of "$i")"; then echo "replica $i: running, not ready"
    else echo "replica $i: not running"; fi
  done
  if running "$WORK/haproxy.pid"; then
    echo "haproxy: running at $FRONT; $(for i in $(replicas); do echo -n "r$i $(haproxy_state "$i") "; done)"
  else
    echo "haproxy: not running"
  fi
}

descendants() {  # $1 pid: every process below it, read from /proc (a slim host has no procps `ps`)
  local stat line fields child
  for stat in /proc/[0-9]*/stat; do
    read -r line <"$stat" 2>/dev/null || continue
    # "pid (comm) state ppid ...": the name may hold spaces and parentheses, so the fields after its last ')'
    read -ra fields <<<"${line##*) }"
    [ "${fields[1]}" = "$1" ] || continue
    child=${stat#/proc/} && child=${child%/stat}
    echo "$child"
    descendants "$child"
  done
}

cmd_kill() {  # $1 replica
  local pid
  running "$(pidfile_of "$1")" || { log "replica $1 is not running"; return 1; }
  pid=$(cat "$(pidfile_of "$1")")
  kill -KILL "$pid"
  log "replica $1 killed (pid $pid)"
}

cmd_kill_stage() {  # $1 replica, $2 what the process's command line holds
  local pid child line killed=0
  running "$(pidfile_of "$1")" || { log "replica $1 is not running"; return 1; }
  pid=$(cat "$(pidfile_of "$1")")
  for child in $(descendants "$pid"); do
    line=$(tr '\0' ' ' <"/proc/$child/cmdline" 2>/dev/null) || continue
    case $line in
      *"$2"*) kill -KILL "$child" 2>/dev/null && killed=$((killed + 1)) && log "replica $1: killed $child, which holds '$2' (${line:0:100})" ;;
    esac
  done
  [ "$killed" -gt 0 ] || { log "replica $1: no process under pid $pid holds '$2'"; return 1; }
}

cmd_stop() {
  if running "$WORK/haproxy.pid"; then kill -TERM "$(cat "$WORK/haproxy.pid")"; fi
  local i
  for i in $(replicas); do stop_replica "$i" & done
  wait
}

case ${1:-} in
  start) cmd_start ;;
  restart) cmd_restart "${2:?which replica}" ;;
  rolling-restart) for i in $(replicas); do cmd_restart "$i" || exit 1; done ;;
  kill) cmd_kill "${2:?which replica}" ;;
  kill-stage) cmd_kill_stage "${2:?which replica}" "${3:-StageEngineCoreProc_stage1}" ;;
  status) cmd_status ;;
  stop) cmd_stop ;;
  *) sed -n '2,28p' "$0"; exit 64 ;;
esac
