#!/usr/bin/env python3
"""Write a benchmarking copy of a vllm-omni deploy profile.

    python3 deploy/gpu/bench_profile.py deploy/vllm-omni/customvoice.yaml /tmp/bench.yaml \
        --memory 0.14 --frames 100 --set stages.1.async_scheduling=false \
        --set connectors.connector_of_shared_memory.extra.decode_batch_max_size=16
    python3 deploy/gpu/bench_profile.py vllm-omni:qwen3_tts_high_concurrency_mrv2_single_gpu.yaml /tmp/hc.yaml \
        --memory 0:0.12,1:0.10 --frames 100

SOURCE       a profile's path, or vllm-omni:NAME.yaml: NAME.yaml in the deploy/ folder of the vllm_omni package this
             python would import (found without importing it), or of $VLLM_OMNI_DEPLOY_DIR when that is set.
             A profile that inherits (`base_config: other.yaml`, relative to its own folder) is flattened the way
             vllm-omni 0.30 resolves it, so the copy is one file with no base_config.
--memory F   every stage's gpu_memory_utilization becomes F (a fraction of the whole GPU), so that several servers
             fit on one GPU side by side; --memory 0:0.12,1:0.10 sets it per stage_id (stages not named keep theirs).
--frames N   stage 0's default max_tokens and min_tokens become N + 1: every request, from any server on this
             profile, generates exactly N codec frames (N x 80 ms of audio) without a request field. Random weights
             (load_format dummy) stop at random times otherwise.
--set K=V    any other override: K a dotted path, V parsed as YAML (false, 16, [25, 97], {a: 1}). In `stages.I.…`, I
             is a stage_id; elsewhere a number indexes a list. Missing mappings on the way are created.

The copy keeps every setting it does not override, `platforms:` included (the profile's comments are not kept; a
header names the source, the file it resolved to, the files it inherits from, and the changes).
"""

from __future__ import annotations

import argparse
import copy
import importlib.util
import os
import sys
from pathlib import Path
from typing import Any

import yaml

PACKAGE_PREFIX = "vllm-omni:"
DEPLOY_DIR_ENV = "VLLM_OMNI_DEPLOY_DIR"

Memory = float | dict[int, float]


def package_deploy_dir(deploy_dir: str | Path | None = None) -> Path:
    """vllm_omni's deploy/ folder: `deploy_dir`, else $VLLM_OMNI_DEPLOY_DIR, else the installed package's.

    find_spec locates a top-level package without running its __init__ (importing vllm_omni takes seconds and
    wants torch, vllm and a GPU stack)."""
    if deploy_dir is None:
        deploy_dir = os.environ.get(DEPLOY_DIR_ENV) or None
    if deploy_dir is not None:
        return Path(deploy_dir)
    spec = importlib.util.find_spec("vllm_omni")
    if spec is None or not spec.submodule_search_locations:
        raise ValueError(
            f"vllm_omni is not importable by {sys.executable} (give PYTHONPATH, or {DEPLOY_DIR_ENV}=its deploy folder)"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "deploy"


def source_path(source: str, deploy_dir: str | Path | None = None) -> Path:
    """The file a SOURCE names: a path as it is, or vllm-omni:NAME.yaml in vllm_omni's deploy/ folder."""
    if not source.startswith(PACKAGE_PREFIX):
        return Path(source)
    name = source[len(PACKAGE_PREFIX) :]
    if not name or Path(name).is_absolute() or ".." in Path(name).parts:
        raise ValueError(f"{source!r}: want vllm-omni:NAME.yaml, a file of vllm_omni's deploy folder")
    folder = package_deploy_dir(deploy_dir)
    path = folder / name
    if not path.is_file():
        raise ValueError(f"{source!r}: no {name} in {folder}")
    return path


# The merge rules below mirror vllm-omni 0.30.0's vllm_omni/config/stage_config.py (lines 675-789:
# _DEEP_MERGE_KEYS, _deep_merge_stage, _get_recursively_merged_dict, _merge_stage_lists, _merge_platforms,
# _merge_connectors, resolve_deploy_yaml), so that the flat copy reads as the inheriting profile would. Differences
# kept on purpose: this reads YAML with PyYAML, not OmegaConf (no `${...}` interpolation; upstream's deploy profiles
# use none), and an inheritance cycle is refused instead of recursing until Python's stack runs out.

# stage_config.py:675-684: the stage fields merged key by key (a thin overlay keeps the base's other keys);
# every other stage field is replaced whole by the overlay's (compilation_config, runtime, output_connectors, ...).
DEEP_MERGE_KEYS = frozenset(
    {"default_sampling_params", "default_pooling_params", "subtalker_sampling_params", "engine_extras", "engine_args"}
)


def merged_dict(original: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    """stage_config.py:698-716: mappings merge recursively; anything else (lists included) the update replaces."""
    merged = dict(original)
    for key, value in update.items():
        old = merged.get(key)
        merged[key] = merged_dict(old, value) if isinstance(old, dict) and isinstance(value, dict) else value
    return merged


def merged_stage(base: dict[str, Any], overlay: dict[str, Any]) -> dict[str, Any]:
    """stage_config.py:686-695: the overlay wins field by field; DEEP_MERGE_KEYS merge recursively."""
    deep = merged_dict(
        {k: v for k, v in base.items() if k in DEEP_MERGE_KEYS},
        {k: v for k, v in overlay.items() if k in DEEP_MERGE_KEYS},
    )
    return {**base, **overlay, **deep}


def merged_stages(base: list[dict[str, Any]] | None, overlay: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """stage_config.py:719-731: by stage_id; the base's order, then stages only the overlay has."""
    by_id: dict[Any, dict[str, Any]] = {stage["stage_id"]: stage for stage in base or []}
    for stage in overlay or []:
        sid = stage["stage_id"]
        by_id[sid] = merged_stage(by_id[sid], stage) if sid in by_id else stage
    return list(by_id.values())


def merged_platforms(base: dict[str, Any] | None, overlay: dict[str, Any] | None) -> dict[str, Any] | None:
    """stage_config.py:734-750: per platform, the overlay's keys win except `stages`, which merge by stage_id (so a
    platform gets `stages: []` when neither file gives it any, as upstream's resolved dict has)."""
    if not base and not overlay:
        return None
    base, overlay = base or {}, overlay or {}
    merged: dict[str, Any] = {}
    # upstream iterates a set (no stable order); base's platforms, then the overlay's new ones, reads the same
    for platform in [*base, *(p for p in overlay if p not in base)]:
        bp, op = base.get(platform) or {}, overlay.get(platform) or {}
        plat = {**bp, **{k: v for k, v in op.items() if k != "stages"}}
        plat["stages"] = merged_stages(bp.get("stages"), op.get("stages"))
        merged[platform] = plat
    return merged


def resolve_profile(path: Path, chain: tuple[Path, ...] = ()) -> tuple[dict[str, Any], list[Path]]:
    """The profile at `path` with its base_config chain merged in (stage_config.py:763-789), and the files read,
    the given one first."""
    resolved = path.resolve()
    if resolved in chain:
        raise ValueError(f"base_config cycle: {' -> '.join(str(p) for p in (*chain, resolved))}")
    config = yaml.safe_load(path.read_text(encoding="utf-8"))
    if not isinstance(config, dict):
        raise ValueError(f"{path} is not a YAML mapping")
    base_name = config.pop("base_config", None)
    if base_name is None:
        return config, [path]
    base, files = resolve_profile(path.parent / str(base_name), (*chain, resolved))
    # top-level scalars: the overlay wins; connectors, stages and platforms merge (stage_config.py:776-789)
    merged = {**base, **{k: v for k, v in config.items() if k not in ("connectors", "stages", "platforms")}}
    if base.get("connectors") or config.get("connectors"):  # _merge_connectors, stage_config.py:753-760
        merged["connectors"] = merged_dict(base.get("connectors") or {}, config.get("connectors") or {})
    merged["stages"] = merged_stages(base.get("stages"), config.get("stages"))
    platforms = merged_platforms(base.get("platforms"), config.get("platforms"))
    if platforms is not None:
        merged["platforms"] = platforms
    return merged, [path, *files]


def parse_memory(text: str) -> Memory:
    """`0.14` (every stage) or `0:0.12,1:0.10` (per stage_id)."""
    if ":" not in text:
        try:
            return float(text)
        except ValueError:
            raise ValueError(f"--memory wants F or STAGE:F,STAGE:F, got {text!r}") from None
    shares: dict[int, float] = {}
    for part in text.split(","):
        sid, _, share = part.partition(":")
        try:
            shares[int(sid)] = float(share)
        except ValueError:
            raise ValueError(f"--memory wants F or STAGE:F,STAGE:F, got {text!r}") from None
    return shares


def memory_text(memory: Memory) -> str:
    return str(memory) if isinstance(memory, float | int) else ",".join(f"{k}:{v}" for k, v in memory.items())


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


def _set_share(stage: dict[str, Any], share: float) -> None:
    if not 0 < share <= 1:
        raise ValueError(f"--memory is a fraction of the GPU in (0, 1], got {share}")
    stage["gpu_memory_utilization"] = share
    # a stage in the nested layout: vllm-omni lets engine_args win over the flat field (stage_config.py:647-654)
    engine_args = stage.get("engine_args")
    if isinstance(engine_args, dict) and "gpu_memory_utilization" in engine_args:
        engine_args["gpu_memory_utilization"] = share


def bench_profile(
    config: dict[str, Any],
    memory: Memory | None = None,
    frames: int | None = None,
    overrides: list[str] | None = None,
) -> dict[str, Any]:
    """The profile with the benchmark's changes applied (the input is not modified)."""
    out = copy.deepcopy(config)
    stages = out.get("stages")
    if not isinstance(stages, list) or not stages:
        raise ValueError("the profile has no stages")
    if isinstance(memory, dict):
        by_id = {stage.get("stage_id"): stage for stage in stages}
        for sid, share in memory.items():
            if sid not in by_id:
                raise ValueError(f"--memory names stage {sid}; the profile's stage_ids are {sorted(by_id)}")
            _set_share(by_id[sid], share)
    elif memory is not None:
        for stage in stages:
            _set_share(stage, memory)
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


def header(source: str, files: list[Path], changes: list[str]) -> str:
    """The copy's first lines: where it came from and what changed."""
    lines = [f"# Benchmark copy of {source}: {', '.join(changes) or 'unchanged'}"]
    if source != str(files[0]):
        lines.append(f"# source file: {files[0].resolve()}")
    if len(files) > 1:
        lines.append("# base_config flattened (as vllm-omni 0.30 merges it): " + " <- ".join(f.name for f in files))
    return "".join(f"{line}\n" for line in lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("source", help="deploy profile to copy: a path, or vllm-omni:NAME.yaml (vllm_omni's deploy/)")
    p.add_argument("out", help="where to write the copy")
    p.add_argument("--memory", help="gpu_memory_utilization: F for every stage, or STAGE:F,STAGE:F per stage_id")
    p.add_argument("--frames", type=int, help="codec frames every request generates (stage 0 max/min_tokens - 1)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY.PATH=VALUE")
    args = p.parse_args(argv)
    try:
        memory = parse_memory(args.memory) if args.memory is not None else None
        config, files = resolve_profile(source_path(args.source))
        result = bench_profile(config, memory, args.frames, args.overrides)
    except (OSError, ValueError, KeyError, IndexError, yaml.YAMLError) as exc:
        sys.exit(f"bench_profile: {exc}")
    changes = [f"memory={memory_text(memory)}"] if memory is not None else []
    changes += [f"frames={args.frames}"] if args.frames is not None else []
    changes += args.overrides
    text = header(args.source, files, changes) + yaml.safe_dump(result, sort_keys=False)
    Path(args.out).write_text(text, encoding="utf-8")
    print(f"wrote {args.out} ({', '.join(changes) or 'unchanged'})")


if __name__ == "__main__":
    main()
