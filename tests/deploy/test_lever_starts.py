"""deploy/gpu/lever-starts.sh: a lever's variants started one after another, each swept alike, with a stand-in for
side-by-side.sh (no GPU here) that records what each call was asked to do."""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "deploy/gpu/lever-starts.sh"
# what the script reads from its environment: a caller's own must not leak into these runs
SETTINGS = (
    "VARIANTS",
    "BASE_ENV",
    "UNTIL",
    "FIRST_S",
    "LATER_S",
    "PYSPY",
    "PYSPY_LEVEL",
    "PROFILES",
    "TORCH_PROFILE",
    "PROFILE_LEVELS",
    "BASE_ENV_B",
    "SERVICE_B_ENV",
    "SERVER_B_PIDFILE",
    "SERVICE_PORT",
    "SERVICE_B_PORT",
    "SERVICE_SGLANG_PORT",
    "KV_WAIT_S",
    "SWEEP_TARGETS",
    "PYSPY_AFTER_S",
    "PROFILE_FRAMES",
    "PROFILE_EXTRA_BODY",
    "TRACE_SUMMARY",
    "SUMMARY_TIMEOUT_S",
    "START_PYSPY",
    "START_PYSPY_RATE",
    "TRACE_WAIT_S",
    "SETTLE_S",
    "START_WAIT_S",
    "SERVER_PIDFILE",
    "TARGET",
    "SERVICE_ENV",
    "SERVICE_SGLANG_ENV",
    "SERVICE_SGLANG_B_ENV",
    "SERVICE_SGLANG_B_PORT",
    "MIN_START_S",
    "KEEP_TRACES",
    "TIMELINE_LEVELS",
    "STANDIN_PROFILE_B",
    "SWEEPS",
    "PROFILE_SET",
    "SWITCH_ROUNDS",
    "SWITCH_SETTLE_S",
    "ROUND_S",
    "SWEEP_MARGIN_S",
    "FAIL_PHASE",
)


def stand_in_side_by_side(tmp_path: Path) -> Path:
    """One line per call: the phase, the settings side-by-side.sh reads for it, and the cores it ran on. `start`
    fails for the variants named in FAIL_START, with status FAIL_RC (3: still starting; 2: the server died or its
    engine failed), and with STANDIN_PIDFILE writes its own pid there and waits (30 s at most) for the file
    beside it that says py-spy is recording, as a server starting; `profile` leaves one request's timeline events
    where the service on sglang would (TIMELINE=1), or else a PyTorch trace where the engine's processes write
    theirs; `stop` keeps a server log, as side-by-side.sh does."""
    script = tmp_path / "side-by-side.sh"
    event = '{"request_id": "r1", "stage": "coordinator", "event_name": "%s", "timestamp_ns": %d}'
    omni_event = '{"request_id": "r1", "event": "%s", "ts_ns": %d}'
    trace = '{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "gemv_add", "ts": 0, "dur": 40000, "args": {}}]}'
    script.write_text(
        "#!/usr/bin/env bash\n"
        'echo "$1|$(basename "$OUT")|${SWEEP_NAME-}|${CONCURRENCY-}|${REQUESTS-}|${TIMELINE-}|$SERVICE_SGLANG_ENV'
        "|$(grep Cpus_allowed_list /proc/$$/status | cut -f2)|${START_WAIT_S-}|${SERVICE_ENV-}|$TARGETS"
        "|${PROFILER_DIR-}|${SERVICE_B_ENV-}|${EXTRA_BODY-}|${PROFILE_WARMUP-}|${SWEEP_TARGETS-}"
        '|${SERVICE_SGLANG_B_ENV-}|${PROFILE_SET-}|$(cat "$OUT/../lever-switch" "$OUT/lever-switch" 2>/dev/null)'
        '|${LOADTEST_ARGS-}"'
        f" >> {tmp_path}/calls\n"
        "case $1 in\n"
        '  start) case " ${FAIL_START:-} " in *" $(basename "$OUT") "*) exit "${FAIL_RC:-3}" ;; esac\n'
        '    if [ -n "${STANDIN_PROFILE_B-}" ]; then mkdir -p "$OUT"; echo a > "$OUT/profile.yaml"\n'
        '      echo "$STANDIN_PROFILE_B" > "$OUT/profile-b.yaml"; fi\n'
        '    if [ -n "${STANDIN_PIDFILE-}" ]; then echo $$ > "$STANDIN_PIDFILE"\n'
        '      for _ in $(seq 300); do [ -f "$STANDIN_PIDFILE.ready" ] && break; sleep 0.1; done; fi ;;\n'
        '  profile) if [ -n "${TIMELINE-}" ] && [ "${TARGETS%% *}" = service ]; then for t in $TARGETS; do\n'
        '    mkdir -p "$PROFILER_DIR/$t/$SWEEP_NAME"\n'
        f"    printf '%s\\n' '{omni_event % ('submitted', 0)}' '{omni_event % ('first_audio', 41_000_000)}'"
        ' > "$PROFILER_DIR/$t/$SWEEP_NAME/events_server_5.jsonl"\n'
        f"    printf '%s\\n' '{omni_event % ('window_sent', 20_000_000)}'"
        ' > "$PROFILER_DIR/$t/$SWEEP_NAME/events_talker_6.jsonl"; done; exit 0; fi\n'
        '    if [ -z "${TIMELINE-}" ]; then for t in $TARGETS; do mkdir -p "$PROFILER_DIR/$t/$SWEEP_NAME"\n'
        f"    printf '%s' '{trace}' > \"$PROFILER_DIR/$t/$SWEEP_NAME/stage0.json\"; done; exit 0; fi\n"
        '    for t in $TARGETS; do mkdir -p "$PROFILER_DIR/$t/$SWEEP_NAME"\n'
        # a pair's second server's first audio 63 ms later: each server's timeline told apart
        "    case $t in *-b) ns=201000000 ;; *) ns=138000000 ;; esac\n"
        f"    printf '%s\\n' '{event % ('request_admission', 1_000_000)}'"
        f" \"$(printf '{event.replace('%d', '%s') % ('coordinator_stream_received', '%d')}' $ns)\""
        ' > "$PROFILER_DIR/$t/$SWEEP_NAME/events_coordinator_7.jsonl"; done ;;\n'
        '  stop) mkdir -p "$OUT/logs"\n'
        '    if [ "${TARGETS%% *}" = service ]; then for t in $TARGETS; do printf \'%s\\n\' \'{"ts":'
        ' "2026-11-29T10:00:00.000Z", "message": "omni engine starting"}\' \'{"ts": "2026-11-29T10:01:28.000Z",'
        ' "message": "omni engine ready", "total_s": 88.0}\' "{\\"ts\\": \\"2026-11-29T10:01:30.100Z\\",'
        ' \\"message\\": \\"started\\", \\"total_s\\": 90.1, \\"target\\": \\"$t\\"}"'
        ' > "$OUT/logs/$t.log"; done\n'
        "    else for t in $TARGETS; do printf '%s\\n' '{\"message\": \"sglang engine starting\"}'"
        ' \'{"message": "Decode batch"}\' "{\\"message\\": \\"sglang engine ready\\", \\"total_s\\": 229.1,'
        ' \\"target\\": \\"$t\\"}" > "$OUT/logs/$t.log"; done; fi ;;\n'
        '  "${FAIL_PHASE-}") exit 1 ;;\n'  # a sweep that fails (FAIL_PHASE=sweep-closed, say)
        "esac\n"
    )
    script.chmod(0o755)
    return script


def run(tmp_path: Path, out: str = "out", **settings: str) -> subprocess.CompletedProcess[str]:
    env = {
        **{
            name: value
            for name, value in os.environ.items()
            if name not in SETTINGS and not name.startswith(("LEVER_", "PROFILE_SET_"))
        },
        "SIDE_BY_SIDE": str(stand_in_side_by_side(tmp_path)),
        "OUT": str(tmp_path / out),
        "PYTHON": sys.executable,
        "PYSPY": "0",
        "EVENTS_WAIT_S": "0",
        "SETTLE_S": "0.2",
        "SERVER_PIDFILE": str(tmp_path / "no-server.pid"),
        "SERVER_B_PIDFILE": str(tmp_path / "no-server-b.pid"),
        "PROFILES": str(tmp_path / "profiles"),
        "BASE_ENV": "CUDA_VISIBLE_DEVICES=0",  # the default pins the load tool to cores 14-15, which a CI machine lacks
        **settings,
    }
    return subprocess.run([str(SCRIPT)], env=env, capture_output=True, text=True, cwd=ROOT, timeout=60)


def calls(tmp_path: Path) -> list[list[str]]:
    return [line.split("|") for line in (tmp_path / "calls").read_text().splitlines()]


def test_each_variant_starts_with_its_levers_settings_and_is_swept_alike_then_stopped(tmp_path: Path) -> None:
    done = run(
        tmp_path,
        VARIANTS="a1:A b1:B",
        BASE_ENV="CUDA_VISIBLE_DEVICES=0 CPUS=0-13",
        LEVER_A="",
        LEVER_B="SPEECH_SGLANG__PREPROCESSING=cpu",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    sweeps = [
        ["sweep-bench", "first-c32", "32", "", ""],
        ["sweep-closed", "c1", "1", "16", ""],
        ["sweep-closed", "burst-c8", "8", "32", ""],
        ["sweep-closed", "burst-c32", "32", "96", ""],
        ["sweep-closed", "c8", "8", "64", ""],
        ["sweep-closed", "c32", "32", "128", ""],
        ["profile", "tl-c32", "32", "64", "1"],
        ["sweep-bench", "again-c32", "32", "", ""],
        ["stop", "", "", "", ""],
    ]
    recorded = calls(tmp_path)
    assert [call[:2] for call in recorded] == [
        [phase, name] for name in ("a1", "b1") for phase in ["start", *(s[0] for s in sweeps)]
    ]
    for name, settings, lever in [
        ("a1", "CUDA_VISIBLE_DEVICES=0 CPUS=0-13", "A: (none)"),
        (
            "b1",
            "CUDA_VISIBLE_DEVICES=0 CPUS=0-13 SPEECH_SGLANG__PREPROCESSING=cpu",
            "B: SPEECH_SGLANG__PREPROCESSING=cpu",
        ),
    ]:
        mine = [call for call in recorded if call[1] == name]
        assert {call[6] for call in mine} == {settings}
        assert [[call[0], *call[2:6]] for call in mine[1:]] == sweeps
        out = tmp_path / "out" / name
        assert (out / "lever.txt").read_text() == f"{name}: lever {lever}\n"
        # the timeline's events kept gzipped beside the phases read from them
        with gzip.open(out / "timeline/events_coordinator_7.jsonl.gz", "rt") as events:
            assert '"request_id": "r1"' in events.read()
        assert (out / "timeline/phases.txt").read_text().startswith("1 requests\n")
        # the engine's start phases read from its log, the log kept gzipped
        assert (out / "start-phases.jsonl").read_text().splitlines() == [
            '{"message": "sglang engine starting"}',
            '{"message": "sglang engine ready", "total_s": 229.1, "target": "service-sglang"}',
        ]
        with gzip.open(out / "logs/service-sglang.log.gz", "rt") as log:
            assert "Decode batch" in log.read()
    progress = (tmp_path / "out/progress.txt").read_text()
    assert "a1 stopped after" in progress and "b1 stopped after" in progress and progress.endswith("done\n")
    assert "failed" not in progress


def test_the_service_on_vllm_omni_is_a_target_too_without_the_request_timeline(tmp_path: Path) -> None:
    """TARGET=service: each variant's settings reach side-by-side.sh as the vllm-omni service's (SERVICE_ENV), the
    same sweeps run but the request timeline (sglang-omni's events), no profiler is set up, and the start phases are
    read from the omni engine's lines, and its milestones from its whole log."""
    done = run(
        tmp_path, TARGET="service", VARIANTS="a1:A t1:T", LEVER_A="", LEVER_T="SPEECH_OMNI__TALKER_MODEL=service"
    )
    assert done.returncode == 0, done.stdout + done.stderr
    recorded = calls(tmp_path)
    phases = ["start", "sweep-bench", *["sweep-closed"] * 5, "sweep-bench", "stop"]
    assert [call[:2] for call in recorded] == [[phase, name] for name in ("a1", "t1") for phase in phases]
    for name, settings in (
        ("a1", "CUDA_VISIBLE_DEVICES=0"),
        ("t1", "CUDA_VISIBLE_DEVICES=0 SPEECH_OMNI__TALKER_MODEL=service"),
    ):
        mine = [call for call in recorded if call[1] == name]
        assert {(call[9], call[10], call[11], call[6]) for call in mine} == {(settings, "service", "", "")}
        start_phases = (tmp_path / "out" / name / "start-phases.jsonl").read_text().splitlines()
        assert start_phases == [
            '{"ts": "2026-11-29T10:00:00.000Z", "message": "omni engine starting"}',
            '{"ts": "2026-11-29T10:01:28.000Z", "message": "omni engine ready", "total_s": 88.0}',
            '{"ts": "2026-11-29T10:01:30.100Z", "message": "started", "total_s": 90.1, "target": "service"}',
        ]
        # and every milestone of the start that its log holds (deploy/gpu/omni_start_phases.py)
        table = (tmp_path / "out" / name / "start-phases.md").read_text().splitlines()
        assert "| server | the engine warmed up (ready) | 88.0 | 88.0 |" in table
        assert "| server | the server serving | 90.1 | 2.1 |" in table
        assert not (tmp_path / "out" / name / "timeline").exists()
    assert "failed" not in (tmp_path / "out/progress.txt").read_text()
    refused = run(tmp_path, out="other", TARGET="sglang", VARIANTS="a1:A", LEVER_A="")
    assert refused.returncode == 64 and "TARGET=sglang" in refused.stderr


def test_a_lever_of_the_profile_reaches_its_own_variants_on_top_of_every_variants_overrides(tmp_path: Path) -> None:
    """PROFILE_SET_<LEVER>: on one GPU a lever of the profile is started in turn with its baseline, its overrides
    added to the run's PROFILE_SET for its own variants only, and said in their lever.txt."""
    done = run(
        tmp_path,
        TARGET="service",
        VARIANTS="a1:A u1:U a2:A",
        LEVER_A="SPEECH_OMNI__CUDA_MPS=true",
        LEVER_U="SPEECH_OMNI__CUDA_MPS=true",
        PROFILE_SET="stages.1.max_num_seqs=32",
        PROFILE_SET_U="stages.0.env.CUDA_MPS_CLIENT_PRIORITY=1;stages.1.async_scheduling=false",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    starts = {call[1]: call[17] for call in calls(tmp_path) if call[0] == "start"}
    assert starts == {
        "a1": "stages.1.max_num_seqs=32",
        "u1": "stages.1.max_num_seqs=32;stages.0.env.CUDA_MPS_CLIENT_PRIORITY=1;stages.1.async_scheduling=false",
        "a2": "stages.1.max_num_seqs=32",
    }
    said = (tmp_path / "out/u1/lever.txt").read_text()
    assert "profile: stages.0.env.CUDA_MPS_CLIENT_PRIORITY=1;stages.1.async_scheduling=false" in said
    assert "profile" not in (tmp_path / "out/a1/lever.txt").read_text()
    alone = run(tmp_path, out="alone", TARGET="service", VARIANTS="u1:U", PROFILE_SET_U="stages.1.max_num_seqs=8")
    assert alone.returncode == 0, alone.stdout + alone.stderr
    assert [call[17] for call in calls(tmp_path) if call[0] == "start"][-1] == "stages.1.max_num_seqs=8"
    for target, variants in (("service-pair", "r1:A/U"), ("service-sglang", "u1:U")):
        refused = run(
            tmp_path,
            out=f"refused-{target}",
            TARGET=target,
            VARIANTS=variants,
            BASE_ENV_B="CUDA_VISIBLE_DEVICES=1",
            PROFILE_SET_U="stages.1.max_num_seqs=8",
        )
        assert refused.returncode == 64 and "PROFILE_SET_U is for TARGET=service" in refused.stderr
        assert not (tmp_path / f"refused-{target}").exists()


def test_the_service_on_vllm_omni_profiled_at_c1_and_c8_keeps_each_profiles_summary_not_its_traces(
    tmp_path: Path,
) -> None:
    """TORCH_PROFILE=1: both stages' profiler set up at the start (PROFILER_DIR reaches side-by-side.sh), one request
    and one round of eight profiled after the reported levels, each window's traces summarised per frame (the
    frames a request makes: PROFILE_FRAMES) and deleted."""
    fused = "SPEECH_OMNI__TALKER_MODEL=fused"
    done = run(
        tmp_path,
        TARGET="service",
        TORCH_PROFILE="1",
        VARIANTS="f1:F",
        LEVER_F=fused,
        PROFILE_FRAMES="200",
        TIMELINE_LEVELS="",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    recorded = calls(tmp_path)
    assert {call[11] for call in recorded} == {str(tmp_path / "profiles/f1")}
    profiles = [[call[0], *call[2:5]] for call in recorded if call[0] == "profile"]
    assert profiles == [["profile", "c1", "1", "1"], ["profile", "c8", "8", "8"]]
    assert [call[0] for call in recorded][-3:] == ["profile", "profile", "stop"]
    out = tmp_path / "out/f1"
    # one 40 ms kernel: 0.200 ms a frame over c=1's 200 frames, 0.025 over c=8's 1 600
    for level, per_frame in (("1", "0.200"), ("8", "0.025")):
        summary = (out / f"profile-c{level}.md").read_text()
        assert f"| `gemv_add` | 1 | 40.00 | 40000.0 | {per_frame} |" in summary
    assert "codec frames the window made" in (out / "profile-c1.md").read_text()
    assert not [path for path in (tmp_path / "profiles/f1/service").rglob("*") if path.is_file()]
    progress = (tmp_path / "out/progress.txt").read_text()
    assert "f1 profile c1\n" in progress.replace(" (", "\n") and "failed" not in progress


def test_a_pair_of_variants_runs_on_two_gpus_at_once_swept_interleaved_with_each_ones_start_and_profile(
    tmp_path: Path,
) -> None:
    """TARGET=service-pair: each round starts the service twice at once (side-by-side.sh's `service` and `service-b`),
    the first lever on BASE_ENV, the second on BASE_ENV_B, sweeps both as one (interleaved by side-by-side.sh), and
    keeps each one's start phases and profile apart; a word without a second lever is refused before anything
    starts. The burst of 32 runs twice, the second time with B's requests first (burst-c32-ba): a side worse in
    bursts told apart from the one the load tool runs second."""
    fused, dependent = "SPEECH_OMNI__TALKER_MODEL=fused", "SPEECH_OMNI__FUSED_DEPENDENT_LAUNCH=true"
    done = run(
        tmp_path,
        TARGET="service-pair",
        VARIANTS="r1:F/X r2:X/F",
        BASE_ENV="CUDA_VISIBLE_DEVICES=0",
        BASE_ENV_B="CUDA_VISIBLE_DEVICES=1",
        LEVER_F=fused,
        LEVER_X=f"{fused} {dependent}",
        TORCH_PROFILE="1",
        PROFILE_LEVELS="1",
        PYSPY="1",
        TIMELINE_LEVELS="",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    recorded = calls(tmp_path)
    # py-spy's level loads one server at a time: in a pair the other would be sampled idle, so it is not run
    phases = ["start", "sweep-bench", *["sweep-closed"] * 6, "sweep-bench", "profile", "stop"]
    assert [call[:2] for call in recorded] == [[phase, name] for name in ("r1", "r2") for phase in phases]
    closed = [(call[2], call[15]) for call in recorded if call[0] == "sweep-closed" and call[1] == "r1"]
    assert closed == [
        ("c1", "service service-b"),
        ("burst-c8", "service service-b"),
        ("burst-c32", "service service-b"),
        ("burst-c32-ba", "service-b service"),
        ("c8", "service service-b"),
        ("c32", "service service-b"),
    ]
    gpu0, gpu1 = "CUDA_VISIBLE_DEVICES=0", "CUDA_VISIBLE_DEVICES=1"
    for name, (a, b) in (("r1", (fused, f"{fused} {dependent}")), ("r2", (f"{fused} {dependent}", fused))):
        mine = [call for call in recorded if call[1] == name]
        assert {(call[9], call[12], call[10]) for call in mine} == {(f"{gpu0} {a}", f"{gpu1} {b}", "service service-b")}
        out = tmp_path / "out" / name
        assert (out / "lever.txt").read_text().splitlines()[1].startswith(f"{name}: service-b's lever ")
        for suffix, target in (("", "service"), ("-b", "service-b")):
            assert f'"target": "{target}"' in (out / f"start-phases{suffix}.jsonl").read_text()
            assert "| server | the server serving | 90.1 | 2.1 |" in (out / f"start-phases{suffix}.md").read_text()
            assert "| `gemv_add` | 1 | 40.00 |" in (out / f"profile-c1{suffix}.md").read_text()
        # each server's threads under a line that names it (no server runs here: the lines alone)
        assert (out / "cpu-after-c32.txt").read_text() == "# server service\n# server service-b\n"
    progress = (tmp_path / "out/progress.txt").read_text()
    assert "r1 start (F: " in progress and "; service-b X: " in progress and "failed" not in progress
    assert "r1 py-spy steady-c32 skipped" in progress
    refused = run(tmp_path, out="other", TARGET="service-pair", VARIANTS="r1:F", LEVER_F="")
    assert refused.returncode == 64 and "name:LEVER/LEVER" in refused.stderr


def test_a_pair_on_the_sglang_engine_starts_both_with_their_levers_and_keeps_each_ones_timeline_and_start(
    tmp_path: Path,
) -> None:
    """TARGET=service-sglang-pair: `service-sglang` and `service-sglang-b` started at once, the first lever on
    BASE_ENV, the second on BASE_ENV_B, swept as one with B's burst again first, each one's request timeline and
    start phases kept apart (-b), no vllm-omni start milestones; the same lever on both sides says it is an A/A
    round (the sglang engine runs no profile to compare)."""
    graphs = "SPEECH_SGLANG__PREFILL_GRAPH_TOKENS=2048"
    done = run(
        tmp_path,
        TARGET="service-sglang-pair",
        VARIANTS="r1:G/S r2:S/G r3:S/S",
        BASE_ENV="CUDA_VISIBLE_DEVICES=0",
        BASE_ENV_B="CUDA_VISIBLE_DEVICES=1",
        LEVER_G=graphs,
        LEVER_S="",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    recorded = calls(tmp_path)
    gpu0, gpu1 = "CUDA_VISIBLE_DEVICES=0", "CUDA_VISIBLE_DEVICES=1"
    for name, (a, b) in (("r1", (f"{gpu0} {graphs}", gpu1)), ("r2", (gpu0, f"{gpu1} {graphs}")), ("r3", (gpu0, gpu1))):
        mine = [call for call in recorded if call[1] == name]
        assert {(call[6], call[16], call[10]) for call in mine} == {(a, b, "service-sglang service-sglang-b")}
        closed = [(call[2], call[15]) for call in mine if call[0] == "sweep-closed"]
        assert ("burst-c32-ba", "service-sglang-b service-sglang") in closed
        out = tmp_path / "out" / name
        assert (out / "lever.txt").read_text().splitlines()[1].startswith(f"{name}: service-sglang-b's lever ")
        for suffix, target in (("", "service-sglang"), ("-b", "service-sglang-b")):
            assert f'"target": "{target}"' in (out / f"start-phases{suffix}.jsonl").read_text()
            assert not (out / f"start-phases{suffix}.md").exists()
            assert list((out / f"timeline{suffix}").glob("events_coordinator_*.jsonl.gz"))
            first_audio = "137.0" if target == "service-sglang" else "200.0"
            assert f"first audio       1    {first_audio}" in (out / f"timeline{suffix}/phases.txt").read_text()
    progress = (tmp_path / "out/progress.txt").read_text()
    assert "r1 start (G: " in progress and "; service-sglang-b S: baseline" in progress and "failed" not in progress
    assert "r3: A and B run one lever: an A/A round\n" in progress
    assert "r1: A and B" not in progress and "r2: A and B" not in progress


def test_a_sglang_pairs_second_server_is_read_from_its_own_pid_file(tmp_path: Path) -> None:
    """The second server's threads are read from side-by-side.sh's pid file of `service-sglang-b` (its port's), not
    the first server's: each under a line that names it."""
    port = 20000 + os.getpid() % 30000  # a pid file no other run here writes
    pid_file = Path(f"/tmp/speech-server-{port}.pid")
    server = subprocess.Popen(["sleep", "30"], start_new_session=True)  # a process group of its own, as a server's
    try:
        pid_file.write_text(f"{server.pid}\n")
        done = run(
            tmp_path,
            TARGET="service-sglang-pair",
            VARIANTS="r1:S/S",
            LEVER_S="",
            BASE_ENV="CUDA_VISIBLE_DEVICES=0",
            BASE_ENV_B="CUDA_VISIBLE_DEVICES=1",
            SERVICE_SGLANG_B_PORT=str(port),
            SERVER_B_PIDFILE="",  # side-by-side.sh's own name for it
            SWEEPS="steady-c32",
        )
        assert done.returncode == 0, done.stdout + done.stderr
    finally:
        server.kill()
        server.wait()
        pid_file.unlink(missing_ok=True)
    lines = (tmp_path / "out/r1/cpu-after-c32.txt").read_text().splitlines()
    assert lines[:3] == ["# server service-sglang", "# server service-sglang-b", f"# pid {server.pid}: sleep 30 "]


@pytest.mark.parametrize("target", ["service-pair", "service-sglang-pair"])
@pytest.mark.parametrize(
    ("base_env", "base_env_b"),
    [
        ("CUDA_VISIBLE_DEVICES=0", ""),
        ("CUDA_VISIBLE_DEVICES=0", "CPUS=16-29"),
        ("CUDA_VISIBLE_DEVICES=1", "CUDA_VISIBLE_DEVICES=1 CPUS=16-29"),
        ("CPUS=0-13", "CUDA_VISIBLE_DEVICES=1"),
    ],
)
def test_a_pair_without_a_gpu_of_its_own_for_each_server_is_refused_before_anything_starts(
    tmp_path: Path, target: str, base_env: str, base_env_b: str
) -> None:
    """Two sglang engines at their memory share cannot both start on one GPU, and two omni services on one would
    measure each other: a pair names a GPU for each server, different ones."""
    done = run(tmp_path, TARGET=target, VARIANTS="r1:S/S", LEVER_S="", BASE_ENV=base_env, BASE_ENV_B=base_env_b)
    assert done.returncode == 64 and "GPUs of their own" in done.stderr, done.stdout + done.stderr
    assert not (tmp_path / "calls").exists()


def test_a_pair_that_runs_one_profile_and_one_lever_on_both_sides_says_it_is_an_a_a_round(tmp_path: Path) -> None:
    """B's profile is A's with B_PROFILE_SET on top, so PROFILE_SET alone changes both: a round meant as a swap that
    runs the same on both sides says so as it starts sweeping."""
    for profile_b, variant, same in (("a", "r1:F/F", True), ("b", "r1:F/F", False), ("a", "r1:F/X", False)):
        out = f"out-{profile_b}-{variant[3:].replace('/', '')}"
        done = run(
            tmp_path,
            out=out,
            TARGET="service-pair",
            VARIANTS=variant,
            BASE_ENV="CUDA_VISIBLE_DEVICES=0",
            BASE_ENV_B="CUDA_VISIBLE_DEVICES=1",
            LEVER_F="SPEECH_OMNI__TALKER_MODEL=fused",
            LEVER_X="SPEECH_OMNI__TALKER_MODEL=service",
            TIMELINE_LEVELS="",
            STANDIN_PROFILE_B=profile_b,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        progress = (tmp_path / out / "progress.txt").read_text()
        assert "r1 ready" in progress
        assert ("r1: A and B run one profile and one lever: an A/A round" in progress) is same, progress


def test_sweeps_choose_which_sweeps_a_round_runs_in_their_own_order_and_an_unknown_one_is_refused(
    tmp_path: Path,
) -> None:
    done = run(tmp_path, VARIANTS="a1:A", LEVER_A="", SWEEPS="steady-c32 c1 bench-first")
    assert done.returncode == 0, done.stdout + done.stderr
    recorded = calls(tmp_path)
    assert [(call[0], call[2]) for call in recorded if call[0].startswith("sweep-")] == [
        ("sweep-bench", "first-c32"),
        ("sweep-closed", "c1"),
        ("sweep-closed", "c32"),
    ]
    progress = (tmp_path / "out/progress.txt").read_text()
    assert "a1 burst c8" not in progress and "a1 bench again-c32" not in progress and "a1 steady c32" in progress
    refused = run(tmp_path, out="other", VARIANTS="a1:A", LEVER_A="", SWEEPS="c1 c2")
    assert refused.returncode == 64 and "SWEEPS: 'c2'" in refused.stderr
    assert not (tmp_path / "other").exists() or not any((tmp_path / "other").iterdir())


def test_a_steady_64_streams_is_a_sweep_of_its_own_after_steady_c32_and_not_run_unless_named(tmp_path: Path) -> None:
    """A lever against streams running dry at 64 at once needs that level, which the default sweeps leave out (a
    round's time): named, it runs after steady c=32, 384 requests spread as the steady levels' are."""
    done = run(tmp_path, VARIANTS="a1:A", LEVER_A="", SWEEPS="steady-c64 c1 steady-c32")
    assert done.returncode == 0, done.stdout + done.stderr
    closed = [call for call in calls(tmp_path) if call[0] == "sweep-closed"]
    assert [(call[2], call[3], call[4]) for call in closed] == [
        ("c1", "1", "16"),
        ("c32", "32", "128"),
        ("c64", "64", "384"),
    ]
    assert "a1 steady c64" in (tmp_path / "out/progress.txt").read_text()
    default = run(tmp_path, out="default", VARIANTS="a1:A", LEVER_A="")
    assert default.returncode == 0, default.stdout + default.stderr
    assert "steady c64" not in (tmp_path / "default/progress.txt").read_text()


def test_the_benchmark_at_one_and_eight_streams_runs_after_c1_where_named_and_not_by_default(tmp_path: Path) -> None:
    """A lever that changes only what few streams run is refereed where it acts: vllm-omni's benchmark at 1 and 8
    streams, named in SWEEPS (the default sweeps leave them out: a round's time)."""
    done = run(tmp_path, VARIANTS="a1:A", LEVER_A="", SWEEPS="bench-c8 steady-c8 bench-c1 c1 bench-first")
    assert done.returncode == 0, done.stdout + done.stderr
    swept = [(call[0], call[2], call[3]) for call in calls(tmp_path) if call[0].startswith("sweep-")]
    assert swept == [
        ("sweep-bench", "first-c32", "32"),
        ("sweep-closed", "c1", "1"),
        ("sweep-bench", "c1", "1"),
        ("sweep-bench", "c8", "8"),
        ("sweep-closed", "c8", "8"),
    ]
    assert "a1 bench c1" in (tmp_path / "out/progress.txt").read_text()
    default = run(tmp_path, out="default", VARIANTS="a1:A", LEVER_A="")
    assert default.returncode == 0, default.stdout + default.stderr
    assert "bench c1" not in (tmp_path / "default/progress.txt").read_text()
    assert "bench c8" not in (tmp_path / "default/progress.txt").read_text()


def test_the_omni_engines_request_timeline_is_recorded_at_each_timeline_level_and_read_into_its_phases(
    tmp_path: Path,
) -> None:
    """TORCH_PROFILE=1 on the omni engine: before the profiles, the request timeline over each of TIMELINE_LEVELS
    (all at once), each server's events kept gzipped and read by deploy/gpu/omni_timeline.py into
    timeline-c<level>.md (service-b's with -b). At one stream, a warm-up request first: without one, the first
    target's first request took 78-95 ms against 32-39 on an H200 pair (the load tool's own first request)."""
    done = run(
        tmp_path,
        TARGET="service-pair",
        VARIANTS="r1:F/F",
        LEVER_F="",
        BASE_ENV="CUDA_VISIBLE_DEVICES=0",
        BASE_ENV_B="CUDA_VISIBLE_DEVICES=1",
        TORCH_PROFILE="1",
        PROFILE_LEVELS="1",
        TIMELINE_LEVELS="1:16 32:64",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    recorded = calls(tmp_path)
    timelines = [[*call[2:6], call[14]] for call in recorded if call[0] == "profile" and call[5] == "1"]
    assert timelines == [["tl-c1", "1", "16", "1", "1"], ["tl-c32", "32", "64", "1", "0"]]
    profiles = [call[2] for call in recorded if call[0] == "profile"]
    assert profiles == ["tl-c1", "tl-c32", "c1"]  # the timelines before the profiler
    out = tmp_path / "out/r1"
    for suffix in ("", "-b"):
        table = (out / f"timeline-c32{suffix}.md").read_text()
        assert "| first audio | 1 | 41.0 | 41.0 | 41.0 |" in table and "| talker | 1 | 20.0 |" in table
    kept = sorted(str(path.relative_to(out / "timeline")) for path in (out / "timeline").rglob("*.gz"))
    assert "service-b-c1/events_talker_6.jsonl.gz" in kept and len(kept) == 8
    again = subprocess.run(
        [sys.executable, "deploy/gpu/omni_timeline.py", str(out / "timeline/service-c32")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=True,
    )
    assert "| first audio | 1 | 41.0 |" in again.stdout  # what was kept reads as the run left it
    assert "r1 timeline c32" in (tmp_path / "out/progress.txt").read_text()


def test_a_timeline_level_with_a_stagger_records_a_steady_load_under_a_name_of_its_own(tmp_path: Path) -> None:
    """TIMELINE_LEVELS' level:requests:stagger: the requests spread over that many seconds a round, as the steady
    levels' are, not all at once (a stream's second window at a steady 64 waits where a burst's does not), into
    timeline-c<level>-steady.md beside a burst's of the same level."""
    done = run(
        tmp_path,
        TARGET="service",
        VARIANTS="a1:A",
        LEVER_A="",
        TORCH_PROFILE="1",
        PROFILE_LEVELS="",
        TIMELINE_LEVELS="64:64 64:192:2",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    timelines = [[*call[2:5], call[19]] for call in calls(tmp_path) if call[0] == "profile"]
    assert timelines == [["tl-c64", "64", "64", "--stagger 0"], ["tl-c64-steady", "64", "192", "--stagger 2"]]
    out = tmp_path / "out/a1"
    assert "| first audio | 1 | 41.0 |" in (out / "timeline-c64-steady.md").read_text()
    assert (out / "timeline-c64.md").exists() and (out / "timeline/service-c64-steady").is_dir()
    assert "a1 timeline c64 steady" in (tmp_path / "out/progress.txt").read_text()
    refused = run(tmp_path, out="other", VARIANTS="a1:A", LEVER_A="", TORCH_PROFILE="1", TIMELINE_LEVELS="64:x:2")
    assert refused.returncode == 64 and "TIMELINE_LEVELS: '64:x:2'" in refused.stderr
    # levels asked for without the stages' profiler would be left out silently: a run's timeline lost, found after
    unrecorded = run(tmp_path, out="third", TARGET="service", VARIANTS="a1:A", LEVER_A="", TIMELINE_LEVELS="64:192:2")
    assert unrecorded.returncode == 64 and "TIMELINE_LEVELS needs TORCH_PROFILE=1" in unrecorded.stderr
    assert not (tmp_path / "third").exists()


def test_switch_rounds_sweep_each_rounds_levels_in_one_start_with_its_levers_written_first(tmp_path: Path) -> None:
    """SWITCH_ROUNDS: one start a variant, with the lever switch file among its settings and the first round's levers
    in it; then each round's levels and timeline into a folder of its own, the round's levers written before them;
    the second benchmark once, after the last round, and the stop."""
    done = run(
        tmp_path,
        TARGET="service",
        VARIANTS="v1:S",
        LEVER_S="SPEECH_OMNI__PROMPT_BATCH=true SPEECH_OMNI__FRAMES_AS_LISTS=true",
        SWITCH_ROUNDS=" s0:prompt_batch a1: s1:prompt_batch b1:prompt_batch,frames_as_lists a2:",  # as a list wraps
        SWITCH_SETTLE_S="0",
        TORCH_PROFILE="1",
        PROFILE_LEVELS="",
        TIMELINE_LEVELS="32:64",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    recorded = calls(tmp_path)
    switch = tmp_path / "out/v1/lever-switch"
    assert recorded[0][0] == "start" and recorded[0][1] == "v1" and recorded[0][18] == "prompt_batch"  # s0's
    assert recorded[0][9] == (
        "CUDA_VISIBLE_DEVICES=0 SPEECH_OMNI__PROMPT_BATCH=true SPEECH_OMNI__FRAMES_AS_LISTS=true"
        f" SPEECH_OMNI__LEVER_SWITCH_FILE={switch}"
    )
    levels = ["first-c32", "c1", "burst-c8", "burst-c32", "c8", "c32", "tl-c32"]
    rounds = [
        ("s0", "prompt_batch"),
        ("a1", ""),
        ("s1", "prompt_batch"),
        ("b1", "prompt_batch frames_as_lists"),
        ("a2", ""),
    ]
    assert [(call[1], call[2], call[18]) for call in recorded[1:-2]] == [
        (round_, level, levers) for round_, levers in rounds for level in levels
    ]
    assert [call[:3] for call in recorded[-2:]] == [["sweep-bench", "v1", "again-c32"], ["stop", "v1", ""]]
    out = tmp_path / "out/v1"
    assert (out / "s1/timeline-c32.md").read_text().count("| first audio | 1 | 41.0 |") == 1
    assert (out / "a2/timeline/service-c32/events_talker_6.jsonl.gz").exists()
    progress = (tmp_path / "out/progress.txt").read_text()
    assert "v1/s1 round: levers prompt_batch" in progress and "v1/b1 steady c32" in progress
    assert "v1 bench again-c32" in progress and "failed" not in progress


def test_a_switch_round_that_would_end_past_the_deadline_is_skipped_and_the_variant_still_stops(tmp_path: Path) -> None:
    done = run(
        tmp_path,
        TARGET="service",
        VARIANTS="v1:S",
        LEVER_S="SPEECH_OMNI__PROMPT_BATCH=true",
        SWITCH_ROUNDS="s1:prompt_batch",  # one round: the start's allowance counts the rounds after the first
        SWITCH_SETTLE_S="0",
        UNTIL=str(int(time.time()) + 700),
        FIRST_S="10",
        MIN_START_S="1",
        ROUND_S="800",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    progress = (tmp_path / "out/progress.txt").read_text()
    assert "v1/s1 round skipped: 800 s would not fit" in progress
    assert [call[0] for call in calls(tmp_path)] == ["start", "sweep-bench", "stop"]


@pytest.mark.parametrize(
    ("sweeps", "round_s"), [("c1 steady-c64", 150), ("c1 bench-c1 bench-c8 steady-c64", 180)], ids=["c64", "c64+bench"]
)
def test_a_round_with_longer_levels_is_expected_to_take_them_longer(tmp_path: Path, sweeps: str, round_s: int) -> None:
    """steady-c64 adds about 30 s to each round's levels, and the benchmark at 1 and 8 streams about 30 more: the
    rounds' estimate (ROUND_S unless set) grows with them."""
    done = run(
        tmp_path,
        TARGET="service",
        VARIANTS="v1:S",
        LEVER_S="SPEECH_OMNI__PROMPT_BATCH=true",
        SWITCH_ROUNDS="a1: s1:prompt_batch a2: s2:prompt_batch a3: s3:prompt_batch",
        SWITCH_SETTLE_S="0",
        SWEEPS=sweeps,
        UNTIL=str(int(time.time()) + 700),
        FIRST_S="10",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"of 6 rounds of {round_s} s fit before the deadline" in (tmp_path / "out/progress.txt").read_text()


def test_two_timeline_levels_of_one_name_are_refused_before_anything_starts(tmp_path: Path) -> None:
    done = run(tmp_path, VARIANTS="a1:A", LEVER_A="", TORCH_PROFILE="1", TIMELINE_LEVELS="64:192:2 64:128:3")
    assert done.returncode == 64 and "TIMELINE_LEVELS: two levels of c64-steady" in done.stderr


def test_many_switch_rounds_leave_the_start_its_time_and_the_deadline_drops_the_last_rounds(tmp_path: Path) -> None:
    """Nine rounds of 120 s before a deadline 700 s away: the start is kept time for two rounds only (a lever beside
    its baseline), not starved by rounds the deadline would skip anyway (it was given 700 - 180 - 8 x 120 < 0 s and
    skipped), and how many rounds fit is said before the first."""
    rounds = "a1: s1:prompt_batch a2: s2:prompt_batch a3: s3:prompt_batch a4: s4:prompt_batch a5:"
    done = run(
        tmp_path,
        TARGET="service",
        VARIANTS="v1:S",
        LEVER_S="SPEECH_OMNI__PROMPT_BATCH=true",
        SWITCH_ROUNDS=rounds,
        SWITCH_SETTLE_S="0",
        UNTIL=str(int(time.time()) + 700),
        FIRST_S="10",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    recorded = calls(tmp_path)
    assert recorded[0][0] == "start"
    assert 370 <= int(recorded[0][8]) <= 400  # the deadline less the sweeps' allowance and one round more
    progress = (tmp_path / "out/progress.txt").read_text()
    assert "v1: about 5 of 9 rounds of 120 s fit before the deadline" in progress
    assert "v1/a1 round: levers" in progress and "failed" not in progress


def test_a_lever_on_by_default_may_be_switched_and_each_round_without_a_lever_its_variant_turns_on_is_said(
    tmp_path: Path,
) -> None:
    """The prompts built together and the frames kept as lists are on by default: switched without being set, they
    are accepted; and since a round runs without every lever it does not name, the rounds without each lever a variant
    turns on are said up front (a baseline round then lacks the shipped defaults)."""
    done = run(
        tmp_path,
        TARGET="service",
        VARIANTS="v1:S",
        LEVER_S="",
        SWITCH_ROUNDS="a1: b1:prompt_batch t1:prompt_batch,frames_as_lists",
        SWITCH_SETTLE_S="0",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    said = done.stdout + done.stderr
    assert "v1: prompt_batch is on by its settings (by default), but off in the rounds that do not name it: a1" in said
    assert (
        "v1: frames_as_lists is on by its settings (by default), but off in the rounds that do not name it: a1 b1"
        in said
    )
    assert [(call[1], call[18]) for call in calls(tmp_path) if call[2] == "c1"] == [
        ("a1", ""),
        ("b1", "prompt_batch"),
        ("t1", "prompt_batch frames_as_lists"),
    ]


def test_switch_rounds_it_cannot_run_are_refused_before_anything_starts(tmp_path: Path) -> None:
    on = "SPEECH_OMNI__FRAMES_AS_LISTS=true"
    for target, rounds, lever, said in [
        ("service", "a1: s1:fused_kernels", on, "is not round:LEVERS"),
        ("service", "a1: ..:prompt_batch", on, "is not round:LEVERS"),  # its results would land outside the variant
        ("service", "a1: a1:prompt_batch", on, "the round 'a1' is named twice, or as a variant's folder"),
        ("service", "a1: logs:prompt_batch", on, "the round 'logs' is named twice, or as a variant's folder"),
        # py-spy's folder where PYSPY_LEVEL names several levels
        ("service", "a1: pyspy-c1:prompt_batch", on, "the round 'pyspy-c1' is named twice, or as a variant's folder"),
        ("service-sglang", "a1: s1:prompt_batch", on, "TARGET=service only"),
        # switched but never on: every round would measure the baseline
        (
            "service",
            "a1: b1:prompt_batch",
            f"{on} SPEECH_OMNI__PROMPT_BATCH=false",  # on by default: off only when set so
            "switches prompt_batch, which the variant v1 does not turn on",
        ),
    ]:
        done = run(tmp_path, TARGET=target, VARIANTS="v1:S", LEVER_S=lever, SWITCH_ROUNDS=rounds)
        assert done.returncode == 64, rounds
        assert said in done.stderr, done.stderr
    assert not (tmp_path / "calls").exists()


def profiled_run(tmp_path: Path, **more: str) -> subprocess.CompletedProcess[str]:
    """One variant of the service, its c=1 round profiled (`more` on top)."""
    settings = {"TARGET": "service", "TORCH_PROFILE": "1", "PROFILE_LEVELS": "1", "VARIANTS": "f1:F", "LEVER_F": ""}
    return run(tmp_path, **(settings | more))


def test_profile_levels_choose_which_rounds_are_profiled(tmp_path: Path) -> None:
    """PROFILE_LEVELS="1": only the one-request window is profiled (a run short of time keeps the c=1 profile, where a
    request's first audio is made, and skips the c=8 one)."""
    done = profiled_run(tmp_path, TIMELINE_LEVELS="")
    assert done.returncode == 0, done.stdout + done.stderr
    profiles = [[call[0], *call[2:5]] for call in calls(tmp_path) if call[0] == "profile"]
    assert profiles == [["profile", "c1", "1", "1"]]
    assert (tmp_path / "out/f1/profile-c1.md").exists() and not (tmp_path / "out/f1/profile-c8.md").exists()


def test_empty_profile_levels_keep_the_timeline_and_profile_nothing(tmp_path: Path) -> None:
    """PROFILE_LEVELS="": the omni engine's request timeline only (the profiler's directory set, no PyTorch profile:
    a profiled window with Python stacks took minutes to write on a GPU)."""
    done = profiled_run(tmp_path, PROFILE_LEVELS="")
    assert done.returncode == 0, done.stdout + done.stderr
    assert [call for call in calls(tmp_path) if call[0] == "profile" and not call[2].startswith("tl-")] == []
    assert "f1 timeline c1" in (tmp_path / "out/progress.txt").read_text()
    assert not list((tmp_path / "out/f1").glob("profile-c*.md"))


def test_a_profile_body_makes_the_profiled_requests_short_and_nothing_else(tmp_path: Path) -> None:
    """PROFILE_EXTRA_BODY: the profiled rounds' requests only (a window of a few steps, short enough for a trace with
    Python stacks), every sweep keeping EXTRA_BODY's."""
    short = '{"stream_format": "audio", "max_new_tokens": 4}'
    done = profiled_run(tmp_path, PROFILE_EXTRA_BODY=short, PROFILE_FRAMES="3", EXTRA_BODY='{"max_new_tokens": 101}')
    assert done.returncode == 0, done.stdout + done.stderr
    bodies = {(call[0], call[2]): call[13] for call in calls(tmp_path) if call[0] in ("profile", "sweep-closed")}
    assert bodies[("profile", "c1")] == short
    assert {body for (phase, name), body in bodies.items() if not (phase, name) == ("profile", "c1")} == {
        '{"max_new_tokens": 101}'
    }


def test_a_summary_that_takes_too_long_is_stopped_and_the_round_finishes(tmp_path: Path) -> None:
    """SUMMARY_TIMEOUT_S: a trace too large to summarise in time (one whole request with Python stacks kept a GPU
    round in that step for more than six minutes) is given up, saying so, and the round still stops its servers and
    keeps its start phases."""
    slow = tmp_path / "slow_summary.py"
    slow.write_text("import time\ntime.sleep(60)\n")
    done = profiled_run(tmp_path, TIMELINE_LEVELS="", TRACE_SUMMARY=str(slow), SUMMARY_TIMEOUT_S="1")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "stopped after 1 s" in (tmp_path / "out/f1/profile-c1.md").read_text()  # timeout's own status, 124
    assert "f1 stopped after" in (tmp_path / "out/progress.txt").read_text()
    assert (tmp_path / "out/f1/start-phases.md").exists()


def test_keep_traces_keeps_each_profiled_windows_traces_gzipped_beside_its_summary(tmp_path: Path) -> None:
    """KEEP_TRACES=1: the traces a window wrote, gzipped under traces/<server>-c<level>/ in their own folders, for a
    later look (the summary alone cannot be asked a new question); the profiler's folder emptied all the same."""
    done = profiled_run(tmp_path, KEEP_TRACES="1")
    assert done.returncode == 0, done.stdout + done.stderr
    kept = tmp_path / "out/f1/traces/service-c1/stage0.json.gz"
    assert '"gemv_add"' in gzip.decompress(kept.read_bytes()).decode()
    assert (tmp_path / "out/f1/profile-c1.md").exists()
    assert not [path for path in (tmp_path / "profiles/f1/service").rglob("*") if path.is_file()]


def test_the_service_on_sglang_profiled_keeps_its_request_timeline_and_each_profiles_summary(tmp_path: Path) -> None:
    """TORCH_PROFILE=1 on the sglang engine: its request timeline as before, then the PyTorch profiler's c=1 and c=8
    windows, each summarised per frame and deleted, the timeline's events kept."""
    done = run(tmp_path, TORCH_PROFILE="1", VARIANTS="a1:A", LEVER_A="")
    assert done.returncode == 0, done.stdout + done.stderr
    profiles = [[call[0], *call[2:6]] for call in calls(tmp_path) if call[0] == "profile"]
    assert profiles == [
        ["profile", "tl-c32", "32", "64", "1"],
        ["profile", "c1", "1", "1", ""],
        ["profile", "c8", "8", "8", ""],
    ]
    out = tmp_path / "out/a1"
    # one 40 ms kernel: 0.400 ms a frame over c=1's 100 frames, 0.050 over c=8's 800
    for level, per_frame in (("1", "0.400"), ("8", "0.050")):
        assert f"| `gemv_add` | 1 | 40.00 | 40000.0 | {per_frame} |" in (out / f"profile-c{level}.md").read_text()
    assert list((out / "timeline").glob("events_coordinator_*.jsonl.gz"))
    assert not list((tmp_path / "profiles/a1/service-sglang").rglob("*.json"))
    assert "failed" not in (tmp_path / "out/progress.txt").read_text()


def test_the_sweeps_run_on_the_load_tools_cores_and_the_server_starts_on_its_own(tmp_path: Path) -> None:
    cores = os.sched_getaffinity(0)
    load = str(min(cores))
    done = run(tmp_path, VARIANTS="a1:A", BASE_ENV=f"CPUS=0-13 LOAD_CPUS={load}", LEVER_A="")
    assert done.returncode == 0, done.stdout + done.stderr
    pinned = {call[0]: call[7] for call in calls(tmp_path)}
    assert pinned["sweep-bench"] == pinned["sweep-closed"] == pinned["profile"] == load
    # side-by-side.sh pins the server itself (CPUS); the start and the stop run where the script does
    assert pinned["start"] != load or len(cores) == 1
    assert "failed" not in (tmp_path / "out/progress.txt").read_text()


def test_a_step_that_fails_says_so_and_the_variant_goes_on(tmp_path: Path) -> None:
    """Cores the machine lacks make every pinned sweep fail: each says its exit status, and the variant still stops."""
    done = run(tmp_path, VARIANTS="a1:A", BASE_ENV="LOAD_CPUS=4095", LEVER_A="")
    assert done.returncode == 0, done.stdout + done.stderr
    progress = (tmp_path / "out/progress.txt").read_text()
    for step in ("bench first-c32", "c1", "burst c8", "burst c32", "steady c8", "steady c32", "timeline"):
        assert f"a1 {step} (failed, rc " in progress
    assert [call[0] for call in calls(tmp_path)] == ["start", "stop"]


def test_each_thread_of_the_servers_processes_is_read_before_and_after_the_steady_level(tmp_path: Path) -> None:
    server = subprocess.Popen(["sleep", "30"], start_new_session=True)  # a process group of its own, as a server's
    try:
        (tmp_path / "server.pid").write_text(f"{server.pid}\n")
        done = run(tmp_path, VARIANTS="a1:A", LEVER_A="", SERVER_PIDFILE=str(tmp_path / "server.pid"))
        assert done.returncode == 0, done.stdout + done.stderr
    finally:
        server.kill()
        server.wait()
    for when in ("before", "after"):
        lines = (tmp_path / f"out/a1/cpu-{when}-c32.txt").read_text().splitlines()
        assert lines[0] == f"# pid {server.pid}: sleep 30 "
        tid, name, utime, stime, cpu = lines[1].split("\t")
        assert (tid, name) == (str(server.pid), "sleep")
        assert utime.isdigit() and stime.isdigit() and cpu.isdigit()


def py_spy_stand_in(tmp_path: Path, stack: str) -> Path:
    """A `py-spy` on a PATH folder of its own (returned) that writes what `py-spy record -f raw -o FILE` would, `stack`
    (one raw line: the thread, its frames and a sample count), and logs its arguments to py-spy-args."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    stand_in = bin_dir / "py-spy"
    stand_in.write_text(
        "#!/usr/bin/env bash\n"
        f'echo "$*" >> {tmp_path}/py-spy-args\n'
        'while [ $# -gt 0 ]; do [ "$1" = -o ] && out=$2; shift; done\n'
        f"printf '%s\\n' '{stack}' > \"$out\"\n"
    )
    stand_in.chmod(0o755)
    return bin_dir


def py_spy_run(tmp_path: Path, bin_dir: Path, levels: str) -> subprocess.Popen[bytes]:
    """One variant run with PYSPY_LEVEL=`levels` and the py-spy of `bin_dir`, beside a stand-in server (`sleep 30`,
    stopped once the run is done): that server's process, for its pid."""
    server = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        (tmp_path / "server.pid").write_text(f"{server.pid}\n")
        done = run(
            tmp_path, VARIANTS="a1:A", LEVER_A="", PYSPY="1", PYSPY_AFTER_S="0", PYSPY_LEVEL=levels,
            SERVER_PIDFILE=str(tmp_path / "server.pid"), PATH=f"{bin_dir}:{os.environ['PATH']}",
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
    finally:
        server.kill()
        server.wait()
    return server


@pytest.mark.parametrize(
    ("level", "sweep", "concurrency", "requests", "seconds"),
    [
        ("steady-c32", "pyspy-c32", "32", "192", "8"),
        ("burst-c32", "pyspy-burst-c32", "32", "96", "4"),
        ("c1", "pyspy-c1", "1", "16", "6"),
    ],
)
def test_py_spy_records_every_server_process_in_the_middle_of_a_steady_level_and_says_where_its_gil_went(
    tmp_path: Path, level: str, sweep: str, concurrency: str, requests: str, seconds: str
) -> None:
    """PYSPY=1: an extra steady c=32 (not reported) with py-spy on each of the server's processes once the workers are
    all sending, the recordings kept gzipped and summarised in pyspy.md, each process named from the thread table.
    PYSPY_LEVEL=burst-c32: a burst of 32 instead, recorded for 4 s from before the load tool starts; c1: 16 requests
    one after another, recorded for 6 s."""
    bin_dir = py_spy_stand_in(  # 1 200 samples on one stack
        tmp_path,
        "thread (7): MainThread;run (vllm/v1/engine/core.py:9);"
        "preprocess_decode_batch (vllm_omni/model_executor/models/qwen3_tts/qwen3_tts_talker.py:1101) 1200",
    )
    server = py_spy_run(tmp_path, bin_dir, level)
    recorded = calls(tmp_path)
    extra = [call for call in recorded if call[2] == sweep]
    assert [[call[0], *call[3:5]] for call in extra] == [["sweep-closed", concurrency, requests]]
    assert [call[0] for call in recorded][-2:] == ["sweep-closed", "stop"]
    out = tmp_path / "out/a1"
    with gzip.open(out / f"pyspy/{server.pid}.txt.gz", "rt") as raw:
        assert raw.read().endswith(" 1200\n")
    summary = (out / "pyspy.md").read_text()
    assert f"## pid {server.pid}: `sleep 30`" in summary
    window = 200 * int(seconds)
    assert f"1200 samples, {100 * 1200 // window}% of the window's {window}." in summary
    assert "| vllm-omni | 1200 | 100% |" in summary
    assert f"a1 py-spy {level}" in (tmp_path / "out/progress.txt").read_text()
    # the GIL's holder only, idle-looking frames included, each thread named, in the raw format the summary reads
    words = (tmp_path / "py-spy-args").read_text().split()
    assert {"record", "--gil", "--idle", "--threads", "--nonblocking"} <= set(words)
    assert words[words.index("-f") + 1] == "raw" and words[words.index("--pid") + 1] == str(server.pid)
    assert words[words.index("-d") + 1] == seconds


def test_several_py_spy_levels_run_one_after_another_each_into_its_own_folder_and_summary(tmp_path: Path) -> None:
    """PYSPY_LEVEL="c1 burst-c32": one stream, then a burst, each recorded into pyspy-<level>/ and summarised in
    pyspy-<level>.md (one level keeps pyspy/ and pyspy.md); a level not known is refused before anything starts."""
    bin_dir = py_spy_stand_in(tmp_path, "thread (7): MainThread;run (vllm/v1/engine/core.py:9) 600")
    server = py_spy_run(tmp_path, bin_dir, "c1 burst-c32")
    sweeps = [call[2] for call in calls(tmp_path) if call[2].startswith("pyspy")]
    assert sweeps == ["pyspy-c1", "pyspy-burst-c32"]
    out = tmp_path / "out/a1"
    for level in ("c1", "burst-c32"):
        assert (out / f"pyspy-{level}/{server.pid}.txt.gz").exists()
        assert f"## pid {server.pid}: `sleep 30`" in (out / f"pyspy-{level}.md").read_text()
    assert not (out / "pyspy").exists() and not (out / "pyspy.md").exists()
    progress = (tmp_path / "out/progress.txt").read_text()
    assert progress.index("a1 py-spy c1") < progress.index("a1 py-spy burst-c32")
    before = len(calls(tmp_path))
    refused = run(tmp_path, out="refused", VARIANTS="a1:A", LEVER_A="", PYSPY="1", PYSPY_LEVEL="c1 c32")
    assert refused.returncode == 64 and "PYSPY_LEVEL: 'c32' is not one of" in refused.stderr
    assert len(calls(tmp_path)) == before  # the refused run started nothing


@pytest.mark.parametrize(
    ("level", "sweep", "concurrency", "requests"),
    [("burst-c32", "pyspy-burst-c32", "32", "96"), ("c1", "pyspy-c1", "1", "16")],
)
def test_a_pairs_burst_or_single_stream_is_recorded_by_py_spy_on_the_first_servers_processes_alone(
    tmp_path: Path, level: str, sweep: str, concurrency: str, requests: str
) -> None:
    """A pair with PYSPY_LEVEL=burst-c32 or c1: the load tool runs the level's requests on A first, so py-spy records
    A's processes through it (B waits its turn, idle: not recorded); a steady level stays skipped in a pair (above)."""
    bin_dir = py_spy_stand_in(tmp_path, "thread (7): MainThread;run (vllm/v1/engine/core.py:9) 800")
    servers = [subprocess.Popen(["sleep", "30"], start_new_session=True) for _ in range(2)]
    try:
        for server, pidfile in zip(servers, ("server.pid", "server-b.pid"), strict=True):
            (tmp_path / pidfile).write_text(f"{server.pid}\n")
        done = run(
            tmp_path, TARGET="service-pair", VARIANTS="r1:F/F", LEVER_F="", BASE_ENV_B="CUDA_VISIBLE_DEVICES=1",
            TIMELINE_LEVELS="", PYSPY="1", PYSPY_LEVEL=level, SERVER_PIDFILE=str(tmp_path / "server.pid"),
            SERVER_B_PIDFILE=str(tmp_path / "server-b.pid"), PATH=f"{bin_dir}:{os.environ['PATH']}",
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
    finally:
        for server in servers:
            server.kill()
            server.wait()
    extra = [call for call in calls(tmp_path) if call[2] == sweep]
    assert [[call[0], *call[3:5]] for call in extra] == [["sweep-closed", concurrency, requests]]
    pids = [
        line.split()[line.split().index("--pid") + 1] for line in (tmp_path / "py-spy-args").read_text().splitlines()
    ]
    assert pids == [str(servers[0].pid)]
    assert f"## pid {servers[0].pid}: `sleep 30`" in (tmp_path / "out/r1/pyspy.md").read_text()
    progress = (tmp_path / "out/progress.txt").read_text()
    assert f"r1 py-spy {level}" in progress and "skipped" not in progress


def test_py_spy_records_the_start_of_the_server_and_its_processes_until_it_is_ready(tmp_path: Path) -> None:
    """START_PYSPY=1: once the start has written the new server's pid, py-spy records it and every process it starts,
    every thread, until the start returns (SIGINT, on which py-spy writes what it has); kept gzipped, summarised by
    process in start-pyspy.md (thread seconds at START_PYSPY_RATE samples a second)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    stand_in = bin_dir / "py-spy"  # on SIGINT writes what `py-spy record -f raw -o FILE --subprocesses` would
    stand_in.write_text(
        "#!/usr/bin/env python3\n"
        "import os, signal, sys, time\n"
        f"open({str(tmp_path / 'py-spy-args')!r}, 'a').write(' '.join(sys.argv[1:]) + '\\n')\n"
        # py-spy's Control-C handler (the ctrlc crate) refuses to replace an ignored SIGINT: it would never write
        "if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:\n"
        "    sys.exit(1)\n"
        "out = sys.argv[sys.argv.index('-o') + 1]\n"
        "def stop(*_):\n"
        "    with open(out, 'w') as raw:\n"
        "        raw.write('process 5:\"python3 -m app.cli\";thread (1): MainThread;<module> (app/cli.py:1);'\n"
        "                  'import_module (importlib/__init__.py:88) 40\\n')\n"
        "    sys.exit(0)\n"
        "signal.signal(signal.SIGINT, stop)\n"
        "open(os.environ['STANDIN_PIDFILE'] + '.ready', 'w').close()\n"
        "while True:\n"
        "    time.sleep(0.05)\n"
    )
    stand_in.chmod(0o755)
    pidfile = tmp_path / "server.pid"
    done = run(
        tmp_path, VARIANTS="a1:A", LEVER_A="", START_PYSPY="1", SERVER_PIDFILE=str(pidfile),
        STANDIN_PIDFILE=str(pidfile), PATH=f"{bin_dir}:{os.environ['PATH']}",
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    pid = pidfile.read_text().strip()
    words = (tmp_path / "py-spy-args").read_text().split()
    assert {"record", "--subprocesses", "--idle", "--threads", "--nonblocking"} <= set(words) and "--gil" not in words
    assert words[words.index("-r") + 1] == "20" and words[words.index("--pid") + 1] == pid
    out = tmp_path / "out/a1"
    with gzip.open(out / f"start-pyspy/{pid}.txt.gz", "rt") as raw:
        assert raw.read().endswith(" 40\n")
    summary = (out / "start-pyspy.md").read_text()
    assert "## pid 5: `python3 -m app.cli` (2.0 s of its threads' time)" in summary
    assert "| `import_module` (importlib/__init__.py) | 40 | 100% |" in summary
    assert "failed" not in (tmp_path / "out/progress.txt").read_text()


@pytest.mark.parametrize(
    ("rc", "said"), [("3", "a1 did not start within 1500 s (start.log)"), ("2", "a1 failed to start (rc 2, start.log)")]
)
def test_a_variant_that_does_not_start_is_stopped_its_log_kept_and_the_next_one_runs(
    tmp_path: Path, rc: str, said: str
) -> None:
    done = run(tmp_path, VARIANTS="a1:A b1:A", LEVER_A="", FAIL_START="a1", FAIL_RC=rc)
    assert done.returncode == 0, done.stdout + done.stderr
    assert [call[:2] for call in calls(tmp_path)][:3] == [["start", "a1"], ["stop", "a1"], ["start", "b1"]]
    assert said in (tmp_path / "out/progress.txt").read_text()
    assert (tmp_path / "out/a1/start-phases.jsonl").read_text().count("sglang engine") == 2
    assert (tmp_path / "out/a1/logs/service-sglang.log.gz").exists()


def test_a_variant_that_would_not_end_before_the_deadline_is_skipped_and_a_start_waits_only_what_is_left(
    tmp_path: Path,
) -> None:
    """The first variant is expected to take FIRST_S (a cold start), later ones LATER_S until one has run; a start
    waits at most until the deadline, less the sweeps' 180 s."""
    until = int(time.time()) + 300
    done = run(tmp_path, VARIANTS="a1:A b1:A", LEVER_A="", UNTIL=str(until), FIRST_S="400")
    assert done.returncode == 0, done.stdout + done.stderr
    assert not (tmp_path / "calls").exists()
    progress = (tmp_path / "out/progress.txt").read_text()
    assert "a1 skipped: 400 s would not fit" in progress and "b1 skipped: 400 s would not fit" in progress

    done = run(tmp_path, "out2", VARIANTS="a1:A b1:A", LEVER_A="", UNTIL=str(until), FIRST_S="10", LATER_S="400")
    assert done.returncode == 0, done.stdout + done.stderr
    recorded = calls(tmp_path)
    assert [call[1] for call in recorded] == ["a1"] * 10
    assert 90 <= int(recorded[0][8]) <= 120  # the deadline less the sweeps' allowance, not START_WAIT_S's 1500
    assert "b1 skipped: 400 s would not fit" in (tmp_path / "out2/progress.txt").read_text()


def test_a_variant_left_too_little_time_to_start_is_skipped_not_started_and_stopped(tmp_path: Path) -> None:
    """The deadline less the sweeps' allowance (180 s) leaves about 50 s: under MIN_START_S (90 by default) nothing
    starts, where a start given that little would be given up and stopped while its server still loads."""
    until = int(time.time()) + 230
    done = run(tmp_path, VARIANTS="a1:A", LEVER_A="", UNTIL=str(until), FIRST_S="10")
    assert done.returncode == 0, done.stdout + done.stderr
    assert not (tmp_path / "calls").exists()
    assert "under MIN_START_S=90" in (tmp_path / "out/progress.txt").read_text()

    until = int(time.time()) + 230  # afresh: however long the first run took
    done = run(tmp_path, "out2", VARIANTS="a1:A", LEVER_A="", UNTIL=str(until), FIRST_S="10", MIN_START_S="0")
    assert done.returncode == 0, done.stdout + done.stderr
    assert calls(tmp_path)[0][:2] == ["start", "a1"]


def test_once_a_variant_has_swept_a_later_start_keeps_back_what_the_sweeps_took_not_the_reckoned_allowance(
    tmp_path: Path,
) -> None:
    """The allowance kept back from a start for its sweeps is reckoned before any has run (180 s and more); once a
    variant has swept, a later start keeps back what its sweeps took, and a margin: on the GPU the reckoning (230 s
    with steady-c64 and a timeline level) was twice what a warm start's sweeps took (115 s), and skipped a start that
    would have fit."""
    until = int(time.time()) + 250
    done = run(
        tmp_path, VARIANTS="a1:A b1:A", LEVER_A="", UNTIL=str(until), FIRST_S="10", LATER_S="10", MIN_START_S="60"
    )
    assert done.returncode == 0, done.stdout + done.stderr
    starts = [call for call in calls(tmp_path) if call[0] == "start"]
    assert [call[1] for call in starts] == ["a1", "b1"]
    assert int(starts[0][8]) <= 70  # the deadline less the reckoned allowance: nothing has swept yet
    assert int(starts[1][8]) >= 150  # the deadline less a's sweeps (here a moment) and the margin

    # a variant one of whose steps failed is no guide (a failed step can end at once): the next start is reckoned
    until = int(time.time()) + 250
    done = run(
        tmp_path, "out2", VARIANTS="a1:A b1:A", LEVER_A="", UNTIL=str(until), FIRST_S="10", LATER_S="10",
        MIN_START_S="60", FAIL_PHASE="sweep-closed",
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "(failed, rc 1)" in (tmp_path / "out2/progress.txt").read_text()
    starts = [call for call in calls(tmp_path) if call[0] == "start"][2:]
    assert [call[1] for call in starts] == ["a1", "b1"]
    assert int(starts[1][8]) <= 70


def test_variants_it_cannot_run_are_refused_before_anything_starts(tmp_path: Path) -> None:
    for variants in ("a1:A b1:pre-cpu", "a1:A c1", "a1:A b1:B/1"):
        done = run(tmp_path, VARIANTS=variants, LEVER_A="")
        assert done.returncode == 64, variants
        assert "is not name:LEVER" in done.stderr
    (tmp_path / "out/b1").mkdir(parents=True)
    (tmp_path / "out/b1/lever.txt").write_text("an earlier run\n")
    done = run(tmp_path, VARIANTS="a1:A b1:A", LEVER_A="")
    assert done.returncode == 64
    assert "already holds results" in done.stderr
    assert not (tmp_path / "calls").exists()
