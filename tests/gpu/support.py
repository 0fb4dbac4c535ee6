from __future__ import annotations

import httpx

SAMPLES_PER_FRAME = 1920  # 24 kHz / 12.5 Hz codec frames


def speak(url: str, timeout: float = 300, **body: object) -> httpx.Response:
    payload = {"model": model_of(url), "voice": "vivian", "input": "Hello from the GPU.", **body}
    return httpx.post(f"{url}/v1/audio/speech", json=payload, timeout=timeout)


_models: dict[str, str] = {}


def model_of(url: str) -> str:
    if url not in _models:
        _models[url] = httpx.get(f"{url}/v1/models", timeout=30).json()["data"][0]["id"]
    return _models[url]
