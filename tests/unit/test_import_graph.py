"""The service's import graph, read from the source (ast only: nothing here imports the modules it checks).

- The parts of `app` (each package under it: app.api, app.audio, app.engines, ...; each module at its top:
  app.settings, app.engine_protocol, ...) import one another without a cycle, so that each can be read, tested and
  changed on top of what it imports, never around a loop.
- A private name (`_x`) is used only where it lives: never imported from another part of `app`, nor from an engine's
  folder (app/engines/<engine>/) outside it, nor by the load tool.
- `app.engines.omni.stage_plugins` imports nothing of `app` outside itself: vllm-omni loads it inside its own stage
  processes, which run none of the service.
- `app` imports nothing of the load tool or the tests.
- A module of `app.api` that declares routes imports no other such module: what routes share (the OpenAPI error
  table, the request bodies) lives in modules without routes.

Every import counts: at module level, inside a function (a lazy import is still a dependency) and under
`TYPE_CHECKING`. The graph is walked from the tree, so a part added later is checked like the others.
"""

from __future__ import annotations

import ast
import itertools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
STAGE_PLUGINS = "app.engines.omni.stage_plugins"
ENGINES = "app.engines"


@dataclass(frozen=True)
class Import:
    importer: str  # the importing module, dotted
    path: Path
    line: int
    module: str  # the module imported (for `from m import n`: m.n where that is a module, else m)
    name: str | None  # for `from m import n` where n is not a module: n


@dataclass(frozen=True)
class Attribute:
    """`alias.name` where `alias` is bound to a module of the tree by an import."""

    importer: str
    path: Path
    line: int
    module: str
    name: str


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules_of(top: str) -> dict[str, Path]:
    return {module_name(path): path for path in sorted((ROOT / top).rglob("*.py"))}


def is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def resolve(importer: str, is_package: bool, level: int, module: str | None) -> str:
    """The absolute module a (possibly relative) `from` import names."""
    if not level:
        return module or ""
    base = importer.split(".") if is_package else importer.split(".")[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([module] if module else []))


def read(modules: dict[str, Path], known: set[str]) -> tuple[list[Import], list[Attribute]]:
    """Every import of every module in `modules`; `known`: the modules of the tree (to tell `from package import
    module` from `from module import name`)."""
    imports: list[Import] = []
    attributes: list[Attribute] = []
    for importer, path in modules.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        is_package = path.name == "__init__.py"
        aliases: dict[str, str] = {}  # local name -> module of the tree it is bound to
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    imports.append(Import(importer, path, node.lineno, alias.name, None))
                    if alias.asname:
                        aliases[alias.asname] = alias.name
            elif isinstance(node, ast.ImportFrom):
                base = resolve(importer, is_package, node.level, node.module)
                for alias in node.names:
                    full = f"{base}.{alias.name}"
                    if full in known:
                        imports.append(Import(importer, path, node.lineno, full, None))
                        aliases[alias.asname or alias.name] = full
                    else:
                        imports.append(Import(importer, path, node.lineno, base, alias.name))
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases:
                attributes.append(Attribute(importer, path, node.lineno, aliases[node.value.id], node.attr))
    return imports, attributes


APP = modules_of("app")
LOADTEST = modules_of("loadtest")
KNOWN = set(APP) | set(LOADTEST)
APP_IMPORTS, APP_ATTRIBUTES = read(APP, KNOWN)
LOADTEST_IMPORTS, LOADTEST_ATTRIBUTES = read(LOADTEST, KNOWN)


def part(module: str) -> str:
    """The part of `app` a module belongs to: `app.<package>` for a module inside a package, else the module."""
    pieces = module.split(".")
    if len(pieces) >= 2 and f"app.{pieces[1]}" in APP and APP[f"app.{pieces[1]}"].name == "__init__.py":
        return f"app.{pieces[1]}"
    return ".".join(pieces[:2])


def in_app(module: str) -> bool:
    return module == "app" or module.startswith("app.")


def within(module: str, scope: str) -> bool:
    return module == scope or module.startswith(scope + ".")


def privacy_scope(module: str) -> str:
    """Where a module's private names may be used: inside its engine's folder (app/engines/<engine>/), else inside its
    part of `app`."""
    pieces = module.split(".")
    if within(module, ENGINES) and len(pieces) >= 3 and APP.get(".".join(pieces[:3]), Path()).name == "__init__.py":
        return ".".join(pieces[:3])
    return part(module)


def where(item: Import | Attribute) -> str:
    return f"{item.path.relative_to(ROOT)}:{item.line}"


def part_graph(imports: Iterable[Import]) -> dict[str, dict[str, Import]]:
    """part -> {imported part: the first import that makes the edge}."""
    graph: dict[str, dict[str, Import]] = {part(name): {} for name in APP}
    for item in imports:
        if not in_app(item.module) or item.module == "app":
            continue  # outside the service, or `app` itself (its version), which imports nothing
        source, target = part(item.importer), part(item.module)
        if source != target:
            graph[source].setdefault(target, item)
    return graph


def find_cycles(graph: dict[str, Iterable[str]]) -> list[list[str]]:
    """One cycle (a closed path, first node repeated last) through each strongly connected set of two or more nodes
    (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return [cycle_through(graph, component) for component in components]


def cycle_through(graph: dict[str, Iterable[str]], component: list[str]) -> list[str]:
    """A shortest cycle from the component's first node back to it, inside the component."""
    start, members = component[0], set(component)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for target in sorted(graph.get(node, ())):
                if target == start:
                    return [*paths[node], start]
                if target in members and target not in paths:
                    paths[target] = [*paths[node], target]
                    following.append(target)
        frontier = following
    raise AssertionError(f"no cycle through {component}")  # a strongly connected set always has one


def describe(cycle: list[str], graph: dict[str, dict[str, Import]]) -> str:
    steps = [f"{a} -> {b} ({where(graph[a][b])})" for a, b in itertools.pairwise(cycle)]
    return "cycle: " + "; ".join(steps)


def private_uses(imports: Iterable[Import], attributes: Iterable[Attribute]) -> Iterator[tuple[str, str]]:
    """(where, what) for each private name of `app` used outside its privacy scope."""
    for item in imports:
        if not in_app(item.module):
            continue
        named = [(item.module, item.name)] if item.name else []
        owner, _, last = item.module.rpartition(".")
        if is_private(last):  # a private module is a private name of its package
            named.append((owner, last))
        for module, name in named:
            if is_private(name) and not within(item.importer, privacy_scope(module)):
                yield where(item), f"{item.importer} imports {module}.{name}"
    for attribute in attributes:
        if in_app(attribute.module) and is_private(attribute.name):
            if not within(attribute.importer, privacy_scope(attribute.module)):
                yield where(attribute), f"{attribute.importer} uses {attribute.module}.{attribute.name}"


# -- the checks ------------------------------------------------------------------------------------------------------


def test_the_tree_is_read() -> None:
    """The walk sees the parts and the imports it is about (an empty graph would pass everything below)."""
    graph = part_graph(APP_IMPORTS)
    assert {"app.api", "app.audio", "app.engines", "app.text", "app.settings", "app.engine_protocol"} <= set(graph)
    assert "app.engine_protocol" in graph["app.engines"]  # the factory's module-level import
    assert "app.audio" in graph["app.engines"]  # omni_as_served's lazy one
    assert privacy_scope("app.engines.omni.stage_plugins.code2wav_policy") == "app.engines.omni"
    assert privacy_scope("app.engines.aligned") == "app.engines" == part("app.engines.omni.engine")
    assert any(item.importer.startswith(STAGE_PLUGINS) for item in APP_IMPORTS)
    assert any(in_app(item.module) for item in LOADTEST_IMPORTS)


def test_the_parts_of_app_import_one_another_without_a_cycle() -> None:
    graph = part_graph(APP_IMPORTS)
    cycles = find_cycles(graph)
    assert not cycles, "\n".join(describe(cycle, graph) for cycle in cycles)


def test_no_private_name_is_used_outside_its_part_or_its_engine() -> None:
    found = sorted(private_uses(APP_IMPORTS, APP_ATTRIBUTES))
    assert not found, "\n".join(f"{at}: {what}" for at, what in found)


def test_the_load_tool_uses_no_private_name_of_the_service() -> None:
    found = [
        (where(item), f"{item.importer} imports {item.module}.{item.name}")
        for item in LOADTEST_IMPORTS
        if in_app(item.module) and (is_private(item.name or "") or any(map(is_private, item.module.split("."))))
    ]
    found += [
        (where(a), f"{a.importer} uses {a.module}.{a.name}")
        for a in LOADTEST_ATTRIBUTES
        if in_app(a.module) and is_private(a.name)
    ]
    assert not found, "\n".join(f"{at}: {what}" for at, what in sorted(found))


def test_the_stage_plugins_import_nothing_of_the_service_outside_themselves() -> None:
    found = [
        f"{where(item)}: {item.importer} imports {item.module}"
        for item in APP_IMPORTS
        if within(item.importer, STAGE_PLUGINS) and in_app(item.module) and not within(item.module, STAGE_PLUGINS)
    ]
    assert not found, "\n".join(found)


TRANSPORT = ("app.api", "fastapi", "starlette", "uvicorn", "websockets")


@pytest.mark.parametrize("scope", ["app.speech", "app.engines", "app.engine_protocol"])
def test_the_speech_core_and_the_engines_know_no_transport(scope: str) -> None:
    """What a request is, and the engines, serve HTTP and the WebSocket alike: neither imports a web framework nor
    the wire formats of `app.api`."""
    found = [
        f"{where(item)}: {item.importer} imports {item.module}"
        for item in APP_IMPORTS
        if within(item.importer, scope) and any(within(item.module, wire) for wire in TRANSPORT)
    ]
    assert not found, "\n".join(found)


def test_the_service_imports_neither_the_load_tool_nor_the_tests() -> None:
    found = [
        f"{where(item)}: {item.importer} imports {item.module}"
        for item in APP_IMPORTS
        if within(item.module, "loadtest") or within(item.module, "tests")
    ]
    assert not found, "\n".join(found)


def route_modules(modules: dict[str, Path]) -> set[str]:
    """The modules that declare routes (an `APIRouter(...)` in their source)."""
    return {name for name, path in modules.items() if "APIRouter(" in path.read_text(encoding="utf-8")}


def route_module_imports(imports: Iterable[Import], routes: set[str]) -> list[str]:
    return [
        f"{where(item)}: {item.importer} imports {item.module}"
        for item in imports
        if item.importer in routes and item.module in routes and item.module != item.importer
    ]


def test_no_route_module_imports_another() -> None:
    routes = route_modules(APP)
    assert {"app.api.speech", "app.api.docs", "app.api.voices", "app.api.meta"} <= routes
    found = route_module_imports(APP_IMPORTS, routes)
    assert not found, "\n".join(found)


# -- the checks can fail: each on a made-up tree ---------------------------------------------------------------------


def made_up(importer: str, module: str, name: str | None = None) -> Import:
    return Import(importer, ROOT / "app" / "made_up.py", 1, module, name)


def test_a_cycle_through_three_parts_is_found_and_named() -> None:
    imports = [
        made_up("app.settings", "app.audio.fetch", "FetchPolicy"),
        made_up("app.audio.reference", "app.engines.omni.requests", "x"),  # closes settings -> audio -> engines ...
        made_up("app.engines.omni.engine", "app.settings", "MAX_INPUT_CHARS"),
    ]
    graph = part_graph(imports)
    cycles = find_cycles(graph)
    assert cycles == [["app.audio", "app.engines", "app.settings", "app.audio"]]
    assert "app.engines -> app.settings (app/made_up.py:1)" in describe(cycles[0], graph)
    assert find_cycles(part_graph(imports[:2])) == []


@pytest.mark.parametrize(
    ("importer", "module", "name", "allowed"),
    [
        ("app.engines.aligned", "app.engines.omni.engine", "_default_omni_factory", False),  # outside the engine
        ("app.engines.embedded.engine", "app.engines.omni.requests", "_x", False),  # another engine
        ("app.api.speech", "app.settings", "_deprecated", False),  # another part
        ("app.engines.omni.engine", "app.engines.omni.requests", "_x", True),  # inside the engine
        ("app.engines.omni.engine", "app.engines.aligned", "_x", True),  # the engine is inside app.engines
        ("app.api.speech", "app.api.errors", "_x", True),  # inside its part
        ("app.api.speech", "app.engines.omni._hidden", None, False),  # a private module
        ("app.api.speech", "app.settings", "__version__", True),  # a dunder is not private
    ],
)
def test_private_names_are_told_apart(importer: str, module: str, name: str | None, allowed: bool) -> None:
    assert (not list(private_uses([made_up(importer, module, name)], []))) == allowed
    if name:
        attribute = Attribute(importer, ROOT / "app" / "made_up.py", 1, module, name)
        assert (not list(private_uses([], [attribute]))) == allowed


def test_a_route_module_importing_another_is_found() -> None:
    routes = {"app.api.speech", "app.api.docs"}
    found = route_module_imports(
        [made_up("app.api.speech", "app.api.docs", "error_responses"), made_up("app.api.speech", "app.api.errors")],
        routes,
    )
    assert found == ["app/made_up.py:1: app.api.speech imports app.api.docs"]


def test_relative_imports_are_resolved() -> None:
    assert resolve("app.engines.omni.engine", False, 1, "requests") == "app.engines.omni.requests"
    assert resolve("app.engines.omni", True, 1, "engine") == "app.engines.omni.engine"
    assert resolve("app.engines.omni.engine", False, 2, None) == "app.engines"
