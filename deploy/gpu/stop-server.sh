#!/usr/bin/env bash
# Stop the server started by start-server.sh on PORT: SIGTERM (graceful), then the whole process group.
# PIDFILE names another start script's pid file (start-vllm-omni.sh: /tmp/vllm-omni-PORT.pid).
set -uo pipefail
PORT=${1:-8000}
PIDFILE=${PIDFILE:-/tmp/speech-server-$PORT.pid}
PID=$(cat "$PIDFILE" 2>/dev/null) || { echo "no server recorded on port $PORT"; exit 0; }
# alive: not gone, and not a zombie either (exited, waiting for its parent, often init, to reap it: without this a
# container whose first process never reaps would keep `stop` waiting out the whole grace period)
alive() { kill -0 "$PID" 2>/dev/null && ! grep -qs '^[0-9]* (.*) Z ' "/proc/$PID/stat"; }
kill -TERM "$PID" 2>/dev/null
for _ in $(seq 1 300); do alive || break; sleep 0.2; done  # up to 60 s to shut down gracefully
kill -KILL -- "-$PID" 2>/dev/null  # stage processes left behind, if any
rm -f "$PIDFILE"
echo "stopped the server on port $PORT"
