"""What the service's wheel carries: the code and the data it reads at run time, not benchmark results."""

from __future__ import annotations

import os
import subprocess
import zipfile
from pathlib import Path

from tests.deploy.test_install_sets import uv
from tests.support.dockerfile import ROOT

# files that are not Python but that the service or the load tool read at run time
RUNTIME_DATA = {"app/static/index.html", "app/static/playground.css", "app/static/playground.js"}
RUNTIME_DATA_DIRS = ("loadtest/data/",)


def test_the_wheel_holds_code_and_runtime_data_only(tmp_path: Path) -> None:
    done = subprocess.run(
        [uv(), "build", "--wheel", "--out-dir", str(tmp_path), str(ROOT)],
        env={**os.environ, "UV_PYTHON_DOWNLOADS": "never"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (wheel,) = tmp_path.glob("speech_service-*.whl")
    names = [n for n in zipfile.ZipFile(wheel).namelist() if ".dist-info/" not in n]
    assert not [n for n in names if "results" in n.split("/") or n.startswith("benchmarks/")]
    other = [
        n for n in names if not n.endswith(".py") and n not in RUNTIME_DATA and not n.startswith(RUNTIME_DATA_DIRS)
    ]
    assert other == [], other
    assert {n.split("/")[0] for n in names} == {"app", "loadtest"}
    # the results alone made it 12 MB; the code and its data are well under 1 MB compressed
    assert wheel.stat().st_size < 1_500_000, wheel.stat().st_size
