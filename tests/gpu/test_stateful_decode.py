"""vllm-omni 0.30's stateful code2wav: a stream of windows decodes to the waveform of one call over the same codes.

With `async_chunk: true`, code2wav keeps each request's decoder state (the codebook sums, the pre-convolution's
output and the sliding-window transformer's inputs) between windows, and each window from the talker carries only
its new frames (stage_input_processors/qwen3_tts.py:353-356). This test decodes the same random codes
- in one call: a `Qwen3TTSCode2Wav` loaded with `async_chunk` off and `decode_chunk_frames` at least the stream's
  length, so that `forward` decodes the whole utterance in one decoder pass (qwen3_tts_code2wav.py:491-498 ->
  `batched_chunked_decode` without caches -> `_batched_chunked_decode` -> the decoder's `_forward_exact`), and
- as a stream: a `Qwen3TTSCode2Wav` loaded with `async_chunk` on from a profile's connector settings, its `forward`
  called once per step with that step's windows, exactly the arguments the generation model runner passes
  (worker/gpu_generation_model_runner.py:315-317: codec ids, `seq_token_counts`, `request_ids`, and per request
  `{"codes": {"audio": ...}, "meta": {"request_id", "finished"}}` as the connector delivers it). `forward` itself is
  the pipeline's path: it keys the per-request state by request id, groups the step's windows by phase and calls
  `batched_chunked_decode` with the states (qwen3_tts_code2wav.py:398-424, 491-498), eagerly or through the decoder's
  segmented CUDA graphs (segmented_graph_wrapper.py `batched_chunked_decode_with_cudagraph`), and drops a state when
  its request's last window is done (qwen3_tts_code2wav.py:530-537). Outside the engine there is no vLLM forward
  context, which `forward` reads only to split a batch by micro-batch slices when `seq_token_counts` is missing
  (qwen3_tts_code2wav.py:145-158); the test passes `seq_token_counts` as the runner does.

Both instances are built as vLLM builds code2wav (default dtype and device set around the constructor) and load
their weights through code2wav's own `load_weights` (vLLM's DefaultModelLoader on `speech_tokenizer/`, then dtype,
SnakeBeta caches, chunk settings and, unless eager, the decoder's CUDA graphs): weights written in the checkpoint's
format by deploy/gpu/codec_weights.py with its `signal` fill (vLLM's dummy fill leaves a waveform that does not
depend on the codes, so any two decodes would agree), or a real checkpoint's, given by SPEECH_GPU_MODEL_DIR.

Windows follow a profile's connector settings: ours (deploy/vllm-omni/customvoice.yaml: its ramp, then its steady
windows) and vllm-omni's own default (vllm_omni/deploy/qwen3_tts.yaml: 1 frame, then 25). Two requests run at once,
the second a step behind, so that steps mix first windows with later ones as under load.

What is exact and what is not, by 0.30's design: the codebooks and the pre-convolution are exact (2 frames of
convolution context are kept), and so is the convolution stack after the transformer (each window is decoded with
12 frames of hidden context, `_DOWNSTREAM_CONTEXT_FRAME`, more than its receptive field of about 9.3 frames). The
transformer (8 layers, sliding window of 72 frames) sees the whole stream while fewer than 72 frames have been
decoded. From the first window that starts later on, the cache has rolled: the window is decoded from the last 72
frames before it and itself, nothing older (the first two of those frames re-convolved without their left
neighbours), while one call over the utterance lets each layer see 72 frames of the layer below, so that its
receptive field reaches 8 x 71 frames back. vllm-omni's own tests say the same
(tests/model_executor/models/qwen3_tts/test_qwen3_tts_incremental_decode.py: the stream equals one call until the
cache rolls, and a rolled window equals one call over "the truncated suffix window", on a one-layer decoder). So:
- frames decoded with the whole history: against one call over the utterance, within rounding;
- each later window: against one call over that window and the 72 frames before it, within rounding;
- those later frames against one call over the utterance: a bound on 0.30's approximation, not a rounding error
  (measured 37 dB on these random weights in float32 on a CPU, 100 frames with vllm-omni's windows); printed, and
  held to >= 20 dB, which those frames decoded without their history (8.7 dB), after another stream's (7.2 dB) or
  one frame off (-1.4 dB), measured the same way, do not reach;
- every window's audio is exactly its frames x 1920 samples, and each stream's state is gone after its last window.

Rounding thresholds (SNR over the span, the one-call waveform as reference): float32 >= 50 dB, bfloat16 >= 25 dB.
The two paths do the same arithmetic on different shapes, so they differ by rounding alone: float32 measured 80.6
dB on a CPU; on a GPU PyTorch runs float32 convolutions in TF32 by default (cuDNN, 10-bit mantissa, about 5e-4
relative per operation), as code2wav does, and bfloat16 keeps 8 bits (about 4e-3), over about 30 layers whose errors
add up (-15 dB) and which the Snake activations can amplify; 50 and 25 dB leave about 10 dB under those estimates.
For scale, the test prints the one-call decode in the dtype against a float32 one without TF32.
"""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from tests.gpu.support import (
    SAMPLES_PER_FRAME,
    WaveDiff,
    full_context_frames,
    rolled_windows,
    stream_windows,
    torch_with_vllm_omni_030,
    wave_diff,
)
from tests.support.scripts import gpu_script

ROOT = Path(__file__).resolve().parents[2]
PROFILE = ROOT / "deploy/vllm-omni/customvoice.yaml"
DEVICE = "cuda"
FRAMES = (100, 375)  # an 8-s utterance, a 30-s one
NUM_QUANTIZERS = 16
# The stream must match one call as closely as one call matches float32 arithmetic without TF32 (its own rounding,
# measured in the same test, `rounding_floor`), less this margin. Measured on an H100 (vllm-omni 0.30.0): one call's
# own rounding 34.2-34.5 dB in float32 (cuDNN's TF32) and 21.2 dB in bfloat16; the stream against one call 36.6-37.6
# dB and 22.6-23.7 dB. A stream decoded without its history measured 8.7 dB (see the docstring).
ROUNDING_MARGIN_DB = 3.0
TRUNCATED_HISTORY_SNR_DB = 20.0
STATS_VARIABLE = "VLLM_OMNI_QWEN3_CODE2WAV_CUDAGRAPH_STATS"  # segmented_graph_wrapper.py:100-103


def connector_extra(profile: dict[str, Any]) -> dict[str, Any]:
    """The connector settings that code2wav reads (stage 1's input connector's `extra`)."""
    stage = next(stage for stage in profile["stages"] if stage["stage_id"] == 1)
    name = next(iter(stage["input_connectors"].values()))
    return dict(profile["connectors"][name].get("extra", {}))


@pytest.fixture(scope="module")
def engine() -> Any:
    """torch, on a host with a GPU and vllm-omni 0.30 (this test follows its sources)."""
    return torch_with_vllm_omni_030("code2wav")


@pytest.fixture(scope="module")
def model_dir(engine: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """SPEECH_GPU_MODEL_DIR (a checkpoint with `speech_tokenizer/model.safetensors`), or random weights that keep a
    signal (deploy/gpu/codec_weights.py --fill signal) in a directory made as start-server.sh makes one."""
    given = os.environ.get("SPEECH_GPU_MODEL_DIR")
    if given:
        path = Path(given)
        if not (path / "speech_tokenizer" / "model.safetensors").is_file():
            pytest.fail(f"SPEECH_GPU_MODEL_DIR={given}: no speech_tokenizer/model.safetensors")
        return path
    from app.tools.qwen3_tts_model_dir import write_model_dir

    path = write_model_dir(tmp_path_factory.mktemp("qwen3-tts") / "model", "custom_voice")
    gpu_script("codec_weights").write_codec_weights(path, fill="signal", seed=0)
    return path


def build_code2wav(
    model_dir: Path, dtype: str, extra: dict[str, Any], *, async_chunk: bool, eager: bool, model_class: Any = None
) -> Any:
    """`Qwen3TTSCode2Wav` (or `model_class`, a subclass) as vLLM's loader builds it: constructed under the stage's
    dtype and device, then its own `load_weights` (qwen3_tts_code2wav.py:73-120, 566-762) and the loader's model-level
    `process_weights_after_loading` where the class has one. The config carries what code2wav reads of it."""
    import torch
    from vllm.config import LoadConfig
    from vllm.model_executor.model_loader.default_loader import DefaultModelLoader
    from vllm_omni.model_executor.models.qwen3_tts.qwen3_tts_code2wav import Qwen3TTSCode2Wav

    torch_dtype = getattr(torch, dtype)
    vllm_config = SimpleNamespace(
        model_config=SimpleNamespace(
            model=str(model_dir),
            revision=None,
            dtype=torch_dtype,
            async_chunk=async_chunk,
            enforce_eager=eager,
            stage_connector_config={"name": "SharedMemoryConnector", "extra": extra},
        ),
        load_config=LoadConfig(load_format="auto"),
        device_config=SimpleNamespace(device=torch.device(DEVICE)),
    )
    default_dtype = torch.get_default_dtype()
    torch.set_default_dtype(torch_dtype)  # as vLLM's set_default_torch_dtype around model construction
    try:
        with torch.device(DEVICE):
            model = (model_class or Qwen3TTSCode2Wav)(vllm_config=vllm_config)
    finally:
        torch.set_default_dtype(default_dtype)
    loader = DefaultModelLoader(vllm_config.load_config)
    # the top-level weights are drained unread; the decoder's come from speech_tokenizer/
    loaded = model.load_weights(iter(()))
    loader.track_weights_loading(model, loaded)  # vLLM's check that every parameter was loaded (default_loader.py)
    if hasattr(model, "process_weights_after_loading"):  # as vLLM's loader calls it (model_loader/utils.py)
        model.process_weights_after_loading()
    return model.eval()


def decode_step(model: Any, windows: list[tuple[str, Any, bool]]) -> list[Any]:
    """One code2wav step: `forward` over the windows (request id, codes [16, F], last window?), as the runner calls it;
    the audio of each window, float32 on the CPU."""
    import torch

    flat = [
        codes.reshape(-1).to(DEVICE) for _, codes, _ in windows
    ]  # codebook-major, as qwen3_tts.py:400-403 ships them
    infos = [
        {"codes": {"audio": ids}, "meta": {"request_id": request_id, "finished": torch.tensor(last)}}
        for ids, (request_id, _, last) in zip(flat, windows, strict=True)
    ]
    with torch.inference_mode():
        output = model.forward(
            input_ids=torch.cat(flat),
            positions=None,
            runtime_additional_information=infos,
            seq_token_counts=[ids.numel() for ids in flat],
            request_ids=[request_id for request_id, _, _ in windows],
        )
    return [audio.float().cpu() for audio in output.multimodal_outputs["model_outputs"]]


def random_codes(engine: Any, frames: int, seed: int, codebook_size: int) -> Any:
    generator = engine.Generator().manual_seed(seed)
    return engine.randint(0, codebook_size, (NUM_QUANTIZERS, frames), generator=generator)


class Decoders:
    """Code2wav instances, one streaming instance alive at a time (each holds its weights and graphs)."""

    def __init__(self, model_dir: Path) -> None:
        self.model_dir = model_dir
        self.one_call: dict[str, Any] = {}
        self.stream_key: tuple[str, str, bool, Any] | None = None
        self.stream_model: Any = None
        self.references: dict[tuple[str, str], Any] = {}

    def one_call_model(self, dtype: str) -> Any:
        if dtype not in self.one_call:
            extra = {"decode_chunk_frames": max(FRAMES), "decode_left_context_frames": 0}
            self.one_call[dtype] = build_code2wav(self.model_dir, dtype, extra, async_chunk=False, eager=True)
        return self.one_call[dtype]

    def reference(self, dtype: str, codes: Any, name: str) -> Any:
        """The one-call waveform of `codes` (named `name` for the cache)."""
        key = (dtype, name)
        if key not in self.references:
            (audio,) = decode_step(self.one_call_model(dtype), [(f"one-call-{name}", codes, True)])
            self.references[key] = audio
        return self.references[key]

    def streaming(self, dtype: str, schedule: str, extra: dict[str, Any], eager: bool, model_class: Any = None) -> Any:
        import torch

        key = (dtype, schedule, eager, model_class)
        if self.stream_key != key:
            self.stream_model = None
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
            self.stream_model = build_code2wav(
                self.model_dir, dtype, extra, async_chunk=True, eager=eager, model_class=model_class
            )
            self.stream_key = key
        return self.stream_model


@pytest.fixture(scope="module")
def decoders(model_dir: Path, engine: Any) -> Decoders:
    return Decoders(model_dir)


def schedules() -> dict[str, dict[str, Any]]:
    ours = connector_extra(yaml.safe_load(PROFILE.read_text()))
    import vllm_omni

    upstream_profile = Path(vllm_omni.__file__).parent / "deploy" / "qwen3_tts.yaml"
    upstream = connector_extra(yaml.safe_load(upstream_profile.read_text()))
    return {"customvoice.yaml": ours, "vllm-omni qwen3_tts.yaml": upstream}


def windows_for(extra: dict[str, Any], frames: int) -> list[int]:
    """Our model of the connector's windows, checked against 0.30's own emit rule where a ramp is set."""
    steady = int(extra.get("codec_chunk_frames", 25))
    ramp = extra.get("codec_chunk_ramp")
    windows = stream_windows(
        frames,
        ramp=list(ramp) if ramp else None,
        steady=steady,
        initial=int(extra.get("initial_codec_chunk_frames", 0)),
    )
    if ramp:
        from vllm_omni.model_executor.stage_input_processors.chunk_size_utils import compute_ramp_emit

        upstream: list[int] = []
        for length in range(1, frames + 1):  # the processor runs once per generated frame
            emit, new = compute_ramp_emit(length, len(upstream), list(ramp), steady, length == frames)
            if emit and new:
                upstream.append(new)
        assert windows == upstream, f"0.30 cuts {upstream}, the test assumed {windows}"
    return windows


CASES = [  # ordered so that each streaming instance serves its cases in a row
    pytest.param(
        dtype, schedule, eager, frames, id=f"{dtype}-{schedule.split()[-1]}-{'eager' if eager else 'graphs'}-{frames}"
    )
    for dtype in ("bfloat16", "float32")
    for schedule in ("customvoice.yaml", "vllm-omni qwen3_tts.yaml")
    for eager in (True, False)
    for frames in FRAMES
]


@pytest.mark.parametrize(("dtype", "schedule", "eager", "frames"), CASES)
def test_a_stream_of_windows_decodes_to_the_one_call_waveform(
    decoders: Decoders,
    engine: Any,
    monkeypatch: pytest.MonkeyPatch,
    dtype: str,
    schedule: str,
    eager: bool,
    frames: int,
) -> None:
    torch = engine
    extra = schedules()[schedule]
    monkeypatch.setenv(STATS_VARIABLE, "1")  # read when the graph wrapper is built: the test checks graphs ran
    model = decoders.streaming(dtype, schedule, extra, eager)
    decoder = model.decoder
    if not eager:
        assert decoder._cudagraph_enabled, "code2wav did not enable the decoder's CUDA graphs (see its log)"
    graph_hits = 0 if eager else decoder._cudagraph_wrapper._stats_hit_requests
    sliding_window = int(decoder.config.sliding_window)
    windows = windows_for(extra, frames)
    exact_frames = min(frames, full_context_frames(windows, sliding_window))

    # Two requests, the second one step behind the first; each decodes its own codes.
    seeds = {f"stream-a-{frames}": 1, f"stream-b-{frames}": 2}
    codes = {rid: random_codes(torch, frames, seed, int(decoder.config.codebook_size)) for rid, seed in seeds.items()}
    starts = {rid: step for step, rid in enumerate(seeds)}
    audio: dict[str, list[Any]] = {rid: [] for rid in seeds}
    offsets = dict.fromkeys(seeds, 0)
    for step in range(len(windows) + len(seeds) - 1):
        batch = []
        for rid in seeds:
            index = step - starts[rid]
            if 0 <= index < len(windows):
                start = offsets[rid]
                batch.append((rid, codes[rid][:, start : start + windows[index]], index == len(windows) - 1))
                offsets[rid] += windows[index]
        for (rid, window, _), wav in zip(batch, decode_step(model, batch), strict=True):
            assert wav.numel() == window.shape[-1] * SAMPLES_PER_FRAME, (
                f"{rid}: a window of {window.shape[-1]} frames gave {wav.numel()} samples"
            )
            audio[rid].append(wav)
    for rid in seeds:
        assert rid not in model._decoder_state_cache, f"{rid}: its decoder state outlived its last window"
    if not eager:  # windows of captured shapes replay a graph, the others fall back to eager
        hits = decoder._cudagraph_wrapper._stats_hit_requests - graph_hits
        print(f"\n{hits} windows decoded by CUDA graphs")
        assert hits > 0, "no window was decoded by a CUDA graph"

    first_rid = next(iter(seeds))
    floor = rounding_floor(decoders, dtype, codes[first_rid], first_rid)
    exact_samples = exact_frames * SAMPLES_PER_FRAME
    rolled = rolled_windows(windows, sliding_window)
    for rid in seeds:
        streamed = torch.cat(audio[rid])
        reference = decoders.reference(dtype, codes[rid], rid)
        assert streamed.numel() == reference.numel() == frames * SAMPLES_PER_FRAME
        print(f"\n{rid} {dtype} {schedule} {'eager' if eager else 'graphs'} windows {windows}")
        whole = wave_diff(reference[:exact_samples].numpy(), streamed[:exact_samples].numpy())
        print(f"  frames 0-{exact_frames}, whole history, against one call: {whole}")
        print(f"  (the one call's own rounding in {dtype}, against float32 without TF32: {floor})")
        assert whole.snr_db >= floor.snr_db - ROUNDING_MARGIN_DB, f"frames 0-{exact_frames}: {whole}, rounding {floor}"
        if not rolled:
            continue
        # Later windows: 0.30 decodes each from the last `sliding_window` frames and the window, nothing older.
        truncated = torch.cat(
            [
                decoders.reference(dtype, codes[rid][:, start - sliding_window : end], f"{rid}-{start}-{end}")[
                    -(end - start) * SAMPLES_PER_FRAME :
                ]
                for start, end in rolled
            ]
        )
        later = streamed[exact_samples:].numpy()
        design = wave_diff(truncated.numpy(), later)
        print(f"  frames {exact_frames}-{frames}, against one call over each window and the {sliding_window} frames")
        print(f"  before it: {design}")
        assert design.snr_db >= floor.snr_db - ROUNDING_MARGIN_DB, f"frames {exact_frames}-{frames}: {design}"
        cut = wave_diff(reference[exact_samples:].numpy(), later)
        print(f"  frames {exact_frames}-{frames}, against one call over the whole utterance: {cut}")
        # bounded by 0.30's design, and by the dtype's own rounding where that is coarser (bfloat16)
        bound = min(TRUNCATED_HISTORY_SNR_DB, floor.snr_db - ROUNDING_MARGIN_DB)
        assert cut.snr_db >= bound, f"frames {exact_frames}-{frames}: {cut}"


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("setting", ["service", "service-folded"])
def test_the_services_code2wav_streams_what_vllm_omnis_does(
    decoders: Decoders, engine: Any, monkeypatch: pytest.MonkeyPatch, dtype: str, setting: str
) -> None:
    """SPEECH_OMNI__CODE2WAV_MODEL=service or service-folded (app/engines/omni/stage_plugins/code2wav_model.py), built
    and loaded as vLLM builds vllm-omni's code2wav (its loader's checks included), warms up and captures its graphs
    (with cuDNN timing each convolution's algorithms, its switch put back after; or with the dilated convs folded),
    and streams the same codes through the same windows to vllm-omni's waveform: the two differ by rounding alone, so
    by no more than the dtype's own rounding (`rounding_floor`). Its graphs replay for as many windows as vllm-omni's
    do (a capture that failed would fall back to eager without failing anything else)."""
    from app.engines.omni.stage_plugins import code2wav_model
    from app.engines.omni.stage_plugins.model_registration import CODE2WAV_ARCHITECTURES

    service_model = getattr(code2wav_model, CODE2WAV_ARCHITECTURES[setting])
    torch = engine
    schedule = "customvoice.yaml"
    extra = schedules()[schedule]
    frames = FRAMES[0]
    windows = windows_for(extra, frames)
    audio: dict[str, Any] = {}
    graph_hits: dict[str, int] = {}
    codes = None
    timed = torch.backends.cudnn.benchmark
    monkeypatch.setenv(STATS_VARIABLE, "1")  # read when the graph wrapper is built: its count of graph replays
    decoders.stream_model, decoders.stream_key = None, None  # both built here, under the same settings
    try:
        for name, model_class in (("vllm-omni", None), ("service", service_model)):
            model = decoders.streaming(dtype, schedule, extra, False, model_class)
            assert model.decoder._cudagraph_enabled, f"{name}: code2wav did not enable the decoder's CUDA graphs"
            assert torch.backends.cudnn.benchmark is timed  # timed while its graphs were made, then put back
            if name == "service" and setting == "service-folded":
                from app.engines.omni.stage_plugins.dilated_convs import FoldedConv1d, can_fold

                folded = [m for m in model.decoder.modules() if isinstance(m, FoldedConv1d)]
                assert len(folded) == 8  # blocks 0-3, dilations 3 and 9
                assert not [m for m in model.decoder.modules() if can_fold(m)]  # none left unfolded
            # a CustomVoice checkpoint: the service's captures no graph for streams after reference codes (icl),
            # which it never has; vllm-omni's captures both kinds
            kinds = {key[0] for key in model.decoder._cudagraph_wrapper.combined_states}
            assert kinds == ({"xvec"} if name == "service" else {"icl", "xvec"}), (name, kinds)
            if codes is None:
                codes = random_codes(torch, frames, 3, int(model.decoder.config.codebook_size))
            pieces, offset = [], 0
            hits = model.decoder._cudagraph_wrapper._stats_hit_requests
            for index, size in enumerate(windows):
                window = codes[:, offset : offset + size]
                (wav,) = decode_step(model, [(f"{name}-{dtype}", window, index == len(windows) - 1)])
                pieces.append(wav)
                offset += size
            audio[name] = torch.cat(pieces)
            graph_hits[name] = model.decoder._cudagraph_wrapper._stats_hit_requests - hits
    finally:
        decoders.stream_model, decoders.stream_key = None, None  # the next test builds its own
    floor = rounding_floor(decoders, dtype, codes, "timed-convs")
    diff = wave_diff(audio["vllm-omni"].numpy(), audio["service"].numpy())
    print(f"\n{dtype}: the service's code2wav ({setting}) against vllm-omni's {diff}; the dtype's own rounding {floor}")
    assert audio["service"].numel() == audio["vllm-omni"].numel() == frames * SAMPLES_PER_FRAME
    assert diff.snr_db >= floor.snr_db - ROUNDING_MARGIN_DB, f"{diff}, rounding {floor}"
    assert graph_hits["service"] == graph_hits["vllm-omni"] > 0, graph_hits


def rounding_floor(decoders: Decoders, dtype: str, codes: Any, name: str) -> WaveDiff:
    """The dtype's own rounding: its one-call decode against a float32 one with TF32 off."""
    import torch

    key = ("strict", name)
    if key not in decoders.references:
        saved = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
        torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
        try:
            (audio,) = decode_step(decoders.one_call_model("float32"), [(f"strict-{name}", codes, True)])
        finally:
            torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved
        decoders.references[key] = audio
    strict = decoders.references[key]
    return wave_diff(strict.numpy(), decoders.reference(dtype, codes, name).numpy())


# The helpers above, on any host.


def test_windows_are_cut_as_the_profiles_ramp_then_its_steady_size() -> None:
    ramp = [2, 4, 8, 16, 25, 50]
    assert stream_windows(100, ramp=ramp, steady=50, initial=1) == [2, 4, 8, 16, 25, 45]
    assert stream_windows(375, ramp=ramp, steady=50, initial=1) == [2, 4, 8, 16, 25] + [50] * 6 + [20]
    assert stream_windows(1, ramp=ramp, steady=50, initial=1) == [1]


def test_without_a_ramp_the_first_window_is_the_initial_size_when_smaller_than_the_steady_one() -> None:
    assert stream_windows(100, ramp=None, steady=25, initial=1) == [1, 25, 25, 25, 24]
    assert stream_windows(60, ramp=None, steady=25, initial=25) == [25, 25, 10]
    assert stream_windows(60, ramp=None, steady=25, initial=0) == [25, 25, 10]
    assert stream_windows(0, ramp=None, steady=25, initial=1) == []


def test_frames_keep_their_whole_history_until_a_window_starts_past_the_sliding_window() -> None:
    assert full_context_frames([2, 4, 8, 16, 25, 50, 50, 50], 72) == 105  # the 50-frame window from frame 55
    assert full_context_frames([1, 25, 25, 25, 24], 72) == 76  # the window from frame 76 runs on 72 frames
    assert full_context_frames([2, 4, 8, 16, 25, 45], 72) == 100  # all of an 8-s utterance
    assert full_context_frames([72, 10], 72) == 72


def test_windows_that_start_past_the_sliding_window_are_decoded_on_a_rolled_cache() -> None:
    assert rolled_windows([2, 4, 8, 16, 25, 45], 72) == []
    assert rolled_windows([2, 4, 8, 16, 25, 50, 50, 20], 72) == [(105, 155), (155, 175)]
    assert rolled_windows([1, 25, 25, 25, 24], 72) == [(76, 100)]


def test_our_profile_gives_the_test_a_ramp_that_ends_at_its_steady_windows() -> None:
    extra = connector_extra(yaml.safe_load(PROFILE.read_text()))
    ramp = extra["codec_chunk_ramp"]
    assert ramp and ramp[-1] == extra["codec_chunk_frames"]


def test_wave_diff_gives_the_snr_and_the_largest_difference() -> None:
    import numpy as np

    reference = np.sin(np.linspace(0, 100, 24_000))
    same = wave_diff(reference, reference.copy())
    assert same.max_abs == 0 and same.snr_db == float("inf")
    scaled = wave_diff(reference, reference * 1.01)  # noise = 1% of the signal: 40 dB
    assert scaled.snr_db == pytest.approx(40.0, abs=1e-6)
    assert scaled.max_abs == pytest.approx(0.01 * np.max(np.abs(reference)))
    with pytest.raises(ValueError, match="length"):
        wave_diff(reference, reference[:-1])
