#!/usr/bin/env bash
# Downloads (on a machine with PyPI) the wheels sglang-omni 0.1.8 needs on a GPU host with Python 3.12, for the
# three-way comparison of deploy/gpu/side-by-side.sh (target `sglang`). The host may have no network: the result is
# one tar, optionally split into pieces for a transfer that limits a file's size; carry.sh installs it there.
#
#   deploy/gpu/sglang-omni/build.sh OUTDIR
#     -> OUTDIR/sglang-omni.tar (wheels/, MANIFEST, LEFT-OUT), and with PIECE_MIB set, OUTDIR/pieces/00.. + SUMS + TAR
#
# Settings (environment):
#   BESIDE=FILE      a requirements file (name==version lines) of the environment the target folder will sit beside
#                    (the vllm 0.30 install, which has torch 2.13.0, Triton and the CUDA 13 libraries): a wheel it
#                    holds at the same version is not carried again. Without it, everything is carried (~4.5 GiB).
#   HOST_LIBS=1      leave out the NVIDIA runtime wheels the host's CUDA 13 image has (cuBLAS, cuFFT, cuRAND, ...).
#   PIECE_MIB=60     split the tar into pieces of this size.
# requirements.txt is sglang-omni 0.1.8's resolved set; left-out.txt lists what is never carried and why.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=$(mkdir -p "${1:?OUTDIR}" && cd "$1" && pwd)
W=$OUT/work
rm -rf "$W" "$OUT/pieces" "$OUT/sglang-omni.tar"; mkdir -p "$W/wheels"

# What to fetch: requirements.txt minus left-out.txt, minus BESIDE's identical pins, minus host libraries.
python3 - "$HERE/requirements.txt" "$HERE/left-out.txt" "${BESIDE:-}" "${HOST_LIBS:-0}" "$W" <<'PY'
import re, sys
from pathlib import Path
reqs, left_out, beside, host_libs, work = sys.argv[1:]
def pins(path: str) -> dict[str, str]:
    found = {}
    for line in Path(path).read_text().splitlines():
        m = re.match(r"\s*([A-Za-z0-9_.\-]+)==(\S+)", line)
        if m:
            found[m.group(1).lower().replace("_", "-")] = m.group(2)
    return found
def names(path: str) -> set[str]:
    return {line.split("#")[0].strip().lower() for line in Path(path).read_text().splitlines() if line.split("#")[0].strip()}
wanted, never = pins(reqs), names(left_out)
there = pins(beside) if beside else {}
# The CUDA 13 runtime a CUDA 13 image already ships (torch loads the image's copy when the wheel is absent).
host = re.compile(r"^(nvidia-(cublas|cuda-cupti|cuda-nvrtc|cuda-runtime|cufft|cufile|curand|cusolver|cusparse|"
                  r"cusparselt-cu13|nvjitlink|nvtx)|cuda-toolkit)$")
source_only = {"logger", "openai-whisper", "s3prl", "sox", "wget"}
binary, source = [], []
for name, version in sorted(wanted.items()):
    if name in never or there.get(name) == version or (host_libs == "1" and host.match(name)):
        continue
    (source if name in source_only else binary).append(f"{name}=={version}")
Path(work, "binary.txt").write_text("\n".join(binary) + "\n")
Path(work, "source.txt").write_text("\n".join(source) + "\n")
print(f"carrying {len(binary)} binary and {len(source)} source-built wheels; {len(never)} left out on purpose, "
      f"{sum(there.get(n) == v for n, v in wanted.items())} already beside")
PY

TAGS="--python-version 3.12 --implementation cp --abi cp312 --abi abi3 --abi none"
for n in 34 31 28 27 26 24 18 17 12 5; do TAGS="$TAGS --platform manylinux_2_${n}_x86_64"; done
TAGS="$TAGS --platform manylinux2014_x86_64 --platform manylinux2010_x86_64 --platform manylinux1_x86_64 --platform any"
python3 -m pip download -q --no-deps --only-binary=:all: $TAGS -d "$W/wheels" -r "$W/binary.txt"
# Pure-Python packages published as source only: build their wheels here (none has a compiled part).
[ -s "$W/source.txt" ] && python3 -m pip wheel -q --no-deps -w "$W/wheels" -r "$W/source.txt"
n_want=$(grep -c . "$W/binary.txt" "$W/source.txt" | awk -F: '{s+=$2} END {print s}')
n_have=$(ls "$W/wheels" | grep -c '\.whl$')
[ "$n_have" = "$n_want" ] || { echo "build: $n_have wheels for $n_want requirements"; exit 1; }
ls "$W/wheels" > "$W/MANIFEST"; cp "$HERE/left-out.txt" "$W/LEFT-OUT"
(cd "$W" && tar -cf "$OUT/sglang-omni.tar" MANIFEST LEFT-OUT wheels)
rm -rf "$W"
if [ -n "${PIECE_MIB:-}" ]; then
  mkdir -p "$OUT/pieces"
  split -b "${PIECE_MIB}M" -d -a 2 "$OUT/sglang-omni.tar" "$OUT/pieces/"
  (cd "$OUT/pieces" && for f in [0-9][0-9]; do sha256sum "$f"; done) > "$OUT/pieces/SUMS"
  echo "$(sha256sum "$OUT/sglang-omni.tar" | cut -d' ' -f1) $(stat -c %s "$OUT/sglang-omni.tar") $(grep -c . "$OUT/pieces/SUMS")" > "$OUT/pieces/TAR"
  rm -f "$OUT/sglang-omni.tar"
  echo "pieces: $(grep -c . "$OUT/pieces/SUMS") in $OUT/pieces ($(du -sh "$OUT/pieces" | cut -f1))"
else
  echo "wrote $OUT/sglang-omni.tar ($(du -sh "$OUT/sglang-omni.tar" | cut -f1))"
fi
