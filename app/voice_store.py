"""Registered voices (for cloning), kept on a filesystem that several replicas may share (a ReadWriteMany volume).

One directory per voice under the store: `audio.wav` (the normalised reference clip: mono, 24 kHz, 16-bit) and
`voice.json` (metadata), both written into a hidden directory of its own first, which is then renamed to the voice's
name: that rename is the atomic claim on a name (it fails onto a voice's directory), so two replicas uploading the
same name at once get one 201 and one 409, and a voice is visible whole or not at all. A directory a replica left
half-made or damaged (it died, the volume was touched by hand) is no voice: not found, not listed, and a delete clears
it. Deleting renames the directory away first. Nothing is cached across processes: every replica reads the store, so
an upload or a delete through one is seen by all at once. A voice is named by its name or by its id. What a replica
that died left of a create or a delete (its hidden directory) is swept when a replica starts, once old enough that no
live replica can still be at work in it.
"""

from __future__ import annotations

import errno
import json
import logging
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

log = logging.getLogger(__name__)

NAME_PATTERN = re.compile(r"[a-z0-9_-]{1,64}")
ID_PATTERN = re.compile(r"voice_[0-9a-f]{32}")
CACHE_VOICES = 64
_META = "voice.json"
_AUDIO = "audio.wav"
_CREATING = ".creating-"  # a voice being made, renamed to its name once whole
_DELETED = ".deleted-"  # a voice being deleted, renamed away before it is removed
# A hidden directory left this long after its last change is a leftover of a replica that died. A live replica's create
# writes its two files and renames the directory within seconds, and a delete removes its tombstone right after the
# rename; the margin is for the clocks of the replicas and of the shared volume's server, which need not agree, and
# for a slow volume. A younger one may be another replica's create in progress, which a sweep would break.
LEFTOVER_AGE_S = 15 * 60


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

    def sweep_leftovers(self, older_than_s: float = LEFTOVER_AGE_S, now: float | None = None) -> int:
        """Remove what creates and deletes left half-done (their hidden directories) when their replica died, once
        unchanged for `older_than_s` (`now`: the wall-clock time to judge by, time.time() unless given); returns how
        many. Nothing else in the store is touched, and a store that is not there or cannot be read is left as it is
        (logged): a server starts whatever is left."""
        now = time.time() if now is None else now
        try:
            if not self.root.is_dir():  # nothing stored yet
                return 0
            entries = [entry for entry in self.root.iterdir() if entry.name.startswith((_CREATING, _DELETED))]
        except OSError as exc:
            log.warning("voice store: %s cannot be listed (%s): leftovers not swept", self.root, exc)
            return 0
        swept = 0
        for entry in entries:
            try:
                info = entry.lstat()
                # its last change: ctime moves with a rename (a tombstone's mtime is still its voice's creation) and
                # with every file written into it; mtime too, for one set ahead by hand
                if now - max(info.st_mtime, info.st_ctime) < older_than_s:
                    continue  # maybe another replica's create or delete at work right now
                if entry.is_symlink() or not entry.is_dir():
                    entry.unlink(missing_ok=True)
                else:
                    shutil.rmtree(entry)
            except FileNotFoundError:  # another replica swept it first
                continue
            except OSError as exc:
                log.warning("voice store: leftover %s cannot be removed (%s)", entry.name, exc)
                continue
            swept += 1
        if swept:
            log.info("voice store: swept leftovers of creates and deletes that never finished", extra={"swept": swept})
        return swept

    def create(self, name: str, reference: ReferenceAudio, ref_text: str | None) -> StoredVoice:
        self.root.mkdir(parents=True, exist_ok=True)
        if self._readable(name) is not None:
            raise VoiceExists(name)
        if ID_PATTERN.fullmatch(name):  # it would take another voice's id
            raise ValueError(f"a voice's name cannot have the shape of an id: {name!r}")
        folder = Path(tempfile.mkdtemp(dir=self.root, prefix=f"{_CREATING}{name}-"))  # hidden: no voice's name
        folder.chmod(0o755)  # as a directory made with mkdir is (mkdtemp's is its owner's alone)
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
            _write_atomically(folder / _META, json.dumps(asdict(voice)).encode())
            self._claim(folder, name)
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise
        return voice

    def _claim(self, made: Path, name: str) -> None:
        """`made` renamed to `name`, the atomic claim across processes sharing the store: onto a voice's directory (or
        anything but an empty one) the rename fails, and the name is taken. An empty directory there is what a create
        of the earlier layout left when it died: no voice, replaced. A damaged entry is cleared first by a delete."""
        try:
            os.rename(made, self.root / name)
        except OSError as exc:
            if exc.errno in (errno.EEXIST, errno.ENOTEMPTY, errno.ENOTDIR, errno.EISDIR):
                raise VoiceExists(name) from None
            raise

    def get(self, name: str) -> StoredVoice:
        """The voice stored as `name`, written in any case and with spaces around it, as a built-in voice's name may
        be (stored names are lower case); or, where no voice has that name, the voice whose id it is."""
        stored = name.strip().lower()
        voice = self._readable(stored)
        if voice is None and ID_PATTERN.fullmatch(stored):
            voice = next((v for v in self.list() if v.id == stored), None)
        if voice is None:
            raise VoiceNotFound(name)
        return voice

    def _readable(self, stored: str) -> StoredVoice | None:
        """The voice in the directory `stored` (a stored name), or None where there is none or it cannot be read."""
        if not NAME_PATTERN.fullmatch(stored):
            return None
        try:
            text = (self.root / stored / _META).read_text(encoding="utf-8")
        except (FileNotFoundError, NotADirectoryError):
            return None
        except (OSError, ValueError) as exc:  # unreadable, not UTF-8, a directory: a damaged entry, no voice
            log.warning("voice store: %s cannot be read (%s); it is no voice until deleted", stored, exc)
            return None
        try:
            voice = StoredVoice(**json.loads(text))
        except (ValueError, TypeError) as exc:
            log.warning("voice store: %s holds no voice's metadata (%s); it is no voice until deleted", stored, exc)
            return None
        if voice.name != stored or not isinstance(voice.id, str):
            log.warning("voice store: %s holds another voice's metadata; it is no voice until deleted", stored)
            return None
        return voice

    def list(self) -> list[StoredVoice]:
        try:
            if not self.root.is_dir():  # nothing stored yet
                return []
            folders = sorted(self.root.iterdir())
        except OSError as exc:
            log.warning("voice store: %s cannot be listed (%s): no registered voices", self.root, exc)
            return []
        # a tombstone, a voice being made, or no voice's name: not read; one being deleted right now: None
        readable = (self._readable(folder.name) for folder in folders if NAME_PATTERN.fullmatch(folder.name))
        return [voice for voice in readable if voice is not None]

    def delete(self, name: str) -> None:
        """The voice `name` (or id) deleted; a directory of that name that holds no voice (damaged, half-made) too."""
        stored = name.strip().lower()
        damaged = NAME_PATTERN.fullmatch(stored) is not None and os.path.lexists(self.root / stored)
        if self._readable(stored) is None and not damaged:
            stored = self.get(name).name  # by its id, or not found
        name = stored
        tombstone = self.root / f"{_DELETED}{name}-{uuid.uuid4().hex}"
        try:
            (self.root / name).rename(tombstone)  # gone for every reader at once
        except FileNotFoundError:
            raise VoiceNotFound(name) from None
        if tombstone.is_symlink() or not tombstone.is_dir():  # a file where a voice's directory would be
            tombstone.unlink(missing_ok=True)
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
        except (OSError, wave.Error, EOFError):
            raise VoiceNotFound(voice.name) from None  # deleted by another replica a moment ago, or damaged
        self._audio_cache[key] = clip
        while len(self._audio_cache) > CACHE_VOICES:
            self._audio_cache.popitem(last=False)
        return clip
