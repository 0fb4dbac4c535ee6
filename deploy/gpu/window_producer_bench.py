"""Host time of the talker's window producer on a GPU host: vllm-omni 0.30's `talker2code2wav_async_chunk_batch` (its
native data plane's thread calls it once a talker step, with every running stream's newest frame, and ships each window
it returns to code2wav), fed as in the server: STREAMS streams a step, each frame a 16-code row with its validity flag
(on the host by default, as vllm-omni's output materializer copies a step's outputs there before its data plane reads
them; --device cuda for frames left on the GPU), the windows as `customvoice.yaml`'s connector sizes them (its
`codec_chunk_ramp`, `codec_chunk_frames`, ...), each emitted window counted as vllm-omni's connector counts it. Streams
start staggered and restart when done (FRAMES frames each), so that steps mix first windows and steady ones.

It runs in the talker's process on a thread of its own, holding the GIL against the step loop: its time a step is
host time the talker's main thread may wait for. Printed: the producer's host ms a step (median, p95), vllm-omni's
and the service's with the frames kept as lists (app/engines/omni/stage_plugins/talker_windows.py), and the windows'
code tensors, built as vllm-omni builds them (`torch.tensor` over a list of per-code elements of per-frame
tensors) against one stack of the frames (`torch.stack(frames).t().reshape(-1)`), each window checked equal.

    python deploy/gpu/window_producer_bench.py [--streams 32] [--steps 400] [--frames 100] [--device cpu|cuda]

Needs torch and vllm-omni 0.30 (the GPU recipe's environment).
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time
import types
from collections import defaultdict
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
PROFILE = ROOT / "deploy/vllm-omni/customvoice.yaml"
CODES = 16  # codes a frame (the 0.6B and 1.7B shapes' code groups)


def connector_extra(profile: Path) -> dict[str, Any]:
    """The talker's shared-memory connector's `extra`, as the profile ships it."""
    config = yaml.safe_load(profile.read_text())
    return dict(config["connectors"]["connector_of_shared_memory"]["extra"])


def transfer_manager(extra: dict[str, Any]) -> Any:
    """What the producer reads and writes of vllm-omni's connector runtime (`omni_connector_payload_transport.py`)."""
    return types.SimpleNamespace(
        connector=types.SimpleNamespace(config={"extra": extra}),
        code_prompt_token_ids=defaultdict(list),
        put_req_chunk=defaultdict(int),
        ramp_chunk_count=defaultdict(int),
        request_payload={},
        scheduler_max_num_seqs=64,
    )


class Stream:
    def __init__(self, index: int, start: int) -> None:
        self.index, self.generation, self.made, self.start = index, 0, 0, start

    @property
    def request_id(self) -> str:
        return f"stream-{self.index}-{self.generation}"

    def request(self, finished: bool) -> Any:
        return types.SimpleNamespace(
            external_req_id=self.request_id, is_finished=lambda: finished, additional_information=None
        )


def window_codes_as_vllm_omni(torch: Any, frames: list[Any]) -> Any:
    """vllm-omni 0.30's own build of a window's codes (`qwen3_tts.py`, `talker2code2wav_async_chunk`)."""
    return torch.tensor([frames[f][q] for q in range(len(frames[0])) for f in range(len(frames))], dtype=torch.long)


def window_codes_stacked(torch: Any, frames: list[Any]) -> Any:
    return torch.stack(frames).t().reshape(-1)


def run(
    torch: Any,
    producer: Any,
    extra: dict[str, Any],
    streams: int,
    steps: int,
    frames: int,
    device: str,
    keep_payloads: bool = False,
) -> dict[str, Any]:
    """`steps` steps of `producer` (vllm-omni's batch builder, or one called as it is); with `keep_payloads`, every
    step's payloads too."""
    manager = transfer_manager(extra)
    group = [Stream(index, start=index * frames // streams) for index in range(streams)]
    step_ms: list[float] = []
    windows: list[list[Any]] = []
    kept: list[list[Any]] = []
    for step in range(steps):
        live = [stream for stream in group if step >= stream.start]
        if not live:
            continue
        codes = torch.randint(0, 2048, (len(live), CODES), device=device)
        valid = torch.ones(len(live), dtype=torch.bool, device=device)
        outputs = [
            {"codes": {"audio": codes[row : row + 1]}, "meta": {"codec_frame_valid": valid[row : row + 1]}}
            for row in range(len(live))
        ]
        finished = [stream.made + 1 >= frames for stream in live]
        requests = [stream.request(done) for stream, done in zip(live, finished, strict=True)]
        if device == "cuda":
            torch.cuda.synchronize()
        started = time.perf_counter()
        payloads = producer(manager, outputs, requests, finished)
        step_ms.append((time.perf_counter() - started) * 1e3)
        if keep_payloads:
            kept.append(payloads)
        for stream, payload, done in zip(live, payloads, finished, strict=True):
            stream.made += 1
            if payload is not None:
                manager.put_req_chunk[stream.request_id] += 1
                manager.ramp_chunk_count[stream.request_id] += 1
            if done:
                sent = manager.code_prompt_token_ids.pop(stream.request_id, [])
                if sent:
                    windows.append(sent[-25:])
                for state in (manager.put_req_chunk, manager.ramp_chunk_count, manager.request_payload):
                    state.pop(stream.request_id, None)
                stream.generation, stream.made = stream.generation + 1, 0
    return {"step_ms": step_ms, "windows": windows, "payloads": kept}


def window_build_ms(torch: Any, windows: list[list[Any]]) -> tuple[float, float]:
    """Median ms of one window's codes built each way; each pair checked equal (values and dtype)."""
    theirs, ours = [], []
    for frames in windows:
        started = time.perf_counter()
        a = window_codes_as_vllm_omni(torch, frames)
        middle = time.perf_counter()
        b = window_codes_stacked(torch, frames)
        ended = time.perf_counter()
        if a.dtype != b.dtype or not torch.equal(a, b):
            raise SystemExit("window_producer_bench: the stacked window differs from vllm-omni's")
        theirs.append((middle - started) * 1e3)
        ours.append((ended - middle) * 1e3)
    return statistics.median(theirs), statistics.median(ours)


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def producers(upstream: Any) -> dict[str, Any]:
    """The two batch builders compared, by name: vllm-omni's (`upstream`: its `qwen3_tts` module) and the service's
    with the frames kept as lists (app/engines/omni/stage_plugins/talker_windows.py)."""
    from app.engines.omni.stage_plugins import talker_windows

    return {
        "vllm-omni": upstream.talker2code2wav_async_chunk_batch,
        "frames as lists": functools.partial(talker_windows.batch_with_frames_as_lists, upstream),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=32)
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--frames", type=int, default=100, help="frames a stream makes before it ends")
    parser.add_argument("--profile", type=Path, default=PROFILE, help="the profile whose connector sizes windows")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="where a step's frames are")
    args = parser.parse_args(argv)
    import torch
    from vllm_omni.model_executor.stage_input_processors import qwen3_tts

    extra = connector_extra(args.profile)
    print(f"connector: {extra}; frames on the {args.device}")
    measured: dict[str, Any] = {}
    for name, producer in producers(qwen3_tts).items():
        run(torch, producer, extra, args.streams, 50, args.frames, args.device)  # warm-up
        measured[name] = run(torch, producer, extra, args.streams, args.steps, args.frames, args.device)
        step_ms = measured[name]["step_ms"][args.frames :]  # once every stream runs
        print(
            f"{name}, streams {args.streams}, frames a stream {args.frames}: producer host ms a step p50 "
            f"{statistics.median(step_ms):.3f}, p95 {percentile(step_ms, 0.95):.3f} ({len(step_ms)} steps)"
        )
    frames = [[frame.cpu() for frame in window] for window in measured["vllm-omni"]["windows"]]
    theirs, ours = window_build_ms(torch, frames)
    print(
        f"a {len(frames[0]) if frames else 0}-frame window's codes, median of {len(frames)}: vllm-omni's build "
        f"{theirs:.3f} ms, stacked {ours:.3f} ms (equal)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
