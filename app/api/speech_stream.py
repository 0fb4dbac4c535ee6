"""WS /v1/audio/speech/stream: text that streams in (an LLM writing), spoken sentence by sentence as it completes.

Wire-compatible with vllm-omni 0.30's endpoint of the same path: the client sends `session.config`, `input.text`
chunks, `input.done` (ends an utterance, keeps the connection) and `session.close`; the server answers per sentence
`audio.start`, binary audio frames (their concatenation is the sentence's file in `response_format`) and `audio.done`,
per utterance `session.done`, and `error`. Unlike vllm-omni's default (`split_granularity` `none`, honoured when
sent), text is not held until `input.done`: each sentence (or clause) is spoken as soon as its end is certain, the next
one synthesized while the current one is delivered (`app.speech.utterances`: the text's cutting, the sentences'
scheduling and each utterance's accounting). This module reads the client's messages (their limits, the connection's
timeouts); `app.api.speech_frames` words the speech as frames.

With `word_timestamps` the audio travels as vllm-omni's JSON `audio.chunk` frames (base64 of the bytes of
`response_format`, any format here; vllm-omni needs pcm), and after a sentence's audio a trailing `audio.chunk` without
audio carries its words `[{word, start_ms, end_ms}]`, timed from the start of the sentence as vllm-omni times them, plus
`utterance_offset_ms`: where the sentence starts in the utterance's audio (the durations of the sentences before it),
so that `utterance_offset_ms + start_ms` times a word in the whole utterance.

Close codes: 1000 `session.close` or the idle timeout; 1001 the server drains (after the current utterance); 1008 a
missing or wrong API key, no valid `session.config` in time, or a first message that is not a valid one (one `error`,
then the close, as from vllm-omni); 1013 the server is full (the `error` before it carries `retry_after`); 1009 a
message over uvicorn's size cap (SPEECH_MAX_BODY_BYTES); 1007 a text frame that is not UTF-8 (uvicorn closes it, no
`error` first); 1011 the session failed for a reason of the server's own (`error` `internal_error` first).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from typing import Any, Literal, NoReturn
from urllib.parse import urlsplit

from fastapi import APIRouter, WebSocket
from pydantic import ConfigDict, Field, ValidationError, field_validator
from pydantic_core import PydanticCustomError
from starlette.websockets import WebSocketState

from app import metrics
from app.api.audio_stream import STALLED_STATE_KEY, UNSENT_STATE_KEY
from app.api.dependencies import service_of
from app.api.errors import (
    ApiError,
    invalid_param,
    missing_parameter,
    name_not_unicode,
    shown_name,
    to_api_error,
    unknown_parameter,
    validation_error,
)
from app.api.json_body import loads
from app.api.middleware import STREAM_PATH, refused_session, request_id_of
from app.api.speech_frames import (
    CLOSE_GOING_AWAY,
    CLOSE_INTERNAL_ERROR,
    CLOSE_NORMAL,
    CLOSE_NOT_UTF8,
    CLOSE_POLICY,
    CLOSE_TOO_BIG,
    CLOSE_TRY_AGAIN,
    Frames,
    SessionClosed,
)
from app.audio.formats import ResponseFormat
from app.speech.errors import EngineFailed, Failed, ShuttingDown, SpeechError, Unavailable
from app.speech.options import DEFAULT_VOICE, SpeechOptions, VoiceName, VoiceRef, field_types
from app.speech.run import SpeechService
from app.speech.sentences import Granularity
from app.speech.utterances import StreamedSpeech

log = logging.getLogger(__name__)
router = APIRouter()

CONFIG_TIMEOUT = "session_config_timeout"


def _spelled(char: str) -> str:
    """`char` as a JSON string may hold it: itself, or its \\u escape in hex digits of either case."""
    digits = "".join(f"[{digit}{digit.upper()}]" if digit.isalpha() else digit for digit in f"{ord(char):04x}")
    return f"(?:{re.escape(char)}|\\\\u{digits})"


# every JSON string that json.loads reads as "session.config" (a few more match: one quoted inside another)
_SESSION_CONFIG = re.compile('"' + "".join(map(_spelled, "session.config")) + '"')


def names_session_config(raw: str) -> bool:
    """Whether the JSON text `raw` holds a string reading session.config: as every client writes it, or spelled with
    \\u escapes (searched for only where there are any escapes: the pattern is several times slower)."""
    return '"session.config"' in raw or ("\\u" in raw and _SESSION_CONFIG.search(raw) is not None)


def _takes_numbers(annotation: Any) -> bool:
    """A field of numbers (int, float, a list of floats), optional or annotated or not."""
    return any(kind in (int, float, list[float]) for kind in field_types(annotation))


# the fields read leniently (numbers may come as text), but not from a switch nor from digits with underscores
_NUMBERS = tuple(name for name, field in SpeechOptions.model_fields.items() if _takes_numbers(field.annotation))


class SessionConfig(SpeechOptions):
    """`session.config`: the fields of POST /v1/audio/speech but `input`, plus vllm-omni 0.30's session switches. An
    omitted voice is the model's default voice, `speaker` names it as `voice` does. Null for an optional field is the
    field omitted (vllm-omni clients send it for what they leave unset), and a switch is true or false, as in the body
    (`JsonFields`)."""

    model_config = ConfigDict(strict=False)  # numbers as vllm-omni reads them: "1.5" is a speed

    type: Literal["session.config"]
    voice: VoiceName | VoiceRef = DEFAULT_VOICE  # vllm-omni sends a name; OpenAI's {"id": ...} as the body takes it
    response_format: ResponseFormat = "wav"  # vllm-omni's default
    split_granularity: Granularity | None = Field(
        None,
        description="How the text is cut into requests: `sentence` (omitted: the default here), `clause` (also at "
        "commas, semicolons, colons and dashes, sooner), or `none` (the whole utterance as one request at input.done, "
        "vllm-omni's default).",
    )
    stream_audio: bool = Field(False, description="vllm-omni's switch; audio always streams here, in every format.")
    word_timestamps: bool = Field(
        False,
        description="Audio as JSON `audio.chunk` frames, and after each sentence's audio a frame with its words' "
        "timings (engines that cannot time words refuse it).",
    )

    @field_validator(*_NUMBERS, mode="before")
    @classmethod
    def _numbers_are_numbers(cls, value: Any) -> Any:
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, bool):  # lenient reading would take true for 1
                raise PydanticCustomError("number_type", "must be a number, not true or false")
            if isinstance(item, str) and "_" in item:  # Python reads "1_0" as 10: not what a client meant
                raise PydanticCustomError("number_parsing", "must be a number, without '_'")
        return value


def is_first_half(ch: str) -> bool:
    return "\ud800" <= ch <= "\udbff"


def is_second_half(ch: str) -> bool:
    return "\udc00" <= ch <= "\udfff"


class Utf16Halves:
    """The text of a session's input.text messages with each character whole. JSON writes a character beyond the
    BMP (an emoji) as two UTF-16 escapes, and Python reads them as two code points; a client that cuts its text by
    UTF-16 length (JavaScript's) can send the halves in two messages. A first half that ends a message is held for
    the next; a half with no other is no character, refused as a request holding it is."""

    def __init__(self) -> None:
        self.held = ""  # a first half that ended the last message taken

    def split(self, text: str) -> tuple[str, str, ApiError | None]:
        """What of `text` is taken now (the half held before it where `text` begins with its other, each pair one
        character), the first half it ends with (to hold once the text is taken), and the refusal of a half held
        that `text` does not complete (dropped). Raises the refusal of `text` for a half in it with no other.
        Changes nothing: a message refused after this (too long, a drain) leaves the half held as it was."""
        if not text:
            return "", self.held, None
        own, last = (text[:-1], text[-1]) if is_first_half(text[-1]) else (text, "")
        completes = bool(self.held) and is_second_half(own[:1])
        if (lone := first_lone_half(own[1:] if completes else own)) is not None:
            index, half = lone
            raise not_unicode(f"a lone surrogate (U+{half:04X}) at {index + int(completes)}")
        stray = None
        if self.held and not completes:
            stray = not_unicode(
                f"the message before this one ended with half a character (U+{ord(self.held):04X}) that this one "
                "does not begin with the other half of; the half was dropped"
            )
        whole = (self.held if completes else "") + own
        return whole.encode("utf-16-le", "surrogatepass").decode("utf-16-le"), last, stray

    def end(self) -> ApiError | None:
        """The text ends (input.done, session.close): the refusal of a half still held, which has no other."""
        held, self.held = self.held, ""
        if not held:
            return None
        return not_unicode(f"the text ended with half a character (U+{ord(held):04X}); the half was dropped")


def first_lone_half(text: str) -> tuple[int, int] | None:
    """Where `text`'s first UTF-16 half that is not one of a pair is, and which it is."""
    index = 0
    while index < len(text):
        if is_first_half(text[index]) and is_second_half(text[index + 1 : index + 2]):
            index += 2
        elif is_first_half(text[index]) or is_second_half(text[index]):
            return index, ord(text[index])
        else:
            index += 1
    return None


def not_unicode(why: str) -> ApiError:
    return invalid_param("text", f"'text' is not valid Unicode: {why}.")


class SpeechStreamSession:
    """One connection: reads the client's messages into its `StreamedSpeech`, whose speech goes out as `Frames`."""

    def __init__(self, websocket: WebSocket, service: SpeechService) -> None:
        self.ws = websocket
        self.service = service
        self.settings = service.settings
        self.unread: tuple[int, float] | None = None  # what its client had not read when last looked at, and since when
        # why the server cut the connection, where its work ends under that reason and not as its client's leaving
        self.closed_as: str | None = None
        self.lifecycle = service.lifecycle
        self.session_id = request_id_of(websocket.scope)  # the id its upgrade was answered with
        self.speech = StreamedSpeech(service, self.session_id, self.cut_off)
        self.frames = Frames(websocket)
        self.halves = Utf16Halves()

    async def run(self) -> None:
        speaker = self.speech.start(self.frames)
        drain_seen = False
        receiving: asyncio.Task[dict[str, Any]] | None = None
        code = CLOSE_NORMAL
        try:
            while True:
                # the next message is read once the text read ahead of the speech leaves room for it: a client that
                # writes faster than it is spoken waits on its connection, its text not held here
                if receiving is None and self.speech.room.is_set():
                    receiving = asyncio.create_task(self.ws.receive())
                reading: asyncio.Future[Any] = receiving or asyncio.ensure_future(self.speech.room.wait())
                drain = asyncio.ensure_future(self.lifecycle.drain_started.wait() if not drain_seen else never())
                stop = asyncio.ensure_future(self.speech.stopped.wait())
                waits = {reading, speaker, drain, stop}
                done, _ = await asyncio.wait(waits, timeout=self.timeout(), return_when=asyncio.FIRST_COMPLETED)
                drain.cancel()
                stop.cancel()
                if receiving is None:
                    reading.cancel()
                    if reading in done:
                        continue  # room to read the next message
                if speaker in done:
                    speaker.result()  # raises the SessionClosed that the frames raised
                    raise SessionClosed(CLOSE_GOING_AWAY)  # else the last utterance ended while the server drains
                if stop in done:
                    await self.stopped_by_drain()
                if receiving in done:
                    message, receiving = receiving.result(), None
                    self.speech.heard()
                    if message["type"] == "websocket.disconnect":  # the client left, or uvicorn closed on it
                        # the client's own fault, which uvicorn closed on: a message over the body limit, a text
                        # frame that is not UTF-8; its open utterance was refused, not its client gone
                        if message.get("code") in (CLOSE_TOO_BIG, CLOSE_NOT_UTF8):
                            self.closed_as = "refused"
                            if self.speech.voice is None:  # before any session.config: a session refused
                                refused_session(self.ws.scope, self.closed_for(message["code"]))
                        code = -1
                        return
                    await self.on_message(message)
                elif drain in done:
                    drain_seen = True  # the open utterance is finished first; its end closes the session
                    # idle, unless its client's next message is already on its way (sent with the session's first:
                    # a session that began just before the drain is served, not closed with its text unread)
                    grace = self.lifecycle.session_grace_left_s()
                    # (no message is read while speech is queued: then it is not idle)
                    if self.speech.idle and not (receiving and (await asyncio.wait({receiving}, timeout=grace))[0]):
                        raise SessionClosed(CLOSE_GOING_AWAY)
                elif self.speech.voice is None:
                    message = "No valid session.config arrived in time."
                    await self.refuse(ApiError(408, message, code=CONFIG_TIMEOUT, param="type"))
                else:
                    was_mid = self.speech.mid_utterance
                    if self.speech.look():
                        if self.listening():
                            self.speech.heard()  # idle from when it has read its audio, not from when it was sent
                        else:
                            message = "The session was idle for too long."
                            await self.frames.close_with(ApiError(408, message, code="idle_timeout"), CLOSE_NORMAL)
                    elif was_mid and not self.speech.mid_utterance:
                        # the idle time ended the utterance as input.done would: so is a half it held dropped, and
                        # said (it would have crossed into the next utterance, and held back its session.config)
                        if (stray := self.halves.end()) is not None:
                            await self.frames.send_error(stray)
        except SessionClosed as closed:
            code = closed.code
        except Exception:
            log.exception("websocket session failed", extra={"request_id": self.session_id})
            code = CLOSE_INTERNAL_ERROR
            with contextlib.suppress(Exception):
                await self.frames.send_error(Failed(self.session_id))
        finally:
            if receiving is not None and not receiving.done():
                receiving.cancel()
                with contextlib.suppress(BaseException):
                    await receiving
            await self.speech.close(self.outcome(code))
            if code != -1 and self.ws.application_state == WebSocketState.CONNECTED:
                with contextlib.suppress(Exception):
                    await self.ws.close(code)

    def listening(self) -> bool:
        """Its client is still reading audio sent to it (a player reading a long reply in real time holds minutes of
        it unread in the connection): listening, not idle, while it has read some within
        SPEECH_CLIENT_STALL_TIMEOUT_S. The look that finds it has read it all also counts as listening: the idle
        time starts again from there."""
        probe = self.ws.scope.get("state", {}).get(UNSENT_STATE_KEY)
        unsent = probe() if callable(probe) else 0
        now = time.monotonic()
        if unsent <= 0:
            was_reading, self.unread = self.unread is not None, None
            return was_reading
        if self.unread is None or unsent < self.unread[0]:  # first seen, or it read since the last look
            self.unread = (unsent, now)
            return True
        self.unread = (unsent, self.unread[1])
        return now - self.unread[1] < self.settings.client_stall_timeout_s

    def closed_for(self, code: int) -> ApiError:
        """The refusal of a session uvicorn closed for its client's frame before it spoke, as a request is refused
        for a body of the same fault: too large (1009), no text (1007)."""
        if code == CLOSE_TOO_BIG:
            return too_large(self.settings.max_body_bytes)
        return ApiError(400, "A text frame must hold UTF-8 text.", code="invalid_message")

    def cut_off(self) -> str | None:
        """Why the server cut the connection, where it did: refused (a message over the body limit, 1009; a text frame
        that is not UTF-8, 1007), or client_stalled (aborted because its client stopped reading)."""
        if self.closed_as is not None:
            return self.closed_as
        return "client_stalled" if self.ws.scope.get("state", {}).get(STALLED_STATE_KEY) else None

    def outcome(self, code: int) -> str:
        """How the session's open utterances ended: the client left, stopped reading (the connection was aborted),
        the session failed (an error of the server's own), the server was full (refused, as a 429 is), the server
        cut it (`cut_off`), or the session was closed."""
        if cut := self.cut_off():
            return cut
        return {-1: "client_gone", CLOSE_INTERNAL_ERROR: "error", CLOSE_TRY_AGAIN: "refused"}.get(code, "stopped")

    async def stopped_by_drain(self) -> NoReturn:
        await self.frames.drain_ended(ShuttingDown())

    async def closed_while_finishing(self) -> None:
        """What ended speaking before all of it was spoken ends the session as it would have without the client's
        session.close: the frames' close (a full server: 1013), or a drain out of time (1001)."""
        speaker = self.speech.speaker
        if speaker is not None and speaker.done() and not speaker.cancelled() and speaker.exception() is not None:
            speaker.result()  # raises the SessionClosed that the frames raised
        if self.speech.stopped.is_set():
            await self.stopped_by_drain()

    def timeout(self) -> float:
        return self.settings.ws_config_timeout_s if self.speech.voice is None else self.speech.wait_s()

    async def on_message(self, message: dict[str, Any]) -> None:
        try:
            data = self.read(message)
            kind = data.get("type")
            # told in JSON's terms, as `text` is: an unknown type is named in the message, and a value that is no
            # string would be named in Python's ("None", "True")
            if kind is None:  # null is the field omitted, and a message's type is required
                raise missing_parameter("type")
            if not isinstance(kind, str):
                raise ApiError(400, "'type' must be a string.", param="type", code="invalid_type")
            if kind == "session.config":
                if self.speech.mid_utterance or self.halves.held:  # a config changes whole utterances only
                    raise invalid_param("type", "Send input.done before a new session.config.", "input_pending")
                try:
                    config = SessionConfig.model_validate(data)
                except ValidationError as exc:
                    raise validation_error(exc.errors()) from None
                await self.speech.configure(config, config.split_granularity or "sentence")
            elif kind == "input.text":
                self.require_config()
                refuse_unknown_fields(data, "text")
                if "text" not in data:  # not an empty text: a client's mistake, named as POST names `input` missing
                    raise missing_parameter("text")
                text = data["text"]
                if not isinstance(text, str):
                    raise ApiError(400, "'text' must be a string.", param="text", code="invalid_type")
                taken, held, stray = self.halves.split(text)
                self.speech.text(taken)
                self.halves.held = held  # once the text is taken: a message refused holds nothing
                if stray is not None:
                    raise stray
            elif kind == "input.done":
                self.require_config()
                refuse_unknown_fields(data)
                self.speech.done()
                if (stray := self.halves.end()) is not None:  # the utterance goes on to its end without it
                    raise stray
            elif kind == "session.close":  # what was sent is spoken first
                refuse_unknown_fields(data)
                self.speech.done(close=True)
                self.halves.end()  # the session ends: a half left over is not answered
                await self.speech.finish()
                await self.closed_while_finishing()
                raise SessionClosed(CLOSE_NORMAL)
            else:
                message_text = f"Unknown message type {kind!r}: session.config, input.text, input.done, session.close."
                raise invalid_param("type", message_text, "unknown_message_type")
        except (ApiError, SpeechError) as exc:
            # before a valid session.config, as from vllm-omni, that `error` is the last message: the session closes
            # (1008) instead of answering each later message with it
            if self.speech.voice is None:
                await self.refuse(to_api_error(exc))
            await self.frames.send_error(exc)

    async def refuse(self, error: ApiError) -> None:
        """No session without a valid session.config: told `error`, counted and logged as refused, closed 1008."""
        refused_session(self.ws.scope, error)
        await self.frames.close_with(error, CLOSE_POLICY)

    def read(self, message: dict[str, Any]) -> dict[str, Any]:
        """A client's message as a JSON object, within the size limits (a session.config may carry a reference
        audio: only the body limit applies to it)."""
        raw = message.get("text")
        if raw is None:
            raise ApiError(400, "Messages are JSON text frames.", code="invalid_message")
        if len(raw) > self.settings.max_body_bytes:
            raise too_large(self.settings.max_body_bytes)
        # told by its size before it is parsed: parsing megabytes of JSON (arrays nested deep, a million numbers)
        # holds the event loop, and every other session, for as long, for a message refused anyway. Only a
        # session.config may be longer, and one that holds no string reading session.config cannot be one. A message
        # crafted to hold that string is still parsed (up to SPEECH_MAX_BODY_BYTES, as a request's body is)
        size = len(raw.encode())
        over = size > self.settings.ws_max_message_bytes
        if over and not names_session_config(raw):
            raise too_large(self.settings.ws_max_message_bytes)
        try:
            data = loads(raw)  # a number too long to read: refused naming its field, as in a body
        except (ValueError, RecursionError):  # not JSON; arrays nested too deep
            raise ApiError(400, "The message is not valid JSON.", code="invalid_json") from None
        if not isinstance(data, dict):
            raise ApiError(400, "A message is a JSON object.", code="invalid_request")
        if over and data.get("type") != "session.config":  # it only held the string (a field's name or value)
            raise too_large(self.settings.ws_max_message_bytes)
        return data

    def require_config(self) -> None:
        if self.speech.voice is None:
            raise invalid_param("type", "Send session.config first.", "session_config_required")


def refuse_unknown_fields(data: dict[str, Any], *fields: str) -> None:
    """A message's fields beyond `type` and its own are refused as POST /v1/audio/speech refuses them (vllm-omni reads
    past them): a field the client meant to matter is never dropped unnoticed."""
    for name in data:
        if name != "type" and name not in fields:
            if first_lone_half(name) is not None:  # half a UTF-16 pair (JSON's "\ud800"): echoed, the error would
                # be no valid Unicode, which a strict client cannot parse; told by code point, as session.config's
                raise ApiError(400, name_not_unicode(name), code="unknown_parameter")
            raise unknown_parameter(name)


def too_large(limit: int) -> ApiError:
    return ApiError(413, f"The message exceeds the limit of {limit} bytes.", code="message_too_large")


async def never() -> None:
    await asyncio.Event().wait()


@router.get(STREAM_PATH, include_in_schema=False)
async def speech_stream_over_http() -> None:
    """The WebSocket's address asked without an upgrade: 426, naming what it needs, not a 404."""
    raise ApiError(
        426, "This endpoint is a WebSocket: connect to it with a WebSocket client (an Upgrade: websocket request).",
        code="upgrade_required", headers={"Upgrade": "websocket", "Connection": "Upgrade"},
    )  # fmt: skip


def foreign_origin(websocket: WebSocket, allowed: list[str]) -> str | None:
    """The Origin of a browser's page that may not open a session here, or None: a WebSocket has no CORS of its own,
    so without this check any site a user visits could speak through a server the user reaches (a keyless one on
    their machine). A page of this server's own host may, and those of SPEECH_CORS_ORIGINS ("*": any), as over HTTP;
    a client that is no browser sends no Origin."""
    origin = websocket.headers.get("origin")
    if origin is None or "*" in allowed or origin in allowed:
        return None
    host = websocket.headers.get("host", "")
    return None if urlsplit(origin).netloc.lower() == host.lower() else origin


async def deny_upgrade(websocket: WebSocket, refusal: ApiError) -> None:
    """The session refused before the upgrade, with the HTTP answer a request would get; counted and logged."""
    refused_session(websocket.scope, refusal)
    await websocket.send_denial_response(refusal.response())


@router.websocket(STREAM_PATH)
async def speech_stream(websocket: WebSocket) -> None:
    service = service_of(websocket.app.state)
    if (origin := foreign_origin(websocket, service.settings.cors_origins)) is not None:
        message = (
            f"A page of {shown_name(origin)} may not open a session here: its origin is not among SPEECH_CORS_ORIGINS."
        )
        await deny_upgrade(websocket, ApiError(403, message, code="origin_not_allowed"))
        return
    try:
        service.check_not_draining()
        service.check_ready()  # an engine loading or failed for good would fail every sentence after its audio.start
    except (ShuttingDown, Unavailable, EngineFailed) as exc:
        # refused before the upgrade, as the HTTP 503 a request gets: a balancer retries it on another replica, which
        # it could not do with a session closed after the upgrade
        await deny_upgrade(websocket, to_api_error(exc))
        return
    await websocket.accept()
    metrics.WS_SESSIONS.inc()
    try:
        await SpeechStreamSession(websocket, service).run()
    finally:
        metrics.WS_SESSIONS.dec()
