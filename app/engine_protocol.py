"""The engine protocol: the one interface between a request for speech (`app.speech`) and speech synthesis.

Nothing above this module imports an engine library. An engine takes a `SynthesisJob` and streams mono float32
`AudioChunk`s at its native sample rate; resampling and encoding belong to `app.speech.encoding`, transport to
`app.api`.
"""

from __future__ import annotations

import enum
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np

from app.text.normalize import ReadingRules
from app.text.words import WordTiming
from app.timing import TtfaTimeline


class TaskType(enum.StrEnum):
    """Qwen3-TTS task types: a preset speaker, a voice described in words, or a voice cloned from reference audio."""

    CUSTOM_VOICE = "CustomVoice"
    VOICE_DESIGN = "VoiceDesign"
    BASE = "Base"


@dataclass(frozen=True, slots=True)
class ReferenceAudio:
    """Decoded reference audio for voice cloning: mono float32 in [-1, 1]."""

    samples: np.ndarray
    sample_rate: int


@dataclass(frozen=True, slots=True)
class SynthesisJob:
    """Everything a request asks of an engine. `voice` is already resolved to an engine voice id."""

    request_id: str  # unique per job (the engines key their work on it)
    text: str
    voice: str
    language: str | None = None
    instructions: str | None = None
    speed: float = 1.0
    task_type: TaskType = TaskType.CUSTOM_VOICE
    ref_audio: ReferenceAudio | None = None
    ref_text: str | None = None
    x_vector_only_mode: bool = False
    max_new_tokens: int | None = None
    # with max_new_tokens: run to exactly that many tokens, past the model's end of speech (vLLM's benchmark field);
    # engines without an end-of-speech token ignore it
    ignore_eos: bool = False
    seed: int | None = None
    initial_codec_chunk_frames: int | None = None  # None: the deployment's own first-chunk size
    non_streaming_mode: bool | None = None  # None: the model's default prompt mode
    word_timestamps: bool = False  # the chunks carry `words` (engines whose capabilities say they can)
    # a precomputed speaker embedding to clone from (task Base, x-vector only), instead of reference audio
    speaker_embedding: tuple[float, ...] | None = None
    # vllm-omni's `extra_params`: temperature/top_p/top_k for the talker, the whole object as the model's extra_args
    extra_params: dict[str, Any] | None = field(default=None, compare=False)
    # the text continues an utterance whose audio the listener is hearing right now (a sentence after the first of a
    # WebSocket utterance): an engine that joins sentences trims its leading silence as it does between its own
    # sentences; others may ignore it
    continues: bool = False
    trace_id: str = ""  # the caller's request id (X-Request-Id), for logs; not unique: callers may reuse it
    # the request's TTFA milestones: an engine marks "submitted" when it hands the work to its model
    timing: TtfaTimeline | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class AudioChunk:
    """A piece of synthesized speech. Token counts are increments, summed by the caller for usage reporting.

    `words` (only for jobs that asked for them): words of the job's text, timed in seconds from this chunk's first
    sample. The times may be negative: a word spoken in an earlier chunk of the same job is timed back from here (a
    forced aligner can only time a sentence once all of its audio has streamed, so its words come in an empty chunk
    after that audio). Whoever places the chunk on a timeline (the sentence pipeline, the HTTP and WebSocket
    transports) shifts its words by the chunk's start, which puts every word where it was spoken."""

    samples: np.ndarray  # mono float32, [-1, 1]
    sample_rate: int
    input_tokens: int = 0
    output_tokens: int = 0
    words: tuple[WordTiming, ...] = ()
    input_audio_tokens: int = 0  # of input_tokens, those of reference audio (an in-context clone's codec frames)

    @property
    def duration_s(self) -> float:
        return len(self.samples) / self.sample_rate


@dataclass(frozen=True, slots=True)
class VoiceInfo:
    id: str
    name: str
    languages: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class EngineCapabilities:
    """What an engine can honour. Request fields it cannot honour are refused with a 400 naming the field."""

    task_types: frozenset[TaskType]
    voice_cloning: bool
    instructions: bool  # False: instructions are accepted and ignored, as OpenAI's tts-1 does
    languages: tuple[str, ...]
    max_input_chars: int
    seed: bool
    max_new_tokens: bool
    sample_rate: int  # native output rate of the engine's chunks
    max_concurrency: int = 1  # syntheses the engine serves well at once: the default admission limit
    speed_range: tuple[float, float] = (0.25, 4.0)  # speeds honoured; others are refused, naming `speed`
    reading: ReadingRules = field(default_factory=ReadingRules)  # what the voices read; the rest is refused
    initial_chunk_frames: tuple[int, int] | None = None  # the first-chunk sizes honoured, in codec frames; None: none
    prompt_modes: bool = False  # honours `non_streaming_mode` (Qwen3-TTS prompt construction)
    word_timestamps: bool = False  # can time each word of the input (its own alignment, or a forced aligner's)
    # the `language`s whose words it can time (None: every language it speaks). An aligner with a list is English-only
    # (Whisper tiny.en): with `language` omitted or Auto, text in a script other than Latin is refused
    word_timestamps_languages: tuple[str, ...] | None = None
    word_timestamps_missing: str = ""  # when it cannot time words: what the server lacks to do so (told to callers)
    speaker_embedding_dim: int | None = None  # clones from a precomputed embedding of this size; None: cannot
    extra_params: bool = False  # honours vllm-omni's `extra_params` (sampling and the model's extra arguments)


@dataclass(slots=True)
class EngineHealth:
    ready: bool
    detail: str = ""
    extra: dict[str, str] = field(default_factory=dict)
    # gone for good (it died, or never started): only a restart of the process brings it back, so liveness fails
    failed: bool = False


class EngineError(Exception):
    """The engine failed while synthesizing: the client hears of a 500 (a status, an SSE or WebSocket error)."""


class EngineUnavailable(EngineError):
    """The engine is not loaded, still warming up, or has died: a 503, worth a retry."""


class UnsupportedParameter(Exception):
    """A request field this engine cannot honour: 400 with `param` naming the field."""

    def __init__(self, param: str, message: str) -> None:
        super().__init__(message)
        self.param = param
        self.message = message


@runtime_checkable
class ReadsAhead(Protocol):
    """An engine that can tell, cheaply and before synthesis, which piece of text its voice cannot read (the sentence
    pipeline asks it for every sentence before the first audio, so that no request fails half-way)."""

    async def unreadable(self, pieces: list[str]) -> str | None: ...


@runtime_checkable
class TimesItsStart(Protocol):
    """An engine that times its start phase by phase: seconds per phase, in the order they ran (empty before its start
    has finished). The server logs them and exports them as `speech_start_seconds`."""

    def start_phases(self) -> dict[str, float]: ...


@runtime_checkable
class Profiles(Protocol):
    """An engine whose processes run the PyTorch profiler on request, writing traces under the server's
    `profiler_dir` (`profiled` finds it behind the fronts)."""

    async def start_profile(self, run_id: str) -> str: ...  # the folder this run's traces go to

    async def stop_profile(self, run_id: str | None) -> None: ...  # None: whichever run is on


@runtime_checkable
class RecordsTimelines(Protocol):
    """A profiling engine whose processes can also record, without the PyTorch profiler, when each request passed each
    of their steps (a request timeline): written under the run's folder, stopped by `stop_profile`."""

    async def start_timeline(self, run_id: str) -> str: ...  # the folder this run's timeline goes to


@runtime_checkable
class SpeechEngine(Protocol):
    """A speech engine. `start` loads and warms it; `synthesize` streams audio for one job."""

    name: str
    model_id: str

    async def start(self) -> None: ...

    def synthesize(self, job: SynthesisJob) -> AsyncIterator[AudioChunk]: ...

    async def abort(self, request_id: str) -> None: ...

    def voices(self) -> list[VoiceInfo]: ...

    def languages(self) -> list[str]: ...

    def capabilities(self) -> EngineCapabilities: ...

    def health(self) -> EngineHealth: ...

    async def close(self) -> None: ...


class EngineFront:
    """A SpeechEngine in front of another one (the sentence pipeline, the forced aligner): whatever a front does not
    change is the engine's behind it."""

    def __init__(self, engine: SpeechEngine) -> None:
        self.inner = engine

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def model_id(self) -> str:
        return self.inner.model_id

    async def start(self) -> None:
        await self.inner.start()

    async def close(self) -> None:
        await self.inner.close()

    def health(self) -> EngineHealth:
        return self.inner.health()

    def voices(self) -> list[VoiceInfo]:
        return self.inner.voices()

    def languages(self) -> list[str]:
        return self.inner.languages()

    def capabilities(self) -> EngineCapabilities:
        return self.inner.capabilities()

    async def abort(self, request_id: str) -> None:
        await self.inner.abort(request_id)

    def start_phases(self) -> dict[str, float]:
        return self.inner.start_phases() if isinstance(self.inner, TimesItsStart) else {}


def profiled(engine: SpeechEngine) -> Profiles | None:
    """The engine behind every front, where it can profile itself; None where it cannot."""
    while isinstance(engine, EngineFront):
        engine = engine.inner
    return engine if isinstance(engine, Profiles) else None
