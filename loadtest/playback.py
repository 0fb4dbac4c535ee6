"""What a listener hears: a player that starts at the first audio (or once a jitter buffer holds enough) and plays in
real time, stalling whenever the audio received so far runs out, and resuming as soon as more arrives.

The player needs to know, for every moment a chunk arrived, how many seconds of audio the bytes received so far can
play. That mapping is exact for pcm (s16le mono at the requested rate) and wav (past the header, at the rate and
frame size its `fmt ` chunk names). For compressed formats it is packet-exact and counts what a player plays: the
response is demuxed and decoded with PyAV (FFmpeg), and the audio the decoder gives for a packet counts as playable once
the packet's last byte has arrived; Ogg Opus is read by `loadtest.ogg`, a packet counting once the page holding its last
segment is complete, for the time the granule positions give it. The priming and padding a stream signals (Opus's
pre-skip and end trimming, an mp3 LAME/Xing header's encoder delay and padding) are not played, as FFmpeg's decoder
drops them from `audio_s` too; those a stream does not signal (an mp3 stream without that header, as this service
sends, and raw ADTS, which has no field for it) a decoder plays, and so they count: silence before the speech and
after it, the lead the service shifts its word timestamps by (`app.audio.formats`). A real decoder's buffering may add
a little latency this model does not see: for compressed formats the stall figures are a close lower bound, for pcm
and wav they are exact up to the client's own scheduling.

Time to uninterrupted audio: a listener who starts at S plays the audio at position p at S + p, so a chunk that
arrives at t after A seconds of audio came before it is in time if t <= S + A. The earliest start from which no chunk
is late is S = max over chunks of (t - A): `Playback.uninterrupted_s`, counted by the server's own `ListenerClock`
(app.timing) from the arrivals as the server counts it from its writes. The first chunk (A = 0) makes S at least the
first audio; how far beyond it S lies is the stream's largest deficit (`deficit_s`), the time-measured buffer that a
listener starting at the first audio would need never to run dry. It is the same listener as below: without a
buffer, the player's stalls add up to exactly the deficit (each wait moves the rest of the audio later, and only a
chunk later than every one before it makes it wait again), and a player that starts `deficit_s` late (`delay_s`)
never stalls, while any later start in audio terms (`buffer_s`) avoids stalls exactly when it starts at S or after.
A stream "ran dry" when its deficit exceeds EPSILON_S, the float noise the player already ignores.

Streamed text (the WebSocket endpoint) arrives as one file per sentence; `listen_sentences` plays them back to back
and tells the silence at the joins between sentences (gaps) from the waits inside a sentence (stalls).
"""

from __future__ import annotations

import bisect
import io
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import av

from app.timing import RAN_DRY_EPSILON_S, ListenerClock
from loadtest.ogg import opus_timeline

# Stalls shorter than this are float noise in the arithmetic, not gaps a listener could hear; the server's listener
# (app.timing, which also computes the time to uninterrupted audio for both) ignores the same.
EPSILON_S = RAN_DRY_EPSILON_S

# Received payload bytes -> seconds of audio they make playable.
PlayableSeconds = Callable[[int], float]


@dataclass(frozen=True)
class Wait:
    """The player ran dry: at this point of the audio (seconds into it), for this long."""

    at_audio_s: float
    waited_s: float


@dataclass(frozen=True)
class Playback:
    start_s: float  # when the player started, in seconds since the request was sent
    stalls: int  # times the player ran dry before the end of the audio
    stalled_s: float  # total time spent waiting for audio after playback started
    audio_s: float  # seconds of audio played
    waits: tuple[Wait, ...] = ()  # each stall, in order
    # (seconds since send, seconds of audio playable by then) at each arrival that added audio: when each piece of
    # audio came, e.g. to see which of a stream's windows came late
    timeline: tuple[tuple[float, float], ...] = ()
    # the least audio the player held at any moment before the last arrival (just before some arrival), how close a
    # stream that never ran dry came to it; negative: the longest wait. None when no audio arrived after playback began
    least_in_hand_s: float | None = None
    # the earliest start (seconds since send) from which a real-time listener never runs dry, whatever the buffer;
    # and how far it lies past the first playable audio (the largest deficit, 0 for a stream that never ran dry)
    uninterrupted_s: float | None = None
    deficit_s: float | None = None

    @property
    def ran_dry(self) -> bool | None:
        """Whether a listener starting at the first audio would have run dry (None where nothing was modelled)."""
        return None if self.deficit_s is None else self.deficit_s > EPSILON_S


@dataclass(frozen=True)
class SentencePlayback:
    """An utterance heard sentence after sentence: the waits inside sentences are its stalls (`playback`), those at
    the joins between sentences its gaps, one per join (0 where the next sentence was there in time)."""

    playback: Playback
    gaps_s: tuple[float, ...]


def simulate_playback(
    arrivals: Sequence[tuple[float, float]], buffer_s: float = 0.0, delay_s: float = 0.0
) -> Playback | None:
    """`arrivals`: (seconds since send, seconds of audio playable by then) at every received chunk, in arrival order.

    Playback starts at the first arrival that makes audio playable, or, with a buffer, at the first one that makes at
    least `buffer_s` playable (or all of it, for a clip shorter than the buffer); `delay_s` later still (a buffer
    counted in time: with the stream's `deficit_s`, the player never stalls). After that the playhead advances in
    real time; when it reaches the end of what has arrived before the next arrival, that is one stall, lasting until
    that arrival. None when no audio arrived at all."""
    points: list[tuple[float, float]] = []
    for at, audio in arrivals:
        if audio > (points[-1][1] if points else 0.0):  # chunks that add nothing playable change nothing
            points.append((at, audio))
    if not points:
        return None
    need = min(buffer_s, points[-1][1])
    start = next(i for i, (_, audio) in enumerate(points) if audio >= need - EPSILON_S)
    clock = points[start][0] + delay_s
    while delay_s > 0 and start + 1 < len(points) and points[start + 1][0] <= clock:  # arrived by a late start
        start += 1
    begin, available = clock, points[start][1]
    played = 0.0
    waits: list[Wait] = []
    least: float | None = None
    for at, audio in points[start + 1 :]:
        runs_dry_at = clock + (available - played)
        waited = at > runs_dry_at + EPSILON_S
        in_hand = runs_dry_at - at if waited else max(runs_dry_at - at, 0.0)  # in time is never below 0 (float noise)
        least = in_hand if least is None else min(least, in_hand)
        if waited:
            waits.append(Wait(available, at - runs_dry_at))
            played = available
        else:
            played += at - clock
        clock, available = at, audio
    # the time to uninterrupted audio, as the server counts it from its writes (float noise is no deficit)
    listener = ListenerClock(origin=0.0)
    for at, audio in points:
        listener.wrote(at, audio)
    return _played(begin, points[-1][1], waits, points, least, listener.uninterrupted_s, listener.deficit_s)


def _played(
    start_s: float,
    audio_s: float,
    waits: Sequence[Wait],
    timeline: Sequence[tuple[float, float]] = (),
    least_in_hand_s: float | None = None,
    uninterrupted_s: float | None = None,
    deficit_s: float | None = None,
) -> Playback:
    stalled = sum(w.waited_s for w in waits)
    return Playback(
        start_s,
        len(waits),
        stalled,
        audio_s,
        tuple(waits),
        tuple(timeline),
        least_in_hand_s,
        uninterrupted_s,
        deficit_s,
    )


def wav_payload_offset(head: bytes) -> int | None:
    """Where the samples of a (streaming) WAV start: past the RIFF header and every chunk before "data" (LIST, fact,
    ...); None while the header has not fully arrived."""
    chunks = _riff_chunks(head)
    if chunks is None:
        return 0  # not a WAV header: count from the first byte
    for name, offset, _ in chunks:
        if name == b"data":
            return offset
    return None


def _riff_chunks(head: bytes) -> list[tuple[bytes, int, int]] | None:
    """(name, offset of its body, declared size) of each chunk header present in `head`; None if not RIFF/WAVE."""
    if len(head) < 12:
        return []
    if head[:4] != b"RIFF" or head[8:12] != b"WAVE":
        return None
    chunks, offset = [], 12
    while len(head) >= offset + 8:
        name, size = head[offset : offset + 4], int.from_bytes(head[offset + 4 : offset + 8], "little")
        chunks.append((name, offset + 8, size))
        if name == b"data":
            break
        offset += 8 + size + (size & 1)
    return chunks


def _wav_playable(payload: bytes) -> PlayableSeconds | None:
    chunks = _riff_chunks(payload)
    if not chunks:
        return None
    fmt = next(((offset, size) for name, offset, size in chunks if name == b"fmt "), None)
    data = next((offset for name, offset, _ in chunks if name == b"data"), None)
    if fmt is None or data is None or fmt[1] < 16:
        return None
    body = payload[fmt[0] : fmt[0] + 16]
    rate = int.from_bytes(body[4:8], "little")
    block_align = int.from_bytes(body[12:14], "little")
    if rate <= 0 or block_align <= 0:
        return None
    return lambda received: max(0, received - data) // block_align / rate


def _timeline_playable(timeline: Sequence[tuple[int, float]]) -> PlayableSeconds:
    """`timeline`: (byte count, seconds playable once that many bytes are in), in byte order."""
    ends = [end for end, _ in timeline]
    totals = [seconds for _, seconds in timeline]

    def playable(received: int) -> float:
        complete = bisect.bisect_right(ends, received)
        return totals[complete - 1] if complete else 0.0

    return playable


def _decoded_playable(payload: bytes) -> PlayableSeconds | None:
    """Demux and decode the whole response once, as a player would: for each packet, where its last byte is and the
    audio the decoder has played once it has it. FFmpeg's decoder drops the priming and padding that the stream
    signals (an mp3 LAME/Xing header's encoder delay and padding, the priming an MP4 edit list skips), as in
    `audio_s`."""
    timeline: list[tuple[int, float]] = []
    total = 0.0
    try:
        with av.open(io.BytesIO(payload)) as container:
            if "ogg" in container.format.name.split(","):
                return None  # FFmpeg places an Ogg packet at the page it begins on, not where it ends: loadtest.ogg
            stream = container.streams.audio[0]
            for packet in container.demux(stream):
                if packet.size and (packet.pos is None or packet.pos < 0):
                    return None  # the container does not say where its packets lie: no honest mapping
                # the empty packet at the end drains the decoder: what it still held plays once all is in
                end = packet.pos + packet.size if packet.size else len(payload)
                total += sum(frame.samples / frame.sample_rate for frame in stream.codec_context.decode(packet))
                timeline.append((end, total))
    except (av.error.FFmpegError, IndexError):
        return None
    return _timeline_playable(timeline) if timeline else None


def _ogg_playable(payload: bytes) -> PlayableSeconds | None:
    """Ogg Opus read page by page (`loadtest.ogg`): a packet plays once the page holding its last segment is in, for
    the time its granule positions give it. Another codec in Ogg: no mapping."""
    timeline = opus_timeline(payload)
    return None if timeline is None else _timeline_playable(timeline)


def audio_offset(payload: bytes, response_format: str) -> int | None:
    """Where a response's audio starts in its bytes: 0 for pcm; past the header for wav; for compressed formats the
    first byte of the first audio packet (for Ogg, of the page holding it), past the container's headers (Ogg's
    OpusHead and OpusTags pages, FLAC's metadata blocks, an ID3 tag), which a server may send before it has any
    audio. None where that cannot be told (a wav header that never completed, a payload FFmpeg cannot demux)."""
    if response_format == "pcm":
        return 0
    if response_format == "wav":
        return wav_payload_offset(payload)
    try:
        with av.open(io.BytesIO(payload)) as container:
            for packet in container.demux(container.streams.audio[0]):
                if packet.size:  # the first packet with audio, in the order of the bytes
                    return packet.pos if packet.pos is not None and packet.pos >= 0 else None
    except (av.error.FFmpegError, IndexError):
        return None
    return None


def first_audio_at(payload: bytes, arrivals: Sequence[tuple[float, int]], response_format: str) -> float | None:
    """When the first byte of audio came (TTFA): the first of `arrivals` (seconds since send, payload bytes received
    so far) that brought a byte past `audio_offset`; None where no audio came or where it starts cannot be told."""
    offset = audio_offset(payload, response_format)
    if offset is None:
        return None
    return next((at for at, received in arrivals if received > offset), None)


def playable_seconds(payload: bytes, response_format: str, pcm_rate: int) -> PlayableSeconds | None:
    """How many seconds of audio the first n bytes of this payload make playable; None when that cannot be told."""
    if response_format == "pcm":
        return lambda received: (received // 2) / pcm_rate
    if response_format == "wav":
        exact = _wav_playable(payload)
        if exact is not None:
            return exact
    if payload[:4] == b"OggS":
        return _ogg_playable(payload)
    return _decoded_playable(payload)


def listen(
    payload: bytes, arrivals: Sequence[tuple[float, int]], response_format: str, pcm_rate: int, buffer_s: float
) -> Playback | None:
    """Play a received response: `arrivals` are (seconds since send, payload bytes received so far) per chunk."""
    playable = playable_seconds(payload, response_format, pcm_rate)
    if playable is None:
        return None
    return simulate_playback([(at, playable(received)) for at, received in arrivals], buffer_s)


def listen_sentences(
    sentences: Sequence[tuple[bytes, Sequence[tuple[float, int]]]], response_format: str, pcm_rate: int, buffer_s: float
) -> SentencePlayback | None:
    """Play an utterance sent as one file per sentence (the WebSocket endpoint's `audio.start` ... `audio.done`), the
    sentences back to back: `sentences` holds each one's payload and its arrivals (seconds since the utterance began,
    that sentence's bytes received so far). A wait where the playhead stands at the end of a sentence is the silence
    between that sentence and the next (a gap); any other wait is a stall inside a sentence."""
    timeline: list[tuple[float, float]] = []
    ends: list[float] = []
    for payload, arrivals in sentences:
        playable = playable_seconds(payload, response_format, pcm_rate)
        if playable is None:
            return None
        before = ends[-1] if ends else 0.0
        timeline += [(at, before + playable(received)) for at, received in arrivals]
        ends.append(before + playable(len(payload)))
    heard = simulate_playback(timeline, buffer_s)
    if heard is None:
        return None
    joins = ends[:-1]

    def at_join(wait: Wait, join: float) -> bool:
        return abs(wait.at_audio_s - join) <= EPSILON_S

    gaps = tuple(sum(w.waited_s for w in heard.waits if at_join(w, join)) for join in joins)
    inside = [w for w in heard.waits if not any(at_join(w, join) for join in joins)]
    # no least audio in hand here: at a join the player runs dry by design (a gap), which would hide the stalls' margin;
    # the time to uninterrupted audio counts every wait, gaps included: a listener hears the silence either way
    played = _played(heard.start_s, heard.audio_s, inside, heard.timeline, None, heard.uninterrupted_s, heard.deficit_s)
    return SentencePlayback(played, gaps)
