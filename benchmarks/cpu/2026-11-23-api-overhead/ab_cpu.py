"""Two (or more) source trees of this service, each served on the omni engine over the vllm-omni 0.26 fakes
(`python -m tests.fakes.omni_server`), driven one after another by `speech-loadtest` at one concurrency, in
interleaved rounds (A B, B A, A B, ...). Per target it reports the TTFA phases from the server's request log (p50 /
p95 ms, measured requests only), the API process's CPU seconds per request (all threads, and the event loop's main
thread, from /proc) and the garbage collector's pauses during the runs (`gc_probe.py`).

    python3 ab_cpu.py --model MODEL_DIR --out OUT [--rounds 4] [--concurrency 32] [--requests 320] [--warmup 32]
        [--server-args "--frames 100 --step-delay-s 0.25"] NAME=SOURCE_DIR NAME=SOURCE_DIR ...

Run it with the repository's .venv/bin/python (or set --venv); a SOURCE_DIR is a checkout (or `git archive` copy) of
the service; each is imported from its own directory. The tests/fakes of every tree should be the same.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> tuple[float, float]:
    """(whole process, main thread) CPU seconds."""

    def read(path: str) -> float:
        fields = Path(path).read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / TICK

    return read(f"/proc/{pid}/stat"), read(f"/proc/{pid}/task/{pid}/stat")


def percentile(values: list[float], q: float) -> float:
    values = sorted(values)
    k = (len(values) - 1) * q
    low = int(k)
    high = min(low + 1, len(values) - 1)
    return values[low] + (values[high] - values[low]) * (k - low)


def speech_records(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines() if '"speech request"' in line]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="a model directory from speech-make-model-dir (custom_voice)")
    parser.add_argument("--out", required=True)
    parser.add_argument("--venv", default=str(Path(sys.executable).parent))
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--requests", type=int, default=320)
    parser.add_argument("--warmup", type=int, default=32)
    parser.add_argument("--format", default="pcm")
    parser.add_argument("--stream-format", default="audio")
    parser.add_argument("--server-args", default="--frames 100 --step-delay-s 0.25")
    parser.add_argument("--deploy-config", default="deploy/vllm-omni/customvoice.yaml")
    parser.add_argument("--base-port", type=int, default=8200)
    parser.add_argument("targets", nargs="+", metavar="NAME=SOURCE_DIR")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    servers: dict[str, dict] = {}
    for index, target in enumerate(args.targets):
        name, source = target.split("=", 1)
        port = args.base_port + index
        env = {
            **os.environ,
            "SPEECH_HOST": "127.0.0.1",
            "SPEECH_PORT": str(port),
            "SPEECH_MODEL": args.model,
            "SPEECH_DEPLOY_CONFIG": str(Path(source, args.deploy_config).resolve()),
            "SPEECH_OMNI_WARMUP_BATCH_SIZES": "1",
            "SPEECH_VOICE_STORE": str(out / f"voices-{name}"),
            "GC_PROBE_OUT": str(out / f"{name}.gc.json"),
        }
        command = [f"{args.venv}/python", str(HERE / "gc_probe.py"), "tests.fakes.omni_server"]
        command += args.server_args.split()
        log = out / f"{name}.server.log"
        process = subprocess.Popen(command, cwd=source, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT)
        servers[name] = {"process": process, "port": port, "log": log, "gc": out / f"{name}.gc.json", "runs": []}
    try:
        for server in servers.values():
            for _ in range(300):
                try:
                    if urllib.request.urlopen(f"http://127.0.0.1:{server['port']}/ready", timeout=1).status == 200:
                        break
                except OSError:
                    time.sleep(0.1)
        names = list(servers)
        for round_ in range(args.rounds):
            for name in names if round_ % 2 == 0 else names[::-1]:
                server = servers[name]
                seen = len(speech_records(server["log"]))
                time.sleep(1.2)  # gc_probe writes once a second
                gc_before = json.loads(server["gc"].read_text())["pauses"]
                cpu_before = cpu_seconds(server["process"].pid)
                run_out = out / f"{name}-r{round_}"
                shutil.rmtree(run_out, ignore_errors=True)
                subprocess.run(
                    [
                        f"{args.venv}/speech-loadtest",
                        *("--target", f"http://127.0.0.1:{server['port']}", "--voice", "vivian"),
                        *("--format", args.format, "--stream-format", args.stream_format),
                        *("--concurrency", str(args.concurrency), "--requests", str(args.requests)),
                        *("--warmup", str(args.warmup), "--no-progress", "--out", str(run_out)),
                    ],
                    check=True,
                    stdout=subprocess.DEVNULL,
                )
                time.sleep(0.5)
                cpu_after = cpu_seconds(server["process"].pid)
                time.sleep(1.2)
                gc_after = json.loads(server["gc"].read_text())["pauses"]
                records = speech_records(server["log"])[seen:]
                client = json.loads((run_out / "results.json").read_text())["runs"][0]
                server["runs"].append(
                    {
                        "served": len(records),
                        "cpu_s": cpu_after[0] - cpu_before[0],
                        "main_thread_cpu_s": cpu_after[1] - cpu_before[1],
                        "gc": {g: [gc_after[g][i] - gc_before[g][i] for i in (0, 1)] for g in gc_after},
                        "records": records[args.warmup :],
                        "client_ttfa_s": client["ttfa_s"],
                        "client_rps": client["throughput_rps"],
                    }
                )
                per_request = 1000 * (cpu_after[0] - cpu_before[0]) / len(records)
                print(f"round {round_} {name}: {per_request:.2f} ms CPU/request", flush=True)
    finally:
        for server in servers.values():
            server["process"].send_signal(signal.SIGTERM)
        for server in servers.values():
            try:
                server["process"].wait(30)
            except subprocess.TimeoutExpired:
                server["process"].kill()

    summary = {}
    for name, server in servers.items():
        runs = server["runs"]
        phases: dict[str, list[float]] = {}
        for record in (r for run in runs for r in run["records"]):
            for phase, seconds in (record.get("ttfa_phases_s") or {}).items():
                phases.setdefault(phase, []).append(1000 * seconds)
            if "ttfa_s" in record:
                phases.setdefault("server_ttfa", []).append(1000 * record["ttfa_s"])
        summary[name] = {
            "measured_requests": sum(len(run["records"]) for run in runs),
            "phases_ms": {
                phase: {"p50": round(percentile(v, 0.5), 2), "p95": round(percentile(v, 0.95), 2)}
                for phase, v in phases.items()
            },
            "cpu_ms_per_request": [round(1000 * run["cpu_s"] / run["served"], 2) for run in runs],
            "main_thread_cpu_ms_per_request": [
                round(1000 * run["main_thread_cpu_s"] / run["served"], 2) for run in runs
            ],
            "gc_per_run": {
                g: {
                    "collections": round(statistics.mean(run["gc"][g][0] for run in runs), 1),
                    "pause_ms": round(statistics.mean(run["gc"][g][1] for run in runs), 1),
                }
                for g in ("0", "1", "2")
            },
            "client_ttfa_ms": [{q: round(1000 * run["client_ttfa_s"][q], 1) for q in ("p50", "p95")} for run in runs],
            "client_rps": [round(run["client_rps"], 2) for run in runs],
        }
        summary[name]["cpu_ms_per_request_median"] = statistics.median(summary[name]["cpu_ms_per_request"])
        summary[name]["main_thread_cpu_ms_per_request_median"] = statistics.median(
            summary[name]["main_thread_cpu_ms_per_request"]
        )
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
