#!/usr/bin/env bash
# Stop the server started by start-server.sh on PORT: SIGTERM (graceful), then the whole process group.
# PIDFILE names another start script's pid file (start-vllm-omni.sh: /tmp/vllm-omni-PORT.pid).
set -uo pipefail
PORT=${1:-8000}
PIDFILE=${PIDFILE:-/tmp/speech-server-$PORT.pid}
PID=$(cat "$PIDFILE" 2>/dev/null) || { echo "no server recorded on port $PORT"; exit 0; }
kill -TERM "$PID" 2>/dev/null
for _ in $(seq 1 60); do kill -0 "$PID" 2>/dev/null || break; sleep 1; done
kill -KILL -- "-$PID" 2>/dev/null  # stage processes left behind, if any
rm -f "$PIDFILE"
echo "stopped the server on port $PORT"
