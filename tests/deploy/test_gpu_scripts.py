"""deploy/gpu's start / wait / stop scripts, with a stand-in for the GPU host's python (no vllm here)."""

from __future__ import annotations

import ast
import contextlib
import gzip
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest
import yaml
from prometheus_client import CollectorRegistry, Histogram, generate_latest

from app.engines.sglang.engine import ENGINE_ENVIRONMENT
from app.metrics import LOOP_LAG_BUCKETS, TTFA_PHASE_BUCKETS
from app.tools.qwen3_tts_model_dir import write_model_dir
from tests.support.locked_wheels import class_def, fetch_locked_wheel, function_def
from tests.support.scripts import gpu_script
from tests.support.server import free_port

ROOT = Path(__file__).resolve().parents[2]
GPU = ROOT / "deploy/gpu"


def stand_in_python(tmp_path: Path) -> Path:
    """Records its arguments and environment, then idles like a server that is still starting."""
    script = tmp_path / "python3"
    script.write_text(
        "#!/usr/bin/env bash\n"
        f'printf "%s\\n" "$@" > {tmp_path}/argv\n'
        f"env > {tmp_path}/env.$$ && mv {tmp_path}/env.$$ {tmp_path}/env\n"  # whole once it exists
        "exec sleep 60\n"
    )
    script.chmod(0o755)
    return script


def test_start_vllm_omni_runs_vllm_serve_omni_detached_and_stop_ends_it(tmp_path: Path) -> None:
    port = free_port()
    env = {
        **os.environ,
        "PYTHON": str(stand_in_python(tmp_path)),
        "PORT": str(port),
        "MODEL": "/models/qwen3-tts",
        "DEPLOY_CONFIG": "/tmp/bench.yaml",
        "LOAD_FORMAT": "dummy",
        "COMPILE_CACHE_DIR": "/cache",
        "LOG": str(tmp_path / "log"),
        "PYTHONPATH": "/site",
    }
    env.pop("TRITON_CACHE_DIR", None)
    started = subprocess.run(
        [str(GPU / "start-vllm-omni.sh"), "--max-num-seqs", "8"], env=env, capture_output=True, text=True, check=True
    )
    assert f"starting on port {port}" in started.stdout
    pidfile = Path(f"/tmp/vllm-omni-{port}.pid")
    pid = int(pidfile.read_text())
    for _ in range(100):
        if (tmp_path / "env").exists():
            break
        time.sleep(0.05)
    argv = (tmp_path / "argv").read_text().split("\n")[:-1]
    assert argv == [
        "-m", "vllm_omni.entrypoints.cli.main", "serve", "/models/qwen3-tts", "--omni",
        "--deploy-config", "/tmp/bench.yaml", "--host", "127.0.0.1", "--port", str(port),
        "--served-model-name", "qwen3-tts", "--stage-init-timeout", "900", "--init-timeout", "1200",
        "--load-format", "dummy", "--max-num-seqs", "8",
    ]  # fmt: skip
    seen = dict(line.split("=", 1) for line in (tmp_path / "env").read_text().splitlines() if "=" in line)
    assert seen["PYTHONPATH"] == f"{ROOT}:/site"  # a stage override may name the checkout's classes
    assert seen["VLLM_WORKER_MULTIPROC_METHOD"] == "spawn" and seen["HF_HUB_OFFLINE"] == "1"
    assert (seen["VLLM_CACHE_ROOT"], seen["TORCHINDUCTOR_CACHE_DIR"], seen["TRITON_CACHE_DIR"]) == (
        "/cache",
        "/cache/inductor",
        "/cache/triton",
    )
    assert os.getpgid(pid) == pid  # its own session: stop-server.sh can end the stage processes with it

    waited = subprocess.run(
        [str(GPU / "wait-ready.sh"), str(port), "0"],
        env={**env, "READY_PATH": "/health", "PIDFILE": str(pidfile)},
        capture_output=True,
        text=True,
    )
    assert waited.returncode == 1 and "not ready after 0 s" in waited.stdout  # alive, not answering

    stopped = subprocess.run(
        [str(GPU / "stop-server.sh"), str(port)], env={**env, "PIDFILE": str(pidfile)}, capture_output=True, text=True
    )
    assert stopped.returncode == 0 and f"stopped the server on port {port}" in stopped.stdout
    for _ in range(100):
        if exited(pid):
            break
        time.sleep(0.05)
    else:
        raise AssertionError("the stand-in server is still running")
    assert not pidfile.exists()


def exited(pid: int) -> bool:
    """`pid` is gone, or has exited and waits to be reaped (a zombie: whoever reaps orphans gets to it in its time)."""
    try:
        os.kill(pid, 0)
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (ProcessLookupError, FileNotFoundError):
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


def test_stop_server_does_not_wait_out_the_grace_period_for_a_server_not_reaped_yet(tmp_path: Path) -> None:
    """A server that has ended on SIGTERM but that its parent has not reaped yet (`kill -0` still finds it, as in a
    container whose first process reaps late or never) counts as stopped: `stop` does not wait its 60 s for it."""
    server = subprocess.Popen(["sleep", "60"], start_new_session=True)  # this test, its parent, reaps it only below
    pidfile = tmp_path / "server.pid"
    pidfile.write_text(str(server.pid))
    try:
        stopped = subprocess.run(
            [str(GPU / "stop-server.sh"), str(free_port())],
            env={**os.environ, "PIDFILE": str(pidfile)},
            capture_output=True,
            text=True,
            timeout=30,  # a guard: a stop that waits out the grace period for a zombie takes 60 s
        )
        assert stopped.returncode == 0 and "stopped the server" in stopped.stdout
        assert exited(server.pid) and not pidfile.exists()
        assert server.wait(timeout=5) == -signal.SIGTERM  # asked to end gracefully first
    finally:
        server.kill()
        server.wait()


def harness_python(tmp_path: Path) -> Path:
    """The GPU host's python for side-by-side.sh: the real one for its set-up steps (model directory, profile copy),
    a recorder that idles like a starting engine for `loadtest.engine_alone`, vllm-omni's server and the service
    (`app.cli`, its deploy profile first), sglang-omni's (its environment to `sglang_env`), and 'not ready' for
    readiness probes. A server's arguments go to `argv` (the last one started) and to `argv-PROGRAM` (engine_alone,
    app.cli, vllm_omni, sglang), each file whole once it exists;
    the GPUs a server was given (its CUDA_VISIBLE_DEVICES, or 'unset') go to `gpus`, the cores it may run on to
    `cpus-PROGRAM`."""
    script = tmp_path / "python3"
    script.write_text(
        "#!/usr/bin/env bash\n"
        f"cores() {{ grep Cpus_allowed_list /proc/$$/status | cut -f2 > {tmp_path}/cpus-$1; }}\n"
        f'record() {{ printf "%s\\n" "${{@:2}}" > {tmp_path}/argv.$$ && cp {tmp_path}/argv.$$ {tmp_path}/argv-$1 &&\n'
        f"  mv {tmp_path}/argv.$$ {tmp_path}/argv; }}\n"
        'case "$1 $2" in\n'
        '  "-m loadtest.engine_alone") record engine_alone "$@"; exec sleep 60 ;;\n'
        # the stage overrides the server reads: the grouped name, or else the old flat one
        '  "-m app.cli") printf "%s" "${SPEECH_OMNI__STAGE_OVERRIDES-${SPEECH_STAGE_OVERRIDES:-}}"'
        f" > {tmp_path}/stage_overrides\n"
        f'    printf "%s" "${{CUDA_VISIBLE_DEVICES-unset}}" > {tmp_path}/gpus\n'
        f'    printf "%s\\n" "$PYTHONPATH" "${{SPEECH_SGLANG__MODEL-}}" "${{SPEECH_SGLANG__LOAD_FORMAT-}}"'
        f' "${{SPEECH_SGLANG__FIXED_LENGTH-}}" "${{SPEECH_SGLANG__MEM_FRACTION_STATIC-}}" "${{SPEECH_PROFILER_DIR-}}"'
        f' "${{SGLANG_CACHE_DIR-}}" "${{SGLANG_JIT_CACHE_DIR-}}" > {tmp_path}/service_env\n'
        '    cores app.cli; record app.cli "$SPEECH_OMNI__DEPLOY_CONFIG" "$@"; exec sleep 60 ;;\n'
        f'  "deploy/gpu/codec_weights.py "*) printf "%s\\n" "$@" > {tmp_path}/codec_argv; exit 0 ;;\n'
        f'  "deploy/gpu/frontend_weights.py "*) printf "%s\\n" "$PYTHONPATH" "$@" > {tmp_path}/frontend_argv\n'
        "    exit 0 ;;\n"
        f'  "-m vllm_omni.entrypoints.cli.main") printf "%s" "${{CUDA_VISIBLE_DEVICES-unset}}" > {tmp_path}/gpus\n'
        '    cores vllm_omni; record vllm_omni "$@"; exec sleep 60 ;;\n'
        f'  "-m sglang_omni.cli") printf "%s\\n" "$PYTHONPATH" "$QWEN3_TTS_FIXED_LENGTH"'
        f' "$SGLANG_OMNI_STRICT_PORT" "${{CUDA_VISIBLE_DEVICES-unset}}" "${{SGLANG_TORCH_PROFILER_DIR-}}"'
        f' "${{SGLANG_CACHE_DIR-}}" "${{SGLANG_JIT_CACHE_DIR-}}" "${{SGLANG_OMNI_PORT_CLAIM_DIR-}}"'
        f" > {tmp_path}/sglang_env\n"
        '    cores sglang; record sglang "$@"; exec sleep 60 ;;\n'
        '  "- "*) exit 1 ;;\n'
        "esac\n"
        f'exec {sys.executable} "$@"\n'
    )
    script.chmod(0o755)
    return script


CACHE_VARIABLES = (
    "VLLM_CACHE_ROOT",
    "TORCHINDUCTOR_CACHE_DIR",
    "TRITON_CACHE_DIR",
    "SGLANG_CACHE_DIR",
    "SGLANG_JIT_CACHE_DIR",
)


@contextlib.contextmanager
def harness_started(
    tmp_path: Path, settings: dict[str, str], record: str = "argv", model_written: bool = True
) -> Iterator[list[str]]:
    """`side-by-side.sh start` with the stand-in python and `settings`: yields the started process's recorded
    arguments (`record`: argv, the last one started, or argv-PROGRAM) once it has launched (it never becomes ready,
    so the script gives up waiting); stops it after. The stand-ins never log a KV cache line nor answer: waiting
    for either (KV_WAIT_S, START_WAIT_S) would only pass time, so the script waits 0 s for each.
    `model_written`: the weight-less 0.6B model directory the script's set-up writes where it is missing is there
    already, written in this process, whose tokenizer is trained once (a python of the script's own trains it
    again, a second or two of every start); the tests of that writing pass False, and the script writes it."""
    if model_written and "MODEL_SIZE" not in settings:
        write_model_dir(tmp_path / "work/model", "custom_voice", "0.6B")  # what the script's `prepare` writes
    env = {
        # the compile caches the script points every target at, unless the caller's environment already does
        **{name: value for name, value in os.environ.items() if name not in CACHE_VARIABLES},
        "PYTHON": str(harness_python(tmp_path)),
        "WORK": str(tmp_path / "work"),
        "START_WAIT_S": "0",
        "KV_WAIT_S": "0",
        **settings,
    }
    (tmp_path / record).unlink(missing_ok=True)  # an earlier start's, in the same folder: not this one's
    started = subprocess.run([str(GPU / "side-by-side.sh"), "start"], env=env, capture_output=True, text=True)
    try:
        assert started.returncode == 3, started.stdout + started.stderr  # launched, never ready: gave up waiting
        deadline = time.monotonic() + 30  # a busy machine's start: the stand-in records as it is launched
        while not (tmp_path / record).exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        yield (tmp_path / record).read_text().split("\n")[:-1]
    finally:
        subprocess.run([str(GPU / "side-by-side.sh"), "stop"], env=env, capture_output=True, text=True)


def test_side_by_side_ends_the_start_of_a_service_whose_engine_failed(tmp_path: Path) -> None:
    """A service whose engine failed to start stays up and answers /health with 503 engine_failed: the start ends
    there (status 2, the end of its log shown), not after START_WAIT_S of waiting for a readiness that cannot come.
    The service here is the real one on its sglang engine, given an sglang-omni that is only a name and an
    nvidia-smi that is only a name (the service looks for a GPU so): the process starts, and the engine fails in its
    start."""
    site, bin_dir = tmp_path / "sgl-site", tmp_path / "bin"
    (site / "sglang_omni").mkdir(parents=True)
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text("#!/bin/sh\nexit 0\n")
    (bin_dir / "nvidia-smi").chmod(0o755)
    script = tmp_path / "python3"
    script.write_text(
        "#!/usr/bin/env bash\n"
        'case "$1 $2" in "deploy/gpu/codec_weights.py "*) exit 0 ;; esac\n'  # it needs torch: no weights wanted here
        f'exec {sys.executable} "$@"\n'
    )
    script.chmod(0o755)
    env = {
        **{name: value for name, value in os.environ.items() if name not in CACHE_VARIABLES},
        "PYTHON": str(script),
        "WORK": str(tmp_path / "work"),
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "TARGETS": "service-sglang",
        "SGLANG_SITE": str(site),
        "SERVICE_SGLANG_PORT": str(free_port()),
        "START_WAIT_S": "240",
        "KV_WAIT_S": "0",
    }
    try:
        started = subprocess.run(
            [str(GPU / "side-by-side.sh"), "start"], env=env, capture_output=True, text=True, timeout=300
        )
        assert started.returncode == 2, started.stdout + started.stderr
        assert "service-sglang: its engine failed to start; the end of its log:" in started.stdout
        assert '"engine failed to start"' in started.stdout
    finally:
        subprocess.run([str(GPU / "side-by-side.sh"), "stop"], env=env, capture_output=True, text=True)


def test_side_by_side_notes_which_cores_each_gpu_is_near_once_a_run(tmp_path: Path) -> None:
    """A pair's sides are compared across GPUs, each side pinned to its own cores: host.txt says which cores and NUMA
    node each GPU is near (nvidia-smi's topology matrix) and the host's NUMA nodes, written once at the start beside
    gpu.txt's snapshots."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text(
        '#!/bin/sh\n[ "$1 $2" = "topo -m" ] && printf "\tGPU0\tCPU Affinity\tNUMA Affinity\nGPU0\t X \t0-15\t0\n"\n'
        f'echo "$*" >> {tmp_path}/nvidia-smi-calls\n'
    )
    (bin_dir / "nvidia-smi").chmod(0o755)
    port = free_port()
    settings = {"TARGETS": "alone", "ALONE_PORT": str(port), "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    with harness_started(tmp_path, settings):
        host = (tmp_path / "work/results/host.txt").read_text()
    assert "GPU0\t X \t0-15\t0" in host and "== lscpu" in host
    calls = (tmp_path / "nvidia-smi-calls").read_text().splitlines()
    assert calls.count("topo -m") == 1 and len(calls) > 1  # once, then the memory snapshots


@pytest.mark.parametrize("size", [900, 5000])
def test_side_by_side_keeps_a_long_logs_start_and_its_end(tmp_path: Path, size: int) -> None:
    """`stop` keeps each server's log in the results: whole up to LOG_KEEP_BYTES; past it the first fifth (where a
    start logs its phases) and the rest from the end, with a line saying how much was left out between them (only
    the end had been kept: a long run's start was lost)."""
    logs = tmp_path / "work/logs"
    logs.mkdir(parents=True)
    lines = [f"line {i:04d} of the server's log" for i in range(size // 30)]
    (logs / "alone.log").write_text("\n".join(lines) + "\n")
    whole = (logs / "alone.log").read_bytes()
    env = {**os.environ, "WORK": str(tmp_path / "work"), "TARGETS": "alone", "LOG_KEEP_BYTES": "1000"}
    stopped = subprocess.run([str(GPU / "side-by-side.sh"), "stop"], env=env, capture_output=True, text=True)
    copy = tmp_path / "work/results/logs/alone.log"
    assert copy.exists(), stopped.stdout + stopped.stderr  # (no GPU here: its closing snapshot's nvidia-smi is absent)
    kept = copy.read_bytes()
    if len(whole) <= 1000:
        assert kept == whole
    else:
        left_out = len(whole) - 1000
        marker = f"\n[side-by-side: {left_out} bytes of this log left out here]\n".encode()
        assert kept == whole[:200] + marker + whole[-800:]


@pytest.mark.parametrize("overrides", ["", '{"1": {"scheduler_cls": "my.Scheduler"}}'])
def test_side_by_side_hands_the_baseline_its_stage_overrides(tmp_path: Path, overrides: str) -> None:
    port = free_port()
    settings = {"TARGETS": "alone", "ALONE_PORT": str(port), "ALONE_STAGE_OVERRIDES": overrides}
    with harness_started(tmp_path, settings) as argv:
        assert argv[:2] == ["-m", "loadtest.engine_alone"] and argv[argv.index("--port") + 1] == str(port)
        if overrides:
            assert argv[-2:] == ["--stage-overrides", overrides]
        else:
            assert "--stage-overrides" not in argv
        commands = (tmp_path / "work/results/commands.txt").read_text()
        assert f"alone: stage overrides {overrides or 'none'}" in commands


@pytest.mark.parametrize("target", ["service-c", "vllm-omni"])
def test_side_by_side_runs_profile_c_without_b_s_overrides(tmp_path: Path, target: str) -> None:
    """`service-c`, or vllm-omni's server with OMNI_ON=c (on a copy of its own), runs the service's profile with
    C_PROFILE_SET on top (not B's)."""
    port = free_port()
    extra = "connectors.connector_of_shared_memory.extra"
    settings = {
        "TARGETS": target,
        "SERVICE_C_PORT": str(port),
        "OMNI_PORT": str(port),
        "OMNI_ON": "c" if target == "vllm-omni" else "a",
        "SERVICE_C_ENV": "SPEECH_LOG_LEVEL=debug",
        "B_PROFILE_SET": f"{extra}.first_audio_first_margin_s=2.5",
        "C_PROFILE_SET": f"{extra}.codec_chunk_ramp=[3, 3, 6, 12, 25];{extra}.code2wav_max_windows_per_step=8",
    }
    with harness_started(tmp_path, settings) as argv:
        if target == "service-c":
            profile, argv = Path(argv[0]), argv[1:]
            assert argv[:2] == ["-m", "app.cli"]
            commands = (tmp_path / "work/results/commands.txt").read_text()
            assert f"service-c: profile {profile}, settings: SPEECH_LOG_LEVEL=debug" in commands
        else:
            assert argv[:2] == ["-m", "vllm_omni.entrypoints.cli.main"]
            profile = Path(argv[argv.index("--deploy-config") + 1])
        copy = "bench-profile-c.yaml" if target == "service-c" else "bench-profile-vllm-omni.yaml"
        assert profile == tmp_path / "work" / copy and argv[argv.index("--port") + 1] == str(port)
        assert yaml.safe_load(profile.read_text()) == yaml.safe_load(
            (tmp_path / "work/bench-profile-c.yaml").read_text()
        )
        shipped = yaml.safe_load((ROOT / "deploy/vllm-omni/customvoice.yaml").read_text())
        connector = yaml.safe_load(profile.read_text())["connectors"]["connector_of_shared_memory"]["extra"]
        assert connector["codec_chunk_ramp"] == [3, 3, 6, 12, 25]
        assert connector["code2wav_max_windows_per_step"] == 8
        # B's override is B's alone
        margin = shipped["connectors"]["connector_of_shared_memory"]["extra"]["first_audio_first_margin_s"]
        assert margin != 2.5 and connector["first_audio_first_margin_s"] == margin
        b = yaml.safe_load((tmp_path / "work/results/profile-b.yaml").read_text())
        assert b["connectors"]["connector_of_shared_memory"]["extra"]["first_audio_first_margin_s"] == 2.5
        kept = "profile-c.yaml" if target == "service-c" else "profile-vllm-omni.yaml"
        assert (tmp_path / "work/results" / kept).read_text() == profile.read_text()


@pytest.mark.parametrize("target", ["service-b", "vllm-omni"])
def test_side_by_side_runs_profile_b_from_its_own_source_at_its_own_memory(tmp_path: Path, target: str) -> None:
    """B_PROFILE and B_MEMORY: `service-b` (or vllm-omni's server with OMNI_ON=b) runs another shipped profile
    (throughput.yaml beside customvoice.yaml) at its own memory, with B_PROFILE_SET on top; commands.txt names that
    source."""
    port = free_port()
    extra = "connectors.connector_of_shared_memory.extra"
    settings = {
        "TARGETS": target,
        "SERVICE_B_PORT": str(port),
        "OMNI_PORT": str(port),
        "OMNI_ON": "b" if target == "vllm-omni" else "a",
        "OMNI_MEMORY": "0:0.08,1:0.12",
        "B_PROFILE": "deploy/vllm-omni/throughput.yaml",
        "B_MEMORY": "0:0.08,1:0.12",
        "B_PROFILE_SET": f"{extra}.first_audio_first_margin_s=2.5",
    }
    with harness_started(tmp_path, settings) as argv:
        if target == "service-b":
            profile = Path(argv[0])
            source_line = "service-b: source profile deploy/vllm-omni/throughput.yaml"
        else:
            profile = Path(argv[argv.index("--deploy-config") + 1])
            source_line = "vllm-omni: source profile deploy/vllm-omni/throughput.yaml"
        assert source_line in (tmp_path / "work/results/commands.txt").read_text()
        written = yaml.safe_load(profile.read_text())
        shipped = yaml.safe_load((ROOT / "deploy/vllm-omni/throughput.yaml").read_text())
        assert [s["max_num_seqs"] for s in written["stages"]] == [s["max_num_seqs"] for s in shipped["stages"]]
        assert [s["gpu_memory_utilization"] for s in written["stages"]] == [0.08, 0.12]
        connector = written["connectors"]["connector_of_shared_memory"]["extra"]
        assert connector["decode_batch_max_size"] == 8 and connector["first_audio_first_margin_s"] == 2.5
        # profile A stays the service's own
        a = yaml.safe_load((tmp_path / "work/results/profile.yaml").read_text())
        assert a["stages"][0]["max_num_seqs"] == 64 and a["stages"][0]["gpu_memory_utilization"] == 0.14


@pytest.mark.parametrize("target", ["service", "vllm-omni", "vllm-omni-b", "alone"])
def test_side_by_side_with_real_codec_weights_loads_code2wav_from_them(tmp_path: Path, target: str) -> None:
    """CODEC_WEIGHTS=real writes the codec weights once and gives every target's code2wav load_format auto by a
    stage override (the talker keeps dummy), next to the overrides a target already has."""
    port = free_port()
    settings = {
        "TARGETS": target,
        "SERVICE_PORT": str(port),
        "OMNI_PORT": str(port),
        "OMNI_B_PORT": str(port),
        "OMNI_B_PROFILE": "deploy/vllm-omni/customvoice.yaml",
        "ALONE_PORT": str(port),
        "ALONE_STAGE_OVERRIDES": '{"1": {"scheduler_cls": "my.Scheduler"}}',
        "CODEC_WEIGHTS": "real",
    }
    with harness_started(tmp_path, settings) as argv:
        assert (tmp_path / "codec_argv").read_text().split("\n")[:-1] == [
            "deploy/gpu/codec_weights.py",
            str(tmp_path / "work/model"),
        ]
        if target == "service":
            overrides = json.loads((tmp_path / "stage_overrides").read_text())
            assert overrides == {"1": {"load_format": "auto"}}
            assert (
                f"service: profile {argv[0]}, settings: SPEECH_OMNI__STAGE_OVERRIDES="
                in (tmp_path / "work/results/commands.txt").read_text()
            )
        else:
            overrides = json.loads(argv[argv.index("--stage-overrides") + 1])
            expected = {"load_format": "auto"} | ({"scheduler_cls": "my.Scheduler"} if target == "alone" else {})
            assert overrides == {"1": expected}
            assert argv[argv.index("--load-format") + 1] == "dummy"  # the talker's


@pytest.mark.parametrize("name", ["SPEECH_OMNI__STAGE_OVERRIDES", "SPEECH_STAGE_OVERRIDES"])
def test_side_by_side_leaves_a_services_own_stage_overrides_to_it(tmp_path: Path, name: str) -> None:
    """Stage overrides among a service's settings are its own (e.g. `{}`: code2wav on dummy weights beside one on
    codec weights): CODEC_WEIGHTS=real's override does not replace them, under the grouped or the old flat name."""
    port = free_port()
    settings = {"TARGETS": "service", "SERVICE_PORT": str(port), "CODEC_WEIGHTS": "real", "SERVICE_ENV": f"{name}={{}}"}
    with harness_started(tmp_path, settings):
        assert json.loads((tmp_path / "stage_overrides").read_text()) == {}


@pytest.mark.parametrize(
    ("target", "setting"),
    [
        ("service", "SERVICE_ENV"),
        ("service-b", "SERVICE_B_ENV"),
        ("vllm-omni", "OMNI_ENV"),
        ("vllm-omni-b", "OMNI_B_ENV"),
    ],
)
def test_side_by_side_gives_each_server_the_gpus_its_settings_name(tmp_path: Path, target: str, setting: str) -> None:
    """On a host of several GPUs each server can have GPUs of its own (each alone on its GPU, or a two-GPU profile
    beside another one): CUDA_VISIBLE_DEVICES among a target's settings reaches that server alone, whose profile's
    `devices` then count within it; commands.txt says so."""
    port = free_port()
    others = {"SERVICE_ENV", "SERVICE_B_ENV", "OMNI_ENV", "OMNI_B_ENV"} - {setting}
    settings = {
        "TARGETS": target,
        "SERVICE_PORT": str(port),
        "SERVICE_B_PORT": str(port),
        "OMNI_PORT": str(port),
        "OMNI_B_PORT": str(port),
        "OMNI_B_PROFILE": "deploy/vllm-omni/throughput.yaml",
        setting: "CUDA_VISIBLE_DEVICES=2,3",
        **{other: "CUDA_VISIBLE_DEVICES=7" for other in others},
    }
    with harness_started(tmp_path, settings):
        assert (tmp_path / "gpus").read_text() == "2,3"
        lines = (tmp_path / "work/results/commands.txt").read_text().splitlines()
        said = [line for line in lines if f" {target}: profile " in line]
        assert len(said) == 1 and said[0].endswith("settings: CUDA_VISIBLE_DEVICES=2,3")


@pytest.mark.parametrize(
    ("target", "setting", "program"),
    [
        ("service", "SERVICE_ENV", "app.cli"),
        ("service-sglang", "SERVICE_SGLANG_ENV", "app.cli"),
        ("service-sglang-b", "SERVICE_SGLANG_B_ENV", "app.cli"),
        ("sglang", "SGLANG_ENV", "sglang"),
        ("vllm-omni-b", "OMNI_B_ENV", "vllm_omni"),
    ],
)
def test_side_by_side_starts_each_server_on_the_cores_its_settings_name(
    tmp_path: Path, target: str, setting: str, program: str
) -> None:
    """CPUS among a server's settings starts it on those cores alone (its processes inherit them), so that servers of
    one host share no core; without it a server runs where the script does. Given twice, the last one counts, as
    `env` reads settings."""
    site = tmp_path / "sgl-site"
    (site / "sglang_omni").mkdir(parents=True)
    first, core = sorted(os.sched_getaffinity(0))[0], sorted(os.sched_getaffinity(0))[-1]
    port = str(free_port())
    ports = {
        name: port
        for name in ("SERVICE_PORT", "SERVICE_SGLANG_PORT", "SERVICE_SGLANG_B_PORT", "SGLANG_PORT", "OMNI_B_PORT")
    }
    settings = {"TARGETS": target, "SGLANG_SITE": str(site), "OMNI_B_PROFILE": "deploy/vllm-omni/throughput.yaml"}
    with harness_started(tmp_path, {**settings, **ports, setting: f"CPUS={first} CUDA_VISIBLE_DEVICES=1 CPUS={core}"}):
        assert (tmp_path / f"cpus-{program}").read_text().strip() == str(core)
        assert f" {target}: on cores {core} (taskset -c {core})" in (tmp_path / "work/results/commands.txt").read_text()
    (tmp_path / f"cpus-{program}").unlink()
    with harness_started(tmp_path, {**settings, **ports, setting: "CUDA_VISIBLE_DEVICES=1"}):
        allowed = (tmp_path / f"cpus-{program}").read_text().strip()
        assert allowed == Path("/proc/self/status").read_text().split("Cpus_allowed_list:")[1].split()[0]


@pytest.mark.parametrize(
    "target", ["service", "service-b", "service-sglang", "service-sglang-b", "sglang", "vllm-omni-b"]
)
def test_side_by_side_starts_each_server_ready_to_profile_into_a_folder_of_its_own(tmp_path: Path, target: str) -> None:
    """PROFILER_DIR: the service gets SPEECH_PROFILER_DIR, sgl-omni serve SGLANG_TORCH_PROFILER_DIR, and `vllm serve`'s
    copy a torch profiler_config in both stages (without it vllm-omni 0.30 has no profile routes), each under
    PROFILER_DIR/<target>."""
    site = tmp_path / "sgl-site"
    (site / "sglang_omni").mkdir(parents=True)
    port = str(free_port())
    profiles = tmp_path / "profiles"
    settings = {
        "TARGETS": target,
        "PROFILER_DIR": str(profiles),
        "SGLANG_SITE": str(site),
        "OMNI_B_PROFILE": "deploy/vllm-omni/throughput.yaml",
        **{
            name: port
            for name in (
                "SERVICE_PORT",
                "SERVICE_B_PORT",
                "SERVICE_SGLANG_PORT",
                "SERVICE_SGLANG_B_PORT",
                "SGLANG_PORT",
                "OMNI_B_PORT",
            )
        },
    }
    program = {"sglang": "argv-sglang", "vllm-omni-b": "argv-vllm_omni"}.get(target, "argv-app.cli")
    with harness_started(tmp_path, settings, record=program):
        if target == "sglang":
            assert (tmp_path / "sglang_env").read_text().split("\n")[4] == str(profiles / "sglang")
        elif target == "vllm-omni-b":
            copy = yaml.safe_load((tmp_path / "work/bench-profile-vllm-omni-b.yaml").read_text())
            configs = {stage["stage_id"]: stage.get("profiler_config") for stage in copy["stages"]}
            expected = {
                "profiler": "torch",
                "torch_profiler_dir": str(profiles / target),
                "torch_profiler_with_stack": False,
            }
            assert configs == {0: expected, 1: expected}
        else:
            assert (tmp_path / "service_env").read_text().split("\n")[5] == str(profiles / target)


def load_tool_python(folder: Path, loadtest: str, probe: str = "exit 0") -> Path:
    """The GPU host's python for side-by-side.sh's sweeps, as a shell script in `folder`: speech-loadtest runs the
    shell lines `loadtest` with `$out` its --out folder (made, holding a results.json) and `$level` its
    --concurrency; `python3 - URL [BODY]` (a readiness probe, a profiler route's call) runs `probe`;
    deploy/gpu/level_metrics.py runs as it is; else it fails."""
    script = folder / "python3"
    script.write_text(
        "#!/usr/bin/env bash\n"
        'case "$1 $2" in\n'
        # the GPU host's own scripts run as they are
        f'  "deploy/gpu/level_metrics.py "*) exec {sys.executable} "$@" ;;\n'
        '  "-m loadtest.cli") out=; prev=; level=\n'
        '    for a in "$@"; do [ "$prev" = --out ] && out=$a; [ "$prev" = --concurrency ] && level=$a; prev=$a; done\n'
        '    mkdir -p "$out" && echo {} > "$out/results.json"\n'
        f"{loadtest}\n"
        "    exit 0 ;;\n"
        "esac\n"
        f'if [ "$1" = - ]; then {probe}; fi\n'
        "exit 1\n"
    )
    script.chmod(0o755)
    return script


def profile_python(tmp_path: Path) -> Path:
    """`profile`'s python: a profiler route's call (`- URL BODY`) and the load tool's level go to `calls` in the order
    they came; a route containing $FAIL_ROUTE fails."""
    return load_tool_python(
        tmp_path,
        '    warmup=$(echo "$@" | grep -o -- "--warmup [0-9]*")\n'
        f'    echo "loadtest c=$level warmup=$warmup" >> {tmp_path}/calls',
        # a level's /metrics snapshots are no profiler route: not a call this records
        f'case "$2" in */metrics) exit 0 ;; esac; [ $# -eq 3 ] && echo "$2 $3" >> {tmp_path}/calls\n'
        '  case "$2" in *"${FAIL_ROUTE:-none}"*) exit 1 ;; esac; echo 200; exit 0',
    )


def profile_env(tmp_path: Path, targets: str, **settings: str) -> dict[str, str]:
    """`profile`'s environment: the service on 18000, vllm serve on 18005, sgl-omni serve on 18006."""
    return sweep_env(
        tmp_path,
        profile_python(tmp_path),
        TARGETS=targets,
        SGLANG_PORT="18006",
        PROFILER_DIR=str(tmp_path / "profiles"),
        **settings,
    )


def profile_routes(action: str, run: str, ports: tuple[str, ...] = ("18000", "18005", "18006")) -> list[str]:
    """What `profile` sends each target to start or stop `run`, in target order (the service, vllm serve, sglang)."""
    calls = {
        "18000": f'http://127.0.0.1:18000/admin/profile/{action} {{"run_id": "{run}"}}',
        "18005": f'http://127.0.0.1:18005/{action}_profile {{"stages": [0, 1]}}',
        "18006": f'http://127.0.0.1:18006/{action}_profile {{"run_id": "{run}"}}',
    }
    return [calls[port] for port in ports]


def test_side_by_side_profiles_every_target_around_one_level_through_its_own_route(tmp_path: Path) -> None:
    """`profile`: each target's profiler started through its own route (the service's /admin/profile, vllm serve's and
    sgl-omni serve's /start_profile), one closed-loop level with no warm-up, then each stopped."""
    env = profile_env(tmp_path, "service vllm-omni-b sglang", CONCURRENCY="32", REQUESTS="64", SWEEP_NAME="c32")
    done = subprocess.run([str(GPU / "side-by-side.sh"), "profile"], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "calls").read_text().splitlines() == [
        *profile_routes("start", "c32"),
        "loadtest c=32 warmup=--warmup 0",
        *profile_routes("stop", "c32"),
    ]
    assert (tmp_path / "results/closed-profile-c32/results.json").exists()
    unset = subprocess.run(
        [str(GPU / "side-by-side.sh"), "profile"], env={**env, "PROFILER_DIR": ""}, capture_output=True, text=True
    )
    assert unset.returncode != 0 and "set PROFILER_DIR" in unset.stdout
    for bad in ({"CONCURRENCY": "1,32"}, {"SWEEP_NAME": ".."}):
        refused = subprocess.run(
            [str(GPU / "side-by-side.sh"), "profile"], env={**env, **bad}, capture_output=True, text=True
        )
        assert refused.returncode != 0, bad


def test_side_by_side_records_request_timelines_instead_where_asked(tmp_path: Path) -> None:
    """TIMELINE=1: the service's run asks for the request timeline and sgl-omni serve's goes to its request profile
    (the events in the target's folder); a target that keeps no timeline (vllm serve) runs its profiler as before."""
    env = profile_env(tmp_path, "service vllm-omni-b sglang", CONCURRENCY="32", REQUESTS="64", SWEEP_NAME="b")
    done = subprocess.run(
        [str(GPU / "side-by-side.sh"), "profile"], env={**env, "TIMELINE": "1"}, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr
    events = tmp_path / "profiles" / "sglang" / "b"

    def calls(action: str) -> list[str]:
        return [
            f'http://127.0.0.1:18000/admin/profile/{action} {{"run_id": "b", "timeline": true}}',
            f'http://127.0.0.1:18005/{action}_profile {{"stages": [0, 1]}}',
            f'http://127.0.0.1:18006/{action}_request_profile {{"run_id": "b", "event_dir": "{events}"}}',
        ]

    loaded = "loadtest c=32 warmup=--warmup 0"
    assert (tmp_path / "calls").read_text().splitlines() == [*calls("start"), loaded, *calls("stop")]


def test_side_by_side_stops_every_profiler_it_started_when_another_fails_to_start(tmp_path: Path) -> None:
    """A profiler that will not start ends the run before any load, and those already started are stopped: none is
    left recording. A target with no profiler route (`alone`) is left out, and said so."""
    targets = "service alone vllm-omni-b sglang"
    env = profile_env(tmp_path, targets, CONCURRENCY="1", SWEEP_NAME="c1", FAIL_ROUTE="18006/start_profile")
    done = subprocess.run([str(GPU / "side-by-side.sh"), "profile"], env=env, capture_output=True, text=True)
    assert done.returncode != 0
    assert "alone: no profiler route; not profiled" in done.stdout
    started, stopped = profile_routes("start", "c1"), profile_routes("stop", "c1", ("18000", "18005"))
    assert (tmp_path / "calls").read_text().splitlines() == [*started, *stopped]


def test_side_by_side_stops_sgl_omni_serve_started_on_its_cores(tmp_path: Path) -> None:
    """`stop` ends the process that became sgl-omni serve, CPUS or not (its recorded pid is that process's)."""
    site = tmp_path / "sgl-site"
    (site / "sglang_omni").mkdir(parents=True)
    port = free_port()
    core = sorted(os.sched_getaffinity(0))[0]
    settings = {"TARGETS": "sglang", "SGLANG_PORT": str(port), "SGLANG_SITE": str(site), "SGLANG_ENV": f"CPUS={core}"}
    with harness_started(tmp_path, settings, record="argv-sglang"):
        pid = int(Path(f"/tmp/sglang-omni-{port}.pid").read_text())
        status = Path(f"/proc/{pid}/status").read_text()
        assert status.split("Cpus_allowed_list:")[1].split()[0] == str(core)  # the recorded pid is the server's
        assert not any(v.startswith(b"CPUS=") for v in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"))
    deadline = time.monotonic() + 30
    while not exited(pid):
        assert time.monotonic() < deadline, "sgl-omni serve outlived `stop`"
        time.sleep(0.1)


def test_side_by_side_leaves_a_server_the_gpus_it_was_started_with(tmp_path: Path) -> None:
    with harness_started(tmp_path, {"TARGETS": "vllm-omni", "OMNI_PORT": str(free_port()), "SERVICE_ENV": "X=1"}):
        assert (tmp_path / "gpus").read_text() == os.environ.get("CUDA_VISIBLE_DEVICES", "unset")


def test_side_by_side_keeps_dummy_codec_weights_unless_asked(tmp_path: Path) -> None:
    with harness_started(tmp_path, {"TARGETS": "service", "SERVICE_PORT": str(free_port())}):
        assert not (tmp_path / "codec_argv").exists()
        assert not (tmp_path / "frontend_argv").exists()
        assert (tmp_path / "stage_overrides").read_text() == ""


def test_side_by_side_writes_the_prompt_frontends_weights_when_asked(tmp_path: Path) -> None:
    """FRONTEND_WEIGHTS=real writes sglang-omni's prompt-frontend weights into the model directory before the first
    start, with sglang-omni's site on the path (the script builds the frontend from its class); once written, a
    later start leaves them."""
    model = tmp_path / "work/model"
    settings = {"TARGETS": "service-sglang", "SERVICE_SGLANG_PORT": str(free_port()), "FRONTEND_WEIGHTS": "real"}
    settings["SGLANG_SITE"] = str(tmp_path / "site")
    (tmp_path / "site/sglang_omni").mkdir(parents=True)
    with harness_started(tmp_path, settings):
        pythonpath, *argv = (tmp_path / "frontend_argv").read_text().split("\n")[:-1]
        assert argv == ["deploy/gpu/frontend_weights.py", str(model)]
        assert pythonpath.split(":")[0] == str(tmp_path / "site")
    (tmp_path / "frontend_argv").unlink()
    (model / "prompt-frontend.safetensors").write_bytes(b"")
    with harness_started(tmp_path, settings):
        assert not (tmp_path / "frontend_argv").exists()


@pytest.mark.parametrize(
    ("targets", "service_env", "written"),
    [
        ("service-sglang", "CPUS=0-3 SPEECH_SGLANG__PREPROCESSING=cpu", True),
        ("service-sglang", "SPEECH_SGLANG__PREPROCESSING=gpu CPUS=0-3", True),
        ("service-sglang", "SPEECH_SGLANG__PREPROCESSING=inline", False),
        ("service-sglang", "SPEECH_SGLANG__PREPROCESSING=cpus", False),
        ("service-sglang", "SPEECH_SGLANG__PREPROCESSING=cpu SPEECH_SGLANG__PREPROCESSING=inline", False),
        ("service-sglang", "CPUS=0-3\tSPEECH_SGLANG__PREPROCESSING=gpu", True),
        ("service", "SPEECH_SGLANG__PREPROCESSING=cpu", False),  # the setting of a target not run
        ("service-sglang-b", "SPEECH_SGLANG__PREPROCESSING=cpu", True),  # the second one's own settings
        ("service-sglang-b", "SPEECH_SGLANG__PREPROCESSING=inline", False),
    ],
)
def test_side_by_side_writes_the_prompt_frontends_weights_where_a_server_will_load_them(
    tmp_path: Path, targets: str, service_env: str, written: bool
) -> None:
    """Unless told (FRONTEND_WEIGHTS), the weights are written where service-sglang runs preprocessing in a process of
    its own, which loads them from the model directory, and nowhere else (vllm-omni's code2wav would read the file
    too)."""
    setting = "SERVICE_SGLANG_B_ENV" if targets == "service-sglang-b" else "SERVICE_SGLANG_ENV"
    settings = {"TARGETS": targets, setting: service_env, "SGLANG_SITE": str(tmp_path / "site")}
    settings["FRONTEND_WEIGHTS"] = "auto"  # the default, whatever this environment says
    ports = ("SERVICE_PORT", "SERVICE_SGLANG_PORT", "SERVICE_SGLANG_B_PORT")
    settings |= {name: str(free_port()) for name in ports}
    (tmp_path / "site/sglang_omni").mkdir(parents=True)
    with harness_started(tmp_path, settings):
        assert (tmp_path / "frontend_argv").exists() == written


def test_side_by_side_writes_profile_c_with_the_others_and_keeps_it_only_where_used(tmp_path: Path) -> None:
    """Profile C is written with A's and B's even when no target runs it yet, so that a target added later, while
    the others run (the copies are then kept as they are), finds it; the results hold a copy once a target runs it."""
    extra = "connectors.connector_of_shared_memory.extra"
    settings = {
        "TARGETS": "alone",
        "ALONE_PORT": str(free_port()),
        "C_PROFILE_SET": f"{extra}.short_streams_first=false",
    }
    with harness_started(tmp_path, settings):
        written = yaml.safe_load((tmp_path / "work/bench-profile-c.yaml").read_text())
        assert written["connectors"]["connector_of_shared_memory"]["extra"]["short_streams_first"] is False
        assert not (tmp_path / "work/results/profile-c.yaml").exists()


def upstream_profiles(folder: Path) -> Path:
    """A stand-in for vllm_omni's deploy folder: a two-stage profile, and one inheriting from it as vllm-omni's
    high-concurrency profiles do (base_config)."""
    folder.mkdir(parents=True)
    base = {
        "model_runner": "v1",
        "connectors": {"shm": {"name": "SharedMemoryConnector", "extra": {"decode_batch_max_size": 1, "chunk": 25}}},
        "stages": [
            {
                "stage_id": 0,
                "max_num_seqs": 64,
                "gpu_memory_utilization": 0.3,
                "default_sampling_params": {"top_k": 50},
            },
            {"stage_id": 1, "max_num_seqs": 10, "gpu_memory_utilization": 0.3, "devices": "1"},
        ],
        "platforms": {"npu": {"model_runner": "v1"}},
    }
    (folder / "tts.yaml").write_text(yaml.safe_dump(base))
    overlay = {
        "base_config": "tts.yaml",
        "model_runner": "v2",
        "connectors": {"shm": {"extra": {"decode_batch_max_size": 8}}},
        "stages": [{"stage_id": 1, "max_num_seqs": 32, "devices": "0"}],
    }
    (folder / "tts_hc.yaml").write_text(yaml.safe_dump(overlay))
    return folder


def test_side_by_side_starts_vllm_omni_b_on_its_own_flattened_profile(tmp_path: Path) -> None:
    """`vllm-omni-b`: a second `vllm serve --omni` on OMNI_B_PROFILE (here a profile of vllm_omni's deploy folder
    that inherits), at OMNI_B_MEMORY per stage and FRAMES, on OMNI_B_PORT, with code2wav's codec override."""
    port = free_port()
    settings = {
        "TARGETS": "vllm-omni-b",
        "OMNI_B_PORT": str(port),
        "OMNI_B_PROFILE": "vllm-omni:tts_hc.yaml",
        "OMNI_B_PROFILE_SET": "connectors.shm.extra.chunk=50",
        "OMNI_B_MEMORY": "0:0.2,1:0.1",
        "MEMORY": "0.14",
        "PROFILE_SET": "stages.0.max_num_seqs=7",  # the service's: not for vllm-omni-b
        "FRAMES": "40",
        "CODEC_WEIGHTS": "real",
        "VLLM_OMNI_DEPLOY_DIR": str(upstream_profiles(tmp_path / "vllm_omni/deploy")),
    }
    with harness_started(tmp_path, settings) as argv:
        copy = tmp_path / "work/bench-profile-vllm-omni-b.yaml"
        assert argv[:3] == ["-m", "vllm_omni.entrypoints.cli.main", "serve"]
        assert argv[argv.index("--deploy-config") + 1] == str(copy)
        assert argv[argv.index("--port") + 1] == str(port)
        assert argv[argv.index("--load-format") + 1] == "dummy"  # the talker's
        assert json.loads(argv[argv.index("--stage-overrides") + 1]) == {"1": {"load_format": "auto"}}
        assert int(Path(f"/tmp/vllm-omni-{port}.pid").read_text()) > 0  # where `stop` looks for it
        text = copy.read_text()
        assert text.startswith(
            "# Benchmark copy of vllm-omni:tts_hc.yaml: memory=0:0.2,1:0.1, frames=40, connectors.shm.extra.chunk=50\n"
        )
        profile = yaml.safe_load(text)
        assert "base_config" not in profile and profile["model_runner"] == "v2"
        assert profile["platforms"] == {"npu": {"model_runner": "v1", "stages": []}}  # merged as vllm-omni does
        assert profile["connectors"]["shm"]["extra"] == {"decode_batch_max_size": 8, "chunk": 50}
        talker, code2wav = profile["stages"]
        assert (talker["gpu_memory_utilization"], code2wav["gpu_memory_utilization"]) == (0.2, 0.1)
        assert (talker["max_num_seqs"], code2wav["max_num_seqs"], code2wav["devices"]) == (64, 32, "0")
        assert talker["default_sampling_params"] == {"top_k": 50, "max_tokens": 41, "min_tokens": 41}
        assert (tmp_path / "work/results/profile-vllm-omni-b.yaml").read_text() == text
        commands = (tmp_path / "work/results/commands.txt").read_text()
        assert "vllm-omni-b: source profile vllm-omni:tts_hc.yaml" in commands
        assert f"vllm-omni-b: profile {copy}, stage overrides " in commands


def test_side_by_side_gives_the_service_and_vllm_omni_each_their_profile(tmp_path: Path) -> None:
    """PROFILE (with PROFILE_SET, at MEMORY) is the service's; OMNI_PROFILE (with OMNI_PROFILE_SET, at OMNI_MEMORY)
    vllm-omni's: neither copy gets the other's overrides, and commands.txt says which target ran which."""
    settings = {
        "TARGETS": "service vllm-omni",
        "SERVICE_PORT": str(free_port()),
        "OMNI_PORT": str(free_port()),
        "PROFILE_SET": "stages.0.max_num_seqs=7",
        "MEMORY": "0.15",
        "OMNI_PROFILE": "vllm-omni:tts.yaml",
        "OMNI_PROFILE_SET": "stages.1.max_num_seqs=3",
        "OMNI_MEMORY": "0.11",
        "VLLM_OMNI_DEPLOY_DIR": str(upstream_profiles(tmp_path / "vllm_omni/deploy")),
    }
    with harness_started(tmp_path, settings, record="argv-vllm_omni") as argv:  # vllm-omni's, started second
        assert argv[argv.index("--deploy-config") + 1] == str(tmp_path / "work/bench-profile-vllm-omni.yaml")
        results = tmp_path / "work/results"
        service = yaml.safe_load((results / "profile.yaml").read_text())
        omni = yaml.safe_load((results / "profile-vllm-omni.yaml").read_text())
        shipped = yaml.safe_load((ROOT / "deploy/vllm-omni/customvoice.yaml").read_text())
        assert service["connectors"] == shipped["connectors"]
        assert [s["max_num_seqs"] for s in service["stages"]] == [7, shipped["stages"][1]["max_num_seqs"]]
        assert {s["gpu_memory_utilization"] for s in service["stages"]} == {0.15}
        assert omni["model_runner"] == "v1" and [s["max_num_seqs"] for s in omni["stages"]] == [64, 3]
        assert {s["gpu_memory_utilization"] for s in omni["stages"]} == {0.11}
        commands = (results / "commands.txt").read_text()
        assert "service: source profile deploy/vllm-omni/customvoice.yaml" in commands
        assert "vllm-omni: source profile vllm-omni:tts.yaml" in commands


@pytest.mark.parametrize(
    ("settings", "refusal"),
    [
        ({"TARGETS": "vllm-omni-b"}, "vllm-omni-b needs OMNI_B_PROFILE"),
        ({"TARGETS": "vllm-omni", "OMNI_PROFILE": "deploy/vllm-omni/customvoice.yaml", "OMNI_ON": "b"}, "OMNI_ON=b"),
        ({"TARGETS": "vllm-omni", "OMNI_ON": "d"}, "OMNI_ON is a, b or c, not d"),
    ],
)
def test_side_by_side_refuses_a_vllm_omni_target_without_a_profile_to_run(
    tmp_path: Path, settings: dict[str, str], refusal: str
) -> None:
    env = {**os.environ, "PYTHON": str(harness_python(tmp_path)), "WORK": str(tmp_path / "work"), **settings}
    env.update(OMNI_PORT=str(free_port()), OMNI_B_PORT=str(free_port()))
    started = subprocess.run([str(GPU / "side-by-side.sh"), "start"], env=env, capture_output=True, text=True)
    assert started.returncode == 1 and refusal in started.stdout, started.stdout + started.stderr
    assert not (tmp_path / "argv").exists()  # nothing started


def test_side_by_side_starts_sglang_omni_on_its_own_packages_and_runs_every_request_to_its_length(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`sglang`: `sgl-omni serve` on the shared model directory with a random-weight talker, its memory share, its
    own packages (SGLANG_SITE) before the rest, the fixed-length patch before those, on its port or not at all, on
    the GPUs its settings name."""
    site = tmp_path / "sgl-site"
    (site / "sglang_omni").mkdir(parents=True)
    port = free_port()
    settings = {
        "TARGETS": "sglang",
        "SGLANG_PORT": str(port),
        "SGLANG_SITE": str(site),
        "SGLANG_MEMORY": "0.3",
        "SGLANG_ENV": f"CUDA_VISIBLE_DEVICES=2 TMPDIR={tmp_path}",
        "SGLANG_ARGS": "--vocoder.factory.incremental_codec_compile false",
    }
    monkeypatch.delenv("SGLANG_OMNI_PORT_CLAIM_DIR", raising=False)  # the folder is the script's to name here
    with harness_started(tmp_path, settings, record="argv-sglang", model_written=False) as argv:
        assert argv[:4] == ["-m", "sglang_omni.cli", "serve", "--model-path"]
        assert argv[argv.index("--model-path") + 1] == str(tmp_path / "work/model")
        assert argv[argv.index("--port") + 1] == str(port)
        assert argv[argv.index("--tts_engine.engine.load_format") + 1] == "dummy"
        assert argv[argv.index("--mem-fraction-static") + 1] == "0.3"
        assert argv[-2:] == ["--vocoder.factory.incremental_codec_compile", "false"]
        pythonpath, force, strict, gpus = (tmp_path / "sglang_env").read_text().split("\n")[:4]
        assert pythonpath.split(":")[:2] == [str(ROOT / "app/engines/sglang/stage_plugins/process_start"), str(site)]
        assert (force, strict, gpus) == ("1", "1", "2")
        assert (tmp_path / "work/model/config.json").exists()
        # sglang's own caches in the run's compile cache, laid out as the service's engine lays them out
        caches = (tmp_path / "sglang_env").read_text().split("\n")[5:7]
        assert caches == [str(tmp_path / "work/compile-cache/sglang"), str(tmp_path / "work/compile-cache/sglang/jit")]
        # its process group's port claimed where the service's engine claims it, not under its own TMPDIR
        claims = (tmp_path / "sglang_env").read_text().split("\n")[7]
        assert claims == ENGINE_ENVIRONMENT["SGLANG_OMNI_PORT_CLAIM_DIR"]


@pytest.mark.parametrize(
    ("target", "port_setting", "setting"),
    [
        ("service-sglang", "SERVICE_SGLANG_PORT", "SERVICE_SGLANG_ENV"),
        ("service-sglang-b", "SERVICE_SGLANG_B_PORT", "SERVICE_SGLANG_B_ENV"),
    ],
)
def test_side_by_side_starts_the_service_on_its_sglang_engine_beside_sglang_omnis_own_server(
    tmp_path: Path, target: str, port_setting: str, setting: str
) -> None:
    """`service-sglang` (and a second one, `service-sglang-b`, for a lever against the engine as shipped): the
    service's sglang engine on the same model directory, random talker weights, fixed length and memory share as
    `sglang`, sglang-omni's packages first, on its port and its GPUs."""
    site = tmp_path / "sgl-site"
    (site / "sglang_omni").mkdir(parents=True)
    port = free_port()
    other = "SERVICE_SGLANG_ENV" if setting == "SERVICE_SGLANG_B_ENV" else "SERVICE_SGLANG_B_ENV"
    settings = {
        "TARGETS": target,
        port_setting: str(port),
        "SGLANG_SITE": str(site),
        "SGLANG_MEMORY": "0.3",
        setting: "CUDA_VISIBLE_DEVICES=3",
        other: "CUDA_VISIBLE_DEVICES=7",
    }
    with harness_started(tmp_path, settings, record="argv-app.cli") as argv:
        assert argv[1:3] == ["-m", "app.cli"] and argv[argv.index("--engine") + 1] == "sglang"
        assert argv[argv.index("--port") + 1] == str(port)
        pythonpath, model, load_format, fixed, memory = (tmp_path / "service_env").read_text().split("\n")[:5]
        assert pythonpath.split(":")[:2] == [str(ROOT), str(site)]  # the checkout, then sglang-omni's packages
        assert (model, load_format, fixed, memory) == (str(tmp_path / "work/model"), "dummy", "true", "0.3")
        assert (tmp_path / "gpus").read_text() == "3"
        caches = (tmp_path / "service_env").read_text().split("\n")[6:8]
        assert caches == [str(tmp_path / "work/compile-cache/sglang"), str(tmp_path / "work/compile-cache/sglang/jit")]


def test_side_by_side_refuses_sglang_without_its_packages(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "PYTHON": str(harness_python(tmp_path)),
        "WORK": str(tmp_path / "work"),
        "START_WAIT_S": "0",
        "TARGETS": "sglang",
        "SGLANG_SITE": str(tmp_path / "nothing"),
        "SGLANG_PORT": str(free_port()),
    }
    started = subprocess.run([str(GPU / "side-by-side.sh"), "start"], env=env, capture_output=True, text=True)
    assert started.returncode == 1 and "no sglang-omni in" in started.stdout
    assert not (tmp_path / "argv-sglang").exists()


def test_fixed_length_patch_masks_the_codec_end_token_in_sglang_omnis_talker_runner(tmp_path: Path) -> None:
    """The patch (sitecustomize on PYTHONPATH, on with QWEN3_TTS_FIXED_LENGTH=1) wraps the runner's
    suppress-tokens step, run before sampling on every step: the end-of-speech logit of every request row is -inf,
    other rows and tokens as the original left them; off without the setting."""
    package = tmp_path / "fake/sglang_omni/models/qwen3_tts"
    package.mkdir(parents=True)
    for folder in [tmp_path / "fake/sglang_omni", tmp_path / "fake/sglang_omni/models", package]:
        (folder / "__init__.py").write_text("")
    (package / "model_runner.py").write_text(
        "class Qwen3TTSModelRunner:\n"
        "    def apply_codec_suppress_tokens(self, logits_output, requests):\n"
        "        logits_output.next_token_logits[:, 0] = -1.0  # the original's own suppression\n"
    )
    probe = (
        "import numpy, types\n"
        "from sglang_omni.models.qwen3_tts.model_runner import Qwen3TTSModelRunner as R\n"
        "runner = R(); runner.model = types.SimpleNamespace(config=types.SimpleNamespace(codec_eos_token_id=3))\n"
        "out = types.SimpleNamespace(next_token_logits=numpy.zeros((3, 5)))\n"
        "runner.apply_codec_suppress_tokens(out, ['a', 'b'])\n"
        "print(out.next_token_logits.tolist())\n"
    )
    pythonpath = f"{ROOT / 'app/engines/sglang/stage_plugins/process_start'}:{tmp_path / 'fake'}"
    for force, eos in [("1", float("-inf")), ("0", 0.0)]:
        done = subprocess.run(
            [sys.executable, "-c", probe],
            env={**os.environ, "PYTHONPATH": pythonpath, "QWEN3_TTS_FIXED_LENGTH": force},
            capture_output=True,
            text=True,
            check=True,
        )
        rows = json.loads(done.stdout.replace("-inf", "-Infinity"))
        assert rows[0] == rows[1] == [-1.0, 0.0, 0.0, eos, 0.0]
        assert rows[2] == [-1.0, 0.0, 0.0, 0.0, 0.0]  # a padding row past the batch's requests: left alone
        assert ("codec EOS masked" in done.stderr) == (force == "1")


def test_the_process_start_sets_the_switch_interval_it_is_given_and_reports_one_it_cannot(tmp_path: Path) -> None:
    """SPEECH_SGLANG_SWITCH_INTERVAL_S sets Python's switch interval in a process started with the directory on its
    path, with or without the fixed-length patch; unset, Python's default stays; a value Python refuses is reported
    and the process runs on (an operator's own sitecustomize after it still has the last word)."""
    start = ROOT / "app/engines/sglang/stage_plugins/process_start"
    own = tmp_path / "own"
    own.mkdir()
    probe = "import sys; print(sys.getswitchinterval())"
    clean = {key: value for key, value in os.environ.items() if key != "SPEECH_SGLANG_SWITCH_INTERVAL_S"}
    default = subprocess.run(
        [sys.executable, "-c", probe], env=clean, capture_output=True, text=True, check=True
    ).stdout
    for interval, force, expected in [("0.0005", "0", 0.0005), ("0.002", "1", 0.002), ("", "0", float(default))]:
        done = subprocess.run(
            [sys.executable, "-c", probe],
            env={
                **os.environ, "PYTHONPATH": str(start), "SPEECH_SGLANG_SWITCH_INTERVAL_S": interval,
                "QWEN3_TTS_FIXED_LENGTH": force,
            },
            capture_output=True, text=True, check=True, timeout=60,
        )  # fmt: skip
        assert float(done.stdout) == expected
    for bad in ("0", "-1", "soon", "inf", "1e308", "2"):
        done = subprocess.run(
            [sys.executable, "-c", probe],
            env={**os.environ, "PYTHONPATH": str(start), "SPEECH_SGLANG_SWITCH_INTERVAL_S": bad},
            capture_output=True, text=True, check=True, timeout=60,
        )  # fmt: skip
        assert float(done.stdout) == float(default)
        assert f"SPEECH_SGLANG_SWITCH_INTERVAL_S={bad!r} left unset" in done.stderr
    (own / "sitecustomize.py").write_text("import sys\nsys.setswitchinterval(0.004)\n")
    done = subprocess.run(
        [sys.executable, "-c", probe],
        env={**os.environ, "PYTHONPATH": f"{start}:{own}", "SPEECH_SGLANG_SWITCH_INTERVAL_S": "0.0005"},
        capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    assert float(done.stdout) == 0.004


def test_fixed_length_patch_still_runs_a_sitecustomize_later_on_the_path(tmp_path: Path) -> None:
    """The patch's directory goes first on the pipeline's PYTHONPATH, and Python imports only the first
    `sitecustomize` it finds: the patch then runs the next one on the path itself, so an operator's own (a GIL switch
    interval, a tracer) still runs in the pipeline's process, with the setting on or off; once, with the patch's
    directory on the path again through a link, another copy of the patch (another checkout's) before the operator's,
    and an empty entry (the current directory); an error in the operator's names its file and does not stop the
    process nor the patch."""
    patch = ROOT / "app/engines/sglang/stage_plugins/process_start"
    own = tmp_path / "own"
    own.mkdir()
    (own / "sitecustomize.py").write_text(
        "import os, sys\nsys.setswitchinterval(0.0005)\nprint('own sitecustomize ran', file=sys.stderr)\n"
    )
    (tmp_path / "alias").symlink_to(patch)
    shutil.copytree(patch, tmp_path / "copy")
    probe = "import sys; print(sys.getswitchinterval(), sum(type(f).__name__ == '_Finder' for f in sys.meta_path))"
    for force in ("1", "0"):
        for layout in ([patch, tmp_path / "alias", own], [patch, "", tmp_path / "copy", own]):
            done = subprocess.run(
                [sys.executable, "-c", probe],
                env={**os.environ, "PYTHONPATH": ":".join(map(str, layout)), "QWEN3_TTS_FIXED_LENGTH": force},
                capture_output=True,
                text=True,
                check=True,
                timeout=60,
            )
            interval, finders = done.stdout.split()
            assert float(interval) == 0.0005 and int(finders) == (force == "1")
            assert done.stderr.count("own sitecustomize ran") == 1
    (own / "sitecustomize.py").write_text("raise RuntimeError('broken on purpose')\n")
    done = subprocess.run(
        [sys.executable, "-c", probe],
        env={**os.environ, "PYTHONPATH": f"{patch}:{own}", "QWEN3_TTS_FIXED_LENGTH": "1"},
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert f"Error in sitecustomize {own / 'sitecustomize.py'}: RuntimeError('broken on purpose')" in done.stderr
    assert done.stdout.split()[1] == "1"  # the patch is in place all the same


def sweep_python(tmp_path: Path) -> Path:
    """The GPU host's python for side-by-side.sh's sweeps: every readiness probe answers 200, and speech-loadtest
    records its arguments and writes a results.json into its --out folder."""
    return load_tool_python(tmp_path, f'    printf "%s\\n" "$@" > {tmp_path}/loadtest_argv')


def sweep_env(tmp_path: Path, python: Path, **settings: str) -> dict[str, str]:
    """side-by-side.sh's environment for a sweep with a stand-in `python`: its work and results under `tmp_path`, the
    service on port 18000 and `vllm-omni-b` (on vllm-omni's single-GPU high-concurrency profile) on 18005."""
    return {
        **os.environ,
        "PYTHON": str(python),
        "WORK": str(tmp_path / "work"),
        "OUT": str(tmp_path / "results"),
        "SERVICE_PORT": "18000",
        "OMNI_B_PORT": "18005",
        "OMNI_B_PROFILE": "vllm-omni:qwen3_tts_high_concurrency_mrv2_single_gpu.yaml",
        **settings,
    }


def parallel_python(tmp_path: Path, expected: int, wait_s: int = 30) -> Path:
    """The GPU host's python for parallel sweeps: readiness probes answer 200; speech-loadtest waits until all
    `expected` sweeps have begun (a barrier: sweeps run one after another never get past it, and fail after
    `wait_s`), then writes its results.json, its arguments (`argv`) and the cores it may run on (`cpus`) into its
    --out folder."""
    barrier = tmp_path / "barrier"
    barrier.mkdir(parents=True)
    return load_tool_python(
        tmp_path,
        f"    touch {barrier}/$$\n"
        f"    for _ in $(seq {wait_s * 10}); do\n"
        f'      [ "$(ls {barrier} | wc -l)" -ge {expected} ] && break; sleep 0.1\n'
        "    done\n"
        f'    [ "$(ls {barrier} | wc -l)" -ge {expected} ] || exit 1\n'
        '    printf "%s\\n" "$@" > "$out/argv"\n'
        '    grep Cpus_allowed_list /proc/$$/status | cut -f2 > "$out/cpus"',
    )


def test_side_by_side_sweeps_every_target_at_once_each_from_its_own_cores_when_parallel(tmp_path: Path) -> None:
    """PARALLEL=1: each target swept by a process of its own, all at once (the stand-in load tool holds until both
    have begun), each on the cores its LOAD_CPUS names, into a folder of its own with its own commands.txt."""
    out = tmp_path / "results"
    cores = sorted(os.sched_getaffinity(0))
    first, second = str(cores[0]), str(cores[-1])
    env = sweep_env(
        tmp_path,
        parallel_python(tmp_path, expected=2),
        TARGETS="service vllm-omni-b",
        PARALLEL="1",
        SERVICE_ENV=f"CUDA_VISIBLE_DEVICES=0 LOAD_CPUS={first}",
        OMNI_B_ENV=f"CUDA_VISIBLE_DEVICES=1 LOAD_CPUS={second}",
        CONCURRENCY="8",
        SWEEP_NAME="c8",
    )
    done = subprocess.run([str(GPU / "side-by-side.sh"), "sweep-closed"], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    for target, port, core in [("service", "18000", first), ("vllm-omni-b", "18005", second)]:
        argv = (out / target / "closed-c8/argv").read_text().split("\n")[:-1]
        assert [argv[i + 1] for i, a in enumerate(argv) if a == "--target"] == [f"http://127.0.0.1:{port}"]
        assert (out / target / "closed-c8/cpus").read_text().strip() == core
        assert (out / target / "commands.txt").read_text().count("-m loadtest.cli") == 1
        assert f"{target}: done ({out / target})" in done.stdout
    one_at_a_time = subprocess.run(  # the same barrier, sweeps in turn: the first never sees the second begin
        [str(GPU / "side-by-side.sh"), "sweep-closed"],
        env={**env, "PYTHON": str(parallel_python(tmp_path / "again", expected=2, wait_s=1)), "PARALLEL": "0"},
        capture_output=True,
        text=True,
    )
    assert one_at_a_time.returncode != 0


def test_side_by_side_keeps_each_servers_metrics_from_just_before_and_just_after_a_level(tmp_path: Path) -> None:
    """A level's folder holds each target's /metrics read before the load tool began and after it ended, so that a
    level's server-side figures (the event loop's lag, TTFA by phase) are the difference of the two."""
    python = load_tool_python(
        tmp_path,
        '    ls "$out" > "$out/seen-by-the-load-tool"',
        probe='case "$2" in */metrics) printf "# %s at %s\\n" "$2" "$(date +%s%N)" > "$3" ;; esac; exit 0',
    )
    env = sweep_env(tmp_path, python, TARGETS="service vllm-omni-b", CONCURRENCY="8", SWEEP_NAME="c8")
    done = subprocess.run([str(GPU / "side-by-side.sh"), "sweep-closed"], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    level = tmp_path / "results/closed-c8"
    seen = (level / "seen-by-the-load-tool").read_text().split()
    for target, port in [("service", "18000"), ("vllm-omni-b", "18005")]:
        assert f"metrics-{target}-before.txt" in seen and f"metrics-{target}-after.txt" not in seen
        before, after = ((level / f"metrics-{target}-{when}.txt").read_text().split() for when in ("before", "after"))
        assert before[1] == after[1] == f"http://127.0.0.1:{port}/metrics" and int(before[3]) < int(after[3])
    # and read into one table: a row per server (these stand-ins export no histograms: no figures in them)
    table = (level / "server-metrics.md").read_text()
    assert "| service | – / – / – |" in table and "| vllm-omni-b | – / – / – |" in table


def test_side_by_side_samples_each_gpus_utilization_while_a_level_runs(tmp_path: Path) -> None:
    """While the load tool runs a level, nvidia-smi samples every GPU's utilization (the share of each sample's period
    a kernel ran) into the level's gpu-util.csv, stopped when the level ends, and gpu-util.md tables each GPU's mean
    and its share of samples at 90% or more: a level bound by the GPU reads near 100%, one bound by a host below it."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text(  # the sampler prints its samples, then samples on until it is stopped
        '#!/bin/sh\ncase "$*" in *-lms*)\n'
        '  printf "0, 100\\n1, 10\\n0, 80\\n1, 30\\n0, 96\\n1, 20\\n"; exec sleep 60 ;;\nesac\n'
    )
    (bin_dir / "nvidia-smi").chmod(0o755)
    # the level lasts until the sampler has written (one printf: all six samples at once), 30 s at most
    wait_for_samples = '    for _ in $(seq 300); do [ -s "$out/gpu-util.csv" ] && break; sleep 0.1; done'
    python = load_tool_python(tmp_path, wait_for_samples)
    env = sweep_env(
        tmp_path, python, TARGETS="service", CONCURRENCY="8", SWEEP_NAME="c8", PATH=f"{bin_dir}:{os.environ['PATH']}"
    )
    started = time.monotonic()
    done = subprocess.run([str(GPU / "side-by-side.sh"), "sweep-closed"], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert time.monotonic() - started < 50  # the sampler was stopped with the level, not waited for (it sleeps 60 s)
    level = tmp_path / "results/closed-c8"
    assert (level / "gpu-util.csv").read_text().splitlines()[:2] == ["0, 100", "1, 10"]
    table = (level / "gpu-util.md").read_text()
    assert "| 0 | 3 | 92 | 67% |" in table and "| 1 | 3 | 20 | 0% |" in table, table


def test_side_by_side_tables_where_the_hosts_cpu_time_went_over_a_level_steal_included(tmp_path: Path) -> None:
    """The host's CPU time counters are read before and after each level: host-cpu.md says what share of it was busy,
    waiting on I/O, and stolen by a virtual machine's hypervisor (what can make one start slower than the next)."""
    stat = tmp_path / "stat"
    stat.write_text("cpu  100 0 50 1000 10 0 0 100 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\n")
    # during the level: 100 user, 50 system, 500 idle, 10 iowait and 80 stolen ticks, 740 in all
    python = load_tool_python(tmp_path, f"    printf 'cpu  200 0 100 1500 20 0 0 180 0 0\\n' > {stat}")
    env = sweep_env(tmp_path, python, TARGETS="service", CONCURRENCY="8", SWEEP_NAME="c8", PROC_STAT=str(stat))
    done = subprocess.run([str(GPU / "side-by-side.sh"), "sweep-closed"], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    table = (tmp_path / "results/closed-c8/host-cpu.md").read_text().splitlines()
    assert table == ["| host CPU busy % | iowait % | steal % |", "| --- | --- | --- |", "| 20 | 1.4 | 10.8 |"]


def test_side_by_side_stops_the_gpu_sampler_when_a_level_is_interrupted(tmp_path: Path) -> None:
    """Ctrl-C during a level (SIGINT to the run's process group): the sampler, which a script without job control
    starts with SIGINT ignored, is stopped with the run, not left sampling."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text(
        f'#!/bin/sh\ncase "$*" in *-lms*) echo $$ > {tmp_path}/sampler.pid; echo "0, 50"; exec sleep 60 ;; esac\n'
    )
    (bin_dir / "nvidia-smi").chmod(0o755)
    python = load_tool_python(tmp_path, f"    touch {tmp_path}/level-began; sleep 60")
    env = sweep_env(
        tmp_path, python, TARGETS="service", CONCURRENCY="8", SWEEP_NAME="c8", PATH=f"{bin_dir}:{os.environ['PATH']}"
    )
    run = subprocess.Popen(  # SIGINT as a terminal gives it: not ignored (a test runner's worker may ignore it)
        [str(GPU / "side-by-side.sh"), "sweep-closed"],
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        for _ in range(300):  # the level and its sampler under way (at most 30 s)
            if (tmp_path / "level-began").exists() and (tmp_path / "sampler.pid").exists():
                break
            time.sleep(0.1)
        sampler = int((tmp_path / "sampler.pid").read_text())
        os.killpg(run.pid, signal.SIGINT)
        run.wait(timeout=30)
        for _ in range(100):  # gone within 10 s of the run's end
            try:
                os.kill(sampler, 0)
            except ProcessLookupError:
                break
            time.sleep(0.1)
        else:
            os.kill(sampler, signal.SIGKILL)
            pytest.fail("the sampler outlived the interrupted run")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(run.pid, signal.SIGKILL)


def test_side_by_side_sweeps_one_level_a_call_and_keeps_every_level(tmp_path: Path) -> None:
    """Closed-loop levels run one per call land in folders of their own (SWEEP_NAME), a sweep run again beside its
    results in a new one, and each folder's targets.txt says which server and profile each URL is."""
    out = tmp_path / "results"
    env = sweep_env(
        tmp_path,
        sweep_python(tmp_path),
        TARGETS="service vllm-omni vllm-omni-b",
        OMNI_PORT="18001",
        OMNI_PROFILE="vllm-omni:qwen3_tts.yaml",
    )
    folders = []
    for level, name in [("1", "c1"), ("8", "c8"), ("8", "c8")]:
        done = subprocess.run(
            [str(GPU / "side-by-side.sh"), "sweep-closed"],
            env={**env, "CONCURRENCY": level, "SWEEP_NAME": name},
            capture_output=True,
            text=True,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        argv = (tmp_path / "loadtest_argv").read_text().split("\n")[:-1]
        assert argv[argv.index("--concurrency") + 1] == level
        folders.append(Path(argv[argv.index("--out") + 1]))
    assert folders == [out / "closed-c1", out / "closed-c8", out / "closed-c8-2"]
    assert "closed-c8 holds results: this sweep goes to" in done.stdout
    assert [argv[i + 1] for i, a in enumerate(argv) if a == "--target"] == [
        "http://127.0.0.1:18000",
        "http://127.0.0.1:18001",
        "http://127.0.0.1:18005",
    ]
    assert (out / "closed-c8-2/targets.txt").read_text().splitlines() == [
        "service http://127.0.0.1:18000 deploy/vllm-omni/customvoice.yaml",
        "vllm-omni http://127.0.0.1:18001 vllm-omni:qwen3_tts.yaml",
        "vllm-omni-b http://127.0.0.1:18005 vllm-omni:qwen3_tts_high_concurrency_mrv2_single_gpu.yaml",
    ]
    commands = (out / "commands.txt").read_text()
    assert commands.count("-m loadtest.cli") == 3
    assert "closed-c1: service http://127.0.0.1:18000 deploy/vllm-omni/customvoice.yaml;vllm-omni " in commands


# what vllm-omni 0.30's print_metrics / print_audio_metrics write, in their layout (vllm_omni/benchmarks/metrics); a
# printf format: requests ok, failed, the level, req/s, the continuity rate, TTFP p50
BENCH_LOG = """============ Serving Benchmark Result ============
Successful requests:                     %s
Failed requests:                         %s
Maximum request concurrency:             %s
Benchmark duration (s):                  4.71
Request throughput (req/s):              %s
------------------------Real Time Factor------------------------
Median AUDIO_RTF:                        0.41
P95 AUDIO_RTF:                           0.52
=================== Audio Result ===================
Streaming continuity OK rate:            %s
----------------Time to First Packet----------------
Mean AUDIO_TTFP (ms):                    150.00
Median AUDIO_TTFP (ms):                  %s
P95 AUDIO_TTFP (ms):                     282.40
"""


def bench_python(tmp_path: Path) -> Path:
    """The GPU host's python for sweep-bench: `vllm bench serve` (run through vllm-omni's CLI main) records its
    arguments and prints a result in the benchmark's layout, a faster one for the second target; everything else (the
    request body, the table) is the real python."""
    script = tmp_path / "python3"
    script.write_text(
        "#!/usr/bin/env bash\n"
        'if [ "$1" = -c ] && [ "$3 $4" = "bench serve" ]; then\n'
        f'  printf "%s\\n" "$@" >> {tmp_path}/bench_argv; echo --- >> {tmp_path}/bench_argv\n'
        '  url=; level=; prev=; for a in "$@"; do [ "$prev" = --base-url ] && url=$a;'
        ' [ "$prev" = --max-concurrency ] && level=$a; prev=$a; done\n'
        "  case $url in *18000) r=17.64 c=100.00%; p=219.30 ;; *) r=20.62 c=0.00%; p=138.10 ;; esac\n"
        f"  printf {json.dumps(BENCH_LOG)} "
        '"$((3 * level))" 0 "$level" "$r" "$c" "$p"\n'
        "  exit 0\n"
        "fi\n"
        'case "$1" in -) exit 0 ;; esac\n'  # readiness probes
        f'exec {sys.executable} "$@"\n'
    )
    script.chmod(0o755)
    return script


def sweep_bench(env: dict[str, str], **more: str) -> subprocess.CompletedProcess[str]:
    """`side-by-side.sh sweep-bench` with `env`, and `more` on top of it."""
    return subprocess.run(
        [str(GPU / "side-by-side.sh"), "sweep-bench"], env={**env, **more}, capture_output=True, text=True, cwd=ROOT
    )


def bench_calls(tmp_path: Path) -> list[list[str]]:
    """The arguments of each `vllm bench serve` call that bench_python recorded, in order."""
    return [call.split("\n") for call in (tmp_path / "bench_argv").read_text().split("\n---\n") if call.strip()]


def test_side_by_side_runs_vllm_bench_against_every_target_and_tabulates_it(tmp_path: Path) -> None:
    """The referee: vllm-omni's benchmark at each level against each HTTP target (not `alone`), with the benchmark's
    own body plus the voice and EXTRA_BODY's length (its own stream_format left to it), 3 prompts per stream, and one
    table of what it printed."""
    out = tmp_path / "results"
    env = sweep_env(
        tmp_path,
        bench_python(tmp_path),
        TARGETS="service vllm-omni-b alone",
        CONCURRENCY="1,32,64",
        EXTRA_BODY='{"stream_format": "audio", "max_new_tokens": 101}',
    )
    done = sweep_bench(env)
    assert done.returncode == 0, done.stdout + done.stderr
    calls = bench_calls(tmp_path)
    assert [(c[c.index("--max-concurrency") + 1], c[c.index("--base-url") + 1]) for c in calls] == [
        ("1", "http://127.0.0.1:18000"),
        ("1", "http://127.0.0.1:18005"),
        ("32", "http://127.0.0.1:18000"),
        ("32", "http://127.0.0.1:18005"),
        ("64", "http://127.0.0.1:18000"),
        ("64", "http://127.0.0.1:18005"),
    ]
    assert calls[0][calls[0].index("--num-prompts") + 1] == "16"  # 3 a stream, but at least 16
    first = calls[2]
    assert first[first.index("--backend") + 1] == "openai-audio-speech" and "--omni" in first
    assert first[first.index("--num-prompts") + 1] == "96"
    assert json.loads(first[first.index("--extra-body") + 1]) == {"voice": "vivian", "max_new_tokens": 101}
    assert first[first.index("--dataset-name") + 1] == "random"  # whose requests carry ignore_eos
    table = (out / "bench/README.md").read_text()
    assert "| 32 | service | 96 / 0 | 17.64 | 219 / 282 | 0.410 / 0.520 | 100% | – |" in table
    assert "| 32 | vllm-omni-b | 96 / 0 | 20.62 | 138 / 282 | 0.410 / 0.520 | 0% | 1.17, 0.63, 1.00 |" in table
    assert "| 64 | service | 192 / 0 |" in table and "alone" not in table
    assert "alone: not an HTTP speech server to vllm bench; skipped" in done.stdout
    assert (out / "commands.txt").read_text().count("bench serve --omni") == 6
    again = sweep_bench(env)
    assert again.returncode == 0 and (out / "bench-2/README.md").exists()  # never over an earlier sweep
    # no prompt twice on a server: its random dataset is drawn from --seed, the same one (0) each call unless given,
    # so every level of every call gets a seed of its own, the same for each target at that level
    calls = bench_calls(tmp_path)
    seeds = [c[c.index("--seed") + 1] for c in calls]
    assert len(seeds) == 12 and seeds[::2] == seeds[1::2]
    assert len(set(seeds[::2])) == 6 and "0" not in seeds
    pinned = sweep_bench(env, BENCH_SEED="500", CONCURRENCY="8,16")
    assert pinned.returncode == 0, pinned.stdout + pinned.stderr
    calls = bench_calls(tmp_path)
    assert [c[c.index("--seed") + 1] for c in calls[12:]] == ["500", "500", "501", "501"]


def test_side_by_side_runs_vllm_bench_at_a_poisson_rate_with_the_level_as_its_cap(tmp_path: Path) -> None:
    """BENCH_RATE: the benchmark's own Poisson arrivals (--request-rate), each level's concurrency then a cap and its
    prompt count as at any level; without it no rate is passed (vllm bench sends them all at once)."""
    env = sweep_env(tmp_path, bench_python(tmp_path), TARGETS="service", CONCURRENCY="56", BENCH_PROMPTS="2")
    done = sweep_bench(env, BENCH_RATE="14", SWEEP_NAME="poisson14")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "c=56 at 14 req/s against service" in done.stdout
    (call,) = bench_calls(tmp_path)
    assert call[call.index("--request-rate") + 1] == "14"
    assert (call[call.index("--max-concurrency") + 1], call[call.index("--num-prompts") + 1]) == ("56", "112")
    assert "| 56 | service | 168 / 0 |" in (tmp_path / "results/bench-poisson14/README.md").read_text()
    (tmp_path / "bench_argv").unlink()
    plain = sweep_bench(env)
    assert plain.returncode == 0 and "--request-rate" not in (tmp_path / "bench_argv").read_text().split("\n")


def test_side_by_side_sends_sglang_its_own_request_body_beside_the_others(tmp_path: Path) -> None:
    """sglang-omni streams on `"stream": true` and counts max_new_tokens in frames: the load tool gets one body per
    target in --target order, and vllm bench gets sglang's length (its own streaming fields left to it)."""
    env = sweep_env(
        tmp_path,
        sweep_python(tmp_path),
        TARGETS="service sglang",
        SGLANG_PORT="18006",
        EXTRA_BODY='{"stream_format": "audio", "max_new_tokens": 101}',
        CONCURRENCY="8",
    )
    done = subprocess.run([str(GPU / "side-by-side.sh"), "sweep-closed"], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    argv = (tmp_path / "loadtest_argv").read_text().split("\n")[:-1]
    assert [argv[i + 1] for i, a in enumerate(argv) if a == "--target"] == [
        "http://127.0.0.1:18000",
        "http://127.0.0.1:18006",
    ]
    assert [json.loads(argv[i + 1]) for i, a in enumerate(argv) if a == "--extra-body"] == [
        {"stream_format": "audio", "max_new_tokens": 101},
        {"stream": True, "max_new_tokens": 100},
    ]
    assert "--unique-texts" in argv  # no prompt twice on a server: sglang-omni's prefix cache meets new text
    again = subprocess.run(
        [str(GPU / "side-by-side.sh"), "sweep-closed"],
        env={**env, "UNIQUE_TEXTS": "0", "SWEEP_NAME": "plain"},
        capture_output=True,
        text=True,
    )
    assert again.returncode == 0 and "--unique-texts" not in (tmp_path / "loadtest_argv").read_text().split("\n")
    benched = sweep_bench(env, PYTHON=str(bench_python(tmp_path)))
    assert benched.returncode == 0, benched.stdout + benched.stderr
    calls = bench_calls(tmp_path)
    assert [json.loads(c[c.index("--extra-body") + 1]) for c in calls] == [
        {"voice": "vivian", "max_new_tokens": 101},
        {"voice": "vivian", "max_new_tokens": 100},
    ]


class FakeTensor:
    def __init__(self, name: str) -> None:
        self.name, self.calls = name, []

    def detach(self) -> FakeTensor:
        self.calls.append("detach")
        return self

    def clone(self) -> FakeTensor:
        self.calls.append("clone")
        return self

    def contiguous(self) -> FakeTensor:
        self.calls.append("contiguous")
        return self


def test_codec_weights_are_named_as_a_checkpoints_speech_tokenizer_names_them() -> None:
    """Code2wav's load_weights loads `decoder.*` from speech_tokenizer/ into its decoder (and skips `encoder.*`)."""
    codec_weights = gpu_script("codec_weights")
    state = {
        "pre_conv.conv.weight": FakeTensor("a"),
        "quantizer.rvq_first.vq.layers.0._codebook.embed_sum": FakeTensor("b"),
    }
    tensors = codec_weights.checkpoint_tensors(state)
    assert list(tensors) == [
        "decoder.pre_conv.conv.weight",
        "decoder.quantizer.rvq_first.vq.layers.0._codebook.embed_sum",
    ]
    assert all(
        t.calls == ["detach", "clone", "contiguous"] for t in tensors.values()
    )  # own memory, as safetensors needs


def test_codec_weights_refuses_a_directory_without_a_speech_tokenizer(tmp_path: Path) -> None:
    run = subprocess.run(
        [sys.executable, str(GPU / "codec_weights.py"), str(tmp_path)], capture_output=True, text=True, cwd=ROOT
    )
    assert run.returncode == 2 and "no speech_tokenizer/config.json" in run.stderr


def test_codec_weights_builds_the_decoder_from_either_engines_pinned_class() -> None:
    """vllm-omni 0.30.0's decoder class where it imports, else qwen-tts 0.1.1's (a host with the `sglang` extra has
    no vllm): each import names a class its pinned wheel defines, and the two decoders build the same submodules the
    same way (vllm-omni's adds plain attributes of its own), so the tensors written are named alike."""
    function = function_def(ast.parse((GPU / "codec_weights.py").read_text()), "decoder_classes")
    imports = [node for node in ast.walk(function) if isinstance(node, ast.ImportFrom)]
    wheels = {
        "vllm_omni": fetch_locked_wheel("vllm-omni", "0.30.0", "-py3-none-any.whl", "vllm_omni"),
        "qwen_tts": fetch_locked_wheel("qwen-tts", "0.1.1", "-py3-none-any.whl", "qwen_tts"),
    }
    submodules: dict[str, dict[str, str]] = {}
    for node in imports:
        package, _, module = (node.module or "").partition(".")
        tree = wheels[package].tree(module.replace(".", "/") + ".py")
        for alias in node.names:
            found = class_def(tree, alias.name)
            if alias.name == "Qwen3TTSTokenizerV2Decoder":
                submodules[package] = {  # self.<name> = <a module built>: what the state dict's names come from
                    ast.unparse(target): ast.unparse(statement.value)
                    for statement in ast.walk(function_def(found, "__init__"))
                    if isinstance(statement, ast.Assign) and isinstance(statement.value, ast.Call)
                    and not ast.unparse(statement.value.func).startswith("np.")
                    for target in statement.targets
                }  # fmt: skip
    assert sorted((node.module or "").split(".")[0] for node in imports) == ["qwen_tts"] * 2 + ["vllm_omni"] * 2
    assert {"self.pre_transformer", "self.quantizer", "self.pre_conv", "self.upsample", "self.decoder"} == set(
        submodules["vllm_omni"]
    )
    assert submodules["vllm_omni"] == submodules["qwen_tts"]


def test_frontend_weights_are_named_as_the_prompt_frontend_loads_them() -> None:
    """sglang-omni's frontend loads `talker.<name>` into its own `<name>` and the speaker encoder's under its own
    name (`Qwen3TTSPromptFrontend.load_weights`, 0.1.8); each tensor a copy of its own, as safetensors needs."""
    frontend_weights = gpu_script("frontend_weights")
    parameters = {
        "text_projection.linear_fc1.weight": FakeTensor("a"),
        "model.text_embedding.weight": FakeTensor("b"),
        "speaker_encoder.fc.weight": FakeTensor("c"),
    }
    tensors = frontend_weights.checkpoint_tensors(parameters, "talker.", "speaker_encoder.")
    assert list(tensors) == [
        "talker.text_projection.linear_fc1.weight",
        "talker.model.text_embedding.weight",
        "speaker_encoder.fc.weight",
    ]
    assert all(t.calls == ["detach", "clone", "contiguous"] for t in tensors.values())


def test_frontend_weights_names_them_as_sglang_omnis_own_frontend_does() -> None:
    """The pinned wheel's `Qwen3TTSPromptFrontend.checkpoint_weight_names` (run from its source with its module's
    prefixes; the class itself needs torch) gives the names the script writes, for the same parameters."""
    wheel = fetch_locked_wheel("sglang-omni", "0.1.8", "-py3-none-any.whl", "sglang_omni")
    tree = wheel.tree("models/qwen3_tts/prompt_frontend.py")
    prefixes = ("_TALKER_PREFIX", "_SPEAKER_ENCODER_PREFIX")
    constants = {
        ast.unparse(node.targets[0]): ast.literal_eval(node.value)
        for node in tree.body
        if isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) in prefixes
    }
    assert set(constants) == set(prefixes)
    method = function_def(class_def(tree, "Qwen3TTSPromptFrontend"), "checkpoint_weight_names")
    namespace: dict[str, object] = dict(constants)
    exec(compile(ast.Module(body=[method], type_ignores=[]), "prompt_frontend.py", "exec"), namespace)
    names = ["text_projection.linear_fc1.weight", "model.text_embedding.weight", "speaker_encoder.fc.weight"]
    frontend = SimpleNamespace(named_parameters=lambda: [(name, None) for name in names])
    theirs = namespace["checkpoint_weight_names"](frontend)
    frontend_weights = gpu_script("frontend_weights")
    ours = frontend_weights.checkpoint_tensors(
        {name: FakeTensor(name) for name in names}, constants["_TALKER_PREFIX"], constants["_SPEAKER_ENCODER_PREFIX"]
    )
    assert set(ours) == theirs
    assert theirs == {"talker.text_projection.linear_fc1.weight", "talker.model.text_embedding.weight"} | {
        "speaker_encoder.fc.weight"
    }


def test_frontend_weights_refuses_a_directory_without_a_model_config_or_with_a_shard_index(tmp_path: Path) -> None:
    run = subprocess.run(
        [sys.executable, str(GPU / "frontend_weights.py"), str(tmp_path)], capture_output=True, text=True, cwd=ROOT
    )
    assert run.returncode == 1 and "no config.json in" in run.stderr
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "model.safetensors.index.json").write_text('{"weight_map": {}}')
    run = subprocess.run(
        [sys.executable, str(GPU / "frontend_weights.py"), str(tmp_path)], capture_output=True, text=True, cwd=ROOT
    )
    assert run.returncode == 1 and "has a safetensors index" in run.stderr
    assert not (tmp_path / "prompt-frontend.safetensors").exists()


@contextlib.contextmanager
def dummy_server_started(tmp_path: Path, model: Path, **settings: str | None) -> Iterator[None]:
    """`start-server.sh` on the stand-in python with a weight-less model directory at `model`; `settings` on top of the
    environment (None: unset), the server stopped afterwards."""
    port = free_port()
    env = {**os.environ, "PYTHON": str(harness_python(tmp_path)), "PORT": str(port), "LOG": str(tmp_path / "log")}
    env["SPEECH_OMNI__MODEL"] = str(model)
    env.pop("SPEECH_OMNI__STAGE_OVERRIDES", None)
    for name, value in settings.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    subprocess.run([str(GPU / "start-server.sh")], env=env, capture_output=True, text=True, check=True, cwd=ROOT)
    try:
        yield
    finally:
        subprocess.run([str(GPU / "stop-server.sh"), str(port)], capture_output=True, text=True)


@pytest.mark.parametrize("codec_weights", ["real", "dummy"])
def test_start_server_with_real_codec_weights_loads_code2wav_from_them(tmp_path: Path, codec_weights: str) -> None:
    """`start-server.sh` with DUMMY_VARIANT and CODEC_WEIGHTS=real writes the codec weights into the model directory
    and gives code2wav load_format auto; without it, code2wav stays on random weights like the talker."""
    model = tmp_path / "model"
    with dummy_server_started(tmp_path, model, DUMMY_VARIANT="custom_voice", CODEC_WEIGHTS=codec_weights):
        for _ in range(100):
            if (tmp_path / "argv").exists():
                break
            time.sleep(0.05)
        assert (model / "speech_tokenizer/config.json").is_file()  # the model directory, written for real
        if codec_weights == "real":
            assert (tmp_path / "codec_argv").read_text().split("\n")[:-1] == ["deploy/gpu/codec_weights.py", str(model)]
            assert json.loads((tmp_path / "stage_overrides").read_text()) == {"1": {"load_format": "auto"}}
        else:
            assert not (tmp_path / "codec_argv").exists()
            assert (tmp_path / "stage_overrides").read_text() == ""


@pytest.mark.parametrize(
    ("settings", "directory", "tag"), [({}, "model", "0b6"), ({"MODEL_SIZE": "1.7B"}, "model-1.7B", "1b7")]
)
def test_side_by_side_serves_the_model_size_asked_for(
    tmp_path: Path, settings: dict[str, str], directory: str, tag: str
) -> None:
    """MODEL_SIZE picks the weight-less checkpoint's shape, in a directory of its own so that an earlier run's other
    size is never reused; without it, the 0.6B directory as before."""
    port = free_port()
    with harness_started(
        tmp_path, {"TARGETS": "alone", "ALONE_PORT": str(port), **settings}, model_written=False
    ) as argv:
        model = tmp_path / "work" / directory
        assert argv[argv.index("--model") + 1] == str(model)
        config = json.loads((model / "config.json").read_text())
        assert (config["tts_model_size"], config["tts_model_type"]) == (tag, "custom_voice")


@pytest.mark.parametrize("size", ["", "1.7B"])
def test_start_server_writes_the_dummy_size_asked_for(tmp_path: Path, size: str) -> None:
    """`start-server.sh` with DUMMY_VARIANT writes the 0.6B shape unless DUMMY_SIZE names another."""
    model = tmp_path / "model"
    with dummy_server_started(tmp_path, model, DUMMY_VARIANT="base", DUMMY_SIZE=size or None):
        config = json.loads((model / "config.json").read_text())
        assert (config["tts_model_size"], config["tts_model_type"]) == ("1b7" if size else "0b6", "base")
        assert config["talker_config"]["hidden_size"] == (2048 if size else 1024)


@pytest.mark.parametrize("size", ["", "1.7B"])
def test_start_vllm_omni_writes_the_dummy_size_asked_for(tmp_path: Path, size: str) -> None:
    """`start-vllm-omni.sh` with DUMMY_VARIANT serves a weight-less directory of DUMMY_SIZE's shape (0.6B unless
    named) with load_format dummy."""
    port = free_port()
    model = tmp_path / "model"
    env = {
        **os.environ,
        "PYTHON": str(harness_python(tmp_path)),
        "PORT": str(port),
        "LOG": str(tmp_path / "log"),
        "DUMMY_VARIANT": "custom_voice",
        "MODEL": str(model),
        **({"DUMMY_SIZE": size} if size else {}),
    }
    env.pop("LOAD_FORMAT", None)
    if not size:
        env.pop("DUMMY_SIZE", None)
    subprocess.run([str(GPU / "start-vllm-omni.sh")], env=env, capture_output=True, text=True, check=True)
    pidfile = Path(f"/tmp/vllm-omni-{port}.pid")
    try:
        for _ in range(100):
            if (tmp_path / "argv").exists():
                break
            time.sleep(0.05)
        argv = (tmp_path / "argv").read_text().split("\n")[:-1]
        assert argv[argv.index("serve") + 1] == str(model) and argv[argv.index("--load-format") + 1] == "dummy"
        config = json.loads((model / "config.json").read_text())
        assert config["tts_model_size"] == ("1b7" if size else "0b6")
        assert len(config["talker_config"]["spk_id"]) == 9
    finally:
        subprocess.run(
            [str(GPU / "stop-server.sh"), str(port)], env={**env, "PIDFILE": str(pidfile)}, capture_output=True
        )


def test_start_server_serves_what_the_old_flat_names_give(tmp_path: Path) -> None:
    """The server still reads SPEECH_MODEL, SPEECH_DEPLOY_CONFIG and SPEECH_STAGE_OVERRIDES (deprecated), and a
    grouped name wins over its flat one: the defaults `start-server.sh` sets under the grouped names must not
    override what a caller (an older run's recorded script) gave under the flat ones."""
    model = tmp_path / "old-name-model"
    overrides = '{"1": {"load_format": "auto", "max_num_seqs": 4}}'
    settings = {
        "SPEECH_OMNI__MODEL": None,
        "SPEECH_MODEL": str(model),
        "SPEECH_DEPLOY_CONFIG": "deploy/vllm-omni/voice-clone.yaml",
        "SPEECH_STAGE_OVERRIDES": overrides,
    }
    with dummy_server_started(tmp_path, model, DUMMY_VARIANT="base", CODEC_WEIGHTS="real", **settings):
        for _ in range(100):
            if (tmp_path / "argv").exists():
                break
            time.sleep(0.05)
        assert (model / "speech_tokenizer/config.json").is_file()  # the model directory went where SPEECH_MODEL says
        assert (tmp_path / "argv").read_text().split("\n")[0] == "deploy/vllm-omni/voice-clone.yaml"
        assert json.loads((tmp_path / "stage_overrides").read_text()) == json.loads(overrides)


def test_level_metrics_reads_what_a_level_added_to_each_servers_histograms(tmp_path: Path) -> None:
    """The loop lag and TTFA phases of one level: the observations between the two /metrics the sweep kept, as
    Prometheus' histogram_quantile reads buckets; what came before the level is left out."""
    module = gpu_script("level_metrics")
    registry = CollectorRegistry()
    lag = Histogram("speech_event_loop_lag_seconds", "", buckets=LOOP_LAG_BUCKETS, registry=registry)
    phase = Histogram("speech_ttfa_phase_seconds", "", ["phase"], buckets=TTFA_PHASE_BUCKETS, registry=registry)
    for _ in range(100):  # before the level: a loop that kept up, and slow engines
        lag.observe(0.0003)
        phase.labels("engine").observe(2.5)
    (tmp_path / "metrics-service-before.txt").write_bytes(generate_latest(registry))
    for _ in range(90):
        lag.observe(0.0008)
        phase.labels("engine").observe(0.045)
    for _ in range(10):
        lag.observe(0.2)
        phase.labels("engine").observe(0.055)
    (tmp_path / "metrics-service-after.txt").write_bytes(generate_latest(registry))
    (tmp_path / "metrics-orphan-before.txt").write_text("")  # a target with no snapshot after: left out

    rows = module.report(tmp_path)
    (row,) = [r for r in rows if r.startswith("| service ")]
    cells = [c.strip() for c in row.strip("|").split("|")]
    p50, p95, p99 = (float(v) for v in cells[1].split(" / "))
    assert 0.5 < p50 <= 1.0  # in the (0.5, 1] ms bucket: the 100 samples before the level are not in it
    assert p95 == pytest.approx(175.0)  # rank 95 of 100: halfway through the (100, 250] ms bucket's 10
    assert p99 == pytest.approx(235.0)
    assert (cells[2], cells[3]) == ("250.0", "100")
    engine_p95 = float(cells[4].split(", ")[3])
    assert 50.0 < engine_p95 <= 60.0  # the level's 45-55 ms, not the 2.5 s before it
    assert not [r for r in rows if r.startswith("| orphan ")]
    assert not [r for r in rows if "one load-tool call drove" in r]  # no results.json: nothing said of what it drove
    # a call that drove two targets at one level: each server's figures also hold its idle turns, and the table says so
    runs = [{"target": 0, "concurrency": 8, "rate": None}, {"target": 1, "concurrency": 8, "rate": None}]
    (tmp_path / "results.json").write_text(json.dumps({"runs": runs}))
    assert "(one load-tool call drove 2 targets at 1 levels" in "\n".join(module.report(tmp_path))


def test_level_metrics_gives_each_vllm_stages_mean_wait_and_first_output_over_the_level(tmp_path: Path) -> None:
    """vLLM's per-stage request histograms (vllm-omni's statistics, labelled by stage, buckets from 0.3 s): each stage's
    mean per request over the level from the sums and counts the level added, so that code2wav's wait for its first
    window (queued -> scheduled) and its first decode (scheduled -> first output) read in milliseconds; a server
    without them has no such table."""
    module = gpu_script("level_metrics")
    registry = CollectorRegistry()
    labels = ["model_name", "replica", "stage"]
    families = {
        name: Histogram(name, "", labels, buckets=(0.3, 0.5, 1.0), registry=registry)
        for name in (
            "vllm:request_queue_time_seconds",
            "vllm:request_prefill_time_seconds",
            "vllm:time_to_first_token_seconds",
        )
    }
    lag = Histogram("speech_event_loop_lag_seconds", "", buckets=LOOP_LAG_BUCKETS, registry=registry)
    lag.observe(0.001)

    def requests(stage: str, n: int, queued: float, first: float) -> None:
        for _ in range(n):
            families["vllm:request_queue_time_seconds"].labels("m", "0", stage).observe(queued)
            families["vllm:request_prefill_time_seconds"].labels("m", "0", stage).observe(first)
            families["vllm:time_to_first_token_seconds"].labels("m", "0", stage).observe(queued + first)

    requests("1", 10, 0.5, 0.5)  # before the level: slow
    (tmp_path / "metrics-service-before.txt").write_bytes(generate_latest(registry))
    requests("0", 4, 0.0001, 0.536)
    requests("1", 4, 0.039, 0.0065)
    (tmp_path / "metrics-service-after.txt").write_bytes(generate_latest(registry))
    rows = module.report(tmp_path)
    assert "| service | 0 | 4 | 0.1, 536.0, 536.1 |" in rows
    assert "| service | 1 | 4 | 39.0, 6.5, 45.5 |" in rows  # the 10 slow requests before the level left out
    alone = CollectorRegistry()  # the embedded engine's: no stages
    Histogram("speech_event_loop_lag_seconds", "", buckets=LOOP_LAG_BUCKETS, registry=alone).observe(0.001)
    for moment in ("before", "after"):
        (tmp_path / f"metrics-service-{moment}.txt").write_bytes(generate_latest(alone))
    rows = module.report(tmp_path)
    assert [row for row in rows if row.startswith("| service |")] and not [row for row in rows if "| stage |" in row]


def test_ttfa_phases_splits_each_bench_run_into_its_first_wave_and_the_rest() -> None:
    """vllm bench's requests (x-request-id bench-<run>-<n>) in a service's log: a run of 16 prompts at c=1 (16 is
    sweep-bench's least) and one of 24 at c=8, each wave's phases apart; other requests and lines are left out."""
    module = gpu_script("ttfa_phases")

    def line(request_id: str, engine_s: float) -> str:
        phases = {"validate": 0.001, "queue": 0.0, "prepare": 0.001, "engine": engine_s, "encode_write": 0.0}
        record = {"message": "speech request", "request_id": request_id, "ttfa_s": 0.002 + engine_s}
        return json.dumps({**record, "ttfa_phases_s": phases})

    lines = [line(f"bench-aa-{n}", 0.05) for n in range(16)]
    lines += [line(f"bench-bb-{n}", 0.2 if n < 8 else 0.1) for n in reversed(range(24))]  # any order in the log
    lines += [line("3f2a", 9.0), "not json", '{"message": "speech request", "request_id": "bench-cc-1"}']
    report = module.report(lines, [1, 8])
    assert report[0].startswith("c=1 first wave (1): ttfa 52.0/52.0 | validate 1.0/1.0 queue 0.0/0.0")
    assert report[1].startswith("c=1 later waves (15): ttfa 52.0/52.0")
    assert report[2].startswith("c=8 first wave (8): ttfa 202.0/202.0") and "engine 200.0/200.0" in report[2]
    assert report[3].startswith("c=8 later waves (16): ttfa 102.0/102.0")
    assert len(report) == 4


def test_ttfa_phases_shows_when_each_burst_got_its_first_chunks_in_clusters() -> None:
    """--waves: requests arriving within 50 ms of one another make a burst (any client's request ids); each request
    arrived e2e_s before its log line's timestamp; first chunks less than 5 ms apart are one cluster, count@ms after
    the burst's first arrival; a burst smaller than asked, a request without a first chunk and other lines are left
    out."""
    module = gpu_script("ttfa_phases")

    def line(arrived_ms: float, first_chunk_ms: float, e2e_ms: float = 2000.0) -> str:
        ended = datetime(2026, 11, 28, 12, 0, 0, tzinfo=UTC) + timedelta(milliseconds=arrived_ms + e2e_ms)
        record = {"ts": ended.isoformat().replace("+00:00", "Z"), "message": "speech request", "e2e_s": e2e_ms / 1000}
        return json.dumps({**record, "timeline_s": {"first_chunk": first_chunk_ms / 1000}})

    burst = [line(0, 60)] + [line(2 + n, 240 - (2 + n) + (n % 2)) for n in range(8)]  # 1 alone, then 8 at 240-241
    burst += [line(10 + n, 470 - (10 + n) + 12 * (n // 8)) for n in range(16)]  # 8 at 470, 8 at 482: two clusters
    later = [line(5000 + 30 * n, 100) for n in range(3)]  # 3 requests 30 ms apart: a burst of 3
    lonely = [line(9000, 50)]
    noise = ["not json", json.dumps({"message": "speech request", "ts": "2026-11-28T12:00:00Z", "e2e_s": 1.0})]
    report = module.waves(list(reversed(burst)) + later + noise + lonely, 3)  # the log's order is the order they ended
    assert report[0] == "25 requests, arrived over 25 ms; first chunks (count@ms): 1@60 8@240-241 8@470 8@482"
    assert report[1] == "3 requests, arrived over 60 ms; first chunks (count@ms): 1@100 1@130 1@160"
    assert len(report) == 2


def test_sglang_timeline_splits_each_requests_first_audio_into_the_pipelines_phases(tmp_path: Path) -> None:
    """sglang-omni's request events (one JSON object a line, in files per stage and process, plain or gzipped): each
    phase is the span between two of a request's events, the earliest of each name whatever the order of the lines;
    p50/p95 (the nearer value, halves upward) over the requests that have both; a request missing an event is left
    out of that phase only; lines that are not events are skipped. --requests: one row per request in arrival order,
    a new burst where an arrival comes 300 ms or more after the one before (not after the burst's first), requests
    arriving at the same instant both shown."""
    module = gpu_script("sglang_timeline")
    path = [
        ("coordinator", "request_admission"),
        ("preprocessing", "stage_complete"),
        ("tts_engine", "scheduler_request_build_start"),
        ("tts_engine", "model_path_start"),
        ("tts_engine", "scheduler_prefill_end"),
        ("vocoder", "qwen3_tts_vocoder_decode_enqueued"),
        ("vocoder", "qwen3_tts_vocoder_decode_dispatched"),
        ("vocoder", "qwen3_tts_vocoder_decode_launched"),
        ("vocoder", "qwen3_tts_vocoder_decode_resolved"),
        ("coordinator", "coordinator_stream_received"),
    ]

    def events(request: str, arrived_ms: float, steps_ms: list[float]) -> list[dict[str, object]]:
        at, out = arrived_ms, []
        for (stage, name), step in zip(path, [0.0, *steps_ms], strict=False):
            at += step
            out.append({"request_id": request, "stage": stage, "event_name": name, "timestamp_ns": int(at * 1e6)})
        return out

    first = events("a", 0, [100, 70, 20, 60, 5, 8, 60, 6, 4])
    second = events("b", 2, [200, 10, 20, 40, 5, 8, 25, 5, 4])
    later_chunk = {**second[-1], "timestamp_ns": second[-1]["timestamp_ns"] + 10**9}
    second.insert(0, later_chunk)  # read first, happened last: not b's first audio
    # a burst goes on while each arrival is less than 300 ms after the one before: d (299 ms after b) and e (299 ms
    # after d, 600 ms after the burst's first); c comes 301 ms after e: a new burst, and f at the same instant as c
    rest = events("d", 301, [50]) + events("e", 600, [50]) + events("c", 901, [50]) + events("f", 901, [60])
    everything = first + second + rest
    coordinator = [e for e in everything if e["stage"] == "coordinator"]
    pipeline = [e for e in everything if e["stage"] != "coordinator"]
    (tmp_path / "events_coordinator_1.jsonl").write_text("\n".join(map(json.dumps, coordinator)) + "\nnot json\n")
    with gzip.open(tmp_path / "events_preprocessing_2.jsonl.gz", "wt") as out:
        out.write("\n".join(map(json.dumps, pipeline)) + '\n{"stage": "vocoder"}\n')
    requests = module.request_events(module.read_events(module.event_files([tmp_path])))
    table = {phase: (n, p50, p95) for phase, n, p50, p95 in module.phase_table(requests)}
    assert table["preprocessing"] == (6, 60.0, 200.0)  # 50 50 50 60 100 200; d, e, c, f count here
    assert table["talker inbox"] == (2, 70.0, 70.0)  # and not here; of 10 and 70 the upper is the median
    assert table["to launch"] == (2, 60.0, 60.0) and table["first decode"] == (2, 6.0, 6.0)
    assert table["first audio"] == (2, 333.0, 333.0)  # b's: 317, its later chunk left out
    assert len(table) == len(module.PHASES)
    rows = list(module.request_rows(requests))
    assert [row for row in rows if not row.strip()[0].isdigit()] == [rows[0], "burst", "burst"] and len(rows) == 9
    assert rows[0].startswith("arrival") and rows[1] == rows[6] == "burst"
    assert rows[2].split() == ["0.0", "100.0", "170.0", "190.0", "250.0", "255.0", "263.0", "323.0", "329.0", "333.0"]
    assert rows[3].split()[:3] == ["2.0", "200.0", "210.0"]
    assert rows[4].split() == ["301.0", "50.0"] + ["-"] * 8 and rows[5].split()[:2] == ["600.0", "50.0"]
    assert sorted(row.split()[1] for row in rows[7:]) == ["50.0", "60.0"]
    assert all(row.split()[0] == "0.0" for row in rows[7:])


def test_sglang_timeline_warns_of_the_events_of_more_than_one_server(tmp_path: Path) -> None:
    module = gpu_script("sglang_timeline")
    for pid in (11, 12):
        event = {"request_id": f"r{pid}", "stage": "coordinator", "event_name": "request_admission", "pid": pid}
        (tmp_path / f"events_coordinator_{pid}.jsonl").write_text(json.dumps({**event, "timestamp_ns": pid}) + "\n")
    assert module.server_pids(module.read_events(module.event_files([tmp_path]))) == {11, 12}
    done = subprocess.run(
        [sys.executable, str(GPU / "sglang_timeline.py"), str(tmp_path)], capture_output=True, text=True, check=True
    )
    assert "warning: the events of 2 servers (coordinator pids [11, 12])" in done.stdout
    one = subprocess.run(
        [sys.executable, str(GPU / "sglang_timeline.py"), str(tmp_path / "events_coordinator_11.jsonl")],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "warning" not in one.stdout and "1 requests" in one.stdout


def test_every_sweep_of_the_default_targets_is_one_the_load_tool_accepts(tmp_path: Path) -> None:
    """The default targets (the service, `vllm serve` and AsyncOmni alone behind its engine+ control endpoint) with
    the default unique texts: the arguments each sweep hands speech-loadtest pass its own parser."""
    from loadtest.cli import parse_args

    env = sweep_env(tmp_path, sweep_python(tmp_path), RATES="14", CONCURRENCY="8")
    env.pop("TARGETS", None)
    for sweep in ("sweep-closed", "sweep-open"):
        done = subprocess.run(
            [str(GPU / "side-by-side.sh"), sweep], env=env, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stdout + done.stderr
        argv = (tmp_path / "loadtest_argv").read_text().split("\n")[:-1]
        assert argv[:2] == ["-m", "loadtest.cli"] and "--unique-texts" in argv
        assert any(a.startswith("engine+") for a in argv)  # AsyncOmni alone is among them
        args = parse_args(argv[2:])  # exits (SystemExit) where the load tool would refuse the sweep
        assert args.unique_texts and (args.rate == "14") == (sweep == "sweep-open")


def test_trace_summary_tells_gpu_busy_and_idle_time_kernels_launches_and_steps_per_frame(tmp_path: Path) -> None:
    """The profiler's traces reduced to what they say (so that they need not leave the GPU host): the GPU's window,
    its busy time with overlapping streams counted once, kernels by total time and how many ran in graphs, the host's
    launch calls and vLLM's steps, per frame; a gzip cut short read from the .json beside it."""
    summary = gpu_script("trace_summary")
    events = [
        {"ph": "X", "cat": "kernel", "name": "talker_gemm", "ts": 0, "dur": 300, "args": {"graph id": 7}},
        {"ph": "X", "cat": "kernel", "name": "talker_gemm", "ts": 400, "dur": 300, "args": {"graph id": 7}},
        {"ph": "X", "cat": "kernel", "name": "codec|conv", "ts": 200, "dur": 200, "args": {"stream": 9, "graph id": 0}},
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoH", "ts": 900, "dur": 100},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch", "ts": 0, "dur": 12},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 190, "dur": 5},
        {"ph": "X", "cat": "cpu_op", "name": "execute_context_2(2)_generation_0(0)", "ts": 0, "dur": 450},
        {"ph": "X", "cat": "cpu_op", "name": "execute_context_2(2)_generation_0(0)", "ts": 450, "dur": 450},
        {"ph": "X", "cat": "gpu_user_annotation", "name": "execute_context_2(2)_generation_0(0)", "ts": 460, "dur": 9},
        {"ph": "X", "cat": "user_annotation", "name": "vocoder.decode", "ts": 200, "dur": 220},
        {"ph": "X", "cat": "gpu_user_annotation", "name": "vocoder.decode", "ts": 210, "dur": 190},  # its GPU copy
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernelExC", "ts": 600, "dur": 4},
        {"ph": "i", "cat": "kernel", "name": "an instant, not a span", "ts": 5},
    ]
    stage = tmp_path / "profiles/vllm-omni-b/20261128-070000_stage0_rank0_1"
    stage.mkdir(parents=True)
    (stage / "trace_rank0.json.gz").write_bytes(gzip.compress(json.dumps({"traceEvents": events}).encode()))
    cut = tmp_path / "profiles/sglang/c1"
    cut.mkdir(parents=True)
    (cut / "trace_pid1_rank0.trace.json.gz").write_bytes(gzip.compress(json.dumps(events).encode())[:40])
    (cut / "trace_pid1_rank0.trace.json").write_text(json.dumps(events))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert summary.main([str(tmp_path / "profiles"), "--frames", "2"]) == 0
    text = out.getvalue()
    assert text.count("## `") == 2 and "## `sglang/c1/trace_pid1_rank0.trace.json`" in text
    # kernels 0-700 (300 + 300 and 200 overlapping), the copy 900-1000: 800 µs busy in a 1000 µs window
    assert "GPU window 1.00 ms: busy 0.80 ms (80%), idle 0.20 ms; 3 kernels, 2 of them in CUDA graphs" in text
    assert "| `talker_gemm` | 2 | 0.60 | 300.0 | 0.300 |" in text
    assert "| `codec\\|conv` | 1 | 0.20 | 200.0 | 0.100 |" in text
    assert "| `cudaGraphLaunch` | 1 | 0.01 | 12.0 | 0.006 |" in text
    assert "| `cudaLaunchKernelExC` | 1 | 0.00 | 4.0 | 0.002 |" in text
    assert "| `execute_context_* (one engine step)` | 2 | 0.90 | 450.0 | 0.450 |" in text
    assert "| `vocoder.decode` | 1 | 0.22 | 220.0 | 0.110 |" in text
    assert "an instant" not in text
    assert summary.union_us([(0, 10), (5, 20), (30, 40), (32, 35)]) == 30


def summarized(summary: ModuleType, folder: Path, traces: dict[str, dict[str, object]]) -> str:
    """trace_summary's report of `traces` (a folder name each, under `folder`)."""
    for name, trace in traces.items():
        (folder / name).mkdir(parents=True)
        (folder / name / "trace_rank0.json").write_text(json.dumps(trace))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert summary.main([str(folder)]) == 0
    return out.getvalue()


def trace_op(name: str, start: int, end: int, category: str = "cpu_op", thread: int = 1) -> dict[str, object]:
    """A host operation of a profiler trace, µs on its own clock."""
    return {"ph": "X", "cat": category, "name": name, "ts": start, "dur": end - start, "tid": thread}


def section_rows(report: str, title: str) -> list[str]:
    """The table rows of the `c1/` traces under the report's section `title`."""
    text = report.split(f"## {title}")[1].split("\n## ")[0]
    return [line for line in text.splitlines() if line.startswith("| `c1/")]


def test_trace_summary_lays_the_first_gpu_bursts_of_each_trace_on_one_clock(tmp_path: Path) -> None:
    """Each trace's events are µs after its own base time: the stages' first bursts (kernels less than 0.3 ms apart
    merged) on the host's clock, in ms after the earliest kernel of all: the talker's prefill and first frame against
    code2wav's first window."""
    summary = gpu_script("trace_summary")

    def kernels(*spans: tuple[int, int]) -> list[dict[str, object]]:
        return [{"ph": "X", "cat": "kernel", "name": "k", "ts": start, "dur": end - start} for start, end in spans]

    base = 1_764_400_000_000_000_000
    talker = {"baseTimeNanoseconds": base, "traceEvents": kernels((0, 10_000), (10_500, 15_000), (15_100, 20_000))}
    code2wav = {"baseTimeNanoseconds": base + 12_000_000, "traceEvents": kernels((3_000, 5_000))}  # 12 ms later
    text = summarized(summary, tmp_path, {"c1/stage0": talker, "c1/stage1": code2wav})
    text = text.split("## The first GPU activity of each trace, on one clock")[1]
    assert "| `c1/stage0/trace_rank0.json` | 0.0–10.0, 10.5–20.0 |" in text
    assert "| `c1/stage1/trace_rank0.json` | 15.0–17.0 |" in text
    assert summary.bursts_of([(0, 1), (2, 3), (1000, 1001), (5000, 5001)], 2) == [(0, 3), (1000, 1001)]


def test_trace_summary_lists_the_longest_host_operations_inside_the_first_step_with_tokens(tmp_path: Path) -> None:
    """Where a prefill step's time goes beside its kernels: the GPU's busy time inside the trace's first step that
    scheduled tokens and where the last GPU work started inside it ended; then the step thread's host operations
    inside that step, longest first on the steps' clock, nested ones each listed; the idle step before it, the next
    step, another thread's operations, the step itself and operations shorter than HOST_OP_MIN_US left out. The
    profiler's own work (Kineto's "overhead" events, on a thread of their own) is said where it lies inside an
    operation: an allocation of 2.8 ms in an H200's prefill step was 2.4 ms of CUPTI's buffer request."""
    summary = gpu_script("trace_summary")

    talker = {
        "baseTimeNanoseconds": 1_764_400_000_000_000_000,
        "traceEvents": [
            {"ph": "X", "cat": "kernel", "name": "k", "ts": 1_000, "dur": 2_000},
            trace_op("execute_context_0(0)_generation_0(0)", 0, 400),
            trace_op("aten::copy_", 100, 300),  # in the idle step
            trace_op("execute_context_1(65)_generation_0(0)", 500, 30_500),
            trace_op("execute_model", 600, 30_000, "user_annotation"),
            trace_op("aten::to", 5_000, 25_000),
            trace_op("cudaStreamSynchronize", 5_100, 24_900, "cuda_runtime"),
            trace_op("aten::add|sub", 1_000, 1_300),
            trace_op("aten::tiny", 2_000, 2_050),  # shorter than HOST_OP_MIN_US
            trace_op("omni_output_worker", 6_000, 12_000, "user_annotation", thread=2),  # another thread's
            trace_op("execute_context_0(0)_generation_1(1)", 31_000, 36_000),
            trace_op("aten::mm", 32_000, 35_000),  # in the next step
            trace_op("aten::empty", 26_000, 28_800),
            # the profiler's own, on its own thread: 2.4 ms inside aten::empty, 0.5 more elsewhere in the step
            trace_op("Activity Buffer Request", 26_100, 28_500, "overhead", thread=0),
            trace_op("Activity Buffer Request", 29_000, 29_500, "overhead", thread=0),
            trace_op("Activity Buffer Request", 33_000, 33_400, "overhead", thread=0),  # in the next step
        ],
    }
    talker["traceEvents"] += [  # type: ignore[operator]
        {"ph": "X", "cat": "kernel", "name": "k", "ts": 3_000, "dur": 1_000},  # overlaps the first kernel: once
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD", "ts": 20_000, "dur": 500},
        {"ph": "X", "cat": "kernel", "name": "k", "ts": 30_000, "dur": 1_000},  # half of it after the step
        {"ph": "X", "cat": "kernel", "name": "k", "ts": 33_000, "dur": 1_000},  # in the next step
    ]
    whole = summarized(summary, tmp_path, {"c1/stage0": talker})
    gpu = whole.split("## The GPU inside each trace's first step with tokens")[1]
    # the clock's 0 is the first kernel (1 ms after the base); busy 1-4 ms, 20-20.5, 30-30.5: 4.0 ms of 30; the last
    # GPU work started inside the step ran on past its end (the host had gone on to the next step)
    assert (
        "| `c1/stage0/trace_rank0.json` | -0.5–29.5: GPU busy 4.0 ms of its 30.0; the last GPU work started inside "
        "it ended at 30.0; the profiler's own work 2.9 ms of it |"
    ) in gpu
    rows = section_rows(whole, "The longest host operations inside each trace's first step with tokens")
    assert rows == [
        "| `c1/stage0/trace_rank0.json` | `execute_model` | user_annotation | -0.4–29.0 | 29.40 | 2.90 | – |",
        "| `c1/stage0/trace_rank0.json` | `aten::to` | cpu_op | 4.0–24.0 | 20.00 | – | – |",
        "| `c1/stage0/trace_rank0.json` | `cudaStreamSynchronize` | cuda_runtime | 4.1–23.9 | 19.80 | – | – |",
        "| `c1/stage0/trace_rank0.json` | `aten::empty` | cpu_op | 25.0–27.8 | 2.80 | 2.40 | – |",
        "| `c1/stage0/trace_rank0.json` | `aten::add\\|sub` | cpu_op | 0.0–0.3 | 0.30 | – | – |",
    ]
    # recorded with Python stacks: each operation says the innermost Python function around it, and the functions
    # themselves (which would fill the list with the wrappers around everything) are not listed
    talker["traceEvents"] += [  # type: ignore[operator]
        trace_op("gpu_model_runner.py(100): execute_model", 550, 30_100, "python_function"),
        trace_op("input_batch.py(50): make_prompt_embeds", 4_900, 25_100, "python_function"),
        trace_op("gpu_model_runner.py(900): sample", 34_000, 35_500, "python_function"),  # the next step's
        # PyTorch's frame for the call into C: innermost, but it names the operation again
        trace_op("<built-in method to of Tensor object at 0x7f>", 4_990, 25_010, "python_function"),
    ]
    rows = section_rows(
        summarized(summary, tmp_path / "stacks", {"c1/stage0": talker}),
        "The longest host operations inside each trace's first step with tokens",
    )
    assert [row.rsplit(" | ", 3)[-3:] for row in rows] == [
        ["29.40", "2.90", "`gpu_model_runner.py(100): execute_model` |"],
        ["20.00", "–", "`input_batch.py(50): make_prompt_embeds` |"],
        ["19.80", "–", "`input_batch.py(50): make_prompt_embeds` |"],
        ["2.80", "2.40", "`gpu_model_runner.py(100): execute_model` |"],
        ["0.30", "–", "`gpu_model_runner.py(100): execute_model` |"],
    ]


def test_trace_summary_lists_what_the_other_threads_did_from_the_first_step_with_tokens_on(tmp_path: Path) -> None:
    """How the first frame leaves the talker: every thread's but the steps' own outermost operations from the first
    step with tokens for OTHER_WINDOW_US, and the GPU's copies, in time order on the bursts' clock, each thread by its
    name where the trace gives one; nested operations, short ones, those before the step or past the window, and the
    steps' own thread left out."""
    summary = gpu_script("trace_summary")

    events: list[dict[str, object]] = [
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 2, "args": {"name": "omni-native-output-0"}},
        {"ph": "X", "cat": "kernel", "name": "k", "ts": 1_000, "dur": 2_000},
        trace_op("aten::before_the_step", 100, 400, thread=2),
        trace_op("execute_context_1(65)_generation_0(0)", 500, 30_500, thread=1),
        trace_op("aten::on_the_steps_thread", 6_000, 7_000, thread=1),
        trace_op("aten::to", 31_000, 39_000, thread=2),
        trace_op("cudaStreamSynchronize", 31_100, 38_900, "cuda_runtime", thread=2),  # inside aten::to: not again
        trace_op("aten::copy_", 40_000, 40_500, thread=3),
        trace_op("aten::short", 41_000, 41_010, thread=3),  # shorter than OTHER_OP_MIN_US
        trace_op("aten::past_the_window", 61_000, 62_000, thread=2),  # 60.5 ms after the step's start
        # a trace with Python stacks: the frames around thread 2's work are not its outermost operations
        trace_op("omni_connector_payload_transport.py(959): _save_loop", 20_000, 45_000, "python_function", thread=2),
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoH (Device -> Pinned)", "ts": 38_000, "dur": 50},
    ]
    text = summarized(summary, tmp_path, {"c1/stage0": {"traceEvents": events}})
    rows = section_rows(text, "The other threads from each trace's first step with tokens on")
    assert rows == [
        "| `c1/stage0/trace_rank0.json` | omni-native-output-0 | `aten::to` | cpu_op | 30.0–38.0 | 8.00 |",
        "| `c1/stage0/trace_rank0.json` | GPU | `Memcpy DtoH (Device -> Pinned)` | gpu_memcpy | 37.0–37.0 | 0.05 |",
        "| `c1/stage0/trace_rank0.json` | thread 3 | `aten::copy_` | cpu_op | 39.0–39.5 | 0.50 |",
    ]


def test_trace_summary_shows_the_gpus_copies_to_the_host_as_bursts_and_leaves_the_host_operations_their_rows(
    tmp_path: Path,
) -> None:
    """The steps' own copies to the GPU and within it are the steps' inputs, not a frame leaving: only copies to the
    host are listed, those less than BURST_GAP_US apart as one row with their count; and a step's many copies take
    none of the host operations' rows (each kind its own first rows, in time order together)."""
    summary = gpu_script("trace_summary")
    events: list[dict[str, object]] = [
        {"ph": "X", "cat": "kernel", "name": "k", "ts": 1_000, "dur": 2_000},
        trace_op("execute_context_1(65)_generation_0(0)", 500, 30_500, thread=1),
    ]
    for step in range(40):  # a step every ms, each with four copies to the host and two to the GPU
        at = 1_000 + 1_000 * step
        events += [
            {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoH (Device -> Pinned)", "ts": at + i * 50, "dur": 10}
            for i in range(4)
        ]
        events += [
            {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pinned -> Device)", "ts": at + 400 + i, "dur": 5}
            for i in range(2)
        ]
    events.append(trace_op("aten::copy_", 45_000, 45_500, thread=3))
    text = summarized(summary, tmp_path, {"c1/stage0": {"traceEvents": events}})
    rows = section_rows(text, "The other threads from each trace's first step with tokens on")
    copies = [row for row in rows if "| GPU |" in row]
    assert (
        copies[0]
        == "| `c1/stage0/trace_rank0.json` | GPU | `Memcpy DtoH (Device -> Pinned)` ×4 | gpu_memcpy | 0.0–0.2 | 0.16 |"
    )
    assert len(copies) == 10 and not any("HtoD" in row for row in rows)
    assert rows[-1] == "| `c1/stage0/trace_rank0.json` | thread 3 | `aten::copy_` | cpu_op | 44.0–44.5 | 0.50 |"


def test_trace_summary_says_where_the_later_steps_host_time_goes(tmp_path: Path) -> None:
    """The steps with tokens after the first, on their own thread, a step on average: the CUDA runtime's calls by
    name, PyTorch's outermost operations by name (one inside another not counted again), and the rest of the step
    (Python between them); the first step, idle steps, other threads and what lies outside a step left out. Last,
    the profiler's own work inside the steps (on a thread of its own), a step on average."""
    summary = gpu_script("trace_summary")

    events: list[dict[str, object]] = [
        {"ph": "X", "cat": "kernel", "name": "k", "ts": 0, "dur": 100},
        trace_op("execute_context_1(65)_generation_0(0)", 0, 10_000),  # the first step: not a later one
        trace_op("aten::big_prefill_op", 1_000, 9_000),
        trace_op("execute_context_0(0)_generation_0(0)", 10_000, 10_500),  # idle
        trace_op("aten::in_an_idle_step", 10_100, 10_400),
    ]
    for i, start in enumerate((20_000, 30_000)):  # two later steps of 4 ms each
        events += [
            trace_op("execute_context_0(0)_generation_1(1)", start, start + 4_000),
            trace_op("aten::copy_", start + 100, start + 600),  # 0.5 ms, with a runtime call inside
            trace_op("cudaMemcpyAsync", start + 200, start + 500, "cuda_runtime"),
            trace_op("aten::_to_copy", start + 150, start + 550),  # inside aten::copy_: not counted again
            trace_op("cudaGraphLaunch", start + 1_000, start + 2_000, "cuda_runtime"),  # 1 ms, outside any operation
            trace_op("aten::index", start + 2_500, start + 2_500 + 200 * (i + 1)),  # 0.2 and 0.4 ms: 0.3 on average
            trace_op("omni_output_worker", start, start + 4_000, "cpu_op", thread=2),  # another thread
            trace_op("Activity Buffer Request", start + 3_000, start + 3_000 + 600 * i, "overhead", thread=0),
        ]
    events.append(trace_op("aten::between_steps", 25_000, 26_000))
    text = summarized(summary, tmp_path, {"c1/stage0": {"traceEvents": events}})
    rows = section_rows(text, "Where the later steps' host time goes")
    # covered: copy_ 0.5 + graph launch 1.0 + index 0.3 = 1.8 of 4.0 ms; runtime 0.3 + 1.0; operations 0.5 + 0.3
    assert rows == [
        "| `c1/stage0/trace_rank0.json` | 2 | 4.00 | 1.30: `cudaGraphLaunch` 1.00, `cudaMemcpyAsync` 0.30 "
        "| 0.80: `aten::copy_` 0.50, `aten::index` 0.30 | 2.20 | 0.30 |"
    ]


def test_trace_summary_lays_each_stages_first_steps_with_tokens_on_the_same_clock(tmp_path: Path) -> None:
    """vLLM's steps (host spans named by their requests and tokens) on the bursts' clock: the talker's prefill and
    frames against code2wav's first step with a window, its steps with nothing scheduled counted before it (where it
    waited), a step's copy on the GPU's timeline not a step, at most STEPS_SHOWN a trace."""
    summary = gpu_script("trace_summary")

    def step(name: str, start: int, end: int, category: str = "cpu_op") -> dict[str, object]:
        return {"ph": "X", "cat": category, "name": name, "ts": start, "dur": end - start}

    base = 1_764_400_000_000_000_000
    talker = {
        "baseTimeNanoseconds": base,
        "traceEvents": [
            {"ph": "X", "cat": "kernel", "name": "k", "ts": 1_000, "dur": 2_000},
            step("execute_context_1(65)_generation_0(0)", 500, 3_500),
            step("execute_context_1(65)_generation_0(0)", 600, 3_400, "gpu_user_annotation"),
            *(step("execute_context_0(0)_generation_1(1)", 4_000 + 5_000 * i, 8_000 + 5_000 * i) for i in range(12)),
        ],
    }
    code2wav = {
        "baseTimeNanoseconds": base + 20_000_000,  # 20 ms later
        "traceEvents": [
            {"ph": "X", "cat": "kernel", "name": "k", "ts": 30_000, "dur": 1_000},
            step("execute_context_0(0)_generation_0(0)", 1_000, 1_100),
            step("execute_context_0(0)_generation_0(0)", 2_000, 2_100),
            step("execute_context_1(1)_generation_0(0)", 29_000, 31_500),
            step("execute_context_0(0)_generation_0(0)", 32_000, 32_100),
            step("execute_context_0(0)_generation_1(2)", 40_000, 41_000),
        ],
    }
    whole = summarized(summary, tmp_path, {"c1/stage0": talker, "c1/stage1": code2wav})
    steps = section_rows(whole, "The first engine steps of each trace, on one clock")
    rows = {line.split(" | ")[0]: line for line in steps}
    talker_row, code2wav_row = rows["| `c1/stage0/trace_rank0.json`"], rows["| `c1/stage1/trace_rank0.json`"]
    # the earliest kernel (the talker's, 1 ms after its base) is 0: the prefill step began half a millisecond before
    assert talker_row.startswith("| `c1/stage0/trace_rank0.json` | `execute_context_1(65)_generation_0(0)` -0.5–2.5; ")
    assert "`execute_context_0(0)_generation_1(1)` 3.0–7.0" in talker_row
    assert talker_row.count("`execute_context_") == summary.STEPS_SHOWN  # the 10 first of 13
    assert code2wav_row == (
        "| `c1/stage1/trace_rank0.json` | +2 idle, `execute_context_1(1)_generation_0(0)` 48.0–50.5; "
        "+1 idle, `execute_context_0(0)_generation_1(2)` 59.0–60.0 |"
    )
    # a step's GPU copy is not a step of its own
    assert whole.count("| `execute_context_* (one engine step)` | 13 |") == 1


def test_pyspy_summary_says_how_much_of_the_window_each_process_held_its_gil_and_in_whose_code(tmp_path: Path) -> None:
    """py-spy's raw stacks (outermost frame first, a count last) per process: its samples over rate x seconds, by
    thread, by the library of the innermost frame, by function on its own and on the stack (a thread's start and what
    is on nearly every stack left out); the largest process first, each named from the thread table; gzip read."""
    summary = gpu_script("pyspy_summary")
    boot = "Thread._bootstrap (threading.py:1030);Thread.run (threading.py:1010)"
    talker = "vllm_omni/model_executor/models/qwen3_tts/qwen3_tts_talker.py"
    stage0 = [
        f"thread (7): MainThread;{boot};run_busy_loop (vllm/v1/engine/core.py:9);"
        f"execute_model (vllm_omni/worker_v2/omni_model_runner.py:398);preprocess_decode_batch ({talker}:1101) 600",
        f"thread (7): MainThread;{boot};run_busy_loop (vllm/v1/engine/core.py:9);"
        f"execute_model (vllm_omni/worker_v2/omni_model_runner.py:398);preprocess_decode_batch ({talker}:1140) 200",
        f"thread (7): MainThread;{boot};run_busy_loop (vllm/v1/engine/core.py:9);copy_ (torch/_tensor.py:5) 200",
        f"thread (8): omni-native-materialize;{boot};build (vllm_omni/worker_v2/omni_ar_model_runner.py:761) 200",
        "not a stack line",
    ]
    folder = tmp_path / "pyspy"
    folder.mkdir()
    (folder / "101.txt.gz").write_bytes(gzip.compress("\n".join(stage0).encode()))
    (folder / "101.log").write_text("py-spy> Wrote raw flamegraph data to '101.txt'. Samples: 1200 Errors: 100\n")
    spawned = "<module> (<string>:1);spawn_main (multiprocessing/spawn.py:122);_main (multiprocessing/spawn.py:135)"
    (folder / "202.txt").write_text(  # no threads named; a spawned process's start on half its stacks
        f"{spawned};main (app/cli.py:1);handle (app/api/speech.py:40) 20\n"
        f"{boot};work (app/engines/omni/engine.py:9) 20\n"
    )
    names = "# pid 101: VLLM::StageEngineCoreProc_stage0\n1\tx\t1\t1\t1\n# pid 202: python3 -m app.cli\n"
    (tmp_path / "cpu.txt").write_text(names)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert summary.main([str(folder), "--rate", "200", "--seconds", "8", "--names", str(tmp_path / "cpu.txt")]) == 0
    text = out.getvalue()
    first, second = text.index("## pid 101: `VLLM::StageEngineCoreProc_stage0`"), text.index("## pid 202: `python3")
    assert first < second  # the process with more samples first
    stage0_text = text[first:second]
    # 100 samples py-spy failed to read (its log) are left out of the window
    assert "1200 samples, 80% of the window's 1500 (100 py-spy failed to read, left out of the window)." in stage0_text
    assert "| thread (7): MainThread | 1000 | 83% |" in stage0_text
    assert "| vllm-omni | 1000 | 83% |" in stage0_text and "| torch | 200 | 17% |" in stage0_text
    # a function's lines add up; its path from the package on
    assert f"| `preprocess_decode_batch` ({talker}) | 800 | 67% |" in stage0_text
    assert "| `execute_model` (vllm_omni/worker_v2/omni_model_runner.py) | 800 | 67% |" in stage0_text
    assert "run_busy_loop" in stage0_text.split("on the stack of")[1]  # 83%: under 95%, so shown
    assert "Thread.run" not in stage0_text  # a thread's start, on every stack of its thread
    assert "40 samples, 2% of the window's 1600." in text[second:]
    assert "| the service | 40 | 100% |" in text[second:] and "| thread |" not in text[second:]
    on_stack = text[second:].split("on the stack of")[1]
    assert "| `main` (app/cli.py) | 20 | 50% |" in on_stack
    assert "spawn_main" not in on_stack and "<module>" not in on_stack  # a spawned process's start
    assert summary.main([str(tmp_path / "empty")]) == 1


def test_pyspy_summary_wall_splits_a_recording_of_subprocesses_by_process_and_counts_thread_seconds(
    tmp_path: Path,
) -> None:
    """--wall: one recording of a server and the processes it started (each stack begins with its processes, the
    recorded one first, a command line unescaped): every stack is its innermost process's, each process titled with
    its pid and command and its threads' seconds (samples over the rate), the one with the most time first; no GIL
    window."""
    summary = gpu_script("pyspy_summary")
    server = 'process 10:"python3 -m app.cli --engine omni"'
    # a spawned child as py-spy first reads it: the command line before the child renames itself, `;` and all
    spawned = "python3 -c from multiprocessing.spawn import spawn_main; spawn_main(tracker_fd=5) --multiprocessing-fork"
    talker = f'process 11:"{spawned}"'
    inspect = "inspect_model_cls (vllm/model_executor/models/registry.py:1073)"
    build = "build_vllm_config (vllm_omni/engine/stage_init_utils.py:1539)"
    lines = [
        f"{server};thread (1): MainThread;<module> (app/cli.py:1);_find_and_load (<frozen importlib._bootstrap>:1) 300",
        f"{server};thread (2): orchestrator;{build};{inspect} 380",
        f"{server};{talker};thread (3): MainThread;load_model (vllm/v1/worker/gpu_model_runner.py:9) 60",
    ]
    folder = tmp_path / "start-pyspy"
    folder.mkdir()
    (folder / "10.txt.gz").write_bytes(gzip.compress("\n".join(lines).encode()))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert summary.main([str(folder), "--rate", "20", "--wall"]) == 0
    text = out.getvalue()
    assert "a sample is 50 ms of one thread" in text and "GIL" not in text
    first = text.index("## pid 10: `python3 -m app.cli --engine omni` (34.0 s of its threads' time)")
    second = text.index(f"## pid 11: `{spawned[:100]}` (3.0 s of its threads' time)")  # commands cut at 100
    assert first < second
    assert "| thread (2): orchestrator | 380 | 56% |" in text[first:second]
    assert "| `inspect_model_cls` (vllm/model_executor/models/registry.py) | 380 | 56% |" in text[first:second]
    assert "load_model" in text[second:] and "load_model" not in text[first:second]


def test_omni_start_phases_reads_each_tracks_milestones_in_order_from_the_services_log(tmp_path: Path) -> None:
    """The server's JSON lines (milliseconds) and vLLM's (to the second, no year: the JSON lines' year), a stage
    process's under its prefix; a stage's first line may be its next milestone too; a milestone's pattern is looked
    for only after the one before it on its track (the code2wav stage's 'Model loading took' is not the talker's);
    each row's gap is since the one before on its track, a stage's first since the one before on any track."""
    module = gpu_script("omni_start_phases")

    def server(at: str, message: str) -> str:
        return f'{{"ts": "2026-11-29T10:{at}Z", "level": "info", "logger": "app", "message": "{message}"}}'

    def stage(n: int, at: str, text: str) -> str:
        return f"(StageEngineCoreProc_stage{n}_replica0 pid={5000 + n}) INFO 11-29 10:{at} [x.py:1] {text}"

    lines = [
        server("46:40.000", "Started server process [1]"),
        server("46:40.500", "omni engine starting"),
        server("46:59.000", "stage models inspected"),
        "INFO 11-29 10:47:09 [omni_engine_base.py:312] [OmniEngine] Launching Orchestrator thread with 2 stages",
        "a line without a time",
        stage(0, "48:11", "Initializing a V1 LLM engine (v0.30.0) with config: ..."),
        stage(1, "48:12", "Initializing a V1 LLM engine (v0.30.0) with config: ..."),  # parallel stage init
        stage(1, "48:20", "Model loading took 1.16 GiB memory and 8.0 seconds"),
        stage(0, "48:14", "Model loading took 1.84 GiB memory and 2.58 seconds"),
        stage(0, "49:05", "torch.compile took 47.71 s in total"),
        stage(0, "49:07", "Available KV cache memory: 17.42 GiB"),  # measured: not there when the service sizes it
        stage(0, "49:08", "GPU KV cache size: 163,056 tokens, Maximum concurrency for 4,096 tokens per request: 39x"),
        stage(0, "49:33", "Graph capturing finished in 3 secs, took 0.11 GiB"),
        stage(0, "51:43", "Captured MRv2 mtp graphs for 11 sizes"),
        stage(0, "51:44", "init engine (profile, create kv cache, warmup model) took 209.43 s"),
        stage(1, "51:50", "init engine (profile, create kv cache, warmup model) took 0.44 s"),
        "INFO 11-29 10:52:36 [omni_base.py:227] [AsyncOmni] AsyncOmniEngine initialized in 329.35 seconds",
        server("52:37.000", "omni engine started"),
        server("52:45.000", "omni engine ready"),
        server("52:45.600", "started"),
    ]
    log = tmp_path / "service.log.gz"
    with gzip.open(log, "wt") as out:
        out.write("\n".join(lines) + "\n")
    found = module.milestones(module.read_lines(log))
    order = [(track, name) for track, name, _ in module.MILESTONES]
    assert sorted(((m.track, m.name) for m in found), key=order.index) == order  # each once
    rows = module.table(found)
    assert rows[2] == "| server | the server's process started | 0.0 | 0.0 |"
    assert "| server | the omni engine starting | 0.5 | 0.5 |" in rows
    assert "| server | the stages' models inspected (vLLM's model info) | 19.0 | 18.5 |" in rows
    assert "| talker | the talker's process logging (spawned, imported) | 91.0 | 62.0 |" in rows
    assert "| talker | its engine configured | 91.0 | 0.0 |" in rows
    assert "| code2wav | code2wav's process logging (spawned, imported) | 92.0 | 1.0 |" in rows
    assert "| code2wav | its weights and decoder graphs loaded | 100.0 | 8.0 |" in rows
    assert "| talker | its weights loaded | 94.0 | 3.0 |" in rows
    assert "| talker | its KV cache sized | 148.0 | 3.0 |" in rows
    assert "| talker | its code predictor warmed up and captured | 303.0 | 130.0 |" in rows
    assert "| code2wav | code2wav ready | 310.0 | 210.0 |" in rows
    assert rows[-1] == "| server | the server serving | 365.6 | 0.6 |"
    # a milestone never logged is passed over: those after it on its track are still found
    without = module.table(module.milestones(lines[1:]))
    assert without[-1] == "not in the log: server: the server's process started"
    assert "| server | the server serving | 365.1 | 0.6 |" in without
    # a start that failed: what it reached, and what it did not
    failed = module.table(module.milestones(lines[:6]))
    assert failed[-1].startswith("not in the log: talker: its weights loaded; ")
    assert failed[-1].endswith("server: the server serving")
    assert module.table([]) == ["no milestone of the omni engine's start in this log"]


def test_sglang_pace_averages_the_talkers_steady_decode_lines_after_the_server_was_ready_by_running_requests(
    tmp_path: Path,
) -> None:
    """A decode line counts only after the ready line, and only where the one before it was a decode line of as many
    running requests within --max-gap seconds (its throughput spans nothing but decoding): the first after a prefill,
    after a change of load or after a pause is left out. Each counts in the bucket its running requests fall in (a
    count or an inclusive range), as mean, median, min and max tokens/s and the share that replayed a CUDA graph; a
    gzipped log reads as a plain one."""
    module = gpu_script("sglang_pace")

    def decode(at: str, running: int, rate: float, graph: bool = True) -> str:
        return (
            f"2026-11-29 05:49:{at} [INFO] sglang.srt.managers.scheduler_components.metrics_reporter: Decode batch, "
            f"#running-req: {running}, #token: 176, token usage: 0.00, cuda graph: {graph}, "
            f"gen throughput (token/s): {rate}, #queue-req: 0"
        )

    prefill = "2026-11-29 05:49:{} [INFO] sglang: Prefill batch, #new-seq: 17, #new-token: 894, cuda graph: False"
    lines = [
        decode("20,000", 32, 9999.0),
        decode("20,500", 32, 9999.0),  # warm-up: before the server was ready
        '{"ts": "2026-11-29T05:49:21.302Z", "level": "info", "logger": "app.server", "message": "started"}',
        decode("22,000", 8, 5.0),  # the first after the ready line: its interval reaches back into the warm-up
        decode("22,500", 8, 1000.0),
        decode("23,000", 8, 1200.0, graph=False),
        prefill.format("23,100"),
        decode("23,300", 32, 150.0),  # spans the prefill
        decode("23,900", 32, 1800.0),
        decode("24,500", 32, 1600.0),
        prefill.format("24,600"),
        decode("24,800", 32, 300.0),  # as many running as the decode line before, but a prefill between them
        decode("30,800", 32, 60.0),  # 6 s after the one before: spans a pause
        decode("31,000", 31, 3.0),  # a change of load
        decode("31,500", 31, 2000.0),
        decode("32,000", 12, 5.0),
        decode("32,500", 12, 7.0),  # in no bucket asked for
    ]
    log = tmp_path / "service.log.gz"
    with gzip.open(log, "wt") as out:
        out.write("\n".join(lines) + "\n")
    decodes = module.decode_lines(module.read_lines(log), module.READY, 2.0)
    assert module.pace_table(decodes, module.buckets("8,30-32,64")) == [
        ("8", 2, 1100.0, 1100.0, 1000.0, 1200.0, 0.5),
        ("30-32", 3, 1800.0, 1800.0, 1600.0, 2000.0, 1.0),
    ]
    # a wider gap lets the line after the pause count too
    decodes = module.decode_lines(module.read_lines(log), module.READY, 10.0)
    assert module.pace_table(decodes, module.buckets("30-32"))[0][:2] == ("30-32", 4)
    # without the ready line nothing counts: a log cut before it has no pace
    assert list(module.decode_lines(lines[:2] + lines[3:], module.READY, 2.0)) == []


def test_window_arrivals_gives_each_windows_arrival_and_gap_over_the_streams_that_had_it(tmp_path: Path) -> None:
    """Per window, over the answered streams that got that far: when it arrived and how long after the one before
    (for the first: after the request), at p10 / p50 / p90 with no interpolation; failed streams are left out; a
    window no stream reached ends the table."""
    module = gpu_script("window_arrivals")

    def stream(*arrived_s: float, ok: bool = True) -> dict[str, object]:
        return {"ok": ok, "audio_arrivals": [[at, 0.08 * (i + 1)] for i, at in enumerate(arrived_s)]}

    per_request = [
        stream(0.1, 0.3, 0.35),
        stream(0.2, 0.3),
        stream(0.15, 0.4, 0.45),
        stream(0.05, ok=False),
        {"ok": True, "audio_arrivals": []},
    ]
    table = module.window_table(per_request, 5)
    assert [row[:2] for row in table] == [(1, 3), (2, 3), (3, 2)]
    first, second, third = (row[2:] for row in table)
    assert (
        first[0] == pytest.approx([100.0, 150.0, 200.0]) and first[1] == first[0]
    )  # of 3 sorted: p10 the 1st, p50 the 2nd, p90 the 3rd
    assert second[0] == pytest.approx([300.0, 300.0, 400.0])
    assert second[1] == pytest.approx([100.0, 200.0, 250.0])  # 0.2 -> 0.3, 0.1 -> 0.3, 0.15 -> 0.4
    assert third[1] == pytest.approx([50.0, 50.0, 50.0])
    results = tmp_path / "results.json"
    results.write_text(json.dumps({"runs": [{"url": "http://x", "concurrency": 32, "per_request": per_request}]}))
    assert [(url, level, len(rows)) for url, level, rows in module.runs(results)] == [("http://x", 32, 5)]


def test_sglang_timeline_reads_a_stage_copys_events_as_its_stages(tmp_path: Path) -> None:
    """A stage run as several copies (sglang-omni's process replicas) writes its events as `<stage>@r<N>`: they count
    as the stage's, so preprocessing's phases stay in the table."""
    module = gpu_script("sglang_timeline")
    events = [
        {"request_id": "a", "stage": "coordinator", "event_name": "request_admission", "timestamp_ns": 0},
        {"request_id": "a", "stage": "preprocessing@r1", "event_name": "stage_complete", "timestamp_ns": 40_000_000},
        {"request_id": "b", "stage": "coordinator", "event_name": "request_admission", "timestamp_ns": 0},
        {"request_id": "b", "stage": "preprocessing@r12", "event_name": "stage_complete", "timestamp_ns": 60_000_000},
        {"request_id": "b", "stage": "preprocessing@rx", "event_name": "stage_complete", "timestamp_ns": 1},  # no copy
    ]
    requests = module.request_events(events)
    assert requests["a"]["preprocessing:stage_complete"] == 40_000_000
    assert requests["b"]["preprocessing:stage_complete"] == 60_000_000
    assert requests["b"]["preprocessing@rx:stage_complete"] == 1
    assert dict((phase, (n, p50)) for phase, n, p50, _ in module.phase_table(requests))["preprocessing"] == (
        2,
        60.0,
    )  # p50: halves upward


def test_omni_timeline_splits_each_requests_first_audio_and_every_window_into_phases(tmp_path: Path) -> None:
    """The omni engine's request timeline: the server's, the talker's and code2wav's event files (plain or gzipped,
    lines that are not events skipped); a stage's request id is put with the longest server id it starts with (r1's
    stage ids are not r10's); first audio's phases from each request's first event of each name, p50 / p95 / max over
    the requests that have both; every window's hand-off, code2wav queue and step from the n-th events paired."""
    module = gpu_script("omni_timeline")

    def at(ms: float) -> int:
        return int(ms * 1e6)

    server, talker, code2wav = [], [], []
    for request, start, hand_off in (("r1", 0.0, 3.0), ("r10", 5.0, 9.0)):
        stage_id = f"{request}-a1b2c3"
        server += [{"ts_ns": at(start), "event": "submitted", "request_id": request}]
        for window, sent in enumerate((start + 20, start + 60)):
            talker.append({"ts_ns": at(sent), "event": "window_sent", "request_id": stage_id})
            ready = sent + hand_off + window  # the second window's hand-off 1 ms longer
            code2wav += [
                {"ts_ns": at(ready), "event": "window_ready", "request_id": stage_id},
                {"ts_ns": at(ready + 0.5), "event": "window_scheduled", "request_id": stage_id, "frames": 1},
                {"ts_ns": at(ready + 8.5), "event": "window_decoded", "request_id": stage_id},
            ]
        server += [{"ts_ns": at(start + 20 + hand_off + 8.5 + 2), "event": "first_audio", "request_id": request}]
        # each window's audio back in the server: 2 ms after its step, then 3 (the second window's hand-off is 1 ms
        # longer too)
        for window, sent in enumerate((start + 20, start + 60)):
            back = sent + hand_off + window + 8.5 + 2 + window
            server.append({"ts_ns": at(back), "event": "audio", "request_id": request})
    (tmp_path / "events_server_1.jsonl").write_text("\n".join(map(json.dumps, server)) + "\n{cut sho")
    (tmp_path / "events_talker_2.jsonl").write_text("\n".join(map(json.dumps, talker)) + "\n")
    with gzip.open(tmp_path / "events_code2wav_3.jsonl.gz", "wt") as out:
        out.write("\n".join(map(json.dumps, reversed(code2wav))) + "\n")  # order of the lines does not matter
    requests = module.load([tmp_path])
    assert sorted(requests) == ["r1", "r10"]
    assert module.first_audio_phases(requests["r10"]) == pytest.approx(
        {
            "talker": 20.0,
            "hand-off": 9.0,
            "code2wav queue": 0.5,
            "code2wav step": 8.0,
            "to server": 2.0,
            "first audio": 39.5,
        }
    )
    assert module.window_phases(requests["r1"])["hand-off"] == pytest.approx([3.0, 4.0])
    assert module.window_phases(requests["r1"])["to server"] == pytest.approx([2.0, 3.0])
    text = module.report(requests, per_request=True)
    assert "| hand-off | 2 | 9.0 | 9.0 | 9.0 |" in text  # r1 3, r10 9: the nearer value, halves upward
    assert "| hand-off | 4 | 9.0 | 10.0 | 10.0 |" in text  # every window: 3 4 9 10
    assert "| to server | 4 | 3.0 | 3.0 | 3.0 |" in text  # every window: 2 3 2 3
    assert "| `r10` | 5.0 | 20.0 | 9.0 | 0.5 | 8.0 | 2.0 | 39.5 |" in text
    assert "The talker's part" not in text  # no worker of the service's recorded its steps
    assert "split at its write" not in text  # no connector of the service's recorded its writes
    done = subprocess.run(
        [sys.executable, str(GPU / "omni_timeline.py"), str(tmp_path / "none")], capture_output=True, text=True
    )
    assert done.returncode == 1 and "no events" in done.stderr


def test_omni_timeline_tells_a_streams_last_window_on_its_way_to_the_server_from_its_others(tmp_path: Path) -> None:
    """A burst's streams that end together reach the server one after another: the way back to the server (decoded ->
    audio) of each stream's last window apart from its others, and how far apart the streams' ends reached the server,
    those that ended together only (under 20 ms apart)."""
    module = gpu_script("omni_timeline")

    def at(ms: float) -> int:
        return int(ms * 1e6)

    server, code2wav = [], []
    # three streams of two windows, their last windows decoded together at 100 ms and back 5, 11 and 17 ms later; a
    # fourth ends long after, alone
    for n, (request, back) in enumerate((("r1", 5.0), ("r2", 11.0), ("r3", 17.0), ("r4", 2.0))):
        stage_id = f"{request}-x"
        end = 100.0 if n < 3 else 400.0
        server.append({"ts_ns": at(n), "event": "submitted", "request_id": request})
        for decoded, audio in ((50.0, 51.0), (end, end + back)):
            code2wav.append({"ts_ns": at(decoded), "event": "window_decoded", "request_id": stage_id})
            server.append({"ts_ns": at(audio), "event": "audio", "request_id": request})
    # a stream of one window, its only window its last; and two whose windows do not pair one to one (code2wav's
    # recording began after the first was decoded; a stream cut after an audio the timeline saw no decode of): which
    # audio is which window's cannot be told, so neither counts, nor does its end
    single, unpaired = ("r5", [(200.0, 203.0)]), [("r6", [100.0], [51.0, 101.0]), ("r7", [50.0, 100.0], [51, 101, 104])]
    for n, (request, windows) in enumerate([single], start=4):
        server.append({"ts_ns": at(n), "event": "submitted", "request_id": request})
        for decoded, audio in windows:
            code2wav.append({"ts_ns": at(decoded), "event": "window_decoded", "request_id": f"{request}-x"})
            server.append({"ts_ns": at(audio), "event": "audio", "request_id": request})
    for n, (request, decoded_at, audio_at) in enumerate(unpaired, start=5):
        server.append({"ts_ns": at(n), "event": "submitted", "request_id": request})
        code2wav += [{"ts_ns": at(t), "event": "window_decoded", "request_id": f"{request}-x"} for t in decoded_at]
        server += [{"ts_ns": at(t), "event": "audio", "request_id": request} for t in audio_at]
    (tmp_path / "events_server_1.jsonl").write_text("\n".join(map(json.dumps, server)) + "\n")
    (tmp_path / "events_code2wav_3.jsonl").write_text("\n".join(map(json.dumps, code2wav)) + "\n")
    ends = module.stream_ends(module.load([tmp_path]))
    assert sorted(ends[module.LAST_WINDOW]) == pytest.approx([2.0, 3.0, 5.0, 11.0, 17.0])
    assert ends[module.OTHER_WINDOWS] == pytest.approx([1.0] * 4)
    assert sorted(ends[module.ENDS_APART]) == pytest.approx([6.0, 6.0])  # 105 -> 111 -> 117; 203 and 402 alone
    text = module.report(module.load([tmp_path]))
    assert "| a stream's last window | 5 | 5.0 | 17.0 | 17.0 |" in text
    assert "| streams' ends in the server, one after the next | 2 | 6.0 | 6.0 | 6.0 |" in text


def test_omni_timeline_reads_the_talkers_steps_on_the_host_apart_from_the_requests(tmp_path: Path) -> None:
    """The talker worker's `step_host` lines (one a step, no request's): not a request of the layout, but a table of
    their host time, the steps that took in a prompt apart from the decode-only ones, each step's time to the next."""
    module = gpu_script("omni_timeline")
    steps = [
        {"ts_ns": 0, "new": 1, "requests": 1, "execute_us": 6600, "sample_us": 900, "sections": {"prompt": 800}},
        {"ts_ns": 4_000_000, "new": 3, "requests": 4, "execute_us": 9000, "sample_us": 900,
         "sections": {"prompt": 2700}},
        *(
            {"ts_ns": int((10 + 5 * n) * 1e6), "new": 0, "requests": 1, "execute_us": 3000 + n, "sample_us": 500,
             "sections": {"prompt": 0, "talker_graph": 400}}
            for n in range(3)
        ),
    ]  # fmt: skip
    lines = [
        {"ts_ns": 5, "event": "submitted", "request_id": "r1"},
        *({"event": "step_host", "request_id": "", **step} for step in steps),
    ]
    (tmp_path / "events_server_1.jsonl").write_text(json.dumps(lines[0]) + "\n")
    (tmp_path / "events_talker_2.jsonl").write_text("\n".join(map(json.dumps, lines[1:])) + "\n{cut")
    assert sorted(module.load([tmp_path])) == ["r1"]
    read = module.talker_steps([tmp_path])
    assert [step["ts_ns"] for step in read] == [0, 4_000_000, 10_000_000, 15_000_000, 20_000_000]
    done = subprocess.run(
        [sys.executable, str(GPU / "omni_timeline.py"), str(tmp_path)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    prompt, decode = done.stdout.split("The talker's steps on the host that ")[1:]
    assert prompt.startswith("took in a prompt (2 steps; prompts a step p50 3, max 3; requests a step p50 4), ms by")
    assert (
        "| to the next step | 2 | 6.0 | 6.0 | 6.0 |" in prompt and "| execute_model | 2 | 9.0 | 9.0 | 9.0 |" in prompt
    )
    assert "| talker_graph | 0 | – | – | – |" in prompt and "| prompt | 2 | 2.7 | 2.7 | 2.7 |" in prompt
    # the builder's time over the step's prompts: 0.8 for one, 0.9 each of three
    assert "| prompt, a prompt taken in | 2 | 0.9 | 0.9 | 0.9 |" in prompt
    assert decode.startswith("decode only (3 steps")
    assert "| to the next step | 2 | 5.0 | 5.0 | 5.0 |" in decode  # the last step has no next
    assert "| sample_tokens | 3 | 0.5 | 0.5 | 0.5 |" in decode and "| talker_graph | 3 | 0.4 | 0.4 | 0.4 |" in decode


def write_one_requests_events(folder: Path, lines: dict[str, list[tuple[float, str]]]) -> None:
    """One request's omni timeline, role by role ((ms, event) each): the server's id `r1`, the stages' `r1-a1b2`."""
    for role, events in lines.items():
        request = "r1" if role == "server" else "r1-a1b2"
        rows = [{"ts_ns": int(ms * 1e6), "event": event, "request_id": request} for ms, event in events]
        (folder / f"events_{role}_1.jsonl").write_text("\n".join(map(json.dumps, rows)) + "\n")


def test_omni_timeline_splits_a_streams_second_window_where_a_burst_runs_dry(tmp_path: Path) -> None:
    """A stream's second window, from its n-th events: its audio's time after the first audio, the talker's time from
    its first window to its second, code2wav's from that window's hand-off to its audio, the way back; a stream of one
    window has none, and the report leaves the table out."""
    module = gpu_script("omni_timeline")
    lines = {
        "server": [(0.0, "submitted"), (30.0, "first_audio"), (30.0, "audio"), (140.0, "audio")],
        "talker": [(20.0, "window_sent"), (75.0, "window_sent")],
        "code2wav": [(28.0, "window_decoded"), (120.0, "window_decoded")],
    }
    write_one_requests_events(tmp_path, lines)
    requests = module.load([tmp_path])
    assert module.second_window_phases(requests["r1"]) == pytest.approx(
        {
            "second audio after the first": 110.0,
            "the talker: first window sent -> second": 55.0,
            "code2wav: second window sent -> decoded": 45.0,
            "to server: second window decoded -> audio": 20.0,
        }
    )
    text = module.report(requests, per_request=True)
    assert "| second audio after the first | 1 | 110.0 | 110.0 | 110.0 |" in text
    assert "| `r1` | 0.0 | 110.0 | 55.0 | 45.0 | 20.0 |" in text
    one = tmp_path / "one"
    one.mkdir()
    write_one_requests_events(one, {role: events[: 3 if role == "server" else 1] for role, events in lines.items()})
    single = module.load([one])
    assert module.second_window_phases(single["r1"]) == {}
    assert "second window" not in module.report(single, per_request=True)


@pytest.mark.parametrize("numbered", [True, False], ids=["step numbers", "times only"])
def test_omni_timeline_rebuilds_code2wav_steps_and_splits_them_by_the_window_indices_they_mix(
    tmp_path: Path, numbered: bool
) -> None:
    """code2wav's steps from its scheduler's records: one step's windows share its step number (or, in a timeline
    recorded without them, lie within 0.5 ms); each window's index is its place in its stream; a step's own time runs
    from the later of its scheduling and the previous step's last decode."""
    module = gpu_script("omni_timeline")

    def scheduled(ms: float, request: str, step: int) -> dict[str, object]:
        row: dict[str, object] = {"ts_ns": int(ms * 1e6), "event": "window_scheduled", "request_id": request}
        return {**row, "step": step} if numbered else row

    def decoded(ms: float, request: str) -> dict[str, object]:
        return {"ts_ns": int(ms * 1e6), "event": "window_decoded", "request_id": request}

    server = [{"ts_ns": int(at * 1e6), "event": "submitted", "request_id": r} for at, r in ((0.0, "r1"), (4.0, "r2"))]
    code2wav = [
        # step 1: both streams' first windows, 12 ms
        scheduled(10.0, "r1-a", 1),
        scheduled(10.1, "r2-b", 1),
        decoded(20.0, "r1-a"),
        decoded(22.0, "r2-b"),
        # step 2, built while step 1 ran: r1's second window beside r3's first; its own time from step 1's end
        scheduled(15.0, "r1-a", 2),
        scheduled(15.2, "r3", 2),
        decoded(40.0, "r1-a"),
        decoded(40.0, "r3"),
        # step 3: r2's second window alone, after step 2
        scheduled(45.0, "r2-b", 3),
        decoded(51.0, "r2-b"),
    ]
    (tmp_path / "events_server_1.jsonl").write_text("\n".join(map(json.dumps, server)) + "\n")
    (tmp_path / "events_code2wav_2.jsonl").write_text("\n".join(map(json.dumps, code2wav)) + "\n")
    requests = module.load([tmp_path])
    steps = module.code2wav_steps(requests)
    assert [sorted(step.indices) for step in steps] == [[0, 0], [0, 1], [1]]
    assert [step.mixed for step in steps] == [1, 2, 1]
    assert [step.own_ms for step in steps] == pytest.approx([12.0, 18.0, 6.0])
    text = module.report(requests, per_request=True)
    assert "| one | 2 | 2 | 2 | 12.0 | 12.0 | 12.0 | 12.0 |" in text  # steps 1 and 3: spans 12 and 6, own 12 and 6
    assert "| two or more | 1 | 2 | 2 | 25.0 | 25.0 | 18.0 | 18.0 |" in text
    assert "| 1 | 15.0 | 0: 1, 1: 1 | 25.0 | 18.0 |" in text  # every step, ms after the first submission
    assert "code2wav's steps" not in module.report(module.load([tmp_path / "events_server_1.jsonl"]))


def test_omni_timeline_splits_the_talkers_part_at_its_first_step_where_the_worker_recorded_it(tmp_path: Path) -> None:
    """The talker's worker records each request's first step (launched, returned): the talker's part of first audio
    splits into the way to the talker, the first step's launch and the rest up to the first window."""
    module = gpu_script("omni_timeline")
    lines = {
        "server": [(0.0, "submitted"), (40.0, "first_audio")],
        "talker": [(3.0, "first_step_launched"), (4.5, "first_step_returned"), (20.0, "window_sent")],
        "code2wav": [(24.0, "window_ready"), (25.0, "window_scheduled"), (31.0, "window_decoded")],
    }
    write_one_requests_events(tmp_path, lines)
    requests = module.load([tmp_path])
    assert module.talker_phases(requests["r1"]) == pytest.approx(
        {"to the talker's first step": 3.0, "its launch": 1.5, "then to the first window": 15.5}
    )
    text = module.report(requests)
    assert "| to the talker's first step | 1 | 3.0 | 3.0 | 3.0 |" in text
    assert "| then to the first window | 1 | 15.5 | 15.5 | 15.5 |" in text


def test_omni_timeline_splits_every_windows_hand_off_at_its_write_where_the_connector_recorded_it(
    tmp_path: Path,
) -> None:
    """The window doorbell's connector records each window's write to shared memory: every window's hand-off splits
    into the talker's part (sent -> written) and code2wav's (written -> ready), a stream's n-th of each paired."""
    module = gpu_script("omni_timeline")
    lines = {
        "server": [(0.0, "submitted"), (40.0, "first_audio")],
        "talker": [(20.0, "window_sent"), (20.5, "window_written"), (60.0, "window_sent"), (61.5, "window_written")],
        "code2wav": [(22.0, "window_ready"), (64.0, "window_ready")],
    }
    write_one_requests_events(tmp_path, lines)
    requests = module.load([tmp_path])
    assert module.hand_off_phases(requests["r1"]) == {
        "the talker's write": pytest.approx([0.5, 1.5]),
        "code2wav's read": pytest.approx([1.5, 2.5]),
    }
    assert module.window_phases(requests["r1"])["hand-off"] == pytest.approx([2.0, 4.0])
    text = module.report(requests)
    assert "| the talker's write | 2 | 1.5 | 1.5 | 1.5 |" in text  # 0.5 and 1.5: the nearer value, halves upward
    assert "| code2wav's read | 2 | 2.5 | 2.5 | 2.5 |" in text


def one_step_events(decoded_at: float, copied_at: float | None = None) -> dict[str, list[tuple[float, str]]]:
    """One request's first window through code2wav's step, its worker's call recorded (and its copy, where given)."""
    copied = [(copied_at, "window_copied")] if copied_at is not None else []
    return {
        "server": [(0.0, "submitted"), (40.0, "first_audio")],
        "talker": [(20.0, "window_sent")],
        "code2wav": [
            (22.0, "window_ready"),
            (23.0, "window_scheduled"),
            (24.5, "window_launched"),
            (29.0, "window_returned"),
            *copied,
            (decoded_at, "window_decoded"),
        ],
    }


def test_omni_timeline_splits_every_windows_code2wav_step_at_its_workers_call_where_the_worker_recorded_it(
    tmp_path: Path,
) -> None:
    """code2wav's worker records each step's call (launched, returned) for every window it runs: every window's code2wav
    step splits into the way to the worker, the worker's call and the way back to code2wav's scheduler."""
    module = gpu_script("omni_timeline")
    write_one_requests_events(tmp_path, one_step_events(31.0))
    requests = module.load([tmp_path])
    assert module.step_phases(requests["r1"]) == {
        "to code2wav's worker": pytest.approx([1.5]),
        "its worker's call": pytest.approx([4.5]),
        "back to its scheduler": pytest.approx([2.0]),
        "of it, until its output was on the host": [],  # the worker recorded no copies
        "of it, then to its scheduler": [],
    }
    text = module.report(requests)
    assert "split at its worker's call" in text and "| its worker's call | 1 | 4.5 | 4.5 | 4.5 |" in text
    assert "split at its write" not in text  # no connector of the service's recorded its writes
    assert "of it," not in text  # a split of the way back that no event recorded has no rows


def test_omni_timeline_splits_the_way_back_to_code2wavs_scheduler_at_the_steps_copy_where_the_worker_recorded_it(
    tmp_path: Path,
) -> None:
    """Where code2wav's worker recorded when each step's output was on the host (`window_copied`), the way back to
    its scheduler splits into the step's GPU work and copy, and the wait after it; the way back whole stays."""
    module = gpu_script("omni_timeline")
    write_one_requests_events(tmp_path, one_step_events(38.5, copied_at=36.0))
    requests = module.load([tmp_path])
    assert module.step_phases(requests["r1"]) == {
        "to code2wav's worker": pytest.approx([1.5]),
        "its worker's call": pytest.approx([4.5]),
        "back to its scheduler": pytest.approx([9.5]),
        "of it, until its output was on the host": pytest.approx([7.0]),
        "of it, then to its scheduler": pytest.approx([2.5]),
    }
    text = module.report(requests)
    assert "| of it, until its output was on the host | 1 | 7.0 | 7.0 | 7.0 |" in text
