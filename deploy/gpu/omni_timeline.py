"""Where each request's first audio went on the omni engine, from the request timeline its processes record
(`events_<role>_<pid>.jsonl`, plain or gzipped, under `<profiler_dir>/<run_id>`; the service records them on
`POST /admin/profile/start {"timeline": true}`, app/engines/omni/stage_plugins/timeline.py).

First audio, phase by phase (the first event of each name a request has):
- talker: handed to vllm-omni (`server:submitted`) → the talker's producer hands its first window on
  (`talker:window_sent`): the orchestrator, the talker's queue, its prefill and first frame, the step's output;
- hand-off: → code2wav's receiving thread hands that window to its scheduler (`code2wav:window_ready`): the shared
  memory and the receiving thread's poll;
- code2wav queue: → the step that carries it is scheduled (`code2wav:window_scheduled`);
- code2wav step: → that step returned (`code2wav:window_decoded`);
- to server: → the first audio is back in the server (`server:first_audio`);
- first audio: submitted → first audio.
Where the talker's worker recorded its first step (the service's, on a server with a profiler directory), the
talker's part splits: to the talker's first step (`talker:first_step_launched`: the orchestrator, its sockets, the
talker's queue), its launch (→ `talker:first_step_returned`: the host's part of the prefill step) and then to the
first window (→ `talker:window_sent`: the GPU's prefill and first frame, the step's output, the producer).
Then every window, not only the first (a stream's n-th window sent paired with its n-th window ready, and so on): the
hand-off, code2wav's queue, its step and the way back to the server (→ `server:audio`, each window's audio back).
Where the talker's connector recorded its writes (the window doorbell's, `talker:window_written`), every window's
hand-off splits: the talker's part (its saving thread's queue and the write to shared memory) and code2wav's (the
ring, its receiving thread's wake and read). Where code2wav's worker recorded its calls (`code2wav:window_launched`,
`code2wav:window_returned`), every window's code2wav step splits: to the worker (vLLM's engine loop), the worker's
call, and back to code2wav's scheduler; where it recorded when each step's output was on the host
(`code2wav:window_copied`), the way back splits again: until its output was on the host (the GPU's work queued before
the step's copy, the copy, and the recording thread's wake), then the wait for the scheduler.
Then a stream's second window, where a burst's streams run dry (a listener who starts at the first audio has only the
first window's audio, 80 ms a frame, until the second's comes): the second audio's time after the first, the
talker's time from its first window to its second, code2wav's from the second window's hand-off to its audio, and the
way back to the server; --requests lists it per request too.
Then the way back to the server of a stream's last window apart from its other windows (a stream's end: in the
server, vllm-omni's end of request and the response's close run on its event loop, one stream after another), and
how far apart the streams' ends reached the server, of those less than ENDS_APART_MS apart (streams ending together;
streams with as many audios in the server as windows decoded only).
Then code2wav's steps, rebuilt from its scheduler's records (`code2wav:window_scheduled`: the windows of one step
share its `step` number where the scheduler wrote one, else they are the records less than 0.5 ms apart, all written
in one pass after the step is built): by how many of a stream's window indices a step mixed (index 0 a stream's first
window, 1 its second, ...: under the ramp the windows of one index are one of the decoder's phases, and vllm-omni
0.30's decoder runs a step's phases one after another, returning every window at the end), how many windows it
carried, its time from scheduled to its last window decoded, and its own time (from the later of its scheduling and
the previous step's last decode: with asynchronous scheduling a step is built while the one before still runs);
--requests lists every step too.
Then the talker's steps on the host, where its worker recorded them (`step_host`, talker_worker.py): the steps that
took in a prompt apart from the decode-only ones, each step's time to the next one's start (at one stream, a frame),
its `execute_model` and `sample_tokens` calls, and the model runner's sections inside them, by the host's clock; a
step's prompts counted, and the prompt builder's time over them.
p50 / p95 / max ms; with --requests, one row a request.

A stage names a request by vllm-omni's id for it, which starts with the server's: each is put with the longest
server id it starts with.

    python3 deploy/gpu/omni_timeline.py DIR_OR_FILE... [--requests]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # its siblings, whether run as a script or loaded by path
from sglang_timeline import event_files, read_lines
from ttfa_phases import percentile

SUBMITTED, FIRST_AUDIO, AUDIO = "server:submitted", "server:first_audio", "server:audio"
SENT, READY = "talker:window_sent", "code2wav:window_ready"
SCHEDULED, DECODED = "code2wav:window_scheduled", "code2wav:window_decoded"
LAUNCHED, RETURNED = "talker:first_step_launched", "talker:first_step_returned"
WRITTEN = "talker:window_written"
WORKER_LAUNCHED, WORKER_RETURNED = "code2wav:window_launched", "code2wav:window_returned"
COPIED = "code2wav:window_copied"  # the step's output on the host: its GPU work and copy done (code2wav_worker.py)
PROMPT_SECTION = "prompt"  # step_clock's name for vllm-omni's prompt builder (`build_prompt_embeds`)
PER_PROMPT = "prompt, a prompt taken in"  # its time over the prompts its step took in
STEP_HOST = "step_host"  # the talker's worker's line a step: its host time, by section (talker_worker.py)
STEP_OF = "code2wav:window_scheduled:step"  # not an event: each scheduled window's step number, where recorded
STEP_GAP_NS = 500_000  # without step numbers: records this close together are one step's
# (phase, from event, to event): the path of a request's first audio, in order
PHASES: tuple[tuple[str, str, str], ...] = (
    ("talker", SUBMITTED, SENT),
    ("hand-off", SENT, READY),
    ("code2wav queue", READY, SCHEDULED),
    ("code2wav step", SCHEDULED, DECODED),
    ("to server", DECODED, FIRST_AUDIO),
    ("first audio", SUBMITTED, FIRST_AUDIO),
)
# every window's own, its n-th event of each name paired
WINDOW_PHASES: tuple[tuple[str, str, str], ...] = (*PHASES[1:4], ("to server", DECODED, AUDIO))
# the talker's part (submitted -> window sent), split at its first step where the talker's worker recorded it
TALKER_PHASES: tuple[tuple[str, str, str], ...] = (
    ("to the talker's first step", SUBMITTED, LAUNCHED),
    ("its launch", LAUNCHED, RETURNED),
    ("then to the first window", RETURNED, SENT),
)

# every window's hand-off (sent -> ready), split at its write where the talker's connector recorded it
HAND_OFF_PHASES: tuple[tuple[str, str, str], ...] = (
    ("the talker's write", SENT, WRITTEN),
    ("code2wav's read", WRITTEN, READY),
)
# every window's code2wav step (scheduled -> decoded), split at its worker's call where code2wav's worker recorded it
STEP_PHASES: tuple[tuple[str, str, str], ...] = (
    ("to code2wav's worker", SCHEDULED, WORKER_LAUNCHED),
    ("its worker's call", WORKER_LAUNCHED, WORKER_RETURNED),
    ("back to its scheduler", WORKER_RETURNED, DECODED),
    # where the worker recorded the step's copy: the way back split at it
    ("of it, until its output was on the host", WORKER_RETURNED, COPIED),
    ("of it, then to its scheduler", COPIED, DECODED),
)
# a stream's second window: (phase, from event and its index, to event and its index), the index the n-th of its name
SECOND_WINDOW_PHASES: tuple[tuple[str, tuple[str, int], tuple[str, int]], ...] = (
    ("second audio after the first", (AUDIO, 0), (AUDIO, 1)),
    ("the talker: first window sent -> second", (SENT, 0), (SENT, 1)),
    ("code2wav: second window sent -> decoded", (SENT, 1), (DECODED, 1)),
    ("to server: second window decoded -> audio", (DECODED, 1), (AUDIO, 1)),
)
# the way back to the server (decoded -> audio) of a stream's last window apart from its others, and its ends apart
LAST_WINDOW, OTHER_WINDOWS = "a stream's last window", "its other windows"
ENDS_APART = "streams' ends in the server, one after the next"
ENDS_APART_MS = 20.0  # ends further apart than this did not end together: not counted
END_PHASES: tuple[tuple[str], ...] = ((LAST_WINDOW,), (OTHER_WINDOWS,), (ENDS_APART,))
# the splits of every window's phases, each reported where its events were recorded
WINDOW_SPLITS: tuple[tuple[str, tuple[tuple[str, str, str], ...]], ...] = (
    ("Every window's hand-off, split at its write to shared memory, ms:", HAND_OFF_PHASES),
    ("Every window's code2wav step, split at its worker's call, ms:", STEP_PHASES),
)


def role_files(paths: Iterable[Path]) -> list[Path]:
    """The event files (sglang_timeline's, laid out alike) named `events_<role>_<pid>.jsonl[.gz]`: the role names
    the process."""
    return [
        file
        for file in event_files(paths)
        if file.is_file() and file.name.startswith("events_") and file.name.count("_") >= 2
    ]


def role_of(path: Path) -> str:
    """`events_<role>_<pid>.jsonl[.gz]` -> role."""
    return path.name.split(".")[0].split("_")[1]


def load(paths: Iterable[Path]) -> dict[str, dict[str, list[int]]]:
    """request (the server's id) -> "role:event" -> its times in ns, in order."""
    raw: list[tuple[str, str, int, int]] = []  # (request, name, time, value: the time, or a step number)
    for path in role_files(paths):
        role = role_of(path)
        for line in read_lines(path):
            try:
                event = json.loads(line)
                if event["event"] == STEP_HOST:  # a talker step's, no request's: talker_steps reads them
                    continue
                request, name, ts = str(event["request_id"]), f"{role}:{event['event']}", int(event["ts_ns"])
                raw.append((request, name, ts, ts))
                if name == SCHEDULED and event.get("step") is not None:
                    raw.append((request, STEP_OF, ts, int(event["step"])))
            except (ValueError, KeyError, TypeError):  # a line cut short by a stopped process, or not an event
                continue
    servers = sorted({request for request, name, *_ in raw if name.startswith("server:")}, key=len, reverse=True)
    requests: dict[str, dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
    for request, name, _, value in sorted(raw, key=lambda event: event[2]):
        owner = next((server for server in servers if request.startswith(server)), request)
        requests[owner][name].append(value)
    return requests


def talker_steps(paths: Iterable[Path]) -> list[dict[str, Any]]:
    """The talker's `step_host` lines (one a step, while a run recorded), in the order the steps began."""
    steps = []
    for path in role_files(paths):
        if role_of(path) != "talker":
            continue
        for line in read_lines(path):
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if isinstance(event, dict) and event.get("event") == STEP_HOST and isinstance(event.get("ts_ns"), int):
                steps.append(event)
    return sorted(steps, key=lambda step: step["ts_ns"])


def host_steps_tables(steps: list[dict[str, Any]]) -> list[str]:
    """The talker's host time a step (ms), steps that took in a prompt apart from decode-only ones: the time to the
    next step's start (at one stream, a frame), its `execute_model` call (the host's launch of the step), its
    `sample_tokens` call, and each section timed within them (`preprocess` holds `prompt` and `predictor_graph`)."""
    lines: list[str] = []
    sections = list(dict.fromkeys(name for step in steps for name in step.get("sections", {})))
    kinds: tuple[tuple[str, Callable[[dict[str, Any]], bool]], ...] = (
        ("took in a prompt", lambda step: step.get("new", 0) > 0),
        ("decode only", lambda step: step.get("new", 0) == 0 and step.get("requests", 0) > 0),
    )
    for kind, chosen in kinds:
        picked = [(index, step) for index, step in enumerate(steps) if chosen(step)]
        if not picked:
            continue
        values: dict[str, list[float]] = defaultdict(list)
        for index, step in picked:
            if index + 1 < len(steps):
                values["to the next step"].append(ms(step["ts_ns"], steps[index + 1]["ts_ns"]))
            for name, key in (("execute_model", "execute_us"), ("sample_tokens", "sample_us")):
                if key in step:
                    values[name].append(step[key] / 1000)
            for name, us in step.get("sections", {}).items():
                values[name].append(us / 1000)
            if step.get("new", 0) > 0 and PROMPT_SECTION in step.get("sections", {}):
                values[PER_PROMPT].append(step["sections"][PROMPT_SECTION] / 1000 / step["new"])
        requests = [step.get("requests", 0) for _, step in picked]
        names = ("to the next step", "execute_model", "sample_tokens", *sections)
        if kind == "took in a prompt":  # how many a step took in: the prompt builder's time is per prompt
            prompts = [step["new"] for _, step in picked]
            counts = f"prompts a step p50 {percentile(prompts, 0.5):.0f}, max {max(prompts)}; "
            names += (PER_PROMPT,) if PROMPT_SECTION in sections else ()
        else:
            counts = ""
        lines += table(
            f"The talker's steps on the host that {kind} ({len(picked)} steps; {counts}requests a step p50 "
            f"{percentile(requests, 0.5):.0f}), ms by the host's clock:",
            "steps",
            tuple((name,) for name in names),
            values,
        )
    return lines


def ms(start: int, end: int) -> float:
    return (end - start) / 1e6


def _phases(events: dict[str, list[int]], phases: tuple[tuple[str, str, str], ...]) -> dict[str, float]:
    return {
        phase: ms(events[start][0], events[end][0])
        for phase, start, end in phases
        if events.get(start) and events.get(end)
    }


def first_audio_phases(events: dict[str, list[int]]) -> dict[str, float]:
    return _phases(events, PHASES)


def talker_phases(events: dict[str, list[int]]) -> dict[str, float]:
    return _phases(events, TALKER_PHASES)


def _paired(events: dict[str, list[int]], phases: tuple[tuple[str, str, str], ...]) -> dict[str, list[float]]:
    return {
        phase: [ms(a, b) for a, b in zip(events.get(start, []), events.get(end, []), strict=False)]
        for phase, start, end in phases
    }


def window_phases(events: dict[str, list[int]]) -> dict[str, list[float]]:
    return _paired(events, WINDOW_PHASES)


def hand_off_phases(events: dict[str, list[int]]) -> dict[str, list[float]]:
    return _paired(events, HAND_OFF_PHASES)


def step_phases(events: dict[str, list[int]]) -> dict[str, list[float]]:
    return _paired(events, STEP_PHASES)


def stream_ends(requests: dict[str, dict[str, list[int]]]) -> dict[str, list[float]]:
    """The way back to the server (a window decoded -> its audio, a stream's n-th of each paired) of each stream's last
    window apart from its others, and the time between one stream's last audio in the server and the next stream's,
    where less than ENDS_APART_MS. Only streams with as many audios as decoded windows: where the counts differ
    (code2wav's recording began after a window was decoded, a stream cut after an audio) which audio is which
    window's, and which is the end, cannot be told."""
    values: dict[str, list[float]] = {LAST_WINDOW: [], OTHER_WINDOWS: [], ENDS_APART: []}
    ends: list[int] = []
    for events in requests.values():
        decoded, audio = events.get(DECODED, []), events.get(AUDIO, [])
        if not audio or len(decoded) != len(audio):
            continue
        for start, end in zip(decoded[:-1], audio[:-1], strict=True):
            values[OTHER_WINDOWS].append(ms(start, end))
        values[LAST_WINDOW].append(ms(decoded[-1], audio[-1]))
        ends.append(audio[-1])
    ends.sort()
    values[ENDS_APART] = [gap for gap in map(ms, ends, ends[1:]) if gap < ENDS_APART_MS]
    return values


def second_window_phases(events: dict[str, list[int]]) -> dict[str, float]:
    """A stream's second window: each of SECOND_WINDOW_PHASES whose two events it has."""
    return {
        phase: ms(events[start][i], events[end][j])
        for phase, (start, i), (end, j) in SECOND_WINDOW_PHASES
        if len(events.get(start, [])) > i and len(events.get(end, [])) > j
    }


@dataclass
class Step:
    """One code2wav step: when it was scheduled, its windows' indices in their streams, when its last one decoded."""

    scheduled: int
    indices: list[int] = field(default_factory=list)
    decoded: int | None = None
    own_ms: float | None = None  # from the later of its scheduling and the previous step's last decode

    @property
    def mixed(self) -> int:
        """How many of a stream's window indices it carried."""
        return len(set(self.indices))


def code2wav_steps(requests: dict[str, dict[str, list[int]]]) -> list[Step]:
    """code2wav's steps in order, from every stream's n-th `window_scheduled` (its n-th window, index n) and its n-th
    `window_decoded`: grouped by the step number recorded with them, or, where none was, by time (STEP_GAP_NS)."""
    windows: list[tuple[int, int | None, int, int | None]] = []  # (scheduled, step number, index, decoded)
    for events in requests.values():
        scheduled, decoded, numbers = events.get(SCHEDULED, []), events.get(DECODED, []), events.get(STEP_OF, [])
        numbered = len(numbers) == len(scheduled)
        for index, at in enumerate(scheduled):
            windows.append(
                (at, numbers[index] if numbered else None, index, decoded[index] if index < len(decoded) else None)
            )
    windows.sort(key=lambda window: window[0])
    steps: list[Step] = []
    key: int | None = None  # the step number of the window before
    for at, number, index, decoded in windows:
        numbered = number is not None or key is not None
        if not steps or (number != key if numbered else at - steps[-1].scheduled > STEP_GAP_NS):
            steps.append(Step(scheduled=at))
        key = number
        step = steps[-1]
        step.indices.append(index)
        if decoded is not None:
            step.decoded = max(decoded, step.decoded or decoded)
    previous: int | None = None
    for step in steps:
        if step.decoded is not None:
            step.own_ms = ms(max(step.scheduled, previous or step.scheduled), step.decoded)
            previous = max(step.decoded, previous or step.decoded)
    return steps


def steps_table(steps: list[Step]) -> list[str]:
    """code2wav's steps by how many window indices each mixed: how many, their windows, scheduled -> decoded and
    their own time, p50 / p95."""
    header = "| window indices | steps | windows p50 | max | scheduled -> decoded p50 | p95 | own p50 | p95 |"
    lines = ["", "code2wav's steps, by how many of a stream's window indices each carried (ms):", "", header]
    lines.append("| --- | --- | --- | --- | --- | --- | --- | --- |")
    kinds = (("one", [s for s in steps if s.mixed == 1]), ("two or more", [s for s in steps if s.mixed > 1]))
    for label, chosen in kinds:
        if not chosen:
            continue
        sizes = sorted(len(s.indices) for s in chosen)
        spans = sorted(ms(s.scheduled, s.decoded) for s in chosen if s.decoded is not None)
        own = sorted(s.own_ms for s in chosen if s.own_ms is not None)
        cells = [f"{percentile(sizes, 0.5):g}", f"{sizes[-1]}"]
        for values in (spans, own):
            cells += [f"{percentile(values, q):.1f}" if values else "–" for q in (0.5, 0.95)]
        lines.append(f"| {label} | {len(chosen)} | " + " | ".join(cells) + " |")
    return lines


def steps_list(steps: list[Step], origin: int) -> list[str]:
    """Every code2wav step: when (ms after the first request was submitted), its windows by index, its times."""
    lines = ["", "| step | scheduled, ms | windows by index (index: windows) | scheduled -> decoded | own |"]
    lines.append("| --- | --- | --- | --- | --- |")
    for number, step in enumerate(steps):
        counts = ", ".join(f"{index}: {step.indices.count(index)}" for index in sorted(set(step.indices)))
        span = f"{ms(step.scheduled, step.decoded):.1f}" if step.decoded is not None else "–"
        own = f"{step.own_ms:.1f}" if step.own_ms is not None else "–"
        lines.append(f"| {number} | {ms(origin, step.scheduled):.1f} | {counts} | {span} | {own} |")
    return lines


def stats_row(name: str, values: list[float]) -> str:
    if not values:
        return f"| {name} | 0 | – | – | – |"
    ordered = sorted(values)
    return (
        f"| {name} | {len(values)} | {percentile(ordered, 0.5):.1f} | {percentile(ordered, 0.95):.1f} | "
        f"{ordered[-1]:.1f} |"
    )


def table(title: str, unit: str, phases: tuple[tuple[Any, ...], ...], values: dict[str, list[float]]) -> list[str]:
    """A titled table of `phases` (each named first), one row a phase: how many `unit` it has values for, p50 / p95 /
    max."""
    header = [f"| phase | {unit} | p50 | p95 | max |", "| --- | --- | --- | --- | --- |"]
    return ["", title, "", *header, *(stats_row(phase, values.get(phase, [])) for phase, *_ in phases)]


def over_requests(phases: tuple[tuple[Any, ...], ...], each: Iterable[dict[str, float]]) -> dict[str, list[float]]:
    """Each of `phases` (named first) over the requests whose own phases (`each`) have it."""
    each = list(each)
    return {phase: [own[phase] for own in each if phase in own] for phase, *_ in phases}


def first_submitted(requests: dict[str, dict[str, list[int]]]) -> int:
    """When the first request was handed to vllm-omni (0 where none was): the origin of the per-request lists."""
    return min((events[SUBMITTED][0] for events in requests.values() if events.get(SUBMITTED)), default=0)


def per_request_table(
    requests: dict[str, dict[str, list[int]]], phases: tuple[tuple[Any, ...], ...], each: dict[str, dict[str, float]]
) -> list[str]:
    """One row a request, in the order submitted: when, after the first, and each of `phases` (named first) from its
    own phases (`each`)."""
    names = [phase for phase, *_ in phases]
    lines = ["", "| request | submitted, ms after the first | " + " | ".join(names) + " |"]
    lines += ["| --- | --- |" + " --- |" * len(names)]
    origin = first_submitted(requests)
    for request in sorted(requests, key=lambda r: requests[r].get(SUBMITTED, [0])[0]):
        submitted = requests[request].get(SUBMITTED)
        at = f"{ms(origin, submitted[0]):.1f}" if submitted else "–"
        cells = [f"{each[request][name]:.1f}" if name in each[request] else "–" for name in names]
        lines.append(f"| `{request}` | {at} | " + " | ".join(cells) + " |")
    return lines


def every_window(
    requests: dict[str, dict[str, list[int]]], phases: tuple[tuple[str, str, str], ...]
) -> dict[str, list[float]]:
    """Each of `phases` over every window of every request (a stream's n-th of each event paired)."""
    values: dict[str, list[float]] = defaultdict(list)
    for events in requests.values():
        for phase, paired in _paired(events, phases).items():
            values[phase] += paired
    return values


def report(
    requests: dict[str, dict[str, list[int]]], per_request: bool = False, steps: list[dict[str, Any]] | None = None
) -> str:
    firsts = {request: first_audio_phases(events) for request, events in requests.items()}
    lines = [f"# Where first audio went on the omni engine ({len(requests)} requests)"]
    lines += table(
        "First audio, phase by phase (ms; each over the requests that have both its events):",
        "requests",
        PHASES,
        over_requests(PHASES, firsts.values()),
    )
    talkers = [talker_phases(events) for events in requests.values()]
    if any(talkers):
        lines += table(
            "The talker's part, split at its first step (ms):",
            "requests",
            TALKER_PHASES,
            over_requests(TALKER_PHASES, talkers),
        )
    lines += table(
        "Every window (a stream's n-th of each event paired), ms:",
        "windows",
        WINDOW_PHASES,
        every_window(requests, WINDOW_PHASES),
    )
    ends = stream_ends(requests)
    if ends[LAST_WINDOW]:
        lines += table(
            f"The way back to the server, a stream's last window (its end) apart from its others, and the streams' "
            f"ends one after the next (of those under {ENDS_APART_MS:.0f} ms apart), ms:",
            "values",
            END_PHASES,
            ends,
        )
    for title, phases in WINDOW_SPLITS:
        split = every_window(requests, phases)
        if any(split.values()):
            # a phase no window has (an event of a later version, a timeline recorded before it) has no row
            lines += table(title, "windows", tuple(p for p in phases if split.get(p[0])), split)
    seconds = {request: second_window_phases(events) for request, events in requests.items()}
    if any(seconds.values()):
        lines += table(
            "A stream's second window (ms; each over the requests that have both its events):",
            "requests",
            SECOND_WINDOW_PHASES,
            over_requests(SECOND_WINDOW_PHASES, seconds.values()),
        )
    code2wav = code2wav_steps(requests)
    if code2wav:
        lines += steps_table(code2wav)
    lines += host_steps_tables(steps or [])
    if per_request:
        lines += per_request_table(requests, PHASES, firsts)
        if any(seconds.values()):
            lines += per_request_table(requests, SECOND_WINDOW_PHASES, seconds)
        if code2wav:
            lines += steps_list(code2wav, first_submitted(requests))
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="+", type=Path, help="a run's folder, or event files")
    parser.add_argument("--requests", action="store_true", help="one row a request")
    args = parser.parse_args(argv)
    requests = load(args.paths)
    if not requests:
        print(f"no events under {', '.join(map(str, args.paths))}", file=sys.stderr)
        return 1
    print(report(requests, args.requests, talker_steps(args.paths)), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
