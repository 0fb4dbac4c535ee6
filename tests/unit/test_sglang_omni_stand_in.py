"""The sglang-omni 0.1.8 stand-in (tests/fakes/sglang_omni_0_1_8.py) and the sglang engine agree with the wheel that
uv.lock pins, read from its own source: the wheel is fetched as locked (its sha256 checked, kept under .pytest_cache
between runs) and its modules are parsed with `ast`, never imported (they need torch and sglang).

What this proves: the engine's imports name what the wheel defines; the client's dataclasses have the wheel's fields in
its order with its literal defaults; `Client`, `MultiProcessPipelineRunner`, its stage groups, `ConfigManager` and
`apply_gpu_compat_env_defaults` have the wheel's signatures (async, async generator, property or static as the wheel
has them) and the runner's state attributes; the Qwen3-TTS vocoder factory takes every setting the stand-in accepts and
the engine sends, with the engine's defaults; the talker's `EngineArgs` declare the engine's settings and pass the rest
on; the Qwen3-TTS request builder reads every `tts_params` key the engine writes and drops default sampling values
unless named; and the stream windows' defaults are the wheel's.
"""

from __future__ import annotations

import ast
import dataclasses
import enum
import inspect
import textwrap
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pydantic import ValidationError

from app.engine_protocol import ReferenceAudio, SynthesisJob, TaskType
from app.engines.qwen3_tts import Qwen3TTSModel
from app.engines.sglang import engine
from app.engines.sglang.requests import DEFAULT_STREAM_STRIDE, SAMPLING_FIELDS, pipeline_settings, request_fields
from app.settings import SglangSettings
from tests.fakes import sglang_omni_0_1_8 as stand_in
from tests.support.locked_wheels import FunctionNode, Wheel, class_def, fetch_locked_wheel, function_def

PACKAGE, VERSION = "sglang-omni", "0.1.8"


@pytest.fixture(scope="module")
def wheel() -> Wheel:
    """sglang-omni's wheel exactly as uv.lock pins it: downloaded once per machine, its sha256 checked every run."""
    return fetch_locked_wheel(PACKAGE, VERSION, "-py3-none-any.whl", "sglang_omni")


# -- reading the source -----------------------------------------------------------------------------------------------


class NoDefault:
    def __repr__(self) -> str:
        return "<no default>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, NoDefault)

    def __hash__(self) -> int:
        return 0


@dataclasses.dataclass(frozen=True)
class Spelled:
    """A default that is no literal (an enum member, a constant), as the source spells it."""

    source: str


NO_DEFAULT = NoDefault()


def annotated_fields(node: ast.ClassDef) -> dict[str, ast.expr | None]:
    """A class's annotated fields (a pydantic model's, a dataclass's): name -> default (None where it has none)."""
    return {s.target.id: s.value for s in node.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)}


def module_value(tree: ast.Module, name: str) -> Any:
    """The literal value of a module-level constant."""
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return ast.literal_eval(node.value)
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == name:
            assert node.value is not None, name
            return ast.literal_eval(node.value)
    raise AssertionError(f"the wheel's module has no constant {name}")


def defined_names(tree: ast.Module) -> set[str]:
    """What a module defines or imports at its top level."""
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.ImportFrom | ast.Import):
            names.update(alias.asname or alias.name for alias in node.names)
    return names


def own_nodes(function: FunctionNode) -> Iterator[ast.AST]:
    """The nodes of a function's body, not those of the functions, lambdas and classes it defines."""
    stack: list[ast.AST] = list(function.body)
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.ClassDef):
            stack.extend(ast.iter_child_nodes(node))


def default_of(node: ast.expr | None) -> object:
    if node is None:
        return NO_DEFAULT
    try:
        return ast.literal_eval(node)
    except ValueError:
        return Spelled(ast.unparse(node))


def typed(value: object) -> tuple[str, object]:
    """A value with its type, so that 1 and 1.0 or True and 1 differ."""
    return type(value).__name__, value


def wheel_signature(function: FunctionNode) -> list[tuple[str, str, tuple[str, object]]]:
    """Each parameter's name, kind and default, as `inspect` names the kinds."""
    arguments = function.args
    positional = [*arguments.posonlyargs, *arguments.args]
    defaults: list[ast.expr | None] = [None] * (len(positional) - len(arguments.defaults))
    defaults += arguments.defaults
    kinds = ["POSITIONAL_ONLY"] * len(arguments.posonlyargs) + ["POSITIONAL_OR_KEYWORD"] * len(arguments.args)
    params = [(arg.arg, kind, typed(default_of(d))) for arg, kind, d in zip(positional, kinds, defaults, strict=True)]
    if arguments.vararg:
        params.append((arguments.vararg.arg, "VAR_POSITIONAL", typed(NO_DEFAULT)))
    for arg, default in zip(arguments.kwonlyargs, arguments.kw_defaults, strict=True):
        params.append((arg.arg, "KEYWORD_ONLY", typed(default_of(default))))
    if arguments.kwarg:
        params.append((arguments.kwarg.arg, "VAR_KEYWORD", typed(NO_DEFAULT)))
    return params


def stand_in_signature(function: Callable[..., Any]) -> list[tuple[str, str, tuple[str, object]]]:
    def default(value: object) -> object:
        if value is inspect.Parameter.empty:
            return NO_DEFAULT
        if isinstance(value, enum.Enum):
            return Spelled(f"{type(value).__name__}.{value.name}")
        return value

    parameters = inspect.signature(function).parameters.values()
    return [(p.name, p.kind.name, typed(default(p.default))) for p in parameters]


def keyword_defaults(function: FunctionNode) -> dict[str, object]:
    """The defaults of a function's keyword-only parameters."""
    arguments = function.args
    return {arg.arg: default_of(value) for arg, value in zip(arguments.kwonlyargs, arguments.kw_defaults, strict=True)}


def wheel_kind(function: FunctionNode) -> str:
    decorators = {ast.unparse(decorator) for decorator in function.decorator_list}
    for kind in ("property", "staticmethod", "classmethod"):
        if kind in decorators:
            return kind
    yields = any(isinstance(node, ast.Yield | ast.YieldFrom) for node in own_nodes(function))
    if isinstance(function, ast.AsyncFunctionDef):
        return "async generator" if yields else "coroutine"
    return "generator" if yields else "function"


def stand_in_kind(owner: object, name: str) -> str:
    attribute = inspect.getattr_static(owner, name)
    for kind in (property, staticmethod, classmethod):
        if isinstance(attribute, kind):
            return kind.__name__
    if inspect.isasyncgenfunction(attribute):
        return "async generator"
    if inspect.iscoroutinefunction(attribute):
        return "coroutine"
    return "generator" if inspect.isgeneratorfunction(attribute) else "function"


def assert_same_function(scope: ast.Module | ast.ClassDef, owner: object, name: str) -> None:
    """The stand-in's `owner.name` is the wheel's: the same kind (async, property, ...) and the same parameters."""
    node = function_def(scope, name)
    assert stand_in_kind(owner, name) == wheel_kind(node), name
    if wheel_kind(node) != "property":
        assert stand_in_signature(getattr(owner, name)) == wheel_signature(node), name


def self_attributes(scope: ast.AST) -> set[str]:
    """The attributes `self.<name> = ...` sets (plain, annotated, tuple or augmented assignments)."""
    return {
        node.attr
        for node in ast.walk(scope)
        if isinstance(node, ast.Attribute)
        and isinstance(node.ctx, ast.Store)
        and isinstance(node.value, ast.Name)
        and node.value.id == "self"
    }


@cache
def stand_in_class(name: str) -> ast.ClassDef:
    tree = ast.parse(textwrap.dedent(inspect.getsource(getattr(stand_in, name))))
    node = tree.body[0]
    assert isinstance(node, ast.ClassDef)
    return node


def string_literals(tree: ast.AST) -> set[str]:
    return {node.value for node in ast.walk(tree) if isinstance(node, ast.Constant) and isinstance(node.value, str)}


# -- what the engine imports ------------------------------------------------------------------------------------------


def test_the_engine_imports_only_what_the_wheel_defines(wheel: Wheel) -> None:
    imports = [
        node
        for node in ast.walk(ast.parse(inspect.getsource(engine.load_runtime)))
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("sglang_omni.")
    ]
    assert {node.module for node in imports} >= {"sglang_omni.client", "sglang_omni.pipeline.mp_runner"}
    for node in imports:
        path = str(node.module).removeprefix("sglang_omni.").replace(".", "/")
        module = f"{path}/__init__.py" if wheel.has(f"{path}/__init__.py") else f"{path}.py"
        missing = {alias.name for alias in node.names} - defined_names(wheel.tree(module))
        assert not missing, f"{node.module} has no {sorted(missing)}"


# -- the client's types -----------------------------------------------------------------------------------------------


def wheel_field_default(value: ast.expr | None) -> tuple[str, object]:
    """A dataclass field's default: ("none",), ("value", typed literal), ("factory", name) or ("expression", ...)."""
    if value is None:
        return ("none", None)
    if isinstance(value, ast.Call) and ast.unparse(value.func) in ("field", "dataclasses.field"):
        keywords = {keyword.arg: keyword.value for keyword in value.keywords}
        if "default_factory" in keywords:
            return ("factory", ast.unparse(keywords["default_factory"]))
        return wheel_field_default(keywords.get("default"))
    try:
        return ("value", typed(ast.literal_eval(value)))
    except ValueError:
        return ("expression", ast.unparse(value))


def stand_in_field_default(field: dataclasses.Field[Any]) -> tuple[str, object]:
    if field.default_factory is not dataclasses.MISSING:
        return ("factory", field.default_factory.__name__)
    if field.default is not dataclasses.MISSING:
        return ("value", typed(field.default))
    return ("none", None)


@pytest.mark.parametrize("name", ["SamplingParams", "GenerateRequest", "UsageInfo", "GenerateChunk", "AbortResult"])
def test_each_client_dataclass_has_the_wheels_fields_in_its_order_with_its_defaults(wheel: Wheel, name: str) -> None:
    node = class_def(wheel.tree("client/types.py"), name)
    assert "dataclass" in {ast.unparse(decorator) for decorator in node.decorator_list}
    fields = [
        (statement.target.id, wheel_field_default(statement.value))
        for statement in node.body
        if isinstance(statement, ast.AnnAssign)
        and isinstance(statement.target, ast.Name)
        and not ast.unparse(statement.annotation).startswith("ClassVar")
    ]
    ours = dataclasses.fields(getattr(stand_in, name))
    assert [field.name for field in ours] == [field_name for field_name, _ in fields]
    for field, (field_name, default) in zip(ours, fields, strict=True):
        if default[0] == "expression":  # no literal: the stand-in has a default too
            assert stand_in_field_default(field)[0] != "none", field_name
        else:
            assert stand_in_field_default(field) == default, field_name


def test_abort_levels_are_the_wheels(wheel: Wheel) -> None:
    node = class_def(wheel.tree("client/types.py"), "AbortLevel")
    members = {
        target.id: ast.literal_eval(statement.value)
        for statement in node.body
        if isinstance(statement, ast.Assign)
        for target in statement.targets
        if isinstance(target, ast.Name)
    }
    assert {member.name: member.value for member in stand_in.AbortLevel} == members


# -- the client, the pipeline runner, the config manager --------------------------------------------------------------


def test_the_client_is_built_streams_aborts_and_answers_health_as_the_wheels_does(wheel: Wheel) -> None:
    client = class_def(wheel.tree("client/client.py"), "Client")
    for name in ("__init__", "generate", "abort", "health"):
        assert_same_function(client, stand_in.Client, name)
    assert [arg.arg for arg in function_def(client, "__init__").args.args] == [
        "self", "coordinator", "result_builder", "stream_builder",
    ]  # fmt: skip
    assert wheel_kind(function_def(client, "generate")) == "async generator"  # closing it early aborts the request
    assert [arg.arg for arg in function_def(client, "abort").args.args] == ["self", "request_id", "level"]


def test_the_pipeline_runner_starts_stops_and_fails_as_the_wheels_does(wheel: Wheel) -> None:
    runner = class_def(wheel.tree("pipeline/mp_runner.py"), "MultiProcessPipelineRunner")
    for name in ("__init__", "start", "stop", "wait_failed", "coordinator"):
        assert_same_function(runner, stand_in.MultiProcessPipelineRunner, name)
    assert wheel_kind(function_def(runner, "start")) == "coroutine"
    assert [arg.arg for arg in function_def(runner, "start").args.args] == ["self", "timeout"]
    assert wheel_kind(function_def(runner, "coordinator")) == "property"
    state = {"fatal_error", "groups", "started"}  # what the engine reads, before start too
    assert state <= self_attributes(function_def(runner, "__init__"))
    assert state <= self_attributes(function_def(stand_in_class("MultiProcessPipelineRunner"), "__init__"))


def test_a_stage_group_tells_whether_a_process_died_and_which_as_the_wheels_does(wheel: Wheel) -> None:
    group = class_def(wheel.tree("pipeline/stage_workers.py"), "StageGroup")
    assert "StageGroup" in defined_names(wheel.tree("pipeline/mp_runner.py"))  # the runner's `groups` are these
    for name in ("any_dead", "dead_summary"):
        assert_same_function(group, stand_in.FakeStageGroup, name)


def test_the_config_manager_loads_a_model_path_and_merges_dotted_settings_as_the_wheels_does(wheel: Wheel) -> None:
    manager = class_def(wheel.tree("config/manager.py"), "ConfigManager")
    for name in ("__init__", "from_model_path", "merge_config"):
        assert_same_function(manager, stand_in.ConfigManager, name)
    assert wheel_kind(function_def(manager, "from_model_path")) in ("staticmethod", "classmethod")
    assert wheel_signature(function_def(manager, "merge_config"))[:3] == [
        ("self", "POSITIONAL_OR_KEYWORD", typed(NO_DEFAULT)),
        ("extra_args", "POSITIONAL_OR_KEYWORD", typed(NO_DEFAULT)),
        ("extra_patches", "KEYWORD_ONLY", typed(None)),
    ]


def test_a_profile_run_is_controlled_as_the_wheels_profiler_control_does(wheel: Wheel) -> None:
    """The engine starts and stops a profile as `sgl-omni serve` does: a ProfilerControlClient built on the runner's
    stage control endpoints (the stand-in's extra fields record what it was sent)."""
    control = class_def(wheel.tree("profiler/profiler_control.py"), "ProfilerControlClient")
    for name in ("broadcast_start", "broadcast_stop", "close"):
        assert_same_function(control, stand_in.ProfilerControlClient, name)
    fields = [node.target.id for node in control.body if isinstance(node, ast.AnnAssign)]
    assert fields == ["stage_endpoints", "socks"]
    assert [field.name for field in dataclasses.fields(stand_in.ProfilerControlClient)][:2] == fields
    runner = class_def(wheel.tree("pipeline/mp_runner.py"), "MultiProcessPipelineRunner")
    assert_same_function(runner, stand_in.MultiProcessPipelineRunner, "stage_control_endpoints")
    assert wheel_kind(function_def(runner, "stage_control_endpoints")) == "property"
    launcher = wheel.tree("serve/launcher.py")
    assert "ProfilerControlClient(mp_runner.stage_control_endpoints)" in ast.unparse(launcher)  # as serve does it


def test_a_request_timeline_is_recorded_as_the_wheels_event_recorder_does(wheel: Wheel) -> None:
    """A timeline run: the stages told with an event directory and no torch profiler, this process's recorder (the
    coordinator's) started and stopped with the same calls `sgl-omni serve`'s /start_request_profile makes."""
    tree = wheel.tree("profiler/event_recorder.py")
    recorder = class_def(tree, "RequestEventRecorder")
    for name in ("start", "stop", "is_active"):
        assert_same_function(recorder, stand_in.RequestEventRecorder, name)
    assert_same_function(tree, stand_in, "get_recorder")
    launcher = ast.unparse(wheel.tree("serve/launcher.py"))
    assert "from sglang_omni.profiler.event_recorder import get_recorder as _get_event_recorder" in launcher
    assert "_get_event_recorder().start(run_id=run_id, event_dir=event_dir, stage='coordinator')" in launcher
    assert "trace_path_template='', event_dir=event_dir, enable_torch=False" in launcher


def test_gpu_compat_defaults_apply_with_no_argument_as_the_wheels_do(wheel: Wheel) -> None:
    tree = wheel.tree("utils/gpu_compat.py")
    assert_same_function(tree, stand_in, "apply_gpu_compat_env_defaults")
    assert all(
        default != typed(NO_DEFAULT)
        for _, _, default in wheel_signature(function_def(tree, "apply_gpu_compat_env_defaults"))
    )


def test_a_full_queue_is_refused_with_the_wheels_error(wheel: Wheel) -> None:
    error = class_def(wheel.tree("admission.py"), "QueueFullError")
    assert [ast.unparse(base) for base in error.bases] == ["RuntimeError"]
    assert issubclass(stand_in.QueueFullError, RuntimeError)
    message = [s for s in error.body if isinstance(s, ast.Assign) and ast.unparse(s.targets[0]) == "MESSAGE"]
    assert ast.literal_eval(message[0].value) == stand_in.QueueFullError.MESSAGE


# -- the pipeline's settings ------------------------------------------------------------------------------------------


def every_pipeline_setting() -> dict[str, object]:
    """The engine's pipeline settings with every optional one set."""
    return pipeline_settings(
        SglangSettings(
            model="m",
            load_format="dummy",
            disable_radix_cache=True,
            prefill_graph_tokens=2048,
            prefill_graph_requests=64,
            preprocessing="cpu",
            chunk_ramp=[1, 2, 4],
            steady_chunk_frames=8,
        )
    )


def test_the_vocoder_factory_takes_every_setting_the_stand_in_accepts_and_the_engine_gives(wheel: Wheel) -> None:
    factory = function_def(wheel.tree("models/qwen3_tts/stages.py"), "create_vocoder_executor")
    assert factory.args.kwarg is None  # its signature is the list of what it accepts (sglang-omni refuses the rest)
    accepted = {arg.arg for arg in [*factory.args.args, *factory.args.kwonlyargs]}
    assert stand_in.VOCODER_FACTORY_ARGS <= accepted, sorted(stand_in.VOCODER_FACTORY_ARGS - accepted)
    given = {key.removeprefix("vocoder.factory.") for key in every_pipeline_setting() if key.startswith("vocoder.")}
    assert given == {"initial_max_batch_size", "initial_batch_wait_ms", "stream_chunk_ramp", "stream_followup_stride"}
    assert given <= accepted
    assert given <= stand_in.VOCODER_FACTORY_ARGS


def test_the_talkers_factory_takes_what_the_stand_in_accepts_its_prefill_coalescing_among_them(wheel: Wheel) -> None:
    """`PIPELINE_OVERRIDES` reaches the talker's factory arguments, e.g. `tts_engine.factory.prefill_coalesce_requests`
    and `_wait_ms` (while the talker decodes, hold a prefill until that many requests wait or the oldest waited that
    long: a burst's prefills merged); the stand-in takes exactly the wheel's and refuses others."""
    factory = function_def(wheel.tree("models/qwen3_tts/stages.py"), "create_sglang_tts_engine_executor")
    assert factory.args.kwarg is None
    assert {arg.arg for arg in factory.args.kwonlyargs} == stand_in.TTS_ENGINE_FACTORY_ARGS
    defaults = keyword_defaults(factory)
    assert defaults["prefill_coalesce_requests"] == 0 and defaults["prefill_coalesce_wait_ms"] == 60.0  # off
    manager = stand_in.ConfigManager(stand_in.FakePipeline("m", "custom_voice", ("vivian",)))
    manager.merge_config(
        {"tts_engine.factory.prefill_coalesce_requests": 8, "tts_engine.factory.prefill_coalesce_wait_ms": 10}
    )
    with pytest.raises(ValueError):
        manager.merge_config({"tts_engine.factory.coalesce": 8})


def test_the_vocoder_factorys_first_window_batch_defaults_are_the_engine_settings_defaults(wheel: Wheel) -> None:
    factory = function_def(wheel.tree("models/qwen3_tts/stages.py"), "create_vocoder_executor")
    defaults = keyword_defaults(factory)
    settings = SglangSettings()
    assert (settings.first_window_batch, settings.first_window_wait_ms) == (32, 2.0)
    assert defaults["initial_max_batch_size"] == settings.first_window_batch
    assert defaults["initial_batch_wait_ms"] == settings.first_window_wait_ms


def test_the_talkers_prefill_graphs_stop_at_512_tokens_unless_the_engine_setting_raises_them(wheel: Wheel) -> None:
    """sglang-omni's Qwen3-TTS talker captures prefill graphs for its own ladder up to 512 tokens (the docs' default),
    and a declared `cuda_graph_max_bs_prefill` above that ladder's top extends it (`generation_batch_policy.py`)."""
    builder = wheel.tree("models/qwen3_tts/engine_builder.py")
    ladder = [
        node
        for node in ast.walk(builder)
        if isinstance(node, ast.Call) and ast.unparse(node.func) == "build_default_prefill_cuda_graph_bs"
    ]
    assert [ast.literal_eval(call.args[0]) for call in ladder] == [512]
    assert 'overrides.get("cuda_graph_max_bs_prefill")' in wheel.source("scheduling/generation_batch_policy.py")
    assert SglangSettings().prefill_graph_tokens is None
    assert "tts_engine.engine.cuda_graph_max_bs_prefill" not in pipeline_settings(SglangSettings(model="m"))
    assert every_pipeline_setting()["tts_engine.engine.cuda_graph_max_bs_prefill"] == 2048


def test_a_prefill_graph_holds_16_requests_unless_the_engine_setting_raises_them(wheel: Wheel) -> None:
    """SGLang's full prefill graphs hold `full_prefill_max_req` requests, by default its chunked prefill size / 512
    (16 for the 8192 it picks on an H100 or H200); a prefill of more requests runs eagerly whatever its tokens: with
    graphs captured up to 2048 tokens, a burst's prefill of 17 requests and 894 tokens still ran eagerly. sglang-omni
    gives CustomVoice talkers full graphs and Base and VoiceDesign breakable ones, which hold the whole request pool.
    The engine's setting reaches it as the nested `cuda_graph_config`, which sglang-omni passes on and SGLang applies
    over its every other source."""
    sglang = fetch_locked_wheel("sglang", "0.5.21", "-cp311-cp311-manylinux_2_34_x86_64.whl", "sglang")
    config = sglang.tree("srt/model_executor/cuda_graph_config.py")
    phase = class_def(config, "PhaseConfig")
    default = annotated_fields(phase)["full_prefill_max_req"]
    assert default is not None and ast.literal_eval(default) is None
    allowed = [
        s.value
        for s in config.body
        if isinstance(s, ast.Assign) and ast.unparse(s.targets[0]) == "ALLOWED_KEYS_PER_PHASE"
    ]
    per_phase = allowed[0]
    assert isinstance(per_phase, ast.Dict)
    prefill_keys = {ast.unparse(k): ast.literal_eval(v) for k, v in zip(per_phase.keys, per_phase.values, strict=True)}
    assert "full_prefill_max_req" in prefill_keys["Phase.PREFILL"]
    capture = ast.unparse(
        function_def(
            sglang.tree("srt/model_executor/model_runner_components/cuda_graph_setup.py"), "capture_prefill_graph"
        )
    )
    assert "max_capture_requests = prefill_config.full_prefill_max_req" in capture
    assert "max(get_schedule().chunked_prefill_size // 512, 1)" in capture
    assert "else:\n        max_capture_requests = model_runner.req_to_token_pool.size" in capture  # not full graphs
    builder = ast.unparse(
        function_def(
            class_def(wheel.tree("models/qwen3_tts/engine_builder.py"), "Qwen3TtsEngineBuilder"), "generation_defaults"
        )
    )
    assert "'cuda_graph_backend_prefill': CudaGraphBackend.BREAKABLE" in builder
    assert "== 'custom_voice':\n        defaults['cuda_graph_backend_prefill'] = CudaGraphBackend.FULL" in builder
    parse = ast.unparse(function_def(sglang.tree("srt/arg_groups/cuda_graph_hook.py"), "parse_cuda_graph_config"))
    assert "for key, value in phase_config.items():\n            _set(phase, key, value)" in parse
    # sglang-omni's talker overrides keep the nested config (they mirror only its backend, bs and max_bs)
    policy = ast.unparse(
        function_def(wheel.tree("scheduling/generation_batch_policy.py"), "build_generation_batch_overrides")
    )
    assert "**incoming" in policy and "pop('cuda_graph_config'" not in policy
    assert SglangSettings().prefill_graph_requests is None
    assert "tts_engine.engine.cuda_graph_config" not in pipeline_settings(SglangSettings(model="m"))
    nested = every_pipeline_setting()["tts_engine.engine.cuda_graph_config"]
    assert nested == {"prefill": {"full_prefill_max_req": 64}}


def test_the_talkers_engine_args_declare_the_engines_settings_and_pass_on_the_rest(wheel: Wheel) -> None:
    engine_args = class_def(wheel.tree("config/schema.py"), "EngineArgs")
    assert {"mem_fraction_static", "max_running_requests"} <= set(annotated_fields(engine_args))
    config = [s for s in engine_args.body if isinstance(s, ast.Assign) and ast.unparse(s.targets[0]) == "model_config"]
    assert isinstance(call := config[0].value, ast.Call)
    # any other `tts_engine.engine.*` key (load_format, disable_radix_cache) goes on to SGLang's ServerArgs, as the
    # stand-in lets every `tts_engine.engine.` key through
    assert {keyword.arg: ast.literal_eval(keyword.value) for keyword in call.keywords}.get("extra") == "allow"
    engine_keys = [key for key in every_pipeline_setting() if key.startswith("tts_engine.engine")]
    assert engine_keys and all(key.startswith(stand_in.ENGINE_KEYS_FREE) for key in engine_keys)


# -- where preprocessing runs ---------------------------------------------------------------------------------------


def test_preprocessing_in_a_process_of_its_own_is_spelled_as_the_wheels_schema_spells_it(wheel: Wheel) -> None:
    """Every key the `cpu` and `gpu` layouts set is a field of sglang-omni's schema: a stage's process, GPU, env and
    channel credits (2 by default: two payloads in flight), the preprocessing factory's device, the placement rule that
    asks every stage on a shared GPU for a memory share (on by default); and a preprocessing stage outside the talker's
    process loads its own prompt frontend. The stand-in takes the same fields."""
    schema = wheel.tree("config/schema.py")
    stage = annotated_fields(class_def(schema, "StageConfig"))
    assert {"process", "gpu", "env", "comm"} <= set(stage)
    assert stand_in.STAGE_FIELDS <= set(stage)
    comm = annotated_fields(class_def(schema, "CommConfig"))
    assert set(comm) == stand_in.COMM_FIELDS
    assert comm["credits"] is not None and ast.literal_eval(comm["credits"]) == 2
    assert "device" in annotated_fields(class_def(schema, "FactoryArgs"))
    placement = annotated_fields(class_def(schema, "PlacementConfig"))
    assert {f"placement.{name}" for name in placement} == stand_in.TOP_LEVEL_KEYS
    rule = placement["require_memory_fraction_for_colocation"]
    assert rule is not None and ast.literal_eval(rule) is True
    factory = function_def(wheel.tree("models/qwen3_tts/stages.py"), "create_preprocessing_executor")
    assert {arg.arg for arg in factory.args.kwonlyargs} == stand_in.PREPROCESSING_FACTORY_ARGS
    config = wheel.source("models/qwen3_tts/config.py")
    assert 'kwargs["load_frontend"] = True' in config and "def preprocessing_in_own_process" in config
    names = [
        k for k in ast.walk(wheel.tree("models/qwen3_tts/config.py")) if isinstance(k, ast.keyword) and k.arg == "name"
    ]
    assert tuple(ast.literal_eval(keyword.value) for keyword in names) == ("preprocessing", "vocoder", "tts_engine")
    assert set(stand_in.STAGES) == {"preprocessing", "vocoder", "tts_engine"}


def test_only_the_shared_memory_channel_takes_credits(wheel: Wheel) -> None:
    """On the CPU, preprocessing's tensors cross by shared memory, whose credits are a semaphore over segments of each
    tensor's own size; on the GPU by CUDA IPC, which the stage sends without taking one. A CUDA IPC relay would
    instead reserve a pool of slot size x credits (512 MiB x 2 by default), so the `gpu` layout leaves credits be."""
    shm = class_def(wheel.tree("relay/shm.py"), "ShmRelay")
    init = ast.unparse(function_def(shm, "__init__"))
    assert "self.sem = asyncio.Semaphore(credits)" in init
    assert "shm_create_from_tensor(tensor)" in ast.unparse(function_def(shm, "put_async"))
    runtime = wheel.source("pipeline/stage/runtime.py")
    assert "can_use_direct_cuda_ipc" in runtime and "serialize_direct_cuda_ipc_payload" in runtime
    relay = ast.unparse(wheel.tree("relay/cuda_ipc.py"))
    assert "pool_size_mb = legacy_slot_size_mb * legacy_credits" in relay


@pytest.mark.parametrize("where", ["inline", "cpu", "gpu"])
def test_each_preprocessing_layout_lets_a_burst_through_to_the_talker(where: str) -> None:
    settings = SglangSettings(model="m", preprocessing=where, max_running_requests=48)
    values = pipeline_settings(settings)
    own = {
        key: value
        for key, value in values.items()
        if key.startswith(("preprocessing.", "placement.", "tts_engine.env"))
    }
    expected = {
        "inline": {},
        "cpu": {"preprocessing.factory.device": "cpu", "preprocessing.comm.credits": 48},
        "gpu": {"preprocessing.gpu": 0, "placement.require_memory_fraction_for_colocation": False},
    }[where]
    if where != "inline":
        expected |= {"preprocessing.process": "frontend", "preprocessing.env.OMP_NUM_THREADS": "1"}
    assert own == expected
    stand_in.ConfigManager(stand_in.FakePipeline("m", "custom_voice", ("vivian",))).merge_config(values)
    assert SglangSettings().preprocessing == "inline"


def test_a_layout_follows_the_overrides_it_depends_on_and_they_win() -> None:
    overrides = {"tts_engine.engine.max_running_requests": 96, "tts_engine.gpu": 1}
    cpu = pipeline_settings(SglangSettings(model="m", preprocessing="cpu", pipeline_overrides=overrides))
    assert cpu["preprocessing.comm.credits"] == 96
    gpu = pipeline_settings(SglangSettings(model="m", preprocessing="gpu", pipeline_overrides=overrides))
    assert gpu["preprocessing.gpu"] == 1
    mine = {"preprocessing.comm.credits": 8}
    assert (
        pipeline_settings(SglangSettings(model="m", preprocessing="cpu", pipeline_overrides=mine))[
            "preprocessing.comm.credits"
        ]
        == 8
    )


def test_the_stand_in_refuses_what_the_wheel_refuses_at_start() -> None:
    """An unknown stage, a channel or placement field its schema forbids, a factory argument its preprocessing
    factory has not (accepted by the merge, refused when the stage is built), a replica policy for a process no stage
    runs in or with a field the policy has not."""
    manager = stand_in.ConfigManager(stand_in.FakePipeline("m", "custom_voice", ("vivian",)))
    for key in (
        "preprocessing.factory.weights",
        "talker.process",
        "vocoder.comm.window",
        "placement.anything",
        "processes.frontend.num_replicas",  # no stage runs in `frontend` here
        "processes.pipeline.replicas",
    ):
        with pytest.raises(ValueError):
            manager.merge_config({key: 1})
    front = {"preprocessing.process": "frontend"}
    manager.merge_config({**front, "processes.frontend.num_replicas": 2})
    for refused in (
        {**front, "processes.frontend.num_replicas": 0},
        {"processes.pipeline.num_replicas": 2},  # the talker's process: a GPU one, without devices of its own
        {**front, "processes.frontend.replica_devices": [0, 0]},  # a CPU process declaring devices
        {**front, "preprocessing.gpu": 0, "processes.frontend.num_replicas": 2},  # on the GPU now, no devices
        {
            **front,
            "preprocessing.gpu": 0,
            "processes.frontend.num_replicas": 2,
            "processes.frontend.replica_devices": [0, 0],
        },
    ):
        with pytest.raises(ValueError):
            manager.merge_config(refused)
    manager.merge_config({"processes.pipeline.num_replicas": 2, "processes.pipeline.replica_devices": [0, 1]})


def test_preprocessing_runs_in_several_processes_as_the_wheel_replicates_one(wheel: Wheel) -> None:
    """PREPROCESSING_PROCESSES=N with PREPROCESSING=cpu: N replicas of preprocessing's process (sglang-omni's
    `processes.<name>.num_replicas`, its ProcessConfig), each request bound to one of them in turn at admission. The
    wheel refuses copies of a process with a stage on the GPU unless they have devices of their own, and then refuses
    the stage's own GPU, which preprocessing needs to be on one: so the `gpu` layout cannot run as copies at all, and
    the settings refuse it, as they refuse copies of the talker's process or of preprocessing an override put on a
    GPU."""
    schema = wheel.tree("config/schema.py")
    process = annotated_fields(class_def(schema, "ProcessConfig"))
    assert set(process) == stand_in.PROCESS_FIELDS
    assert ast.literal_eval(process["num_replicas"]) == 1
    assert "processes: dict[str, ProcessConfig]" in ast.unparse(class_def(schema, "PipelineConfig"))
    topology = ast.unparse(function_def(wheel.tree("config/topology.py"), "resolve_replica_devices"))
    assert "if policy.num_replicas > 1 and has_gpu_stage:" in topology  # ... needs replica_devices
    assert "if not has_gpu_stage:" in topology  # ... must not declare replica_devices
    # and with devices of its own, a stage's own GPU (preprocessing has none unless given one) is refused
    assert "cannot override GPU placement" in wheel.source("config/manager.py")
    coordinator = wheel.source("pipeline/coordinator.py")  # bound at admission, in turn unless told otherwise
    assert "self.binding_policy = binding_policy or RoundRobinBindingPolicy()" in coordinator
    assert "assign_replica_bindings(" in coordinator
    values = pipeline_settings(SglangSettings(model="m", preprocessing="cpu", preprocessing_processes=4))
    assert values["processes.frontend.num_replicas"] == 4 and values["preprocessing.process"] == "frontend"
    stand_in.ConfigManager(stand_in.FakePipeline("m", "custom_voice", ("vivian",))).merge_config(values)
    assert not any(key.startswith("processes.") for key in pipeline_settings(SglangSettings(preprocessing="cpu")))
    named = {"preprocessing.process": "prompts"}  # an override naming the process: its copies under that name
    values = pipeline_settings(
        SglangSettings(model="m", preprocessing="cpu", preprocessing_processes=2, pipeline_overrides=named)
    )
    assert values["processes.prompts.num_replicas"] == 2 and "processes.frontend.num_replicas" not in values
    stand_in.ConfigManager(stand_in.FakePipeline("m", "custom_voice", ("vivian",))).merge_config(values)
    for where in ("inline", "gpu"):
        with pytest.raises(ValidationError, match="PREPROCESSING_PROCESSES=2 needs SPEECH_SGLANG__PREPROCESSING=cpu"):
            SglangSettings(model="m", preprocessing=where, preprocessing_processes=2)
    for overrides in ({"preprocessing.process": "pipeline"}, {"preprocessing.gpu": 0}):
        settings = SglangSettings(
            model="m", preprocessing="cpu", preprocessing_processes=2, pipeline_overrides=overrides
        )
        with pytest.raises(ValueError, match="preprocessing_processes"):
            pipeline_settings(settings)


def test_the_stream_window_defaults_are_the_wheels(wheel: Wheel) -> None:
    vocoder = wheel.tree("models/qwen3_tts/streaming_vocoder.py")
    assert module_value(vocoder, "DEFAULT_QWEN3_TTS_STREAM_CHUNK_RAMP") == stand_in.DEFAULT_RAMP
    assert module_value(vocoder, "DEFAULT_QWEN3_TTS_STREAM_FOLLOWUP_STRIDE") == stand_in.DEFAULT_STEADY
    assert module_value(vocoder, "DEFAULT_QWEN3_TTS_STREAM_STRIDE") == DEFAULT_STREAM_STRIDE == stand_in.STREAM_STRIDE
    # and the factory defaults to them: its stride and steady windows are these constants, its ramp the default one
    factory = function_def(wheel.tree("models/qwen3_tts/stages.py"), "create_vocoder_executor")
    defaults = keyword_defaults(factory)
    assert defaults["stream_stride"] == Spelled("DEFAULT_QWEN3_TTS_STREAM_STRIDE")
    assert defaults["stream_followup_stride"] == Spelled("DEFAULT_QWEN3_TTS_STREAM_FOLLOWUP_STRIDE")
    assert defaults["stream_chunk_ramp"] is None and defaults["initial_chunk_frames"] is None


# -- the requests -----------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def every_request_field(custom_voice_dir: Path) -> list[dict[str, Any]]:
    """The `metadata` and `extra_params` the engine writes, for jobs that set every optional field between them."""
    model = Qwen3TTSModel.from_dir(custom_voice_dir)
    clip = ReferenceAudio(np.zeros(16_000, dtype=np.float32), 16_000)
    sampling = {"temperature": 0.7, "top_p": 0.9, "top_k": 20, "repetition_penalty": 1.05}
    jobs = [
        SynthesisJob(
            request_id="base", text="Hello.", voice="", task_type=TaskType.BASE, language="English", ref_audio=clip,
            ref_text="Hi.", non_streaming_mode=False, seed=7, extra_params=sampling, max_new_tokens=100,
            initial_codec_chunk_frames=2,
        ),
        SynthesisJob(request_id="custom", text="Hello.", voice="vivian", instructions="Slowly.", seed=7),
        SynthesisJob(request_id="design", text="Hello.", voice="", task_type=TaskType.VOICE_DESIGN, instructions="A."),
    ]  # fmt: skip
    return [dataclasses.asdict(request_fields(job, model)) for job in jobs]


def test_the_request_builder_reads_every_tts_param_the_engine_writes(
    wheel: Wheel, every_request_field: list[dict[str, Any]]
) -> None:
    builder = wheel.tree("models/qwen3_tts/request_builders.py")
    read = string_literals(builder)
    assert all(set(fields["metadata"]) == {"task", "tts_params"} for fields in every_request_field)
    assert "tts_params" in read
    written = {key for fields in every_request_field for key in fields["metadata"]["tts_params"]}
    assert written >= {
        "task_type", "language", "stream_codec_output", "instructions", "voice", "x_vector_only_mode",
        "non_streaming_mode", "seed", "explicit_generation_params",
    }  # fmt: skip
    assert written <= read, sorted(written - read)


def test_the_first_window_size_rides_in_extra_params_under_the_wheels_name(
    wheel: Wheel, every_request_field: list[dict[str, Any]]
) -> None:
    name = module_value(wheel.tree("scheduling/streaming_vocoder.py"), "INITIAL_CODEC_CHUNK_FRAMES_PARAM")
    assert {key for fields in every_request_field for key in fields["extra_params"]} == {name}
    assert "INITIAL_CODEC_CHUNK_FRAMES_PARAM" in defined_names(wheel.tree("models/qwen3_tts/request_builders.py"))


def test_the_request_builder_drops_a_default_sampling_value_unless_the_engine_names_it(
    wheel: Wheel, every_request_field: list[dict[str, Any]]
) -> None:
    builder = wheel.tree("models/qwen3_tts/request_builders.py")
    assert set(SAMPLING_FIELDS) <= set(module_value(builder, "_GENERATION_FIELDS"))  # the talker reads them
    assert set(module_value(builder, "_IMPLICIT_SAMPLING_DEFAULTS")) >= set(SAMPLING_FIELDS)
    named = [fields["metadata"]["tts_params"].get("explicit_generation_params") for fields in every_request_field]
    assert sorted(SAMPLING_FIELDS) in named
