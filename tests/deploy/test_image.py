"""The CPU image as `make image` builds it, run as docs/deploy.md runs it: read-only root filesystem, a tmpfs at /tmp, a
volume for the voice store, the image's own user and environment. Skipped, saying why, where neither podman nor docker
can build (no builder, no daemon, or no way to get the base image)."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.dockerfile import ROOT, stages
from tests.support.server import RunningServer, free_port, wait_until
from tests.support.speech import FORMATS, assert_speaks

IMAGE = "speech-service:cpu"


def sh(*command: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout)


def builder() -> str:
    for tool in ("podman", "docker"):
        path = shutil.which(tool)
        if path and sh(path, "info").returncode == 0:
            return path
    pytest.skip("neither podman nor docker can build here (none installed, or docker has no daemon)")


def base_image_present(tool: str) -> None:
    base = stages()["cpu"].base_image
    if sh(tool, "image", "inspect", base).returncode == 0:
        return
    try:
        pulled = sh(tool, "pull", base, timeout=600)
    except subprocess.TimeoutExpired:
        pytest.skip(f"the base image {base} is not here and pulling it did not finish in 600 s")
    if pulled.returncode != 0:
        reason = (pulled.stderr.strip().splitlines() or ["?"])[-1]
        pytest.skip(f"the base image {base} is not here and cannot be pulled: {reason}")


def can_start_containers(tool: str) -> bool:
    return (
        sh(tool, "run", "--rm", "--network", "none", "--entrypoint", "/bin/true", stages()["cpu"].base_image).returncode
        == 0
    )


@pytest.fixture(scope="module")
def image() -> tuple[str, bool]:
    """Builds the image with `make image`; returns the tool and whether it can start containers."""
    tool = builder()
    base_image_present(tool)
    runs = can_start_containers(tool)
    if not runs and Path(tool).name != "podman":
        pytest.skip(f"{tool} cannot start a container here")
    # without a working runtime (a VM or container without cgroup or rlimit control) podman still builds with chroot
    flags = [] if runs else ["IMAGE_BUILD_FLAGS=--isolation chroot"]
    built = subprocess.run(
        ["make", "-C", str(ROOT), "image", f"CONTAINER_TOOL={tool}", f"IMAGE={IMAGE}", *flags],
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert built.returncode == 0, built.stdout[-4000:] + built.stderr[-4000:]
    return tool, runs


def image_config(tool: str) -> dict[str, object]:
    done = sh(tool, "image", "inspect", IMAGE)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)[0]["Config"]


def run_in_container(tool: str, workdir: Path) -> RunningServer:
    """`docker run` with docs/deploy.md's arguments (read-only root, tmpfs /tmp, a voice volume), on a loopback port."""
    port = free_port()
    name = f"speech-test-{port}"
    volume = f"speech-test-voices-{port}"
    started = sh(
        tool, "run", "-d", "--rm", "--name", name, "--read-only", "--tmpfs", "/tmp",
        "-v", f"{volume}:/var/lib/speech/voices", "-p", f"127.0.0.1:{port}:8000", IMAGE,
    )  # fmt: skip
    assert started.returncode == 0, started.stderr
    log_path = workdir / "server.log"
    follower = subprocess.Popen([tool, "logs", "-f", name], stdout=log_path.open("wb"), stderr=subprocess.STDOUT)
    return RunningServer(follower, f"http://127.0.0.1:{port}", log_path, {"container": name, "volume": volume})


def run_from_mounted_image(workdir: Path) -> RunningServer:
    """Where podman cannot start a container: the image's own file tree, mounted read-only in a private mount namespace
    with a tmpfs at /tmp and one at the voice store, its ENTRYPOINT run as its USER, in its WORKDIR, with its Env
    (listening on a loopback port of this host's network)."""
    config = image_config("podman")
    mounted = sh("podman", "image", "mount", IMAGE)
    assert mounted.returncode == 0, mounted.stderr
    source = mounted.stdout.strip()
    user = str(config["User"])
    uid, _, gid = user.partition(":")
    store = next(iter(config["Volumes"]))
    port = free_port()
    env = [*config["Env"], "SPEECH_HOST=127.0.0.1", f"SPEECH_PORT={port}"]
    command = shlex.join([*config["Entrypoint"], *(config.get("Cmd") or [])])
    root = workdir / "root"
    root.mkdir()
    script = f"""set -e
mount --bind {shlex.quote(source)} {root}
mount -o remount,bind,ro {root}
mount -t tmpfs tmpfs {root}/tmp
mount -t proc proc {root}/proc
mount --rbind /dev {root}/dev
mount -t tmpfs -o uid={uid},gid={gid or uid},mode=0750 tmpfs {root}{store}
exec env -i {shlex.join(env)} chroot --userspec={uid}:{gid or uid} {root} \
    sh -c {shlex.quote(f"cd {config['WorkingDir']} && test -w {store} && exec {command}")}
"""
    log_path = workdir / "server.log"
    process = subprocess.Popen(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
        stdout=log_path.open("wb"),
        stderr=subprocess.STDOUT,
    )
    return RunningServer(process, f"http://127.0.0.1:{port}", log_path, {"mounted": IMAGE})


@pytest.fixture(scope="module")
def running(image: tuple[str, bool]) -> Iterator[RunningServer]:
    tool, runs = image
    workdir = Path(tempfile.mkdtemp(prefix="speech-image-"))
    server = None
    try:
        server = run_in_container(tool, workdir) if runs else run_from_mounted_image(workdir)
        wait_until(server, "/ready", timeout_s=120)
        yield server
    finally:
        if server is not None and runs:
            sh(tool, "stop", "-t", "40", server.env["container"], timeout=60)
            sh(tool, "volume", "rm", "-f", server.env["volume"])
        if server is not None:
            server.stop()
        if not runs:
            sh("podman", "image", "unmount", IMAGE)
        shutil.rmtree(workdir, ignore_errors=True)


def test_image_runs_as_its_user_with_the_voice_store_as_a_volume(image: tuple[str, bool]) -> None:
    config = image_config(image[0])
    assert config["User"] == stages()["cpu"].user() and not str(config["User"]).startswith("0")
    assert list(config["Volumes"]) == ["/var/lib/speech/voices"]
    assert "SPEECH_VOICE_STORE=/var/lib/speech/voices" in config["Env"]


def test_image_is_ready(running: RunningServer) -> None:
    response = httpx.get(f"{running.base_url}/ready", timeout=10)
    assert response.status_code == 200, response.text
    assert response.json()["engine"] == "embedded"


@pytest.mark.parametrize("response_format", FORMATS)
def test_image_speaks_every_format(running: RunningServer, response_format: str) -> None:
    assert_speaks(running.base_url, response_format)
