"""What the sglang engine sets in each of sglang-omni 0.1.8's processes as it starts: Python's thread switch interval,
and the fixed-length patch of benchmarks on random weights.

The sglang engine puts this directory first on PYTHONPATH (with SPEECH_SGLANG__SWITCH_INTERVAL_MS or
SPEECH_SGLANG__FIXED_LENGTH; `sgl-omni serve` runs with it in deploy/gpu/side-by-side.sh). sglang-omni spawns its
processes (the pipeline's: talker, vocoder, preprocessing unless it has a process of its own), which inherit
PYTHONPATH, so this file runs in each as it starts.

- SPEECH_SGLANG_SWITCH_INTERVAL_S: `sys.setswitchinterval`. The talker's scheduler, preprocessing's 8 threads, the
  vocoder's threads and the stage's event loop share one interpreter lock; Python makes the thread holding it let go
  once another has waited this long (5 ms by default).
- QWEN3_TTS_FIXED_LENGTH=1: every Qwen3-TTS request runs to max_new_tokens. Nothing is imported eagerly: the patch is
  applied right after sglang_omni.models.qwen3_tts.model_runner executes, masking the codec's end-of-speech logit.

Python imports only the first `sitecustomize` on its path, so this one then runs the next one found after it (an
operator's own, which runs after these settings and so has the last word).
"""

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys

_TARGET = "sglang_omni.models.qwen3_tts.model_runner"


def _patch(module):
    cls = module.Qwen3TTSModelRunner
    original = cls.apply_codec_suppress_tokens
    if getattr(original, "_force_max_new_tokens", False):
        return

    def apply_codec_suppress_tokens(self, logits_output, requests):
        original(self, logits_output, requests)
        logits = logits_output.next_token_logits
        if logits is None or logits.ndim != 2 or not requests:
            return
        eos = int(self.model.config.codec_eos_token_id)
        if 0 <= eos < logits.shape[1]:
            logits[: len(requests), eos] = float("-inf")

    apply_codec_suppress_tokens._force_max_new_tokens = True
    cls.apply_codec_suppress_tokens = apply_codec_suppress_tokens
    print(
        f"[sitecustomize pid={os.getpid()}] codec EOS masked: every Qwen3-TTS request runs to max_new_tokens",
        file=sys.stderr,
        flush=True,
    )


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != _TARGET:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_and_patch(module):
            exec_module(module)
            _patch(module)

        spec.loader.exec_module = exec_and_patch
        return spec


def _run_the_next_sitecustomize() -> None:
    """Python imports only the first `sitecustomize` on its path, and this directory goes first: run the next one,
    found after this directory's last place on the path (by any spelling: a link to it is the same place), so an
    operator's own still runs in the pipeline's process. A copy of this patch found there (another checkout's) does
    the same from its own place, so each file on the path runs once. An error in the next one names its file and is
    reported, not raised, as Python reports its own sitecustomize's."""
    ours = os.path.dirname(os.path.realpath(__file__))
    places = [i for i, entry in enumerate(sys.path) if os.path.realpath(entry or os.curdir) == ours]
    later = sys.path[places[-1] + 1 :] if places else list(sys.path)
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", later)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as error:  # reported as Python reports its own sitecustomize's, not raised
        print(f"Error in sitecustomize {spec.origin}: {error!r}", file=sys.stderr, flush=True)


def _set_the_switch_interval() -> None:
    value = os.environ.get("SPEECH_SGLANG_SWITCH_INTERVAL_S")
    if not value:
        return
    try:
        seconds = float(value)
        if not 1e-6 <= seconds <= 1.0:  # Python counts microseconds, and takes inf (or 1e308) as 0
            raise ValueError("not between 1 microsecond and 1 second")
        sys.setswitchinterval(seconds)
    except (ValueError, OverflowError) as error:  # reported, not raised: the process runs on Python's default
        print(f"SPEECH_SGLANG_SWITCH_INTERVAL_S={value!r} left unset: {error}", file=sys.stderr, flush=True)


_set_the_switch_interval()
# once a process, however many copies of this patch the path holds
if os.environ.get("QWEN3_TTS_FIXED_LENGTH") == "1" and not getattr(sys, "_qwen3_tts_fixed_length", False):
    sys._qwen3_tts_fixed_length = True
    sys.meta_path.insert(0, _Finder())
_run_the_next_sitecustomize()
