#!/usr/bin/env python3
"""Write a benchmarking copy of a vllm-omni deploy profile.

    python3 deploy/gpu/bench_profile.py deploy/vllm-omni/customvoice.yaml /tmp/bench.yaml \
        --memory 0.14 --frames 100 --set stages.1.async_scheduling=false \
        --set connectors.connector_of_shared_memory.extra.decode_batch_max_size=16

--memory F   every stage's gpu_memory_utilization becomes F (a fraction of the whole GPU), so that several servers
             fit on one GPU side by side.
--frames N   stage 0's default max_tokens and min_tokens become N + 1: every request, from any server on this
             profile, generates exactly N codec frames (N x 80 ms of audio) without a request field. Random weights
             (load_format dummy) stop at random times otherwise.
--set K=V    any other override: K a dotted path, V parsed as YAML (false, 16, [25, 97], {a: 1}). In `stages.I.…`, I
             is a stage_id; elsewhere a number indexes a list. Missing mappings on the way are created.

The copy keeps every setting it does not override (the profile's comments are not kept; a header names the source
and the changes).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import yaml


def _parse_override(text: str) -> tuple[list[str], Any]:
    path, sep, value = text.partition("=")
    keys = path.strip().split(".")
    if not sep or not path.strip() or any(not key for key in keys):
        raise ValueError(f"--set wants KEY.PATH=VALUE, got {text!r}")
    return keys, yaml.safe_load(value)


def _child(node: Any, key: str, parent_key: str | None, create: bool) -> Any:
    if parent_key == "stages" and isinstance(node, list):
        for stage in node:
            if isinstance(stage, dict) and str(stage.get("stage_id")) == key:
                return stage
        raise KeyError(f"no stage with stage_id {key}")
    if isinstance(node, list):
        return node[int(key)]
    if isinstance(node, dict):
        if key not in node:
            if not create:
                raise KeyError(key)
            node[key] = {}
        return node[key]
    raise KeyError(f"{key}: {parent_key} is not a mapping or list")


def set_path(config: dict[str, Any], keys: list[str], value: Any) -> None:
    """Set config[k0][k1]…[kn] = value; `stages.I` selects the stage whose stage_id is I."""
    node: Any = config
    parent: str | None = None
    for key in keys[:-1]:
        node = _child(node, key, parent, create=True)
        parent = key
    last = keys[-1]
    if isinstance(node, list):
        if parent == "stages":
            raise KeyError("a whole stage cannot be replaced; set its fields (stages.I.field=value)")
        node[int(last)] = value
    elif isinstance(node, dict):
        node[last] = value
    else:
        raise KeyError(f"{'.'.join(keys)}: {parent} is not a mapping or list")


def bench_profile(
    config: dict[str, Any],
    memory: float | None = None,
    frames: int | None = None,
    overrides: list[str] | None = None,
) -> dict[str, Any]:
    """The profile with the benchmark's changes applied (the input is not modified)."""
    import copy

    out = copy.deepcopy(config)
    stages = out.get("stages")
    if not isinstance(stages, list) or not stages:
        raise ValueError("the profile has no stages")
    if memory is not None:
        if not 0 < memory <= 1:
            raise ValueError(f"--memory is a fraction of the GPU in (0, 1], got {memory}")
        for stage in stages:
            stage["gpu_memory_utilization"] = memory
    if frames is not None:
        if frames < 1:
            raise ValueError(f"--frames must be at least 1, got {frames}")
        talker = next((s for s in stages if s.get("stage_id") == 0), None)
        if talker is None:
            raise ValueError("the profile has no stage 0")
        params = talker.setdefault("default_sampling_params", {})
        params["max_tokens"] = params["min_tokens"] = frames + 1  # the last token ends the utterance: no frame
    for text in overrides or []:
        keys, value = _parse_override(text)
        set_path(out, keys, value)
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("source", help="deploy profile to copy, e.g. deploy/vllm-omni/customvoice.yaml")
    p.add_argument("out", help="where to write the copy")
    p.add_argument("--memory", type=float, help="gpu_memory_utilization of every stage (fraction of the GPU)")
    p.add_argument("--frames", type=int, help="codec frames every request generates (stage 0 max/min_tokens - 1)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY.PATH=VALUE")
    args = p.parse_args(argv)
    try:
        config = yaml.safe_load(Path(args.source).read_text(encoding="utf-8"))
        if not isinstance(config, dict):
            raise ValueError(f"{args.source} is not a YAML mapping")
        result = bench_profile(config, args.memory, args.frames, args.overrides)
    except (OSError, ValueError, KeyError, IndexError, yaml.YAMLError) as exc:
        sys.exit(f"bench_profile: {exc}")
    changes = [f"memory={args.memory}"] if args.memory is not None else []
    changes += [f"frames={args.frames}"] if args.frames is not None else []
    changes += args.overrides
    header = f"# Benchmark copy of {args.source}: {', '.join(changes) or 'unchanged'}\n"
    Path(args.out).write_text(header + yaml.safe_dump(result, sort_keys=False), encoding="utf-8")
    print(f"wrote {args.out} ({', '.join(changes) or 'unchanged'})")


if __name__ == "__main__":
    main()
