#!/usr/bin/env bash
# Wait until the server on PORT answers READY_PATH (default /ready) (exit 0), dies (exit 2) or TIMEOUT seconds pass
# (exit 1). PIDFILE and LOG default to start-server.sh's; for start-vllm-omni.sh give READY_PATH=/health
# PIDFILE=/tmp/vllm-omni-PORT.pid LOG=/tmp/vllm-omni-PORT.log.
set -uo pipefail
PORT=${1:-8000}
TIMEOUT=${2:-900}
LOG=${LOG:-/tmp/speech-server-$PORT.log}
READY_PATH=${READY_PATH:-/ready}
PID=$(cat "${PIDFILE:-/tmp/speech-server-$PORT.pid}" 2>/dev/null || echo "")
start=$(date +%s)
last=""
while true; do
  if curl -sf "http://127.0.0.1:$PORT$READY_PATH" >/dev/null 2>&1; then
    echo "ready after $(( $(date +%s) - start )) s"; exit 0
  fi
  if [ -n "$PID" ] && ! kill -0 "$PID" 2>/dev/null; then
    echo "the server exited:"; tail -n 60 "$LOG"; exit 2
  fi
  if [ $(( $(date +%s) - start )) -ge "$TIMEOUT" ]; then
    echo "not ready after $TIMEOUT s"; tail -n 20 "$LOG"; exit 1
  fi
  progress=$(grep -E '"omni (engine|warm-up)' "$LOG" 2>/dev/null | tail -n 1)
  if [ -n "$progress" ] && [ "$progress" != "$last" ]; then echo "$progress"; last=$progress; fi
  sleep 2
done
