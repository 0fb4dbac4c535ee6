"""Code2wav (stage 1) scheduler for vllm-omni 0.26.0: first audio first. Loaded by the code2wav stage process by
dotted path; the service passes it as a stage override (`{"1": {"scheduler_cls": ...}}`, see `Settings`), because
vllm-omni's Qwen3-TTS pipeline sets the stage's scheduler class itself and a deploy profile cannot.

vllm-omni's generation scheduler decodes, in every step, a window for every stream whose next window has arrived:
at 32 streams one step carries up to 32 windows of 97 frames. A new stream's first window (the one its listener is
waiting for) then waits for such a step and rides in the next one, as long as the others. Here, when a first window
is ready, the streams whose listeners hold more than `first_audio_first_margin_s` of audio sit out the step, so that
the first window's step is short; they run in the next step with nothing more urgent, long before their listeners
could run dry. When first windows keep coming (arrivals that never pause), that step may not come until the streams
are down to the margin: they are paced to it, and live longer. `code2wav_max_steps_held` bounds how many
steps in a row a stream may sit out (by this rule or the cap below; a stream at the bound runs even where that puts
its step over the cap).
With `short_streams_first`, a window of any stream whose listener holds less than the margin counts as first audio
too: the windows right after a stream's first (a ramp's 4, 8 and 16 frames), due within a few hundred milliseconds,
or a stream that fell behind. With `code2wav_max_windows_per_step` set, a step carries at most that many windows
where it can: beyond the cap, the windows of the streams furthest ahead of their listeners (holding more than the
margin) wait for a later step, so that the windows a listener is waiting for are never held up by a long step of
windows nobody needs yet. Nothing else changes: the order, the token budget and every window are vllm-omni's.

It also gives way when it has nothing to schedule. Requests whose next window has not arrived keep vLLM's engine
loop busy (schedule, an empty step, again), and that loop holds the GIL that code2wav's receiving thread needs to
load each arriving window (a few GIL hand-overs per window, each up to the interpreter's 5 ms switch interval).
Sleeping `code2wav_idle_wait_ms` after an empty schedule lets the receiving thread run.

Settings come from the deploy profile's connector `extra` (which vllm-omni hands to every stage unchanged):
`first_audio_first_margin_s` (default 1.0; 0 turns the policy off, leaving a logging-only scheduler),
`short_streams_first` (default false), `code2wav_max_windows_per_step` (default 0 = no cap; a stream is held back
by it only while it holds more than the margin), `code2wav_max_steps_held` (default 0 = no bound),
`code2wav_idle_wait_ms` (default 0 = never sleep) and `engine_probe_interval_s` (default 0 = off: every so many
seconds, one log line of steps, windows per step, first-window waits, step times, the times of steps that carried a
first window, and the streams the stage held). The CustomVoice profiles
(`deploy/vllm-omni/customvoice.yaml`, `two-gpu.yaml`) set the margin to 1.0 s, `short_streams_first` to true and
the cap to 16, each with the measurement behind it, and leave the bound off. On one H100, a bound of 1 (the streams
ahead then run every other step) and no holds at all (every step) both put long windows back into the steps that
carry the ramp's short ones: TTFA p95 at c=16 went from 207 to 383 and 374 ms, and 46% and 52% of streams ran dry
instead of 5% (`loadtest/results/gpu/2026-11-23-h100-pacing`).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from vllm_omni.core.sched.omni_generation_scheduler import OmniGenerationScheduler

from app.engines.code2wav_policy import FirstAudioFirst, StepProbe
from app.engines.codec_windows import CodecWindows

log = logging.getLogger("vllm.speech.code2wav")


def connector_extra(vllm_config: Any) -> dict[str, Any]:
    """The stage's connector `extra` settings from the deploy profile."""
    connector = getattr(getattr(vllm_config, "model_config", None), "stage_connector_config", None) or {}
    extra = connector.get("extra", {}) if isinstance(connector, dict) else getattr(connector, "extra", {})
    return dict(extra or {})


def _steps(value: object, name: str) -> int:
    """A whole number of steps, 0 or more, from YAML or a string override (not a yes/no: `true` is no number)."""
    if value is None:
        return 0
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value.strip())
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} must be a whole number of steps, 0 or more, not {value!r}")
    return value


def _flag(value: object, name: str) -> bool:
    """A yes/no setting from YAML or a string override ("false" is no, not a non-empty string)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in {"true", "false", "1", "0", "yes", "no", "on", "off"}:
        return value.strip().lower() in {"true", "1", "yes", "on"}
    raise ValueError(f"{name} must be true or false, not {value!r}")


class FirstAudioFirstScheduler(OmniGenerationScheduler):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        extra = connector_extra(self.vllm_config)
        # a profile that leaves the first window to vllm-omni (sized by load) is counted as 1 frame: the least
        # audio a listener can hold, so no stream is ever thought further ahead than it is
        windows = CodecWindows.from_connector_extra(extra) or CodecWindows(
            (1,), int(extra.get("codec_chunk_frames") or 25)
        )
        self._policy = FirstAudioFirst(windows, margin_s=float(extra.get("first_audio_first_margin_s", 1.0)))
        self._probe = StepProbe(interval_s=float(extra.get("engine_probe_interval_s", 0) or 0))
        self._idle_wait_s = float(extra.get("code2wav_idle_wait_ms", 0) or 0) / 1000
        self._max_windows = int(extra.get("code2wav_max_windows_per_step", 0) or 0)
        self._short_streams_first = _flag(extra.get("short_streams_first", False), "short_streams_first")
        self._max_steps_held = _steps(extra.get("code2wav_max_steps_held"), "code2wav_max_steps_held")
        self._steps_held: dict[str, int] = {}  # streams sitting out -> steps in a row so far
        self._first_ready_at: dict[str, float] = {}  # first windows seen ready, not yet scheduled
        self._scheduled_at: dict[int, tuple[float, bool]] = {}  # id(output) -> when scheduled, carries a first window
        log.info(
            "code2wav scheduler: first audio first (margin %.2f s, short streams too: %s, at most %s windows a step, "
            "steps a stream may sit out in a row: %s, idle wait %.1f ms, probe every %.0f s)",
            self._policy.margin_s,
            self._short_streams_first,
            self._max_windows or "any",
            self._max_steps_held or "no bound",
            self._idle_wait_s * 1000,
            self._probe.interval_s,
        )

    def _loaded(self) -> set[str]:
        """Requests whose next window has arrived and waits to be decoded."""
        adapter = self.chunk_transfer_adapter
        if adapter is None:
            return set()
        try:  # the receiving thread adds to the first set; a copy under the GIL is consistent
            return set(adapter._finished_load_reqs) | adapter.requests_with_ready_chunks
        except RuntimeError:
            return set()

    def _ready_first_windows(self, loaded: set[str], now: float) -> list[str]:
        """Streams whose first window has arrived and waits to be decoded."""
        ready = [r.request_id for r in self.waiting if r.request_id in loaded]
        for request_id in ready:
            self._first_ready_at.setdefault(request_id, now)
        return ready

    def _sitting_out(self, loaded: set[str], firsts: int, now: float) -> list[Any]:
        """The running streams whose ready windows wait this step: with a first window ready (or, with
        `short_streams_first`, a window of a stream holding less than the margin), every one whose listener can spare
        a step; otherwise, where the step would carry more windows than its cap, those furthest ahead of their
        listeners. A stream with no window ready is never held (holding it would only delay the request for its next
        window), nor is a stream's last window (holding it would only delay the end of its response), nor, with
        `code2wav_max_steps_held`, a stream that has sat out that many steps in a row."""
        if self._policy.margin_s <= 0:
            return []
        ready = [r for r in self.running if r.request_id in loaded]
        spare = [r for r in ready if self._policy.may_wait(r.request_id, now)]
        urgent = firsts + (len(ready) - len(spare) if self._short_streams_first else 0)
        excess = len(ready) - self._max_windows if self._max_windows > 0 else 0
        if not urgent and excess <= 0:  # most steps: nobody waits, nothing more to work out
            return []
        adapter = self.chunk_transfer_adapter
        holdable = [r for r in spare if not adapter.is_done_receiving_chunks(r.request_id) and self._may_sit_out(r)]
        if urgent:
            return holdable
        chosen = set(self._policy.furthest_ahead([r.request_id for r in holdable], excess, now))
        return [r for r in holdable if r.request_id in chosen]

    def _may_sit_out(self, request: Any) -> bool:
        return not self._max_steps_held or self._steps_held.get(request.request_id, 0) < self._max_steps_held

    def _count_steps_held(self, sitting_out: list[Any]) -> None:
        """Only streams sitting out now keep a count: a stream that ran (or had nothing ready) starts again at 0."""
        self._steps_held = {r.request_id: self._steps_held.get(r.request_id, 0) + 1 for r in sitting_out}

    def schedule(self, throttle_prefills: bool = False) -> Any:
        now = time.monotonic()
        loaded = self._loaded()
        ready_firsts = self._ready_first_windows(loaded, now)
        sitting_out = self._sitting_out(loaded, len(ready_firsts), now)
        if self._max_steps_held:
            self._count_steps_held(sitting_out)
        if sitting_out:
            waiting_ids = {id(r) for r in sitting_out}
            self.running[:] = [r for r in self.running if id(r) not in waiting_ids]
        try:
            output = super().schedule(throttle_prefills)
        finally:
            if sitting_out:
                self.running.extend(sitting_out)
        scheduled = list(output.num_scheduled_tokens)
        firsts = self._policy.scheduled(scheduled, now)
        for request_id in scheduled:
            ready_at = self._first_ready_at.pop(request_id, None)
            if ready_at is not None:
                self._probe.first_wait(now - ready_at)
        if scheduled:
            self._scheduled_at[id(output)] = (now, firsts > 0)
        self._probe.step(len(scheduled), firsts, len(sitting_out), len(self.running) + len(self.waiting))
        if len(self._policy) > 4 * max(16, len(self.requests)):
            self._policy.forget_all_but(self.requests)
            for request_id in [r for r in self._first_ready_at if r not in self.requests]:
                del self._first_ready_at[request_id]
        if len(self._scheduled_at) > 64:  # outputs whose results never came back
            self._scheduled_at.clear()
        if self._probe.due(now):
            log.info("code2wav probe %s", self._probe.report(now))
        if not scheduled and self._idle_wait_s > 0:
            time.sleep(self._idle_wait_s)  # releases the GIL to the thread that receives the windows
        return output

    def update_from_output(self, scheduler_output: Any, model_runner_output: Any) -> Any:
        scheduled = self._scheduled_at.pop(id(scheduler_output), None)
        if scheduled is not None:
            scheduled_at, had_first = scheduled
            self._probe.result(time.monotonic() - scheduled_at, first=had_first)
        return super().update_from_output(scheduler_output, model_runner_output)
