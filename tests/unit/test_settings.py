"""Settings grouped per engine (`settings.omni`, `settings.embedded`, read from SPEECH_<ENGINE>__<FIELD>), the old
flat names still read (environment and keyword arguments) and logged as deprecated, and each engine given only its
own group."""

from __future__ import annotations

import inspect
import json
import logging
import os
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
from pydantic import BaseModel, TypeAdapter, ValidationError

import app.cli
from app.engines import create_engine, engine_available, omni_engine
from app.engines.embedded import EmbeddedEngine
from app.engines.omni import OmniEngine
from app.settings import (
    FLAT_NAMES,
    MOVED_PATHS,
    EmbeddedSettings,
    InvalidSettings,
    OmniSettings,
    Settings,
    deprecated_env_names,
    load_settings,
    log_env_warnings,
    log_settings_warnings,
    moved_path_env,
    settings_help,
    settings_set,
    unknown_env_names,
)
from app.speech.options import VoiceName
from app.voices import MAX_VOICE_NAME_CHARS

ROOT = Path(__file__).resolve().parents[2]

# One value per old flat name: (as the environment gives it, as the engine group holds it), unlike the default.
EXAMPLES: dict[str, tuple[str, object]] = {
    "embedded_workers": ("3", 3),
    "embedded_threads_per_worker": ("2", 2),
    "model": ("/models/qwen", "/models/qwen"),
    "served_model_name": ("my-voice", "my-voice"),
    "deploy_config": ("deploy/vllm-omni/throughput.yaml", "deploy/vllm-omni/throughput.yaml"),
    "stage_overrides": ('{"0": {"max_num_seqs": 8}}', {"0": {"max_num_seqs": 8}}),
    "load_format": ("dummy", "dummy"),
    "compile_cache_dir": ("/cache", "/cache"),
    "omni_stage_init_timeout_s": ("60", 60),
    "omni_init_timeout_s": ("90", 90),
    "omni_warmup_batch_sizes": ("1,2,8", [1, 2, 8]),
    "omni_sentence_pipeline": ("true", True),
    "omni_code2wav_scheduler": ("", ""),
    "omni_cuda_mps": ("1", True),
    "omni_fixed_length": ("true", True),
}


# engine settings added after the groups: SPEECH_<GROUP>__<FIELD> only
BORN_GROUPED = {
    ("omni", "parallel_stage_init"),
    ("omni", "profiler_stacks"),
    ("omni", "code2wav_model"),
    ("omni", "talker_model"),
    ("omni", "engine_stats"),
    ("omni", "request_summary_log"),
    ("omni", "switch_interval_ms"),
    ("omni", "fused_kernels"),
    ("omni", "fused_dependent_launch"),
    ("omni", "lever_switch_file"),
    ("omni", "prompt_batch"),
    ("omni", "frames_as_lists"),
}


@pytest.fixture(autouse=True)
def no_speech_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only what a test sets: no SPEECH_* variable of the machine running the tests."""
    for key in list(os.environ):
        if key.upper().startswith("SPEECH_"):
            monkeypatch.delenv(key)


def group_value(settings: Settings, flat: str) -> object:
    group, field = FLAT_NAMES[flat]
    return getattr(getattr(settings, group), field)


def refusal() -> str:
    """The refusal of the settings the environment gives now (a test has set it), as the server's start says it."""
    with pytest.raises(InvalidSettings) as refused:
        load_settings()
    return str(refused.value)


def test_every_old_flat_name_has_an_example_and_a_grouped_field_that_names_it() -> None:
    assert set(EXAMPLES) == set(OTHERS) == set(FLAT_NAMES)
    groups = {"embedded": EmbeddedSettings, "omni": OmniSettings}
    taken = set()
    for flat, (group, field) in FLAT_NAMES.items():
        info = groups[group].model_fields[field]
        assert f"`SPEECH_{flat.upper()}`" in (info.description or ""), flat  # the settings page shows the old name
        assert EXAMPLES[flat][1] != (info.default_factory() if info.default_factory else info.default)  # type: ignore[call-arg]
        taken.add((group, field))
    # every engine setting that existed flat is mapped, and those born in their group never had a flat name;
    # nothing of the service moved into a group
    assert taken | BORN_GROUPED == {(g, f) for g, model in groups.items() for f in model.model_fields}
    assert not taken & BORN_GROUPED
    assert not set(FLAT_NAMES) & set(Settings.model_fields)


@pytest.mark.parametrize("flat", list(FLAT_NAMES))
def test_an_old_flat_variable_is_read_into_its_group(monkeypatch: pytest.MonkeyPatch, flat: str) -> None:
    text, value = EXAMPLES[flat]
    monkeypatch.setenv(f"SPEECH_{flat.upper()}", text)
    assert group_value(Settings(), flat) == value


@pytest.mark.parametrize("flat", list(FLAT_NAMES))
def test_the_grouped_variable_is_read(monkeypatch: pytest.MonkeyPatch, flat: str) -> None:
    group, field = FLAT_NAMES[flat]
    text, value = EXAMPLES[flat]
    monkeypatch.setenv(f"SPEECH_{group.upper()}__{field.upper()}", text)
    assert group_value(Settings(), flat) == value


# A second value per name, unlike the example: set under the grouped name beside the example under the old one.
OTHERS: dict[str, tuple[str, object]] = {
    "embedded_workers": ("7", 7),
    "embedded_threads_per_worker": ("4", 4),
    "model": ("/models/other", "/models/other"),
    "served_model_name": ("other", "other"),
    "deploy_config": ("deploy/vllm-omni/customvoice.yaml", "deploy/vllm-omni/customvoice.yaml"),
    "stage_overrides": ('{"1": {"load_format": "auto"}}', {"1": {"load_format": "auto"}}),
    "load_format": ("auto", "auto"),
    "compile_cache_dir": ("/other-cache", "/other-cache"),
    "omni_stage_init_timeout_s": ("61", 61),
    "omni_init_timeout_s": ("91", 91),
    "omni_warmup_batch_sizes": ("[4]", [4]),
    "omni_sentence_pipeline": ("false", False),
    "omni_code2wav_scheduler": ("my.Scheduler", "my.Scheduler"),
    "omni_cuda_mps": ("false", False),
    "omni_fixed_length": ("false", False),
}


@pytest.mark.parametrize("flat", list(FLAT_NAMES))
def test_the_grouped_variable_wins_over_the_old_one(monkeypatch: pytest.MonkeyPatch, flat: str) -> None:
    group, field = FLAT_NAMES[flat]
    text, value = OTHERS[flat]
    assert value != EXAMPLES[flat][1]
    monkeypatch.setenv(f"SPEECH_{flat.upper()}", EXAMPLES[flat][0])
    monkeypatch.setenv(f"SPEECH_{group.upper()}__{field.upper()}", text)
    assert group_value(Settings(), flat) == value


def test_old_and_grouped_variables_of_one_engine_combine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPEECH_DEPLOY_CONFIG", "old.yaml")
    monkeypatch.setenv("SPEECH_OMNI__CUDA_MPS", "true")
    monkeypatch.setenv("speech_omni_fixed_length", "true")  # names are read case-insensitively, as before
    omni = Settings().omni
    assert (omni.deploy_config, omni.cuda_mps, omni.fixed_length) == ("old.yaml", True, True)


@pytest.mark.parametrize("flat", list(FLAT_NAMES))
def test_an_old_flat_keyword_argument_is_read_into_its_group(flat: str) -> None:
    value = EXAMPLES[flat][1]
    assert group_value(Settings(**{flat: value}), flat) == value
    assert group_value(Settings.model_validate({flat: value}), flat) == value


def test_keyword_arguments_win_over_the_environment_and_grouped_ones_over_flat_ones(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SPEECH_OMNI__DEPLOY_CONFIG", "from-env.yaml")
    monkeypatch.setenv("SPEECH_EMBEDDED_WORKERS", "5")
    settings = Settings(deploy_config="flat-kwarg.yaml", embedded_workers=2)
    assert (settings.omni.deploy_config, settings.embedded.workers) == ("flat-kwarg.yaml", 2)
    both = Settings(deploy_config="flat.yaml", omni={"deploy_config": "grouped.yaml"})
    assert both.omni.deploy_config == "grouped.yaml"
    given = OmniSettings(model="/m")
    assert Settings(omni=given, load_format="dummy").omni == given  # a whole group object is taken as it is


def test_deprecated_variables_are_logged_with_their_new_names(caplog: pytest.LogCaptureFixture) -> None:
    env = {"SPEECH_DEPLOY_CONFIG": "a.yaml", "SPEECH_OMNI__DEPLOY_CONFIG": "b.yaml", "speech_embedded_workers": "2"}
    assert deprecated_env_names(env) == [
        ("SPEECH_EMBEDDED_WORKERS", "SPEECH_EMBEDDED__WORKERS"),
        ("SPEECH_DEPLOY_CONFIG", "SPEECH_OMNI__DEPLOY_CONFIG"),
    ]
    with caplog.at_level(logging.WARNING, logger="app.settings"):
        log_env_warnings(env)
    messages = [record.getMessage() for record in caplog.records]
    assert messages == [
        "SPEECH_EMBEDDED_WORKERS is deprecated: set SPEECH_EMBEDDED__WORKERS instead",
        "SPEECH_DEPLOY_CONFIG is deprecated: set SPEECH_OMNI__DEPLOY_CONFIG instead "
        "(SPEECH_OMNI__DEPLOY_CONFIG is set too and wins)",
    ]
    caplog.clear()
    log_env_warnings({"SPEECH_OMNI__MODEL": "/m", "SPEECH_MODEL_ALIASES": "x", "SPEECH_PORT": "1"})
    assert caplog.records == []  # grouped names and the service's own settings are not deprecated


def test_a_speech_variable_no_setting_reads_is_logged_with_the_setting_it_may_have_meant(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A misspelt name had been ignored without a word (the server started on the default it meant to change)."""
    env = {
        "SPEECH_MAX_CONCURENCY": "4",  # misspelt
        "SPEECH_EMBEDDED__WORKERZ": "3",  # a group's field misspelt
        "SPEECH_OMNI_MODEL": "/m",  # one underscore where the group takes two
        "SPEECH_NOTHING_LIKE_IT": "1",
        "SPEECH_MAX_CONCURRENCY": "4",  # a setting
        "SPEECH_OMNI__MODEL": "/m",  # a group's field
        "SPEECH_OMNI": "{}",  # a group whole, as JSON
        "SPEECH_OMNI__STAGE_OVERRIDES__1": "{}",  # a nested field's key
        "SPEECH_VOICE_ALIASES__ALLOY": "vivian",  # a mapping's key
        "SPEECH_MAX_CONCURRENCY__FOO": "3",  # a plain setting has no keys: ignored by the settings
        "SPEECH_OMNI__MODEL__X": "/m",
        "SPEECH_EMBEDDED_WORKERS": "2",  # an old flat name (logged as deprecated instead)
        "SPEECH_OMNI_FUSED_KERNELS": "0",  # set by the engine for its processes
        "SPEECH_SERVER": "speech-server",  # read by the fleet's script, which starts servers in the same shell
        "SPEECH_GPU_URL": "http://127.0.0.1:8000",  # read by the GPU tests
        "PATH": "/bin",
    }
    assert unknown_env_names(env) == [
        ("SPEECH_MAX_CONCURENCY", "SPEECH_MAX_CONCURRENCY"),
        ("SPEECH_EMBEDDED__WORKERZ", "SPEECH_EMBEDDED__WORKERS"),
        ("SPEECH_OMNI_MODEL", "SPEECH_OMNI__MODEL"),
        ("SPEECH_NOTHING_LIKE_IT", None),
        ("SPEECH_MAX_CONCURRENCY__FOO", "SPEECH_MAX_CONCURRENCY"),
        ("SPEECH_OMNI__MODEL__X", "SPEECH_OMNI__MODEL"),
    ]
    with caplog.at_level(logging.WARNING, logger="app.settings"):
        log_env_warnings({"SPEECH_MAX_CONCURENCY": "4"})
    assert [record.getMessage() for record in caplog.records] == [
        "SPEECH_MAX_CONCURENCY is no setting and is ignored: did you mean SPEECH_MAX_CONCURRENCY?"
    ]


def test_every_speech_variable_the_code_names_is_a_setting_or_one_an_engine_sets_for_its_processes() -> None:
    """So that a variable the code reads is never reported as ignored, and the docstrings name real settings."""
    root = Path(__file__).resolve().parents[2] / "app"
    named = {
        match.group(0)
        for path in root.rglob("*.py")
        for match in re.finditer(r"\bSPEECH_[A-Z0-9_]*[A-Z0-9]\b", path.read_text(encoding="utf-8"))
    }
    named.discard("SPEECH_TOKENIZER_CONFIG")  # a constant's name (app/tools/qwen3_tts_model_dir.py), no variable
    assert len(named) > 30  # the scan reads the code's names
    assert {name for name in named if unknown_env_names({name: ""})} == set()


def test_the_server_logs_each_deprecated_variable_once_at_start(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("SPEECH_OMNI_CUDA_MPS", "true")
    monkeypatch.setenv("SPEECH_MODEL", "/models/qwen")
    built: list[Settings] = []

    def create_app(settings: Settings) -> SimpleNamespace:
        built.append(settings)
        return SimpleNamespace(state=SimpleNamespace(lifecycle=None))

    monkeypatch.setattr(app.cli, "create_app", create_app)
    monkeypatch.setattr(app.cli, "configure_logging", lambda level: None)  # keep pytest's log capture
    monkeypatch.setattr(app.cli, "listen", lambda host, port, flags=None: [])
    monkeypatch.setattr(app.cli.SpeechServer, "run", lambda self, sockets=None: None)
    with caplog.at_level(logging.WARNING, logger="app.settings"):
        app.cli.main(["--engine", "embedded"])
    deprecated = sorted(getattr(record, "deprecated", "") for record in caplog.records)
    assert deprecated == ["SPEECH_MODEL", "SPEECH_OMNI_CUDA_MPS"]
    assert built[0].omni.model == "/models/qwen" and built[0].omni.cuda_mps


# -- dotted paths that moved ----------------------------------------------------------------------------------------

OLD_SCHEDULER = "app.engines.omni_code2wav_scheduler.FirstAudioFirstScheduler"  # before the engines had folders


@pytest.mark.parametrize("variable", ["SPEECH_OMNI__CODE2WAV_SCHEDULER", "SPEECH_OMNI_CODE2WAV_SCHEDULER"])
def test_the_code2wav_schedulers_old_path_is_read_as_its_new_one(
    monkeypatch: pytest.MonkeyPatch, variable: str
) -> None:
    """A deployment that still names the scheduler where it used to live gets the same class from where it lives now
    (vllm-omni's stage process would fail to import the old path)."""
    new = OmniSettings().code2wav_scheduler
    assert MOVED_PATHS[OLD_SCHEDULER] == new != OLD_SCHEDULER
    monkeypatch.setenv(variable, OLD_SCHEDULER)
    assert Settings().omni.code2wav_scheduler == new
    assert Settings(omni={"code2wav_scheduler": OLD_SCHEDULER}).omni.code2wav_scheduler == new
    assert Settings(omni_code2wav_scheduler=OLD_SCHEDULER).omni.code2wav_scheduler == new
    assert Settings(omni={"code2wav_scheduler": "my.Scheduler"}).omni.code2wav_scheduler == "my.Scheduler"
    for old, moved in MOVED_PATHS.items():  # each new path names a class defined there (its module imports vllm-omni,
        module, _, name = moved.rpartition(".")  # so only its source is read)
        assert f"class {name}(" in (ROOT / (module.replace(".", "/") + ".py")).read_text(), old


def test_a_variable_set_to_an_old_path_is_logged_with_the_new_one(caplog: pytest.LogCaptureFixture) -> None:
    new = MOVED_PATHS[OLD_SCHEDULER]
    env = {"speech_omni__code2wav_scheduler": OLD_SCHEDULER, "SPEECH_OMNI__MODEL": "/m", "OTHER_TOOL": OLD_SCHEDULER}
    assert moved_path_env(env) == [("SPEECH_OMNI__CODE2WAV_SCHEDULER", OLD_SCHEDULER, new)]
    with caplog.at_level(logging.WARNING, logger="app.settings"):
        log_env_warnings(env)
    assert [record.getMessage() for record in caplog.records] == [
        f"SPEECH_OMNI__CODE2WAV_SCHEDULER={OLD_SCHEDULER} is a deprecated path, read as {new}: set that instead"
    ]
    assert caplog.records[0].deprecated == OLD_SCHEDULER  # type: ignore[attr-defined]
    caplog.clear()
    log_env_warnings({"SPEECH_OMNI__CODE2WAV_SCHEDULER": new})
    assert caplog.records == []


def test_help_lists_grouped_names_and_the_old_ones() -> None:
    text = settings_help()
    for flat, (group, field) in FLAT_NAMES.items():
        assert f"SPEECH_{group.upper()}__{field.upper()} " in text
        assert f"`SPEECH_{flat.upper()}`" in text
    assert "SPEECH_PORT " in text and "SPEECH_OMNI " not in text


# -- each engine is given only its own settings ----------------------------------------------------------------------


def test_engines_take_their_own_group_not_the_service_settings() -> None:
    assert inspect.signature(OmniEngine).parameters["settings"].annotation == "OmniSettings"
    assert inspect.signature(EmbeddedEngine).parameters["settings"].annotation == "EmbeddedSettings"
    for module in ("omni/engine.py", "embedded/engine.py"):
        source = (ROOT / "app" / "engines" / module).read_text()
        assert not re.search(r"\bSettings\b", source), module  # the service's settings object is never named


def test_the_omni_engine_gets_its_group_and_the_two_service_settings_it_needs(custom_voice_dir: Path) -> None:
    settings = Settings(
        model=str(custom_voice_dir),
        deploy_config="deploy/vllm-omni/customvoice.yaml",
        max_concurrency=6,
        max_input_chars=100,
    )
    engine = omni_engine(settings)
    assert engine._settings is settings.omni  # what it holds is its group, nothing more
    assert engine.warmup_batch_sizes() == [1, 2, 4, 6]  # the service's admission limit, passed in
    assert engine.capabilities().max_input_chars == 100


@pytest.mark.skipif(not engine_available("embedded"), reason="needs the embedded extra (hibari)")
def test_the_embedded_engine_gets_its_group_and_the_longest_input() -> None:
    served = create_engine(Settings(engine="embedded", embedded_workers=2, max_input_chars=50))
    engine = served.inner  # type: ignore[attr-defined]
    assert isinstance(engine, EmbeddedEngine)
    assert (engine._workers, engine._max_input_chars) == (2, 50)


@pytest.mark.parametrize(
    ("name", "value", "says"),
    [
        ("SPEECH_VOICE_ALIASES", '{"alloy": 5}', "SPEECH_VOICE_ALIASES: 'alloy': "),
        ("SPEECH_OMNI__STAGE_OVERRIDES", '{"1": 5}', "SPEECH_OMNI__STAGE_OVERRIDES: '1': "),
        ("SPEECH_EMBEDDED__WORKERS", "0", "SPEECH_EMBEDDED__WORKERS: "),
    ],
)
def test_a_bad_value_inside_a_mapping_setting_names_the_variable_and_then_its_key(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str, says: str
) -> None:
    """A key of a JSON mapping is no part of any variable's name (there is no SPEECH_VOICE_ALIASES__ALLOY)."""
    monkeypatch.setenv(name, value)
    refused = refusal()
    assert refused.startswith(says), refused


@pytest.mark.parametrize("value", ["inf", "nan"])
def test_a_drain_without_end_is_refused_naming_the_variable(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    """The server's graceful shutdown is counted in whole seconds from the drain's: an endless one cannot be."""
    monkeypatch.setenv("SPEECH_DRAIN_TIMEOUT_S", value)
    refused = refusal()
    assert refused.startswith("SPEECH_DRAIN_TIMEOUT_S: "), refused


def test_a_websocket_message_limit_past_the_body_limit_is_refused_naming_both(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every WebSocket message is held to the body limit first (the server's largest frame): a larger message limit
    could never take effect."""
    monkeypatch.setenv("SPEECH_WS_MAX_MESSAGE_BYTES", "200000")
    monkeypatch.setenv("SPEECH_MAX_BODY_BYTES", "100000")
    refused = refusal()
    assert refused.startswith("SPEECH_WS_MAX_MESSAGE_BYTES: ") and "SPEECH_MAX_BODY_BYTES" in refused, refused
    monkeypatch.setenv("SPEECH_WS_MAX_MESSAGE_BYTES", "100000")  # equal: every message up to the body's size
    assert load_settings().ws_max_message_bytes == 100_000


def test_a_lower_body_limit_alone_lowers_the_websocket_message_limit_with_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """The message limit left at its default (128 KiB) follows a body limit set below it: set alone, a 64 KiB body
    limit stopped the server from starting, over a variable the operator never set."""
    monkeypatch.setenv("SPEECH_MAX_BODY_BYTES", "65536")
    assert load_settings().ws_max_message_bytes == 65_536
    assert Settings(max_body_bytes=4096).ws_max_message_bytes == 4096
    monkeypatch.delenv("SPEECH_MAX_BODY_BYTES")
    assert Settings().ws_max_message_bytes == 128 * 1024  # the default under the default body limit
    with pytest.raises(ValidationError) as refused:  # a body limit of its own fault: told once, for itself
        Settings(max_body_bytes=512)
    assert [error["loc"] for error in refused.value.errors()] == [("max_body_bytes",)]


def test_a_per_key_limit_without_keys_is_logged_at_start(caplog: pytest.LogCaptureFixture) -> None:
    """An open API has no keys to count requests by: the limit does nothing, and the operator is told so."""
    with caplog.at_level(logging.WARNING, logger="app.settings"):
        log_settings_warnings(Settings(api_key_max_concurrency=2))
        log_settings_warnings(Settings(api_key_max_concurrency=2, api_keys=["k1"]))
        log_settings_warnings(Settings())
    assert [record.getMessage() for record in caplog.records] == [
        "SPEECH_API_KEY_MAX_CONCURRENCY is set but the API has no keys (SPEECH_API_KEYS, SPEECH_API_KEYS_FILE): "
        "it limits nothing"
    ]


def test_a_bad_value_of_a_deprecated_variable_is_named_as_set(monkeypatch: pytest.MonkeyPatch) -> None:
    """The operator set the old name; the refusal names it first, then the name it is read as."""
    monkeypatch.setenv("SPEECH_EMBEDDED_WORKERS", "0")
    refused = refusal()
    assert refused.startswith("SPEECH_EMBEDDED_WORKERS (deprecated: SPEECH_EMBEDDED__WORKERS): "), refused


# every settings group: each engine's
GROUPS = [
    name
    for name, info in Settings.model_fields.items()
    if isinstance(info.annotation, type) and issubclass(info.annotation, BaseModel)
]


def test_each_engine_has_a_settings_group() -> None:
    assert sorted(GROUPS) == ["embedded", "omni", "sglang"]


@pytest.mark.parametrize("group", GROUPS)
@pytest.mark.parametrize(
    ("variable", "value", "said"),
    [
        # a group given whole, as JSON: the key was ignored without a word
        ("SPEECH_{G}", '{"worker_z": 2}', "SPEECH_{G}: 'worker_z' is no setting of the SPEECH_{G} group"),
        # ...and one of its keys as a variable of its own: logged and ignored, the server started on the defaults
        ("SPEECH_{G}__WORKER_Z", "2", "SPEECH_{G}__WORKER_Z: 'worker_z' is no setting of the SPEECH_{G} group"),
        ("SPEECH_{G}__WORKER_Z__A", "2", "SPEECH_{G}__WORKER_Z__A: 'worker_z' is no setting of the SPEECH_{G} group"),
    ],
)
def test_a_key_that_is_no_setting_of_its_group_is_refused_naming_it_and_the_group(
    monkeypatch: pytest.MonkeyPatch, group: str, variable: str, value: str, said: str
) -> None:
    monkeypatch.setenv(variable.format(G=group.upper()), value)
    refused = refusal()
    assert refused.startswith(said.format(G=group.upper())), refused
    with pytest.raises(ValidationError):  # refused however it is given
        Settings(**{group: {"worker_z": 2}})


@pytest.mark.parametrize(
    ("variable", "value", "said"),
    [
        (
            "SPEECH_EMBEDDED",
            '{"workerz": 2}',
            "SPEECH_EMBEDDED: 'workerz' is no setting of the SPEECH_EMBEDDED group: did you mean 'workers'?",
        ),
        (
            "SPEECH_EMBEDDED__WORKERZ",
            "2",
            "SPEECH_EMBEDDED__WORKERZ: 'workerz' is no setting of the SPEECH_EMBEDDED "
            "group: did you mean SPEECH_EMBEDDED__WORKERS?",
        ),
        (
            "SPEECH_OMNI__NOTHING_LIKE_IT",
            "1",
            "SPEECH_OMNI__NOTHING_LIKE_IT: 'nothing_like_it' is no setting of the "
            "SPEECH_OMNI group (speech-server --help lists them)",
        ),
    ],
)
def test_a_key_that_is_no_setting_of_its_group_is_told_the_setting_it_may_have_meant(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, said: str
) -> None:
    monkeypatch.setenv(variable, value)
    refused = refusal()
    assert refused == said


def test_a_group_whole_and_its_keys_one_by_one_still_combine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPEECH_EMBEDDED", '{"workers": 3}')
    monkeypatch.setenv("SPEECH_EMBEDDED__THREADS_PER_WORKER", "2")
    assert load_settings().embedded == EmbeddedSettings(workers=3, threads_per_worker=2)


def test_a_batch_limit_below_the_input_limit_is_refused_naming_both(monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch holds at most SPEECH_BATCH_MAX_CHARS characters of input in all: below SPEECH_MAX_INPUT_CHARS, a single
    input a request may send could never be sent in a batch."""
    monkeypatch.setenv("SPEECH_BATCH_MAX_CHARS", "1000")
    monkeypatch.setenv("SPEECH_MAX_INPUT_CHARS", "2000")
    refused = refusal()
    assert refused.startswith("SPEECH_BATCH_MAX_CHARS: ") and "SPEECH_MAX_INPUT_CHARS" in refused, refused
    monkeypatch.setenv("SPEECH_BATCH_MAX_CHARS", "2000")  # equal: the longest input fits, alone
    assert load_settings().batch_max_chars == 2000


def test_the_websocket_read_ahead_is_read_and_held_to_the_longest_input(monkeypatch: pytest.MonkeyPatch) -> None:
    """How far a WebSocket session reads its text ahead of its speech: a positive number of characters, and not below
    SPEECH_MAX_INPUT_CHARS, so that a text as long as one request's `input` is read whole, in however many messages,
    before its client reads any audio: a client that sends that much and only then listens is never held back on its
    sends (nor cut off as one that stopped reading), whatever its connection buffers."""
    assert Settings().ws_max_read_ahead_chars == 32768
    monkeypatch.setenv("SPEECH_WS_MAX_READ_AHEAD_CHARS", "8000")
    assert load_settings().ws_max_read_ahead_chars == 8000
    for value in ("0", "-1", "many"):
        monkeypatch.setenv("SPEECH_WS_MAX_READ_AHEAD_CHARS", value)
        refused = refusal()
        assert refused.startswith("SPEECH_WS_MAX_READ_AHEAD_CHARS: "), refused
    monkeypatch.setenv("SPEECH_WS_MAX_READ_AHEAD_CHARS", "1000")
    monkeypatch.setenv("SPEECH_MAX_INPUT_CHARS", "2000")
    refused = refusal()
    assert refused.startswith("SPEECH_WS_MAX_READ_AHEAD_CHARS: ") and "SPEECH_MAX_INPUT_CHARS" in refused, refused
    monkeypatch.setenv("SPEECH_WS_MAX_READ_AHEAD_CHARS", "2000")  # equal: the longest input is read whole
    assert load_settings().ws_max_read_ahead_chars == 2000


@pytest.mark.parametrize(
    ("alias", "says"),
    [
        pytest.param(
            "n" * (MAX_VOICE_NAME_CHARS + 1),
            f"is {MAX_VOICE_NAME_CHARS + 1} characters, longer than a request's `voice` may be "
            f"({MAX_VOICE_NAME_CHARS})",
            id="limit+1",
        ),
        pytest.param("n" * 100_000, "is 100000 characters", id="huge"),
        pytest.param("narr\x00ator", "a control character (U+0000)", id="control-character"),
        pytest.param("narr\u202eator", "a text-direction control (U+202E)", id="direction-control"),
        pytest.param("narr\u2028ator", "a line separator (U+2028)", id="line-separator"),
    ],
)
def test_a_voice_alias_no_request_could_name_is_refused_naming_it(
    monkeypatch: pytest.MonkeyPatch, alias: str, says: str
) -> None:
    """A request's `voice` is at most MAX_VOICE_NAME_CHARS characters on one line, without control characters: an
    alias past that could never be asked for, so the server does not start with it (it used to, silently). The
    refusal names the alias, cut short where it is long, and never repeats it whole."""
    with pytest.raises(ValidationError):
        TypeAdapter(VoiceName).validate_python(alias)  # what a request could not send...
    monkeypatch.setenv("SPEECH_VOICE_ALIASES", json.dumps({"alloy": "", alias: "ryan"}))
    with pytest.raises(InvalidSettings) as refused:
        load_settings()  # ...is no alias either
    message = str(refused.value)
    assert message.startswith(f"SPEECH_VOICE_ALIASES: the alias {alias[:64]!r}"), message
    assert says in message and "no request could name it" in message, message
    assert "n" * 65 not in message and len(message) < 400, message
    with pytest.raises(ValidationError):
        Settings(voice_aliases={alias: ""})


@pytest.mark.parametrize(
    ("aliases", "says"),
    [
        ({" alloy": "ryan"}, "the alias ' alloy' is empty or begins or ends with a space"),
        ({"narrator ": "ryan"}, "the alias 'narrator ' is empty or begins or ends with a space"),
        ({"": "ryan"}, "the alias '' is empty"),
        ({"Narrator": "ryan", "narrator": "vivian"}, "the aliases 'Narrator' and 'narrator' differ only in case"),
    ],
)
def test_a_voice_alias_a_request_could_never_reach_is_refused(
    monkeypatch: pytest.MonkeyPatch, aliases: dict[str, str], says: str
) -> None:
    """A request's voice is matched stripped and without regard to case (VoiceCatalog.resolve): an alias with a space
    at an end, an empty one, or the second of two that differ only in case could never be reached."""
    monkeypatch.setenv("SPEECH_VOICE_ALIASES", json.dumps(aliases))
    refused = refusal()
    assert refused.startswith(f"SPEECH_VOICE_ALIASES: {says}"), refused


@pytest.mark.parametrize(
    "alias",
    [
        pytest.param("n" * MAX_VOICE_NAME_CHARS, id="at-the-limit"),
        pytest.param("Erzähler Ünal 語り手", id="non-ascii"),
        pytest.param("a narrator", id="a-space"),
    ],
)
def test_a_voice_alias_a_request_can_name_is_taken(monkeypatch: pytest.MonkeyPatch, alias: str) -> None:
    assert TypeAdapter(VoiceName).validate_python(alias) == alias  # a request may send it
    monkeypatch.setenv("SPEECH_VOICE_ALIASES", json.dumps({alias: "ryan"}))
    assert load_settings().voice_aliases == {alias: "ryan"}


@pytest.mark.parametrize(
    ("variables", "says"),
    [
        (
            {"SPEECH_OMNI__PROMPT_BATCH": "true", "SPEECH_OMNI__TALKER_MODEL": "vllm-omni"},
            "SPEECH_OMNI__PROMPT_BATCH needs the service's talker: set SPEECH_OMNI__TALKER_MODEL to service, fused "
            "or compiled-once",
        ),
        (
            {
                "SPEECH_OMNI__LEVER_SWITCH_FILE": "/levers",
                "SPEECH_OMNI__TALKER_MODEL": "vllm-omni",
                "SPEECH_OMNI__FRAMES_AS_LISTS": "false",
            },
            "SPEECH_OMNI__LEVER_SWITCH_FILE with vllm-omni's talker switches frames_as_lists only: set "
            "SPEECH_OMNI__FRAMES_AS_LISTS=true",
        ),
        (
            {"SPEECH_SGLANG__PREPROCESSING_PROCESSES": "2", "SPEECH_SGLANG__PREPROCESSING": "gpu"},
            "SPEECH_SGLANG__PREPROCESSING_PROCESSES=2 needs SPEECH_SGLANG__PREPROCESSING=cpu",
        ),
    ],
)
def test_settings_that_cannot_go_together_are_refused_naming_the_variables(
    monkeypatch: pytest.MonkeyPatch, variables: dict[str, str], says: str
) -> None:
    """A group's settings refused together name the operator's variables, the one at fault first, not the group."""
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    refused = refusal()
    assert refused.startswith(says), refused


# -- what the start logs of the settings ----------------------------------------------------------------------------


def test_the_settings_set_are_named_by_their_variables_and_a_secret_only_counted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The start's log says what was set (a variable, a flag, a keyword), each by the variable an operator would
    change, the defaults left out; API keys appear as how many there are, never as themselves."""
    monkeypatch.setenv("SPEECH_MAX_QUEUE", "7")
    monkeypatch.setenv("SPEECH_API_KEYS", "sk-secret-1,sk-secret-2")
    monkeypatch.setenv("SPEECH_EMBEDDED__WORKERS", "3")
    settings = Settings(port=9001)
    assert settings_set(settings) == {
        "SPEECH_API_KEYS": "(2 hidden)",
        "SPEECH_EMBEDDED__WORKERS": 3,
        "SPEECH_MAX_QUEUE": 7,
        "SPEECH_PORT": 9001,
    }


def test_the_server_logs_the_settings_set_once_at_start(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("SPEECH_API_KEYS", "sk-secret-1")
    monkeypatch.setattr(app.cli, "create_app", lambda settings: SimpleNamespace(state=SimpleNamespace(lifecycle=None)))
    monkeypatch.setattr(app.cli, "configure_logging", lambda level: None)  # keep pytest's log capture
    monkeypatch.setattr(app.cli, "listen", lambda host, port, flags=None: [])
    monkeypatch.setattr(app.cli.SpeechServer, "run", lambda self, sockets=None: None)
    with caplog.at_level(logging.INFO):
        app.cli.main(["--engine", "embedded", "--port", "9002"])
    [record] = [record for record in caplog.records if record.getMessage() == "settings"]
    assert record.set == {"SPEECH_API_KEYS": "(1 hidden)", "SPEECH_ENGINE": "embedded", "SPEECH_PORT": 9002}
    assert "sk-secret-1" not in caplog.text
