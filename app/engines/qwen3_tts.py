"""Qwen3-TTS-12Hz as both GPU engines serve it (vllm-omni's and sglang-omni's): what a checkpoint offers, read from its
config.json, the checks every request meets before it reaches either engine, and the short requests each engine warms
up with. Pure Python: no engine library is imported here."""

from __future__ import annotations

import asyncio
import functools
import itertools
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from app.audio.reference import REFERENCE_SECONDS
from app.engine_protocol import (
    AudioChunk,
    EngineCapabilities,
    ReferenceAudio,
    SynthesisJob,
    TaskType,
    UnsupportedParameter,
    VoiceInfo,
)

log = logging.getLogger(__name__)

SAMPLE_RATE = 24_000
CODEC_FRAME_RATE = 12.5  # Qwen3-TTS-12Hz: one codec frame per 80 ms
SAMPLES_PER_FRAME = int(SAMPLE_RATE / CODEC_FRAME_RATE)  # 1920
MAX_NEW_TOKENS = 4096  # the talker's max_model_len in vllm-omni's shipped deploy profile
MAX_INSTRUCTIONS_CHARS = 500  # vllm-omni's adapter limit

TASK_TYPES_BY_VARIANT: dict[str, frozenset[TaskType]] = {
    "custom_voice": frozenset({TaskType.CUSTOM_VOICE}),
    "voice_design": frozenset({TaskType.VOICE_DESIGN}),
    "base": frozenset({TaskType.BASE}),
}


@dataclass(frozen=True, slots=True)
class Qwen3TTSModel:
    """What a Qwen3-TTS checkpoint offers, read from its config.json."""

    path: str
    variant: str  # custom_voice | voice_design | base
    speakers: tuple[str, ...]  # lower-case, as the model matches them
    languages: tuple[str, ...]  # "Auto" first, then title-cased codec languages
    codec_language_id: dict[str, int]
    spk_is_dialect: dict[str, Any]
    sample_rate: int
    hidden_size: int = 0  # the talker's; a precomputed speaker embedding must be this wide (0: not in the config)

    @property
    def task_types(self) -> frozenset[TaskType]:
        return TASK_TYPES_BY_VARIANT.get(self.variant, frozenset({TaskType.CUSTOM_VOICE}))

    @classmethod
    def from_dir(cls, path: str | Path) -> Qwen3TTSModel:
        root = Path(path)
        config = json.loads((root / "config.json").read_text(encoding="utf-8"))
        talker = config.get("talker_config") or {}
        spk_id = talker.get("spk_id") or talker.get("speaker_id") or {}
        codec_languages = talker.get("codec_language_id") or {}
        languages = ["Auto", *sorted(name.title() for name in codec_languages if "dialect" not in name)]
        sample_rate = SAMPLE_RATE
        tokenizer_config = root / "speech_tokenizer" / "config.json"
        if tokenizer_config.exists():
            sample_rate = int(
                json.loads(tokenizer_config.read_text(encoding="utf-8")).get("output_sample_rate", 24_000)
            )
        return cls(
            path=str(root),
            variant=str(config.get("tts_model_type", "custom_voice")),
            speakers=tuple(name.lower() for name in spk_id),
            languages=tuple(languages),
            codec_language_id=dict(codec_languages),
            spk_is_dialect=dict(talker.get("spk_is_dialect") or {}),
            sample_rate=sample_rate,
            hidden_size=int(talker.get("hidden_size") or 0),
        )


def voice_infos(model: Qwen3TTSModel) -> list[VoiceInfo]:
    """The checkpoint's preset speakers as voices, each speaking every language but Auto."""
    languages = tuple(lang for lang in model.languages if lang != "Auto")
    return [VoiceInfo(id=s, name=s.replace("_", " ").title(), languages=languages) for s in model.speakers]


def capabilities(model: Qwen3TTSModel, max_input_chars: int, **engine: Any) -> EngineCapabilities:
    """What a checkpoint can do on either engine (its tasks, cloning for Base, its languages and rate, instructions,
    seeds and lengths), with what the `engine` decides itself (its concurrency, speeds, windows, ...)."""
    return EngineCapabilities(
        task_types=model.task_types,
        voice_cloning=TaskType.BASE in model.task_types,
        instructions=True,
        languages=model.languages,
        max_input_chars=max_input_chars,
        seed=True,
        max_new_tokens=True,
        sample_rate=model.sample_rate,
        **engine,
    )


def reference_frames(reference: ReferenceAudio) -> int:
    """The codec frames a reference clip is as long as: what an in-context clone prefills."""
    return int(np.ceil(len(reference.samples) / reference.sample_rate * CODEC_FRAME_RATE))


def input_tokens(tokenizer: Any, job: SynthesisJob) -> tuple[int, int]:
    """A request's input as the service reports it on both engines, as vllm-omni 0.30's speech server counts it
    (`speech_usage.py`, after its issue #4646) and not the placeholder prompt's length: the tokens of the text and of
    the instructions, plus the reference's codec frames where an in-context clone (Base, not x-vector only) prefills
    them. Returns (all, audio). Run on the tokenizer's one thread."""

    def count(text: str | None) -> int:
        return len(tokenizer(text, padding=False)["input_ids"]) if text and text.strip() else 0

    audio = 0
    if job.task_type == TaskType.BASE and not job.x_vector_only_mode and job.ref_audio is not None:
        audio = reference_frames(job.ref_audio)
    return count(job.text) + count(job.instructions) + audio, audio


def check_job(job: SynthesisJob, model: Qwen3TTSModel, max_new_tokens: int = MAX_NEW_TOKENS) -> None:
    """The checks vllm-omni's adapter makes (sglang-omni's request builder makes the same), as 400s naming the field;
    `max_new_tokens`: the most the engine can generate."""
    if job.task_type not in model.task_types:
        raise UnsupportedParameter(
            "task_type", f"This {model.variant} checkpoint does not support task_type '{job.task_type.value}'."
        )
    if job.task_type == TaskType.CUSTOM_VOICE and job.voice.lower() not in model.speakers:
        raise UnsupportedParameter("voice", f"Unknown voice '{job.voice}'. Available: {', '.join(model.speakers)}.")
    if job.task_type == TaskType.BASE:
        if job.speaker_embedding is not None:
            # vllm-omni 0.30's adapter: an embedding is the voice (x-vector only), never beside reference audio
            if job.ref_audio is not None:
                raise UnsupportedParameter(
                    "speaker_embedding", "'speaker_embedding' and 'ref_audio' exclude each other."
                )
            if len(job.speaker_embedding) != model.hidden_size:
                raise UnsupportedParameter(
                    "speaker_embedding",
                    f"'speaker_embedding' has {len(job.speaker_embedding)} dimensions; this model's are "
                    f"{model.hidden_size}.",
                )
        elif job.ref_audio is None:
            raise UnsupportedParameter(
                "ref_audio", "Voice cloning (task_type Base) needs 'ref_audio' or 'speaker_embedding'."
            )
        elif not job.x_vector_only_mode and not (job.ref_text or "").strip():
            raise UnsupportedParameter(
                "ref_text", "Voice cloning needs 'ref_text' (the transcript of ref_audio) unless x_vector_only_mode."
            )
    else:
        for param, value in (("ref_audio", job.ref_audio), ("ref_text", job.ref_text)):
            if value is not None:
                raise UnsupportedParameter(param, f"'{param}' is only valid for task_type Base (voice cloning).")
        if job.x_vector_only_mode:
            raise UnsupportedParameter("x_vector_only_mode", "'x_vector_only_mode' is only valid for task_type Base.")
    if job.task_type == TaskType.VOICE_DESIGN and not (job.instructions or "").strip():
        raise UnsupportedParameter("instructions", "VoiceDesign needs 'instructions' describing the voice.")
    if job.instructions and len(job.instructions) > MAX_INSTRUCTIONS_CHARS:
        raise UnsupportedParameter("instructions", f"Instructions are limited to {MAX_INSTRUCTIONS_CHARS} characters.")
    if job.max_new_tokens is not None and not 1 <= job.max_new_tokens <= max_new_tokens:
        raise UnsupportedParameter("max_new_tokens", f"max_new_tokens must be between 1 and {max_new_tokens}.")
    if job.ref_audio is not None:
        seconds = len(job.ref_audio.samples) / job.ref_audio.sample_rate
        low, high = REFERENCE_SECONDS
        if not low <= seconds <= high:
            raise UnsupportedParameter(
                "ref_audio", f"ref_audio lasts {seconds:.1f} s; it must last {low:g}–{high:g} s."
            )


# Warm-up texts of several lengths, each job's numbered ("Take 12: ..."): a talker with a prefix cache (sglang's radix
# cache) would otherwise prefill one token for every warm-up job after the first, and the prefills a burst brings (many
# requests, hundreds of tokens) would run for the first time on callers' requests.
WARMUP_SENTENCES = (
    "Warming up.",
    "The speech engine is getting ready to talk.",
    "A quick brown fox jumps over the lazy dog while the kettle starts to sing.",
    "Please hold the line for a moment; the next available voice will be with you shortly, and thank you for waiting.",
    "Seven silver spoons sat in a row on the old wooden table, shining in the light of the early morning sun as the "
    "house slowly woke up around them.",
)
_warmup_takes = itertools.count(1)
WARMUP_REF_TEXT = "This is a short reference recording."


@functools.cache
def warmup_reference(seconds: float = 2.0) -> ReferenceAudio:
    """A voiced-sounding 24 kHz clip (a 140 Hz buzz with a slow vowel-like sway) for warming up a cloning checkpoint:
    its speaker encoder and codec encoder then compile before the first caller's clip arrives."""
    t = np.arange(int(seconds * SAMPLE_RATE)) / SAMPLE_RATE
    buzz = sum(np.sin(2 * np.pi * 140 * k * t) / k for k in range(1, 12)) * (0.6 + 0.4 * np.sin(2 * np.pi * 3 * t))
    return ReferenceAudio((buzz / np.abs(buzz).max() * 0.5).astype(np.float32), SAMPLE_RATE)


def warmup_text() -> str:
    """A warm-up text no earlier one in this process began with: the next take, one of the sentences in turn."""
    take = next(_warmup_takes)
    return f"Take {take}: {WARMUP_SENTENCES[take % len(WARMUP_SENTENCES)]}"


def warmup_job(model: Qwen3TTSModel, request_id: str, index: int = 0) -> SynthesisJob:
    """A short request of the kind this checkpoint serves, on a text of its own (`warmup_text`). Base alternates
    in-context cloning (reference transcript) and x-vector-only cloning, so both paths are warm; VoiceDesign follows an
    instruction."""
    text = warmup_text()
    if TaskType.CUSTOM_VOICE in model.task_types:
        return SynthesisJob(request_id, text, model.speakers[0] if model.speakers else "", max_new_tokens=16)
    if TaskType.BASE in model.task_types:
        in_context = index % 2 == 0
        return SynthesisJob(
            request_id,
            text,
            "",
            task_type=TaskType.BASE,
            ref_audio=warmup_reference(),
            ref_text=WARMUP_REF_TEXT if in_context else None,
            x_vector_only_mode=not in_context,
            max_new_tokens=16,
        )
    return SynthesisJob(
        request_id, text, "", task_type=TaskType.VOICE_DESIGN, instructions="A calm voice.", max_new_tokens=16
    )


def warmup_batch_sizes(configured: Sequence[int] | None, limit: int) -> list[int]:
    """The batch sizes to warm up: those configured, else the ones admission can produce, powers of two up to the
    limit and the limit itself."""
    if configured:
        return list(configured)
    return [*[1 << k for k in range(limit.bit_length()) if 1 << k < limit], limit]


async def warm_up(
    model: Qwen3TTSModel,
    batch_sizes: Sequence[int],
    synthesize: Callable[[SynthesisJob], AsyncIterator[AudioChunk]],
    engine: str,
) -> None:
    """Every batch size the service will run pays its first-time costs here, not on a caller's request: `batch`
    warm-up jobs at once for each size, through `synthesize`, logged as "<engine> warm-up". Request ids are unique per
    process: vllm-omni names its /dev/shm windows after them, and two servers on one host warm up alike."""

    async def drain(job: SynthesisJob) -> None:
        async for _ in synthesize(job):
            pass

    for batch in batch_sizes:
        started = time.perf_counter()
        run = uuid.uuid4().hex[:8]
        jobs = [warmup_job(model, f"warmup-{run}-{batch}-{i}", i) for i in range(batch)]
        await asyncio.gather(*(drain(job) for job in jobs))
        log.info(f"{engine} warm-up", extra={"batch": batch, "seconds": round(time.perf_counter() - started, 2)})
