"""The service as each install set runs it. `image`: exactly the dependency set the CPU image installs (the Dockerfile's
own `make install` extras and flags, `uv sync --frozen`, into a fresh environment) next to a copy of what the image
copies; `wheel`: `pip install 'speech_service-*.whl[embedded]'` from a wheel built with `uv build`, in a fresh venv.
Each is started as the image's non-root user, with the image's environment, in a working directory it cannot write,
with only a temporary directory and the voice-store volume writable, and must get ready and speak every format."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.support.dockerfile import ROOT, Stage, stages
from tests.support.server import RunningServer, free_port, wait_until
from tests.support.speech import FORMATS, assert_speaks

# Modules of the omni engine that import vllm-omni or torch at load: vllm-omni's stage processes load them by dotted
# path or through its model registry, in the GPU image only.
NEEDS_OMNI_EXTRA = {
    "app.engines.omni.stage_plugins.code2wav_scheduler",
    "app.engines.omni.stage_plugins.code2wav_worker",
    "app.engines.omni.stage_plugins.code2wav_model",
    "app.engines.omni.stage_plugins.dilated_convs",
    "app.engines.omni.stage_plugins.predictor_kernels",
    "app.engines.omni.stage_plugins.talker_model",
    "app.engines.omni.stage_plugins.talker_worker",
    "app.engines.omni.stage_plugins.window_doorbell_stage",
}


def uv() -> str:
    """The uv the Makefile uses: from PATH, else the private copy `make install` puts in .tools/."""
    found = shutil.which("uv") or ROOT / ".tools/uv/bin/uv"
    assert Path(found).exists(), "uv not found: run `make install` first"
    return str(found)


def usable_by_others(path: Path) -> bool:
    """Whether a user other than the owner can execute `path` (every directory on the way searchable)."""
    real = path.resolve()
    return real.is_file() and all(p.stat().st_mode & 0o001 for p in [real, *real.parents])


def service_python() -> str:
    """A Python >= 3.11 the service user can run, to build its environment on (this test's own interpreter may live
    where only root can reach, e.g. under /root)."""
    for candidate in (sys._base_executable, shutil.which("python3"), "/usr/bin/python3", "/usr/local/bin/python3"):
        if candidate and usable_by_others(Path(candidate)):
            version = subprocess.run(
                [candidate, "-c", "import sys, venv; print(sys.version_info >= (3, 11))"],
                capture_output=True,
                text=True,
            )
            if version.stdout.strip() == "True":
                return candidate
    pytest.skip("no Python >= 3.11 with venv that a non-root user can run, to build the service's environment on")


def run(command: list[str], **kwargs: object) -> None:
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, **kwargs)
    assert done.returncode == 0, f"{command} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"


class Sandbox:
    """A directory tree laid out as the container sees it: root-owned, readable by all, writable by root only; plus a
    temporary directory and a voice-store volume owned by the service user."""

    def __init__(self, stage: Stage) -> None:
        self.stage = stage
        self.uid, _, gid = stage.user().partition(":")
        self.gid = int(gid or self.uid)
        self.root = Path(tempfile.mkdtemp(prefix="speech-install-set-"))
        self.root.chmod(0o755)  # mkdtemp makes 0700: the service user must reach its directories
        self.tmp = self.owned("tmp")
        self.voices = self.owned("voices")

    def owned(self, name: str) -> Path:
        path = self.root / name
        path.mkdir(mode=0o700)
        os.chown(path, int(self.uid), self.gid)
        return path

    def image_env(self, bin_dir: Path, workdir: Path) -> dict[str, str]:
        """The stage's ENV with its paths mapped into the sandbox (and a loopback port: tests never listen wider)."""
        mapped = {
            self.stage.workdir(): str(workdir),
            "/tmp": str(self.tmp),
            **dict.fromkeys(self.stage.volumes(), str(self.voices)),
        }
        env: dict[str, str] = {}
        for key, value in self.stage.env().items():
            for image_path, here in mapped.items():
                value = value.replace(image_path, here)
            env[key] = value
        env["PATH"] = f"{bin_dir}:/usr/local/bin:/usr/bin:/bin"
        env["SPEECH_HOST"] = "127.0.0.1"
        env["SPEECH_PORT"] = str(free_port())
        env["TMPDIR"] = str(self.tmp)
        env["SPEECH_EMBEDDED__WORKERS"] = "1"  # one model instance is enough for these requests, and starts fastest
        return env

    def start(self, bin_dir: Path, workdir: Path) -> RunningServer:
        env = self.image_env(bin_dir, workdir)
        log_path = self.root / "server.log"
        with log_path.open("wb") as log:
            process = subprocess.Popen(
                [str(bin_dir / "speech-server")],  # the image's ENTRYPOINT, no arguments
                cwd=workdir,
                env=env,
                user=int(self.uid),
                group=self.gid,
                extra_groups=[],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        server = RunningServer(process, f"http://127.0.0.1:{env['SPEECH_PORT']}", log_path, env)
        try:
            wait_until(server, "/ready", timeout_s=180)
        except BaseException:
            server.stop()
            raise
        return server

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


def image_install(sandbox: Sandbox) -> tuple[Path, Path]:
    """The image's files at its WORKDIR and its `make install`: uv sync --frozen with the same extras and flags."""
    workdir = sandbox.root / "srv"
    workdir.mkdir(mode=0o755)
    for sources, _ in sandbox.stage.copies():
        for source in sources:
            src = ROOT / source
            if src.is_dir():
                shutil.copytree(src, workdir / source, ignore=shutil.ignore_patterns("__pycache__", "results"))
            else:
                shutil.copy2(src, workdir / source)
    make = sandbox.stage.make_install()
    # bytecode compilation only saves start-up time; it does not change what is installed
    flags = [flag for flag in make["SYNC_FLAGS"].split() if flag != "--compile-bytecode"]
    venv = sandbox.root / "venv"
    env = {**os.environ, "UV_PROJECT_ENVIRONMENT": str(venv), "UV_PYTHON_DOWNLOADS": "never"}
    env.pop("VIRTUAL_ENV", None)
    run([uv(), "sync", "--frozen", *make["EXTRAS"].split(), *flags, "--python", service_python()], cwd=workdir, env=env)
    return venv / "bin", workdir


def wheel_install(sandbox: Sandbox) -> tuple[Path, Path]:
    """A wheel from `uv build`, installed with pip and the embedded extra into a fresh venv; run from an empty
    directory."""
    dist = sandbox.root / "dist"
    run(
        [uv(), "build", "--wheel", "--out-dir", str(dist), str(ROOT)],
        env={**os.environ, "UV_PYTHON_DOWNLOADS": "never"},
    )
    (wheel,) = dist.glob("speech_service-*.whl")
    venv = sandbox.root / "venv"
    run([service_python(), "-m", "venv", str(venv)])
    run([str(venv / "bin/python"), "-m", "pip", "install", "--quiet", "--no-compile", f"{wheel}[embedded]"])
    workdir = sandbox.root / "cwd"
    workdir.mkdir(mode=0o755)
    return venv / "bin", workdir


INSTALLS = {"image": image_install, "wheel": wheel_install}


@dataclass
class Installed:
    server: RunningServer
    bin_dir: Path
    workdir: Path


@pytest.fixture(scope="module", params=list(INSTALLS))
def installed(request: pytest.FixtureRequest) -> Iterator[Installed]:
    if os.geteuid() != 0:
        pytest.skip("runs the server as the image's non-root user (uid 10001), which needs root to switch to")
    sandbox = Sandbox(stages()["cpu"])
    try:
        bin_dir, workdir = INSTALLS[request.param](sandbox)
        server = sandbox.start(bin_dir, workdir)
        yield Installed(server, bin_dir, workdir)
        assert server.stop() == 0, server.log_path.read_text()[-4000:]
    finally:
        sandbox.remove()


def test_ready_as_the_service_user(installed: Installed) -> None:
    server = installed.server
    response = httpx.get(f"{server.base_url}/ready", timeout=10)
    assert response.status_code == 200, response.text
    # the image keeps its voices on its VOLUME, which the service user owns
    assert server.env.get("SPEECH_VOICE_STORE", "").endswith("/voices"), server.env
    assert Path(server.env["SPEECH_VOICE_STORE"]).is_dir()


def test_every_module_of_the_service_imports(installed: Installed) -> None:
    """Nothing the service imports at load may come from an extra or the dev group (the modules an engine or a tool
    imports lazily are covered by the requests below)."""
    script = (
        "import importlib, pkgutil, app\n"
        "for m in pkgutil.walk_packages(app.__path__, 'app.'):\n"
        f"    if m.name not in {sorted(NEEDS_OMNI_EXTRA)!r}:\n"
        "        importlib.import_module(m.name)\n"
    )
    done = subprocess.run(
        [str(installed.bin_dir / "python"), "-c", script], cwd=installed.workdir, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.mark.parametrize("response_format", FORMATS)
def test_every_format_speaks(installed: Installed, response_format: str) -> None:
    assert_speaks(installed.server.base_url, response_format)
