"""The load tool's listener on Ogg Opus (RFC 3533 framing, RFC 7845 timing), against streams from a real encoder and
muxer (libopus and FFmpeg's Ogg muxer, through PyAV), and FFmpeg's own decoder as the judge of what a given prefix of
the bytes plays: a packet plays once the page holding its last segment is in, the pre-skip and the end trimming that
the granule positions state are not played, and a stream that starts at a later granule position plays no more for it.
"""

from __future__ import annotations

import io
import itertools
import struct
from dataclasses import dataclass

import av
import numpy as np
import pytest

from loadtest.playback import listen, playable_seconds

OPUS_RATE = 48_000  # Ogg Opus's granule positions count 48 kHz samples, whatever rate was encoded


def opus_stream(seconds: float, bit_rate: int, frame_ms: int, page_duration_us: int) -> bytes:
    """Noise (the most bytes a packet can take) through libopus and FFmpeg's Ogg muxer, written as a stream."""
    sink = Sink()
    noise = (0.5 * np.random.default_rng(7).standard_normal(int(seconds * OPUS_RATE))).astype(np.float32)
    with av.open(sink, mode="w", format="ogg", options={"page_duration": str(page_duration_us)}) as container:
        stream = container.add_stream("libopus", rate=OPUS_RATE, layout="mono")
        stream.codec_context.bit_rate = bit_rate
        stream.codec_context.options = {"frame_duration": str(frame_ms)}
        frame = av.AudioFrame.from_ndarray(noise[None, :], format="flt", layout="mono")
        frame.sample_rate, frame.pts = OPUS_RATE, 0
        for packet in [*stream.encode(frame), *stream.encode(None)]:
            container.mux(packet)
    return bytes(sink.data)


class Sink:
    """A write-only output: the muxer writes a stream, as a server does, never going back to patch a page."""

    def __init__(self) -> None:
        self.data = bytearray()

    def write(self, data: bytes) -> int:
        self.data += data
        return len(data)


@dataclass(frozen=True)
class Page:
    start: int
    end: int
    lacing: bytes
    granule: int

    @property
    def body(self) -> int:
        return self.start + 27 + len(self.lacing)


def ogg_pages(payload: bytes) -> list[Page]:
    pages, offset = [], 0
    while offset < len(payload):
        assert payload[offset : offset + 4] == b"OggS"
        lacing = payload[offset + 27 : offset + 27 + payload[offset + 26]]
        end = offset + 27 + len(lacing) + sum(lacing)
        pages.append(Page(offset, end, lacing, struct.unpack_from("<q", payload, offset + 6)[0]))
        offset = end
    return pages


def packet_ends(page: Page) -> list[int]:
    """Where each packet that completes on this page has its last byte (a lacing value below 255 ends a packet)."""
    ends, at = [], page.body
    for value in page.lacing:
        at += value
        if value < 255:
            ends.append(at)
    return ends


def awkward_cuts(payload: bytes) -> list[int]:
    """Byte counts at which a chunk may end: inside a page's capture pattern, inside its segment table, just into its
    body, just past each packet's last byte, one byte short of the page's end, and at it."""
    cuts = set()
    for page in ogg_pages(payload):
        cuts |= {page.start + 2, page.start + 27 + len(page.lacing) // 2, page.body + 1, page.end - 1, page.end}
        cuts |= {end + 1 for end in packet_ends(page) if end < page.end}
    return sorted(cut for cut in cuts if 0 < cut <= len(payload))


def played_s(prefix: bytes) -> float:
    """What FFmpeg's decoder plays from these bytes alone (the pre-skip and any end trimming applied)."""
    with av.open(io.BytesIO(prefix), format="ogg") as container:
        return sum(frame.samples for frame in container.decode(audio=0)) / OPUS_RATE


def first_packet_in(payload: bytes) -> int:
    """The end of the first page an audio packet ends on: before it nothing plays (and FFmpeg will not open the
    stream, finding no packet to tell its parameters from)."""
    return next(page.end for page in ogg_pages(payload)[2:] if page.granule != -1)


def expected_s(payload: bytes, cut: int) -> float:
    return played_s(payload[:cut]) if cut >= first_packet_in(payload) else 0.0


def ogg_crc(data: bytes) -> int:
    """Ogg's CRC-32: polynomial 0x04C11DB7, not reflected, initial value and final XOR 0 (RFC 3533)."""
    crc = 0
    for byte in data:
        crc ^= byte << 24
        for _ in range(8):
            crc = ((crc << 1) ^ 0x04C11DB7 if crc & 0x80000000 else crc << 1) & 0xFFFFFFFF
    return crc


def ogg_page(serial: int, sequence: int, granule: int, flags: int, lacing: bytes, body: bytes) -> bytes:
    header = b"OggS" + struct.pack("<BBqIII", 0, flags, granule, serial, sequence, 0) + bytes([len(lacing)]) + lacing
    page = bytearray(header + body)
    struct.pack_into("<I", page, 22, ogg_crc(bytes(page)))
    return bytes(page)


def repaged(payload: bytes, body_bytes: int, granule_offset: int = 0) -> bytes:
    """The same Opus packets paged again, each page's body cut at about `body_bytes` (so that a packet larger than
    that spans two or more pages, and a page that no packet ends on has granule position -1), every granule position
    moved on by `granule_offset` (a stream that starts later, as one joined live does: RFC 7845, section 4.5)."""
    with av.open(io.BytesIO(payload), format="ogg") as container:
        stream = container.streams.audio[0]
        head = bytes(stream.codec_context.extradata)
        pre_skip = struct.unpack_from("<H", head, 10)[0]
        # the granule after each packet, from FFmpeg's timestamps (which count from the pre-skip, the last packet's
        # duration already trimmed to the end the stream states)
        packets = [
            (bytes(p), pre_skip + p.pts + p.duration + granule_offset) for p in container.demux(stream) if p.size
        ]
    vendor = b"repaged"
    tags = b"OpusTags" + struct.pack("<I", len(vendor)) + vendor + struct.pack("<I", 0)
    serial = 0x5EED
    out = [ogg_page(serial, 0, 0, 0x02, bytes([len(head)]), head), ogg_page(serial, 1, 0, 0, bytes([len(tags)]), tags)]
    lacing, body, granule, continued = bytearray(), bytearray(), -1, False

    def flush(last: bool) -> None:
        nonlocal lacing, body, granule, continued
        out.append(
            ogg_page(serial, len(out), granule, (0x01 if continued else 0) | (0x04 if last else 0), lacing, body)
        )
        continued = bool(lacing) and lacing[-1] == 255
        lacing, body, granule = bytearray(), bytearray(), -1

    for data, after in packets:
        values = [255] * (len(data) // 255) + [len(data) % 255]
        at = 0
        for value in values:
            if len(lacing) == 255 or len(body) >= body_bytes:
                flush(last=False)
            lacing.append(value)
            body += data[at : at + value]
            at += value
        granule = after
    flush(last=True)
    return b"".join(out)


def test_a_packet_split_across_pages_plays_once_the_page_holding_its_last_segment_is_in() -> None:
    # 60-ms packets at 256 kbit/s in pages held for up to 5 s: FFmpeg's muxer fills a page's 255 segments and
    # carries the packet that does not fit on into the next page
    payload = opus_stream(2.0, 256_000, 60, 5_000_000)
    pages = ogg_pages(payload)
    split = [page for page in pages if page.lacing and page.lacing[-1] == 255]
    assert split, "the stream should hold a packet continued on the next page"
    playable = playable_seconds(payload, "opus", 24_000)
    assert playable is not None
    for cut in awkward_cuts(payload):
        assert playable(cut) == pytest.approx(expected_s(payload, cut), abs=1e-9), cut
    # the page that ends mid-packet plays its granule position, less the pre-skip: not the packet it began
    page = split[0]
    pre_skip = struct.unpack_from("<H", payload, pages[0].body + 10)[0]
    assert playable(page.end) == pytest.approx((page.granule - pre_skip) / OPUS_RATE)
    assert playable(len(payload)) == pytest.approx(2.0)  # all of it, and no more: the end trimming applied


@pytest.mark.parametrize("granule_offset", [0, 7 * OPUS_RATE], ids=["from-zero", "joined-later"])
@pytest.mark.parametrize("body_bytes", [700, 2500])
def test_packets_over_several_pages_play_as_the_granule_positions_say(body_bytes: int, granule_offset: int) -> None:
    payload = repaged(opus_stream(1.0, 256_000, 60, 1_000_000), body_bytes, granule_offset)
    pages = ogg_pages(payload)
    if body_bytes < 1000:  # packets of about 1.9 kB: some pages only carry the middle of one
        assert any(page.granule == -1 for page in pages)
    playable = playable_seconds(payload, "opus", 24_000)
    assert playable is not None
    cuts = awkward_cuts(payload)
    expected = [expected_s(payload, cut) for cut in cuts]
    assert [playable(cut) for cut in cuts] == pytest.approx(expected, abs=1e-9)
    assert playable(len(payload)) == pytest.approx(1.0)

    # fed to the listener in chunks cut at those places, 10 ms apart: audio comes only at the pages packets end on
    arrivals = [(0.01 * (i + 1), cut) for i, cut in enumerate(cuts)]
    heard = listen(payload, arrivals, "opus", 24_000, 0.0)
    assert heard is not None
    ends = {page.end for page in pages if page.granule != -1}
    assert {cut for at, cut in arrivals if (at, playable(cut)) in heard.timeline} <= ends
    assert heard.audio_s == pytest.approx(1.0)


def test_chained_streams_play_one_after_the_other() -> None:
    """A server may answer with one Ogg stream per sentence, one after the other (a chain, RFC 3533, section 4)."""
    first = opus_stream(0.5, 32_000, 20, 20_000)
    second = repaged(opus_stream(0.7, 32_000, 20, 20_000), 300)
    playable = playable_seconds(first + second, "opus", 24_000)
    assert playable is not None
    assert playable(len(first)) == pytest.approx(0.5)
    assert playable(len(first) + first_packet_in(second) - 1) == pytest.approx(0.5)
    assert playable(len(first + second)) == pytest.approx(1.2)
    steps = [playable(cut) for cut in range(0, len(first + second) + 1, 97)]
    assert all(a <= b for a, b in itertools.pairwise(steps))
