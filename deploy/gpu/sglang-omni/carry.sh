#!/usr/bin/env bash
# Installs on the GPU host what build.sh made, into a target folder of its own (sglang-omni's transformers and
# FastAPI differ from vllm 0.30's), to be put before the environment that has torch 2.13.0 on PYTHONPATH.
#
#   deploy/gpu/sglang-omni/carry.sh stash DIR     copy the pieces found in DIR/pieces (any subset, one transfer at a
#                                                 time) to $PARTS, each checked against DIR/pieces/SUMS
#   deploy/gpu/sglang-omni/carry.sh install DIR   join the pieces in $PARTS (or take DIR/sglang-omni.tar), check,
#                                                 install into $SITE, write $SITE/../env.sh, check the imports
# Settings: PARTS=/tmp/sglang-omni/parts SITE=/tmp/sglang-omni/site PYTHON=python3 (with torch 2.13.0 importable,
# e.g. after sourcing the vllm 0.30 environment). Every failure line starts with "SGL FAIL".
set -u
ACTION=${1:?stash|install}; DIR=$(cd "${2:?DIR}" && pwd)
PARTS=${PARTS:-/tmp/sglang-omni/parts}; SITE=${SITE:-/tmp/sglang-omni/site}; PYTHON=${PYTHON:-python3}
fail() { echo "SGL FAIL: $*"; exit 1; }

if [ "$ACTION" = stash ]; then
  mkdir -p "$PARTS"
  declare -A SUM; while read -r h n; do SUM[$n]=$h; done < "$DIR/pieces/SUMS"
  for f in "$DIR"/pieces/[0-9][0-9]; do
    [ -f "$f" ] || continue
    n=$(basename "$f")
    [ "$(sha256sum "$f" | cut -d' ' -f1)" = "${SUM[$n]:-}" ] || { echo "SGL FAIL: piece $n does not match SUMS"; continue; }
    cp "$f" "$PARTS/$n.tmp" && mv "$PARTS/$n.tmp" "$PARTS/$n"
  done
  missing=""; for n in "${!SUM[@]}"; do [ -f "$PARTS/$n" ] || missing="$missing $n"; done
  echo "SGL STASH: $(ls "$PARTS" | grep -vc '\.tmp$') of ${#SUM[@]} pieces; missing:$(echo $missing | tr ' ' '\n' | sort | xargs)"
  exit 0
fi
[ "$ACTION" = install ] || fail "unknown action $ACTION (stash|install)"

t0=$(date +%s)
WORK=$(dirname "$SITE")/work
rm -rf "$WORK" "$SITE"; mkdir -p "$WORK" "$SITE"
if [ -f "$DIR/sglang-omni.tar" ]; then
  tar -xf "$DIR/sglang-omni.tar" -C "$WORK" || fail "untar"
else
  read -r sha size n < "$DIR/pieces/TAR"
  have=$(ls "$PARTS" 2>/dev/null | grep -c '^[0-9][0-9]$')
  [ "$have" = "$n" ] || fail "$have of $n pieces in $PARTS"
  cat "$PARTS"/[0-9][0-9] > "$WORK/all.tar" || fail "join"
  [ "$(stat -c %s "$WORK/all.tar")" = "$size" ] || fail "joined tar is $(stat -c %s "$WORK/all.tar") bytes, expected $size"
  [ "$(sha256sum "$WORK/all.tar" | cut -d' ' -f1)" = "$sha" ] || fail "sha256 of the joined tar differs"
  tar -xf "$WORK/all.tar" -C "$WORK" && rm -f "$WORK/all.tar" || fail "untar"
fi
[ "$(ls "$WORK"/wheels/*.whl | wc -l)" = "$(grep -c . "$WORK/MANIFEST")" ] || fail "wheels differ from MANIFEST"
"$PYTHON" -m pip install -q --no-index --no-deps --no-compile --target "$SITE" "$WORK"/wheels/*.whl || fail "pip install --target $SITE"
rm -rf "$WORK"
cat > "$(dirname "$SITE")/env.sh" <<ENV
# sglang-omni 0.1.8 before the environment that has torch 2.13.0; sgl-omni is \$SGL_OMNI
export PYTHONPATH=$SITE\${PYTHONPATH:+:\$PYTHONPATH}
export SGL_OMNI="$PYTHON -m sglang_omni.cli"
ENV
echo "SGL: installed into $SITE ($(du -sh "$SITE" | cut -f1)) in $(( $(date +%s) - t0 )) s"

export PYTHONPATH=$SITE${PYTHONPATH:+:$PYTHONPATH}
"$PYTHON" - <<'PY' 2>&1 | grep -v "^WARNING\|^INFO" | tail -30
import importlib, sys
import torch
print("  torch", torch.__version__, "cuda", torch.cuda.is_available(), torch.version.cuda)
bad = 0 if torch.__version__.startswith("2.13.0") else 1
if bad:
    print("SGL FAIL: torch", torch.__version__, "is not 2.13.0 (source the vllm 0.30 environment first)")
for name in ("sglang", "transformers", "flashinfer", "sglang_omni.cli", "sglang_omni.cli.serve", "sglang_omni.serve.openai_api",
             "sglang_omni.models.qwen3_tts.stages", "sglang_omni.models.qwen3_tts.sglang_model",
             "sglang_omni.models.qwen3_tts.streaming_vocoder", "sglang_omni.models.qwen3_tts.engine_builder"):
    try:
        module = importlib.import_module(name)
        print("  ok  ", name, getattr(module, "__version__", ""), getattr(module, "__file__", "")[:80])
    except BaseException as exc:  # an import that fails here fails the server's start later
        bad += 1
        print("SGL FAIL: import", name, "->", type(exc).__name__, str(exc)[:300])
sys.exit(1 if bad else 0)
PY
[ "${PIPESTATUS[0]}" = 0 ] || fail "import checks (above)"
echo "SGL OK ($(( $(date +%s) - t0 )) s). Use: source $(dirname "$SITE")/env.sh"
