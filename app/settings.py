"""The one settings object. Every field is also an environment variable: `SPEECH_<FIELD>` (e.g. SPEECH_PORT)."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Annotated, Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from app.audio.fetch import FetchPolicy

EngineName = Literal["auto", "embedded", "omni"]

# OpenAI's voice names, so OpenAI client code runs unchanged. The empty target means "the engine's default voice".
OPENAI_VOICES = ("alloy", "ash", "ballad", "coral", "echo", "fable", "onyx", "nova", "sage", "shimmer", "verse")


def user_voice_store(env: Mapping[str, str] = os.environ) -> str:
    """Where a user's data belongs (the XDG base directories): $XDG_DATA_HOME/speech-service/voices, else
    ~/.local/share/speech-service/voices. Never the working directory, which a service may not be able to write."""
    data_home = env.get("XDG_DATA_HOME", "")
    if not os.path.isabs(data_home):  # unset, empty or relative: the spec says to ignore it
        data_home = os.path.join(env.get("HOME") or os.path.expanduser("~"), ".local", "share")
    return os.path.join(data_home, "speech-service", "voices")


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="SPEECH_", extra="ignore")

    host: str = Field("0.0.0.0", description="Address to listen on.")
    port: int = Field(8000, ge=1, le=65535, description="Port to listen on.")
    engine: EngineName = Field(
        "auto", description="Speech engine: embedded (CPU), omni (vllm-omni on a GPU), or auto (omni when available)."
    )
    log_level: Literal["debug", "info", "warning", "error"] = Field("info", description="Log level.")
    model_aliases: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: ["tts-1", "tts-1-hd", "gpt-4o-mini-tts"],
        description="Model names accepted besides the engine's own model id (JSON list or comma-separated).",
    )
    voice_aliases: dict[str, str] = Field(
        default_factory=lambda: dict.fromkeys(OPENAI_VOICES, ""),
        description="Voice name -> engine voice id (JSON object); an empty id means the engine's default voice.",
    )
    max_input_chars: int = Field(4096, ge=1, le=4096, description="Longest accepted `input`, in characters.")
    max_concurrency: int | None = Field(
        None, ge=1, description="Syntheses at once (default per engine: embedded: workers; omni: stage-0 max_num_seqs)."
    )
    max_queue: int | None = Field(None, ge=0, description="Requests waiting for a slot (default: 2 x concurrency).")
    queue_timeout_s: float = Field(10.0, ge=0, description="Longest wait for a slot before a 429.")
    request_timeout_s: float = Field(300.0, gt=0, description="Longest synthesis; then it is aborted.")
    drain_timeout_s: float = Field(
        30.0, ge=0, description="On SIGTERM: how long accepted requests (streaming or queued) may take to finish."
    )
    request_read_timeout_s: float = Field(
        10.0, gt=0, description="Longest time a request's headers, and then its body, may take to arrive (408 beyond)."
    )
    keep_alive_timeout_s: float = Field(5.0, gt=0, description="Idle keep-alive connections are closed after this.")
    client_stall_timeout_s: float = Field(
        30.0,
        gt=0,
        description="A client that reads none of its response for this long is cut off (its stream stopped, its slot "
        "freed); above the time a real-time player takes to read ~64 KiB of audio.",
    )
    api_keys: Annotated[list[str], NoDecode] = Field(
        default_factory=list, repr=False, description="API keys (comma list); none = open API."
    )
    api_keys_file: str | None = Field(None, description="File of API keys, one per line (# comments).")
    api_key_max_concurrency: int | None = Field(
        None, ge=1, description="Requests in progress per API key (429 beyond)."
    )
    ref_audio_allowed_hosts: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Hosts ref_audio URLs may name (comma list; '.example.com' = its subdomains); none = no URLs.",
    )
    ref_audio_allow_http: bool = Field(False, description="Also fetch plain-http ref_audio URLs.")
    ref_audio_allow_private: bool = Field(
        False,
        description="Also fetch from non-public addresses (private, loopback, link-local): trusted networks only.",
    )
    ref_audio_max_bytes: int = Field(10 * 1024 * 1024, ge=1024, description="Largest reference audio accepted.")
    ref_audio_ca_bundle: str | None = Field(None, description="CA bundle for https ref_audio hosts with a private CA.")
    voice_store: str = Field(
        default_factory=user_voice_store,
        description="Directory of registered voices, created when the first is stored; share it (ReadWriteMany) "
        "between replicas. Default: speech-service/voices in the user's data directory ($XDG_DATA_HOME, else "
        "~/.local/share).",
    )
    cors_origins: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Web origins allowed to call the API from a browser (comma list, e.g. https://app.example.com, "
        "or *); none = no CORS.",
    )
    max_body_bytes: int = Field(25 * 1024 * 1024, ge=1024, description="Largest accepted request body (413 beyond).")
    sentence_max_chars: int = Field(
        250, ge=40, description="Sentences longer than this are cut at commas (then spaces) before synthesis."
    )
    ws_config_timeout_s: float = Field(
        10.0, gt=0, description="WebSocket speech: how long a new connection may take to send a valid session.config."
    )
    ws_idle_timeout_s: float = Field(
        30.0, gt=0, description="WebSocket speech: a session that sends nothing and has nothing to speak is closed."
    )
    ws_sentence_idle_s: float = Field(
        1.0,
        gt=0,
        description="WebSocket speech: text that ends like a sentence is spoken after this pause in the input, "
        "even before the next word shows that the sentence is over.",
    )
    ws_max_message_bytes: int = Field(
        128 * 1024, ge=1024, description="WebSocket speech: largest message but session.config (max_body_bytes)."
    )
    embedded_workers: int = Field(
        default_factory=lambda: max(1, os.cpu_count() or 1),
        ge=1,
        description="Embedded engine: synthesis threads, each with its own model instance (default: CPU cores).",
    )
    embedded_threads_per_worker: int = Field(1, ge=1, description="Embedded engine: onnxruntime threads per worker.")

    # -- omni engine (vllm-omni, Qwen3-TTS) ------------------------------------------------------------------------
    model: str | None = Field(None, description="Omni engine: Qwen3-TTS model directory.")
    served_model_name: str | None = Field(None, description="Omni engine: model id in the API (default: dir name).")
    deploy_config: str | None = Field(
        None, description="Omni engine: vllm-omni deploy profile (YAML), e.g. deploy/vllm-omni/customvoice.yaml."
    )
    stage_overrides: dict[str, dict[str, object]] | None = Field(
        None,
        description='Omni engine: per-stage engine arguments as JSON, e.g. {"0": {"max_num_seqs": 32}} '
        "(sampling defaults are set in the deploy profile).",
    )
    load_format: str | None = Field(None, description="Omni engine: vLLM load_format (`dummy`: random weights).")
    compile_cache_dir: str | None = Field(
        None,
        description="Omni engine: one directory for every compile cache (vLLM, Inductor, Triton); persist it and a "
        "restart skips compilation (VLLM_CACHE_ROOT, TORCHINDUCTOR_CACHE_DIR or TRITON_CACHE_DIR set explicitly win).",
    )
    omni_stage_init_timeout_s: int = Field(900, ge=30, description="Omni engine: seconds allowed per stage start.")
    omni_init_timeout_s: int = Field(1200, ge=30, description="Omni engine: seconds allowed for the whole start.")
    omni_warmup_batch_sizes: Annotated[list[int] | None, NoDecode] = Field(
        None,
        description="Omni engine: batch sizes warmed up before /ready (each new size costs a JIT compile). "
        "Default: 1, 2, 4, ... up to the admission limit.",
    )
    omni_sentence_pipeline: bool = Field(
        False, description="Omni engine: speak long text sentence by sentence (as the embedded engine always does)."
    )
    omni_code2wav_scheduler: str = Field(
        "app.engines.omni_code2wav_scheduler.FirstAudioFirstScheduler",
        description="Omni engine: code2wav (stage 1) scheduler class by dotted path; empty = vllm-omni's own. "
        "vllm-omni 0.30 refuses a scheduler_cls in SPEECH_STAGE_OVERRIDES: set this instead.",
    )
    omni_cuda_mps: bool = Field(
        False,
        description="Omni engine: run its stage processes (talker, codec decoder) as clients of a CUDA MPS daemon "
        "this server starts, so that their kernels share the GPU side by side instead of time-sliced; needs "
        "nvidia-cuda-mps-control (the NVIDIA driver's utilities). Under an MPS daemon set by CUDA_MPS_PIPE_DIRECTORY "
        "(a GPU shared through the device plugin's MPS), that one serves.",
    )
    omni_fixed_length: bool = Field(
        False, description="Omni engine, benchmarks on random weights only: generate exactly max_new_tokens."
    )

    @field_validator(
        "model_aliases", "omni_warmup_batch_sizes", "api_keys", "ref_audio_allowed_hosts", "cors_origins", mode="before"
    )
    @classmethod
    def _list_from_env(cls, value: object) -> object:
        if isinstance(value, str):
            text = value.strip()
            if text.startswith("["):
                return json.loads(text)
            return [part.strip() for part in text.split(",") if part.strip()]
        return value

    @field_validator("cors_origins")
    @classmethod
    def _origins(cls, origins: list[str]) -> list[str]:
        cleaned = [origin.rstrip("/") for origin in origins]
        for origin in cleaned:
            if origin != "*" and not origin.startswith(("http://", "https://")):
                raise ValueError(f"a CORS origin is scheme://host[:port] or *, not {origin!r}")
        return cleaned

    def fetch_policy(self) -> FetchPolicy:
        return FetchPolicy(
            allowed_hosts=frozenset(h.lower().rstrip(".") for h in self.ref_audio_allowed_hosts),
            allow_http=self.ref_audio_allow_http,
            allow_private=self.ref_audio_allow_private,
            max_bytes=self.ref_audio_max_bytes,
            ca_bundle=self.ref_audio_ca_bundle,
        )


def settings_help() -> str:
    """A table of every setting for `--help`."""
    lines = ["settings (environment variables):"]
    for name, info in Settings.model_fields.items():
        default = info.default_factory() if info.default_factory else info.default  # type: ignore[call-arg]
        lines.append(f"  SPEECH_{name.upper():<32} {info.description} [default: {default}]")
    return "\n".join(lines)
