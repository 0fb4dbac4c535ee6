"""Every cache a start of the sglang engine fills lands under `SPEECH_SGLANG__COMPILE_CACHE_DIR`, read from the source
of the sglang wheel that uv.lock pins (tests/support/locked_wheels.py).

sglang keeps its own caches under the user's home whatever XDG_CACHE_HOME says: `SGLANG_CACHE_DIR` (FlashInfer's
autotune results and other kernels' objects) defaults to `~/.cache/sglang`, and its JIT-built kernels go to
`SGLANG_JIT_CACHE_DIR`, else `~/.cache/sglang/jit`, not under the former. On an H200 the code predictor's graphs
waited 91 s for those kernels on a cold start and 1.7 s with them; a cache directory that missed them made every pod
build them again.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

import pytest

from app.engines.sglang.engine import compile_cache_environment
from tests.support.locked_wheels import Wheel, fetch_locked_wheel

HOME_CACHE = "~/.cache"
# what the service's runtime imports of sglang (its server runtime and kernels); not its diffusion models, benchmarks
# or tests, which a speech start never loads
RUNTIME_FOLDERS = ("srt/", "kernels/")


@pytest.fixture(scope="module")
def home_caches() -> dict[str, str]:
    """Each place under the user's home that the pinned sglang's runtime writes to by default: its variable -> its
    default."""
    return caches_under_the_home(
        fetch_locked_wheel("sglang", "0.5.21", "-cp311-cp311-manylinux_2_34_x86_64.whl", "sglang")
    )


def home_cache_literals(tree: ast.Module) -> Iterator[ast.Constant]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith(HOME_CACHE):
            yield node


def variable_of(tree: ast.Module, literal: ast.Constant) -> str | None:
    """The environment variable whose unset default `literal` is, where the source says so in one of its two ways:
    `NAME = EnvStr(os.path.expanduser("~/.cache/..."))` in a class of variables, or `envs.NAME.get() or "~/.cache/..."`.
    """
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            if isinstance(node.value, ast.Call) and any(sub is literal for sub in ast.walk(node.value)):
                return node.targets[0].id
        if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or) and node.values[-1] is literal:
            first = node.values[0]
            if (
                isinstance(first, ast.Call)
                and isinstance(first.func, ast.Attribute)
                and first.func.attr == "get"
                and isinstance(first.func.value, ast.Attribute)
            ):
                return first.func.value.attr
    return None


def caches_under_the_home(wheel: Wheel) -> dict[str, str]:
    found: dict[str, str] = {}
    unexplained: list[str] = []
    for folder in RUNTIME_FOLDERS:
        for module, source in wheel.sources(folder):
            if HOME_CACHE not in source:  # parsed only where it can matter: the package has a thousand modules
                continue
            tree = wheel.tree(module)
            for literal in home_cache_literals(tree):
                name = variable_of(tree, literal)
                if name is None:
                    unexplained.append(f"{module}:{literal.lineno} {literal.value!r}")
                else:
                    found[name] = literal.value
    assert not unexplained, f"defaults under {HOME_CACHE} with no variable that moves them: {unexplained}"
    return found


def test_sglangs_runtime_caches_under_the_home_are_the_two_the_engine_moves(home_caches: dict[str, str]) -> None:
    # the two the pinned wheel has: a newer pin with another one fails here and names it
    assert home_caches == {"SGLANG_CACHE_DIR": "~/.cache/sglang", "SGLANG_JIT_CACHE_DIR": "~/.cache/sglang/jit"}


def test_every_cache_a_start_fills_is_under_the_compile_cache_directory(home_caches: dict[str, str]) -> None:
    environment = compile_cache_environment("/var/cache/speech")
    for name in home_caches:
        assert environment.get(name, "").startswith("/var/cache/speech/"), f"{name} stays under the home: {environment}"
    # and what torch, Triton and FlashInfer fill, by their own variables
    for name in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "FLASHINFER_WORKSPACE_BASE"):
        assert environment[name].startswith("/var/cache/speech"), name
    # no two variables name the same folder: sglang's JIT builds keep their own (under its cache folder)
    folders = [environment[name] for name in environment if name != "XDG_CACHE_HOME"]
    assert len(folders) == len(set(folders)), folders
