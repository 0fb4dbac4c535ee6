"""The service's talker for vllm-omni 0.30.0 (stage 0 of its Qwen3-TTS pipeline): vllm-omni's own
`Qwen3TTSTalkerForConditionalGeneration` with its code predictor run over a key/value cache, which the talker process
builds under the name below (registered by `model_registration.register`, a `vllm_omni.general_plugins` entry
point). The service selects it with `SPEECH_OMNI__TALKER_MODEL=service`, or with `fused` (the default) the same
predictor whose layers run in Triton kernels of the service's (`FusedCodePredictor`, `predictor_kernels.py`);
`SPEECH_OMNI__TALKER_MODEL=compiled-once` runs vllm-omni's talker and predictor unchanged but for the predictor's
compilation (`CompiledOnceCodePredictor`).

Each talker step, the code predictor (5 layers) predicts the frame's codebooks 1 to 15 one after another. vllm-omni's
runs the whole growing sequence, padded to 17 positions, through all its layers at each of the 15 steps and reads one
row (`CodePredictorWrapper.forward`, "re-prefill, no KV cache"): 15 x 17 = 255 rows a frame. This one runs each
position through the layers once, keeping every layer's keys and values in a cache of 16 slots per stream: 16 rows a
frame. At one stream both read the same weights per step, so what it saves is the recomputed attention, norms and
projections of rows already seen; with many streams batched, vllm-omni's step multiplies 17 rows per stream through
every projection (at 32 streams, 544 rows where the cache needs 32).

Sampling is vllm-omni's own (temperature, top-k, then Gumbel-max on the same uniforms, so seeded requests draw what
they would), but the top-k threshold is the (V - k + 1)-th smallest logit (`kthvalue`, a selection) rather than the
last of `topk`'s sorted k largest, the same value without the sort (0.28 ms a frame at one stream, profiled).

Numerics: the same modules do the same sums over fewer rows (the cache holds what the recomputation would produce for
each earlier position), so codes agree in float32 (exactly, on the CPU; on a GPU the GEMMs' and attention kernels'
rounding depends on their shapes); in bfloat16, as vllm-omni's own module notes, a frame's codes can part after the
first code that rounds differently (a draw from the same distribution, not another one).

The talker builds vllm-omni's predictor as it always does, and the service's talker makes it this class in place
(`__class__`): this class adds no state of its own at construction, so nothing is built twice and the talker's batch
buckets, already set on it, stay.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from vllm.config import VllmConfig
from vllm_omni.model_executor.models.qwen3_tts.prompt_embeds_builder import build_assistant_text
from vllm_omni.model_executor.models.qwen3_tts.qwen3_tts_code_predictor_vllm import (
    Qwen3TTSTalkerCodePredictorForConditionalGenerationVLLM,
)
from vllm_omni.model_executor.models.qwen3_tts.qwen3_tts_talker import Qwen3TTSTalkerForConditionalGeneration
from vllm_omni.platforms import current_omni_platform

from app.engines.omni.stage_plugins import lever_switch, predictor_kernels, prompt_batch

log = logging.getLogger("vllm.speech.talker")  # under vLLM's logger, whose handler the stage process has


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """RoPE's rotation of a head's two halves, (a, b) -> (-b, a), as the predictor's attention applies it."""
    first, second = x.chunk(2, dim=-1)
    return torch.cat((-second, first), dim=-1)


def top_k_threshold(scores: torch.Tensor, top_k: int) -> torch.Tensor:
    """Each row's k-th largest score ([rows, 1], float32), found as its (V - k + 1)-th smallest: a selection, not a
    sort. Every score at least this large survives top-k, ties included, as with `topk(k).values[:, -1:]`. Selected
    in float32, which holds every bfloat16 and float16 value exactly (CUDA's kthvalue has had no bfloat16 kernel)."""
    return scores.float().kthvalue(scores.shape[-1] - top_k + 1, dim=-1, keepdim=True).values


def mark_batch_dynamic(x: torch.Tensor, at: torch.Tensor, keys: torch.Tensor, values: torch.Tensor) -> None:
    """Compile `_position` once for every batch above 1 rather than once per batch bucket: the batch is the one size
    that varies between its calls (the first dimension of `x` and `at`, the second of the cache's keys and values).
    Static, 11 buckets took 231 s to warm up on an H200 against vllm-omni's predictor's 97 s
    (benchmarks/gpu/2026-11-29-h200-omni-talker-ab/); each bucket still gets its own CUDA graph from the runner."""
    for tensor, dim in ((x, 0), (at, 0), (keys, 1), (values, 1)):
        torch._dynamo.mark_dynamic(tensor, dim)


def eager_on_recompile(compiled: Callable[..., Any]) -> Callable[..., Any]:
    """`compiled` as it serves once warmed up: a call its graphs' guards refuse runs eagerly instead of compiling
    again. Compiled code guards on torch's thread count, which vLLM lowers once the talker has started
    (vllm/v1/worker/gpu_worker.py, `set_torch_threads_for_runtime`): after that, a call that is not a CUDA graph's
    replay (a batch above the captured sizes, graphs off) would compile both graphs again on the serving thread.
    vllm-omni's predictor, a graph per bucket past dynamo's recompile limit, runs eagerly there too."""

    def call(*args: Any, **kwargs: Any) -> Any:
        with torch.compiler.set_stance("eager_on_recompile"):
            return compiled(*args, **kwargs)

    call.__wrapped__ = compiled  # type: ignore[attr-defined]  # the compiled code alone, for a check that must run it
    return call


def inductor_available() -> bool:
    """Whether this platform compiles with Inductor (vllm-omni's own test for its predictor); a platform that does
    not say (vllm-omni's stand-in without a GPU) runs eagerly."""
    try:
        return bool(current_omni_platform.supports_torch_inductor()) and not current_omni_platform.is_xpu()
    except NotImplementedError:
        return False


class SpeechCodePredictor(Qwen3TTSTalkerCodePredictorForConditionalGenerationVLLM):
    """vllm-omni's Qwen3-TTS code predictor (its modules, weights and sampling) run one position at a time over a
    key/value cache. What it does not cover (sampling modes other than the talker's per-call one, the projection
    buffer some callers want back, float16 on a GPU, NPUs, top-p) is vllm-omni's own, set up and run as vllm-omni's."""

    def _covers(self) -> bool:
        """Whether this model's set-up, not vllm-omni's, serves: what cannot change between calls."""
        parameter = next(self.model.parameters())
        return not (
            self._wrapper_config.sampling_mode != "per_call"
            or self._wrapper_config.return_proj_buf
            or current_omni_platform.is_npu()
            or (parameter.dtype == torch.float16 and parameter.device.type != "cpu")  # vllm-omni's: float32 inside
        )

    def _setup_compile(self) -> None:
        """What vllm-omni's sets up (the weights' dtype, the modules in lists, the batch buckets), with one compiled
        function: a position through every layer, compiled for a batch of 1 and for any larger batch, warmed up at
        each bucket so that serving never compiles. Where this model does not serve, vllm-omni's own set-up."""
        if self._compiled_model_fwd is not None:
            return
        if not self._covers():
            super()._setup_compile()
            return
        parameter = next(self.model.parameters())
        self._model_dtype = parameter.dtype
        self._lm_heads_list = list(self.lm_head)
        self._codec_embeds_list = list(self.model.codec_embedding)
        self._bucket_sizes = self._batch_bucket_sizes()
        self._compiled_position, compiled = self._serving_position()
        device = parameter.device
        limit = max(torch._dynamo.config.cache_size_limit, len(self._bucket_sizes))
        # within forward's inference mode, as vllm-omni's warm-up: compiled code guards on it
        with torch._dynamo.config.patch(cache_size_limit=limit):
            for bsz in sorted(self._bucket_sizes, reverse=True):
                x = torch.zeros(bsz, 1, self._cp_hidden, dtype=self._model_dtype, device=device)
                keys, values = self._cache(bsz, device)
                for position in range(2):
                    at = torch.full((bsz, 1), position, dtype=torch.long, device=device)
                    if compiled and bsz > 1:  # torch specializes a batch of 1: its own graph, the only other one
                        mark_batch_dynamic(x, at, keys, values)
                    self._compiled_position(x, at, keys, values)
        self._synchronize_warmup(device)
        if compiled:
            self._compiled_position = eager_on_recompile(self._compiled_position)
        # last: it marks the set-up done, so a warm-up that failed is set up again at the next call
        self._compiled_model_fwd = self.model.forward  # vllm-omni's forward for a call with top-p: eager
        log.info("%s: warmed up for batches %s", self.serving, self._bucket_sizes)

    serving = "code predictor over a key/value cache"

    def _serving_position(self) -> tuple[Callable[..., torch.Tensor], bool]:
        """What runs a position while it serves, and whether torch compiles it: `_position`, compiled with Inductor
        where the platform compiles (as vllm-omni's predictor is)."""
        if not inductor_available():
            return self._position, False
        # vllm-omni's options for the same layers: its RMSNorm and RoPE lose float32 precision in epilogue fusions
        return torch.compile(self._position, options={"epilogue_fusion": False}), True

    def _cache(self, bsz: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """Zeroed keys and values [layers, batch, kv heads, 16 slots, head dim]: slots not yet written are masked
        out, and zeros (not whatever the memory held) keep a masked slot from turning the softmax into NaN."""
        attention = self.model.layers[0].self_attn
        shape = (len(self.model.layers), bsz, attention.num_kv_heads, self._num_groups, attention.head_dim)
        return (
            torch.zeros(shape, dtype=self._model_dtype, device=device),
            torch.zeros(shape, dtype=self._model_dtype, device=device),
        )

    def _position(self, x: torch.Tensor, at: torch.Tensor, keys: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        """One position per stream (`x` [batch, 1, hidden] at `at` [batch, 1]) through every layer and the final
        norm, its keys and values written into the cache's slot `at`, attending to the slots up to it."""
        model = self.model
        bsz = x.shape[0]
        cos, sin = model.rotary_emb(x, at)
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        slots = torch.arange(keys.shape[3], device=x.device)
        visible = (slots.view(1, 1, 1, -1) <= at.view(bsz, 1, 1, 1)).expand(bsz, 1, 1, -1)
        hidden = x
        for index, layer in enumerate(model.layers):
            attention = layer.self_attn
            heads, kv_heads, head_dim = attention.num_heads, attention.num_kv_heads, attention.head_dim
            residual = hidden
            q, k, v = attention._split_qkv(attention.qkv_proj(layer.input_layernorm(hidden)))
            q = attention.q_norm(q.reshape(bsz, 1, heads, head_dim)).transpose(1, 2)
            k = attention.k_norm(k.reshape(bsz, 1, kv_heads, head_dim)).transpose(1, 2)
            v = v.reshape(bsz, 1, kv_heads, head_dim).transpose(1, 2)
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
            slot = at.view(bsz, 1, 1, 1).expand(bsz, kv_heads, 1, head_dim)
            keys[index].scatter_(2, slot, k)
            values[index].scatter_(2, slot, v)
            out = F.scaled_dot_product_attention(
                q, keys[index], values[index], attn_mask=visible, scale=attention.scaling, enable_gqa=attention.is_gqa
            )
            hidden = residual + attention.o_proj(out.transpose(1, 2).reshape(bsz, 1, heads * head_dim))
            hidden = hidden + layer.mlp(layer.post_attention_layernorm(hidden))
        return model.norm(hidden)

    @torch.inference_mode()
    def forward(
        self,
        layer0_code: torch.Tensor,
        layer0_embed: torch.Tensor,
        last_talker_hidden: torch.Tensor,
        do_sample: bool = True,
        temperature: float = 0.9,
        top_k: int = 50,
        top_p: float = 1.0,
        generator: torch.Generator | None = None,
        generators: Sequence[torch.Generator | None] | None = None,
        sample_uniforms: torch.Tensor | None = None,
    ) -> Any:
        """Codebooks 0 (given) to 15 of each stream's frame ([batch, 16]), as vllm-omni's forward returns them."""
        self._setup_compile()
        dtype = self._model_dtype
        use_sampling = do_sample and temperature > 0
        if not self._covers() or (use_sampling and top_p != 1.0):  # top-p: vllm-omni's says it cannot, naming it
            return super().forward(
                layer0_code, layer0_embed, last_talker_hidden, do_sample, temperature, top_k, top_p, generator,
                generators, sample_uniforms,
            )  # fmt: skip
        bsz = int(layer0_code.shape[0])
        groups = self._num_groups
        vocab = int(self.config.vocab_size)
        if generators is not None and len(generators) != bsz:
            raise ValueError(f"generators must have one entry per row: got {len(generators)} for batch {bsz}")
        if sample_uniforms is not None and tuple(sample_uniforms.shape) != (bsz, groups - 1, vocab):
            raise ValueError(
                f"sample_uniforms must have shape {(bsz, groups - 1, vocab)}, got {tuple(sample_uniforms.shape)}"
            )
        device = layer0_code.device
        padded = self._padded_bsz(bsz)  # the warmed-up batch this one is computed as, its extra rows zeros
        projection = self.small_to_mtp_projection
        inverse_temperature = 1.0 / max(temperature, 1e-6)
        keys, values = self._cache(padded, device)
        x = torch.zeros(padded, 1, self._cp_hidden, dtype=dtype, device=device)
        codes = torch.empty(bsz, groups, dtype=torch.long, device=device)
        codes[:, 0] = layer0_code.reshape(bsz)
        at = torch.zeros(padded, 1, dtype=torch.long, device=device)
        # position 0 holds the talker's hidden state, position 1 codebook 0's embedding; the hidden state at
        # position p predicts codebook p, whose embedding goes in at position p + 1
        talker_input = projection(last_talker_hidden.reshape(bsz, 1, -1).to(dtype))
        layer0_input = projection(layer0_embed.reshape(bsz, 1, -1).to(dtype))
        hidden = self._first_positions(x, at, keys, values, talker_input, layer0_input)
        drawn_by = generators if generators is not None else generator
        sampling = Sampling(use_sampling, inverse_temperature, top_k, sample_uniforms, drawn_by)
        self._next_code(1, hidden, codes, x, sampling)
        for step in range(2, groups):
            at.fill_(step)
            self._next_code(step, self._compiled_position(x, at, keys, values), codes, x, sampling)
        return codes

    def _first_positions(
        self,
        x: torch.Tensor,
        at: torch.Tensor,
        keys: torch.Tensor,
        values: torch.Tensor,
        talker_input: torch.Tensor,
        layer0_input: torch.Tensor,
    ) -> torch.Tensor:
        """Positions 0 (`talker_input`, [batch, 1, hidden]) and 1 (`layer0_input`) through the layers, one after the
        other in `x` ([padded batch, 1, hidden], zeros past the batch), `at` ([padded batch, 1], zeros) as each
        position's: the hidden state at position 1 ([padded batch, 1, hidden]), which predicts codebook 1. `x` and
        `at` are left to the next position to fill."""
        bsz = int(talker_input.shape[0])
        x[:bsz] = talker_input
        self._compiled_position(x, at, keys, values)
        x[:bsz] = layer0_input
        at.fill_(1)
        return self._compiled_position(x, at, keys, values)

    def _next_code(
        self, step: int, hidden: torch.Tensor, codes: torch.Tensor, x: torch.Tensor, sampling: Sampling
    ) -> None:
        """Codebook `step`'s code for each stream (`codes[:, step]`) from the position's `hidden` state, and, but for
        the last codebook, its embedding into `x`, the next position's input."""
        bsz = int(codes.shape[0])
        logits = self._lm_heads_list[step - 1](hidden[:bsz, 0, :])
        vocab = int(logits.shape[-1])
        if sampling.draw:
            scores = logits * sampling.inverse_temperature
            if 0 < sampling.top_k < vocab:
                scores = scores.masked_fill(scores < top_k_threshold(scores, sampling.top_k), float("-inf"))
            uniforms = sampling.uniforms[:, step - 1, :] if sampling.uniforms is not None else None
            code = self._sample_codes_gumbel(scores, generator=sampling.generator, uniforms=uniforms)
        else:
            code = logits.argmax(dim=-1, keepdim=True)
        codes[:, step] = code.reshape(bsz)
        if step < self._num_groups - 1:
            self._embed_next(step, code, x)

    def _embed_next(self, step: int, code: torch.Tensor, x: torch.Tensor) -> None:
        """Codebook `step`'s `code` ([batch, 1]) embedded and projected into `x`, the next position's input."""
        bsz = int(code.shape[0])
        x[:bsz] = self.small_to_mtp_projection(self._codec_embeds_list[step - 1](code).reshape(bsz, 1, -1))


@dataclass(frozen=True)
class Sampling:
    """One call's sampling, as `SpeechCodePredictor.forward` was given it."""

    draw: bool  # sampled (temperature, top-k, Gumbel-max), else the largest logit
    inverse_temperature: float
    top_k: int
    uniforms: torch.Tensor | None  # [batch, groups - 1, vocab]: each step's Gumbel noise, given
    generator: Any  # where no uniforms are given: the generator(s) they are drawn from


# the most rows (both positions' of every stream) the fused predictor takes positions 0 and 1 in one pass with: the
# row blocks its kernels' tiles were measured at (more: two passes, as the service's predictor takes them)
TWO_POSITIONS_ROWS = 32


class FusedCodePredictor(SpeechCodePredictor):
    """`SpeechCodePredictor` with each position through the layers in Triton launches of its own
    (`predictor_kernels`: five a layer, where the compiled layer runs eleven) and each codebook's lm head, draw and
    next embedding in two, nothing compiled by torch: its warm-up builds the kernels, which Triton keeps on disk.
    Where the kernels do not cover the model (a bias, a width the blocks do not divide, another dtype, not CUDA),
    `SpeechCodePredictor`'s compiled position; where a draw has no uniforms given (they come from generators) or
    the embeddings need a projection, that step as `SpeechCodePredictor` takes it."""

    _fused: predictor_kernels.Predictor | None = None

    @property
    def serving(self) -> str:  # type: ignore[override]
        plain = SpeechCodePredictor.serving  # what it serves where the kernels do not cover the model
        if self._fused is None:
            return plain
        launch = self._fused.launch
        return f"{plain} in fused kernels ({launch.kernels}{', dependent launches' if launch.dependent else ''})"

    def _serving_position(self) -> tuple[Callable[..., torch.Tensor], bool]:
        self._fused = predictor_kernels.Predictor.of(self.model)
        if self._fused is None:
            return super()._serving_position()
        return self._fused.position, False

    def _setup_compile(self) -> None:
        """`SpeechCodePredictor`'s set-up, then a frame drawn and one taken greedily at every bucket, so that every
        kernel a CUDA graph's capture launches is built before it (Triton builds one the first time it is launched
        with a new specialization, and a build cannot happen inside a capture)."""
        if self._compiled_model_fwd is not None:
            return
        super()._setup_compile()
        if self._fused is None:
            return
        parameter = next(self.model.parameters())
        device, groups, vocab = parameter.device, self._num_groups, int(self.config.vocab_size)
        talker_hidden = int(self.model.codec_embedding[0].embedding_dim)
        try:
            for bsz in self._bucket_sizes:
                given = torch.zeros(bsz, 1, talker_hidden, dtype=self._model_dtype, device=device)
                inputs = {
                    "layer0_code": torch.zeros(bsz, 1, dtype=torch.long, device=device),
                    "layer0_embed": given,
                    "last_talker_hidden": given,
                }
                uniforms = torch.full((bsz, groups - 1, vocab), 0.5, dtype=torch.float32, device=device)
                self.forward(**inputs, sample_uniforms=uniforms)
                self.forward(**inputs, do_sample=False)
            self._synchronize_warmup(device)
        except BaseException:
            self._compiled_model_fwd = None  # not set up: again at the next call
            raise

    def _first_positions(
        self,
        x: torch.Tensor,
        at: torch.Tensor,
        keys: torch.Tensor,
        values: torch.Tensor,
        talker_input: torch.Tensor,
        layer0_input: torch.Tensor,
    ) -> torch.Tensor:
        """Positions 0 and 1 in one pass of the kernels (each launch over both positions' rows: a frame's 16 passes
        become 15, as sglang-omni's predictor runs them), where both positions' rows fit `TWO_POSITIONS_ROWS`;
        otherwise one after the other. `x` is left as it was given (the next position's input is written there)."""
        padded = int(x.shape[0])
        if self._fused is None or 2 * padded > TWO_POSITIONS_ROWS:
            return super()._first_positions(x, at, keys, values, talker_input, layer0_input)
        bsz = int(talker_input.shape[0])
        both = torch.zeros(2 * padded, 1, x.shape[-1], dtype=x.dtype, device=x.device)
        both[:bsz] = talker_input
        both[padded : padded + bsz] = layer0_input
        return self._fused.position(both, at, keys, values, positions=2)[padded:]

    def _next_code(
        self, step: int, hidden: torch.Tensor, codes: torch.Tensor, x: torch.Tensor, sampling: Sampling
    ) -> None:
        head = self._lm_heads_list[step - 1].weight
        given = sampling.uniforms
        if (
            self._fused is None
            or not predictor_kernels.head_fits(head)
            or (sampling.draw and (given is None or given.dtype != torch.float32 or given.stride(-1) != 1))
        ):
            return super()._next_code(step, hidden, codes, x, sampling)
        last = step == self._num_groups - 1
        embeds = not last and isinstance(self.small_to_mtp_projection, torch.nn.Identity)
        predictor_kernels.next_code(
            hidden, head, codes, step,
            self._codec_embeds_list[step - 1].weight if embeds else None, x, sampling.inverse_temperature,
            sampling.top_k, given[:, step - 1, :] if sampling.draw else None, self._fused.launch,
        )  # fmt: skip
        if not last and not embeds:
            self._embed_next(step, codes[:, step : step + 1], x)


class CompiledOnceCodePredictor(Qwen3TTSTalkerCodePredictorForConditionalGenerationVLLM):
    """vllm-omni's Qwen3-TTS code predictor unchanged (its maths, buffers, batch buckets and warm-up), compiled for a
    batch of 1 and for any larger batch instead of once per bucket: its start's largest phase (97 of 288 s of a cold
    start on an H200, 11 buckets; benchmarks/gpu/2026-11-29-h200-omni-talker-ab/)."""

    def _setup_compile(self) -> None:
        """vllm-omni's set-up (`CodePredictorWrapper._setup_compile`) where it compiles with Inductor and captures no
        graphs of its own (CUDA; the runner captures the talker's whole step), with torch's automatic dynamic shapes
        in place of `dynamic=False`: its warm-up goes through the buckets smallest first, so a batch of 1 compiles a
        graph, a batch of 2 compiles one with the batch symbolic, and every larger bucket runs that one. Elsewhere
        (prefix re-prefill, NPUs, no Inductor) vllm-omni's own."""
        if self._compiled_model_fwd is not None:
            return
        if not inductor_available() or self._prefix_reprefill_enabled or self._wrapper_config.use_cuda_graphs:
            super()._setup_compile()
            return
        self._model_dtype = next(self.model.parameters()).dtype
        self._lm_heads_list = list(self.lm_head)
        self._codec_embeds_list = list(self.model.codec_embedding)
        self._compiled_model_fwd = torch.compile(self.model.forward, options={"epilogue_fusion": False})
        try:  # the warm-up calls it by that name
            with torch._dynamo.config.patch(cache_size_limit=self._compile_cache_size_limit()):
                self._warmup_buckets()
        except BaseException:
            self._compiled_model_fwd = None  # not set up: again at the next call
            raise
        self._compiled_model_fwd = eager_on_recompile(self._compiled_model_fwd)
        log.info("vllm-omni's code predictor compiled once: warmed up for batches %s", self._bucket_sizes)


class SpeechQwen3TTSTalker(Qwen3TTSTalkerForConditionalGeneration):
    """vllm-omni's Qwen3-TTS talker with `SpeechCodePredictor` as its code predictor: the one vllm-omni builds (under
    the predictor's own vLLM config, with the talker's batch buckets) made that class before any weight is loaded;
    its parameters keep their names, so the checkpoint's `talker.code_predictor.*` load into it."""

    predictor_class: type[Qwen3TTSTalkerCodePredictorForConditionalGenerationVLLM] = SpeechCodePredictor

    # by name, as the class it extends takes them: vLLM builds a model with its config and prefix only where the
    # signature of its __init__ names both (vllm/model_executor/model_loader/utils.py, initialize_model)
    def __init__(self, *, vllm_config: VllmConfig, prefix: str = "") -> None:
        super().__init__(vllm_config=vllm_config, prefix=prefix)
        if type(self.code_predictor) is not Qwen3TTSTalkerCodePredictorForConditionalGenerationVLLM:
            raise TypeError(f"the talker built a {type(self.code_predictor).__name__}, not vllm-omni's code predictor")
        self.code_predictor.__class__ = self.predictor_class  # adds methods only: nothing built twice
        # where a benchmark switches the lever below in one start
        self._lever_switch = lever_switch.for_process(os.environ)
        # the lever below answers a hook only vllm-omni's second model runner calls: its first does not call
        # preprocess_batch_mrv2
        second_runner = bool(getattr(self, "_use_v2_model_runner", False))
        if prompt_batch.enabled(os.environ) and not second_runner:
            log.warning("%s: only with vllm-omni's second model runner; off", prompt_batch.VARIABLE)
        # a step's CustomVoice and VoiceDesign prompts built together before its rows' preprocessing
        self._prompt_batch: prompt_batch.PromptBatch | None = None
        if second_runner and prompt_batch.enabled(os.environ):
            builder = self._prompt_builder
            self._prompt_batch = prompt_batch.PromptBatch(builder, build_assistant_text, torch)
            builder.build_prompt_embeds = self._prompt_batch.wrap(builder.build_prompt_embeds)

    @torch.inference_mode()
    def preprocess_batch_mrv2(self, *, req_infos: list[dict[str, Any]], device: torch.device) -> None:
        """vllm-omni's, for the prefill rows of a step (its runner calls it once with all of them, before any row's
        `preprocess`); with SPEECH_OMNI__PROMPT_BATCH, then the CustomVoice and VoiceDesign prompts among them built
        together (`prompt_batch.py`). Should that fail, each row is left to vllm-omni's own build."""
        super().preprocess_batch_mrv2(req_infos=req_infos, device=device)
        if self._prompt_batch is not None and self._lever_switch.on("prompt_batch"):
            self._prompt_batch.build_or_leave(req_infos)


class SpeechQwen3TTSTalkerFused(SpeechQwen3TTSTalker):
    """vllm-omni's Qwen3-TTS talker with `FusedCodePredictor` as its code predictor."""

    predictor_class = FusedCodePredictor


class SpeechQwen3TTSTalkerCompiledOnce(SpeechQwen3TTSTalker):
    """vllm-omni's Qwen3-TTS talker and code predictor, the predictor compiled once (`CompiledOnceCodePredictor`)."""

    predictor_class = CompiledOnceCodePredictor
