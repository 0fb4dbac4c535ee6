#!/usr/bin/env bash
# Stop the server started by start-server.sh on PORT: SIGTERM (graceful), then the whole process group.
set -uo pipefail
PORT=${1:-8000}
PID=$(cat "/tmp/speech-server-$PORT.pid" 2>/dev/null) || { echo "no server recorded on port $PORT"; exit 0; }
kill -TERM "$PID" 2>/dev/null
for _ in $(seq 1 60); do kill -0 "$PID" 2>/dev/null || break; sleep 1; done
kill -KILL -- "-$PID" 2>/dev/null  # stage processes left behind, if any
rm -f "/tmp/speech-server-$PORT.pid"
echo "stopped the server on port $PORT"
