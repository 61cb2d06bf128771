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

CLUSTER_FLOORS = ("cluster", "cluster.servers", "cluster.commands")
"""The floors inside ``cluster``, lowest first: the Ray wiring and the client at the top of the
package, the servers (MCP, memory viewer), the ``omray`` commands. A floor imports only floors below
it or itself."""

STDLIB_HOT_PATHS = (
    "cluster.commands.entry",
    "cluster.commands.hook_fast",
    "cluster.commands.hook_notices",
    "cluster.servers.mcp_server",
    "cluster.servers.mcp_stdio",
    "cluster.settings_cache",
    "persistence.files.file_tail",
)
"""What an agent waits on (the ``omray`` entry point, a hook call, the MCP server's stdio start): their
module-level imports load no project module outside this set and ``cluster.project_dirs``."""


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


def _floor(module: str) -> str:
    return max((f for f in CLUSTER_FLOORS if module == f or module.startswith(f + ".")), key=len)


def test_the_ray_wiring_never_imports_the_servers_or_the_commands() -> None:
    """Inside ``cluster`` every arrow points down too: wiring < servers < commands."""
    upward = sorted(
        (module, target)
        for module, targets in _import_graph().items()
        if module.startswith("cluster")
        for target in targets
        if target.startswith("cluster")
        and CLUSTER_FLOORS.index(_floor(target)) > CLUSTER_FLOORS.index(_floor(module))
    )
    assert upward == []


def test_every_cluster_module_is_on_a_floor() -> None:
    subpackages = {p.parent.name for p in (REPO / "cluster").glob("*/__init__.py")}
    assert {f"cluster.{name}" for name in subpackages} == set(CLUSTER_FLOORS[1:])


def _top_level_imports(module: str) -> set[str]:
    """Modules ``module`` imports when it loads (imports inside functions and
    ``if TYPE_CHECKING`` blocks do not run then)."""
    path = REPO / Path(*module.split(".")).with_suffix(".py")
    if not path.exists():
        path = REPO / Path(*module.split(".")) / "__init__.py"
    found: set[str] = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


def test_the_hot_paths_load_the_standard_library_only() -> None:
    """A hook call and ``omray mcp``'s stdio start import no third-party package and no omray module
    beyond the stdlib-only ones (``tests/unit/live`` runs the Stop hook and checks ``sys.modules``)."""
    import sys

    allowed = {
        *STDLIB_HOT_PATHS,
        "cluster",
        "cluster.project_dirs",
        "cluster.commands",
        "cluster.servers",
        "persistence",
        "persistence.files",
    }
    for module in [*STDLIB_HOT_PATHS, "cluster.project_dirs"]:
        for name in _top_level_imports(module):
            assert name in allowed or name.split(".")[0] in sys.stdlib_module_names, (module, name)
    for package in ("cluster", "cluster.commands", "cluster.servers", "persistence", "persistence.files"):
        assert _top_level_imports(package) <= {"__future__", "typing"}, package


MODEL_CODE = ("actors.models", "openai", "onnxruntime", "tokenizers", "httpx")
"""Modules that run or reach a model: the embedders, the reranker, the chat clients."""

MODEL_CALLS = ("embed", "rerank")
"""Methods of the ``Embedder`` and ``Reranker`` protocols (``protocol.semantic``)."""


def _imports_and_calls(path: Path) -> tuple[set[str], set[str], set[str]]:
    """Modules ``path`` imports (anywhere in its body), methods it calls by attribute, names it imports."""
    imported: set[str] = set()
    called: set[str] = set()
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            imported |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            imported.add(node.module)
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            called.add(node.func.attr)
    return imported, called, names


def _is_model_code(module: str) -> bool:
    return any(module == banned or module.startswith(banned + ".") for banned in MODEL_CODE)


def test_the_storage_floor_never_reaches_a_model() -> None:
    """``persistence/`` holds SQLite and the index files: no module of it imports model code, names
    the embedder or reranker protocols, or calls ``embed``/``rerank``. Embedding the query or a batch
    and reranking are the pipelines' (``actors.read.retrieval``, ``actors.indexer.sync``)."""
    found = []
    for path in sorted((REPO / "persistence").rglob("*.py")):
        imported, called, names = _imports_and_calls(path)
        where = str(path.relative_to(REPO))
        found += [(where, module) for module in sorted(imported) if _is_model_code(module)]
        found += [(where, f"{name}()") for name in sorted(called & set(MODEL_CALLS))]
        found += [(where, name) for name in sorted(names & {"Embedder", "Reranker"})]
    assert found == []


PIPELINES = {
    "actors.read.retrieval": ("actors.read.fusion", "actors.read.ranking"),
    "actors.indexer.sync": ("actors.indexer.plan",),
}
"""Each model-calling pipeline and its pure rules, which take what they read as arguments."""


def test_the_search_and_indexing_pipelines_live_with_their_actors() -> None:
    """The hybrid search pipeline and the indexing core are in ``actors/``, on the index of
    ``persistence/``; their pure rules import no model code and call no model."""
    graph = _import_graph()
    for pipeline, rules in PIPELINES.items():
        assert "persistence.semantic" in graph[pipeline] or any(
            target.startswith("persistence.semantic.") for target in graph[pipeline]
        ), pipeline
        for rule in rules:
            assert rule in graph[pipeline] or any(rule in graph[other] for other in graph[pipeline]), rule
            path = REPO / Path(*rule.split(".")).with_suffix(".py")
            imported, called, _ = _imports_and_calls(path)
            assert not [module for module in imported if _is_model_code(module)], rule
            assert not called & set(MODEL_CALLS), rule


def test_the_model_protocols_are_defined_once() -> None:
    """``Embedder`` and ``Reranker`` (and their error classes) are ``protocol.semantic``'s alone."""
    names = {"Embedder", "Reranker", "EmbeddingError", "RerankError", "SearchModelError"}
    defined = sorted(
        (str(path.relative_to(REPO)), node.name)
        for pkg in PACKAGES
        for path in (REPO / pkg).rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.ClassDef) and node.name in names
    )
    assert defined == sorted(("protocol/semantic.py", name) for name in names)


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


def test_no_module_is_long_without_a_reason() -> None:
    """Outside tests: none over 750 lines; one over 600 says why in a ``Length:`` line of its docstring."""
    for pkg in PACKAGES:
        for path in (REPO / pkg).rglob("*.py"):
            text = path.read_text(encoding="utf-8")
            lines = text.count("\n")
            assert lines <= 750, (str(path.relative_to(REPO)), lines)
            if lines > 600:
                docstring = ast.get_docstring(ast.parse(text)) or ""
                assert "Length:" in docstring, (str(path.relative_to(REPO)), lines)
