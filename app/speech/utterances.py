"""Text that streams in (an LLM writing), spoken as it is made, whatever carries it (the WebSocket:
`app.api.speech_stream`).

An utterance's text arrives in pieces (`StreamedSpeech.text`) and ends with `done`. It is cut into the pieces whose
end is certain, as `split_granularity` asks (`complete_units`): a sentence (or a clause) is synthesized as soon as it
is complete, or once SPEECH_WS_SENTENCE_IDLE_S passes with no more text and it looks finished; `none` holds the whole
utterance until `done`. Each sentence is one request through the same stages as POST /v1/audio/speech
(`SpeechService.speak_sentence`): admission (a sentence being synthesized holds a slot), the engine, encoding and the
metrics; the sentences after the first of an utterance are joined to it (the engine's leading silence trimmed).

Sentences are spoken in order, the next one synthesized while the current one is delivered (`Ahead`), and each
utterance is accounted once, when it ends: its TTFA and phases (from the arrival of the text that completed its first
sentence to its first bytes delivered), its time to uninterrupted audio (only when it had no error), and one
"speech utterance" log line, however it ends.

What the client is told goes through a `SpeechSink`, whose calls are awaited in order, one sentence after the other.
A sink rather than an iterator of events, because
- every started sentence is told its end, also when speaking is cancelled mid-sentence (a drain out of time, the
  client gone): that end is told from a `finally`, which a generator being closed cannot yield from;
- delivery paces the speech: a sentence's look-ahead slot is freed once its last call returned, and the clocks (the
  TTFA, the listener's) are read when the client has been told, not when the audio was made;
- the transport decides which errors end the whole stream, by raising from `SpeechSink.error`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import NoReturn, Protocol

from app import metrics
from app.speech.errors import Failed, Refused, ShuttingDown, SpeechError, Stopped
from app.speech.options import SpeechOptions
from app.speech.run import Delivery, SpeechRun, SpeechService, observe_ttfa, observe_uninterrupted
from app.speech.sentences import Ahead, Granularity, complete_units, final_units
from app.speech.voice import Voice
from app.text.normalize import IS_SSML, ZERO_WIDTH_SPACE, is_ssml
from app.text.words import WordTiming, written_words
from app.timing import ListenerClock, TtfaTimeline

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class EncodedPiece:
    """A sentence's next encoded bytes, and how far into its audio they reach."""

    data: bytes
    end_s: float


@dataclasses.dataclass(frozen=True)
class SentenceEnd:
    duration_s: float  # the sentence's audio, as synthesized


async def speak_sentence(
    service: SpeechService,
    voice: Voice[SpeechOptions],
    text: str,
    request_id: str,
    timing: TtfaTimeline,
    continues: bool,
    stream_ended_as: Callable[[], str | None],
    delivery: Delivery,
) -> AsyncIterator[EncodedPiece | list[WordTiming] | SentenceEnd]:
    """One sentence of streamed text as a request of its own (the WebSocket's): checked, admitted (it holds a
    slot while it is synthesized), synthesized and encoded; its pieces and word timings (timed from the start of
    the sentence), then its end. `continues`: a later sentence of the utterance, joined without the engine's
    leading silence. The utterance's TTFA is observed by the caller, at its first bytes on the wire. Its end is
    counted as its `delivery` ends; a sentence cut off by the stream's end under `stream_ended_as`'s reason."""
    turn = time.perf_counter()  # its deadline counts from here; its TTFA from its text's arrival
    service.check_ready()
    job, output = service.build_job(voice, text, request_id, continues=continues)
    run = SpeechRun(
        service, timing.received, timing, {}, "websocket", observe_ttfa=False, stream_ended_as=stream_ended_as,
        deadline_from=turn, words_as_played=False,  # timed from the sentence's start as synthesized, as its trailer
        delivery=delivery,  # counted as it is delivered (`Speaker.deliver`): it is synthesized ahead of that
    )  # fmt: skip
    ticket = await run.admitted(len(text))  # waited for no longer than its deadline, counted from its turn
    audio = await run.open(job, output, ticket)
    async for item in audio.events():
        yield EncodedPiece(item, audio.encoded_s) if isinstance(item, bytes) else item
    yield SentenceEnd(audio.encoded_s)


@dataclasses.dataclass
class Sentence:
    """One piece of an utterance, spoken as a request of its own."""

    utterance: int
    index: int  # within its utterance
    text: str
    voice: Voice[SpeechOptions]
    arrived: float  # perf_counter when the text that completed it arrived
    timing: TtfaTimeline | None = None  # its milestones, once its synthesis has begun
    # words written after it with nothing to say ("😊") that ended its utterance, timed (with no length) at its end
    trailing: list[str] = dataclasses.field(default_factory=list)
    words_told: bool = False  # its audio came to its end and its words went with it: `trailing` is read no more
    delivery: Delivery = dataclasses.field(default_factory=Delivery)  # its end is counted as it is delivered


@dataclasses.dataclass
class UtteranceEnd:
    utterance: int
    sentences: int
    arrived: float
    refusal: Refused | None = None  # its text held nothing that can be spoken: told before its end
    # words with nothing to say that ended it after its last sentence's words were told: timed at its end, with it
    trailing: list[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class Utterance:
    """What one utterance did, logged once when it ends."""

    index: int | None  # None: a refusal that opened none, logged as an utterance of its own
    started: float
    chars: int = 0
    sentences: int = 0
    audio_bytes: int = 0
    audio_s: float = 0.0  # the sentences delivered so far: where the next one starts in the utterance's audio
    ttfa_s: float | None = None
    text_seen: bool = False  # text other than whitespace arrived
    ssml: bool = False  # its text began with SSML's root: refused as it came, none of it spoken
    errors: list[str] = dataclasses.field(default_factory=list)
    failed: bool = False  # one of its errors was the server's own (`SpeechError.server_fault`), a drain's aside
    # when each piece of its audio reached the client, from the same origin as its TTFA (across its sentences: a
    # listener hears them back to back); and in which format
    listener: ListenerClock | None = None
    response_format: str = ""

    def first_audio(self, sentence: Sentence) -> None:
        """The utterance's TTFA, and its phases: those of the sentence that first spoke, up to its first bytes
        delivered (they add up to the TTFA, as a request's do over HTTP)."""
        sent = time.perf_counter()
        response_format = sentence.voice.options.response_format
        self.ttfa_s = sent - sentence.arrived
        self.listener, self.response_format = ListenerClock(sentence.arrived), response_format
        phases = {} if sentence.timing is None else dataclasses.replace(sentence.timing, first_byte=sent).phases()
        observe_ttfa(response_format, "websocket", self.ttfa_s, phases)

    def observe_uninterrupted(self) -> None:
        """Its time to uninterrupted audio: only for an utterance that completed without an error."""
        if not self.errors and self.ttfa_s is not None and self.listener is not None:
            observe_uninterrupted(self.response_format, "websocket", self.ttfa_s, self.listener)

    def failed_with(self, error: SpeechError, code: str) -> None:
        """One of its sentences ended with `error`, told to the client as `code`. A drain that stops it is the
        server's, but no failure (as an HTTP stream a drain stops is none): the stream's end says what it was."""
        self.errors.append(code)
        self.failed |= error.server_fault and not (isinstance(error, Stopped) and error.by_drain)

    def outcome(self, cut_short_as: str | None = None) -> str:
        """How it ended: error where one of its errors was the server's own, whatever ended it; else, cut short by
        the stream's end, as that end is told (`cut_short_as`); else completed, or refused where the request's
        errors were all it had."""
        if self.failed:
            return "error"
        if cut_short_as is not None:
            return cut_short_as
        return "refused" if self.errors else "completed"

    def ended(self, request_id: str, outcome: str) -> None:
        """One log line per utterance, however it ends, and one count for each that had text."""
        # an input.done with no text (or blanks alone) before it speaks nothing: not served; one whose text was all
        # refused was told so, and counts as what it was
        if self.text_seen or self.errors:
            metrics.WS_UTTERANCES.labels(outcome).inc()
        log.info(
            "speech utterance",
            extra={
                "request_id": request_id,
                "transport": "websocket",
                "utterance": self.index,
                "chars": self.chars,
                "sentences": self.sentences,
                "audio_bytes": self.audio_bytes,
                "audio_s": round(self.audio_s, 3),
                "ttfa_s": None if self.ttfa_s is None else round(self.ttfa_s, 4),
                "e2e_s": round(time.perf_counter() - self.started, 4),
                "errors": self.errors,
                "outcome": outcome,
            },
        )


class SpeechSink(Protocol):
    """What the client is told, in this order per sentence: `sentence_started`, its `audio` (then `sentence_spoken`
    when its audio came to its end, or `error` instead), and `sentence_ended` always; `utterance_done` after an
    utterance's last sentence. Each call returns once the client has been told. A call may raise to end the speaking:
    the exception leaves the task that `StreamedSpeech.start` made; except `sentence_ended`, told as well as it can be
    (its errors are ignored: it also ends sentences cut short, for a client that may be gone)."""

    def error_code(self, error: SpeechError) -> str:
        """The code the client is told for `error`, as the utterance's log line lists it."""
        ...

    async def sentence_started(self, sentence: Sentence) -> None: ...

    async def audio(self, sentence: Sentence, data: bytes, start_s: float, end_s: float) -> None:
        """The next encoded bytes of the sentence's file: from `start_s` to `end_s` into its audio."""
        ...

    async def sentence_spoken(
        self, sentence: Sentence, words: list[WordTiming], duration_s: float, offset_s: float
    ) -> None:
        """The sentence's audio came to its end: its words (timed from its start, when asked for), its length, and
        where it starts in the utterance's audio (the lengths of the sentences before it)."""
        ...

    async def sentence_ended(self, sentence: Sentence, audio_bytes: int, error: bool) -> None:
        """The end of every started sentence; `error`: its audio did not come to its end."""
        ...

    async def error(self, error: SpeechError) -> None: ...

    async def utterance_done(self, utterance: int, sentences: int, words: list[WordTiming]) -> None:
        """The utterance's end; `words`: those with nothing to say that ended it after its last sentence's words were
        told, timed from its start (at its end)."""
        ...


class StreamedSpeech:
    """One stream of text (a WebSocket connection) and its utterances: text in, cut into sentences that queue to be
    spoken in order by the task that `start` makes. Each open utterance is tracked by the lifecycle; a drain out of
    time stops the whole stream (`stopped`)."""

    def __init__(
        self, service: SpeechService, request_id: str, cut_off: Callable[[], str | None] = lambda: None
    ) -> None:
        self.service = service
        # the transport's reason it cut the stream off, once it has (a client that stopped reading: client_stalled),
        # known before the stream is closed (a send to that client fails first and ends the speaking): the reason a
        # sentence cut off with it is counted under; None, a client that left
        self.cut_off = cut_off
        self.settings = service.settings
        self.lifecycle = service.lifecycle
        self.request_id = request_id
        # the lifecycle's key for this session's utterances: a caller may give two sessions one request id
        self.tracked_as = f"{request_id}-{uuid.uuid4().hex[:8]}"
        self.voice: Voice[SpeechOptions] | None = None
        self.granularity: Granularity = "sentence"
        self.buffer = ""
        self.buffered_at = 0.0
        # the last message, or the end of the last speech (when its listener has heard it), whichever is later
        self.quiet_since = time.perf_counter()
        self.heard_until = 0.0  # when a listener playing every utterance so far, one after another, has heard them
        self.unspoken = 0  # sentences queued, being synthesized or being delivered
        self.unspoken_chars = 0  # their text's
        self.room = asyncio.Event()  # set while their text is under SPEECH_WS_MAX_READ_AHEAD_CHARS: more may be read
        self.room.set()
        self.gap_checked = False  # the buffered text has had its SPEECH_WS_SENTENCE_IDLE_S look
        self.utterance = 0
        self.sentence_index = 0  # within the utterance being received
        self.last_sentence: Sentence | None = None  # the last one queued
        self.open_utterances: dict[int, Utterance] = {}
        self.queue: asyncio.Queue[Sentence | UtteranceEnd] = asyncio.Queue()
        self.stopped = asyncio.Event()  # a drain out of time stops the stream
        self.stopped_as: str | None = None  # the reason it gave
        self.speaker: asyncio.Task[None] | None = None
        self.all_spoken = asyncio.Event()

    def stop(self, reason: str) -> None:  # Stoppable, for the lifecycle
        self.stopped_as = self.stopped_as or reason
        self.stopped.set()

    def ended_as(self) -> str | None:
        """Why the stream was cut short, where it was: the transport's cut (`cut_off`), or a drain out of time that
        stopped it (drain); None, a client that left. A sentence cut off with it, being synthesized or delivered, is
        counted under it."""
        return self.cut_off() or self.stopped_as

    @property
    def mid_utterance(self) -> bool:
        """Text of the current utterance has come, its input.done not yet (some of it may be queued or spoken);
        empty or blank messages are no text of it."""
        utterance = self.open_utterances.get(self.utterance)
        return utterance is not None and (utterance.text_seen or utterance.ssml)

    @property
    def idle(self) -> bool:
        """Nothing to finish: no open utterance, no text waiting (a drain may end the stream now)."""
        return not self.open_utterances and not self.buffer.strip()

    @property
    def max_chars(self) -> int:
        """The longest piece the text is cut into: SPEECH_SENTENCE_MAX_CHARS, or the longest `input` a request may
        have where that is shorter (SPEECH_MAX_INPUT_CHARS): each piece is a request of its own, and one longer would
        be refused after its audio.start, its text lost."""
        return min(self.settings.sentence_max_chars, self.service.engine.capabilities().max_input_chars)

    async def configure(self, options: SpeechOptions, granularity: Granularity) -> None:
        """The voice and options of the utterances that follow, checked now: everything but the text."""
        voice = await self.service.resolve_voice(options)
        self.service.build_job(voice, "Hello.", f"{self.request_id}-config")  # word_timestamps too
        self.voice, self.granularity = voice, granularity

    def heard(self) -> None:
        """The client sent something: the idle time counts from now, or from the end of what it still hears."""
        self.quiet_from(time.perf_counter())

    def quiet_from(self, at: float) -> None:
        """The idle time counts from `at` (perf_counter), unless already from later."""
        self.quiet_since = max(self.quiet_since, at)

    def text(self, text: str) -> None:
        """More text of the current utterance (its first opens it). `ShuttingDown` when the server drains, no utterance
        is open and the session's grace (text already on its way when the drain began) is over. Blank text before an
        utterance's first words opens none (an LLM's empty deltas): nothing a drain or a new config waits for."""
        # the space a zero-width space marks, as the voice is given it (`normalize_text`): the text is cut into
        # sentences, and its words bounded, before each sentence is normalised, and two words joined by one were one
        text = text.replace(ZERO_WIDTH_SPACE, " ")
        if not text.strip() and self.utterance not in self.open_utterances:
            return
        if self.lifecycle.draining and self.utterance not in self.open_utterances:
            if self.lifecycle.session_grace_left_s() <= 0:
                raise ShuttingDown()
        self.refuse_ssml(text)
        units, rest = complete_units(self.buffer + text, self.max_chars, self.granularity)
        limit = self.service.engine.capabilities().max_input_chars
        # a word is never cut: one past what a request may speak, its end in this text (a sentence's or a space's:
        # the words of the waiting text but a last one still open), could only be refused after its sentence's
        # audio.start; refused here, as the same word waiting for its end is
        ended = [] if self.granularity == "none" else rest.split() if rest[-1:].isspace() else rest.split()[:-1]
        if (longest := max([*(unit.strip() for unit in units), *ended], key=len, default="")) and len(longest) > limit:
            self.refuse_text(
                text,
                Refused(
                    "text",
                    f"A word is never cut, and a sentence holds at most {limit} characters (the longest input of a "
                    f"request): this input.text would make one of {len(longest)}, beginning {longest[:24]!r}. It was "
                    "not added (text sent before it still waits): send it again without that word.",
                    "string_too_long",
                ),
            )
        # the text left waiting for its end holds at most what one request may: unbounded, each message would scan more
        # (as a request would have it: the blanks around it are no part of what is spoken; a piece of `max_chars`
        # waits with the space before it and the one after it)
        waiting = len(rest.strip())
        if waiting > limit:
            why = (
                "an utterance with split_granularity 'none' is spoken as one text"
                if self.granularity == "none"
                else "text with no sentence end or space to cut at waits"
            )
            self.refuse_text(
                text,
                Refused(
                    "text",
                    f"At most {limit} characters wait to be spoken at once ({why}); this input.text would make it "
                    f"{waiting}. It was not added: send input.done, then the rest.",
                ),
            )
        self.begin_utterance()
        self.open_utterances[self.utterance].chars += len(text)
        self.open_utterances[self.utterance].text_seen |= bool(text.strip())
        self.buffer += text
        self.buffered_at = time.perf_counter()
        self.gap_checked = False
        self.enqueue(units, rest)

    def refuse_text(self, text: str, refusal: Refused) -> NoReturn:
        """`text` refused whole, none of it taken: the client is told an error of its request's. An open utterance
        keeps it (it then ends as refused, as one whose SSML or unreadable sentence was refused). Where none is open,
        none is opened (a session.config may still come, a drain finds nothing to wait for, and the text the client
        sends again is an utterance of its own): the refusal is counted and logged at once, as an utterance that
        ended refused with nothing taken, and no index (the next utterance takes the one it would have had)."""
        utterance = self.open_utterances.get(self.utterance)
        alone = utterance is None
        if utterance is None:
            utterance = Utterance(None, time.perf_counter())
        utterance.chars += len(text)  # what arrived of it, as a refused SSML message's characters are
        utterance.errors.append(refusal.code)
        if alone:
            utterance.ended(self.request_id, "refused")
        raise refusal

    def refuse_ssml(self, text: str) -> None:
        """An utterance whose text begins with SSML's root (perhaps across messages: nothing of it is queued before
        its first sentence ends) is refused as a request of it is, from the message that shows it to its end: read
        sentence by sentence, its first would be refused and the rest read out, closing tag and all."""
        utterance = self.open_utterances.get(self.utterance)
        if utterance is None or not utterance.ssml:
            if self.sentence_index or not is_ssml(self.buffer + text):
                return
            self.begin_utterance()
            utterance = self.open_utterances[self.utterance]
            utterance.ssml = utterance.text_seen = True
            self.buffer = ""  # the root's start, held while it could still have been text
        refusal = Refused(
            "text",
            f"This utterance's text {IS_SSML}, so none of it is spoken. Send input.done, then the words without the "
            "markup.",
        )
        utterance.chars += len(text)
        utterance.errors.append(refusal.code)
        raise refusal

    def done(self, close: bool = False) -> None:
        """The current utterance ends: the rest of its text is spoken, then its end is told. With `close` (the stream
        ends) only an utterance already open is ended. Text arrived and none of it can be spoken (emoji, symbols
        alone): it ends without a sentence, refused as a request of the same text is (told before its end)."""
        if close and self.utterance not in self.open_utterances:
            return
        self.begin_utterance()
        sentences = final_units(self.buffer, self.max_chars, self.granularity)
        refusal = None
        trailing: list[str] = []
        utterance = self.open_utterances[self.utterance]
        last = self.last_sentence
        if not sentences and not self.sentence_index and utterance.text_seen and not utterance.ssml:
            refusal = Refused("text", "The utterance's text contains nothing that can be spoken.")
        elif not sentences and self.sentence_index and last is not None:  # its words go with the last sentence's
            if not last.words_told:
                last.trailing += written_words(self.buffer)  # (none but punctuation: nothing)
            elif self.voice is not None and self.voice.options.word_timestamps:  # already told: with the end
                trailing = written_words(self.buffer)
        self.enqueue(sentences, "")
        self.queue.put_nowait(UtteranceEnd(self.utterance, self.sentence_index, time.perf_counter(), refusal, trailing))
        self.utterance += 1
        self.sentence_index = 0

    def wait_s(self) -> float:
        """How long until `look` has something to do."""
        if self.buffer.strip() and not self.gap_checked:
            return max(0.0, self.buffered_at + self.settings.ws_sentence_idle_s - time.perf_counter())
        if self.unspoken:  # looked at again later: the idle time counts from the end of the speech
            return self.settings.ws_idle_timeout_s
        return max(0.0, self.quiet_since + self.settings.ws_idle_timeout_s - time.perf_counter())

    def look(self) -> bool:
        """After `wait_s`: a sentence that looks finished is spoken when the writer paused; True when the stream has
        been idle too long (nothing to speak, and nothing heard for SPEECH_WS_IDLE_TIMEOUT_S)."""
        now = time.perf_counter()
        if self.buffer.strip() and not self.gap_checked:  # the writer paused: a sentence that looks finished is spoken
            if now < self.buffered_at + self.settings.ws_sentence_idle_s:
                return False
            self.gap_checked = True
            # its TTFA counts from the arrival of its text, not from this look
            sentences, rest = complete_units(self.buffer, self.max_chars, self.granularity, final=True)
            self.enqueue(sentences, rest, arrived=self.buffered_at)
            return False
        if self.unspoken:  # still speaking: silence from the client is expected
            return False
        if now < self.quiet_since + self.settings.ws_idle_timeout_s:  # speech ended meanwhile
            return False
        if self.buffer.strip():
            # text that never became a sentence and then a whole idle period of silence: it is spoken, as `done`
            # would have it, never dropped; the stream is idle after the next idle period
            self.done()
            return False
        return True

    def begin_utterance(self) -> None:
        if self.utterance not in self.open_utterances:
            self.open_utterances[self.utterance] = Utterance(self.utterance, time.perf_counter())
            self.lifecycle.track(self.utterance_key(self.utterance), self, self.request_id)

    def utterance_key(self, utterance: int) -> str:
        return f"{self.tracked_as}-u{utterance}"

    def enqueue(self, sentences: list[str], rest: str, arrived: float | None = None) -> None:
        """Queues sentences to be spoken; `arrived`: when the text that completed them came (default now)."""
        assert self.voice is not None
        self.buffer = rest
        at = time.perf_counter() if arrived is None else arrived
        for text in sentences:
            self.last_sentence = Sentence(self.utterance, self.sentence_index, text, self.voice, at)
            self.queue.put_nowait(self.last_sentence)
            self.sentence_index += 1
            self.unspoken += 1
            self.unspoken_chars += len(text)
        self._make_room()

    def spoken(self, sentence: Sentence) -> None:
        """`sentence` is off the queue (delivered, or given up): its text leaves room to read more, and where it was
        the last, the idle time counts from now."""
        self.unspoken -= 1
        self.unspoken_chars -= len(sentence.text)
        self._make_room()
        if not self.unspoken:
            self.quiet_from(time.perf_counter())

    def _make_room(self) -> None:
        # more text is read while what is queued to be spoken (not yet delivered) is under the read-ahead: past it,
        # the next message waits until some has been spoken, so that a client that writes faster than it is spoken
        # (megabytes a second, compressed to kilobytes on the wire) is held back by its connection instead of held
        # in memory
        if self.unspoken_chars < self.settings.ws_max_read_ahead_chars:
            self.room.set()
        else:
            self.room.clear()

    def start(self, sink: SpeechSink) -> asyncio.Task[None]:
        """Speak what is queued, now and later, through `sink`: the task ends when a drain may end the stream (the
        last open utterance ended while the server drains), or with what the sink raised."""
        self.speaker = asyncio.create_task(Speaker(self, sink).run())
        return self.speaker

    async def finish(self) -> None:
        """Wait until everything queued has been spoken, speaking ended, or a drain out of time stopped the stream."""
        if not self.open_utterances or self.speaker is None:
            return
        self.all_spoken.clear()
        spoken = asyncio.ensure_future(self.all_spoken.wait())
        stopped = asyncio.ensure_future(self.stopped.wait())
        await asyncio.wait({spoken, stopped, self.speaker}, return_when=asyncio.FIRST_COMPLETED)
        spoken.cancel()
        stopped.cancel()

    async def close(self, outcome: str) -> None:
        """The stream ends: speaking stops, and each utterance it cut short is logged with `outcome`. A sentence
        still being synthesized is counted under the transport's cut, as `outcome` is (a client that stopped
        reading is not one that left)."""
        if self.speaker is not None and not self.speaker.done():
            self.speaker.cancel()
            with contextlib.suppress(BaseException):
                await self.speaker
        for key, utterance in list(self.open_utterances.items()):
            self.lifecycle.untrack(self.utterance_key(key))
            if utterance.sentences or utterance.chars:  # cut short: by the client leaving, or the stream ending
                utterance.ended(self.request_id, utterance.outcome(cut_short_as=outcome))
        self.open_utterances.clear()  # each counted once, should the stream be closed again


class Speaker:
    """Speaks a stream's sentences in order, each synthesized ahead of its delivery (`Ahead`). A sentence's synthesis
    starts when the previous one's has finished (a stream holds one slot at a time, and never queues behind itself),
    while that one is still being delivered and played: synthesis runs faster than real time, so the next sentence is
    ready before the current one has been heard. One sentence at most waits ahead of the one delivered."""

    def __init__(self, speech: StreamedSpeech, sink: SpeechSink) -> None:
        self.speech = speech
        self.sink = sink

    async def run(self) -> None:
        speech = self.speech
        started: asyncio.Queue[tuple[Sentence, Ahead[object]] | UtteranceEnd] = asyncio.Queue()
        lookahead = asyncio.Semaphore(2)
        running: list[Ahead[object]] = []

        async def start_sentences() -> None:
            previous: Ahead[object] | None = None
            while True:
                item = await speech.queue.get()
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
                    if await self.end_utterance(entry):
                        return
                    continue
                sentence, produced = entry
                try:
                    await self.deliver(sentence, produced)
                finally:
                    lookahead.release()
                    speech.spoken(sentence)
                    sentence.delivery.ended(False, 0.0, None)  # (ended by `deliver` unless cut off in its start)
        finally:
            starter.cancel()
            # synthesized ahead of a delivery that never began (the stream ended first): none of it was delivered
            while not started.empty():
                if isinstance(entry := started.get_nowait(), tuple):
                    entry[0].delivery.ended(False, 0.0, None)
            for ahead in running:
                ahead.task.cancel()
            await asyncio.gather(starter, *(ahead.task for ahead in running), return_exceptions=True)

    def synthesize(self, sentence: Sentence) -> AsyncIterator[EncodedPiece | list[WordTiming] | SentenceEnd]:
        """One sentence through the request's stages: its encoded pieces and word timings (timed from the start of
        the sentence), then its SentenceEnd. A later sentence continues the utterance: joined without the engine's
        leading silence."""
        sentence.timing = TtfaTimeline(sentence.arrived)
        return speak_sentence(
            self.speech.service,
            sentence.voice,
            sentence.text,
            f"{self.speech.request_id}-u{sentence.utterance}s{sentence.index}",
            sentence.timing,
            continues=sentence.index > 0,
            stream_ended_as=self.speech.ended_as,
            delivery=sentence.delivery,
        )

    async def outcomes(self, produced: Ahead[object]) -> AsyncIterator[object]:
        """A sentence's pieces, words and end, or the error that ended it instead (a failure of the server's own is
        logged here, and told as the stream's)."""
        try:
            async for item in produced:
                yield item
        except SpeechError as exc:
            yield exc
        except Exception:
            log.exception("sentence synthesis failed", extra={"request_id": self.speech.request_id})
            yield Failed(self.speech.request_id)

    async def deliver(self, sentence: Sentence, produced: Ahead[object]) -> None:
        utterance = self.speech.open_utterances[sentence.utterance]
        await self.sink.sentence_started(sentence)
        total = 0
        spoken_s = 0.0
        words: list[WordTiming] = []
        ended = False  # the sentence's audio came to its end (not an error, nor the stream stopping)
        try:
            async with contextlib.aclosing(self.outcomes(produced)) as items:
                async for item in items:
                    if isinstance(item, SpeechError):
                        utterance.failed_with(item, self.sink.error_code(item))
                        await self.sink.error(item)
                        break
                    if isinstance(item, SentenceEnd):
                        ended = True
                        spoken_s = item.duration_s
                        words += [WordTiming(word, spoken_s, spoken_s) for word in sentence.trailing]
                        sentence.words_told = True
                        await self.sink.sentence_spoken(sentence, words, spoken_s, utterance.audio_s)
                        break
                    if isinstance(item, list):
                        words.extend(item)
                        continue
                    assert isinstance(item, EncodedPiece)
                    await self.sink.audio(sentence, item.data, spoken_s, item.end_s)
                    if utterance.ttfa_s is None:  # from the arrival of the text that completed the first sentence
                        utterance.first_audio(sentence)
                    if utterance.listener is not None:
                        utterance.listener.wrote(time.perf_counter(), utterance.audio_s + item.end_s)
                    total += len(item.data)
                    spoken_s = item.end_s
        finally:
            # every started sentence is told its end: after an error, and when the stream is stopped mid-sentence (a
            # drain out of time), as an error; not to a client that has gone
            utterance.sentences += 1
            utterance.audio_bytes += total
            utterance.audio_s += spoken_s
            # its end counted as delivered, not as synthesized: a sentence whose client stopped reading or left was
            # sent only in part (or not at all), however far its synthesis got
            sentence.delivery.ended(ended, spoken_s, time.perf_counter())
            with contextlib.suppress(Exception):
                await self.sink.sentence_ended(sentence, total, error=not ended)

    async def end_utterance(self, end: UtteranceEnd) -> bool:
        """The utterance's end told, logged and observed; True when a drain may now end the stream."""
        speech = self.speech
        if end.refusal is not None:
            speech.open_utterances[end.utterance].failed_with(end.refusal, self.sink.error_code(end.refusal))
            await self.sink.error(end.refusal)
        # told before it stops being open: a stream that closes once nothing is open (session.close) must not close
        # while the end is still on its way to the client
        at = speech.open_utterances[end.utterance].audio_s  # the utterance's end
        trailing = [WordTiming(word, at, at) for word in end.trailing]
        await self.sink.utterance_done(end.utterance, end.sentences, trailing)
        utterance = speech.open_utterances.pop(end.utterance)
        speech.lifecycle.untrack(speech.utterance_key(end.utterance))
        utterance.ended(speech.request_id, utterance.outcome())
        utterance.observe_uninterrupted()
        # its speech ends when a listener playing it from its first audio has heard it all: a client playing the
        # reply is listening, not idle, until then (its next turn comes after it)
        listener = utterance.listener
        if listener is not None and listener.heard_by is not None:  # played after the ones before it, if they last
            speech.heard_until = max(listener.heard_by, speech.heard_until + listener.audio_s)
        speech.quiet_from(max(time.perf_counter(), speech.heard_until))
        if not speech.open_utterances:
            speech.all_spoken.set()
        return speech.lifecycle.draining and speech.idle
