"""The load tool's listener: the player model on synthetic arrival schedules, and bytes → playing time per format."""

from __future__ import annotations

import io
import itertools
import struct

import av
import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from app.audio.encoders import create_encoder
from app.audio.formats import get_format, lead_samples
from loadtest.audio import decode
from loadtest.ogg import pages as ogg_pages
from loadtest.playback import (
    EPSILON_S,
    first_audio_at,
    listen,
    listen_sentences,
    playable_seconds,
    simulate_playback,
)

RATE = 24_000


def test_audio_arriving_ahead_of_the_player_never_stalls() -> None:
    playback = simulate_playback([(0.1, 1.0), (0.5, 2.0), (1.0, 3.0), (1.2, 8.0)])
    assert playback is not None
    assert playback.start_s == 0.1
    assert (playback.stalls, playback.stalled_s) == (0, 0.0)
    assert playback.audio_s == 8.0


def test_audio_arriving_exactly_when_needed_is_no_stall() -> None:
    # 0.25 s of audio every 0.25 s, the first at 0.2 s: real time, the player never waits
    arrivals = [(0.2 + 0.25 * i, 0.25 * (i + 1)) for i in range(32)]
    playback = simulate_playback(arrivals)
    assert playback is not None and playback.stalls == 0 and playback.stalled_s == 0.0


def test_one_stall_of_known_length() -> None:
    # 0.5 s of audio at 0.1 s: the player runs dry at 0.6 s; the next audio comes at 1.1 s
    playback = simulate_playback([(0.1, 0.5), (1.1, 1.5), (1.3, 3.0)])
    assert playback is not None
    assert playback.stalls == 1
    assert playback.stalled_s == pytest.approx(0.5)


def test_stalls_add_up() -> None:
    # dry at 0.2 until 0.5 (0.3 s); then 0.2 s more plays to 0.7, dry until 1.0 (0.3 s); then no more gaps
    playback = simulate_playback([(0.0, 0.2), (0.5, 0.4), (1.0, 2.0), (1.5, 2.5)])
    assert playback is not None
    assert playback.stalls == 2
    assert playback.stalled_s == pytest.approx(0.6)


def test_a_jitter_buffer_shortens_or_avoids_a_stall() -> None:
    arrivals = [(0.1, 0.2), (0.3, 0.4), (0.9, 2.0)]
    no_buffer = simulate_playback(arrivals)
    assert no_buffer is not None
    assert (no_buffer.start_s, no_buffer.stalls) == (0.1, 1)
    assert no_buffer.stalled_s == pytest.approx(0.4)  # 0.4 s played by 0.5 s; the next audio at 0.9 s

    small = simulate_playback(arrivals, buffer_s=0.4)  # starts at 0.3 s with 0.4 s in hand, dry at 0.7 s
    assert small is not None
    assert (small.start_s, small.stalls) == (0.3, 1)
    assert small.stalled_s == pytest.approx(0.2)

    enough = simulate_playback(arrivals, buffer_s=1.0)  # starts at 0.9 s with everything in hand
    assert enough is not None
    assert (enough.start_s, enough.stalls, enough.stalled_s) == (0.9, 0, 0.0)


def test_a_clip_shorter_than_the_buffer_plays_once_it_has_all_arrived() -> None:
    playback = simulate_playback([(0.1, 0.2), (0.6, 0.5)], buffer_s=2.0)
    assert playback is not None
    assert (playback.start_s, playback.stalls) == (0.6, 0)


def test_chunks_without_playable_audio_neither_start_playback_nor_count() -> None:
    # a header-only chunk, then audio; a trailing chunk (an end event) adds nothing
    playback = simulate_playback([(0.05, 0.0), (0.3, 0.5), (0.4, 0.5), (2.0, 0.5)])
    assert playback is not None
    assert (playback.start_s, playback.stalls, playback.stalled_s) == (0.3, 0, 0.0)
    assert simulate_playback([(0.1, 0.0)]) is None
    assert simulate_playback([]) is None


def test_pcm_bytes_map_to_samples_at_the_requested_rate() -> None:
    playable = playable_seconds(b"", "pcm", 16_000)
    assert playable is not None
    assert playable(32_000) == 1.0
    assert playable(32_001) == 1.0  # half a sample plays nothing yet
    assert playable(0) == 0.0


def wav_header(rate: int, channels: int = 1, bits: int = 16, extra: bytes = b"") -> bytes:
    block = channels * bits // 8
    fmt = struct.pack("<HHIIHH", 1, channels, rate, rate * block, block, bits)
    return (
        b"RIFF"
        + struct.pack("<I", 0xFFFFFFFF)
        + b"WAVE"
        + b"fmt "
        + struct.pack("<I", 16)
        + fmt
        + extra
        + (b"data" + struct.pack("<I", 0xFFFFFFFF))
    )


def test_wav_maps_past_its_header_at_the_rate_and_frame_size_it_names() -> None:
    header = wav_header(48_000, channels=2)
    playable = playable_seconds(header + bytes(8), "wav", 24_000)  # the header's rate wins over the request's
    assert playable is not None
    assert playable(len(header)) == 0.0
    assert playable(len(header) + 4 * 48_000) == 1.0  # 4 bytes a stereo frame

    info = b"LIST" + struct.pack("<I", 4) + b"INFO"  # a chunk before "data" moves the payload
    extended = wav_header(24_000, extra=info)
    playable = playable_seconds(extended, "wav", 24_000)
    assert playable is not None
    assert len(extended) == 44 + 12
    assert playable(44) == 0.0 and playable(56 + 48_000) == 1.0


def encoded_chunks(fmt: str, seconds: list[float]) -> list[bytes]:
    """What the service's encoder emits after each chunk of a sine, and at the end."""
    encoder = create_encoder(fmt, RATE)
    try:
        out, offset = [], 0
        for length in seconds:
            n = round(length * RATE)
            t = (np.arange(n) + offset) / RATE
            out.append(encoder.encode((0.4 * np.sin(2 * np.pi * 330 * t)).astype(np.float32)))
            offset += n
        out.append(encoder.finish())
        return out
    finally:
        encoder.close()


@pytest.mark.parametrize("fmt", ["mp3", "opus", "aac", "flac"])
def test_compressed_bytes_map_to_the_audio_of_complete_packets(fmt: str) -> None:
    chunks = encoded_chunks(fmt, [1.0, 1.0, 1.0])
    payload = b"".join(chunks)
    playable = playable_seconds(payload, fmt, RATE)
    assert playable is not None
    received = np.cumsum([len(c) for c in chunks])
    seconds = [playable(int(n)) for n in received]
    assert all(a <= b for a, b in itertools.pairwise(seconds))  # more bytes never play less
    assert seconds[-1] == pytest.approx(3.0, abs=0.12)  # the whole response: all of it (plus codec padding)
    # after the first second went in, the encoder has handed out most of it (it holds back at most a frame or two)
    assert 0.85 <= seconds[0] <= 1.05, seconds
    assert 1.85 <= seconds[1] <= 2.05, seconds
    assert playable(0) == 0.0


def played_by_ffmpeg(prefix: bytes, fmt: str) -> int:
    """The samples FFmpeg's decoder plays from these bytes alone, as a player given them would."""
    with av.open(io.BytesIO(prefix), format=get_format(fmt).container) as container:
        return sum(frame.samples for frame in container.decode(audio=0))


@pytest.mark.parametrize("whole_file", [False, True], ids=["stream", "whole-file"])
@pytest.mark.parametrize("fmt", ["mp3", "aac", "flac"])
def test_compressed_audio_plays_what_the_decoder_plays_from_the_bytes_in(fmt: str, whole_file: bool) -> None:
    """At the end of every packet, the audio a listener has is what FFmpeg's decoder plays from the bytes so far: the
    priming and padding a stream signals (an mp3 file's LAME header states the encoder's delay and padding) dropped
    from the start and the end, as a gapless player drops them and as `audio_s` (decoded) already did."""
    encoder = create_encoder(fmt, RATE, whole_file)
    t = np.arange(RATE) / RATE
    payload = encoder.encode((0.4 * np.sin(2 * np.pi * 330 * t)).astype(np.float32)) + encoder.finish()
    playable = playable_seconds(payload, fmt, RATE)
    assert playable is not None
    with av.open(io.BytesIO(payload)) as container:
        ends = [p.pos + p.size for p in container.demux(container.streams.audio[0]) if p.size]
    for end in ends[2:]:  # FFmpeg recognises a bare mp3 or ADTS stream only from a few frames on
        assert playable(end) * RATE == pytest.approx(played_by_ffmpeg(payload[:end], fmt), abs=1e-6), end
    assert playable(len(payload)) == pytest.approx(decode(payload, fmt, RATE).duration_s, abs=1e-9)
    if whole_file and fmt == "mp3":  # the header's delay, 1105 samples, is not played: 1 s of sine, 1 s of audio
        assert playable(len(payload)) == pytest.approx(1.0, abs=1e-9)
        assert playable(ends[0]) == 0.0  # the first frame is all delay


@pytest.mark.parametrize("fmt", ["mp3", "aac"])
def test_a_stream_that_does_not_signal_its_priming_plays_it(fmt: str) -> None:
    """This service's mp3 streams carry no LAME header (the muxer writes it only where it can go back to it) and ADTS
    has no field for the priming: nothing tells a decoder to drop it, so it plays it (silence before the speech, the
    lead the service shifts its word timestamps by) and the padding of the last frame, and the listener counts them."""
    encoder = create_encoder(fmt, RATE)
    payload = encoder.encode(np.zeros(RATE, np.float32)) + encoder.finish()
    playable = playable_seconds(payload, fmt, RATE)
    assert playable is not None
    frame = 576 if fmt == "mp3" else 1024  # MPEG-2 layer III at 24 kHz; AAC-LC
    played = round(playable(len(payload)) * RATE)
    # the lead, then the second of silence, then the last frame's padding (LAME's may run a little over a frame)
    assert RATE + lead_samples(fmt) <= played < RATE + lead_samples(fmt) + 2 * frame
    assert played == len(decode(payload, fmt, RATE).samples)


def test_an_ogg_packet_plays_only_once_its_page_is_complete() -> None:
    payload = b"".join(encoded_chunks("opus", [0.5, 0.5]))
    pages = [page.end for page in ogg_pages(payload)]
    assert len(pages) >= 3 and pages[-1] == len(payload)
    playable = playable_seconds(payload, "opus", RATE)
    assert playable is not None
    audio_pages = [(a, b) for a, b in itertools.pairwise(pages) if playable(b) > playable(a)]
    assert audio_pages
    start, end = audio_pages[0]
    assert playable(end - 1) == playable(start)  # one byte short of the page: none of its packets yet


def first_packet_at(payload: bytes) -> int:
    """Where the container's first audio packet starts, as FFmpeg's demuxer reads it (for Ogg, its page)."""
    with av.open(io.BytesIO(payload)) as container:
        return next(p.pos for p in container.demux(container.streams.audio[0]) if p.size)


@pytest.mark.parametrize("fmt", ["mp3", "opus", "aac", "flac"])
def test_first_audio_of_a_compressed_stream_is_its_first_packet_not_its_container_header(fmt: str) -> None:
    """A server may send a container's headers (Ogg's OpusHead and OpusTags pages, FLAC's STREAMINFO and padding, an
    ID3 tag) before it has any audio: their bytes are no more audio than a WAV header's."""
    payload = b"".join(encoded_chunks(fmt, [1.0]))
    start = first_packet_at(payload)
    arrivals = [(0.05, start), (0.3, start + 1), (0.4, len(payload))] if start else [(0.3, 1), (0.4, len(payload))]
    assert first_audio_at(payload, arrivals, fmt) == 0.3
    if fmt in ("opus", "flac"):
        assert start > 0  # these do have headers before the audio


def test_first_audio_of_pcm_and_wav_is_the_first_byte_past_any_header() -> None:
    header = wav_header(RATE)
    assert first_audio_at(header + bytes(100), [(0.05, 20), (0.1, len(header)), (0.3, len(header) + 1)], "wav") == 0.3
    assert first_audio_at(bytes(100), [(0.2, 1), (0.3, 100)], "pcm") == 0.2
    assert first_audio_at(header, [(0.1, len(header))], "wav") is None  # a header and no audio
    assert first_audio_at(b"not audio at all" * 10, [(0.1, 160)], "mp3") is None  # cannot be told


def test_listen_plays_a_pcm_response_from_its_arrival_schedule() -> None:
    one_second = 2 * RATE
    arrivals = [(0.1, one_second // 2), (0.2, one_second), (2.0, 3 * one_second)]  # dry at 1.1 s, more at 2.0 s
    playback = listen(b"", arrivals, "pcm", RATE, 0.0)
    assert playback is not None
    assert playback.stalls == 1 and playback.stalled_s == pytest.approx(0.9)
    assert playback.audio_s == 3.0


def test_an_unreadable_compressed_payload_gives_no_playback_rather_than_a_guess() -> None:
    assert playable_seconds(b"not audio at all" * 10, "mp3", RATE) is None
    assert listen(b"\x00" * 100, [(0.1, 100)], "aac", RATE, 0.0) is None


def test_the_least_audio_in_hand_is_the_margin_before_the_closest_arrival_or_the_longest_wait() -> None:
    in_time = simulate_playback([(0.0, 0.16), (0.1, 0.48), (0.45, 1.12), (0.5, 1.2)])
    assert in_time is not None and in_time.stalls == 0
    assert in_time.least_in_hand_s == pytest.approx(0.03)  # at 0.45 s: 0.48 s of audio, 0.45 s played
    two_waits = simulate_playback([(0.0, 0.1), (0.2, 0.2), (0.5, 0.3)])
    assert two_waits is not None and two_waits.stalled_s == pytest.approx(0.3)
    assert two_waits.least_in_hand_s == pytest.approx(-0.2)  # the longer of the two waits
    buffered = simulate_playback([(0.0, 0.1), (0.2, 0.3), (0.6, 0.5)], buffer_s=0.3)
    assert buffered is not None and buffered.least_in_hand_s == pytest.approx(-0.1)  # from its start at 0.2 s only
    assert simulate_playback([(0.3, 2.0)]).least_in_hand_s is None  # type: ignore[union-attr]  # all at once
    late_buffer = simulate_playback([(0.0, 0.5), (0.5, 2.0)], buffer_s=1.0)  # the buffer fills at the last arrival
    assert late_buffer is not None and late_buffer.least_in_hand_s is None
    # arrivals exactly when the audio runs out (float sums a hair past it), and one within EPSILON_S: no wait, no
    # negative margin
    steps = simulate_playback([(0.05 + 0.32 * i, 0.32 * (i + 1)) for i in range(10)] + [(3.25 + 5e-7, 3.6)])
    assert steps is not None and steps.stalls == 0 and steps.least_in_hand_s == 0.0


def test_time_to_uninterrupted_audio_is_the_first_audio_plus_the_largest_deficit() -> None:
    # 0.5 s of audio at 0.1 s, the next second's at 1.1 s: a listener must start at 0.6 s (1.1 - 0.5) not to wait
    late = simulate_playback([(0.1, 0.5), (1.1, 1.5), (1.3, 3.0)])
    assert late is not None
    assert late.uninterrupted_s == pytest.approx(0.6) and late.deficit_s == pytest.approx(0.5) and late.ran_dry
    # 0.3 s late at 0.5 s (0.2 s of audio before it), 0.6 s at 1.0 s (0.4 s before): the largest, max(0, 0.3, 0.6);
    # the listener without a buffer waits twice, 0.3 s each, and so ends as far behind
    twice = simulate_playback([(0.0, 0.2), (0.5, 0.4), (1.0, 2.0)])
    assert twice is not None and twice.uninterrupted_s == pytest.approx(0.6) and twice.stalled_s == pytest.approx(0.6)
    in_time = simulate_playback([(0.2 + 0.25 * i, 0.25 * (i + 1)) for i in range(32)])
    assert in_time is not None
    assert (in_time.uninterrupted_s, in_time.deficit_s, in_time.ran_dry) == (0.2, 0.0, False)
    # the figure belongs to the stream, not to the listener's buffer
    buffered = simulate_playback([(0.1, 0.5), (1.1, 1.5), (1.3, 3.0)], buffer_s=1.0)
    assert buffered is not None and buffered.uninterrupted_s == pytest.approx(0.6)


def test_a_listener_delayed_by_exactly_the_deficit_never_stalls_and_one_a_little_earlier_does() -> None:
    arrivals = [(0.1, 0.08), (0.35, 0.24), (0.5, 0.56), (0.9, 1.2), (1.6, 2.4), (1.7, 3.0)]
    first = simulate_playback(arrivals)
    assert first is not None and first.deficit_s is not None and first.deficit_s > 0.1
    exact = simulate_playback(arrivals, delay_s=first.deficit_s)
    assert exact is not None and exact.start_s == pytest.approx(first.uninterrupted_s)
    assert (exact.stalls, exact.least_in_hand_s) == (0, 0.0)  # in time, with nothing to spare at the closest arrival
    early = simulate_playback(arrivals, delay_s=first.deficit_s - 0.01)
    assert early is not None and early.stalls == 1 and early.stalled_s == pytest.approx(0.01)


def test_sentences_heard_back_to_back_count_their_gaps_in_the_deficit() -> None:
    pcm = np.zeros(RATE, np.int16).tobytes()  # one second per sentence
    heard = listen_sentences([(pcm, [(0.1, len(pcm))]), (pcm, [(1.5, len(pcm))])], "pcm", RATE, 0.0)
    assert heard is not None and heard.gaps_s == pytest.approx((0.4,)) and heard.playback.stalls == 0
    assert heard.playback.uninterrupted_s == pytest.approx(0.5) and heard.playback.deficit_s == pytest.approx(0.4)


schedules = st.lists(
    st.tuples(st.floats(0.0, 0.5), st.floats(0.0, 0.5)), min_size=1, max_size=30
).map(  # (time since the previous arrival, audio it adds): a cumulative arrival schedule
    lambda steps: list(itertools.accumulate(steps, lambda a, b: (a[0] + b[0], a[1] + b[1]), initial=(0.0, 0.0)))[1:]
)


@settings(max_examples=300, deadline=None)
@given(schedules)
def test_without_a_buffer_the_stalls_add_up_to_the_deficit(arrivals: list[tuple[float, float]]) -> None:
    played = simulate_playback(arrivals)
    assume(played is not None)
    assert played is not None and played.deficit_s is not None and played.uninterrupted_s is not None
    assert played.stalled_s == pytest.approx(played.deficit_s, abs=1e-4)
    assert played.start_s + played.stalled_s == pytest.approx(played.uninterrupted_s, abs=1e-4)
    assert played.ran_dry == (played.deficit_s > EPSILON_S)
    if played.deficit_s > 1e-4:  # clear of the float tolerance: ran dry means the listener stalled, and the reverse
        assert played.stalls > 0
    if played.stalls:
        assert played.ran_dry


@settings(max_examples=300, deadline=None)
@given(schedules, st.floats(0.0, 3.0))
def test_any_listener_avoids_stalls_exactly_when_it_starts_no_earlier_than_the_uninterrupted_start(
    arrivals: list[tuple[float, float]], buffer_s: float
) -> None:
    played = simulate_playback(arrivals, buffer_s=buffer_s)
    assume(played is not None)
    assert played is not None and played.uninterrupted_s is not None
    assume(abs(played.start_s - played.uninterrupted_s) > 1e-4)  # clear of the float tolerance
    assert (played.stalls == 0) == (played.start_s > played.uninterrupted_s)
    delayed = simulate_playback(arrivals, delay_s=played.deficit_s or 0.0)
    assert delayed is not None and delayed.stalls == 0
