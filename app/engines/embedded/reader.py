"""hibari's text reader, with every letter of a long unknown word read.

Words its lexicon lacks go to a small network that reads at most its first `maxlen` (24) letters and drops the rest
without a word: "supercalifragilisticexpialidocious" lost its ending, a long hashtag or German compound its last
syllables. `WholeWordReader` reads such a word in pieces of at most that many letters, each piece's phonemes after
the other's, so that nothing accepted goes unspoken."""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from typing import Any


class WholeWordReader:
    """An unknown-word reader (word -> phonemes, or None) that reads past its `maxlen` letters, in near-equal pieces."""

    def __init__(self, reader: Callable[[str], str | None], maxlen: int) -> None:
        self._reader = reader
        self.maxlen = maxlen

    def __call__(self, word: str) -> str | None:
        if len(word) <= self.maxlen:
            return self._reader(word)
        count = math.ceil(len(word) / self.maxlen)
        size = math.ceil(len(word) / count)  # near-equal pieces: no last piece of a letter or two read on its own
        read = [self._reader(word[start : start + size]) for start in range(0, len(word), size)]
        return "".join(phonemes for phonemes in read if phonemes) or None


def text_reader(voice: str) -> Any:
    """hibari's G2P for `voice` (its British rules and reader where the voice is British), long words read whole."""
    from hibari.g2p import G2P
    from hibari.g2p.oov import ASSETS, OOV
    from hibari.tts import VOICES

    british = bool(VOICES[voice]["british"])
    oov = OOV(os.path.join(ASSETS, "oov_gb.onnx" if british else "oov.onnx"))
    return G2P(oov=WholeWordReader(oov, oov.maxlen), british=british)
