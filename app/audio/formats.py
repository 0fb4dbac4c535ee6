"""The response formats, stated once: what each one is on the wire and how it is made.

Everything else reads this table: the encoders (container, codec, bit rate), the request schemas (the allowed values
of `response_format`, the range of `sample_rate`), the sample-rate check, the capabilities endpoint, the
`Content-Type` of a response, the rate the WebSocket says a sentence's audio decodes at, and the load tool (its
`--format` choices and how it decodes what it receives).

Every format streams here: each encoded chunk leaves as soon as the muxer has produced it. `stream: false` asks for
one whole file instead, whose header can state the length a stream does not know yet (see `app.audio.encoders`).

This module imports nothing from the rest of the service, so that a client of the same wire formats (the load tool)
can read it without pulling in the server.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

# The rate a response has when the request names none: Qwen3-TTS's and the embedded engine's own rate, so that the
# common case is never resampled.
DEFAULT_SAMPLE_RATE: Final = 24_000
# The `sample_rate` a request may ask for; the formats with `sample_rates` None take any of them.
MIN_SAMPLE_RATE: Final = 8_000
MAX_SAMPLE_RATE: Final = 48_000


@dataclass(frozen=True, slots=True)
class Format:
    name: str  # the `response_format` value
    content_type: str  # the response's Content-Type
    container: str | None  # FFmpeg's name for the container; None: raw samples, nothing around them
    codec: str  # FFmpeg's name for the encoder
    # True: encoded and muxed by FFmpeg (through PyAV). False: 16-bit samples written here, which costs about 20 us
    # for 2 s of 24 kHz audio: cheaper done on the event loop than handed to a worker thread, whose hop alone costs
    # the loop more than that.
    ffmpeg: bool
    sample_rates: frozenset[int] | None = None  # the rates the codec can carry; None: any the API accepts
    bit_rate: int | None = None  # bits per second of a lossy codec; None: lossless, no rate to set
    # Options for FFmpeg's muxer, as (name, value) pairs (a tuple keeps the table immutable).
    muxer_options: tuple[tuple[str, str], ...] = ()
    # Samples a decoder plays before the audio: the encoder's delay where the container does not tell the decoder to
    # trim it (at any rate; measured with FFmpeg's decoders, tests/unit/test_encoder_lead.py). Word timestamps are
    # shifted by it. `lead_samples_whole`: a whole file's, where its header says otherwise (None: the same).
    lead_samples: int = 0
    lead_samples_whole: int | None = None
    # The rate a decoder gives back whatever rate was encoded; None: the rate encoded. Opus's: 48 kHz, as FFmpeg's
    # decoder and opusfile return it (RFC 7845: the Ogg header's input rate, the one asked, is for information only).
    decoded_rate: int | None = None


_MP3_RATES = frozenset({8000, 11025, 12000, 16000, 22050, 24000, 32000, 44100, 48000})

# OpenAI's order, which the capabilities endpoint and the OpenAPI schema list.
FORMATS: Final[dict[str, Format]] = {
    f.name: f
    for f in (
        # a whole file's LAME header states the delay, which decoders trim; a stream has no header
        Format(
            "mp3", "audio/mpeg", "mp3", "libmp3lame", True, _MP3_RATES, 64_000, lead_samples=1105, lead_samples_whole=0
        ),
        Format(
            "opus",
            "audio/ogg; codecs=opus",
            "ogg",
            "libopus",
            True,
            frozenset({8000, 12000, 16000, 24000, 48000}),  # the rates libopus accepts
            32_000,
            # The Ogg muxer holds pages back for up to a second by default; 20 ms pages let each chunk out at once.
            (("page_duration", "20000"),),
            decoded_rate=48_000,
        ),
        # (AAC's 7350 is below the API's range); ADTS has no field for the encoder's delay
        Format("aac", "audio/aac", "adts", "aac", True, _MP3_RATES, 64_000, lead_samples=1024),
        Format("flac", "audio/flac", "flac", "flac", True),
        Format("wav", "audio/wav", "wav", "pcm_s16le", False),
        Format("pcm", "audio/pcm", None, "pcm_s16le", False),
    )
}

RESPONSE_FORMATS: Final = tuple(FORMATS)
# The schemas' type for `response_format`, built from the table: the same as writing the six names out.
ResponseFormat = Literal[RESPONSE_FORMATS]  # type: ignore[valid-type]
CONTENT_TYPES: Final[dict[str, str]] = {name: f.content_type for name, f in FORMATS.items()}


def lead_samples(name: str, whole_file: bool = False) -> int:
    """The samples a decoder plays before the audio of format `name` (a stream's, or a whole file's)."""
    fmt = get_format(name)
    return fmt.lead_samples if not whole_file or fmt.lead_samples_whole is None else fmt.lead_samples_whole


def decoded_sample_rate(name: str, sample_rate: int) -> int:
    """The rate a client's decoder gives audio of format `name` encoded at `sample_rate`: the one to announce, since a
    client sets its player by it (raw pcm has no header to say otherwise)."""
    fixed = get_format(name).decoded_rate
    return sample_rate if fixed is None else fixed


def get_format(name: str) -> Format:
    """The format of this name; ValueError for one the service does not write."""
    try:
        return FORMATS[name]
    except KeyError:
        raise ValueError(f"unknown response format {name!r}") from None
