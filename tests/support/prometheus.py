"""A real Prometheus (Debian's package) scraping a live server, for the observability tests."""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.support.debian import ensure_package
from tests.support.server import free_port


def ensure_installed() -> str:
    """Debian's prometheus (with promtool), installed if missing: the test set-up runs as root on CI."""
    return ensure_package("prometheus", lambda: shutil.which("prometheus") if shutil.which("promtool") else None)


@dataclass
class RunningPrometheus:
    process: subprocess.Popen[bytes]
    url: str

    def query(self, expr: str) -> dict:
        response = httpx.get(f"{self.url}/api/v1/query", params={"query": expr}, timeout=30)
        return response.json()

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(20)
        except subprocess.TimeoutExpired:
            self.process.kill()


def start_prometheus(workdir: Path, target: str, rules: Path) -> RunningPrometheus:
    binary = ensure_installed()
    port = free_port()
    # the same rules, evaluated every second instead of every 30 s, so that a short test sees recorded series
    (workdir / "rules.yaml").write_text(re.sub(r"interval: \d+[smh]", "interval: 1s", rules.read_text()))
    (workdir / "prometheus.yml").write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        "rule_files: [rules.yaml]\n"
        "scrape_configs:\n"
        f"  - job_name: speech\n    static_configs:\n      - targets: ['{target}']\n"
    )
    process = subprocess.Popen(
        [
            binary,
            f"--config.file={workdir / 'prometheus.yml'}",
            f"--storage.tsdb.path={workdir / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=(workdir / "prometheus.log").open("wb"),
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/-/ready", timeout=2).status_code == 200:
                return RunningPrometheus(process, url)
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    process.kill()
    raise TimeoutError(f"prometheus did not start:\n{(workdir / 'prometheus.log').read_text()[-3000:]}")
