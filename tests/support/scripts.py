"""The repository's deploy/gpu scripts as modules: they run as scripts, not as a package, and tests call their
functions."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

GPU_SCRIPTS = Path(__file__).resolve().parents[2] / "deploy" / "gpu"


def gpu_script(name: str) -> ModuleType:
    """deploy/gpu/`name`.py loaded as the module `name`."""
    spec = importlib.util.spec_from_file_location(name, GPU_SCRIPTS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # as an import would: dataclasses look their module up there
    spec.loader.exec_module(module)
    return module
