"""Two servers on sglang on one host each get their own port for the talker's process group, whatever TMPDIR each
runs with: run against the claim code of the sglang-omni wheel that uv.lock pins (`utils/port_claim.py`, standard
library only, so its source is run here as it is).

sglang-omni claims the port (29500 first) by creating a file in a folder under TMPDIR. A second server started with
its own TMPDIR saw no claim, took 29500 too, and died at its start with EADDRINUSE. The engine names one folder for the
whole host (`SGLANG_OMNI_PORT_CLAIM_DIR`, an operator's own value wins).
"""

from __future__ import annotations

import atexit
import os
import tempfile
import types
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.engines.sglang.engine import ENGINE_ENVIRONMENT
from tests.support.locked_wheels import fetch_locked_wheel


@pytest.fixture(scope="module")
def port_claim() -> types.ModuleType:
    wheel = fetch_locked_wheel("sglang-omni", "0.1.8", "-py3-none-any.whl", "sglang_omni")
    module = types.ModuleType("sglang_omni_port_claim")
    exec(compile(wheel.source("utils/port_claim.py"), "sglang_omni/utils/port_claim.py", "exec"), module.__dict__)
    return module


@pytest.fixture
def claims(port_claim: types.ModuleType) -> Iterator[None]:
    """The claims a test makes (their files are under its tmp_path), released after it: each claim's file closed, and
    its release at the process's exit dropped (it would close the same descriptor number again, by then another
    file's)."""
    yield
    atexit.unregister(port_claim.release_claim)  # this copy of the module's function: only this module's claims
    while port_claim._HELD_CLAIM_FDS:
        os.close(port_claim._HELD_CLAIM_FDS.pop())


def claim_in(port_claim: types.ModuleType, monkeypatch: pytest.MonkeyPatch, tmpdir: Path) -> int:
    """A server's claim, made under its own TMPDIR."""
    tmpdir.mkdir(exist_ok=True)
    monkeypatch.setenv("TMPDIR", str(tmpdir))
    monkeypatch.setattr(tempfile, "tempdir", None)
    return port_claim.claim_tcp_port()


def test_servers_with_their_own_tmpdir_claim_the_same_port_without_the_engines_folder(
    port_claim: types.ModuleType, claims: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(port_claim.CLAIM_DIR_ENV, raising=False)
    first = claim_in(port_claim, monkeypatch, tmp_path / "server-a")
    second = claim_in(port_claim, monkeypatch, tmp_path / "server-b")
    assert first == second  # the failure seen on a host: both bound it, the second died


def test_with_the_engines_folder_each_server_claims_its_own_port(
    port_claim: types.ModuleType, claims: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert port_claim.CLAIM_DIR_ENV in ENGINE_ENVIRONMENT  # the variable the wheel reads
    folder = ENGINE_ENVIRONMENT[port_claim.CLAIM_DIR_ENV]
    assert os.path.isabs(folder) and "TMPDIR" not in folder
    # the engine's folder itself is the host's; this test's claims go to a folder of its own, named the same way
    monkeypatch.setenv(port_claim.CLAIM_DIR_ENV, str(tmp_path / "host-claims"))
    first = claim_in(port_claim, monkeypatch, tmp_path / "server-a")
    second = claim_in(port_claim, monkeypatch, tmp_path / "server-b")
    assert first != second
    assert port_claim.claim_directory() == tmp_path / "host-claims"
