# Two images from one file:
#   docker build --target cpu -t speech-service:cpu .   the embedded CPU engine (no GPU needed)
#   docker build --target gpu -t speech-service:gpu .   the omni engine: vllm 0.30.0 + vllm-omni 0.30.0 (the pair
#                                                       run on H100; torch 2.13 / CUDA 13) for Qwen3-TTS
#   docker build --target gpu-sglang -t speech-service:gpu-sglang .   the sglang engine: sglang-omni 0.1.8 (torch
#                                                       2.13 / CUDA 13), the same model in the server's process
# Both install with the Makefile's own `make install` (only the extras differ), so CI runs the same install steps.
# The root filesystem can be read-only: the service writes only to /tmp (HOME) and its voice store.
# No model weights are baked in: mount them and point SPEECH_OMNI__MODEL at them (see k8s/overlays/gpu).

ARG VERSION=0.1.0

# ---------------------------------------------------------------------------------------------------------------------
FROM docker.io/library/python:3.11-slim-bookworm AS cpu
ARG VERSION
LABEL org.opencontainers.image.title="speech-service (cpu)" \
      org.opencontainers.image.description="OpenAI-compatible streaming text-to-speech, embedded CPU engine" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.source="https://github.com/speech-service/speech-service"
RUN apt-get update && apt-get install -y --no-install-recommends make && rm -rf /var/lib/apt/lists/* \
    && groupadd --system --gid 10001 speech \
    && useradd --system --uid 10001 --gid 10001 --home-dir /srv/speech --shell /usr/sbin/nologin speech \
    && install -d -o 10001 -g 10001 -m 0750 /var/lib/speech/voices
WORKDIR /srv/speech
COPY pyproject.toml uv.lock Makefile README.md ./
COPY app ./app
COPY loadtest ./loadtest
COPY deploy ./deploy
# Bytecode compiled at build time: the service runs as uid 10001, which cannot write __pycache__ into the root-owned
# .venv, so without it every process start (the server and, on the GPU, each vllm-omni stage process) would
# compile vllm's sources again.
RUN make install EXTRAS="--extra embedded" SYNC_FLAGS="--no-dev --compile-bytecode" PYTHON=python3 && rm -rf /root/.cache .tools
ENV PATH="/srv/speech/.venv/bin:${PATH}" \
    HOME=/tmp \
    SPEECH_ENGINE=embedded \
    SPEECH_HOST=0.0.0.0 \
    SPEECH_PORT=8000 \
    SPEECH_VOICE_STORE=/var/lib/speech/voices \
    HF_HUB_OFFLINE=1
# Registered voices outlive the container: mount a volume here (shared between replicas, see k8s/).
VOLUME ["/var/lib/speech/voices"]
USER 10001:10001
EXPOSE 8000
ENTRYPOINT ["speech-server"]

# ---------------------------------------------------------------------------------------------------------------------
# What both GPU images share: CUDA 13's runtime, Python, the service user, its voice store and the service's files.
FROM docker.io/nvidia/cuda:13.0.1-cudnn-runtime-ubuntu24.04 AS gpu-runtime
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-venv python3-dev build-essential make ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --system --gid 10001 speech \
    && useradd --system --uid 10001 --gid 10001 --home-dir /srv/speech --shell /usr/sbin/nologin speech \
    && install -d -o 10001 -g 10001 -m 0750 /var/lib/speech/voices
WORKDIR /srv/speech
COPY pyproject.toml uv.lock Makefile README.md ./
COPY app ./app
COPY loadtest ./loadtest
COPY deploy ./deploy

# ---------------------------------------------------------------------------------------------------------------------
FROM gpu-runtime AS gpu
ARG VERSION
LABEL org.opencontainers.image.title="speech-service (gpu)" \
      org.opencontainers.image.description="OpenAI-compatible streaming text-to-speech, Qwen3-TTS on vllm-omni" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.source="https://github.com/speech-service/speech-service"
# Bytecode compiled at build time: the service runs as uid 10001, which cannot write __pycache__ into the root-owned
# .venv, so without it every process start (the server and, on the GPU, each vllm-omni stage process) would
# compile vllm's sources again.
RUN make install EXTRAS="--extra omni --extra align --extra loadtest" SYNC_FLAGS="--no-dev --compile-bytecode" PYTHON=python3 && rm -rf /root/.cache .tools
ENV PATH="/srv/speech/.venv/bin:${PATH}" \
    HOME=/tmp \
    SPEECH_ENGINE=omni \
    SPEECH_HOST=0.0.0.0 \
    SPEECH_PORT=8000 \
    SPEECH_VOICE_STORE=/var/lib/speech/voices \
    SPEECH_OMNI__DEPLOY_CONFIG=/srv/speech/deploy/vllm-omni/customvoice.yaml \
    VLLM_WORKER_MULTIPROC_METHOD=spawn \
    HF_HUB_OFFLINE=1 \
    TRANSFORMERS_OFFLINE=1 \
    VLLM_NO_USAGE_STATS=1 \
    VLLM_USE_FLASHINFER_SAMPLER=0 \
    PYTHONPATH=/srv/speech
# Registered voices outlive the container: mount a volume here (shared between replicas, see k8s/).
VOLUME ["/var/lib/speech/voices"]
USER 10001:10001
EXPOSE 8000
ENTRYPOINT ["speech-server"]

# ---------------------------------------------------------------------------------------------------------------------
# The sglang engine: sglang-omni 0.1.8 cannot share an environment with vllm 0.30 (uv.lock keeps them in separate
# forks), nor with the test tools (it pins openai 2.6.1): its own image, installed without the dev group.
FROM gpu-runtime AS gpu-sglang
ARG VERSION
LABEL org.opencontainers.image.title="speech-service (gpu-sglang)" \
      org.opencontainers.image.description="OpenAI-compatible streaming text-to-speech, Qwen3-TTS on sglang-omni" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.source="https://github.com/speech-service/speech-service"
# Bytecode compiled at build time: the service runs as uid 10001, which cannot write __pycache__ into the venv, and
# the pipeline's spawned process imports sglang anew.
RUN make install EXTRAS="--extra sglang --extra align --extra loadtest" SYNC_FLAGS="--no-dev --compile-bytecode" PYTHON=python3 && rm -rf /root/.cache .tools
ENV PATH="/srv/speech/.venv/bin:${PATH}" \
    HOME=/tmp \
    SPEECH_ENGINE=sglang \
    SPEECH_HOST=0.0.0.0 \
    SPEECH_PORT=8000 \
    SPEECH_VOICE_STORE=/var/lib/speech/voices \
    HF_HUB_OFFLINE=1 \
    TRANSFORMERS_OFFLINE=1 \
    PYTHONPATH=/srv/speech
# Registered voices outlive the container: mount a volume here (shared between replicas, see k8s/).
VOLUME ["/var/lib/speech/voices"]
USER 10001:10001
EXPOSE 8000
ENTRYPOINT ["speech-server"]
