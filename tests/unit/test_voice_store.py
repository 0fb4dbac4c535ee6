"""The voice store on its own: atomic names, stale handles after a delete or re-upload, a bounded clip cache."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from app import voice_store
from app.engine_protocol import ReferenceAudio
from app.voice_store import VoiceExists, VoiceNotFound, VoiceStore

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
