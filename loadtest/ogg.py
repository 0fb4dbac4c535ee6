"""Ogg Opus as a listener's player reads it: which bytes complete which packets (the Ogg framing, RFC 3533) and how much
audio those packets play (the Ogg Opus timing, RFC 7845), read from the bytes alone, for the modelled listener
(`loadtest.playback`).

A page's CRC covers all of it, so a demuxer (libogg's, FFmpeg's) hands out none of its packets before its last byte.
A packet ends at its first segment whose lacing value is below 255; one whose segments run on to a later page (the
page ends on a lacing value of 255, the next page is flagged as continuing it) plays once the page holding its last
segment is complete. A page on which no packet ends carries granule position -1 and adds nothing.

What the packets play: each Opus packet's duration from its TOC byte (RFC 6716, section 3.1), less what the stream's
own timing takes off: the pre-skip of its OpusHead (the encoder's priming, which every decoder drops), the end
trimming (the last page's granule position below the samples of the packets completed by it) and a later start (the
first audio page's granule position above its packets' samples: a stream joined live, whose earlier samples were
never sent, RFC 7845 section 4.5). A chain of streams, one after another (a server may send one per sentence), plays
back to back. Granule positions count 48 kHz samples whatever rate was encoded.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final

OPUS_RATE: Final = 48_000
_CAPTURE: Final = b"OggS"
_HEADER: Final = 27  # the fixed part of a page header, before its segment table
_CONTINUED, _BOS, _EOS = 0x01, 0x02, 0x04
_NO_GRANULE: Final = -1


@dataclass(frozen=True, slots=True)
class Page:
    start: int  # where its capture pattern is in the stream
    end: int  # one past its last byte
    serial: int
    granule: int  # -1: no packet ends on it
    flags: int
    lacing: bytes  # the segment table

    @property
    def body(self) -> int:
        return self.start + _HEADER + len(self.lacing)


def pages(data: bytes) -> Iterator[Page]:
    """The complete pages at the start of `data`, in order; it stops at a page not all there yet, or at bytes that
    are no page (this is a reader of a server's stream, not a repair tool: nothing past them is searched for)."""
    offset = 0
    while len(data) >= offset + _HEADER and data[offset : offset + 4] == _CAPTURE:
        flags, granule, serial = struct.unpack_from("<xBqI", data, offset + 4)
        count = data[offset + 26]
        lacing = data[offset + _HEADER : offset + _HEADER + count]
        end = offset + _HEADER + count + sum(lacing)
        if len(lacing) < count or end > len(data):
            return
        yield Page(offset, end, serial, granule, flags, lacing)
        offset = end


# samples per frame (at 48 kHz) of each TOC configuration, RFC 6716 section 3.1: SILK-only, hybrid, CELT-only
_FRAME_SAMPLES: Final = (480, 960, 1920, 2880) * 3 + (480, 960) * 2 + (120, 240, 480, 960) * 4


def opus_packet_samples(packet: bytes) -> int:
    """The samples (at 48 kHz) an Opus packet decodes to: its frame size times its frame count, from its TOC byte."""
    if not packet:
        return 0
    toc = packet[0]
    code = toc & 0x03
    if code == 0:
        frames = 1
    elif code < 3:
        frames = 2
    else:  # the frame count is in the next byte
        frames = packet[1] & 0x3F if len(packet) > 1 else 0
    return frames * _FRAME_SAMPLES[toc >> 3]


@dataclass
class _Link:
    """One logical Opus stream of a chain, as far as it has come."""

    serial: int
    pre_skip: int | None = None  # from OpusHead, its first packet
    headers: int = 0  # header packets seen (OpusHead, OpusTags)
    partial: bytearray | None = None  # a packet whose last segment has not come yet
    completed: int = 0  # samples of the audio packets completed so far
    start: int | None = None  # the granule position the audio starts from (0 unless joined later)
    played: int = 0  # samples playable so far (pre-skip, trimming and a later start taken off)
    ended: bool = False

    def add(self, page: Page, data: bytes) -> None:
        continued = bool(page.flags & _CONTINUED)
        # the tail of a packet begun before these bytes (or one never finished): no decoder can use it
        orphan = continued and self.partial is None
        if not continued:
            self.partial = None
        at, ended = page.body, 0  # audio packets ended on this page
        for value in page.lacing:
            segment = data[at : at + value]
            at += value
            if orphan:
                orphan = value == 255
                continue
            if self.partial is None:
                self.partial = bytearray()
            self.partial += segment
            if value < 255:  # the packet's last segment
                ended += self._packet(bytes(self.partial))
                self.partial = None
        if ended and page.granule != _NO_GRANULE:
            if self.start is None:  # the first page an audio packet ends on says where the audio starts
                self.start = max(0, page.granule - self.completed)
            # no more than the granule position says: the last page's trims what its last packet decodes past the end
            total = min(self.completed, page.granule - self.start)
        else:
            total = self.completed
        self.played = max(self.played, total - (self.pre_skip or 0))  # the pre-skip first, then the speech
        self.ended = bool(page.flags & _EOS)

    def _packet(self, packet: bytes) -> int:
        """Take a completed packet: 1 if it was audio, 0 for a header."""
        if self.headers == 0:
            self.headers = 1
            self.pre_skip = struct.unpack_from("<H", packet, 10)[0] if len(packet) >= 12 else 0
            return 0
        if self.headers == 1:  # OpusTags (which may span pages)
            self.headers = 2
            return 0
        self.completed += opus_packet_samples(packet)
        return 1


def opus_timeline(data: bytes) -> list[tuple[int, float]] | None:
    """For each complete page that adds audio: (where the page ends, the seconds of audio playable once it is in), in
    byte order. None where `data` is no Ogg Opus stream (none of the streams its first pages begin is Opus)."""
    timeline: list[tuple[int, float]] = []
    before = 0  # samples of the chain's earlier streams
    link: _Link | None = None
    for page in pages(data):
        opus_head = bool(page.flags & _BOS) and data[page.body : page.body + 8] == b"OpusHead"
        if link is None or (link.ended and page.serial != link.serial and page.flags & _BOS):
            if not opus_head:
                if link is None and not page.flags & _BOS:
                    return None  # the stream's first pages begin no Opus stream
                continue  # another codec's stream, beside the audio or chained after it: nothing a listener hears
            before += link.played if link is not None else 0
            link = _Link(page.serial)
        if page.serial != link.serial:
            continue  # a stream multiplexed beside the audio (a skeleton, metadata)
        played = link.played
        link.add(page, data)
        if link.played > played:
            timeline.append((page.end, (before + link.played) / OPUS_RATE))
    return None if link is None else timeline
