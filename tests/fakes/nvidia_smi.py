"""A stand-in for `nvidia-smi --query-compute-apps=pid,process_name --format=csv,noheader [-i IDS]` where no GPU
driver exists: one `pid, name` line a compute process (nothing where there is none), as the real one prints them;
the real program is asked on a GPU host (tests/gpu/test_cuda_mps.py).

Install it on PATH as `nvidia-smi` with `install(directory)`."""

from __future__ import annotations

import os
import sys
from pathlib import Path

APPS_VARIABLE = "FAKE_SMI_APPS"  # ';'-separated `pid,name`: the compute processes on the GPUs
FAIL_VARIABLE = "FAKE_SMI_FAIL"  # set: it fails as without a driver ("NVIDIA-SMI has failed ...", status 9)
IDS_VARIABLE = "FAKE_SMI_IDS_FILE"  # a file it writes the -i it was given to (empty: none)


def install(directory: Path) -> Path:
    """An executable `nvidia-smi` in `directory` that runs this module."""
    program = directory / "nvidia-smi"
    program.write_text(f"#!{sys.executable}\nimport runpy\nrunpy.run_path({__file__!r}, run_name='__main__')\n")
    program.chmod(0o755)
    return program


def main(argv: list[str]) -> int:
    if os.environ.get(FAIL_VARIABLE):
        print("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.")
        return 9
    if "--query-compute-apps=pid,process_name" not in argv or "--format=csv,noheader" not in argv:
        print(f"unexpected arguments: {argv}", file=sys.stderr)
        return 2
    if os.environ.get(IDS_VARIABLE):
        ids = argv[argv.index("-i") + 1] if "-i" in argv else ""
        Path(os.environ[IDS_VARIABLE]).write_text(ids)
    for app in filter(None, (os.environ.get(APPS_VARIABLE) or "").split(";")):
        pid, name = app.split(",", 1)
        print(f"{pid}, {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
