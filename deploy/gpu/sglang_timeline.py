"""Where each request's first audio waited inside sglang-omni's pipeline, phase by phase, from the request events its
recorder writes (`events_<stage>_<pid>.jsonl`, plain or gzipped; the service records them on
`POST /admin/profile/start {"timeline": true}`, `sgl-omni serve` on `/start_request_profile`).

A phase is the time between two of a request's events (the first of each name): the preprocessing stage's work, the
wait in the talker's inbox until its scheduler thread takes it, the build and the wait in its queue, the prefill
that makes the first frame, the hop to the vocoder, the vocoder's queue and its first window's decode, the hop back
to the server's coordinator. Printed as p50/p95 ms over the requests that have both events; with --requests, one row
per request (times after its admission), grouped into bursts (arrivals less than 300 ms apart).

    python3 deploy/gpu/sglang_timeline.py DIR_OR_FILE... [--requests]
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import sys
from collections import defaultdict
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # its sibling, whether run as a script or loaded by path
from ttfa_phases import percentile

REPLICA = re.compile(r"@r\d+$")
ADMITTED = "coordinator:request_admission"
FIRST_CHUNK = "coordinator:coordinator_stream_received"
# (phase, from event, to event): the path of a request's first audio, in order
PHASES: tuple[tuple[str, str, str], ...] = (
    ("preprocessing", ADMITTED, "preprocessing:stage_complete"),
    ("talker inbox", "preprocessing:stage_complete", "tts_engine:scheduler_request_build_start"),
    ("build+queue", "tts_engine:scheduler_request_build_start", "tts_engine:model_path_start"),
    ("prefill", "tts_engine:model_path_start", "tts_engine:scheduler_prefill_end"),
    ("to vocoder", "tts_engine:scheduler_prefill_end", "vocoder:qwen3_tts_vocoder_decode_enqueued"),
    ("vocoder queue", "vocoder:qwen3_tts_vocoder_decode_enqueued", "vocoder:qwen3_tts_vocoder_decode_dispatched"),
    ("to launch", "vocoder:qwen3_tts_vocoder_decode_dispatched", "vocoder:qwen3_tts_vocoder_decode_launched"),
    ("first decode", "vocoder:qwen3_tts_vocoder_decode_launched", "vocoder:qwen3_tts_vocoder_decode_resolved"),
    ("to server", "vocoder:qwen3_tts_vocoder_decode_resolved", FIRST_CHUNK),
    ("first audio", ADMITTED, FIRST_CHUNK),
)
BURST_GAP_NS = 300_000_000


def event_files(paths: Iterable[Path]) -> list[Path]:
    files: list[Path] = []
    for path in paths:
        files += sorted(path.glob("events*.jsonl*")) if path.is_dir() else [path]
    return files


def read_lines(path: Path) -> Iterator[str]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as lines:
        yield from lines


def read_events(files: Iterable[Path]) -> Iterator[dict[str, Any]]:
    """Every JSON object of the files, one a line; lines that are not one are left out."""
    for path in files:
        for line in read_lines(path):
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if isinstance(event, dict):
                yield event


def request_events(events: Iterable[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """request id → {"<stage>:<event>": the earliest time it happened, ns}; objects that are not events are left
    out."""
    requests: dict[str, dict[str, int]] = defaultdict(dict)
    for event in events:
        try:
            # a copy of a stage (sglang-omni's process replicas) writes its events as `<stage>@r<N>`
            name = f"{REPLICA.sub('', event['stage'])}:{event['event_name']}"
            request, at = event["request_id"], int(event["timestamp_ns"])
        except (ValueError, KeyError, TypeError):
            continue
        seen = requests[request]
        seen[name] = min(at, seen.get(name, at))
    return dict(requests)


def server_pids(events: Iterable[dict[str, Any]]) -> set[int]:
    """The processes whose coordinator wrote these events: more than one means the files of several servers."""
    pids: set[int] = set()
    for event in events:
        try:
            if event["stage"] == "coordinator":
                pids.add(int(event["pid"]))
        except (ValueError, KeyError, TypeError):
            continue
    return pids


def phase_table(requests: dict[str, dict[str, int]]) -> list[tuple[str, int, float, float]]:
    """(phase, requests measured, p50 ms, p95 ms) for each phase some request has both events of."""
    table = []
    for phase, start, end in PHASES:
        both = [events for events in requests.values() if start in events and end in events]
        spans = [(events[end] - events[start]) / 1e6 for events in both]
        if spans:
            table.append((phase, len(spans), percentile(spans, 0.5), percentile(spans, 0.95)))
    return table


def request_rows(requests: dict[str, dict[str, int]]) -> Iterator[str]:
    """One line per admitted request in arrival order: its arrival after its burst's first, then when each phase
    ended, in ms after its own admission; a line `burst` before each burst."""
    admitted = sorted(
        ((events[ADMITTED], events) for events in requests.values() if ADMITTED in events), key=lambda pair: pair[0]
    )
    yield "arrival " + " ".join(f"{phase:>13}" for phase, _, _ in PHASES[:-1])
    burst_start = previous = None
    for at, events in admitted:
        if previous is None or at - previous > BURST_GAP_NS:
            burst_start = at
            yield "burst"
        previous = at
        ends = (f"{(events[end] - at) / 1e6:13.1f}" if end in events else f"{'-':>13}" for _, _, end in PHASES[:-1])
        yield f"{(at - burst_start) / 1e6:7.1f} " + " ".join(ends)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="+", type=Path, help="event files, or folders holding events*.jsonl[.gz]")
    parser.add_argument("--requests", action="store_true", help="also one row per request")
    args = parser.parse_args(argv)
    events = list(read_events(event_files(args.paths)))  # read once, for both
    servers = server_pids(events)
    if len(servers) > 1:
        print(f"warning: the events of {len(servers)} servers (coordinator pids {sorted(servers)}): name one's files")
    requests = request_events(events)
    print(f"{len(requests)} requests")
    print(f"{'phase':<14} {'n':>4} {'p50 ms':>8} {'p95 ms':>8}")
    for phase, count, p50, p95 in phase_table(requests):
        print(f"{phase:<14} {count:>4} {p50:>8.1f} {p95:>8.1f}")
    if args.requests:
        print()
        for row in request_rows(requests):
            print(row)


if __name__ == "__main__":
    main()
