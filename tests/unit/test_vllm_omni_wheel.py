"""What the omni engine hands AsyncOmni beyond its model, checked against the vllm-omni wheel that uv.lock pins, read
from its source (tests/support/locked_wheels.py): the wheel is never imported here (it needs torch and vLLM)."""

from __future__ import annotations

import ast

import pytest

from app.settings import OmniSettings
from tests.support.locked_wheels import FunctionNode, Wheel, class_def, fetch_locked_wheel, function_def


@pytest.fixture(scope="module")
def wheel() -> Wheel:
    return fetch_locked_wheel("vllm-omni", "0.30.0", "-py3-none-any.whl", "vllm_omni")


def keys_taken(function: FunctionNode, how: str) -> set[str]:
    """The literal keys `function` reads from its `kwargs` with `kwargs.<how>("key", ...)`."""
    return {
        node.args[0].value
        for node in ast.walk(function)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == how
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "kwargs"
        and node.args
        and isinstance(node.args[0], ast.Constant)
    }


def field_default(tree: ast.Module, cls: str, name: str) -> object:
    (field,) = [
        node
        for node in class_def(tree, cls).body
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == name
    ]
    assert field.value is not None
    return ast.literal_eval(field.value)


def test_parallel_stage_init_reaches_the_engine_that_reads_it_with_the_same_default(wheel: Wheel) -> None:
    # AsyncOmni's base passes every keyword it does not take itself on to the engine it creates...
    base = function_def(class_def(wheel.tree("entrypoints/omni_base.py"), "OmniBase"), "__init__")
    assert "parallel_stage_init" not in keys_taken(base, "pop")
    # ...and the engine reads this one
    engine = function_def(class_def(wheel.tree("engine/omni_engine_base.py"), "OmniEngineBase"), "__init__")
    assert "parallel_stage_init" in keys_taken(engine, "get")
    # the service's default is vllm-omni's: off, the stages one by one
    assert field_default(wheel.tree("engine/arg_utils.py"), "OrchestratorArgs", "parallel_stage_init") is False
    assert OmniSettings().parallel_stage_init is False
