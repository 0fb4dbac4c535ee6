"""What the omni engine hands AsyncOmni beyond its model, checked against the vllm-omni wheel that uv.lock pins, read
from its source (tests/support/locked_wheels.py): the wheel is never imported here (it needs torch and vLLM)."""

from __future__ import annotations

import ast
import hashlib
import json
import sys
import types
from pathlib import Path

import pytest

from app.settings import OmniSettings
from tests.support.locked_wheels import ROOT, FunctionNode, Wheel, class_def, fetch_locked_wheel, function_def


@pytest.fixture(scope="module")
def wheel() -> Wheel:
    return fetch_locked_wheel("vllm-omni", "0.30.0", "-py3-none-any.whl", "vllm_omni")


def keys_taken(function: FunctionNode, how: str) -> set[str]:
    """The literal keys `function` reads from its `kwargs` with `kwargs.<how>("key", ...)`."""
    return {
        node.args[0].value
        for node in ast.walk(function)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == how
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "kwargs"
        and node.args
        and isinstance(node.args[0], ast.Constant)
    }


def field_default(tree: ast.Module, cls: str, name: str) -> object:
    (field,) = [
        node
        for node in class_def(tree, cls).body
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == name
    ]
    assert field.value is not None
    return ast.literal_eval(field.value)


def test_parallel_stage_init_reaches_the_engine_that_reads_it_with_the_same_default(wheel: Wheel) -> None:
    # AsyncOmni's base passes every keyword it does not take itself on to the engine it creates...
    base = function_def(class_def(wheel.tree("entrypoints/omni_base.py"), "OmniBase"), "__init__")
    assert "parallel_stage_init" not in keys_taken(base, "pop")
    # ...and the engine reads this one
    engine = function_def(class_def(wheel.tree("engine/omni_engine_base.py"), "OmniEngineBase"), "__init__")
    assert "parallel_stage_init" in keys_taken(engine, "get")
    # the service's default is vllm-omni's: off, the stages one by one
    assert field_default(wheel.tree("engine/arg_utils.py"), "OrchestratorArgs", "parallel_stage_init") is False
    assert OmniSettings().parallel_stage_init is False


# The service's code2wav model (app/engines/omni/stage_plugins/code2wav_model.py), checked against what it extends
CODE2WAV_MODULE = "model_executor/models/qwen3_tts/qwen3_tts_code2wav.py"
TOKENIZER_MODULE = "model_executor/models/qwen3_tts/tokenizer_12hz/modeling_qwen3_tts_tokenizer_v2.py"


def calls_to(scope: ast.AST, attribute: str) -> list[ast.Call]:
    return [
        node
        for node in ast.walk(scope)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == attribute
    ]


def test_a_dead_stage_is_seen_only_by_the_health_check_the_engine_asks_as_the_stand_in_mirrors(wheel: Wheel) -> None:
    """The omni engine watches AsyncOmni.check_health (tests/fakes/vllm_omni_0_30.py `kill_stage` mirrors this)."""
    base = class_def(wheel.tree("entrypoints/omni_base.py"), "OmniBase")
    # `errored` is the orchestrator thread's death alone: a stage that lost its last process leaves it false...
    assert ast.unparse(function_def(base, "errored")).rstrip().endswith("return not self.engine.is_alive()")
    # ...and check_health raises for it, naming the stage as the stand-in does
    check = ast.unparse(function_def(base, "check_health"))
    assert "raise EngineDeadError(f'Stage-{pool.stage_id} has no live replica')" in check
    # AsyncOmni's is a coroutine without arguments over that one, as the engine awaits it
    async_base = class_def(wheel.tree("entrypoints/async_omni_base.py"), "AsyncOmniBase")
    asynchronous = function_def(async_base, "check_health")
    assert isinstance(asynchronous, ast.AsyncFunctionDef) and [a.arg for a in asynchronous.args.args] == ["self"]
    assert "OmniBase.check_health(self)" in ast.unparse(asynchronous)
    # AsyncOmni keeps both as its bases define them
    async_omni = class_def(wheel.tree("entrypoints/async_omni.py"), "AsyncOmni")
    assert not {"check_health", "errored"} & {n.name for n in async_omni.body if isinstance(n, FunctionNode)}
    # the orchestrator fails the requests in flight on the dead process with its error, and those dispatched later
    # with the stage's name, each as a fatal error message...
    orchestrator = class_def(wheel.tree("engine/orchestrator.py"), "OrchestratorBase")
    in_flight = ast.unparse(function_def(orchestrator, "_handle_dead_replica"))
    assert "pool.evict_replica(replica_id)" in in_flight
    assert "ErrorMessage(error=str(error), fatal=True" in in_flight
    later = ast.unparse(function_def(orchestrator, "_fail_request_dead_stage"))
    assert "ErrorMessage(error=f'Stage-{stage_id} has no live replica', fatal=True" in later
    # ...which AsyncOmni raises as OmniEngineDeadError, an EngineDeadError (the class names the engine matches)
    assert "raise OmniEngineDeadError(result.error" in ast.unparse(wheel.tree("entrypoints/async_omni_base.py"))
    dead = class_def(wheel.tree("entrypoints/omni_base.py"), "OmniEngineDeadError")
    assert [ast.unparse(b) for b in dead.bases] == ["EngineDeadError"]


def test_the_service_plugin_is_installed_in_the_group_vllm_omni_runs_in_every_process(wheel: Wheel) -> None:
    from importlib.metadata import entry_points

    from app.engines.omni.stage_plugins import model_registration

    plugins = wheel.tree("plugins/__init__.py")
    (group,) = [
        node.value.value
        for node in plugins.body
        if isinstance(node, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == "OMNI_DEFAULT_PLUGINS_GROUP" for t in node.targets)
        and isinstance(node.value, ast.Constant)
    ]
    # vllm-omni runs the group's functions in each process it loads its plugins in (the stage workers among them)
    loader = function_def(plugins, "load_omni_general_plugins")
    assert any(isinstance(n, ast.Name) and n.id == "OMNI_DEFAULT_PLUGINS_GROUP" for n in ast.walk(loader))
    assert group == model_registration.PLUGIN_GROUP  # the group the start's check looks in (unreachable_reason)
    (ours,) = [entry for entry in entry_points(group=group) if entry.name == model_registration.PLUGIN_NAME]
    assert ours.load() is model_registration.register and ours.value == model_registration.PLUGIN_TARGET
    # ...and keeps a plugin only where VLLM_PLUGINS is unset or lists its name as it is, which the check mirrors
    by_group = ast.unparse(function_def(plugins, "load_omni_plugins_by_group"))
    assert "allowed_plugins = envs.VLLM_PLUGINS" in by_group
    assert "if allowed_plugins is None or plugin.name in allowed_plugins:" in by_group


def test_the_stages_models_are_the_ones_the_service_registers_as_classes_where_vllm_inspects_them_lazily(
    wheel: Wheel,
) -> None:
    """What app/engines/omni/model_info.py relies on: vllm-omni's registry holds every model as vLLM's lazily
    registered kind (inspected in a fresh process unless cached), a stage's config inspects its model through that
    registry, vllm-omni's plugins (the service's registers its models by name) run once a process, and the stage
    processes are spawned (a class imported in the server's process reaches none of them); a stage's model is its own
    or, where it names none (the talker), the pipeline's (engine.stage_architectures)."""
    registry = ast.unparse(wheel.tree("model_executor/models/registry.py"))
    assert "OmniModelRegistry = _ModelRegistry({**{model_arch: _LazyRegisteredModel(" in registry
    # vllm-omni's own models by the same module and class name in both registries: one model-info cache entry each
    assert "_LazyRegisteredModel(module_name=f'vllm_omni.model_executor.models.{mod_folder}.{mod_relname}'" in registry
    to_vllm = ast.unparse(function_def(wheel.tree("engine/arg_utils.py"), "register_omni_models_to_vllm"))
    assert "f'vllm_omni.model_executor.models.{mod_folder}.{mod_relname}:{cls_name}'" in to_vllm
    registry_property = function_def(class_def(wheel.tree("config/model.py"), "OmniModelConfig"), "registry")
    assert ast.unparse(registry_property.body[-1]) == "return me_models.OmniModelRegistry"
    # ...and, before that, vLLM's own ModelConfig, whose registry is vLLM's ModelRegistry: registered in both
    create = ast.unparse(
        function_def(class_def(wheel.tree("engine/arg_utils.py"), "OmniEngineArgs"), "create_model_config")
    )
    assert create.index("model_config = super().create_model_config()") < create.index(
        "OmniModelConfig.from_vllm_model_config(model_config=model_config"
    )
    plugins = function_def(wheel.tree("plugins/__init__.py"), "load_omni_general_plugins")
    assert [ast.unparse(statement) for statement in plugins.body[1:4]] == [  # after the docstring
        "global omni_plugins_loaded",
        "if omni_plugins_loaded:\n    return",
        "omni_plugins_loaded = True",
    ]
    environment = ast.unparse(function_def(wheel.tree("engine/stage_init_utils.py"), "prepare_engine_environment"))
    assert "load_omni_general_plugins()" in environment
    assert "mp.set_start_method('spawn', force=True)" in environment
    assembled = ast.unparse(wheel.tree("config/stage_config.py"))
    assert "engine_args: dict[str, Any] = {'model_arch': ps.model_arch or pipeline.model_arch or None}" in assembled
    pipeline = wheel.source("model_executor/models/qwen3_tts/pipeline.py")
    assert pipeline.count("model_arch=") == 2  # the pipeline's (the talker) and code2wav's
    assert 'model_arch="Qwen3TTSTalkerForConditionalGeneration"' in pipeline
    assert 'model_arch="Qwen3TTSCode2Wav"' in pipeline


def test_the_plugin_registers_the_model_where_vllm_checks_it_and_where_vllm_omni_builds_it(
    wheel: Wheel, monkeypatch: pytest.MonkeyPatch
) -> None:
    from app.engines.omni.stage_plugins import model_registration, window_doorbell

    # vllm-omni puts its own models in vLLM's registry too, against which vLLM's ModelConfig checks each stage's
    # architecture...
    to_vllm = function_def(wheel.tree("engine/arg_utils.py"), "register_omni_models_to_vllm")
    assert "from vllm.model_executor.models import ModelRegistry" in ast.unparse(to_vllm)
    assert [ast.unparse(call.func) for call in calls_to(to_vllm, "register_model")] == ["ModelRegistry.register_model"]
    # ...while a stage's model config builds its model from vllm-omni's
    registry_property = function_def(class_def(wheel.tree("config/model.py"), "OmniModelConfig"), "registry")
    assert ast.unparse(registry_property.body[-1]) == "return me_models.OmniModelRegistry"

    # the plugin registers the same dotted name in both (stand-ins of the two registries, which it imports by name)
    calls: list[tuple[str, str, str]] = []

    class Registry:
        def __init__(self, name: str) -> None:
            self.name = name

        def register_model(self, architecture: str, model_class: str) -> None:
            calls.append((self.name, architecture, model_class))

    for module, name in (
        ("vllm.model_executor.models", "ModelRegistry"),
        ("vllm_omni.model_executor.models.registry", "OmniModelRegistry"),
    ):
        stand_in = types.ModuleType(module)
        setattr(stand_in, name, Registry(name))
        monkeypatch.setitem(sys.modules, module, stand_in)
    connectors: list[str] = []  # and, in vllm-omni's connector factory, the connector that rings the window doorbell
    factory = types.ModuleType("vllm_omni.distributed.omni_connectors.factory")
    factory.OmniConnectorFactory = types.SimpleNamespace(  # type: ignore[attr-defined]
        list_registered_connectors=lambda: list(connectors),
        register_connector=lambda name, constructor: connectors.append(name),
    )
    monkeypatch.setitem(sys.modules, factory.__name__, factory)
    model_registration.register()
    assert connectors == [window_doorbell.CONNECTOR_NAME]
    named = [
        (architecture, f"{model_registration.CODE2WAV_MODULE}:{architecture}")
        for architecture in model_registration.CODE2WAV_ARCHITECTURES.values()
    ] + [
        (architecture, f"{model_registration.TALKER_MODULE}:{architecture}")
        for architecture in model_registration.TALKER_ARCHITECTURES.values()
    ]
    assert len(named) == 5
    assert calls == [("ModelRegistry", *each) for each in named] + [("OmniModelRegistry", *each) for each in named]


@pytest.mark.parametrize("setting", ["service", "service-folded"])
def test_each_registered_class_is_vllm_omnis_code2wav_extended_where_it_captures_the_decoder(
    wheel: Wheel, setting: str
) -> None:
    from app.engines.omni.stage_plugins import model_registration

    # the name counts as a codec decoder's with vllm-omni's Qwen3-TTS config (no rope, long positions)
    config = wheel.source("model_executor/models/qwen3_tts/configuration_qwen3_tts.py")
    assert 'any("Code2Wav" in str(a) for a in archs)' in config
    name = model_registration.CODE2WAV_ARCHITECTURES[setting]
    assert "Code2Wav" in name
    # the pipeline's stage 1 names its model in a field the service's copy replaces
    stage = class_def(wheel.tree("config/stage_config.py"), "StagePipelineConfig")
    assert any(isinstance(n, ast.AnnAssign) and getattr(n.target, "id", None) == "model_arch" for n in stage.body)
    assert 'model_arch="Qwen3TTSCode2Wav"' in wheel.source("model_executor/models/qwen3_tts/pipeline.py")

    # the class named is a subclass of vllm-omni's code2wav, imported from where the wheel defines it
    module = model_registration.CODE2WAV_MODULE
    ours = ast.parse(ROOT.joinpath(*module.split(".")).with_suffix(".py").read_text())
    (subclass,) = [node for node in ours.body if isinstance(node, ast.ClassDef) and node.name == name]
    assert [base.id for base in subclass.bases if isinstance(base, ast.Name)] == ["Qwen3TTSCode2Wav"]
    imported = {
        (node.module, alias.name) for node in ours.body if isinstance(node, ast.ImportFrom) for alias in node.names
    }
    upstream_module = "vllm_omni." + CODE2WAV_MODULE.removesuffix(".py").replace("/", ".")
    assert (upstream_module, "Qwen3TTSCode2Wav") in imported
    upstream = class_def(wheel.tree(CODE2WAV_MODULE), "Qwen3TTSCode2Wav")

    # what it overrides: the decoder's graphs are warmed up and captured in `_maybe_enable_decoder_cudagraph`
    # (keyword arguments only), which `load_weights` calls once the decoder holds its weights
    hook = function_def(upstream, "_maybe_enable_decoder_cudagraph")
    assert not hook.args.args[1:] and hook.args.kwonlyargs
    assert calls_to(hook, "enable_cudagraph")
    load = function_def(upstream, "load_weights")
    (weights_loaded,) = [call.lineno for call in calls_to(load, "load_weights")]  # AutoWeightsLoader(self).load_weights
    (graphs,) = [call.lineno for call in calls_to(load, "_maybe_enable_decoder_cudagraph")]
    assert weights_loaded < graphs
    overridden = {node.name for node in subclass.body if isinstance(node, FunctionNode)}
    assert overridden == {"_maybe_enable_decoder_cudagraph"}


def test_the_decoders_dilated_convs_are_ones_the_folded_model_folds_and_are_called_as_modules(wheel: Wheel) -> None:
    """`service-folded` makes each dilated Conv1d it finds (dilated_convs.can_fold: stride 1, no padding of its own,
    one group) a `FoldedConv1d`, whose forward takes effect only where the decoder calls the module itself. In
    vllm-omni's decoder the dilated convs are the residual units' causal convs: an `nn.Conv1d` built with the unit's
    dilation, stride 1 and one group by default, no padding (the causal conv pads before the call), and called as
    `self.conv(hidden_state)`."""
    tree = wheel.tree(TOKENIZER_MODULE)
    unit = class_def(tree, "Qwen3TTSTokenizerV2DecoderDecoderResidualUnit")
    (dilated,) = [
        call for call in ast.walk(function_def(unit, "__init__"))
        if isinstance(call, ast.Call) and any(k.arg == "dilation" for k in call.keywords)
    ]  # fmt: skip
    assert ast.unparse(dilated.func) == "Qwen3TTSTokenizerV2CausalConvNet"
    assert {k.arg for k in dilated.keywords} == {"kernel_size", "dilation"}  # stride and groups left at 1
    causal = class_def(tree, "Qwen3TTSTokenizerV2CausalConvNet")
    init = function_def(causal, "__init__")
    assert [a.arg for a in init.args.args[1:]][-2:] == ["stride", "groups"]
    assert [ast.literal_eval(d) for d in init.args.defaults[-2:]] == [1, 1]
    (built,) = [call for call in ast.walk(init) if isinstance(call, ast.Call) and ast.unparse(call.func) == "nn.Conv1d"]
    assert "padding" not in {k.arg for k in built.keywords} and len(built.args) == 3
    forward = ast.unparse(function_def(causal, "forward"))
    assert "F.pad(hidden_state, (self.padding, extra_padding)" in forward
    assert "self.conv(hidden_state)" in forward
    # no other path of the decoder runs the conv's weights itself
    assert "conv1d(" not in wheel.source(TOKENIZER_MODULE).replace("_get_extra_padding_for_conv1d(", "")


def test_every_decoder_graph_is_captured_after_an_eager_run_of_its_shape(wheel: Wheel) -> None:
    """The service's code2wav turns cuDNN's per-shape timing on before the decoder's graphs are made: cuDNN times a
    shape on its first run, which must not be inside a capture. Every capture in vllm-omni's decoder graph wrapper
    follows a call of the decoder outside the graph, in the same function."""
    decoder = class_def(wheel.tree(TOKENIZER_MODULE), "Qwen3TTSTokenizerV2Decoder")
    enable = ast.unparse(function_def(decoder, "enable_cudagraph"))
    assert "from ..segmented_graph_wrapper import CUDAGraphDecoderWrapper" in enable  # the wrapper the decoder uses
    wrapper = class_def(
        wheel.tree("model_executor/models/qwen3_tts/segmented_graph_wrapper.py"), "CUDAGraphDecoderWrapper"
    )

    def graph_captures(function: FunctionNode) -> list[int]:
        """The lines of `with torch.cuda.graph(...)` in `function`."""
        return [
            node.lineno
            for node in ast.walk(function)
            if isinstance(node, ast.With) and "torch.cuda.graph" in ast.unparse(node.items[0].context_expr)
        ]

    capturing = [
        function for function in wrapper.body if isinstance(function, FunctionNode) and graph_captures(function)
    ]
    assert len(capturing) == 4  # stateless, suffix, ICL prefix, x-vector prefix
    for function in capturing:
        eager = [  # `_ = self.decoder...(static_input ...)`, or the suffix's own runner of the decoder
            node.lineno
            for node in ast.walk(function)
            if isinstance(node, ast.Assign)
            and ast.unparse(node.targets[0]) == "_"
            and isinstance(node.value, ast.Call)
            and ast.unparse(node.value.func).startswith(("self.decoder.", "self._run_combined_suffix"))
        ]
        assert eager and min(eager) < min(graph_captures(function)), function.name


# The service's talker (app/engines/omni/stage_plugins/talker_model.py), checked against what it extends
TALKER_MODULE = "model_executor/models/qwen3_tts/qwen3_tts_talker.py"
PREDICTOR_MODULE = "model_executor/models/qwen3_tts/qwen3_tts_code_predictor_vllm.py"
WRAPPER_MODULE = "model_executor/models/common/qwen3_code_predictor.py"


def members(cls: ast.ClassDef) -> set[str]:
    """A class's methods, the attributes its body assigns, and those its methods assign on `self`."""
    names = {node.name for node in cls.body if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)}
    names |= {
        target.id
        for node in cls.body
        for target in (
            node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        )
        if isinstance(target, ast.Name)
    }
    for node in ast.walk(cls):
        targets = (
            node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        )
        for target in targets:
            if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self":
                names.add(target.attr)
    return names


def used_on(scope: ast.AST, name: str) -> set[str]:
    """The attributes read or called on the variable `name` within `scope`."""
    return {
        node.attr
        for node in ast.walk(scope)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == name
    }


def test_the_services_talker_extends_the_wheels_talker_and_predictor_with_what_they_define(wheel: Wheel) -> None:
    from app.engines.omni.stage_plugins import model_registration

    ours = ast.parse(ROOT.joinpath(*model_registration.TALKER_MODULE.split(".")).with_suffix(".py").read_text())
    bases = {
        node.name: [base.id for base in node.bases if isinstance(base, ast.Name)]
        for node in ours.body
        if isinstance(node, ast.ClassDef)
    }
    assert bases == {
        "SpeechCodePredictor": ["Qwen3TTSTalkerCodePredictorForConditionalGenerationVLLM"],
        "Sampling": [],
        "FusedCodePredictor": ["SpeechCodePredictor"],
        "CompiledOnceCodePredictor": ["Qwen3TTSTalkerCodePredictorForConditionalGenerationVLLM"],
        "SpeechQwen3TTSTalker": ["Qwen3TTSTalkerForConditionalGeneration"],
        "SpeechQwen3TTSTalkerFused": ["SpeechQwen3TTSTalker"],
        "SpeechQwen3TTSTalkerCompiledOnce": ["SpeechQwen3TTSTalker"],
    }
    assert set(model_registration.TALKER_ARCHITECTURES.values()) == {
        "SpeechQwen3TTSTalker",
        "SpeechQwen3TTSTalkerFused",
        "SpeechQwen3TTSTalkerCompiledOnce",
    }
    imported = {(n.module, a.name) for n in ours.body if isinstance(n, ast.ImportFrom) for a in n.names}
    for module, name in (
        (TALKER_MODULE, "Qwen3TTSTalkerForConditionalGeneration"),
        (PREDICTOR_MODULE, "Qwen3TTSTalkerCodePredictorForConditionalGenerationVLLM"),
    ):
        assert ("vllm_omni." + module.removesuffix(".py").replace("/", "."), name) in imported
        class_def(wheel.tree(module), name)  # defined where it is imported from
    # the pipeline's stage 0 names the talker in the field the service's copy replaces
    assert 'model_arch="Qwen3TTSTalkerForConditionalGeneration"' in wheel.source(
        "model_executor/models/qwen3_tts/pipeline.py"
    )

    # the wheel's talker builds its predictor in __init__, under the predictor's own vLLM config, with the keywords the
    # service's passes, and sets its batch buckets after (which the service's copies onto its own)
    init = ast.unparse(
        function_def(class_def(wheel.tree(TALKER_MODULE), "Qwen3TTSTalkerForConditionalGeneration"), "__init__")
    )
    assert (
        "self.code_predictor = Qwen3TTSTalkerCodePredictorForConditionalGenerationVLLM(vllm_config=self."
        "_code_predictor_vllm_config, config=self.talker_config.code_predictor_config, "
        "talker_config=self.talker_config, prefix='code_predictor')"
    ) in init
    assert init.index("self.code_predictor = ") < init.index("self.code_predictor.configure_mtp_execution_buckets(")

    # the predictor's forward: the same parameters in the same order as the one it overrides
    wrapper = class_def(wheel.tree(WRAPPER_MODULE), "CodePredictorWrapper")
    predictor = class_def(wheel.tree(PREDICTOR_MODULE), "Qwen3TTSTalkerCodePredictorForConditionalGenerationVLLM")
    assert [b.id for b in predictor.bases if isinstance(b, ast.Name)] == ["CodePredictorWrapper"]
    service_predictor = class_def(ours, "SpeechCodePredictor")
    assert [a.arg for a in function_def(service_predictor, "forward").args.args] == [
        a.arg for a in function_def(wrapper, "forward").args.args
    ]
    # everything it uses on itself is its own or the wheel's predictor's, as is everything the compiled-once one uses
    upstream = members(wrapper) | members(predictor) | {"config", "training"}  # set by nn.Module / the wrapper
    assert used_on(service_predictor, "self") - members(service_predictor) <= upstream
    assert used_on(class_def(ours, "CompiledOnceCodePredictor"), "self") - {"_setup_compile"} <= upstream
    # and what it uses of the layers is theirs (the attention module's, the decoder layer's, the inner model's)
    attention = members(class_def(wheel.tree(WRAPPER_MODULE), "CodePredictorAttention"))
    assert used_on(service_predictor, "attention") <= attention
    assert used_on(service_predictor, "layer") <= members(
        class_def(wheel.tree(WRAPPER_MODULE), "CodePredictorDecoderLayer")
    )
    assert used_on(service_predictor, "model") <= members(
        class_def(wheel.tree(WRAPPER_MODULE), "CodePredictorBaseModel")
    )
    # what the fused kernels read of the same modules (`predictor_kernels.Predictor.of`) is theirs too, the rotary
    # embedding's tables among them (buffers it registers by name), and vllm-omni's RMSNorm scales in float32, rounds,
    # then applies its weight, as the kernels do
    kernels = ast.parse(ROOT.joinpath("app/engines/omni/stage_plugins/predictor_kernels.py").read_text())
    read = function_def(class_def(kernels, "Predictor"), "of")
    assert used_on(read, "attention") <= attention
    assert used_on(read, "mlp") <= members(class_def(wheel.tree(WRAPPER_MODULE), "CodePredictorMLP"))
    assert used_on(read, "model") - {"parameters"} <= members(  # nn.Module's
        class_def(wheel.tree(WRAPPER_MODULE), "CodePredictorBaseModel")
    )
    assert used_on(read, "layer") - {"self_attn", "mlp"} <= members(
        class_def(wheel.tree(WRAPPER_MODULE), "CodePredictorDecoderLayer")
    )
    rotary = ast.unparse(class_def(wheel.tree(WRAPPER_MODULE), "_RotaryEmbedding"))
    assert (
        {f"self.register_buffer('{name}'" for name in used_on(read, "rotary")}
        <= {f"self.register_buffer('{name}'" for name in ("cos_cached", "sin_cached") if f"'{name}'" in rotary}
        == {"self.register_buffer('cos_cached'", "self.register_buffer('sin_cached'"}
    )
    norm = ast.unparse(function_def(class_def(wheel.tree(WRAPPER_MODULE), "_RMSNorm"), "forward_native"))
    assert "hidden_states * torch.rsqrt(variance + self.variance_epsilon)" in norm
    assert "return self.weight * hidden_states.to(input_dtype)" in norm
    # the per-call sampling it keeps: temperature, then top-k, then the wrapper's Gumbel-max on the given uniforms
    forward = ast.unparse(function_def(wrapper, "forward"))
    assert "scaled = logits * inv_temperature" in forward and "scaled.topk(top_k, dim=-1)" in forward
    assert "self._sample_codes_gumbel(scaled, generator=sample_generator, uniforms=step_uniforms)" in forward


def init_parameters(cls: ast.ClassDef) -> list[str] | None:
    """The parameters of a class's own __init__ (None where it defines none): positional, *args, keyword-only,
    **kwargs, as `inspect.signature` names them."""
    inits = [n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"]
    if not inits:
        return None
    args = inits[0].args
    return (
        [a.arg for a in args.posonlyargs + args.args]
        + ([args.vararg.arg] if args.vararg else [])
        + [a.arg for a in args.kwonlyargs]
        + ([args.kwarg.arg] if args.kwarg else [])
    )


def test_vllm_builds_each_registered_model_with_its_config_and_prefix(wheel: Wheel) -> None:
    """vLLM 0.30 builds a stage's model with `model_class(vllm_config=..., prefix=...)` only where
    `inspect.signature(model_class.__init__)` names both (vllm/model_executor/model_loader/utils.py,
    initialize_model); otherwise it guesses an old-style class's arguments and the build fails (`__init__(*args,
    **kwargs)` did: the talker was built with none). So a registered class's own __init__ takes them by name, as the
    wheel class it extends does."""
    from app.engines.omni.stage_plugins import model_registration

    wheel_talker = class_def(wheel.tree(TALKER_MODULE), "Qwen3TTSTalkerForConditionalGeneration")
    assert init_parameters(wheel_talker) == ["self", "vllm_config", "prefix"]
    checked = 0
    for module, names in (
        (model_registration.TALKER_MODULE, model_registration.TALKER_ARCHITECTURES.values()),
        (model_registration.CODE2WAV_MODULE, model_registration.CODE2WAV_ARCHITECTURES.values()),
    ):
        tree = ast.parse(ROOT.joinpath(*module.split(".")).with_suffix(".py").read_text())
        for name in names:
            parameters = init_parameters(class_def(tree, name))
            if parameters is not None:  # one it inherits is checked where it is defined (the wheel's: above)
                assert parameters == ["self", "vllm_config", "prefix"], f"{name}.__init__{tuple(parameters)}"
                checked += 1
    assert checked >= 1  # the talker defines its own


# What the service's predictor computes the way vllm-omni's does, by calling these (or, for the wrapper's forward,
# redoing it over a cache): their source as the pinned wheel has it, so that a new vllm-omni whose layers or sampling
# changed fails here and the predictor is checked again (on the GPU: tests/gpu/test_talker_model.py) before it ships.
PREDICTOR_MATHS = {
    ("CodePredictorAttention", "forward"): "70922185b315e6c8",
    ("CodePredictorAttention", "_split_qkv"): "3c1df4d83cdaabed",
    ("CodePredictorDecoderLayer", "forward"): "7033c7d9ce0db437",
    ("CodePredictorBaseModel", "forward"): "0707b90195942852",
    ("CodePredictorMLP", "forward"): "5dfb0675047cc686",
    ("_RotaryEmbedding", "_lookup"): "9c782e1af28c0759",
    ("_RotaryEmbedding", "forward_native"): "e483a133c4c9d985",
    ("_RMSNorm", "forward_native"): "370bd0bcab19a898",
    ("_RMSNorm", "forward_cuda"): "ae2e462dc66d5247",
    ("CodePredictorWrapper", "forward"): "5e60b5b63de5704a",
    ("CodePredictorWrapper", "_sample_codes_gumbel"): "dae1a22b628313cf",
    # the set-up CompiledOnceCodePredictor redoes with one change (automatic dynamic shapes for dynamic=False), and
    # the warm-up it keeps, whose order (smallest bucket first) makes that two graphs
    ("CodePredictorWrapper", "_setup_compile"): "39cab76f406f43f0",
    ("CodePredictorWrapper", "_warmup_buckets"): "2c7b19913a9354a9",
}


def test_the_predictor_maths_the_service_mirrors_is_the_wheels_it_was_checked_against(wheel: Wheel) -> None:
    tree, source = wheel.tree(WRAPPER_MODULE), wheel.source(WRAPPER_MODULE)
    found = {
        (cls, name): hashlib.sha256(
            (ast.get_source_segment(source, function_def(class_def(tree, cls), name)) or "").encode()
        ).hexdigest()[:16]
        for cls, name in PREDICTOR_MATHS
    }
    assert found == PREDICTOR_MATHS
    # the set-up compiles with dynamic=False, and the warm-up goes through the buckets in their (ascending) order
    set_up = ast.unparse(function_def(class_def(tree, "CodePredictorWrapper"), "_setup_compile"))
    assert "torch.compile(self.model.forward, dynamic=False, options={'epilogue_fusion': False})" in set_up
    assert "return sorted(set(bucket_sizes))" in ast.unparse(
        function_def(class_def(tree, "CodePredictorWrapper"), "_batch_bucket_sizes")
    )
    # its forward runs in inference mode, as the service's does (compiled code guards on the mode it was warmed in)
    forward = function_def(class_def(tree, "CodePredictorWrapper"), "forward")
    assert [ast.unparse(d) for d in forward.decorator_list] == ["torch.inference_mode()"]


def test_a_stages_kv_cache_budget_is_an_override_its_worker_takes_without_measuring(wheel: Wheel) -> None:
    """The talker's budget for a parallel start (app/engines/omni/stage_memory.py) is a stage override vllm-omni
    accepts, and its GPU worker returns it from determine_available_memory before any measurement."""
    overrides = class_def(wheel.tree("config/omni_config.py"), "_CacheEngineOverrides")
    assert "kv_cache_memory_bytes" in {
        node.target.id
        for node in overrides.body
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
    }
    measure = function_def(class_def(wheel.tree("worker/base.py"), "OmniGPUWorkerBase"), "determine_available_memory")
    statements = [node for node in measure.body if not isinstance(node, ast.Expr)]  # after the docstring
    first = statements[0]
    assert isinstance(first, ast.If) and "kv_cache_memory_bytes" in ast.unparse(first.test)
    assert any(isinstance(node, ast.Return) for node in first.body)
    assert "memory_profiling" not in ast.unparse(first)  # the measurement comes after it


PROMPT_BUILDER_MODULE = "model_executor/models/qwen3_tts/prompt_embeds_builder.py"


def test_the_talker_builds_each_prompt_through_the_builder_attribute_the_prompt_batch_wraps(wheel: Wheel) -> None:
    """SPEECH_OMNI__PROMPT_BATCH (app/engines/omni/stage_plugins/prompt_batch.py) replaces the talker's
    `_prompt_builder.build_prompt_embeds` on the instance, taking keywords only: vllm-omni's talker makes the builder
    in its __init__ and calls that method through the attribute, by keyword, with `task_type` and `info_dict`; the
    builder's method takes exactly those."""
    talker = class_def(wheel.tree(TALKER_MODULE), "Qwen3TTSTalkerForConditionalGeneration")
    init = ast.unparse(function_def(talker, "__init__"))
    assert "self._prompt_builder = Qwen3TTSPromptEmbedsBuilder(" in init
    calls = [
        node
        for node in ast.walk(talker)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "build_prompt_embeds"
    ]
    assert calls, "the talker no longer builds its prompts through the builder"
    for call in calls:
        assert ast.unparse(call.func) == "self._prompt_builder.build_prompt_embeds"
        assert not call.args and {keyword.arg for keyword in call.keywords} == {"task_type", "info_dict"}
    builder = class_def(wheel.tree(PROMPT_BUILDER_MODULE), "Qwen3TTSPromptEmbedsBuilder")
    build = function_def(builder, "build_prompt_embeds")
    assert [arg.arg for arg in build.args.args] == ["self"] and not build.args.vararg
    assert [arg.arg for arg in build.args.kwonlyargs] == ["task_type", "info_dict"]


def test_the_decoder_graphs_a_checkpoint_cannot_replay_are_the_icl_ones_as_the_service_skips_them(
    wheel: Wheel, tmp_path: Path
) -> None:
    """vllm-omni 0.30's code2wav captures the decoder's graphs for the modes its class names (both by default, read
    from the model when it enables them), and its decoder decodes a stream with no prefix frames (no reference codes:
    CustomVoice, VoiceDesign) as `xvec`: the service's code2wav asks for `xvec` graphs only on such a checkpoint."""
    from app.engines.omni.stage_plugins.decoder_graphs import EVERY_MODE, decoder_graph_modes

    code2wav = class_def(wheel.tree(CODE2WAV_MODULE), "Qwen3TTSCode2Wav")
    (default,) = [
        node.value
        for node in code2wav.body
        if isinstance(node, ast.AnnAssign) and ast.unparse(node.target) == "decoder_cudagraph_modes"
    ]
    assert ast.literal_eval(default) == EVERY_MODE
    enable = ast.unparse(function_def(code2wav, "_maybe_enable_decoder_cudagraph"))
    assert "capture_modes=self.decoder_cudagraph_modes" in enable
    decode = ast.unparse(
        function_def(class_def(wheel.tree(TOKENIZER_MODULE), "Qwen3TTSTokenizerV2Decoder"), "batched_request_decode")
    )
    assert "mode = 'xvec' if decoder_prefix == 0 else 'icl'" in decode
    for kind, modes in (("custom_voice", ("xvec",)), ("voice_design", ("xvec",)), ("base", EVERY_MODE)):
        (tmp_path / kind).mkdir()
        (tmp_path / kind / "config.json").write_text(json.dumps({"tts_model_type": kind}))
        assert decoder_graph_modes(str(tmp_path / kind)) == modes
    (tmp_path / "odd").mkdir()
    (tmp_path / "odd" / "config.json").write_text(json.dumps({"tts_model_type": ["custom_voice"]}))
    assert decoder_graph_modes(str(tmp_path / "odd")) == EVERY_MODE
    (tmp_path / "unreadable").mkdir()
    (tmp_path / "unreadable" / "config.json").write_text("{")
    assert decoder_graph_modes(str(tmp_path / "unreadable")) == EVERY_MODE
    assert decoder_graph_modes(str(tmp_path / "missing")) == EVERY_MODE


def test_the_window_doorbell_extends_what_the_wheel_has_where_it_has_it(wheel: Wheel) -> None:
    """window_doorbell_stage.py and its stand-ins (tests/fakes/vllm_omni_0_30_data_plane.py) against the wheel."""
    from app.engines.omni.stage_plugins import window_doorbell

    # the connector it extends, and how a profile's connector name reaches a constructor of one `extra` dict
    shm = class_def(wheel.tree("distributed/omni_connectors/connectors/shm_connector.py"), "SharedMemoryConnector")
    put = function_def(shm, "put")
    assert [a.arg for a in put.args.args] == ["self", "from_stage", "to_stage", "put_key", "data"]
    assert "return (True, size, metadata)" in ast.unparse(put)
    assert {node.name for node in shm.body if isinstance(node, ast.FunctionDef)} >= {"get", "close"}
    factory = class_def(wheel.tree("distributed/omni_connectors/factory.py"), "OmniConnectorFactory")
    assert {node.name for node in factory.body if isinstance(node, ast.FunctionDef)} >= {
        "register_connector",
        "list_registered_connectors",
    }
    assert "connector = constructor(spec.extra)" in ast.unparse(function_def(factory, "create_connector"))
    # the worker it extends is the one code2wav's stage (a generation stage) gets on CUDA, and a stage override can
    # name another
    platform = function_def(
        class_def(wheel.tree("platforms/cuda/platform.py"), "CudaOmniPlatform"), "get_omni_generation_worker_cls"
    )
    assert ast.unparse(platform.body[-1]) == "return 'vllm_omni.worker.gpu_generation_worker.GPUGenerationWorker'"
    runtime_fields = {
        node.target.id
        for node in class_def(wheel.tree("config/omni_config.py"), "_RuntimeEngineOverrides").body
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
    }
    assert "worker_cls" in runtime_fields
    resolve = ast.unparse(function_def(wheel.tree("engine/stage_init_utils.py"), "resolve_worker_cls"))
    assert "if worker_cls is not None and worker_cls != 'auto':\n        return" in resolve
    # the worker's runner (v2, where the stage runs it) holds the data plane; the data plane, its one Event
    worker = class_def(wheel.tree("worker/gpu_generation_worker.py"), "GPUGenerationWorker")
    assert "self.model_runner = OmniGenerationModelRunner(self.vllm_config, self.device)" in ast.unparse(
        function_def(worker, "init_device")
    )
    runner = ast.unparse(
        function_def(class_def(wheel.tree("worker_v2/omni_model_runner.py"), "OmniGPUModelRunner"), "__init__")
    )
    assert f"self.{window_doorbell.DATA_PLANE} = OmniRunnerDataPlane(" in runner
    runtime = wheel.source("distributed/omni_connectors/model_runner/omni_connector_runtime.py")
    assert f"self.{window_doorbell.WAKEUP} = threading.Event()" in runtime
    # every use of that Event in the wheel is one ThreadWakeups has: wait, clear, set (is_set too)
    uses = set()
    for _module, source in wheel.sources():
        if window_doorbell.WAKEUP not in source:
            continue
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute):
                if node.value.attr == window_doorbell.WAKEUP:
                    uses.add(node.attr)
    assert uses and uses <= {"wait", "clear", "set", "is_set"}, uses
    assert all(hasattr(window_doorbell.ThreadWakeups, use) for use in uses)
    # the receiving thread's look, found nothing: waits on that Event up to 5 ms (what a ring ends)
    transport = function_def(
        class_def(
            wheel.tree("distributed/omni_connectors/model_runner/omni_connector_payload_transport.py"),
            "_OmniConnectorPayloadTransportMixin",
        ),
        "_recv_loop",
    )
    assert f"self.{window_doorbell.WAKEUP}.wait(timeout=0.005)" in ast.unparse(transport)
    # the key a stream's n-th window is written under, whose request the connector records (`request_of`)
    enqueue = function_def(
        class_def(
            wheel.tree("distributed/omni_connectors/model_runner/omni_connector_payload_transport.py"),
            "_OmniConnectorPayloadTransportMixin",
        ),
        "_enqueue_chunk_payload",
    )
    assert "connector_put_key = f'{request_id}_{self._stage_id}_{chunk_id}'" in ast.unparse(enqueue)
    assert window_doorbell.request_of("speech-ab12_0_7") == "speech-ab12"


def test_code2wavs_timeline_worker_extends_the_worker_a_generation_stage_gets(wheel: Wheel) -> None:
    """code2wav_worker.py's TimelineGenerationWorker and its stand-in against the wheel: the generation worker the CUDA
    platform gives code2wav's stage, which a stage override can replace, and which leaves execute_model and
    sample_tokens to vLLM's worker (whose scheduler output's `num_scheduled_tokens` names the streams a step runs)."""
    platform = function_def(
        class_def(wheel.tree("platforms/cuda/platform.py"), "CudaOmniPlatform"), "get_omni_generation_worker_cls"
    )
    assert ast.unparse(platform.body[-1]) == "return 'vllm_omni.worker.gpu_generation_worker.GPUGenerationWorker'"
    worker = class_def(wheel.tree("worker/gpu_generation_worker.py"), "GPUGenerationWorker")
    assert [ast.unparse(base) for base in worker.bases] == ["OmniWorkerMixin", "OmniGPUWorkerBase"]
    for where, name in (
        ("worker/gpu_generation_worker.py", "GPUGenerationWorker"),
        ("worker/mixins.py", "OmniWorkerMixin"),
        ("worker/base.py", "OmniGPUWorkerBase"),  # vLLM's GPUWorker's, below it
    ):
        cls = class_def(wheel.tree(where), name)
        defined = {node.name for node in cls.body if isinstance(node, ast.FunctionDef)}
        assert not {"execute_model", "sample_tokens"} & defined, name
    # the model runner v2 (`model_runner: v2`, as the service's profiles set it): a step's execute_model returns None,
    # its sample_tokens the output with its copy to the host under way, done when its blocking copy_event is (the
    # worker's window_copied)
    runner = wheel.tree("worker_v2/omni_generation_model_runner.py")
    execute = function_def(class_def(runner, "OmniGenerationModelRunner"), "execute_model")
    assert ast.unparse(execute.body[-1]) == "return None"
    sample = function_def(class_def(runner, "OmniGenerationModelRunner"), "sample_tokens")
    assert "async_output = OmniGenerationAsyncOutput(" in ast.unparse(sample)
    assert "return async_output" in ast.unparse(sample)
    output = class_def(runner, "OmniGenerationAsyncOutput")
    init = ast.unparse(function_def(output, "__init__"))
    assert "self.copy_event = torch.cuda.Event(blocking=True)" in init and "self.copy_event.record(copy_stream)" in init
    assert ast.unparse(function_def(output, "get_output").body[0]) == "self.copy_event.synchronize()"


def test_the_talkers_timeline_worker_extends_the_worker_a_talker_stage_gets(wheel: Wheel) -> None:
    """talker_worker.py's TimelineARWorker and its stand-in (tests/fakes/vllm_omni_0_30_data_plane.py) against the
    wheel: the AR worker the CUDA platform gives an `ar` stage (the talker), which a stage override can replace."""
    platform = function_def(
        class_def(wheel.tree("platforms/cuda/platform.py"), "CudaOmniPlatform"), "get_omni_ar_worker_cls"
    )
    assert ast.unparse(platform.body[-1]) == "return 'vllm_omni.worker.gpu_ar_worker.GPUARWorker'"
    worker = class_def(wheel.tree("worker/gpu_ar_worker.py"), "GPUARWorker")
    # it leaves execute_model to vLLM's worker, whose scheduler output names the requests new to this step
    assert "execute_model" not in {node.name for node in worker.body if isinstance(node, ast.FunctionDef)}


def test_the_talker_step_sections_vllm_omni_owns_are_its_methods(wheel: Wheel) -> None:
    """step_clock.py times a talker step's sections by wrapping methods on the objects that own them; those of vllm-omni
    (not vLLM's, whose wheel is not fetched here) against the wheel: its model state's, and the prompt builder the
    talker keeps as `_prompt_builder`. GPUARWorker leaves `sample_tokens` to vLLM's worker, as `execute_model`."""
    from app.engines.omni.stage_plugins.step_clock import SECTIONS

    methods = {path + "." + method for _, path, method in SECTIONS}
    state = class_def(wheel.tree("worker_v2/model_states/omni_model_state.py"), "OmniModelState")
    for method in ("run_preprocess", "_call_mtp_runner", "run_postprocess"):
        assert "model_state." + method in methods
        function_def(state, method)
    assert "model._prompt_builder.build_prompt_embeds" in methods
    talker = wheel.tree("model_executor/models/qwen3_tts/qwen3_tts_talker.py")
    init = function_def(class_def(talker, "Qwen3TTSTalkerForConditionalGeneration"), "__init__")
    assert any(
        isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == "self._prompt_builder"
        and ast.unparse(node.value).startswith("Qwen3TTSPromptEmbedsBuilder(")
        for node in ast.walk(init)
    )  # fmt: skip
    builder = wheel.tree("model_executor/models/qwen3_tts/prompt_embeds_builder.py")
    function_def(class_def(builder, "Qwen3TTSPromptEmbedsBuilder"), "build_prompt_embeds")
    worker = class_def(wheel.tree("worker/gpu_ar_worker.py"), "GPUARWorker")
    assert "sample_tokens" not in {node.name for node in worker.body if isinstance(node, ast.FunctionDef)}


def test_the_request_summary_tables_are_info_records_of_the_logger_the_engine_quiets(wheel: Wheel) -> None:
    """The omni engine holds `REQUEST_SUMMARY_LOGGER` at WARNING unless SPEECH_OMNI__REQUEST_SUMMARY_LOG asks for the
    tables: in the wheel, the module that builds them logs through `init_logger(__name__)` (that logger's name), and
    every table goes out with `logger.info`."""
    from app.engines.omni.engine import REQUEST_SUMMARY_LOGGER

    module = "metrics/stats.py"
    assert REQUEST_SUMMARY_LOGGER == "vllm_omni." + module.removesuffix(".py").replace("/", ".")
    tree = wheel.tree(module)
    assigned = [
        node.value
        for node in tree.body
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["logger"]
    ]
    assert len(assigned) == 1 and ast.unparse(assigned[0]) == "init_logger(__name__)"
    summary = function_def(class_def(tree, "OrchestratorAggregator"), "build_and_log_summary")
    tables = [
        node.func.attr
        for node in ast.walk(summary)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "logger"
        and any("_format_table" in ast.unparse(arg) for arg in node.args)
    ]
    assert tables and set(tables) == {"info"}, tables


QWEN3_TTS_PRODUCER = "model_executor/stage_input_processors/qwen3_tts.py"


def test_the_batch_builder_that_frames_as_lists_follows_is_vllm_omnis_and_its_producer_reads_frames_as_lists(
    wheel: Wheel,
) -> None:
    """SPEECH_OMNI__FRAMES_AS_LISTS (app/engines/omni/stage_plugins/talker_windows.py, `batch_with_frames_as_lists`)
    is vllm-omni's `talker2code2wav_async_chunk_batch` step for step but for how a kept frame is appended: its helpers
    and its per-stream producer, called as the service calls them. That producer indexes a window's frames code by
    code and joins reference codes to them as lists, and the connector runtime declares the frames lists of ints: a
    frame kept as a list gives the same window codes."""
    tree = wheel.tree(QWEN3_TTS_PRODUCER)
    batch = ast.unparse(function_def(tree, "talker2code2wav_async_chunk_batch"))
    for step in (
        "frame = _extract_last_frame(pooling_output)",
        "_should_append_async_frame(pooling_output, frame)",
        "ref_code = pooling_output.get('codes', {}).get('ref')",
        "request_payload.get(request_id) is None",
        "copied = _copy_async_chunk_tensors_to_cpu(selected)",
        "value = value.reshape(shape)",
        "_append_tensor_frame(transfer_manager, request_id, value)",
        "request_payload[request_id] = value.contiguous()",
        "talker2code2wav_async_chunk(transfer_manager=transfer_manager, multimodal_output={}, request=request, "
        "is_finished=finished)",
    ):
        assert step in batch, step
    append = ast.unparse(function_def(tree, "_append_tensor_frame"))
    assert "code_prompt_token_ids[request_id].append(frame.detach().to(torch.long).reshape(-1).contiguous())" in append
    producer = ast.unparse(function_def(tree, "talker2code2wav_async_chunk"))
    assert "[window_frames[f][q] for q in range(num_quantizers) for f in range(num_frames)]" in producer
    assert "ref_frames = ref_context.tolist()" in producer and "window_frames = ref_frames + window_frames" in producer
    assert "num_quantizers = len(window_frames[0])" in producer
    runtime = wheel.source("distributed/omni_connectors/model_runner/omni_connector_runtime.py")
    assert "_code_prompt_token_ids: dict[str, list[list[int]]]" in runtime
    # the batch builder as read when batch_with_frames_as_lists was written: a step added to it in another release
    # must be added there too (then this digest follows)
    source = wheel.source(QWEN3_TTS_PRODUCER)
    digests = {
        name: hashlib.sha256(str(ast.get_source_segment(source, function_def(tree, name))).encode()).hexdigest()[:16]
        for name in ("talker2code2wav_async_chunk_batch", "_append_tensor_frame")
    }
    assert digests == {
        "talker2code2wav_async_chunk_batch": "0eed3e042e65b4ae",
        "_append_tensor_frame": "771650bd7ed0ea11",
    }
