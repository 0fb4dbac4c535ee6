#!/usr/bin/env bash
# vllm-omni 0.30's own benchmark (`vllm bench serve --omni --backend openai-audio-speech`) and speech-loadtest against
# one server, turn about, on the same texts in the same order: do the two tools count a server's requests per second
# alike? The server is the service on the embedded (CPU) engine, as `make run` starts it.
#
#   BENCH_PYTHON=/path/to/venv/bin/python benchmarks/cpu/2026-11-27-referee-agreement/run.sh
#
# BENCH_PYTHON: a Python with vllm[bench]==0.30.0 and vllm-omni==0.30.0 installed from PyPI in a virtual environment of its
# own (`pip install "vllm[bench]==0.30.0" vllm-omni==0.30.0`; the benchmark's client runs on a CPU-only machine).
# Settings: LEVELS="2 4 8" (concurrency), PROMPTS=48 (requests per run), REPEAT=2 (runs per tool and level),
# PORT=8000, OUT (this folder).
set -euo pipefail
cd "$(dirname "$0")/../../.."
HERE=benchmarks/cpu/2026-11-27-referee-agreement
OUT=${OUT:-$HERE}
PORT=${PORT:-8000}
URL=http://127.0.0.1:$PORT
LEVELS=${LEVELS:-2 4 8}
PROMPTS=${PROMPTS:-48}
REPEAT=${REPEAT:-2}
BENCH_PYTHON=${BENCH_PYTHON:?a python with vllm==0.30.0 and vllm-omni==0.30.0}
mkdir -p "$OUT"

# the load tool's shipped English texts (medium) in the order it sends them, cycled to one line per request, as the
# benchmark's custom dataset (with fewer lines than requests it would draw the rest at random): request i speaks the
# same text for both
.venv/bin/python - "$OUT/texts.jsonl" "$PROMPTS" <<'PY'
import json, sys
texts = json.load(open("loadtest/data/texts.json"))["English"]["medium"]
with open(sys.argv[1], "w") as out:
    for i in range(int(sys.argv[2])):
        out.write(json.dumps({"prompt": texts[i % len(texts)]}) + "\n")
PY

.venv/bin/speech-server --host 127.0.0.1 --port "$PORT" >"$OUT/server.log" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null || true; wait $SERVER 2>/dev/null || true' EXIT
for _ in $(seq 300); do curl -sf "$URL/ready" >/dev/null && break; sleep 1; done
curl -sf "$URL/ready" >/dev/null

bench() {  # $1 level, $2 file name
  "$BENCH_PYTHON" -c "import sys; from vllm_omni.entrypoints.cli.main import main; sys.argv[0] = 'vllm'; sys.exit(main())" \
    bench serve --omni --backend openai-audio-speech --base-url "$URL" --endpoint /v1/audio/speech --model tts-1 \
    --dataset-name custom --dataset-path "$OUT/texts.jsonl" --disable-shuffle --skip-tokenizer-init \
    --custom-output-len 1 --num-prompts "$PROMPTS" --max-concurrency "$1" --extra-body '{"voice": "alloy"}' \
    --percentile-metrics audio_ttfp,audio_rtf,e2el --metric-percentiles 50,95 \
    --save-result --result-dir "$OUT" --result-filename "$2.json" >"$OUT/$2.log" 2>&1
}
loadtest() {  # $1 level, $2 folder name
  .venv/bin/speech-loadtest --target "$URL" --model tts-1 --voice alloy --texts medium --format pcm \
    --concurrency "$1" --requests "$PROMPTS" --warmup 0 --rounds 1 --stagger 0 --no-progress --out "$OUT/$2" \
    >"$OUT/$2.log" 2>&1
}

loadtest 2 warmup  # the server's first requests (its encoders, its caches) before anything is measured
rm -rf "$OUT/warmup" "$OUT/warmup.log"
for level in $LEVELS; do
  for round in $(seq "$REPEAT"); do  # turn about: drift in the machine's load falls on both tools alike
    echo "c=$level round $round: vllm bench"; bench "$level" "bench-c$level-$round"
    echo "c=$level round $round: speech-loadtest"; loadtest "$level" "loadtest-c$level-$round"
  done
done
kill $SERVER; wait $SERVER 2>/dev/null || true; gzip -9f "$OUT/server.log"
.venv/bin/python "$HERE/summary.py" "$OUT" | tee "$OUT/summary.md"
