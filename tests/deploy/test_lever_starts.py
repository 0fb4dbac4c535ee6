"""deploy/gpu/lever-starts.sh: a lever's variants started one after another, each swept alike, with a stand-in for
side-by-side.sh (no GPU here) that records what each call was asked to do."""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "deploy/gpu/lever-starts.sh"


def stand_in_side_by_side(tmp_path: Path) -> Path:
    """One line per call: the phase and the settings side-by-side.sh reads for it. `start` fails for the variants named
    in FAIL_START; `profile` leaves a timeline's events where the service would."""
    script = tmp_path / "side-by-side.sh"
    script.write_text(
        "#!/usr/bin/env bash\n"
        'echo "$1|$(basename "$OUT")|${SWEEP_NAME-}|${CONCURRENCY-}|${REQUESTS-}|${TIMELINE-}|$SERVICE_SGLANG_ENV"'
        f" >> {tmp_path}/calls\n"
        "case $1 in\n"
        '  start) case " ${FAIL_START:-} " in *" $(basename "$OUT") "*) exit 3 ;; esac ;;\n'
        '  profile) mkdir -p "$PROFILER_DIR/service-sglang/$SWEEP_NAME"\n'
        '    echo \'{"request_id": "r1", "event": "x", "ts": 1.0}\''
        ' > "$PROFILER_DIR/service-sglang/$SWEEP_NAME/events_tts_engine_7.jsonl" ;;\n'
        '  stop) mkdir -p "$OUT/logs"\n'
        '    printf \'%s\\n\' \'{"message": "sglang engine starting"}\' \'{"message": "Decode batch"}\''
        ' \'{"message": "sglang engine ready", "total_s": 229.1}\' > "$OUT/logs/service-sglang.log" ;;\n'
        "esac\n"
    )
    script.chmod(0o755)
    return script


def run(tmp_path: Path, **settings: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "SIDE_BY_SIDE": str(stand_in_side_by_side(tmp_path)),
        "OUT": str(tmp_path / "out"),
        "PYTHON": sys.executable,
        "PYSPY": "0",
        "EVENTS_WAIT_S": "0",
        "SERVICE_SGLANG_PORT": "1",  # no server recorded there: no threads to read
        "PROFILES": str(tmp_path / "profiles"),
        **settings,
    }
    return subprocess.run([str(SCRIPT)], env=env, capture_output=True, text=True, cwd=ROOT, timeout=60)


def calls(tmp_path: Path) -> list[list[str]]:
    return [line.split("|") for line in (tmp_path / "calls").read_text().splitlines()]


def test_each_variant_starts_with_its_levers_settings_and_is_swept_alike_then_stopped(tmp_path: Path) -> None:
    a, b = "a1", "b1"
    done = run(
        tmp_path,
        VARIANTS=f"{a}:A {b}:B",
        BASE_ENV="CUDA_VISIBLE_DEVICES=0 CPUS=0-13",
        LEVER_A="",
        LEVER_B="SPEECH_SGLANG__PREPROCESSING=cpu",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    sweeps = [
        ["sweep-bench", "first-c32", "32", "", ""],
        ["sweep-closed", "burst-c8", "8", "32", ""],
        ["sweep-closed", "burst-c32", "32", "96", ""],
        ["sweep-closed", "c32", "32", "128", ""],
        ["profile", "tl-c32", "32", "64", "1"],
        ["stop", "", "", "", ""],
    ]
    recorded = calls(tmp_path)
    assert [call[:2] for call in recorded] == [
        [phase, name] for name in (a, b) for phase in ["start", *(s[0] for s in sweeps)]
    ]
    for name, settings in [
        (a, "CUDA_VISIBLE_DEVICES=0 CPUS=0-13 "),
        (b, "CUDA_VISIBLE_DEVICES=0 CPUS=0-13 SPEECH_SGLANG__PREPROCESSING=cpu"),
    ]:
        mine = [call for call in recorded if call[1] == name]
        assert {call[6] for call in mine} == {settings}
        assert [[call[0], *call[2:6]] for call in mine[1:]] == sweeps
        out = tmp_path / "out" / name
        assert (out / "lever.txt").read_text().startswith(f"{name}: lever {name[0].upper()}")
        # the timeline's events kept beside its phases
        with gzip.open(out / "timeline/events_tts_engine_7.jsonl.gz", "rt") as events:
            assert '"request_id": "r1"' in events.read()
        assert (out / "timeline/phases.txt").exists()
        # the engine's start phases read from its log, kept gzipped
        assert (out / "start-phases.jsonl").read_text().splitlines() == [
            '{"message": "sglang engine starting"}',
            '{"message": "sglang engine ready", "total_s": 229.1}',
        ]
        with gzip.open(out / "logs/service-sglang.log.gz", "rt") as log:
            assert "Decode batch" in log.read()
    progress = (tmp_path / "out/progress.txt").read_text()
    assert f"{a} stopped after" in progress and f"{b} stopped after" in progress and progress.endswith("done\n")


def test_a_variant_that_does_not_start_is_stopped_and_the_next_one_runs(tmp_path: Path) -> None:
    a, b = "a1", "b1"
    done = run(tmp_path, VARIANTS=f"{a}:A {b}:A", LEVER_A="", FAIL_START=a)
    assert done.returncode == 0, done.stdout + done.stderr
    assert [call[:2] for call in calls(tmp_path)][:3] == [["start", a], ["stop", a], ["start", b]]
    assert f"{a} did not start" in (tmp_path / "out/progress.txt").read_text()


def test_a_variant_that_would_not_end_before_the_deadline_is_skipped(tmp_path: Path) -> None:
    """The first variant is expected to take FIRST_S (a cold start), later ones LATER_S until one has run."""
    a, b = "a1", "b1"
    until = str(int(time.time()) + 100)
    done = run(tmp_path, VARIANTS=f"{a}:A {b}:A", LEVER_A="", UNTIL=until, FIRST_S="200")
    assert done.returncode == 0, done.stdout + done.stderr
    assert not (tmp_path / "calls").exists()
    progress = (tmp_path / "out/progress.txt").read_text()
    assert f"{a} skipped: 200 s would not fit" in progress and f"{b} skipped: 200 s would not fit" in progress

    done = run(tmp_path, VARIANTS=f"{a}:A {b}:A", LEVER_A="", UNTIL=until, FIRST_S="10", LATER_S="150")
    assert done.returncode == 0, done.stdout + done.stderr
    assert [call[1] for call in calls(tmp_path)] == [a] * 7
    assert f"{b} skipped: 150 s would not fit" in (tmp_path / "out/progress.txt").read_text()
