"""Debian packages the tests run for real (chromium, prometheus, haproxy), installed with apt-get when missing: the
test machines run as root. The suite runs in several pytest processes at once (`make test`), so one install at a time:
two apt-gets at once would fail on dpkg's lock, and the second would find the package there anyway."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

LOCK = Path(tempfile.gettempdir()) / "speech-service-tests-apt.lock"


def ensure_package(package: str, find: Callable[[], str | None]) -> str:
    """What `find` finds (a program's path), after installing `package` when it finds nothing. Looked for under the
    lock too: a program another process is installing may be on disk before dpkg has finished with it."""
    with LOCK.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not (found := find()):
            if shutil.which("apt-get") is None:
                raise RuntimeError(f"{package} is missing and apt-get is not available to install it")
            env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}  # CI has no terminal to answer a prompt
            wait = ["-o", "DPkg::Lock::Timeout=600"]  # behind any other apt on the machine, not failing on its lock
            subprocess.run(["apt-get", *wait, "update", "-qq"], check=True, env=env, capture_output=True, timeout=900)
            install = ["apt-get", *wait, "install", "-y", "-qq", package]
            subprocess.run(install, check=True, env=env, capture_output=True, timeout=1500)
            found = find()
    if not found:
        raise RuntimeError(f"apt-get installed {package}, but what the tests run from it is still not there")
    return found
