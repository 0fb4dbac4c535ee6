"""The voice store on its own: atomic names, stale handles after a delete or re-upload, a bounded clip cache, and the
leftovers of replicas that died swept (as the server starts)."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from app import voice_store
from app.engine_protocol import ReferenceAudio
from app.server import create_app
from app.voice_store import VoiceExists, VoiceNotFound, VoiceStore
from tests.fakes.vllm_omni_0_30 import FakeAsyncOmni
from tests.unit.test_omni_engine import make_engine, service_settings

CLIP = ReferenceAudio((0.2 * np.sin(np.arange(24_000) / 5)).astype(np.float32), 24_000)


def test_create_get_delete(tmp_path: Path) -> None:
    store = VoiceStore(tmp_path)
    voice = store.create("alice", CLIP, " Hello. ")
    assert store.get("alice") == voice and voice.ref_text == "Hello." and voice.duration_s == 1.0
    with pytest.raises(VoiceExists):
        store.create("alice", CLIP, None)
    assert np.allclose(store.audio(voice).samples, CLIP.samples, atol=1 / 32767)
    store.delete("alice")
    with pytest.raises(VoiceNotFound):
        store.get("alice")
    assert [p.name for p in tmp_path.iterdir()] == []  # nothing left behind


def test_a_handle_to_a_deleted_or_replaced_voice_is_not_found(tmp_path: Path) -> None:
    store, other_replica = VoiceStore(tmp_path), VoiceStore(tmp_path)
    voice = store.create("bob", CLIP, None)
    other_replica.delete("bob")
    with pytest.raises(VoiceNotFound):
        store.audio(voice)  # deleted through another replica after this one looked it up
    other_replica.create("bob", ReferenceAudio(CLIP.samples[:12_000], 24_000), "New.")
    with pytest.raises(VoiceNotFound):
        store.audio(voice)  # the name now belongs to another clip: never mix the old transcript with it
    assert len(store.audio(store.get("bob")).samples) == 12_000


def test_the_clip_cache_is_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(voice_store, "CACHE_VOICES", 3)
    store = VoiceStore(tmp_path)
    voices = [store.create(f"v{i}", CLIP, None) for i in range(5)]
    for voice in voices:
        store.audio(voice)
    assert len(store._audio_cache) == 3


@pytest.mark.parametrize("name", ["..", "../x", "A", "a/b", "", "x" * 65, "a b", "é"])
def test_names_outside_the_pattern_are_never_files(tmp_path: Path, name: str) -> None:
    store = VoiceStore(tmp_path)
    with pytest.raises(VoiceNotFound):
        store.get(name)


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda folder: (folder / "voice.json").write_bytes(b"\xff\xfe"), id="metadata-not-utf8"),
        pytest.param(lambda folder: (folder / "voice.json").mkdir(), id="metadata-a-directory"),
        pytest.param(lambda folder: (folder / "voice.json").write_text('{"name": 1}'), id="metadata-not-a-voice"),
        pytest.param(lambda folder: None, id="no-metadata"),  # a replica that died mid-upload, before the rename
    ],
)
def test_a_damaged_entry_is_no_voice_to_readers_and_can_be_deleted_and_its_name_taken_again(
    tmp_path: Path, damage: object
) -> None:
    """An entry the store cannot read (a half-written or damaged folder on the shared volume) is not found, never an
    error: a request naming it is told the voice is unknown, the listing leaves it out, and a delete clears it, so
    that its name can be registered again without anyone cleaning the volume by hand."""
    store = VoiceStore(tmp_path)
    store.create("fine", CLIP, None)
    folder = tmp_path / "broken"
    folder.mkdir()
    damage(folder)  # type: ignore[operator]
    with pytest.raises(VoiceNotFound):
        store.get("broken")
    assert [voice.name for voice in store.list()] == ["fine"]
    store.delete("broken")
    assert not folder.exists()
    assert store.create("broken", CLIP, None).name == "broken"


def test_an_empty_folder_left_by_a_create_that_died_does_not_hold_its_name(tmp_path: Path) -> None:
    store = VoiceStore(tmp_path)
    (tmp_path / "orphan").mkdir()
    assert store.create("orphan", CLIP, None) == store.get("orphan")


def test_a_store_that_cannot_be_listed_lists_no_voices(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = VoiceStore(tmp_path)
    store.create("fine", CLIP, None)

    def unreadable(self: Path) -> object:
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "iterdir", unreadable)
    assert store.list() == []


def test_a_voice_is_found_by_its_id_as_well_as_its_name(tmp_path: Path) -> None:
    """The listing gives each uploaded voice an `id` (`voice_<hex>`), as OpenAI's voices have: it names the voice
    wherever its name does."""
    store = VoiceStore(tmp_path)
    voice = store.create("carol", CLIP, None)
    assert store.get(voice.id) == voice and store.get(voice.id.upper()) == voice
    store.delete(voice.id)
    with pytest.raises(VoiceNotFound):
        store.get(voice.id)


def test_a_name_with_the_shape_of_an_id_is_refused_so_that_no_voice_takes_anothers_id(tmp_path: Path) -> None:
    store = VoiceStore(tmp_path)
    voice = store.create("alice", CLIP, None)
    with pytest.raises(ValueError, match="shape of an id"):
        store.create(voice.id, CLIP, None)
    assert store.get(voice.id) == voice


def test_a_file_where_a_voices_directory_would_be_is_cleared_by_a_delete(tmp_path: Path) -> None:
    store = VoiceStore(tmp_path)
    (tmp_path / "stray").write_text("not a voice")
    with pytest.raises(VoiceExists):
        store.create("stray", CLIP, None)
    store.delete("stray")
    assert not (tmp_path / "stray").exists()
    assert store.create("stray", CLIP, None).name == "stray"


def leftovers(root: Path) -> tuple[Path, Path, Path]:
    """What replicas that died left: a create's hidden directory half-written, a delete's tombstone, and a tombstone
    that is a file (a file stood where a voice's directory would be)."""
    creating = root / ".creating-half-abc123"
    creating.mkdir()
    (creating / ".audio.wav.x.tmp").write_bytes(b"RIFF")
    tombstone = root / f".deleted-gone-{'0' * 32}"
    tombstone.mkdir()
    (tombstone / "voice.json").write_text("{}")
    file_tombstone = root / f".deleted-file-{'1' * 32}"
    file_tombstone.write_text("x")
    return creating, tombstone, file_tombstone


def test_leftovers_of_creates_and_deletes_that_died_are_swept_once_old_and_nothing_else(tmp_path: Path) -> None:
    """A replica that died mid-create or mid-delete left its hidden directory: never a voice, never removed. Swept
    once unchanged for `LEFTOVER_AGE_S`; a younger one may be another live replica's create, and is kept."""
    store = VoiceStore(tmp_path)
    store.create("kept", CLIP, None)
    (tmp_path / ".other-hidden").mkdir()  # not the store's: never touched
    left = leftovers(tmp_path)
    now = time.time()
    assert store.sweep_leftovers(now=now + 60) == 0  # a minute on: maybe still at work
    assert all(path.exists() for path in left)
    assert store.sweep_leftovers(now=now + voice_store.LEFTOVER_AGE_S + 60) == 3
    assert not any(os.path.lexists(path) for path in left)
    assert (tmp_path / ".other-hidden").is_dir()
    assert [voice.name for voice in store.list()] == ["kept"] and store.audio(store.get("kept")) is not None


def test_a_store_not_there_yet_or_unreadable_sweeps_nothing_and_raises_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert VoiceStore(tmp_path / "absent").sweep_leftovers() == 0
    assert not (tmp_path / "absent").exists()  # not created by the sweep
    leftovers(tmp_path)

    def unreadable(self: Path) -> object:
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "iterdir", unreadable)
    assert VoiceStore(tmp_path).sweep_leftovers(now=time.time() + 86_400) == 0


async def test_the_server_sweeps_the_stores_leftovers_as_it_starts(
    tmp_path: Path, custom_voice_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    swept: list[Path] = []
    done = threading.Event()

    def sweep(self: VoiceStore, *args: object, **kwargs: object) -> int:
        swept.append(self.root)
        done.set()
        return 0

    monkeypatch.setattr(VoiceStore, "sweep_leftovers", sweep)
    engine = make_engine(custom_voice_dir, FakeAsyncOmni(), voice_store=str(tmp_path))
    app = create_app(service_settings(engine), engine=engine)
    async with app.router.lifespan_context(app):
        await asyncio.to_thread(done.wait, 60)  # beside the engine's start, in a thread of its own
        assert swept == [tmp_path]
