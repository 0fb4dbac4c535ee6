"""WS /v1/audio/speech/stream: text that streams in (an LLM writing), spoken sentence by sentence as it completes.

Wire-compatible with vllm-omni 0.30's endpoint of the same path: the client sends `session.config`, `input.text`
chunks, `input.done` (ends an utterance, keeps the connection) and `session.close`; the server answers per sentence
`audio.start`, binary audio frames (their concatenation is the sentence's file in `response_format`) and `audio.done`,
per utterance `session.done`, and `error`. Unlike vllm-omni's default (`split_granularity` `none`, honoured when
sent), text is not held until `input.done`: a sentence (or a clause, with `clause`) is synthesized as soon as its end
is certain (or SPEECH_WS_SENTENCE_IDLE_S passes with no more text), the next one's
synthesis overlapping the current one's delivery, and the sentences after the first of an utterance are joined to it as
POST /v1/audio/speech joins its sentences (the engine's leading silence trimmed to a natural pause).

With `word_timestamps` the audio travels as vllm-omni's JSON `audio.chunk` frames (base64 of the bytes of
`response_format`, any format here; vllm-omni needs pcm), and after a sentence's audio a trailing `audio.chunk` without
audio carries its words `[{word, start_ms, end_ms}]`, timed from the start of the sentence as vllm-omni times them, plus
`utterance_offset_ms`: where the sentence starts in the utterance's audio (the durations of the sentences before it),
so that `utterance_offset_ms + start_ms` times a word in the whole utterance.

Each sentence is one request through the same stages as POST /v1/audio/speech (`app.speech`): validation, admission
(a sentence being synthesized holds a slot), the engine, encoding and the metrics; this module holds the frames, the
close codes and the session's timing.

Close codes: 1000 `session.close` or the idle timeout; 1001 the server drains (after the current utterance); 1008 a
missing or wrong API key, no valid `session.config` in time, or a first message that is not a valid one (one `error`,
then the close, as from vllm-omni); 1013 the server is full (the `error` before it carries `retry_after`); 1009 a
message over uvicorn's size cap (SPEECH_MAX_BODY_BYTES).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import functools
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any, Literal

from fastapi import APIRouter, WebSocket
from pydantic import ConfigDict, Field, ValidationError, model_validator
from starlette.websockets import WebSocketState

from app import metrics
from app.api.dependencies import service_of
from app.api.errors import ApiError, invalid_param, to_api_error, validation_error, websocket_error_message
from app.audio.formats import DEFAULT_SAMPLE_RATE, ResponseFormat
from app.speech.errors import Failed, Full, ShuttingDown, SpeechError, Stopped
from app.speech.options import DEFAULT_VOICE, Name, SpeechOptions
from app.speech.run import EncodedPiece, SentenceEnd, SpeechService, observe_ttfa, observe_uninterrupted
from app.speech.sentences import Ahead, Granularity, complete_units, final_units
from app.speech.voice import Voice
from app.text.words import WordTiming
from app.timing import ListenerClock, TtfaTimeline

log = logging.getLogger(__name__)
router = APIRouter()

CLOSE_NORMAL = 1000
CLOSE_GOING_AWAY = 1001  # the server drains
CLOSE_POLICY = 1008  # no valid key, or no session.config in time
CLOSE_TRY_AGAIN = 1013  # the server is full

# vllm-omni clients send null for an option they leave unset: null means omitted, as it always has here (the fields
# that could never be null still refuse it)
_NULLABLE = frozenset(SpeechOptions.model_fields) - {"response_format", "word_timestamps"}


class SessionConfig(SpeechOptions):
    """`session.config`: the fields of POST /v1/audio/speech but `input`, plus vllm-omni 0.30's session switches. An
    omitted voice is the model's default voice, `speaker` names it as `voice` does."""

    model_config = ConfigDict(strict=False)  # as vllm-omni reads it: "1.5" is a speed

    type: Literal["session.config"]
    voice: Name = DEFAULT_VOICE  # a name only (no {"id": ...}), as vllm-omni sends it
    response_format: ResponseFormat = "wav"  # vllm-omni's default
    split_granularity: Granularity | None = Field(
        None,
        description="How the text is cut into requests: `sentence` (omitted: the default here), `clause` (also at "
        "commas and semicolons, sooner), or `none` (the whole utterance as one request at input.done, vllm-omni's "
        "default).",
    )
    stream_audio: bool = Field(False, description="vllm-omni's switch; audio always streams here, in every format.")
    word_timestamps: bool = Field(
        False,
        description="Audio as JSON `audio.chunk` frames, and after each sentence's audio a frame with its words' "
        "timings (engines that cannot time words refuse it).",
    )

    @model_validator(mode="before")
    @classmethod
    def _null_is_omitted(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        return {key: value for key, value in data.items() if value is not None or key not in _NULLABLE}


@dataclasses.dataclass
class Sentence:
    utterance: int
    index: int
    text: str
    voice: Voice[SessionConfig]
    arrived: float  # perf_counter when the text that completed it arrived
    timing: TtfaTimeline | None = None  # its milestones, once its synthesis has begun


@dataclasses.dataclass
class AudioChunkFrames:
    """One sentence's vllm-omni `audio.chunk` frames (word_timestamps): its audio in base64, numbered in order."""

    utterance: int
    sentence: int
    sample_rate: int
    sent: int = 0

    def frame(self, data: bytes, start_s: float, end_s: float, words: list[WordTiming] | None) -> dict[str, Any]:
        self.sent += 1
        return {
            "type": "audio.chunk",
            "utterance_index": self.utterance,
            "sentence_index": self.sentence,
            "chunk_id": self.sent - 1,
            "chunk_start_ms": round(start_s * 1000),
            "chunk_end_ms": round(end_s * 1000),
            "sample_rate": self.sample_rate,
            "audio_b64": base64.b64encode(data).decode("ascii"),
            "timestamps": None if words is None else [word.as_dict() for word in words],
        }


@dataclasses.dataclass
class UtteranceEnd:
    utterance: int
    sentences: int
    arrived: float


@dataclasses.dataclass
class Utterance:
    """What one utterance did, logged once when it ends."""

    index: int
    started: float
    chars: int = 0
    sentences: int = 0
    audio_bytes: int = 0
    audio_s: float = 0.0  # the sentences delivered so far: where the next one starts in the utterance's audio
    ttfa_s: float | None = None
    errors: list[str] = dataclasses.field(default_factory=list)
    # when each piece of its audio reached the socket, from the same origin as its TTFA (across its sentences: a
    # listener hears them back to back); and in which format
    listener: ListenerClock | None = None
    response_format: str = ""


class SessionClosed(Exception):
    """The session ends: the code to close with (the client may already be gone)."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


class SpeechStreamSession:
    """One connection: reads the client's messages, cuts the arriving text into sentences, and speaks them in order,
    synthesizing the next while the current one is delivered."""

    def __init__(self, websocket: WebSocket, service: SpeechService) -> None:
        self.ws = websocket
        self.service = service
        self.settings = service.settings
        self.lifecycle = service.lifecycle
        self.session_id = websocket.headers.get("x-request-id") or uuid.uuid4().hex
        self.voice: Voice[SessionConfig] | None = None
        self.granularity: Granularity = "sentence"
        self.buffer = ""
        self.buffered_at = 0.0
        self.quiet_since = time.perf_counter()  # the last message, or the end of the last speech
        self.unspoken = 0  # sentences queued, being synthesized or being delivered
        self.gap_checked = False  # the buffered text has had its SPEECH_WS_SENTENCE_IDLE_S look
        self.utterance = 0
        self.sentence_index = 0  # within the utterance being received
        self.open_utterances: dict[int, Utterance] = {}
        self.queue: asyncio.Queue[Sentence | UtteranceEnd] = asyncio.Queue()
        self.stopped = asyncio.Event()  # a drain out of time stops the session
        self.send_lock = asyncio.Lock()
        self.speaker: asyncio.Task[None] | None = None
        self.all_spoken = asyncio.Event()

    # -- Stoppable, for the lifecycle --------------------------------------------------------------------------------
    def stop(self, reason: str) -> None:
        self.stopped.set()

    # -- the connection ----------------------------------------------------------------------------------------------
    async def run(self) -> None:
        speaker = self.speaker = asyncio.create_task(self.speak())
        drain_seen = False
        receiving: asyncio.Task[dict[str, Any]] | None = None
        code = CLOSE_NORMAL
        try:
            while True:
                if receiving is None:
                    receiving = asyncio.create_task(self.ws.receive())
                drain = asyncio.ensure_future(self.lifecycle.drain_started.wait() if not drain_seen else self.never())
                stop = asyncio.ensure_future(self.stopped.wait())
                waits = {receiving, speaker, drain, stop}
                done, _ = await asyncio.wait(waits, timeout=self.timeout(), return_when=asyncio.FIRST_COMPLETED)
                drain.cancel()
                stop.cancel()
                if speaker in done:
                    speaker.result()  # raises SessionClosed: the speaker ended the session
                    return
                if stop in done:
                    await self.send_error(ShuttingDown())
                    raise SessionClosed(CLOSE_GOING_AWAY)
                if receiving in done:
                    message, receiving = receiving.result(), None
                    self.quiet_since = time.perf_counter()
                    if message["type"] == "websocket.disconnect":
                        code = -1
                        return
                    await self.on_message(message)
                elif drain in done:
                    if not self.open_utterances and not self.buffer.strip():
                        raise SessionClosed(CLOSE_GOING_AWAY)
                    drain_seen = True  # the open utterance is finished first; its end closes the session
                else:
                    await self.on_timeout()
        except SessionClosed as closed:
            code = closed.code
        except Exception:
            log.exception("websocket session failed", extra={"request_id": self.session_id})
            code = 1011
            with contextlib.suppress(Exception):
                await self.send_error(Failed(self.session_id))
        finally:
            for task in (receiving, speaker):
                if task is not None and not task.done():
                    task.cancel()
                    with contextlib.suppress(BaseException):
                        await task
            for key, utterance in list(self.open_utterances.items()):
                self.lifecycle.untrack(self.utterance_key(key))
                if utterance.sentences or utterance.chars:  # cut short: by the client leaving, or the session ending
                    self.log_utterance(utterance, "client_gone" if code == -1 else "stopped")
            if code != -1 and self.ws.application_state == WebSocketState.CONNECTED:
                with contextlib.suppress(Exception):
                    await self.ws.close(code)

    @staticmethod
    async def never() -> None:
        await asyncio.Event().wait()

    def timeout(self) -> float:
        if self.voice is None:
            return self.settings.ws_config_timeout_s
        if self.buffer.strip() and not self.gap_checked:
            return max(0.0, self.buffered_at + self.settings.ws_sentence_idle_s - time.perf_counter())
        if self.unspoken:  # looked at again later: the idle time counts from the end of the speech
            return self.settings.ws_idle_timeout_s
        return max(0.0, self.quiet_since + self.settings.ws_idle_timeout_s - time.perf_counter())

    async def on_timeout(self) -> None:
        if self.voice is None:
            error = ApiError(
                408, "No valid session.config arrived in time.", code="session_config_timeout", param="type"
            )
            await self.send(websocket_error_message(error))
            raise SessionClosed(CLOSE_POLICY)
        now = time.perf_counter()
        if self.buffer.strip() and not self.gap_checked:  # the writer paused: a sentence that looks finished is spoken
            if now < self.buffered_at + self.settings.ws_sentence_idle_s:
                return
            self.gap_checked = True
            # its TTFA counts from the arrival of its text, not from this look
            max_chars = self.settings.sentence_max_chars
            sentences, rest = complete_units(self.buffer, max_chars, self.granularity, final=True)
            self.enqueue(sentences, rest, arrived=self.buffered_at)
            return
        if self.unspoken:  # still speaking: silence from the client is expected
            return
        if now < self.quiet_since + self.settings.ws_idle_timeout_s:  # speech ended meanwhile
            return
        if self.buffer.strip():
            # text that never became a sentence and then a whole idle period of silence: it is spoken, as input.done
            # would have it, never dropped; the session closes after the next idle period
            self.on_done()
            return
        error = ApiError(408, "The session was idle for too long.", code="idle_timeout")
        await self.send(websocket_error_message(error))
        raise SessionClosed(CLOSE_NORMAL)

    async def send(self, message: dict[str, Any]) -> None:
        async with self.send_lock:
            await self.ws.send_text(json.dumps(message))

    async def send_error(self, exc: Exception) -> None:
        await self.send(websocket_error_message(to_api_error(exc)))

    # -- messages from the client ------------------------------------------------------------------------------------
    async def on_message(self, message: dict[str, Any]) -> None:
        raw = message.get("text")
        if raw is None:
            await self.refuse(ApiError(400, "Messages are JSON text frames.", code="invalid_message"))
            return
        if len(raw) > self.settings.max_body_bytes:
            await self.refuse(self.too_large(self.settings.max_body_bytes))
            return
        try:
            data = json.loads(raw)
        except json.JSONDecodeError:
            await self.refuse(ApiError(400, "The message is not valid JSON.", code="invalid_json"))
            return
        if not isinstance(data, dict):
            await self.refuse(ApiError(400, "A message is a JSON object.", code="invalid_request"))
            return
        kind = data.get("type")
        if kind != "session.config" and len(raw.encode()) > self.settings.ws_max_message_bytes:
            await self.refuse(self.too_large(self.settings.ws_max_message_bytes))
            return
        try:
            if kind == "session.config":
                await self.on_config(data)
            elif kind == "input.text":
                self.on_text(data)
            elif kind == "input.done":
                self.on_done()
            elif kind == "session.close":
                self.on_done(close=True)
                await self.finish()
                raise SessionClosed(CLOSE_NORMAL)
            else:
                message_text = f"Unknown message type {kind!r}: session.config, input.text, input.done, session.close."
                raise invalid_param("type", message_text, "unknown_message_type")
        except (ApiError, SpeechError) as exc:
            await self.refuse(to_api_error(exc))

    async def refuse(self, error: ApiError) -> None:
        """Tell the client what was wrong with its message. Before a valid session.config, as from vllm-omni, that
        `error` is the last message: the session closes (1008) instead of answering each later message with it."""
        await self.send(websocket_error_message(error))
        if self.voice is None:
            raise SessionClosed(CLOSE_POLICY)

    def too_large(self, limit: int) -> ApiError:
        return ApiError(413, f"The message exceeds the limit of {limit} bytes.", code="message_too_large")

    async def on_config(self, data: dict[str, Any]) -> None:
        if self.buffer.strip():
            raise invalid_param("type", "Send input.done before a new session.config.", "input_pending")
        try:
            config = SessionConfig.model_validate(data)
        except ValidationError as exc:
            raise validation_error(exc.errors()) from None
        voice = await self.service.resolve_voice(config)
        # everything but the text (word_timestamps too) is checked now
        self.service.build_job(voice, "Hello.", f"{self.session_id}-config")
        self.voice, self.granularity = voice, config.split_granularity or "sentence"

    def on_text(self, data: dict[str, Any]) -> None:
        if self.voice is None:
            raise invalid_param("type", "Send session.config first.", "session_config_required")
        text = data.get("text", "")
        if not isinstance(text, str):
            raise ApiError(400, "'text' must be a string.", param="text", code="invalid_type")
        if self.lifecycle.draining and self.utterance not in self.open_utterances:
            raise ShuttingDown()
        self.begin_utterance()
        self.open_utterances[self.utterance].chars += len(text)
        self.buffer += text
        self.buffered_at = time.perf_counter()
        self.gap_checked = False
        self.enqueue(*complete_units(self.buffer, self.settings.sentence_max_chars, self.granularity))

    def on_done(self, close: bool = False) -> None:
        if self.voice is None:
            if close:
                return
            raise invalid_param("type", "Send session.config first.", "session_config_required")
        if close and self.utterance not in self.open_utterances:
            return
        self.begin_utterance()
        self.enqueue(final_units(self.buffer, self.settings.sentence_max_chars, self.granularity), "")
        self.queue.put_nowait(UtteranceEnd(self.utterance, self.sentence_index, time.perf_counter()))
        self.utterance += 1
        self.sentence_index = 0

    def begin_utterance(self) -> None:
        if self.utterance not in self.open_utterances:
            self.open_utterances[self.utterance] = Utterance(self.utterance, time.perf_counter())
            self.lifecycle.track(self.utterance_key(self.utterance), self)

    def utterance_key(self, utterance: int) -> str:
        return f"{self.session_id}-u{utterance}"

    def enqueue(self, sentences: list[str], rest: str, arrived: float | None = None) -> None:
        """Queues sentences to be spoken; `arrived`: when the text that completed them came (default now)."""
        assert self.voice is not None
        self.buffer = rest
        at = time.perf_counter() if arrived is None else arrived
        for text in sentences:
            self.queue.put_nowait(Sentence(self.utterance, self.sentence_index, text, self.voice, at))
            self.sentence_index += 1
            self.unspoken += 1

    async def finish(self) -> None:
        """Wait until everything queued has been spoken (session.close)."""
        if not self.open_utterances or self.speaker is None:
            return
        self.all_spoken.clear()
        spoken = asyncio.ensure_future(self.all_spoken.wait())
        await asyncio.wait({spoken, self.speaker}, return_when=asyncio.FIRST_COMPLETED)
        spoken.cancel()

    # -- speaking ----------------------------------------------------------------------------------------------------
    async def speak(self) -> None:
        """Sends the sentences in order, each synthesized ahead of its delivery (`Ahead`). A sentence's synthesis
        starts when the previous one's has finished (a session holds one slot at a time, and never queues behind
        itself), while that one is still being sent and played: synthesis runs faster than real time, so the next
        sentence is ready before the current one has been heard. One sentence at most waits ahead of the one sent."""
        started: asyncio.Queue[tuple[Sentence, Ahead[object]] | UtteranceEnd] = asyncio.Queue()
        lookahead = asyncio.Semaphore(2)
        running: list[Ahead[object]] = []

        async def start_sentences() -> None:
            previous: Ahead[object] | None = None
            while True:
                item = await self.queue.get()
                if isinstance(item, Sentence):
                    await lookahead.acquire()
                    previous = Ahead(functools.partial(self.synthesize, item), after=previous)
                    running[:] = [*(ahead for ahead in running if not ahead.task.done()), previous]
                    started.put_nowait((item, previous))
                else:
                    started.put_nowait(item)

        starter = asyncio.create_task(start_sentences())
        try:
            while True:
                entry = await started.get()
                if isinstance(entry, UtteranceEnd):
                    await self.end_utterance(entry)
                    continue
                sentence, produced = entry
                try:
                    await self.deliver(sentence, produced)
                finally:
                    lookahead.release()
                    self.unspoken -= 1
                    if not self.unspoken:
                        self.quiet_since = time.perf_counter()
        finally:
            starter.cancel()
            for ahead in running:
                ahead.task.cancel()
            await asyncio.gather(starter, *(ahead.task for ahead in running), return_exceptions=True)

    async def outcomes(self, produced: Ahead[object]) -> AsyncIterator[object]:
        """A sentence's pieces, words and end, or the error that ended it instead (a failure of the server's own is
        logged here, and told as the session's)."""
        try:
            async for item in produced:
                yield item
        except SpeechError as exc:
            yield exc
        except Exception:
            log.exception("sentence synthesis failed", extra={"request_id": self.session_id})
            yield Failed(self.session_id)

    async def deliver(self, sentence: Sentence, produced: Ahead[object]) -> None:
        utterance = self.open_utterances[sentence.utterance]
        options = sentence.voice.options
        sample_rate = options.sample_rate or DEFAULT_SAMPLE_RATE
        start: dict[str, Any] = {
            "type": "audio.start",
            "utterance_index": sentence.utterance,
            "sentence_index": sentence.index,
            "sentence_text": sentence.text,
            "format": options.response_format,
            "sample_rate": sample_rate,
        }
        frames = AudioChunkFrames(sentence.utterance, sentence.index, sample_rate) if options.word_timestamps else None
        if frames is not None:
            start["word_timestamps"] = True
        await self.send(start)
        total = 0
        spoken_s = 0.0
        words: list[WordTiming] = []
        ended = False  # the sentence's audio came to its end (not an error, nor the session stopping)
        try:
            async with contextlib.aclosing(self.outcomes(produced)) as items:
                async for item in items:
                    if isinstance(item, SpeechError):
                        error = to_api_error(item)
                        utterance.errors.append(error.code or "error")
                        await self.send(websocket_error_message(error))
                        if isinstance(item, Full):
                            raise SessionClosed(CLOSE_TRY_AGAIN)
                        if isinstance(item, Stopped) and item.reason != "timeout":
                            raise SessionClosed(CLOSE_GOING_AWAY)
                        break
                    if isinstance(item, SentenceEnd):
                        ended = True
                        spoken_s = item.duration_s
                        if frames is not None:  # vllm-omni's trailing frame: no audio, the whole sentence's words
                            trailer = frames.frame(b"", 0.0, spoken_s, words)
                            await self.send({**trailer, "utterance_offset_ms": round(utterance.audio_s * 1000)})
                        break
                    if isinstance(item, list):
                        words.extend(item)
                        continue
                    assert isinstance(item, EncodedPiece)
                    if frames is not None:
                        await self.send(frames.frame(item.data, spoken_s, item.end_s, None))
                    else:
                        async with self.send_lock:
                            await self.ws.send_bytes(item.data)
                    if utterance.ttfa_s is None:  # from the arrival of the text that completed the first sentence
                        self.observe_first_audio(utterance, sentence, options.response_format)
                    if utterance.listener is not None:
                        utterance.listener.wrote(time.perf_counter(), utterance.audio_s + item.end_s)
                    total += len(item.data)
                    spoken_s = item.end_s
        finally:
            # every audio.start gets its audio.done, as from vllm-omni: after an error, and when the session is
            # stopped mid-sentence (a drain out of time), with `error` set; not to a client that has gone
            utterance.sentences += 1
            utterance.audio_bytes += total
            utterance.audio_s += spoken_s
            done = {
                "type": "audio.done",
                "utterance_index": sentence.utterance,
                "sentence_index": sentence.index,
                "total_bytes": total,
                "error": not ended,
            }
            with contextlib.suppress(Exception):
                await self.send(done)

    @staticmethod
    def observe_first_audio(utterance: Utterance, sentence: Sentence, response_format: str) -> None:
        """The utterance's TTFA, and its phases: those of the sentence that first spoke, up to its first bytes on the
        socket (they add up to the TTFA, as a request's do over HTTP)."""
        sent = time.perf_counter()
        utterance.ttfa_s = sent - sentence.arrived
        utterance.listener, utterance.response_format = ListenerClock(sentence.arrived), response_format
        phases = {} if sentence.timing is None else dataclasses.replace(sentence.timing, first_byte=sent).phases()
        observe_ttfa(response_format, "websocket", utterance.ttfa_s, phases)

    def synthesize(self, sentence: Sentence) -> AsyncIterator[EncodedPiece | list[WordTiming] | SentenceEnd]:
        """One sentence through the request's stages: its encoded pieces and word timings (timed from the start of
        the sentence), then its SentenceEnd. A later sentence continues the utterance: joined without the engine's
        leading silence."""
        sentence.timing = TtfaTimeline(sentence.arrived)
        return self.service.speak_sentence(
            sentence.voice,
            sentence.text,
            f"{self.session_id}-u{sentence.utterance}s{sentence.index}",
            sentence.timing,
            continues=sentence.index > 0,
        )

    def log_utterance(self, utterance: Utterance, outcome: str) -> None:
        """One log line per utterance, however it ends."""
        log.info(
            "speech utterance",
            extra={
                "request_id": self.session_id,
                "transport": "websocket",
                "utterance": utterance.index,
                "chars": utterance.chars,
                "sentences": utterance.sentences,
                "audio_bytes": utterance.audio_bytes,
                "audio_s": round(utterance.audio_s, 3),
                "ttfa_s": None if utterance.ttfa_s is None else round(utterance.ttfa_s, 4),
                "e2e_s": round(time.perf_counter() - utterance.started, 4),
                "errors": utterance.errors,
                "outcome": outcome,
            },
        )

    async def end_utterance(self, end: UtteranceEnd) -> None:
        utterance = self.open_utterances.pop(end.utterance)
        self.lifecycle.untrack(self.utterance_key(end.utterance))
        await self.send({"type": "session.done", "utterance_index": end.utterance, "total_sentences": end.sentences})
        self.log_utterance(utterance, "completed" if not utterance.errors else "error")
        if not utterance.errors and utterance.ttfa_s is not None and utterance.listener is not None:
            observe_uninterrupted(utterance.response_format, "websocket", utterance.ttfa_s, utterance.listener)
        if not self.open_utterances:
            self.quiet_since = time.perf_counter()
            self.all_spoken.set()
        if self.lifecycle.draining and not self.open_utterances and not self.buffer.strip():
            raise SessionClosed(CLOSE_GOING_AWAY)


@router.websocket("/v1/audio/speech/stream")
async def speech_stream(websocket: WebSocket) -> None:
    await websocket.accept()
    metrics.WS_SESSIONS.inc()
    try:
        session = SpeechStreamSession(websocket, service_of(websocket.app.state))
        if session.lifecycle.draining:
            await session.send_error(ShuttingDown())
            await websocket.close(CLOSE_GOING_AWAY)
            return
        await session.run()
    finally:
        metrics.WS_SESSIONS.dec()
