"""The prompts a talker step takes in, built together (`SPEECH_OMNI__PROMPT_BATCH`).

vllm-omni 0.30 builds each CustomVoice or VoiceDesign request's prompt embeddings inside the talker's prefill step,
one request after another (`Qwen3TTSPromptEmbedsBuilder.build_prompt_embeds`, model_executor/models/qwen3_tts/
prompt_embeds_builder.py:972-1504, called from the talker's `preprocess`, qwen3_tts_talker.py:927). For each request,
on the host: a call of the text tokenizer and its ids copied to the GPU from pageable memory (:1027), a copy that
returns once the talker's stream has run everything queued before it; the speaker's id made a GPU tensor the same way
(:1414); and some twenty kernels, most of which depend only on the speaker and the language: the codec tags' and the
speaker's embeddings, the role header's ("<|im_start|>assistant\\n") embedding and text projection, their sums and
concatenations (:1079-1082, :1409-1424), the codec pad's and bos's embeddings (:1429-1439).
Only the text's own rows differ from one request to the next.

Before any row's `preprocess`, the runner calls the talker's `preprocess_batch_mrv2` once with every prefill row of
the step (worker_v2/model_states/omni_model_state.py:593-606) and merges what it writes into each row's state before
that row's `preprocess` (:603-606); vllm-omni uses it for Base requests' text ids and reference codes. Here it builds
the CustomVoice and VoiceDesign prompts of the step together, and the talker's builder then hands each row the prompt
made for it:

- one tokenizer call for all their texts (the fast tokenizer's ids for a batch without padding are each text's ids,
  as vllm-omni's batched pass for Base takes them, prompt_embeds_builder.py:863-897);
- one copy of all the ids to the GPU, from pinned memory, queued without waiting for the talker's stream;
- the constant prefix, the role header's projection and the codec tags' and speaker's embeddings with their sums
  (what `build_prompt_embeds` makes before the text), made once per (role ids, codec tags) with vllm-omni's own
  kernels on the same inputs and kept; so are the rows around the text (the codec pad's and bos's embeddings, the
  text end's projection plus the pad's);
- per request, the text's embedding and projection over the same rows as vllm-omni's (the same matrix shapes), a sum
  and a concatenation.

The same values, bit for bit, on any device: each tensor is made by the same kernel on the same inputs as vllm-omni's,
or is a broadcast of a row vllm-omni would have repeated (its codec pad ids are all one id). Projecting all the texts'
rows at once would save three or four more launches a request but is not bit-identical on a GPU (a GEMM's kernel and
its rounding depend on its number of rows), so it is not done.

A row is left to vllm-omni's own build where it would not be like this: another task, an instruction, ids already
given, a speaker it does not know (vllm-omni then raises its own error), a prompt already built (a later chunk).

Plain Python at import (the server reads VARIABLE): torch is given (`torch`), as vllm-omni's builder is.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

VARIABLE = "SPEECH_OMNI_PROMPT_BATCH"
TASKS = frozenset({"CustomVoice", "VoiceDesign"})
BUILT = "_speech_prompt_built"  # the row's state key that holds its prompt, built by `PromptBatch.build`

log = logging.getLogger("vllm.speech.plugin")  # under vLLM's logger, whose handler the stage process has


def enabled(environ: Mapping[str, str]) -> bool:
    return environ.get(VARIABLE, "") == "1"


def _first(value: Any, default: Any) -> Any:
    """vllm-omni's `(info.get(key) or [default])[0]`."""
    return (value or [default])[0]


class Built:
    """One row's prompt, taken once: the row's state keeps this box (the runner merges it into each step's copy of
    that state), and the box lets go of the tensors when `build_prompt_embeds` takes them."""

    __slots__ = ("result",)

    def __init__(self, result: tuple[Any, Any, None, None]) -> None:
        self.result: tuple[Any, Any, None, None] | None = result

    def take(self) -> tuple[Any, Any, None, None] | None:
        result, self.result = self.result, None
        return result


class Row:
    """What a row's prompt is made of, read from its state as `build_prompt_embeds` reads it."""

    __slots__ = ("info", "speaker", "streaming", "tags", "text")

    def __init__(self, info: dict[str, Any], text: str, tags: tuple[int, ...], speaker: int | None, streaming: bool):
        self.info, self.text, self.tags, self.speaker, self.streaming = info, text, tags, speaker, streaming


class PromptBatch:
    """The prompts of one step's CustomVoice and VoiceDesign rows, made together for vllm-omni's prompt `builder`
    (its `Qwen3TTSPromptEmbedsBuilder`). `assistant_text` is vllm-omni's `build_assistant_text`, `torch` torch."""

    def __init__(self, builder: Any, assistant_text: Callable[[str], str], torch: Any) -> None:
        self._builder = builder
        self._assistant_text = assistant_text
        self._torch = torch
        self._prefixes: dict[tuple[str, tuple[int, ...], tuple[int, ...]], Any] = {}
        self._rows: dict[tuple[str, str], Any] = {}
        self._said = False

    # -------------------- which rows, and what they are made of --------------------

    def row(self, info: Any) -> Row | None:
        """The row's recipe, or None where vllm-omni's own build should make its prompt."""
        if not isinstance(info, dict) or "additional_information" in info:
            return None
        embed = info.get("embed")
        if isinstance(embed, dict) and "prefill" in embed:  # built at an earlier chunk
            return None
        if isinstance(info.get(BUILT), Built) or "_qwen3_tts_text_ids" in info:
            return None
        task = _first(info.get("task_type"), "CustomVoice")
        text = _first(info.get("text"), "")
        instruct = _first(info.get("instruct"), "")
        # an empty text: the talker's preprocess refuses the row before it asks for a prompt (qwen3_tts_talker.py:123)
        if (
            task not in TASKS
            or not isinstance(text, str)
            or not text
            or (isinstance(instruct, str) and instruct.strip())
        ):
            return None
        talker = self._builder._talker_config
        speaker_id: int | None = None
        speaker = ""
        if task == "CustomVoice":
            raw = info.get("speaker") or [""]
            speaker = ((raw[0] if isinstance(raw, (list, tuple)) else raw) or "").lower().strip()
            spk_ids = {k.lower(): v for k, v in (getattr(talker, "spk_id", None) or {}).items()}
            if not speaker or speaker not in spk_ids:
                return None  # vllm-omni raises its own error for the row
            speaker_id = int(spk_ids[speaker])
        language = _first(info.get("language"), "Auto")
        language_id = None
        if isinstance(language, str) and language.lower() != "auto":
            language_id = talker.codec_language_id.get(language.lower())
        if language_id is None and isinstance(language, str) and language.lower() in ("chinese", "auto"):
            # the dialect's speaker read as vllm-omni reads it (:1052-1058): the first of a list, not stripped; a bare
            # string's first letter. Not the speaker's id's spelling above: " eric " is eric there, not here
            dialect_speaker = _first(info.get("speaker"), "") if task == "CustomVoice" else None
            if isinstance(dialect_speaker, str) and dialect_speaker.strip():
                dialect = (getattr(talker, "spk_is_dialect", None) or {}).get(dialect_speaker.lower())
                if isinstance(dialect, str) and dialect:
                    language_id = talker.codec_language_id.get(dialect)
        if language_id is None:
            tags = [talker.codec_nothink_id, talker.codec_think_bos_id, talker.codec_think_eos_id]
        else:
            tags = [talker.codec_think_id, talker.codec_think_bos_id, int(language_id), talker.codec_think_eos_id]
        mode = info.get("non_streaming_mode")
        mode = (mode[0] if mode else None) if isinstance(mode, list) else mode
        non_streaming = mode if isinstance(mode, bool) else task in ("CustomVoice", "VoiceDesign")
        return Row(info, text, tuple(int(tag) for tag in tags), speaker_id, not non_streaming)

    # -------------------- the step's prompts --------------------

    def build(self, infos: Sequence[Any]) -> int:
        """Each CustomVoice or VoiceDesign row's prompt among `infos` (the step's prefill rows, their state dicts),
        left in that state under BUILT; how many were built."""
        rows = [row for row in (self.row(info) for info in infos) if row is not None]
        if not rows:
            return 0
        torch = self._torch
        builder = self._builder
        tokenized = builder.get_text_tokenizer()([self._assistant_text(row.text) for row in rows], padding=False)
        ids_lists = tokenized["input_ids"]
        if len(ids_lists) != len(rows):
            return 0
        device = builder._device()
        flat = [int(token) for ids in ids_lists for token in ids]
        pinned = device.type == "cuda"
        packed = torch.tensor(flat, dtype=torch.long, pin_memory=pinned).to(device=device, non_blocking=pinned)
        offset = 0
        for row, ids_list in zip(rows, ids_lists, strict=True):
            count = len(ids_list)
            ids = packed.narrow(0, offset, count).unsqueeze(0)  # [1, count], as the tokenizer's tensor
            offset += count
            role = tuple(int(token) for token in ids_list[:3])
            row.info[BUILT] = Built(self._prompt(ids, role, row, device))
        if not self._said:
            self._said = True
            log.info("prompt embeddings built together for a step's prompts (%s)", VARIABLE)
        return len(rows)

    def build_or_leave(self, infos: Sequence[Any]) -> int:
        """`build`, or, should it fail, every row left to vllm-omni's own build (none keeps a prompt half made), the
        failure logged: a step is never lost to this."""
        try:
            return self.build(infos)
        except Exception:
            log.exception("%s: prompts not built together; each built alone", VARIABLE)
            for info in infos:
                if isinstance(info, dict):
                    info.pop(BUILT, None)
            return 0

    def _prompt(self, ids: Any, role: tuple[int, ...], row: Row, device: Any) -> tuple[Any, Any, None, None]:
        """`build_prompt_embeds`'s result for this row (prompt_embeds_builder.py:1402-1453 for CustomVoice,
        :1455-1491 for VoiceDesign, the same but for the speaker)."""
        torch = self._torch
        builder = self._builder
        projection, embedding = builder._text_projection, builder._text_embedding
        prefix = self._prefix(ids, role, row.tags, row.speaker, device)
        if not row.streaming:
            text = projection(embedding(ids[:, 3:-5]))
            text = torch.cat([text, self._constant("eos", device)], dim=1) + self._constant("pad_codec", device)
            prompt = torch.cat([prefix, text, self._constant("pad_bos", device)], dim=1)
            trailing = builder._pad_embed(device, self._constant("eos", device).dtype)
        else:
            first = projection(embedding(ids[:, 3:4])) + self._constant("bos_codec", device)
            prompt = torch.cat([prefix, first], dim=1)
            trailing = torch.cat((projection(embedding(ids[:, 4:-5])), self._constant("eos", device)), dim=1)
        return prompt.squeeze(0), trailing.squeeze(0), None, None

    def _prefix(self, ids: Any, role: tuple[int, ...], tags: tuple[int, ...], speaker: int | None, device: Any) -> Any:
        """`torch.cat((role_embed, codec_prefix), dim=1)` (:1421-1424), made once for these role ids, codec tags
        (language) and speaker id (CustomVoice; None for VoiceDesign) with vllm-omni's own kernels on the same
        inputs."""
        key = (str(device), role, tags, speaker)
        prefix = self._prefixes.get(key)
        if prefix is None:
            torch = self._torch
            builder = self._builder
            talker = builder._talker_config
            codec_embed = builder._codec_embed
            parts = [codec_embed(builder._long_tensor(list(tags), device))]
            if speaker is not None:
                spk = codec_embed(torch.tensor([speaker], device=device, dtype=torch.long))
                parts.append(spk.view(1, 1, -1) if spk.ndim in (1, 2) else spk)
            parts.append(codec_embed(builder._long_tensor([talker.codec_pad_id, talker.codec_bos_id], device)))
            codec_input = torch.cat(parts, dim=1)
            bos, _eos = self._tts(device)
            pad = builder._pad_embed(device, bos.dtype)
            role_embed = builder._text_projection(builder._text_embedding(ids[:, :3]))
            codec_prefix = torch.cat((pad.expand(-1, codec_input.shape[1] - 2, -1), bos), dim=1)
            codec_prefix = codec_prefix + codec_input[:, :-1]
            prefix = self._prefixes[key] = torch.cat((role_embed, codec_prefix), dim=1)
        return prefix

    def _tts(self, device: Any) -> tuple[Any, Any]:
        """The projected tts bos and eos embeddings, vllm-omni's own cache of them (:1041-1042)."""
        config = self._builder._config
        projected = self._builder._projected_tokens([config.tts_bos_token_id, config.tts_eos_token_id], device)
        bos, eos = projected.chunk(2, dim=1)
        return bos, eos

    def _constant(self, name: str, device: Any) -> Any:
        """A row vllm-omni makes at every request from constants alone: the tts eos projection (`eos`), the codec
        pad's embedding (`pad_codec`, its `codec_embed(pad_ids)` is that row repeated), the tts pad plus the codec
        bos's embedding (`pad_bos`, :1439) and the codec bos's embedding (`bos_codec`, `codec_input[:, -1:]`)."""
        key = (str(device), name)
        row = self._rows.get(key)
        if row is None:
            builder = self._builder
            talker = builder._talker_config
            bos, eos = self._tts(device)
            if name == "eos":
                row = eos
            elif name == "pad_codec":
                row = builder._codec_embed(builder._long_tensor([talker.codec_pad_id], device))
            elif name == "pad_bos":
                bos_codec = builder._codec_embed(builder._long_tensor([talker.codec_bos_id], device))
                row = builder._pad_embed(device, bos.dtype) + bos_codec
            elif name == "bos_codec":
                pair = builder._codec_embed(builder._long_tensor([talker.codec_pad_id, talker.codec_bos_id], device))
                row = pair[:, -1:]
            else:
                raise KeyError(name)
            self._rows[key] = row
        return row

    # -------------------- the builder's side --------------------

    def wrap(self, build: Callable[..., Any]) -> Callable[..., Any]:
        """`build` (the builder's `build_prompt_embeds`), handing a row the prompt `build` made for it beforehand."""

        def build_prompt_embeds(*, task_type: str, info_dict: dict[str, Any]) -> Any:
            box = info_dict.pop(BUILT, None)
            built = box.take() if isinstance(box, Built) else None
            if built is not None:
                return built
            return build(task_type=task_type, info_dict=info_dict)

        build_prompt_embeds.__wrapped__ = build  # type: ignore[attr-defined]
        return build_prompt_embeds
