"""SPEECH_OMNI__PROMPT_STREAM (app/engines/omni/stage_plugins/prompt_stream.py) on a GPU, with vllm-omni 0.30's own
prompt builder (`Qwen3TTSPromptEmbedsBuilder`) over random embedding tables of the 0.6B CustomVoice shape and the
service's CustomVoice conditioning (`additional_information`):

- the embeddings built aside are those built on the talker's stream, tensor for tensor, for every speaker (a
  dialect's too), language and instruction tried, and for a VoiceDesign prompt;
- on the talker's stream, the build waits for the work queued there before it (its copies from pageable memory);
  aside, it returns while that work still runs;
- the talker's stream then orders its next work after the build's, on the GPU.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from app.engines.omni.requests import additional_information
from app.engines.omni.stage_plugins.prompt_stream import PromptsAside
from app.engines.qwen3_tts import Qwen3TTSModel
from app.tools.qwen3_tts_model_dir import write_model_dir
from tests.gpu.support import torch_with_vllm_omni_030
from tests.support.jobs import job

JOBS = [
    job(),
    job(voice="eric", text="你好，世界。"),  # a dialect speaker, language Auto: his dialect's id
    job(voice="ryan", language="english", text="A longer sentence, with a comma, to speak."),
    job(voice="serena", language="chinese", instructions="Speak slowly and warmly.", text="你好。"),
]


def builder_of(torch: Any, model_dir: Path) -> Any:
    """vllm-omni's prompt builder as its talker makes it, over random tables on the GPU (bfloat16, as the talker's)."""
    from vllm_omni.model_executor.models.qwen3_tts.configuration_qwen3_tts import Qwen3TTSConfig
    from vllm_omni.model_executor.models.qwen3_tts.prompt_embeds_builder import Qwen3TTSPromptEmbedsBuilder
    from vllm_omni.model_executor.models.qwen3_tts.qwen3_tts_talker import Qwen3TTSTalkerResizeMLP

    config = Qwen3TTSConfig.from_pretrained(str(model_dir))
    talker = config.talker_config
    torch.manual_seed(0)
    gpu = {"device": "cuda", "dtype": torch.bfloat16}
    text_embedding = torch.nn.Embedding(talker.text_vocab_size, talker.text_hidden_size).to(**gpu)
    text_projection = Qwen3TTSTalkerResizeMLP(
        talker.text_hidden_size, talker.text_hidden_size, talker.hidden_size, talker.hidden_act, bias=True
    ).to(**gpu)
    codec_embedding = torch.nn.Embedding(talker.vocab_size, talker.hidden_size).to(**gpu)

    def no_reference_audio(*args: Any, **kwargs: Any) -> list[Any]:
        raise AssertionError("a CustomVoice prompt encodes no reference audio")

    return Qwen3TTSPromptEmbedsBuilder(
        config=config,
        talker_config=talker,
        model_path=str(model_dir),
        text_embedding=text_embedding,
        text_projection=text_projection,
        codec_embed=codec_embedding,
        residual_code_embeddings=lambda: [],
        speaker_encoder=None,
        tts_pad_embed=torch.zeros(1, talker.hidden_size, **gpu),
        encode_ref_audio_batch=no_reference_audio,
    )


def assert_same(torch: Any, expected: Any, got: Any) -> None:
    assert type(expected) is type(got)
    if isinstance(expected, torch.Tensor):
        assert expected.dtype == got.dtype and expected.shape == got.shape and torch.equal(expected, got)
    elif isinstance(expected, (tuple, list)):
        assert len(expected) == len(got)
        for one, other in zip(expected, got, strict=True):
            assert_same(torch, one, other)
    else:
        assert expected == got


def sleep_cycles(torch: Any, seconds: float) -> int:
    """GPU clock cycles that torch.cuda._sleep spins for about `seconds` on this GPU."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    torch.cuda._sleep(100_000_000)
    end.record()
    end.synchronize()
    return int(100_000_000 * seconds * 1000 / start.elapsed_time(end))


@pytest.fixture(scope="module")
def torch() -> Any:
    return torch_with_vllm_omni_030("Qwen3TTSPromptEmbedsBuilder.build_prompt_embeds (its CustomVoice prompt)")


def test_the_embeddings_built_aside_are_those_built_on_the_talkers_stream(torch: Any, tmp_path: Path) -> None:
    model_dir = write_model_dir(tmp_path / "model")
    model = Qwen3TTSModel.from_dir(model_dir)
    builder = builder_of(torch, model_dir)
    aside = PromptsAside(builder.build_prompt_embeds)
    design = {**additional_information(JOBS[3], model), "task_type": ["VoiceDesign"], "non_streaming_mode": [True]}
    design.pop("speaker")
    cases = [("CustomVoice", additional_information(synthesis, model)) for synthesis in JOBS]
    for task, info in [*cases, ("VoiceDesign", design)]:
        expected = builder.build_prompt_embeds(task_type=task, info_dict=copy.deepcopy(info))
        got = aside(task_type=task, info_dict=copy.deepcopy(info))
        torch.cuda.synchronize()
        assert_same(torch, expected, got)
        assert expected[0].shape[0] > 8  # a whole prompt, not an empty one


def test_aside_the_build_does_not_wait_for_the_talkers_stream(torch: Any, tmp_path: Path) -> None:
    model_dir = write_model_dir(tmp_path / "model")
    info = additional_information(JOBS[0], Qwen3TTSModel.from_dir(model_dir))
    builder = builder_of(torch, model_dir)
    aside = PromptsAside(builder.build_prompt_embeds)
    builder.build_prompt_embeds(task_type="CustomVoice", info_dict=copy.deepcopy(info))  # its caches, its tokenizer
    aside(task_type="CustomVoice", info_dict=copy.deepcopy(info))  # the stream made
    torch.cuda.synchronize()
    cycles = sleep_cycles(torch, 3.0)  # far longer than a build takes on the host

    def queued_then_built(build: Any) -> tuple[bool, Any]:
        talker = torch.cuda.current_stream()
        torch.cuda._sleep(cycles)  # the step still on the GPU
        slept = torch.cuda.Event()
        slept.record(talker)
        built = build(task_type="CustomVoice", info_dict=copy.deepcopy(info))
        waited = slept.query()  # had the host waited for the step?
        after = torch.cuda.Event()
        after.record(talker)  # the talker's next work
        after.synchronize()
        return waited, built

    waited_on_the_talkers_stream, expected = queued_then_built(builder.build_prompt_embeds)
    waited_aside, got = queued_then_built(aside)
    assert waited_on_the_talkers_stream  # its copies waited for the step
    assert not waited_aside  # aside they did not
    assert_same(torch, expected, got)


def test_the_talkers_stream_runs_its_next_work_only_after_the_build_aside(torch: Any, tmp_path: Path) -> None:
    """The build's last work on its own stream still running (a sleep queued after it), the talker's next work waits
    for it on the GPU: what reads the embeddings never reads them half made."""
    model_dir = write_model_dir(tmp_path / "model")
    info = additional_information(JOBS[0], Qwen3TTSModel.from_dir(model_dir))
    builder = builder_of(torch, model_dir)
    cycles = sleep_cycles(torch, 3.0)

    def build_then_linger(**kwargs: Any) -> Any:
        built = builder.build_prompt_embeds(**kwargs)
        torch.cuda._sleep(cycles)  # on the prompts' stream, after the build's kernels
        return built

    aside = PromptsAside(build_then_linger)
    torch.cuda.synchronize()
    aside(task_type="CustomVoice", info_dict=copy.deepcopy(info))
    next_work = torch.cuda.Event()
    next_work.record(torch.cuda.current_stream())  # nothing else queued on the talker's stream
    assert not next_work.query()  # it waits for the prompts' stream
    next_work.synchronize()
