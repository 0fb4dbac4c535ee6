"""The tests' Debian installs (tests/support/debian.py) under the suite's several pytest processes: one apt-get at a
time, and none where another process has just installed the package. Driven with a stand-in apt-get on PATH that
takes its time and leaves the program behind, as the real one does."""

from __future__ import annotations

import multiprocessing
import os
import stat
from pathlib import Path

import pytest

from tests.support import debian

APT_GET = """#!/bin/sh
# a stand-in: logs each call; `install` takes a while, fails if another install is running, then leaves the program
shift 2  # -o DPkg::Lock::Timeout=...
echo "$*" >> "{log}"
if [ "$1" = install ]; then
  mkdir "{busy}" 2>/dev/null || {{ echo "dpkg lock held" >&2; exit 100; }}
  sleep 0.3
  touch "{program}"
  rmdir "{busy}"
fi
"""


def ensure(program: str, lock: str, path: str) -> None:
    os.environ["PATH"] = path
    debian.LOCK = Path(lock)
    debian.ensure_package("thing", lambda: program if Path(program).exists() else None)


@pytest.fixture
def apt_get(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log, program = tmp_path / "apt-get.log", tmp_path / "thing"
    script = bin_dir / "apt-get"
    script.write_text(APT_GET.format(log=log, busy=tmp_path / "busy", program=program))
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setattr(debian, "LOCK", tmp_path / "apt.lock")
    return log, program


def test_processes_that_need_a_package_at_once_install_it_once(apt_get: tuple[Path, Path], tmp_path: Path) -> None:
    log, program = apt_get
    context = multiprocessing.get_context("spawn")
    args = (str(program), str(tmp_path / "apt.lock"), os.environ["PATH"])
    processes = [context.Process(target=ensure, args=args) for _ in range(3)]
    for process in processes:
        process.start()
    for process in processes:
        process.join(60)
    assert [process.exitcode for process in processes] == [0, 0, 0]
    assert log.read_text().splitlines() == ["update -qq", "install -y -qq thing"]


def test_a_package_already_there_is_not_installed(apt_get: tuple[Path, Path]) -> None:
    log, program = apt_get
    program.touch()
    assert debian.ensure_package("thing", lambda: str(program) if program.exists() else None) == str(program)
    assert not log.exists()


def test_an_install_that_leaves_nothing_is_an_error(apt_get: tuple[Path, Path]) -> None:
    with pytest.raises(RuntimeError, match="still not there"):
        debian.ensure_package("thing", lambda: None)
