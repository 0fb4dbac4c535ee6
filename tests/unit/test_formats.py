"""The formats table is the one source of format facts: the schemas, the OpenAPI document, the encoders and the load
tool all say what it says, in its order, and the encoders really write the container and codec it names."""

from __future__ import annotations

import io
from typing import get_args

import av
import numpy as np
import pytest

from app.api.schemas import SpeechRequest
from app.api.speech_stream import SessionConfig
from app.audio.encoders import create_encoder
from app.audio.formats import (
    CONTENT_TYPES,
    DEFAULT_SAMPLE_RATE,
    FORMATS,
    MAX_SAMPLE_RATE,
    MIN_SAMPLE_RATE,
    RESPONSE_FORMATS,
    ResponseFormat,
    decoded_sample_rate,
    get_format,
)
from app.server import create_app
from app.settings import Settings
from loadtest.audio import decode
from loadtest.cli import build_parser

NAMES = list(FORMATS)
# FFmpeg names some containers and codecs differently when reading them back than when writing them.
DEMUXER = {"adts": "aac"}
DECODER = {"libmp3lame": "mp3float", "libopus": "opus"}


def test_the_names_are_openais_six_in_its_order() -> None:
    assert NAMES == ["mp3", "opus", "aac", "flac", "wav", "pcm"]
    assert list(RESPONSE_FORMATS) == NAMES
    assert all(name == f.name for name, f in FORMATS.items())


def test_the_schemas_allow_exactly_the_table() -> None:
    assert list(get_args(ResponseFormat)) == NAMES
    for model in (SpeechRequest, SessionConfig):
        field = model.model_json_schema()["properties"]["response_format"]["anyOf"][0]  # beside null (omitted)
        assert field["enum"] == NAMES, model
    rate = SpeechRequest.model_json_schema()["properties"]["sample_rate"]["anyOf"][0]
    assert (rate["minimum"], rate["maximum"]) == (MIN_SAMPLE_RATE, MAX_SAMPLE_RATE)


def test_the_openapi_document_lists_the_tables_content_types() -> None:
    document = create_app(Settings()).openapi()
    content = document["paths"]["/v1/audio/speech"]["post"]["responses"]["200"]["content"]
    assert set(content) == {*CONTENT_TYPES.values(), "text/event-stream"}
    assert CONTENT_TYPES == {name: f.content_type for name, f in FORMATS.items()}


def test_the_load_tool_offers_exactly_the_table() -> None:
    (action,) = [a for a in build_parser()._actions if "--format" in a.option_strings]
    assert list(action.choices) == NAMES
    assert action.default in FORMATS


def test_every_rate_a_format_names_is_one_a_request_may_ask_for() -> None:
    """A refused `sample_rate` is answered with the format's rates: each of them must then be accepted."""
    for name, form in FORMATS.items():
        for rate in form.sample_rates or ():
            assert MIN_SAMPLE_RATE <= rate <= MAX_SAMPLE_RATE, (name, rate)


def test_an_unknown_format_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="'ogg'"):
        get_format("ogg")
    with pytest.raises(ValueError, match="'ogg'"):
        create_encoder("ogg", DEFAULT_SAMPLE_RATE)


@pytest.mark.parametrize("name", NAMES)
def test_each_encoder_writes_the_container_codec_and_rate_the_table_names(name: str) -> None:
    fmt = FORMATS[name]
    assert fmt.sample_rates is None or DEFAULT_SAMPLE_RATE in fmt.sample_rates  # the default works everywhere
    second = np.sin(np.arange(DEFAULT_SAMPLE_RATE) * 2 * np.pi * 220 / DEFAULT_SAMPLE_RATE).astype(np.float32) * 0.3
    encoder = create_encoder(name, DEFAULT_SAMPLE_RATE)
    data = encoder.encode(second) + encoder.finish()
    assert decode(data, name).duration_s == pytest.approx(1.0, abs=0.1)  # the load tool reads it back by the table
    if fmt.container is None:  # raw 16-bit samples, nothing around them
        assert len(data) == 2 * DEFAULT_SAMPLE_RATE
        return
    with av.open(io.BytesIO(data)) as container:
        assert DEMUXER.get(fmt.container, fmt.container) in container.format.name.split(",")
        stream = container.streams.audio[0]
        assert stream.codec_context.name == DECODER.get(fmt.codec, fmt.codec)
        assert stream.codec_context.sample_rate == decoded_sample_rate(name, DEFAULT_SAMPLE_RATE)
        if fmt.bit_rate is not None and name != "opus":  # Ogg records no bit rate to read back
            assert stream.bit_rate == pytest.approx(fmt.bit_rate, rel=0.05)


@pytest.mark.parametrize("name", NAMES)
def test_the_table_says_the_rate_each_format_decodes_at(name: str) -> None:
    """What the WebSocket announces for a sentence's audio (`decoded_sample_rate`) is what FFmpeg's decoder gives back,
    at every rate asked: opus 48 kHz whatever was encoded, every other format the rate encoded (pcm has no header:
    the rate announced is all a client has)."""
    for rate in sorted({DEFAULT_SAMPLE_RATE, 16_000, MIN_SAMPLE_RATE, MAX_SAMPLE_RATE}):
        if FORMATS[name].sample_rates is not None and rate not in FORMATS[name].sample_rates:
            continue
        encoder = create_encoder(name, rate)
        data = encoder.encode(np.zeros(rate // 10, np.float32)) + encoder.finish()
        if FORMATS[name].container is None:
            assert decoded_sample_rate(name, rate) == rate
            continue
        with av.open(io.BytesIO(data)) as container:
            frames = list(container.decode(audio=0))
        assert frames and {frame.sample_rate for frame in frames} == {decoded_sample_rate(name, rate)}, (name, rate)
    assert decoded_sample_rate(name, 16_000) == (48_000 if name == "opus" else 16_000)
