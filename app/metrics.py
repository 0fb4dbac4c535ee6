"""The service's Prometheus families. They live in the process's default registry, beside vllm-omni's own.

Labels stay bounded: status codes, the six formats, two stream kinds, a handful of reasons, the service's own error
codes. Never a request id, a voice name or a text.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram, Info, disable_created_metrics

from app.audio.formats import RESPONSE_FORMATS

# A `_created` series per labelled counter doubles the series count and no dashboard or rule reads it.
disable_created_metrics()

# Dense between 20 ms and 1 s, where time to first audio lives; sparse out to 30 s for the worst day.
TTFA_BUCKETS = (
    0.005,
    0.01,
    0.02,
    0.03,
    0.04,
    0.05,
    0.06,
    0.08,
    0.1,
    0.125,
    0.15,
    0.2,
    0.25,
    0.3,
    0.4,
    0.5,
    0.6,
    0.75,
    1.0,
    1.5,
    2.0,
    3.0,
    5.0,
    10.0,
    20.0,
    30.0,
)
# A phase of TTFA can take well under a millisecond (validation, encoding a first slice).
TTFA_PHASE_BUCKETS = (0.0005, 0.001, 0.0025, *TTFA_BUCKETS)
E2E_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 3.0, 5.0, 7.5, 10.0, 15.0, 20.0, 30.0, 60.0, 120.0, 300.0)
RTF_BUCKETS = (0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 5.0)
QUEUE_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
# A loop that keeps up wakes a timer within a millisecond or two; tens of milliseconds is a frame's worth of audio late.
LOOP_LAG_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)

REQUESTS = Counter(
    "speech_requests_total",
    "Speech requests answered, by HTTP status; an error by the `code` of its OpenAI error body too (empty: none). "
    "A WebSocket session refused before it spoke (stream websocket) counts as a request refused with its error would.",
    ["status", "response_format", "stream", "code"],
)
TTFA = Histogram(
    "speech_ttfa_seconds",
    "Time from a request's arrival (queue wait included) to its first byte of audio.",
    ["response_format", "stream"],
    buckets=TTFA_BUCKETS,
)
UNINTERRUPTED = Histogram(
    "speech_uninterrupted_seconds",
    "Time from a request's arrival (as speech_ttfa_seconds) until a real-time listener could start and never run dry: "
    "TTFA plus the stream's largest deficit, from when the server wrote each piece of audio (see app/timing.py). "
    "Observed once per completed stream; streams cut short (the client left, an error, a timeout, a drain) and whole "
    "files (stream: false) are not observed. Over the WebSocket, per utterance, from its first complete sentence, "
    "waits for the client's text included.",
    ["response_format", "stream"],
    buckets=TTFA_BUCKETS,
)
RAN_DRY = Counter(
    "speech_streams_ran_dry_total",
    "Completed streams that a listener starting at their first audio would have heard run dry (those of "
    "speech_uninterrupted_seconds beyond their TTFA); divided by speech_uninterrupted_seconds_count, the share.",
    ["response_format", "stream"],
)
TTFA_PHASE = Histogram(
    "speech_ttfa_phase_seconds",
    "Time to first audio by phase (validate, queue, prepare, engine, encode_write; see app/timing.py), observed once "
    "per request when its first byte is written; the phases of a request add up to its TTFA.",
    ["phase"],
    buckets=TTFA_PHASE_BUCKETS,
)
E2E = Histogram(
    "speech_e2e_seconds",
    "Time from a request's arrival to its last byte; over the WebSocket (stream websocket) one per sentence whose "
    "delivery began, from the arrival of the text that completed it to its last byte delivered (TTFA is observed once "
    "per utterance); a sentence synthesized ahead and never sent, its session cut off, has none.",
    ["stream"],
    buckets=E2E_BUCKETS,
)
RTF = Histogram(
    "speech_rtf",
    "Synthesis time divided by the audio's duration (below 1: faster than real time), of each request that completed "
    "(a WebSocket sentence: delivered whole).",
    buckets=RTF_BUCKETS,
)
AUDIO_SECONDS = Counter("speech_audio_seconds_total", "Seconds of audio delivered.")
INPUT_CHARACTERS = Counter("speech_input_characters_total", "Characters of input text accepted for synthesis.")
IN_FLIGHT = Gauge("speech_in_flight", "Syntheses holding a slot (streaming or about to).")
WS_SESSIONS = Gauge("speech_ws_sessions", "Open WebSocket speech sessions (/v1/audio/speech/stream).")
QUEUE_DEPTH = Gauge("speech_queue_depth", "Requests waiting for a slot.")
QUEUE_WAIT = Histogram("speech_queue_wait_seconds", "Time admitted requests waited for a slot.", buckets=QUEUE_BUCKETS)
REJECTED = Counter(
    "speech_rejected_total",
    "Requests refused without synthesis, by reason: queue_full and queue_timeout for want of a slot (the server "
    "turning work away), draining, unauthorized, per_key_limit, and batch_timeout for a batch's items its deadline "
    "stopped while they waited on the batch itself (its share of slots, their reference audio).",
    ["reason"],
)
ABORTED = Counter(
    "speech_aborted_total",
    "Syntheses stopped before they finished, by reason; a WebSocket sentence that its session's end cut off before "
    "all its audio was delivered, also where its synthesis had finished (synthesized ahead, never sent).",
    ["reason"],
)
STREAM_ERRORS = Counter(
    "speech_stream_errors_total",
    "HTTP streams (audio, sse) cut by an error or the request timeout after their 200 was sent: failures that "
    "speech_requests_total counts under 200 (a whole file or a batch item that fails is a 5xx there, a WebSocket "
    "utterance an `error` message).",
    ["stream"],
)
HTTP_STREAMS = ("audio", "sse")
WS_UTTERANCES = Counter(
    "speech_ws_utterances_total",
    "WebSocket utterances (/v1/audio/speech/stream) that had text, each counted once when it ends, by outcome: "
    "completed; error, an error of the server's own (an `error` message, or the session failing), however the "
    "utterance then ended: what the error alert counts beside the HTTP requests' 5xx; refused, errors of the "
    "request's only (a field, nothing to speak, a full server, an input.text refused as too long); client_gone, "
    "client_stalled and stopped (a drain among them), cut short by the session's end.",
    ["outcome"],
)
UTTERANCE_OUTCOMES = ("completed", "error", "refused", "client_gone", "client_stalled", "stopped")
# Every reason a request can be refused or a synthesis stopped. Each series exists from the start at 0, so `rate()`
# and the alerts see the first event (a series born at 1 has no increase to show).
REJECT_REASONS = ("queue_full", "queue_timeout", "draining", "unauthorized", "per_key_limit", "batch_timeout")
ABORT_REASONS = ("client_gone", "client_stalled", "timeout", "drain", "error", "refused")
BUILD = Info("speech_build", "The service's version and engine.")
READY = Gauge("speech_ready", "1 while this replica answers /ready with 200 (engine warm, not draining).")
LOOP_LAG = Histogram(
    "speech_event_loop_lag_seconds",
    "How late the event loop woke a timer that was due, sampled 20 times a second (app/loop_lag.py): the wait every "
    "stream's next step meets behind other work on the loop (with the sglang engine, its client's too).",
    buckets=LOOP_LAG_BUCKETS,
)
START = Gauge(
    "speech_start_seconds",
    "How long this replica's start took, by phase: the engine's own (e.g. imports, pipeline, engine, warmup), and "
    "total, from the service's first import until the engine was warm.",
    ["phase"],
)


def count_request(status: int, response_format: str, stream: str, code: str | None) -> None:
    """One speech request answered (`REQUESTS`); `code` is its error body's code, and None (a success, a 499, which
    has no body) the empty label, as the body's null would be."""
    REQUESTS.labels(str(status), response_format, stream, code or "").inc()


# The streams a ran-dry share is counted for, each at 0 from the start: with none run dry it reads 0, not "no data".
STREAM_KINDS = ("audio", "sse", "websocket")


for _format in RESPONSE_FORMATS:
    for _stream in STREAM_KINDS:
        RAN_DRY.labels(_format, _stream)
for _reason in REJECT_REASONS:
    REJECTED.labels(_reason)
for _reason in ABORT_REASONS:
    ABORTED.labels(_reason)
for _stream in HTTP_STREAMS:
    STREAM_ERRORS.labels(_stream)
for _outcome in UTTERANCE_OUTCOMES:
    WS_UTTERANCES.labels(_outcome)
