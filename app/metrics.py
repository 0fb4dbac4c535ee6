"""The service's Prometheus families. They live in the process's default registry, beside vllm-omni's own."""

from __future__ import annotations

from prometheus_client import Counter, Gauge

IN_FLIGHT = Gauge("speech_in_flight", "Syntheses holding a slot (streaming or about to).")
QUEUE_DEPTH = Gauge("speech_queue_depth", "Requests waiting for a slot.")
REJECTED = Counter("speech_rejected_total", "Requests refused without synthesis, by reason.", ["reason"])
ABORTED = Counter("speech_aborted_total", "Syntheses stopped before they finished, by reason.", ["reason"])
