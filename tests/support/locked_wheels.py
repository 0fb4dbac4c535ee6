"""A wheel exactly as uv.lock pins it, for tests that read a GPU package's own source without installing it: fetched
once per machine (kept under .pytest_cache/, git-ignored), its sha256 checked every run, its modules parsed with `ast`
and never imported (they need torch and a GPU)."""

from __future__ import annotations

import ast
import hashlib
import os
import time
import tomllib
import warnings
import zipfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]
WHEEL_CACHE = ROOT / ".pytest_cache" / "wheels"
DOWNLOAD_ATTEMPTS = 4

FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef


class Wheel:
    """A wheel's Python modules, by their path under its package folder (`package_dir`), parsed on first use."""

    def __init__(self, path: Path, package_dir: str) -> None:
        self.path = path
        self.package_dir = package_dir.rstrip("/") + "/"
        self._trees: dict[str, ast.Module] = {}

    def tree(self, module: str) -> ast.Module:
        if module not in self._trees:
            with warnings.catch_warnings():  # the package's own invalid escapes are not this test's to report
                warnings.simplefilter("ignore")
                self._trees[module] = ast.parse(self.source(module), filename=self.package_dir + module)
        return self._trees[module]

    def source(self, module: str) -> str:
        with zipfile.ZipFile(self.path) as archive:
            return archive.read(self.package_dir + module).decode("utf-8")

    def sources(self, under: str = "") -> Iterator[tuple[str, str]]:
        """(module, its source) for the Python modules under `under` (a folder of the package, e.g. "srt/")."""
        prefix = self.package_dir + under
        with zipfile.ZipFile(self.path) as archive:
            for name in sorted(archive.namelist()):
                if name.startswith(prefix) and name.endswith(".py"):
                    yield name[len(self.package_dir) :], archive.read(name).decode("utf-8")

    def has(self, module: str) -> bool:
        with zipfile.ZipFile(self.path) as archive:
            return self.package_dir + module in archive.namelist()


def locked_wheel(package: str, version: str, file_suffix: str) -> tuple[str, str]:
    """The url and sha256 of the one wheel of `package` in uv.lock whose file name ends with `file_suffix`."""
    lock = tomllib.loads((ROOT / "uv.lock").read_text(encoding="utf-8"))
    packages = [entry for entry in lock["package"] if entry["name"] == package]
    assert len(packages) == 1, f"uv.lock should lock one {package}, not {len(packages)}"
    (entry,) = packages
    assert entry["version"] == version, f"the tests mirror {package} {version}; uv.lock has {entry['version']}"
    wheels = [wheel for wheel in entry["wheels"] if wheel["url"].endswith(file_suffix)]
    assert len(wheels) == 1, f"uv.lock should list one {package} wheel ending {file_suffix}, not {len(wheels)}"
    algorithm, _, digest = wheels[0]["hash"].partition(":")
    assert algorithm == "sha256", wheels[0]["hash"]
    return wheels[0]["url"], digest


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def download(url: str, target: Path) -> None:
    """`url` into `target` (whole or not at all), retried on network errors and on the server's own (5xx, 429)."""
    partial = target.with_name(f"{target.name}.{os.getpid()}.part")
    for attempt in range(1, DOWNLOAD_ATTEMPTS + 1):
        try:
            with httpx.stream("GET", url, follow_redirects=True, timeout=60.0) as response:
                response.raise_for_status()
                with partial.open("wb") as out:
                    for block in response.iter_bytes(1 << 20):
                        out.write(block)
            partial.replace(target)
            return
        except (httpx.TransportError, httpx.HTTPStatusError) as exc:
            partial.unlink(missing_ok=True)
            transient = isinstance(exc, httpx.TransportError) or exc.response.status_code in (429, 500, 502, 503, 504)
            if not transient or attempt == DOWNLOAD_ATTEMPTS:
                raise
            time.sleep(2**attempt)


def fetch_locked_wheel(package: str, version: str, file_suffix: str, package_dir: str) -> Wheel:
    """The wheel uv.lock pins (see `locked_wheel`), downloaded unless already here with its sha256."""
    url, sha256 = locked_wheel(package, version, file_suffix)
    WHEEL_CACHE.mkdir(parents=True, exist_ok=True)
    path = WHEEL_CACHE / url.rsplit("/", 1)[-1]
    if not (path.exists() and sha256_of(path) == sha256):
        download(url, path)
        actual = sha256_of(path)
        if actual != sha256:
            path.unlink()
            pytest.fail(f"{url} has sha256 {actual}, but uv.lock pins {sha256}")
    return Wheel(path, package_dir)


def class_def(tree: ast.Module, name: str) -> ast.ClassDef:
    found = [node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == name]
    assert found, f"the wheel defines no class {name}"
    return found[0]


def function_def(scope: ast.Module | ast.ClassDef, name: str) -> FunctionNode:
    found = [node for node in scope.body if isinstance(node, FunctionNode) and node.name == name]
    assert found, f"the wheel defines no function {name} in {getattr(scope, 'name', 'the module')}"
    return found[-1]


def literal_constants(tree: ast.Module) -> dict[str, object]:
    """A module's top-level `NAME = literal` assignments."""
    found: dict[str, object] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                found[node.targets[0].id] = ast.literal_eval(node.value)
            except ValueError:
                continue
    return found
