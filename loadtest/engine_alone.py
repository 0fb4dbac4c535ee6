"""The engine with no service around it: vllm-omni's `AsyncOmni` driven in-process, behind a small control endpoint.

The baseline of a side-by-side benchmark. It starts `AsyncOmni` on a Qwen3-TTS model directory and deploy profile,
builds every request exactly as the omni engine does (`app.engines.omni.requests`: the talker's conditioning, the prompt
of placeholder ids from the model's own length estimator, DELTA sampling parameters), warms up every batch size, and
then waits for workloads on a loopback control port:

    python3 -m loadtest.engine_alone --model DIR --deploy-config PROFILE --load-format dummy --port 8002

    GET  /ready             200 once warmed up (503 with the start-up stage before)
    GET  /v1/models, /v1/audio/voices    the model id and its preset speakers (what speech-loadtest discovers)
    POST /run               {"mode": "closed" | "open", "level": concurrency or arrivals per second,
                             "requests": N (closed), "duration": seconds (open), "warmup": W, "seed": k,
                             "texts": [...], "text_offset": i, "voice": "vivian", "language": "English"}

A run happens inside this process, against `AsyncOmni.generate()`: closed loop, `level` workers each issuing
requests back to back (after `warmup` unmeasured requests at the same concurrency); open loop, Poisson arrivals at
`level` per second for `duration` seconds, timed from each request's planned arrival (a late start counts against
latency). The answer carries one record per measured request: TTFA, E2E, audio seconds, samples, and the arrival
time and sample count of every audio chunk; and the run's `wall_s` and steady window (`held_s`,
`finished_while_held`, `audio_s_while_held`: loadtest.schedule). `speech-loadtest --target
engine+http://127.0.0.1:8002` drives it in the same sweep as HTTP servers.

Request length comes from the profile (`deploy/gpu/bench_profile.py --frames N` makes it fixed), as for a server
given no `max_new_tokens`. vllm-omni is imported only when the engine starts.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import random
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from app.engine_protocol import SynthesisJob
from app.engines.omni.engine import ENGINE_ENVIRONMENT, compile_cache_environment, load_prompt_helpers, talker_limits
from app.engines.omni.requests import AudioOutputReader, PromptHelpers, build_prompt, sampling_params_for
from app.engines.qwen3_tts import Qwen3TTSModel, warmup_batch_sizes, warmup_job
from loadtest.schedule import LoopRun, TextCycle, closed_loop, open_loop

log = logging.getLogger("engine_alone")

MODES = ("closed", "open")


def default_texts() -> list[str]:
    """speech-loadtest's default text set: the medium English sentences."""
    data = json.loads(resources.files("loadtest").joinpath("data/texts.json").read_text(encoding="utf-8"))
    return list(data["English"]["medium"])


def _default_omni_factory(**kwargs: Any) -> Any:
    from vllm_omni import AsyncOmni

    return AsyncOmni(**kwargs)


@dataclass
class RequestRecord:
    """One measured request. Times are seconds from its start (for an open loop, its planned arrival); `chunks`
    holds [arrival, samples] of every piece of audio, so that a listener's playback can be replayed."""

    text: str
    ok: bool = True
    error_code: str | None = None
    error_message: str | None = None
    ttfa_s: float | None = None
    e2e_s: float | None = None
    audio_s: float | None = None
    samples: int = 0
    sample_rate: int | None = None
    sent_at_s: float = 0.0  # from the run's start
    chunks: list[list[float]] = field(default_factory=list)
    finished_at: float | None = None  # a perf_counter value, not sent: whether it came in the steady window

    def as_json(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "ok": self.ok,
            "error_code": self.error_code,
            "error_message": self.error_message,
            "ttfa_s": self.ttfa_s,
            "e2e_s": self.e2e_s,
            "audio_s": self.audio_s,
            "samples": self.samples,
            "sample_rate": self.sample_rate,
            "sent_at_s": self.sent_at_s,
            "chunks": self.chunks,
        }


class AloneEngine:
    """AsyncOmni and the prompt building of the omni engine, nothing else: no admission, no encoding."""

    def __init__(
        self,
        model_dir: str,
        deploy_config: str | None = None,
        load_format: str | None = None,
        stage_overrides: dict[str, dict[str, object]] | None = None,
        omni_factory: Callable[..., Any] | None = None,
        helpers: Callable[[Any, str], PromptHelpers] | None = None,
        served_model_name: str | None = None,
        stage_init_timeout_s: int = 900,
        init_timeout_s: int = 1200,
    ) -> None:
        self.model = Qwen3TTSModel.from_dir(model_dir)
        self.model_id = served_model_name or os.path.basename(os.path.normpath(model_dir))
        self.deploy_config = deploy_config
        self.load_format = load_format
        self.stage_overrides = stage_overrides
        self.timeouts = {"stage_init_timeout": stage_init_timeout_s, "init_timeout": init_timeout_s}
        self._factory = omni_factory or _default_omni_factory
        self._load_helpers = helpers or load_prompt_helpers
        self._omni: Any = None
        self._helpers: PromptHelpers | None = None
        # reference audio becomes the conditioning's list of floats here, one request at a time, off the event loop
        self._prompt_executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="qwen3-prompt")
        self._ids = 0
        # vllm-omni names its shared-memory windows after the request id, host-wide (/dev/shm): ids of this process
        # must not collide with those of the servers beside it
        self._id_tag = uuid.uuid4().hex[:8]
        self.ready = False
        self.detail = "not started"

    def warmup_batch_sizes(self) -> list[int]:
        """Powers of two up to the talker's batch, and the batch itself (what the service warms up by default)."""
        limit, _ = talker_limits(self.deploy_config, self.stage_overrides)
        return warmup_batch_sizes(None, limit)

    async def start(self, warmup_batch_sizes: list[int] | None = None) -> None:
        kwargs: dict[str, Any] = {"model": self.model.path, "log_stats": True}
        if self.deploy_config:
            kwargs["deploy_config"] = self.deploy_config
        if self.stage_overrides:
            kwargs["stage_overrides"] = self.stage_overrides
        if self.load_format:
            kwargs["load_format"] = self.load_format
        kwargs.update(self.timeouts)
        started = time.perf_counter()
        self.detail = "starting AsyncOmni"
        log.info("starting AsyncOmni %s", kwargs)
        self._omni = await asyncio.to_thread(self._factory, **kwargs)
        self._helpers = await asyncio.to_thread(self._load_helpers, self._omni, self.model.path)
        log.info("AsyncOmni started in %.1f s", time.perf_counter() - started)
        self.detail = "warming up"
        sizes = self.warmup_batch_sizes() if warmup_batch_sizes is None else warmup_batch_sizes
        for batch in sizes:
            began = time.perf_counter()
            jobs = [warmup_job(self.model, self._next_id(f"warmup-{batch}"), i) for i in range(batch)]
            records = await asyncio.gather(*(self.synthesize(job, time.perf_counter(), True) for job in jobs))
            failed = [r.error_code for r in records if not r.ok]
            if failed:
                raise RuntimeError(f"warm-up at batch {batch} failed: {failed[0]}")
            log.info("warm-up batch %d: %.2f s", batch, time.perf_counter() - began)
        self.ready = True
        self.detail = "ready"
        log.info("ready after %.1f s", time.perf_counter() - started)

    def _next_id(self, prefix: str) -> str:
        self._ids += 1
        return f"{prefix}-{self._id_tag}-{self._ids}"

    def job(self, text: str, voice: str, language: str | None) -> SynthesisJob:
        return SynthesisJob(self._next_id("alone"), text, voice, language=language)

    async def synthesize(self, job: SynthesisJob, started: float, warming: bool = False) -> RequestRecord:
        """Run one request to its end; times from `started` (a perf_counter value)."""
        assert self._helpers is not None
        record = RequestRecord(job.text)
        try:
            prompt = await build_prompt(self._helpers, self.model, job, self._prompt_executor)
            # warm-up jobs ask for a few frames: min_tokens follows (the profile's fixed length would exceed them)
            params = sampling_params_for(job, self._helpers.delta_defaults, fixed_length=warming)
            reader = AudioOutputReader(cumulative=False)
            outputs = self._omni.generate(
                prompt=prompt, request_id=job.request_id, sampling_params_list=params, output_modalities=["audio"]
            )
            try:
                async for output in outputs:
                    if getattr(output, "error", None):
                        raise RuntimeError(f"vllm-omni failed the request: {output.error}")
                    samples = reader.read(output)
                    if samples is None or len(samples) == 0:
                        continue
                    now = time.perf_counter() - started
                    if record.ttfa_s is None:
                        record.ttfa_s = now
                    record.chunks.append([now, len(samples)])
                    record.samples += len(samples)
            finally:
                with contextlib.suppress(Exception):
                    await outputs.aclose()
            record.e2e_s = time.perf_counter() - started
            record.sample_rate = reader.sample_rate or self.model.sample_rate
            record.audio_s = record.samples / record.sample_rate
            if record.samples == 0:
                record.ok, record.error_code, record.error_message = False, "empty_audio", "the engine made no audio"
        except Exception as exc:
            log.warning("request %s failed: %r", job.request_id, exc)
            record.ok, record.error_code = False, f"engine_{type(exc).__name__}"
            record.error_message = f"{type(exc).__name__}: {exc}"
            record.e2e_s = time.perf_counter() - started
        return record

    async def close(self) -> None:
        self.ready = False
        self.detail = "closed"
        if self._omni is not None:
            await asyncio.to_thread(self._omni.shutdown)
        self._prompt_executor.shutdown(wait=False, cancel_futures=True)


# -- workloads ------------------------------------------------------------------------------------------------------


class RunRefused(ValueError):
    def __init__(self, param: str, message: str) -> None:
        super().__init__(message)
        self.param = param


@dataclass
class RunSpec:
    mode: str
    level: float
    requests: int = 0
    warmup: int = 0
    duration_s: float = 0.0
    seed: int | str = 0
    texts: list[str] = field(default_factory=default_texts)
    text_offset: int = 0
    voice: str | None = None
    language: str | None = None
    stagger_s: float = 0.0  # closed loop: the workers start evenly over this many seconds
    label: str | None = None  # open loop: each text drawn opens with "Take LABEL-N, " (speech-loadtest --unique-texts)

    @classmethod
    def from_json(cls, body: Any) -> RunSpec:
        if not isinstance(body, dict):
            raise RunRefused("body", "the body must be a JSON object")
        known = {"mode", "level", "requests", "warmup", "duration", "seed", "texts", "text_offset", "voice", "language"}
        known |= {"stagger", "label"}
        unknown = sorted(set(body) - known)
        if unknown:
            raise RunRefused(unknown[0], f"unknown field '{unknown[0]}'; known: {', '.join(sorted(known))}")
        mode = body.get("mode")
        if mode not in MODES:
            raise RunRefused("mode", "'mode' must be 'closed' or 'open'")
        level = _number(body, "level", float, None)
        if level <= 0 or (mode == "closed" and level != int(level)):
            raise RunRefused("level", "'level' is a positive concurrency (closed) or arrivals per second (open)")
        spec = cls(mode, level)
        spec.requests = _number(body, "requests", int, 0)
        spec.warmup = _number(body, "warmup", int, 0)
        spec.duration_s = _number(body, "duration", float, 0.0)
        spec.stagger_s = _number(body, "stagger", float, 0.0)
        if spec.requests < 0 or spec.warmup < 0 or spec.duration_s < 0:
            raise RunRefused("requests", "'requests', 'warmup' and 'duration' cannot be negative")
        if spec.stagger_s < 0:
            raise RunRefused("stagger", "'stagger' cannot be negative")
        if mode == "closed" and spec.requests == 0 and spec.warmup == 0:
            raise RunRefused("requests", "a closed-loop run needs 'requests' (or 'warmup')")
        if mode == "open" and spec.duration_s == 0:
            raise RunRefused("duration", "an open-loop run needs 'duration' (seconds)")
        seed = body.get("seed", 0)
        if not isinstance(seed, int | str) or isinstance(seed, bool):
            raise RunRefused("seed", "'seed' is an integer or a string")
        spec.seed = seed
        texts = body.get("texts")
        if texts is not None:
            if not isinstance(texts, list) or not texts or not all(isinstance(t, str) and t.strip() for t in texts):
                raise RunRefused("texts", "'texts' is a non-empty list of non-empty strings")
            spec.texts = texts
        spec.text_offset = _number(body, "text_offset", int, 0)
        for name in ("voice", "language", "label"):
            value = body.get(name)
            if value is not None and not (isinstance(value, str) and value.strip()):
                raise RunRefused(name, f"'{name}' is a non-empty string")
            setattr(spec, name, value)
        return spec


def _number(body: dict[str, Any], name: str, kind: type, default: Any) -> Any:
    value = body.get(name, default)
    if value is None or isinstance(value, bool) or not isinstance(value, int | float):
        raise RunRefused(name, f"'{name}' must be a number")
    if kind is int and value != int(value):
        raise RunRefused(name, f"'{name}' must be an integer")
    return kind(value)


class WorkloadRunner:
    """Runs closed- and open-loop workloads against an `AloneEngine`, one at a time."""

    def __init__(self, engine: AloneEngine) -> None:
        self.engine = engine
        self.lock = asyncio.Lock()

    async def run(self, spec: RunSpec) -> dict[str, Any]:
        voice = spec.voice or (self.engine.model.speakers[0] if self.engine.model.speakers else "")
        texts = TextCycle(spec.texts, spec.text_offset, spec.label)
        in_flight = 0
        peak = 0
        began = time.perf_counter()

        async def one(text: str, started: float, records: list[RequestRecord] | None) -> bool:
            nonlocal in_flight, peak
            in_flight += 1
            peak = max(peak, in_flight)
            try:
                record = await self.engine.synthesize(self.engine.job(text, voice, spec.language), started)
            finally:
                in_flight -= 1
            record.sent_at_s = started - began
            record.finished_at = time.perf_counter()
            if records is not None:
                records.append(record)
            return record.ok

        def sent_now(records: list[RequestRecord] | None) -> Callable[[str], Awaitable[bool]]:
            return lambda text: one(text, time.perf_counter(), records)

        records: list[RequestRecord] = []
        if spec.mode == "closed":
            concurrency = int(spec.level)
            if spec.warmup:  # its own text cycle: the measured requests speak the texts they were given
                warmup = TextCycle(spec.texts, spec.text_offset).take_many(spec.warmup)
                await closed_loop(warmup, concurrency, sent_now(None), spec.stagger_s)
                peak = 0
                began = time.perf_counter()
            loop = await closed_loop(texts.take_many(spec.requests), concurrency, sent_now(records), spec.stagger_s)
        else:
            # arrival times as speech-loadtest draws them: random.Random(seed).expovariate(rate) gaps
            rng = random.Random(spec.seed)
            loop = await open_loop(rng, spec.level, spec.duration_s, lambda at: one(texts.take(), at, records))
            records.sort(key=lambda r: r.sent_at_s)  # arrival order, as the texts were handed out
        return {
            "mode": spec.mode,
            "level": spec.level,
            "requests": len(records),
            "wall_s": loop.wall_s,
            **steady_window(loop, records),
            "peak_in_flight": peak,
            "voice": voice,
            "records": [r.as_json() for r in records],
        }


def steady_window(loop: LoopRun, records: list[RequestRecord]) -> dict[str, Any]:
    """The answer's steady window (loadtest.schedule): its seconds, the successful answers inside it and their audio
    seconds, counted here, where the window's clock is."""
    audio = sum(r.audio_s or 0.0 for r in records if r.ok and loop.holds(r.finished_at))
    return {"held_s": loop.held_s, "finished_while_held": loop.finished_while_held, "audio_s_while_held": audio}


# -- the control endpoint -------------------------------------------------------------------------------------------


def _error(status: int, message: str, param: str | None = None, code: str = "invalid_value") -> JSONResponse:
    kind = "invalid_request_error" if status < 500 else "server_error"
    return JSONResponse({"error": {"message": message, "type": kind, "param": param, "code": code}}, status)


def create_app(
    engine: AloneEngine, warmup_batch_sizes: list[int] | None = None, on_failure: Callable[[], None] | None = None
) -> Starlette:
    """The control endpoint. The engine starts in the background so that /ready can answer meanwhile; a failed start
    calls `on_failure` (the command line then exits non-zero)."""
    runner = WorkloadRunner(engine)

    async def ready(request: Request) -> JSONResponse:
        return JSONResponse({"status": engine.detail}, 200 if engine.ready else 503)

    async def models(request: Request) -> JSONResponse:
        return JSONResponse({"object": "list", "data": [{"id": engine.model_id, "object": "model"}]})

    async def voices(request: Request) -> JSONResponse:
        return JSONResponse({"voices": list(engine.model.speakers)})

    async def run(request: Request) -> JSONResponse:
        try:
            body = await request.json()
        except ValueError:
            return _error(400, "the body must be JSON", "body")
        try:
            spec = RunSpec.from_json(body)
        except RunRefused as exc:
            return _error(400, str(exc), exc.param)
        if spec.voice is not None and spec.voice.lower() not in engine.model.speakers:
            return _error(400, f"Unknown voice '{spec.voice}'. Available: {', '.join(engine.model.speakers)}.", "voice")
        if not engine.ready:
            return _error(503, f"the engine is not ready ({engine.detail})", code="not_ready")
        if runner.lock.locked():
            return _error(409, "a run is in progress; runs go one at a time", code="busy")
        async with runner.lock:
            log.info("run %s", {k: v for k, v in body.items() if k != "texts"})
            result = await runner.run(spec)
        return JSONResponse(result)

    async def start_engine() -> None:
        try:
            await engine.start(warmup_batch_sizes)
        except Exception as exc:
            engine.detail = f"failed to start: {exc}"
            log.exception("the engine failed to start")
            if on_failure is not None:
                on_failure()

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        starting = asyncio.create_task(start_engine())
        try:
            yield
        finally:
            starting.cancel()
            with contextlib.suppress(BaseException):
                await starting
            await engine.close()

    return Starlette(
        routes=[
            Route("/ready", ready),
            Route("/v1/models", models),
            Route("/v1/audio/voices", voices),
            Route("/run", run, methods=["POST"]),
        ],
        lifespan=lifespan,
    )


def _csv_ints(value: str) -> list[int]:
    return [int(part) for part in value.split(",") if part.strip()]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python3 -m loadtest.engine_alone", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, help="Qwen3-TTS model directory")
    p.add_argument("--deploy-config", help="vllm-omni deploy profile (YAML)")
    p.add_argument("--load-format", help="vLLM load_format (dummy: random weights)")
    p.add_argument("--served-model-name", help="model id in /v1/models (default: the directory's name)")
    p.add_argument("--stage-overrides", type=json.loads, help='per-stage engine arguments, JSON: {"1": {...}}')
    p.add_argument("--warmup-batch-sizes", type=_csv_ints, help="default: 1, 2, 4, ... up to stage 0's max_num_seqs")
    p.add_argument("--stage-init-timeout", type=int, default=900, help="seconds per stage start (as the service)")
    p.add_argument("--init-timeout", type=int, default=1200, help="seconds for the whole start (as the service)")
    p.add_argument("--compile-cache-dir", help="one directory for vLLM's, Inductor's and Triton's compile caches")
    p.add_argument("--host", default="127.0.0.1", help="control endpoint address (default loopback)")
    p.add_argument("--port", type=int, default=8002, help="control endpoint port (default 8002)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    import uvicorn

    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s", stream=sys.stdout)
    for key, value in ENGINE_ENVIRONMENT.items():  # vllm-omni's stage processes are spawned, offline
        os.environ.setdefault(key, value)
    if args.compile_cache_dir:
        for key, value in compile_cache_environment(args.compile_cache_dir).items():
            os.environ.setdefault(key, value)  # a variable the operator set explicitly wins
    engine = AloneEngine(
        args.model,
        args.deploy_config,
        args.load_format,
        args.stage_overrides,
        served_model_name=args.served_model_name,
        stage_init_timeout_s=args.stage_init_timeout,
        init_timeout_s=args.init_timeout,
    )
    failed = False

    def stop() -> None:
        nonlocal failed
        failed = True
        server.should_exit = True

    app = create_app(engine, args.warmup_batch_sizes, on_failure=stop)
    server = uvicorn.Server(uvicorn.Config(app, host=args.host, port=args.port, log_level="info", access_log=False))
    server.run()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(1 if failed else 0)  # vllm-omni's stage processes and threads must not hold the exit


if __name__ == "__main__":
    main()
