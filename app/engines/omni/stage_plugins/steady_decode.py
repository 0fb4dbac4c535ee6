"""The talker's per-row Python of a steady decode step, batched (`SPEECH_OMNI__STEADY_DECODE`).

Each talker decode step, vllm-omni 0.30's model runner calls two of the talker's hooks with one dict of state per
request: `preprocess_decode_batch_mrv2` before the forward (`worker_v2/model_states/omni_model_state.py:627`) and
`make_omni_output` after it (`omni_model_state.py:1211`). Qwen3-TTS's answer each time is a loop of tens of Python
and torch calls per request (`model_executor/models/qwen3_tts/qwen3_tts_talker.py:1101-1177` and `:734-802`): each
row's hidden state and text step moved, reshaped and gathered one at a time, each row's frame flag indexed out of the
batch's, and after the forward each row's flag cast to int8 (a kernel a row on a GPU). Timed on a 2-core CPU with the
pinned sources run on CPU tensors, at 32 rows, the two hooks took 5 and 5 µs a row at best (9 and 9 at the median);
these functions 2 and 1 (3 and 2): 7 to 13 µs a row saved, before the GPU's launch a row (deploy/gpu/
steady_decode_bench.py times both on a GPU host).

In a steady decode step (every row past its prompt, its last hidden state and its frame flag on the talker's device,
its text either being fed one position a step or used up, nothing left to publish), the same results come from one
operation over the batch where vllm-omni makes one per row: the hidden states stacked, the text steps gathered in one
`cat` (the pad embedding for each row whose text is used up), the frame flags unbound and, after the forward, stacked
and cast at once. The tensors are the same (values, dtypes, shapes, devices; each one new where vllm-omni's is) and so
are the per-request updates; a row these functions do not recognise as steady sends the whole batch back to
vllm-omni's own hook (they return a short reason instead of a result, and make no change before they know).

Plain Python at import (the server reads VARIABLE): the calls are given torch (`torch`), so a stand-in can run them.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

VARIABLE = "SPEECH_OMNI_STEADY_DECODE"

# vllm-omni 0.30's (qwen3_tts_talker.py:46-47): a trailing text is compacted once this many of its positions are fed
# and at least half of it is; the flag that a request's reference codes have gone to code2wav
TRAILING_TEXT_COMPACT_MIN_FRAMES = 64
REF_CODES_PUBLISHED = "_qwen3_tts_ref_codes_published"

DecodeBatch = tuple[Any, Any, Any, Any, list[dict[str, Any]]]


def enabled(environ: Mapping[str, str]) -> bool:
    return environ.get(VARIABLE, "") == "1"


def decode_batch(
    torch: Any,
    *,
    input_ids: Any,
    input_embeds: Any,
    req_infos: Sequence[Mapping[str, Any]],
    vocab_size: int,
    dtype: Any,
    pad_embed: Any,
) -> DecodeBatch | str:
    """What vllm-omni's `preprocess_decode_batch` (qwen3_tts_talker.py:1071-1188) returns for these decode rows
    (`input_ids` one a row, `input_embeds` the runner's for them), or why these rows are not all steady.
    `vocab_size`, `dtype` and `pad_embed` are the talker's `_codebook_vocab_size`, `_embedding_dtype` and
    `_tts_pad_embed`."""
    count = len(req_infos)
    ids = input_ids.reshape(-1)
    if input_embeds is None or not count or int(ids.numel()) != count:
        return "no embeddings given, or not one id a row"
    tensor = torch.Tensor
    lasts: list[Any] = []
    text_rows: list[tuple[int, Any, int]] = []  # (row, trailing text, offset) of the rows still fed text
    offsets: list[int] = []
    streaming: list[bool] = []
    for info in req_infos:
        if "additional_information" in info:  # vllm-omni merges a nested copy first (:1102-1107)
            return "nested additional_information"
        states = info.get("hidden_states")
        meta = info.get("meta")
        if type(states) is not dict or type(meta) is not dict:
            return "no hidden_states or meta"
        tail = states.get("trailing_text")
        last = states.get("last")
        # a trailing text (a tensor, used up or not) is the text conditioning vllm-omni checks for (:1113,
        # `_has_tts_text_conditioning`) and set at every request's first prefill; `last` is written after every forward
        if not isinstance(tail, tensor) or tail.ndim != 2 or not isinstance(last, tensor):
            return "no trailing text or last hidden state"
        codec_streaming = meta.get("codec_streaming")
        offset = meta.get("talker_text_offset", 0)
        if type(codec_streaming) is not bool or type(offset) is not int or offset < 0:
            return "codec_streaming or talker_text_offset not as the prefill wrote them"
        if offset < tail.shape[0]:
            text_rows.append((len(lasts), tail, offset))
        elif offset:  # vllm-omni restarts the offset once the text is used up (:1144-1146)
            return "an offset past a used-up text"
        lasts.append(last)
        offsets.append(offset)
        streaming.append(codec_streaming)

    device = ids.device
    pad = pad_embed.to(device=device, dtype=dtype).reshape(1, -1)
    try:
        past_hidden = torch.stack(lasts)
    except RuntimeError:
        return "last hidden states of different shapes or devices"
    if past_hidden.device != device or past_hidden.dtype != dtype:
        return "last hidden states not on the talker's device in its embedding dtype"
    past_hidden = past_hidden.reshape(count, -1)

    steps = [pad] * count
    updates: list[dict[str, Any]] = [{} for _ in range(count)]
    for row, tail, offset in text_rows:
        steps[row] = tail[offset : offset + 1]
        following = offset + 1
        length = int(tail.shape[0])
        if following >= length or (following >= TRAILING_TEXT_COMPACT_MIN_FRAMES and following * 2 >= length):
            if following >= length:
                rest = torch.empty((0, tail.shape[1]), device=tail.device, dtype=tail.dtype)
            else:
                rest = tail[following:].contiguous()
            following = 0
            updates[row]["hidden_states"] = {"trailing_text": rest.detach()}
        offsets[row] = following
    try:
        text_step = torch.cat(steps, dim=0)
    except RuntimeError:
        return "trailing texts of another width or device"
    if text_step.device != device or text_step.dtype != dtype or text_step.shape[1] != pad.shape[1]:
        # a text row of another dtype would have been cast alone; the update made above is dropped with the result
        return "trailing texts not on the talker's device in its embedding dtype"

    valid = ((ids >= 0) & (ids < vocab_size)).unbind(0)
    for row, update in enumerate(updates):
        meta_update = {
            "talker_text_offset": offsets[row],
            "codec_streaming": streaming[row],
            "codec_frame_valid": valid[row],
        }
        if update:  # vllm-omni's order: meta first, then the trailing text
            updates[row] = {"meta": meta_update, **update}
        else:
            update["meta"] = meta_update
    embeds = input_embeds.to(device=device, dtype=dtype).reshape(count, -1)
    return ids, embeds, past_hidden, text_step, updates


def async_chunk_outputs(torch: Any, info_dicts: Sequence[Any]) -> dict[str, Any] | str:
    """The multimodal outputs vllm-omni's `make_omni_output` (qwen3_tts_talker.py:713-864) makes of these rows'
    state under `async_chunk` (where it reads no reference-code length nor streaming flag), or why these rows are not
    all steady: each row's codes (one frame) and frame flag (a boolean tensor of one element) gathered, and no
    reference codes left to publish."""
    if not info_dicts:
        return "no rows"
    tensor = torch.Tensor
    frames: list[Any] = []
    flags: list[Any] = []
    for info in info_dicts:
        if type(info) is not dict:
            return "a row without state"
        codes = info.get("codes")
        meta = info.get("meta")
        if type(codes) is not dict or type(meta) is not dict:
            return "no codes or meta"
        frame = codes.get("audio")
        flag = meta.get("codec_frame_valid")
        if not isinstance(frame, tensor) or not isinstance(flag, tensor) or frame.ndim == 0 or frame.shape[0] != 1:
            return "not one frame with its flag"
        reference = codes.get("ref")
        if reference is not None and not meta.get(REF_CODES_PUBLISHED):
            if isinstance(reference, tensor) and reference.numel() > 0:  # published (and marked) by vllm-omni's
                return "reference codes to publish"
        frames.append(frame)
        flags.append(flag)
    try:
        flag_rows = torch.stack(flags)
    except RuntimeError:
        return "frame flags of different shapes or devices"
    if flag_rows.dtype != torch.bool or flag_rows.numel() != len(flags):
        return "frame flags not one boolean each"
    try:
        audio_codes = torch.cat(frames, dim=0)
    except RuntimeError:
        return "frames of different widths or devices"
    if flag_rows.device != audio_codes.device:
        return "frame flags not on the codes' device"
    frame_valid = flag_rows.reshape(-1).to(dtype=torch.int8)
    return {"codes": {"audio": audio_codes}, "meta": {"codec_frame_valid": frame_valid[: int(audio_codes.shape[0])]}}


class Tally:
    """Which steps each hook made over the batch, said in the talker's log: the first one (proof that it runs), the
    first step each reason left to vllm-omni's own hook, and every `every` calls how many of them it batched."""

    def __init__(self, log: logging.Logger, every: int = 10_000) -> None:
        self._log = log
        self._every = every
        self._calls: dict[str, list[int]] = {}  # hook -> [calls, batched]
        self._reasons: set[tuple[str, str]] = set()

    def took(self, hook: str, result: object, rows: int) -> bool:
        """Whether `result` (a hook's batched result, or the reason it has none) is taken; counted and said."""
        batched = not isinstance(result, str)
        counts = self._calls.setdefault(hook, [0, 0])
        counts[0] += 1
        if batched:
            counts[1] += 1
            if counts[1] == 1:
                self._log.info("%s: the %s of a steady decode step made over its %d rows", VARIABLE, hook, rows)
        elif (hook, result) not in self._reasons:
            self._reasons.add((hook, result))  # type: ignore[arg-type]
            self._log.info("%s: %s left to vllm-omni's own, first for: %s (%d rows)", VARIABLE, hook, result, rows)
        if counts[0] % self._every == 0:
            self._log.info("%s: %s made over the batch in %d of %d steps", VARIABLE, hook, counts[1], counts[0])
        return batched
