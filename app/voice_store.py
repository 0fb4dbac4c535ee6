"""Registered voices (for cloning), kept on a filesystem that several replicas may share (a ReadWriteMany volume).

One directory per voice under the store: `audio.wav` (the normalised reference clip: mono, 24 kHz, 16-bit) and
`voice.json` (metadata), each written to a temporary file and renamed into place. Creating the directory is the
atomic claim on a name, so two replicas uploading the same name at once get one 201 and one 409; a voice is visible
only once its metadata exists; deleting renames the directory away first. Nothing is cached across processes: every
replica reads the store, so an upload or a delete through one is seen by all at once.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import time
import uuid
import wave
from collections import OrderedDict
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from app.engine_protocol import ReferenceAudio

NAME_PATTERN = re.compile(r"[a-z0-9_-]{1,64}")
CACHE_VOICES = 64
_META = "voice.json"
_AUDIO = "audio.wav"


class VoiceExists(Exception):
    pass


class VoiceNotFound(Exception):
    pass


@dataclass(frozen=True)
class StoredVoice:
    id: str
    name: str
    duration_s: float
    sample_rate: int
    created_at: int
    has_ref_text: bool
    ref_text: str | None = None

    def public(self) -> dict[str, object]:
        return {k: v for k, v in asdict(self).items() if k != "ref_text"}


def _write_atomically(path: Path, data: bytes) -> None:
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def _wav_bytes(reference: ReferenceAudio) -> bytes:
    import io

    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(reference.sample_rate)
        w.writeframes(np.rint(np.clip(reference.samples, -1, 1) * 32767).astype("<i2").tobytes())
    return out.getvalue()


class VoiceStore:
    def __init__(self, root: str | Path) -> None:
        # created when the first voice is stored, not here: a server that never stores one (an engine that cannot
        # clone, a read-only working directory) never needs to write there
        self.root = Path(root)
        # (name, id) -> decoded clip, most recently used last; bounded (a 30 s clip is ~3 MB decoded)
        self._audio_cache: OrderedDict[tuple[str, str], ReferenceAudio] = OrderedDict()

    def create(self, name: str, reference: ReferenceAudio, ref_text: str | None) -> StoredVoice:
        folder = self.root / name
        self.root.mkdir(parents=True, exist_ok=True)
        try:
            folder.mkdir()  # the atomic claim on the name, across processes sharing the store
        except FileExistsError:
            raise VoiceExists(name) from None
        try:
            voice = StoredVoice(
                id=f"voice_{uuid.uuid4().hex}",
                name=name,
                duration_s=round(len(reference.samples) / reference.sample_rate, 3),
                sample_rate=reference.sample_rate,
                created_at=int(time.time()),
                has_ref_text=bool(ref_text and ref_text.strip()),
                ref_text=ref_text.strip() if ref_text and ref_text.strip() else None,
            )
            _write_atomically(folder / _AUDIO, _wav_bytes(reference))
            _write_atomically(folder / _META, json.dumps(asdict(voice)).encode())  # last: the voice now exists
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise
        return voice

    def get(self, name: str) -> StoredVoice:
        """The voice stored as `name`, written in any case and with spaces around it, as a built-in voice's name may
        be (stored names are lower case)."""
        stored = name.strip().lower()
        if not NAME_PATTERN.fullmatch(stored):
            raise VoiceNotFound(name)
        try:
            return StoredVoice(**json.loads((self.root / stored / _META).read_text()))
        except (FileNotFoundError, NotADirectoryError, json.JSONDecodeError, TypeError):
            raise VoiceNotFound(name) from None

    def list(self) -> list[StoredVoice]:
        voices = []
        if not self.root.is_dir():  # nothing stored yet
            return voices
        for folder in sorted(self.root.iterdir()):
            if not NAME_PATTERN.fullmatch(folder.name) or not folder.is_dir():  # a tombstone, or no voice's name
                continue
            try:
                voices.append(self.get(folder.name))
            except VoiceNotFound:
                continue  # being written or deleted right now
        return voices

    def delete(self, name: str) -> None:
        name = self.get(name).name
        tombstone = self.root / f".deleted-{name}-{uuid.uuid4().hex}"
        try:
            (self.root / name).rename(tombstone)  # gone for every reader at once
        except FileNotFoundError:
            raise VoiceNotFound(name) from None
        shutil.rmtree(tombstone, ignore_errors=True)
        for key in [k for k in self._audio_cache if k[0] == name]:
            del self._audio_cache[key]

    def audio(self, voice: StoredVoice) -> ReferenceAudio:
        """The clip, decoded once per process and voice (a re-upload under the same name has a new id)."""
        key = (voice.name, voice.id)
        if key in self._audio_cache:
            self._audio_cache.move_to_end(key)
            return self._audio_cache[key]
        try:
            if self.get(voice.name).id != voice.id:  # deleted and registered again meanwhile
                raise VoiceNotFound(voice.name)
            with wave.open(str(self.root / voice.name / _AUDIO), "rb") as w:
                pcm = np.frombuffer(w.readframes(w.getnframes()), "<i2").astype(np.float32) / 32767.0
                clip = ReferenceAudio(pcm, w.getframerate())
        except (FileNotFoundError, NotADirectoryError, wave.Error, EOFError):
            raise VoiceNotFound(voice.name) from None  # deleted by another replica a moment ago
        self._audio_cache[key] = clip
        while len(self._audio_cache) > CACHE_VOICES:
            self._audio_cache.popitem(last=False)
        return clip
