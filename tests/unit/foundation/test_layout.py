"""The code layout of DESIGN.md: one folder per actor role, no import circle, import bans."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
PACKAGES = ("protocol", "persistence", "actors", "cluster", "testkit", "bench")

MAY_IMPORT = {
    "protocol": {"protocol"},
    "persistence": {"protocol", "persistence"},
    "actors": {"protocol", "persistence", "actors"},
    "cluster": {"protocol", "persistence", "actors", "cluster"},
    "testkit": {"protocol", "persistence", "testkit"},
    "bench": {"protocol", "persistence", "actors", "cluster", "testkit", "bench"},
}
"""Which rooms each room may import (DESIGN.md's layout; ``testkit`` and ``bench`` never ship)."""


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _import_graph() -> dict[str, set[str]]:
    """Module -> project modules it imports anywhere in its body (lazy imports count too)."""
    files = {_module_name(path): path for pkg in PACKAGES for path in (REPO / pkg).rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
            targets |= {name for name in names if name in files and name != module}
        graph[module] = targets
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for target in sorted(graph[node]):
            if state.get(target) == 1:
                return [*stack[stack.index(target) :], target]
            if target not in state and (found := visit(target)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_no_import_circle_between_project_modules() -> None:
    graph = _import_graph()
    # Packages re-export their modules: a package importing its own children is not a circle.
    for module in graph:
        graph[module] = {t for t in graph[module] if not t.startswith(module + ".")}
    assert _cycle(graph) is None


def test_no_room_imports_a_room_above_it() -> None:
    """Every arrow points down the layout: no production room imports test support or benchmarks."""
    upward = sorted(
        (module, target)
        for module, targets in _import_graph().items()
        for target in targets
        if target.split(".")[0] not in MAY_IMPORT[module.split(".")[0]]
    )
    assert upward == []


def test_the_rooms_are_the_packages() -> None:
    assert set(MAY_IMPORT) == set(PACKAGES)


def test_each_actor_of_the_design_card_has_its_folder() -> None:
    from actors.indexer.actor import IndexerActor
    from actors.observer.actor import ObserverActor
    from actors.queue.actor import QueueActor
    from actors.reflector.actor import ReflectorActor
    from actors.store.actor import StoreActor

    for cls, folder in [
        (QueueActor, "queue"),
        (ObserverActor, "observer"),
        (ReflectorActor, "reflector"),
        (IndexerActor, "indexer"),
        (StoreActor, "store"),
    ]:
        assert cls.__module__ == f"actors.{folder}.actor"


def test_only_cluster_imports_ray_and_only_persistence_imports_sqlalchemy() -> None:
    for pkg in ("protocol", "persistence", "actors"):
        for path in (REPO / pkg).rglob("*.py"):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                names = []
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module:
                    names = [node.module]
                roots = {name.split(".")[0] for name in names}
                assert "ray" not in roots, path
                if pkg != "persistence":
                    assert "sqlalchemy" not in roots, path


def test_unit_tests_mirror_the_source_tree() -> None:
    """``tests/unit/<room>/<package>`` tests ``<room>/<package>``: every test folder names a source
    package or module (``tests/unit/cluster/watch`` tests ``cluster/watch.py``); ``foundation`` holds
    the tests of the layout itself."""
    unit = REPO / "tests" / "unit"
    strays = sorted(
        str(folder.relative_to(unit))
        for folder in unit.rglob("*")
        if folder.is_dir()
        and folder.name != "__pycache__"
        and folder.relative_to(unit).parts[0] != "foundation"
        and not (REPO / folder.relative_to(unit)).is_dir()
        and not (REPO / folder.relative_to(unit)).with_suffix(".py").is_file()
    )
    assert strays == []
