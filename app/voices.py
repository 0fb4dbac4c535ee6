"""Voice names as callers say them (including OpenAI's) mapped to the engine's voice ids."""

from __future__ import annotations

from dataclasses import dataclass

from app.engine_protocol import VoiceInfo

GENERIC_VOICE = "default"
# The longest voice name or id a request may give (`voice`, `{"id": ...}`, `speaker`, a voice's path): room for any
# voice's, an uploaded name (64 characters, `app.voice_store.NAME_PATTERN`), an id (`voice_` and 32 hex digits), an
# engine voice or an alias, with the spaces around it that resolution ignores. A longer one names no voice: it is
# refused, saying this limit, before it is looked up or quoted back in an error (or a log line).
MAX_VOICE_NAME_CHARS = 256


@dataclass(frozen=True, slots=True)
class VoiceCatalog:
    """Engine voices plus an alias table. An alias whose target is empty, or names no engine voice, points at the
    engine's default (first) voice, so OpenAI client code asking for "alloy" gets speech, not an error. "default"
    (vllm-omni 0.30's generic voice, and what an omitted `voice` means) is that voice too, unless a voice or an alias
    has that name."""

    voices: tuple[VoiceInfo, ...]
    aliases: dict[str, str]

    def resolve(self, name: str) -> str | None:
        """The engine voice id for a requested name, or None when the name is unknown. Case-insensitive."""
        wanted = name.strip().casefold()
        for voice in self.voices:
            if voice.id.casefold() == wanted:
                return voice.id
        for alias, target in self.aliases.items():
            if alias.casefold() == wanted:
                return self._voice_id(target)
        if wanted == GENERIC_VOICE:
            return self._voice_id("")
        return None

    def _voice_id(self, target: str) -> str | None:
        for voice in self.voices:
            if voice.id.casefold() == target.casefold():
                return voice.id
        return self.voices[0].id if self.voices else None

    def unknown_targets(self) -> dict[str, str]:
        """Aliases whose target names no engine voice (a non-empty one: empty means the default on purpose), which
        speak in the default voice all the same: worth a word to the operator, who may have misspelt the voice."""
        known = {voice.id.casefold() for voice in self.voices} | {GENERIC_VOICE}
        return {alias: target for alias, target in self.aliases.items() if target and target.casefold() not in known}

    def shadowed_aliases(self) -> dict[str, str]:
        """Aliases that an engine voice's own name hides (`resolve` matches voices first, without regard to case),
        where the alias names another voice (a non-empty target: an empty one means the default on purpose): a
        request for that name gets the engine's voice, never the alias's, which the operator should hear of."""
        ids = {voice.id.casefold(): voice.id for voice in self.voices}
        return {
            alias: target
            for alias, target in self.aliases.items()
            if target and (own := ids.get(alias.strip().casefold())) is not None and self._voice_id(target) != own
        }

    def aliases_of(self, voice_id: str) -> list[str]:
        return sorted(alias for alias, target in self.aliases.items() if self._voice_id(target) == voice_id)
